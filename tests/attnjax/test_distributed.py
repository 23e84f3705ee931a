"""One training program across two processes (`jax.distributed` on localhost, CPU collectives).

Two processes with two CPU devices each train 2 seeds of a tiny model over a
('seed', 'data') = (2, 2) mesh spanning both (`tests/distributed_worker.py`);
one process with four devices trains the same program. Losses and final
parameters agree to float32 rounding. Every process has a timeout, so a
coordinator that never answers fails the test instead of hanging it.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.paths import REPO

TIMEOUT_S = 420


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _start(out, num_processes: int, process_id: int, port: int, devices: int) -> subprocess.Popen:
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
    env = {
        **os.environ,
        "XLA_FLAGS": " ".join([*flags, f"--xla_force_host_platform_device_count={devices}"]),
        "JAX_PLATFORMS": "cpu",
    }
    cmd = [
        sys.executable,
        "-m",
        "tests.distributed_worker",
        str(out),
        str(num_processes),
        str(process_id),
        str(port),
    ]
    return subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _wait(processes: list[subprocess.Popen]) -> None:
    try:
        logs = [p.communicate(timeout=TIMEOUT_S)[0] for p in processes]
    except subprocess.TimeoutExpired:
        for p in processes:
            p.kill()
        pytest.fail(f"a process ran past {TIMEOUT_S} s")
    for p, log in zip(processes, logs):
        assert p.returncode == 0, log[-3000:]


@pytest.mark.slow
def test_two_processes_train_as_one_process_with_as_many_devices(tmp_path):
    port = _free_port()
    two, one = tmp_path / "two.json", tmp_path / "one.json"
    processes = [_start(two, 2, i, port, devices=2) for i in range(2)] + [
        _start(one, 1, 0, 0, devices=4)
    ]
    _wait(processes)
    two, one = json.loads(two.read_text()), json.loads(one.read_text())
    assert (two["processes"], two["devices"], one["processes"], one["devices"]) == (2, 4, 1, 4)
    assert (
        two["mesh"] == one["mesh"] == {"seed": 2, "data": 2}
    )  # seeds across processes, the batch within
    losses = np.asarray(two["losses"])
    assert losses.shape == (6, 2) and np.all(np.isfinite(losses))
    assert not np.allclose(losses[:, 0], losses[:, 1])  # two seeds, two different runs
    np.testing.assert_allclose(losses, one["losses"], rtol=1e-6)
    np.testing.assert_allclose(two["param_squares"], one["param_squares"], rtol=1e-6)
