"""Studies and benchmarks; each package is an entry point (`python -m experiments.X`).

Importing this package (which every entry point does before any JAX
computation) sets `--xla_cpu_enable_concurrency_optimized_scheduler=false`.
On a CPU, batched LAPACK calls (SVD, solve, eigh) split their batch over
XLA's intra-op thread pool and wait for it; when a program runs two of them
at once and the pool has only as many threads as calls (a 2-core machine),
every thread waits and the run stalls forever at 0% CPU. The memory-ordered
scheduler keeps such calls apart (a reproducer with an SVD, a solve and an
eigh in one jitted function hung in 4 of 9 runs without the flag, 0 of 9
with it).
"""

import os

CPU_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"
if CPU_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {CPU_FLAG}".strip()
