"""Benchmarks: `suite.py` runs the sections (`attention.py`, `compile.py`, `linear.py`,
`analysis.py`, `training.py`), with timing helpers in `util.py` and tables in `report.py`."""
