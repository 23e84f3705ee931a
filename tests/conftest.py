"""Test-wide JAX settings.

* float64 is enabled so that references and analysis can run in double
  precision; tests state the dtype of every array they make.
* Strict rank promotion: silent broadcasting between arrays of different
  rank raises, so shape bugs surface in tests.
* One CPU device. Batched LAPACK calls (eigvalsh, svd) run several times
  slower when XLA splits the host into fake devices, so the data-parallel
  tests, which need eight, run in their own process
  (`tests/attnjax/test_multi_device.py` runs `tests/attnjax/multi_device/` with
  `ATTNJAX_TEST_DEVICES=8`, which this file turns into the device count).
* XLA's concurrency-optimised CPU scheduler off: two batched LAPACK calls
  running at once can deadlock a 2-thread pool (see experiments/__init__.py).
* LLVM's backend optimisation level 0: the suite compiles hundreds of
  programs that each run for milliseconds, and LLVM's optimisation passes are
  most of their compile time. XLA's own passes (fusion, layout, algebraic
  simplification) still run, so the tests exercise the programs users get,
  only with less optimised machine code; the benchmark runs at the default level.
* XLA's CPU fusion emitters off (`--xla_cpu_use_fusion_emitters=false`): a
  code-generation setting, like the level above. Fused loops are emitted by
  XLA's elemental IR emitter, its other supported CPU code path, instead of the
  MLIR fusion emitters; on two nn test files this cut the run by a third. The
  programs compute the same operations; the benchmark uses XLA's default.
* With pytest-xdist (`-n auto --dist loadfile`, as the README's test command
  runs), each test file goes to one worker, so its module-scoped fixtures are
  built once.
* Hypothesis is derandomised (a profile loaded here, before any test module
  makes its `settings`): the same examples in every run, no example database.
* A scratch directory for one run, shared by the workers and removed at the
  end: a persistent compilation cache (programs that several tests compile
  are compiled once) and the studies' test runs, each run once per run.
* Tiers: `-m "not slow"` is the quick tier (see `SLOW_FILES` below and the
  tests marked `slow`); the full suite runs everything.
* `-n auto` starts one worker per core, and the slowest files are dealt
  first (`SLOWEST_FIRST`). OpenMP pools (torch, the oracle; NumPy's BLAS) get
  one thread per worker (`OMP_NUM_THREADS=1` unless set): with a worker per
  core, more threads only contend (the Gemma 3 and Hugging Face oracle files,
  run alone: 61 CPU-seconds with the default pools, 57 with one thread).
"""

import gc
import os
import shutil
import tempfile
from pathlib import Path

DEVICES_VARIABLE = "ATTNJAX_TEST_DEVICES"
_DEVICE_FLAGS = (
    [f"--xla_force_host_platform_device_count={int(os.environ[DEVICES_VARIABLE])}"]
    if DEVICES_VARIABLE in os.environ
    else []
)
os.environ["XLA_FLAGS"] = " ".join(
    [
        os.environ.get("XLA_FLAGS", ""),
        *_DEVICE_FLAGS,
        "--xla_cpu_enable_concurrency_optimized_scheduler=false",
        "--xla_backend_optimization_level=0",
        "--xla_cpu_use_fusion_emitters=false",
    ]
).strip()
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import jax  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

settings.register_profile("attnjax", derandomize=True, database=None)
settings.load_profile("attnjax")

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")

# One scratch directory for the whole run, made by the first process (the
# xdist controller) and inherited by its workers: it holds a persistent
# compilation cache (a program that several tests compile is compiled once per
# run) and the studies' test runs (`tests.experiments.lab.test_studies.finished`).
RUN_DIR_VARIABLE = "ATTNJAX_TEST_RUN_DIR"
_OWNS_RUN_DIR = RUN_DIR_VARIABLE not in os.environ
if _OWNS_RUN_DIR:
    os.environ[RUN_DIR_VARIABLE] = tempfile.mkdtemp(prefix="attnjax-tests-")
# Programs that compile in under a second (thousands of eager ops and small test programs) are not
# written: serialising and writing them costs more than compiling them again (on two nn test files,
# 70.4 s with every program written, 60.8 s with this floor).
CACHE_MIN_COMPILE_SECONDS = 1.0
# Set in the environment, so that the processes the tests start (study commands,
# launcher jobs, distributed workers) read and fill the same cache.
_CACHE_SETTINGS = {
    "jax_compilation_cache_dir": os.path.join(os.environ[RUN_DIR_VARIABLE], "compilation_cache"),
    "jax_persistent_cache_min_compile_time_secs": CACHE_MIN_COMPILE_SECONDS,
    "jax_persistent_cache_min_entry_size_bytes": 0,
}
for _name, _value in _CACHE_SETTINGS.items():
    os.environ[_name.upper()] = str(_value)
    jax.config.update(_name, _value)


