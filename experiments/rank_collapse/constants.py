"""The rank-collapse study's names and thresholds, shared by its run code and its readers (no computation)."""

from attnjax.analysis.collapse import FLOAT64_FLOOR

# The sweeps of the study, in the order they run (each a `<sweep>_sweep` block of the config).
SWEEPS = ("init", "scale", "mask", "noci", "train")
# Relative residuals at or below this are float64 rounding.
FLOOR = FLOAT64_FLOOR
# No verdict reads a point whose relative residual is at or below this (1000 x rounding).
RESOLVED = 1e-13
