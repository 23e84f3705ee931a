"""The width study's names and thresholds, shared by its summary and its consumers (no computation)."""

TAIL = 3  # lengths in a tail fit (the largest ones, where the leading order applies)
MIN_UNITS = 10  # seeds a verdict needs (the protocol)
# The bulk edge's slope in n, 2 sqrt((e^v - 1) / n): v fixed, or v = 1 / d^2 with d proportional to n.
# It is also the slope of sigma_2 / sigma_1 when a gap opens (sigma_1 -> 1); with no gap it is 0, and the gap
# row decides at half of it, the midpoint of the two alternatives.
SIGMA_2_SLOPES = {"markov": -0.5, "key_query": -0.5, "key_query_xavier": -1.5}
# The output's share of its input's stable rank against n: bounded (-1) or kept (0); their midpoint.
SHARE_MIDPOINT = -0.5
