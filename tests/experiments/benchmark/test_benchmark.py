import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from configs import benchmark as config_lib
from configs import rank_collapse as rank_collapse_config
from experiments.benchmark import linear as bench_linear
from experiments.benchmark import pretrained as bench_pretrained
from experiments.benchmark import real_maps as bench_real_maps
from experiments.benchmark import report as bench_report
from experiments.benchmark import suite
from experiments.benchmark import train_step as bench_train_step
from experiments.benchmark import util as bench_util
from tests import tiny_checkpoint
from tests.paths import REPO

ROOT = str(REPO)
RESULTS = os.path.join(ROOT, "experiments", "benchmark", "results_cpu", "benchmark.json")
TINY_BERT, TINY_LLAMA = "tiny_bert", "tiny_llama"
# Sections added since the committed run: they join it when the whole benchmark is next run.
NOT_IN_COMMITTED_RUN: set = set()


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("bench")
    config = config_lib.get_config("smoke")
    # The other test workers share the cores: PyTorch's OpenMP threads, one per core, would thrash (10x slower).
    config.pretrained.torch_threads = 1
    # Tiny checkpoints (the bundled models' loading and inference have their own tests, and were half of the
    # smoke run): the section's code paths, PyTorch's rows included, are the same for any checkpoint.
    checkpoints = tmp_path_factory.mktemp("checkpoints")
    config.pretrained.encoder_path = str(tiny_checkpoint.write_bert(checkpoints / TINY_BERT))
    config.pretrained.causal_lm_path = str(
        tiny_checkpoint.write(checkpoints / TINY_LLAMA, layers=2)
    )
    return workdir, suite.run(config, str(workdir), progress=lambda line: None)


def test_smoke_benchmark_writes_its_json_and_every_section(smoke):
    workdir, payload = smoke
    assert {r["section"] for r in payload["rows"]} == set(config_lib.SECTIONS)
    assert json.loads((workdir / "benchmark.json").read_text())["rows"] == json.loads(
        json.dumps(payload["rows"])
    )
    assert (workdir / "plots" / "linear.png").stat().st_size > 0
    env = payload["environment"]
    assert env["backend"] and env["jax"] and env["device_kind"]
    timed = [r for r in payload["rows"] if r.get("seconds") is not None]
    assert len(timed) >= 20 and all(r["seconds"] > 0 for r in timed)
    assert all(
        "ok" not in r and "target" not in r for r in payload["rows"]
    )  # smoke rows carry no targets


def test_smoke_benchmark_rows_compare_against_references(smoke):
    _, payload = smoke
    rows = {(r["section"], r["name"]): r for r in payload["rows"]}
    ours = rows[("attention", "attnjax.dot_product_attention")]
    assert ours["reference"] == "jax.nn.dot_product_attention (xla)" and ours["ratio"] > 0
    assert 0 < ours["pct_peak"] and ours["tflops"] > 0
    crossover = rows[("linear", "crossover: shortest T where linear beats exact, fwd")]
    assert "crossover_length" in crossover and crossover["note"]
    program = next(
        r for r in payload["rows"] if r["name"].endswith("one program, seeds sharded over devices")
    )
    assert program["tokens_per_s"] > 0
    seeds = next(r for r in payload["rows"] if r["name"].startswith(program["name"] + " / "))
    assert seeds["ratio"] > 0 and seeds["reference"].endswith("sequential runs, one device")
    assert rows[("training", "train step, float32")]["tokens_per_s"] > 0
    if payload["environment"]["backend"] != "gpu":
        gpu = rows[("attention", "attnjax / cuDNN throughput, fwd")]
        assert gpu["note"] == "not measured (no GPU)"


def test_smoke_benchmark_has_fwd_bwd_rows_at_large_and_small_shapes(smoke):
    _, payload = smoke
    fwd_bwd = [r for r in payload["rows"] if r["name"] == "attnjax.dot_product_attention, fwd+bwd"]
    assert {r["shape"].split(" T=")[1].split()[0] for r in fwd_bwd} == {"256", "12"}
    assert all(
        r["reference"] == "jax.nn.dot_product_attention (xla), fwd+bwd" and r["ratio"] > 0
        for r in fwd_bwd
    )


