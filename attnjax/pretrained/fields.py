"""A checkpoint's configuration read field by field under the file's own names.

    fields = Fields(hf, source="path/config.json", owner="model_type 'bert'", defaults=DEFAULTS)
    layers = fields.positive_int("num_hidden_layers")      # required: no default
    eps = fields.positive_number("layer_norm_eps")         # absent: DEFAULTS["layer_norm_eps"]

Each getter checks the value's type and range, and raises a ValueError that
names the file and the field as the file spells it, with the value:
`path/config.json: num_hidden_layers must be a positive int, got 0`. A field
that is absent takes its entry in `defaults` (the loaders pass the defaults
of Hugging Face's config classes, so a file means what it means to
`transformers`); a field with no default is required:
`path/config.json: model_type 'bert' needs the field 'hidden_size'`.
JSON null is a value: None where the field may be None (`optional`), an
error otherwise.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np

REQUIRED = object()  # the default of a field that has none: absent is an error


@dataclasses.dataclass(frozen=True)
class Fields:
    """The fields of `values` (a config.json dict, or GGUF metadata), read with checks.

    Attributes:
      values: the file's fields, by their names in the file.
      source: the file, as errors name it.
      owner: what needs the fields, for the error on a missing one ("model_type 'bert'").
      defaults: the value of each optional field when the file leaves it out.
    """

    values: Mapping[str, Any]
    source: str
    owner: str
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def error(self, message: str) -> ValueError:
        """A ValueError: the file, then `message`."""
        return ValueError(f"{self.source}: {message}")

    def get(self, name: str, default: Any = REQUIRED) -> Any:
        """The raw value of `name`: the file's (null included), else `default`, else
        `defaults[name]`; an error naming the field when there is none."""
        if name in self.values:
            return self.values[name]
        value = default if default is not REQUIRED else self.defaults.get(name, REQUIRED)
        if value is REQUIRED:
            raise self.error(f"{self.owner} needs the field {name!r}")
        return value

    def positive_int(self, name: str, default: Any = REQUIRED, *, optional: bool = False):
        """An int >= 1 (not a bool, not a float such as 8.0 or 8.5, not a string); None (null)
        too when `optional`."""
        value = self.get(name, default)
        if optional and value is None:
            return None
        if not _is_int(value) or value < 1:
            raise self.error(f"{name} must be a positive int, got {value!r}")
        return int(value)

    def positive_number(self, name: str, default: Any = REQUIRED) -> float:
        """A finite number > 0, as a float."""
        value = self.get(name, default)
        if not _is_number(value) or not 0 < value < math.inf:
            raise self.error(f"{name} must be a positive number, got {value!r}")
        return float(value)

    def boolean(self, name: str, default: Any = REQUIRED) -> bool:
        """true or false."""
        value = self.get(name, default)
        if not isinstance(value, bool):
            raise self.error(f"{name} must be a bool (true or false), got {value!r}")
        return value

    def choice(self, name: str, choices: Sequence, default: Any = REQUIRED):
        """One of `choices`."""
        value = self.get(name, default)
        if not _hashable(value) or value not in choices:
            raise self.error(f"unsupported {name} {value!r}; supported: {tuple(choices)}")
        return value

    def divisible(self, name: str, value: int, by_name: str, by: int) -> None:
        """Field `by_name` (`by`) divides field `name` (`value`)."""
        if value % by:
            raise self.error(f"{name} ({value}) must be divisible by {by_name} ({by})")


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return _is_int(value) or isinstance(value, (float, np.floating))


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
