"""Studies and benchmarks; each module is an entry point (`python -m experiments.X`)."""