def test_smoke_streaming_rows_time_statistics_against_the_forward_and_memory_over_t(smoke):
    _, payload = smoke
    rows = [r for r in payload["rows"] if r["section"] == "streaming"]
    timed = next(r for r in rows if r["name"] == "attention_statistics (chunked, online)")
    assert timed["reference"] == "attnjax.dot_product_attention, fwd" and timed["ratio"] > 0
    memory = [r for r in rows if r["name"] == "attention_statistics temp memory"]
    growth = next(r for r in rows if r["name"].startswith("temp memory growth"))
    assert [r["length"] for r in memory] == [128, 256]
    assert growth["ratio"] == pytest.approx(memory[1]["temp_mb"] / memory[0]["temp_mb"])
    assert (
        growth["ratio"] < memory[1]["dense_temp_mb"] / memory[0]["dense_temp_mb"]
    )  # linear against quadratic
    spectra = [r for r in rows if r["name"] == "leading_singular_values (streaming)"]
    assert [r["shape"].split()[1] for r in spectra] == ["T=64", "T=128"]
    assert all(r["seconds"] > 0 and r["temp_mb"] > 0 for r in spectra)
    (dense,) = [r for r in rows if r["name"] == "dense SVD / streaming"]
    assert "T=64" in dense["shape"] and dense["ratio"] > 0
    assert dense["max_relative_difference"] < 1e-3


def test_smoke_real_map_row_checks_the_streaming_spectra_against_float64_svds(smoke):
    """The causal LM's own maps (the tiny llama, T = 32, both layers): sigma_1, sigma_2 by the streaming
    path equal float64 dense SVDs to 1e-6 in float64 (the acceptance's bound), and to float32 rounding
    in float32."""
    _, payload = smoke
    (row,) = [
        r
        for r in payload["rows"]
        if r["name"].endswith("leading singular values of its maps (streaming)")
    ]
    assert row["section"] == "pretrained" and "T=32" in row["shape"] and row["seconds"] > 0
    assert row["max_relative_difference"] < 1e-6
    assert row["max_relative_difference_float32"] < 1e-4


def test_dense_singular_values_are_those_of_the_causal_softmax_map():
    """The float64 reference of the real-map row, from its equations: one head's causal softmax map of
    random q, k (two query heads on one key head) has the singular values NumPy gives for it."""
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(6, 2, 4)), rng.normal(size=(6, 1, 4))
    values = bench_real_maps.dense_singular_values(q, k, scale=0.5)
    for h in range(2):
        logits = np.where(np.tril(np.ones((6, 6), bool)), q[:, h] @ k[:, 0].T * 0.5, -np.inf)
        weights = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        np.testing.assert_allclose(values[h], np.linalg.svd(weights)[1][:2], rtol=1e-12)


def test_smoke_train_step_compares_attnjax_with_flax_in_the_same_run(smoke):
    _, payload = smoke
    rows = {r["name"]: r for r in payload["rows"] if r["section"] == "train_step"}
    ours, theirs = (
        rows["AdamW step, attnjax.nn.Transformer"],
        rows[f"AdamW step, {bench_train_step.FLAX}"],
    )
    assert ours["note"] == theirs["note"]  # the same number of parameters
    ratio = rows["attnjax / flax, AdamW step"]
    assert ratio["reference"] == theirs["name"]
    assert ratio["ratio"] == pytest.approx(ours["seconds"] / theirs["seconds"])


