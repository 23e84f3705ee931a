"""Command-line plumbing: the one entry point of every study, and the config-key check.

    python -m experiments.<study> --config configs/<study>.py[:variant] --workdir DIR [--config.a.b=value ...]

Flags are defined only by the entry script that runs (`study_main`, called
from a study's `__main__.py`), so studies can be imported together without
clashing flag names. ml_collections rejects an unknown `--config.<key>`
override of a locked config, but names only the key ("Did you mean ...?");
`flags_parser(get_config)` checks every override against the study's config
first and stops with the list of valid keys.
"""
from __future__ import annotations

import importlib
import sys
from typing import Callable

from absl import app, flags, logging
from ml_collections import config_flags

from attnjax import study as study_lib


def leaf_paths(tree, prefix: str = "") -> list[str]:
    """Dotted paths of the leaves of a nested ConfigDict / dict."""
    paths = []
    for name, value in tree.items():
        path = f"{prefix}{name}"
        paths += leaf_paths(value, path + ".") if hasattr(value, "items") else [path]
    return paths


def unknown_override_keys(argv: list[str], valid: list[str]) -> list[str]:
    """The `--config.<key>=...` overrides in `argv` whose key is not in `valid`."""
    keys = [arg[len("--config."):].split("=", 1)[0] for arg in argv[1:] if arg.startswith("--config.")]
    return [k for k in keys if k not in valid]


def flags_parser(get_config: Callable) -> Callable[[list[str]], list[str]]:
    """An absl `flags_parser` that rejects unknown config overrides, listing the valid keys."""

    def parse(argv: list[str]) -> list[str]:
        valid = sorted(leaf_paths(get_config()))
        unknown = unknown_override_keys(argv, valid)
        if unknown:
            print(f"FATAL Flags parsing error: unknown config key {unknown[0]!r}; valid keys: {valid}",
                  file=sys.stderr)
            sys.exit(1)
        return app.parse_flags_with_usage(argv)

    return parse


def study_main(study: study_lib.Study) -> None:
    """Parse `--config` (a `configs/<study.name>.py` file) and `--workdir`, then run the study."""
    get_config = importlib.import_module(f"configs.{study.name}").get_config
    config = config_flags.DEFINE_config_file("config", None, f"study config file (configs/{study.name}.py)",
                                             lock_config=True)
    workdir = flags.DEFINE_string("workdir", None, "output directory")
    flags.mark_flags_as_required(["config", "workdir"])

    def main(argv: list[str]) -> None:
        if len(argv) > 1:
            raise app.UsageError(f"unexpected arguments: {argv[1:]}")
        logging.set_verbosity(logging.WARNING)  # checkpointing logs every save at INFO
        study_lib.run(study, config.value, workdir.value, progress=lambda line: print(line, flush=True))

    app.run(main, flags_parser=flags_parser(get_config))
