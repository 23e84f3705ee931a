"""The runner's toy study (no JAX of its own): five runs, x -> x^2, for the tests of the runner and the
launcher. Its own module, light to import: a launcher's job is a process that unpickles the study and its
run function, and imports the module that defines them (the test modules import every study).
"""

import dataclasses
import os
import signal
import time

from ml_collections import ConfigDict

from experiments.lab import study as study_lib

TOY_CONFIG = ConfigDict({"xs": (1, 2, 3, 4, 5)})


@dataclasses.dataclass(frozen=True)
class Toy:
    x: int

    @property
    def run_id(self):
        return f"x{self.x}"


def toy(**changes):
    """The toy study, with `changes` to its fields (e.g. `run_one=`)."""

    def figures(summary):
        from attnjax import plotting

        fig = plotting.figure(2, 2)
        fig.add_subplot().plot(summary["xs"])
        return {"xs": fig}

    study = study_lib.Study(
        name="toy",
        specs=lambda config: [Toy(x) for x in config.xs],
        run_one=lambda spec, config, run: [{"metric": "square", "value": spec.x**2}],
        summarize=lambda rows, config: {
            "xs": [r["x"] for r in rows],
            "squares": study_lib.by_metric(rows)["square"],
        },
        predictions=lambda summary: [
            study_lib.prediction(
                "squares grow", "arithmetic", "x^2 increasing", summary["squares"][-1], True
            )
        ],
        figures=figures,
        report=lambda summary: f"# toy\n{summary['squares']} ({summary['plots']})\n",
    )
    return dataclasses.replace(study, **changes)


def kill_at_x4(spec, config, run):
    """The toy's run, except that run x4 kills its own process (as the OOM killer or scancel would)."""
    if spec.x == 4:
        os.kill(os.getpid(), signal.SIGKILL)
    return [{"metric": "square", "value": spec.x**2}]


def sleep_in_every_run(spec, config, run):
    """The toy's run, except that it leaves its process id in its scratch directory and sleeps (a long
    run, for the launcher to be killed during)."""
    os.makedirs(run.path, exist_ok=True)
    with open(os.path.join(run.path, "pid"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(300)
    return [{"metric": "square", "value": spec.x**2}]
