"""Hand mutants over `attnjax/nn`, the checkpoint loaders and the studies' checks (and the summary numbers
they read), run on demand (not part of the suite).

    python -m tests.mutation [--json out.json] [--only SUBSTRING]

Mutants are `MUTANTS` below and those of each module in `tests/mutants/`.
Each mutant replaces one snippet of one file in a temporary copy of the
tracked tree, runs only the test files (or test ids) listed for it there,
and is *killed* when they fail. The test selections are first run unmutated
(they must pass, or a kill would mean nothing). Prints a table (mutant, the
first failing test) and writes it as JSON; exits 1 if any mutant survives.

Not listed: softmax_scaling's checks (their verdicts are tested only through a full smoke run
of the study, minutes per mutant). Every verdict of experiments/rank_collapse/checks.py is
flipped by a mutant of `tests/mutants/rank_collapse.py`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.mutant import Mutant

ROOT = Path(__file__).resolve().parents[1]


REF = ("tests/attnjax/nn/test_reference_transformer.py",)
PRETRAINED = (
    "tests/experiments/test_pretrained.py::test_collapse_and_doubly_exponential_checks",
    "tests/experiments/test_pretrained.py::test_comparison_checks",
)
POWER = (
    "tests/experiments/test_power_iteration.py::test_product_prediction_fails_when_delta_leaves_the_lambda_product",
)
HF = (
    "tests/attnjax/pretrained/test_hf.py",
)  # skips without torch / transformers: run these with the oracle extra
SWITCHES = ("tests/attnjax/nn/test_switches.py",)

MUTANTS = (
    Mutant(
        "attnjax/nn/attention.py",
        "scale = default_scale(self.head_dim) / self.config.temperature",
        "scale = default_scale(self.head_dim)",
        "softmax temperature dropped",
        REF,
    ),
    Mutant(
        "attnjax/nn/attention.py",
        "if self.config.rope is None:\n            return x",
        "if True:\n            return x",
        "RoPE removed",
        REF,
    ),
    Mutant(
        "attnjax/nn/transformer.py",
        "table = jnp.concatenate([jnp.sin(position * rates), jnp.cos(position * rates)], axis=-1)",
        "table = jnp.zeros((length, 2 * half), dtype)",
        "sinusoidal position table zeroed",
        REF,
    ),
    Mutant(
        "attnjax/nn/transformer.py",
        "x = x + table[None].astype(x.dtype)\n        elif",
        "x = x\n        elif",
        "learned positions not added",
        REF,
    ),
    Mutant(
        "attnjax/nn/transformer.py",
        "causal = self.config.causal",
        "causal = False",
        "causal mask dropped in the Transformer",
        REF,
    ),
    Mutant(
        "attnjax/nn/transformer.py",
        "h = self.final_norm(h) if self.config.final_norm else h",
        "h = h",
        "final norm skipped",
        REF,
    ),
    Mutant(
        "attnjax/nn/transformer.py",
        "return self.embed.attend(h)",
        "return self.embed.attend(2 * h)",
        "tied head scaled",
        REF,
    ),
    Mutant(
        "attnjax/nn/block.py",
        "y = dropped(layer_norm(x))",
        "y = dropped(x)",
        "pre-norm skipped",
        REF,
    ),
    Mutant(
        "attnjax/nn/block.py",
        "return x + self.residual_scale * y if self.config.skip else y",
        "return x + y if self.config.skip else y",
        "residual scale ignored",
        REF,
    ),
    Mutant(
        "attnjax/nn/block.py",
        'return layer_norm(y) if self.config.norm == "post" else y',
        "return y",
        "post-norm skipped",
        REF,
    ),
    Mutant(
        "attnjax/nn/block.py",
        "return self.fc2(act(self.fc1(x)))",
        "return self.fc2(self.fc1(x))",
        "MLP activation removed",
        REF,
    ),
    Mutant(
        "attnjax/nn/transformer.py",
        "check_tokens(inputs, config.vocab_size)",
        "pass",
        "out-of-vocabulary check removed",
        ("tests/attnjax/nn/test_tokens.py",),
    ),
    Mutant(
        "attnjax/nn/generate.py",
        "logits / temperature, axis=-1",
        "logits, axis=-1",
        "sampling temperature ignored",
        ("tests/attnjax/nn/test_generate_sampling.py",),
    ),
    Mutant(
        "attnjax/nn/generate.py",
        "jax.random.fold_in(key, step)",
        "jax.random.fold_in(key, 0)",
        "same sampling key at every step",
        ("tests/attnjax/nn/test_generate_sampling.py",),
    ),
    Mutant(
        "attnjax/nn/statistics.py",
        "q, k = module.position(q), module.position(k)\n        scale =",
        "scale =",
        "model statistics from un-rotated q, k",
        ("tests/attnjax/nn/test_statistics.py",),
    ),
    Mutant(
        "attnjax/nn/statistics.py",
        "        return out, stats",
        "        out, _ = module.attend(q, k, v, mask=mask, is_causal=is_causal)\n        return out, stats",
        "statistics forward through dense attention",
        (
            "tests/attnjax/nn/test_statistics.py::test_compiled_memory_at_4096_is_below_one_dense_attention_matrix",
        ),
    ),
    Mutant(
        "attnjax/nn/edits.py",
        "weights = jnp.where(total > 0, weights / jnp.where(total > 0, total, 1), 0)\n",
        "",
        "remove_keys without renormalisation",
        ("tests/attnjax/nn/test_edits.py",),
    ),
    Mutant(
        "attnjax/nn/sink_cache.py",
        "query_positions = jnp.minimum(p, slots_total - 1)",
        "query_positions = p",
        "sink cache queries at absolute positions",
        ("tests/attnjax/nn/test_sink_cache.py",),
    ),
    Mutant(
        "attnjax/nn/sink_cache.py",
        "key_positions = jnp.where(s < n_sink, s, newest - (last - s) % window)",
        "key_positions = s",
        "sink cache keys at their slot index",
        ("tests/attnjax/nn/test_sink_cache.py",),
    ),
    Mutant(
        "experiments/pretrained/checks.py",
        "return bool(float(fraction) <= factor)",
        "return bool(float(fraction) > factor)",
        "collapse_check verdict flipped",
        PRETRAINED,
    ),
    Mutant(
        "experiments/pretrained/checks.py",
        "return bool(worst >= min_ratio)",
        "return bool(worst < min_ratio)",
        "doubly_exponential_check verdict flipped",
        PRETRAINED,
    ),
    Mutant(
        "experiments/pretrained/checks.py",
        "return bool(float(ratio) >= factor)",
        "return bool(float(ratio) < factor)",
        "counteract_check verdict flipped",
        PRETRAINED,
    ),
    Mutant(
        "experiments/pretrained/checks.py",
        "return bool(float(fraction) >= factor)",
        "return bool(float(fraction) < factor)",
        "keeps_check verdict flipped",
        PRETRAINED,
    ),
    Mutant(
        "experiments/power_iteration/checks.py",
        "worst, bool(worst <= math.log10(factor)), note)",
        "worst, bool(worst > math.log10(factor)), note)",
        "lambda-product verdict flipped",
        POWER,
    ),
    Mutant(
        "experiments/power_iteration/summary.py",
        "ENTROPY_RANGE[0] <= h <= ENTROPY_RANGE[1]",
        "ENTROPY_RANGE[0] <= h",
        "regime check: upper entropy bound dropped",
        POWER,
    ),
    Mutant(
        "attnjax/pretrained/decoder.py",
        'return {"use_bias": False, "qkv_bias": True}',
        'return {"use_bias": False, "qkv_bias": False}',
        "qwen2's q/k/v biases dropped",
        HF,
    ),
    Mutant(
        "attnjax/pretrained/gpt2.py",
        'return params.linear(get(f"{name}.weight", shape), get(f"{name}.bias", shape[1:]))',
        'w = get(f"{name}.weight", shape)\n    return params.linear(w.T if w.shape[0] == w.shape[1] else w, '
        'get(f"{name}.bias", shape[1:]))',
        "gpt2's square Conv1D weights transposed",
        HF,
    ),
    Mutant(
        "attnjax/pretrained/export.py",
        "(_half_layout(w, n) if interleaved else w).T",
        "w.T",
        "export keeps interleaved RoPE columns",
        HF,
    ),
    Mutant(
        "attnjax/masks.py",
        "left=window - 1, right=",
        "left=window, right=",
        "sliding window one key wider",
        SWITCHES + HF,
    ),
    Mutant(
        "attnjax/rope.py",
        "jnp.where(wavelength < original / high, inv_freq, smoothed)",
        "inv_freq",
        "llama3 RoPE scaling: no smoothed band",
        SWITCHES + HF,
    ),
    Mutant(
        "attnjax/rope.py",
        "return inv_freq / scaling[1]",
        "return inv_freq",
        "linear RoPE scaling ignored",
        SWITCHES + HF,
    ),
)


def all_mutants() -> tuple[Mutant, ...]:
    """`MUTANTS` above, then each module of `tests/mutants/` (its `MUTANTS`), in file-name order."""
    modules = sorted(
        p.stem for p in (ROOT / "tests" / "mutants").glob("*.py") if p.stem != "__init__"
    )
    found = [importlib.import_module(f"tests.mutants.{name}").MUTANTS for name in modules]
    return MUTANTS + tuple(m for group in found for m in group)


def _copy_tree(dest: Path) -> None:
    """The tracked (and untracked, not ignored) files of the repository into `dest`."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in files:
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def _pytest(tree: Path, tests) -> tuple[bool, str]:
    """(passed, the first failing test id or the last output line)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rfE", *tests],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    lines = proc.stdout.splitlines()
    failed = [
        line.split(" ", 1)[1].split(" - ")[0]
        for line in lines
        if line.startswith(("FAILED ", "ERROR "))
    ]
    return proc.returncode == 0, (
        failed[0] if failed else (lines[-1] if lines else proc.stderr[-200:])
    )


def run(mutants, out: Path) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        tree = Path(tmp)
        _copy_tree(tree)
        for tests in sorted({m.tests for m in mutants}):
            ok, detail = _pytest(tree, tests)
            if not ok:
                raise SystemExit(f"unmutated tests fail, fix them first: {tests}: {detail}")
        rows = []
        for m in mutants:
            path = tree / m.file
            text = path.read_text()
            if text.count(m.original) != 1:
                raise SystemExit(
                    f"{m.file}: the snippet of mutant {m.description!r} occurs "
                    f"{text.count(m.original)} times (need exactly once)"
                )
            try:
                path.write_text(text.replace(m.original, m.replacement))
                passed, detail = _pytest(tree, m.tests)
            finally:
                path.write_text(text)
            rows.append(
                dict(
                    file=m.file,
                    description=m.description,
                    killed=not passed,
                    killed_by=None if passed else detail,
                    tests=list(m.tests),
                )
            )
            print(
                f"{'killed ' if not passed else 'SURVIVED'} {m.file:40s} {m.description:45s} "
                f"{detail if not passed else ''}",
                flush=True,
            )
    out.write_text(json.dumps(rows, indent=1) + "\n")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("mutants.json"))
    parser.add_argument(
        "--only", default="", help="run the mutants whose file or description contains this"
    )
    args = parser.parse_args(argv)
    chosen = [m for m in all_mutants() if args.only in m.file or args.only in m.description]
    rows = run(chosen, args.json)
    survived = [r for r in rows if not r["killed"]]
    print(f"{len(rows) - len(survived)} of {len(rows)} mutants killed; table in {args.json}")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
