"""The softmax-scaling study's names: the two scalings of the logits and the saturation statistics."""

SCALINGS = ("unscaled", "scaled")
STATS = ("max_weight", "entropy", "jacobian_spectral", "jacobian_frobenius")
