"""Studies and benchmarks; each module is an entry point (`python -m experiments.X`).

Importing this package (which every entry point does before any JAX
computation) turns off XLA's multi-threaded Eigen on the CPU: its intra-op
thread pool can wedge on vmapped programs, leaving a run waiting forever at
0% CPU. Single-threaded Eigen costs a little matmul speed; XLA still runs
independent operations in parallel.
"""
import os

_NO_EIGEN_THREADS = "--xla_cpu_multi_thread_eigen=false"
if _NO_EIGEN_THREADS not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_NO_EIGEN_THREADS}".strip()