def test_smoke_pretrained_rows_are_measured_or_say_why_not(smoke):
    _, payload = smoke
    rows = [r for r in payload["rows"] if r["section"] == "pretrained"]
    names = {r["name"] for r in rows}
    for name in (
        f"{TINY_BERT} {bench_pretrained.ENCODER}",
        f"{TINY_LLAMA} {bench_pretrained.PREFILL}",
        f"{TINY_LLAMA} {bench_pretrained.DECODE}",
    ):
        assert f"{name}, attnjax" in names
    for row in rows:  # measured (a time or a ratio), or saying why not
        measured = any((row.get(field) or 0) > 0 for field in ("seconds", "tokens_per_s", "ratio"))
        assert (
            measured
            or row["note"].startswith("not measured (")
            or "no time difference" in row["note"]
        ), row
    # The jit recipe: jit_forward and nnx.jit of the same prefill, both timed, and their ratio.
    by_name = {r["name"]: r for r in rows}
    for t in (16, 8):  # the smoke config's prefill_length and decode_prompt
        recipe = f"{TINY_LLAMA} forward, T={t}"
        assert by_name[f"{recipe}, {bench_pretrained.JIT_FORWARD}"]["seconds"] > 0
        assert by_name[f"{recipe}, {bench_pretrained.NNX_JIT}"]["seconds"] > 0
        ratio = f"{recipe}, {bench_pretrained.JIT_FORWARD} / {bench_pretrained.NNX_JIT}"
        assert by_name[ratio]["ratio"] > 0
        assert by_name[f"{recipe}, {bench_pretrained.EAGER}"]["seconds"] > 0
        ratio = f"{recipe}, {bench_pretrained.EAGER} / {bench_pretrained.JIT_FORWARD}"
        assert by_name[ratio]["reference"] == f"{recipe}, {bench_pretrained.JIT_FORWARD}"
    # Decoding by eager model calls, beside generate's (measured, or no difference measurable).
    assert f"{TINY_LLAMA} {bench_pretrained.DECODE}, {bench_pretrained.EAGER_DECODING}" in names
    # The all-head ablation sweep against the loop of single edits: timed, the same numbers.
    for mode in ("zero", "mean"):
        name = f"{TINY_LLAMA} all-head ablation ({mode})"
        assert by_name[f"{name}, one program"]["seconds"] > 0
        assert by_name[f"{name}, loop of single edits"]["seconds"] > 0
        ratio = by_name[f"{name}, loop / one program"]
        assert ratio["ratio"] > 0
        assert ratio["max_abs_diff"] < 1e-4
    missing = bench_pretrained.torch_missing()
    torch_rows = [r for r in rows if r["name"].endswith(bench_pretrained.TORCH)]
    assert len(torch_rows) == 3  # encoder, prefill, decoding: measured or saying why not
    if missing is not None:
        assert all(r["note"] == f"not measured ({missing})" for r in torch_rows)
    else:
        # Built and run: each measured on the config's threads (decoding may show no time difference).
        assert all("seconds" in r or "no time difference" in r["note"] for r in torch_rows), (
            torch_rows
        )
        assert all("torch 1 threads" in r["note"] for r in torch_rows)
        ratios = [r for r in rows if r["name"].endswith("attnjax / PyTorch")]
        assert len(ratios) == 3 and all(
            r.get("ratio", 1) > 0 or r["note"].startswith("not measured (") for r in ratios
        )


