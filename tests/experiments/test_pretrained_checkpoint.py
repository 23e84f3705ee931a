"""The pretrained study on any Hugging Face checkpoint directory (`--config.model.path=DIR`): a smoke-sized
run on a tiny llama written by hand (tests/tiny_checkpoint.py; no model wheel, no torch), the report naming
the model from its config.json, and a directory of an unsupported family refused before anything loads."""

import json

import pytest

from configs import pretrained as pretrained_config
from experiments.lab import study as study_lib
from experiments.pretrained import STUDY, study
from tests import tiny_checkpoint


def _tiny_config(path):
    config = pretrained_config.get_config("causal_smoke")
    config.model.path = str(path)
    config.corpus.update(lengths=(8,), sentences_per_length=3)
    config.paths.update(lengths=(1, 2), num_paths=4, num_sentences=2)
    return config


def test_the_study_runs_on_a_checkpoint_directory_and_names_the_model_from_its_config(tmp_path):
    config = _tiny_config(tiny_checkpoint.write(tmp_path / "tiny-llama", layers=2))
    study_lib.run(STUDY, config, str(tmp_path / "run"))
    result = json.loads((tmp_path / "run" / "summary.json").read_text())
    name = "tiny-llama (LlamaForCausalLM, 2 layers)"
    assert result["model"]["name"] == name
    assert (
        result["model"]["num_layers"],
        result["model"]["num_heads"],
        result["model"]["num_kv_heads"],
    ) == (2, 2, 1)
    assert result["model"]["causal"] and result["model"]["family"] == "llama"
    assert len(result["variants"]["full"]["residual"]) == 3  # L + 1 hidden states
    assert name in (tmp_path / "run" / "report.md").read_text()


def test_a_checkpoint_directory_of_an_unsupported_family_fails_before_loading(tmp_path):
    path = tiny_checkpoint.write(
        tmp_path / "t5", config={**tiny_checkpoint.CONFIG, "model_type": "t5"}
    )
    with pytest.raises(
        ValueError, match=r"model.path: .* holds model_type 't5'; supported: \('bert', 'llama'"
    ):
        study.specs(_tiny_config(path))
