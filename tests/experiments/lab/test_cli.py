"""A config's `compile_level` sets the command's LLVM backend optimisation level (`cli.set_compile_level`)."""

import os
import subprocess
import sys

import pytest

from attnjax.compilation import BACKEND_LEVEL_FLAG as LEVEL
from configs import rank_collapse as rank_collapse_config
from experiments.lab import cli
from tests.paths import REPO


def test_a_level_is_appended_to_the_xla_flags(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    cli.set_compile_level(0)
    assert os.environ["XLA_FLAGS"] == f"--xla_cpu_enable_fast_math=false {LEVEL}=0"


def test_without_a_level_or_with_the_users_level_nothing_changes(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    cli.set_compile_level(None)
    assert "XLA_FLAGS" not in os.environ
    monkeypatch.setenv("XLA_FLAGS", f"{LEVEL}=3")
    cli.set_compile_level(0)
    assert os.environ["XLA_FLAGS"] == f"{LEVEL}=3"


@pytest.mark.parametrize("level", [-1, 4, 1.0, True, "0"])
def test_a_bad_level_names_the_config_key(level, monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    with pytest.raises(ValueError, match=r"config.compile_level must be None or an int in 0..3"):
        cli.set_compile_level(level)
    assert "XLA_FLAGS" not in os.environ


def test_only_the_rank_collapse_smoke_variant_compiles_at_level_0():
    assert rank_collapse_config.get_config("smoke").compile_level == 0
    assert "compile_level" not in rank_collapse_config.get_config()


def test_the_command_sets_the_level_before_the_study_runs(tmp_path):
    """The rank_collapse smoke command, its study run replaced by a print of the XLA flags it would start with."""
    script = (
        "import os, sys\n"
        "from experiments.lab import cli, study\n"
        "from experiments.rank_collapse import STUDY\n"
        "study.run = lambda *args, **kwargs: print('XLA_FLAGS=' + os.environ['XLA_FLAGS'])\n"
        f"sys.argv = ['x', '--config', 'configs/rank_collapse.py:smoke', '--workdir', {str(tmp_path)!r}]\n"
        "cli.study_main(STUDY)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"{LEVEL}=0" in result.stdout.splitlines()[-1]