def test_a_hidden_transformers_makes_the_reference_rows_say_not_measured(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    assert bench_pretrained.torch_missing() == "transformers not installed"
    call, why = bench_pretrained.reference(lambda: pytest.fail("the reference must not be built"))
    assert call is None and why == "transformers not installed"
    rows = bench_pretrained._compare(
        bench_pretrained.ENCODER,
        "B=1 T=2 f32",
        lambda: jnp.zeros(2),
        None,
        why,
        2,
        None,
        None,
        1,
        1.1,
    )
    assert [r["name"] for r in rows] == [
        f"{bench_pretrained.ENCODER}, attnjax",
        f"{bench_pretrained.ENCODER}, {bench_pretrained.TORCH}",
    ]
    assert rows[0]["seconds"] > 0 and rows[1]["note"] == "not measured (transformers not installed)"


def test_a_reference_that_fails_to_build_or_run_is_a_row_that_says_why(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "accelerate", None)

    def build():
        import accelerate  # noqa: F401  raises ImportError: hidden

    call, why = bench_pretrained.reference(build)
    missing = bench_pretrained.torch_missing()
    expected = "PyTorch reference failed: ModuleNotFoundError: import of accelerate halted; None in sys.modules"
    assert call is None and why == (missing or expected)

    def broken():
        raise RuntimeError("out of memory")

    rows = bench_pretrained._compare(
        bench_pretrained.PREFILL,
        "B=1 T=2 f32",
        lambda: jnp.zeros(2),
        broken,
        None,
        2,
        None,
        None,
        1,
        1.1,
    )
    assert (
        rows[-1]["note"] == "not measured (PyTorch reference failed: RuntimeError: out of memory)"
    )


def test_the_smollm2_reference_is_built_from_attnjax_weights_without_accelerate(monkeypatch):
    import sys

    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from flax import nnx

    from attnjax import nn

    monkeypatch.setitem(sys.modules, "accelerate", None)
    config = nn.TransformerConfig.create(
        num_layers=2,
        features=16,
        num_heads=4,
        num_kv_heads=2,
        rope="interleaved",
        vocab_size=20,
        max_len=16,
        positions=None,
        norm="pre",
        norm_kind="rmsnorm",
        use_bias=False,
        mlp_features=32,
        mlp_activation="swiglu",
        head="tied",
        head_bias=False,
        causal=True,
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    torch_model = bench_pretrained.torch_llama(model)
    ids = np.arange(1, 9)[None]
    with torch.no_grad():
        theirs = torch_model(torch.as_tensor(ids)).logits.numpy()
    np.testing.assert_allclose(np.asarray(model(jnp.asarray(ids))), theirs, atol=1e-4)


@pytest.mark.parametrize("shape", [(8, 64, 4), (4, 64, 4), (2, 32, 2)])
def test_flax_reference_model_has_attnjax_models_parameter_count(shape):
    from flax import nnx

    count = {}
    for name, build in (
        ("flax", bench_train_step.FlaxTransformer),
        ("attnjax", bench_train_step.attnjax_model),
    ):
        model = nnx.eval_shape(lambda: build(*shape, 64, 33, rngs=nnx.Rngs(0)))
        count[name] = bench_train_step.num_params(nnx.state(model, nnx.Param))
    assert count["flax"] == count["attnjax"]


def test_rows_are_named_after_the_checkpoint():
    assert bench_pretrained.label("", "MiniLM-L6") == "MiniLM-L6"
    assert bench_pretrained.label("/models/my-bert/", "MiniLM-L6") == "my-bert"
    assert bench_pretrained.label("/models/tiny.Q8_0.gguf", "SmolLM2-135M") == "tiny.Q8_0"


def test_an_encoder_given_as_the_causal_lm_is_refused(tmp_path):
    config = config_lib.get_config("smoke").pretrained
    config.causal_lm_path = str(tiny_checkpoint.write_bert(tmp_path / "bert"))
    with pytest.raises(ValueError, match="causal_lm_path .* holds an encoder, not a causal LM"):
        bench_pretrained.causal_lm_rows(config, 1.0)


def test_pretrained_rows_say_not_measured_without_the_model_wheels(monkeypatch):
    from attnjax import pretrained

    def absent(*args, **kwargs):
        raise FileNotFoundError("no path given and package 'x' is not installed; install it")

    monkeypatch.setattr(pretrained, "load_bert", absent)
    monkeypatch.setattr(pretrained, "load_llama", absent)
    config = config_lib.get_config("smoke").pretrained
    rows = bench_pretrained.encoder_rows(config, 1.0) + bench_pretrained.causal_lm_rows(config, 1.0)
    # The bundled checkpoints name the rows as in the committed run.
    assert [r["name"] for r in rows] == [
        "MiniLM-L6 encoder forward, attnjax",
        "SmolLM2-135M prefill (forward), attnjax",
        "SmolLM2-135M cached greedy decoding, attnjax",
    ]
    assert all(
        r["note"]
        == "not measured (model not installed: no path given and package 'x' is not installed)"
        for r in rows
    )


def test_markdown_report_names_device_versions_and_date(smoke):
    workdir, payload = smoke
    text = (workdir / "benchmark.md").read_text()
    env = payload["environment"]
    assert text.startswith("Device: ") and f"jax {env['jax']}" in text and env["date"] in text
    assert text.count("\n| ") == len(payload["rows"]) + 1  # header + one line per row


def test_readme_performance_table_is_rendered_from_the_committed_json():
    with open(RESULTS) as f:
        payload = json.load(f)
    assert payload["config"]["check_targets"] and payload["environment"]["backend"] == "cpu"
    assert {r["section"] for r in payload["rows"]} == set(
        config_lib.SECTIONS
    ) - NOT_IN_COMMITTED_RUN
    bf16 = next(
        r for r in payload["rows"] if r["name"] == "train step, bf16 compute, float32 params"
    )
    assert bf16["reference"] == "train step, float32" and bf16["ratio"] > 0
    with open(os.path.join(ROOT, "docs", "benchmark.md")) as f:
        page = f.read()
    assert bench_report.markdown_report(payload, only_headline=True) in page


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("sections", ("attention", "typo"), "sections must be a non-empty subset"),
        ("linear.short", 1000, "linear.short=1000 must be one of linear.lengths"),
        ("training.dtypes", ("bfloat16", "float32"), "training.dtypes must start with 'float32'"),
        ("training.dtypes", ("float32", "float16"), "training.dtypes must start with 'float32'"),
    ],
)
def test_bad_config_is_rejected_before_any_work(tmp_path, field, value, message):
    config = config_lib.get_config()
    parent, _, leaf = field.rpartition(".")
    (config[parent] if parent else config)[leaf] = value
    with pytest.raises(ValueError, match=message):
        suite.run(config, str(tmp_path / "out"), progress=lambda line: None)
    assert not (tmp_path / "out").exists()