@pytest.fixture(autouse=True, scope="module")
def release_compiled_programs():
    """After each test file, JAX's caches of traced and compiled programs are emptied: a worker that runs
    hundreds of files otherwise keeps every program it compiled (7 GB resident seen in one worker near
    the end of a run, where two runs crashed inside XLA's compiler)."""
    yield
    jax.clear_caches()
    gc.collect()


@pytest.fixture
def figures_not_rendered(monkeypatch):
    """For tests of records, resumes and summaries: a study run still builds every figure (the summary lists
    their names), but renders no PNG (about a second per figure). The smoke-run tests check the rendered
    figures of every study."""
    from experiments.lab.workdir import Workdir

    monkeypatch.setattr(
        Workdir, "write_figure", lambda self, name, figure: self.file("plots", f"{name}.png")
    )


def pytest_unconfigure(config):
    """The process that made the scratch directory removes it at the end of the run."""
    if _OWNS_RUN_DIR:
        shutil.rmtree(os.environ.pop(RUN_DIR_VARIABLE), ignore_errors=True)


# The slowest files first (CPU seconds in a full run, most first): xdist deals
# whole files to workers in collection order, so with the long ones dealt
# early the run does not end with one worker busy on a long file and the other
# idle. Files not listed keep their order, after these.
TESTS = Path(__file__).resolve().parent
SLOWEST_FIRST = (
    "experiments/lab/test_studies.py",
    "attnjax/pretrained/test_gemma3_gguf.py",
    "experiments/benchmark/test_benchmark.py",
    "attnjax/test_distributed.py",
    "experiments/lab/test_launch.py",
    "attnjax/test_multi_device.py",
    "attnjax/test_training.py",
    "attnjax/nn/test_decoding.py",
    "experiments/test_pretrained.py",
    "experiments/test_colab.py",
    "attnjax/nn/test_edits.py",
    "attnjax/nn/test_sink_cache.py",
    "attnjax/test_kernels.py",
    "attnjax/test_upstream_attention.py",
    "attnjax/test_attention.py",
    "attnjax/pretrained/test_bert.py",
    "attnjax/pretrained/test_llama.py",
    "attnjax/nn/test_modules.py",
    "attnjax/test_linear.py",
    "attnjax/nn/test_options.py",
    "attnjax/test_attention_broadcast.py",
    "attnjax/pretrained/test_hf.py",
    "experiments/test_rank_collapse.py",
    "attnjax/analysis/test_markov.py",
)


# The quick tier (`-m "not slow"`, the edit-test loop) leaves out these files
# (study runs, model loads, training, decoding, subprocesses, the benchmark)
# and the tests marked `@pytest.mark.slow` one by one in the other files.
SLOW_FILES = frozenset(
    {
        "experiments/lab/test_studies.py",
        "attnjax/test_distributed.py",
        "experiments/lab/test_launch.py",
        "attnjax/test_kernels.py",
        "attnjax/test_training.py",
        "attnjax/test_multi_device.py",
        "attnjax/nn/test_decoding.py",
        "attnjax/test_upstream_attention.py",
        "experiments/test_pretrained.py",
        "experiments/benchmark/test_benchmark.py",
        "experiments/test_colab.py",
        "attnjax/pretrained/test_bert.py",
        "attnjax/pretrained/test_llama.py",
        "attnjax/pretrained/test_gemma3_gguf.py",
        "experiments/test_rank_collapse.py",
        "experiments/test_softmax_scaling.py",
        "experiments/test_power_iteration.py",
        "experiments/lab/test_mixed_precision.py",
        "attnjax/nn/test_options.py",
        "attnjax/test_attention_broadcast.py",
        "attnjax/nn/test_edits.py",
        "attnjax/nn/test_sink_cache.py",
        "attnjax/nn/test_generate_sampling.py",
        "attnjax/nn/test_reference_transformer.py",
        "experiments/lab/test_workdir.py",
        "test_repo.py",
        "attnjax/pretrained/test_hf.py",
        "experiments/test_pretrained_checkpoint.py",
        "attnjax/nn/test_switches.py",
    }
)


def _tests_path(item) -> str:
    """An item's file relative to `tests/`, as the lists above name it."""
    return item.path.relative_to(TESTS).as_posix()


def pytest_collection_modifyitems(items):
    for item in items:
        if _tests_path(item) in SLOW_FILES:
            item.add_marker("slow")
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    # stable: a file's tests keep their order
    items.sort(key=lambda item: rank.get(_tests_path(item), len(SLOWEST_FIRST)))


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per core. The suite is CPU-bound (compiling, on one thread per
    worker); a third worker on 2 cores fills the gaps (subprocesses, a study's lock) but costs
    more CPU than it saves wall time: measured back to back on the same tree, 2 workers took
    475.7 s (921 CPU-seconds) and 3 workers 485.2 s (958 CPU-seconds)."""
    return os.cpu_count() or 1


# `tests/attnjax/multi_device/` needs eight devices: `tests/attnjax/test_multi_device.py` runs it
# in its own process, so a one-device run leaves it out of collection.
collect_ignore = [] if DEVICES_VARIABLE in os.environ else ["attnjax/multi_device"]
