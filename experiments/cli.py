"""Command-line plumbing shared by the studies (flags are defined in each entry script).

ml_collections rejects an unknown `--config.<key>` override of a locked
config, but names only the key ("Did you mean ...?"). `flags_parser(get_config)`
checks every override against the study's config first and stops with the
list of valid keys.
"""
from __future__ import annotations

import sys
from typing import Callable

from absl import app


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
