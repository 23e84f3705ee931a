"""The rank-collapse study's names and thresholds, shared by its run code and its readers (no computation)."""

from attnjax.analysis.collapse import FLOAT64_FLOOR

# The sweeps of the study, in the order they run (each a `<sweep>_sweep` block of the config).
SWEEPS = ("init", "scale", "mask", "local", "float32", "noci", "train")
# Relative residuals at or below this are float64 rounding (attnjax.analysis.collapse).
FLOOR = FLOAT64_FLOOR
# No verdict reads a point whose relative residual is at or below this (resolution: 1000 x float64
# rounding, so a log-residual carries at most ~1e-3 of rounding noise).
RESOLVED = 1e-13
# The eps-scaling identity's input scales (`scaling.py`), one decade apart: the decade [1e-2, 1e-1]
# holds the next-order term at its largest, [1e-3, 1e-2] is the top decade of Dong's local window.
EPS = (1e-1, 1e-2, 1e-3)
# Dong's local window: pairs with RESOLVED < r_(l-1) < LOCAL_WINDOW. Derivation: the next-order term of
# res = c eps^3 (1 + a eps + ...) moves the local slope by O(eps); at the window's top decade,
# [1e-3, 1e-2] of EPS, the identity measures that shift on the actual layers (a sanity row checks it is
# below the exponent's resolution); one decade higher it is ~10x larger (saturation).
LOCAL_WINDOW = 1e-2
# Initialisation-sized residuals: r_(l-1) >= this is the decade [1e-1, 1] above the identity's largest
# eps, where the next-order (saturation) term is largest; its slope is reported beside the exponent.
SATURATED = 1e-1
