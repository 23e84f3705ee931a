"""python -m experiments.benchmark --config configs/benchmark.py [--workdir bench_out]"""

from absl import app, flags
from ml_collections import config_flags

from configs import benchmark as default_config
from experiments.benchmark import suite
from experiments.lab.cli import flags_parser


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = flags.FLAGS.config
    suite.start_cpu_devices(config)
    suite.run(config, flags.FLAGS.workdir, progress=lambda line: print(line, flush=True))


if __name__ == "__main__":
    config_flags.DEFINE_config_file(
        "config", "configs/benchmark.py", "benchmark config file", lock_config=True
    )
    flags.DEFINE_string("workdir", "bench_out", "output directory")
    app.run(main, flags_parser=flags_parser(default_config.get_config))
