"""The eight-device tests (`tests/attnjax/multi_device/`), in a process of their own.

The suite runs on one CPU device (see `tests/conftest.py`); XLA's device count
is fixed when a process starts, so the data-parallel tests get a fresh
`pytest` with `ATTNJAX_TEST_DEVICES=8`. Its report is the failure message.
"""

import os
import subprocess
import sys

import pytest

from tests.conftest import DEVICES_VARIABLE
from tests.paths import REPO

TIMEOUT_S = 400


@pytest.mark.slow
def test_data_parallel_tests_pass_on_eight_devices():
    env = {**os.environ, DEVICES_VARIABLE: "8"}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/attnjax/multi_device",
    ]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]
