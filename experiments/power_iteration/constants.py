"""The power-iteration study's names and thresholds, shared by its summary and its readers (no computation)."""

# The phases of a products run, in the order they happen, and how the report names them.
PHASE_LABELS = {
    "untrained": "untrained, bidirectional",
    "init": "causal, at initialisation",
    "trained": "causal, trained",
}
# The product prediction needs a non-degenerate regime: the mean normalised entropy
# of every layer's head-averaged map inside this interval (0: one-hot, 1: uniform).
ENTROPY_RANGE = (0.02, 0.98)
# A delta(P_l) or a product of |lambda_2| at most this many times the Dobrushin
# rounding allowance (the run's `tolerance`) is not resolved.
RESOLVED_FACTOR = 100.0
# The causal check's allowance for 1 - pi_l(first token), in units of T eps.
CAUSAL_FACTOR = 1e3
