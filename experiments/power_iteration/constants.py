"""The power-iteration study's names and thresholds, shared by its summary and its readers (no computation)."""

# The phases of a products run, in the order they happen, and how the report names them.
PHASE_LABELS = {
    "untrained": "untrained, bidirectional",
    "init": "untrained, causal",
    "trained": "causal, trained",
}
# How the report names a trained phase whose accuracy does not beat the mode-of-context baseline.
BRIEFLY_TRAINED = "causal, briefly trained"
# Protocol (SCIENCE.md, "Intervals over independent units"): a verdict needs at least this many
# seeds; with fewer the row is not measured.
MIN_UNITS = 10
# A delta(P_l) at most this many times the Dobrushin rounding allowance (the run's `tolerance`)
# is not resolved. Derivation: rounding moves a resolved delta by at most 1 / RESOLVED_FACTOR
# relative, so a log-rate log(delta_l / delta_(l-1)) by at most 0.02.
RESOLVED_FACTOR = 100.0
# The causal check's allowance for 1 - pi_l(first token), in units of T eps. Derivation:
# `stationary_distribution` stops at ||pi A - pi||_1 <= 4 sqrt(T) eps, which leaves
# 1 - pi_l(first) <= 4 sqrt(T) eps / (1 - |lambda_2|): within 1e3 T eps for |lambda_2| up to
# 1 - 0.02 at T = 24, while a wrong Perron vector gives a gap of order 1/T.
CAUSAL_FACTOR = 1e3
# The resolution of a measured log-rate log(delta(P_l) / delta(P_(l-1))): rounding moves each
# resolved delta by at most 1 / RESOLVED_FACTOR relative (above), so a log-rate by at most this.
LOG_RATE_RESOLUTION = 2.0 / RESOLVED_FACTOR
# |lambda_2| of the exactly uniform causal chain U (u_ij = 1/i, j <= i): its diagonal's largest
# entry below the first, 1/2 (a lower-triangular matrix's eigenvalues are its diagonal). The rate
# of the competing explanation "every layer contracts as U does, whatever its own |lambda_2|".
UNIFORM_CAUSAL_SLEM = 0.5
# The slope of log-rate on log |lambda_2| is reported only where log |lambda_2| varies over the
# window by more (rms over its layers) than a log-rate can be resolved (LOG_RATE_RESOLUTION).
SLOPE_SPREAD = LOG_RATE_RESOLUTION