def _recall_setting(config) -> dict:
    """seed, num_seeds, causal and the task, model, train blocks of a training setting."""
    return {
        "seed": config.seed,
        "num_seeds": config.num_seeds,
        **{b: config[b].to_dict() for b in BLOCKS},
    }


BLOCKS = ("task", "model", "train")


@pytest.mark.parametrize("variant", ["", "smoke"])
def test_training_section_times_the_rank_collapse_studys_training_setting(variant):
    """The benchmark writes out the study's recall setting (it imports no study config); the two must agree."""
    section = config_lib.get_config(variant).training
    study, smoke = (
        rank_collapse_config.get_config(variant),
        rank_collapse_config.get_config("smoke"),
    )
    assert (
        _recall_setting(section.run) == _recall_setting(study)
        and section.run.causal == study.train_sweep.causal
    )
    assert _recall_setting(section.seeds_run) == _recall_setting(smoke) and section.seeds_run.causal


def test_meets_reads_both_directions():
    assert bench_util.meets(2.0, ">= 2") and not bench_util.meets(1.9, ">= 2")
    assert bench_util.meets(0.5, "<= 1.05") and not bench_util.meets(1.1, "<= 1.05")
    assert bench_util.meets(None, ">= 1") is None and bench_util.meets(1.0, None) is None
    with pytest.raises(ValueError, match="target must be"):
        bench_util.meets(1.0, "> 1")


def _sweep_row(series, length, seconds):
    return {
        "section": "linear",
        "series": series,
        "length": length,
        "seconds": seconds,
        "shape": f"B=1 T={length} H=1 D=1 M=1 float32",
    }


@pytest.mark.parametrize(
    "exact, expected, note",
    [
        ((1.0, 3.0, 9.0), 2048, "T = 2048 (exact faster at T = 1024)"),
        ((3.0, 9.0, 27.0), 1024, "T <= 1024 (linear faster at every measured T)"),
        ((1.0, 1.0, 1.0), None, "exact faster at every measured T (up to 4096)"),
    ],
)
def test_crossover_is_the_shortest_length_where_linear_wins(exact, expected, note):
    rows = []
    for length, exact_seconds in zip((1024, 2048, 4096), exact):
        rows += [
            _sweep_row(bench_linear.CHUNKED, length, 2.0),
            _sweep_row(bench_linear.EXACT, length, exact_seconds),
        ]
    row = bench_linear.crossover_row(rows)
    assert row["crossover_length"] == expected and row["note"] == note
