"""The softmax-scaling study's names: the two scalings of the logits and the saturation statistics."""

SCALINGS = ("unscaled", "scaled")
STATS = ("max_weight", "entropy", "jacobian_spectral", "jacobian_frobenius")
# Protocol (SCIENCE.md, "Intervals over independent units"): a verdict needs at least this many
# seeds; with fewer, the row is not measured.
MIN_UNITS = 10
