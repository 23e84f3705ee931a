"""The width study's names and thresholds, shared by its summary and its consumers (no computation)."""

TAIL = 3  # lengths in a tail fit (the largest ones, where the leading order applies)
MIN_UNITS = 10  # seeds a verdict needs (the protocol)
# Slopes of the two alternatives each rule decides between, and their midpoints:
# sigma_2 / sigma_1 against n: a gap opening like a bulk of radius n^(-1/2) (-1/2) or none (0);
GAP_MIDPOINT = -0.25
# the output's share of its input's stable rank against n: bounded (-1) or kept (0).
SHARE_MIDPOINT = -0.5
# The bulk edge's slope in n, 2 sqrt((e^v - 1) / n): v fixed, or v = 1 / d^2 with d proportional to n.
SIGMA_2_SLOPES = {"markov": -0.5, "key_query": -0.5, "key_query_xavier": -1.5}
