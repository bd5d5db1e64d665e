"""The names of earlier versions, in one place: they keep working for a while, each use with a
DeprecationWarning that names its new home (as TransformerLens retires its names).

    transformer_lab.callbacks      -> transformer_lab.training.callbacks
    transformer_lab.interventions  -> transformer_lab.analysis.interventions
    transformer_lab.lens           -> transformer_lab.analysis.lens
    transformer_lab.faithfulness   -> transformer_lab.analysis.faithfulness
    transformer_lab.checkpoints    -> transformer_lab.load (read_checkpoint, task_from_checkpoint, ...)
    transformer_lab.training.schedulers -> transformer_lab.nn.schedules
    transformer_lab.explain.<fn>   -> transformer_lab.analysis.explain.<fn>  (the tool keeps its name)
    transformer_lab.plots.<fn>     -> transformer_lab.figures.<fn>           (the tool keeps its name)

`install()` (run by `transformer_lab/__init__.py`) puts a light module in `sys.modules` for each moved
module: nothing is imported until one of its names is used.
"""

import importlib
import sys
import types
import warnings
from collections.abc import Callable

MOVED = {
    "callbacks": "transformer_lab.training.callbacks",
    "interventions": "transformer_lab.analysis.interventions",
    "lens": "transformer_lab.analysis.lens",
    "faithfulness": "transformer_lab.analysis.faithfulness",
    "checkpoints": "transformer_lab.deprecated_checkpoints",  # its functions, forwarding to the new names
    "training.schedulers": "transformer_lab.nn.schedules",
}


def warn(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)


def renamed(settings: dict, renames: dict[str, str | None], group: str) -> dict:
    """`settings` with each old key of `renames` under its new name (None: a setting that no longer
    means anything here, dropped), a DeprecationWarning for each one present. A value under both names
    is refused: the new one is meant."""
    out = dict(settings)
    for old, new in renames.items():
        if old not in out:
            continue
        value = out.pop(old)
        if new is None:
            message = f"{group}.{old} is deprecated and means nothing here"
            warnings.warn(message, DeprecationWarning, stacklevel=3)
            continue
        warn(f"{group}.{old}", f"{group}.{new}")
        if value is None:
            continue
        if out.get(new) is not None and out[new] != value:
            raise ValueError(f"{group}.{old}={value} and {group}.{new}={out[new]}: set only {group}.{new}")
        out[new] = value
    return out


INSTEAD = {  # what to use instead of the functions of transformer_lab.checkpoints
    "read_checkpoint": "transformer_lab.load(path).contents",
    "model_from_checkpoint": "transformer_lab.load(path).model",
    "tokenizer_from_checkpoint": "transformer_lab.load(path).tokenizer",
    "task_from_checkpoint": "transformer_lab.load(path).task",
    "load_model": "transformer_lab.load_model(path)",
}


def forward(old: str, new: str) -> Callable[[str], object]:
    """A module `__getattr__` that gives `new`'s names under the module name `old`, with a warning."""

    def __getattr__(name: str) -> object:
        if name.startswith("__"):  # the import system asks for __path__ etc.: nothing to load
            raise AttributeError(name)
        warn(
            f"{old}.{name}",
            INSTEAD.get(name, f"{new}.{name}") if new == MOVED["checkpoints"] else f"{new}.{name}",
        )
        return getattr(importlib.import_module(new), name)

    return __getattr__


class MovedModule(types.ModuleType):
    """A module name of an earlier version: each name read from it comes from its new home."""

    def __init__(self, old: str, new: str):
        super().__init__(old, f"Deprecated: use {new}.")
        self.__getattr__ = forward(old, new)

    def __getattr__(self, name: str) -> object:  # the instance's forward (set in __init__)
        return self.__dict__["__getattr__"](name)


def install() -> None:
    """Register every moved module name (`MOVED`) in `sys.modules`, once."""
    for old, new in MOVED.items():
        sys.modules.setdefault(f"transformer_lab.{old}", MovedModule(f"transformer_lab.{old}", new))
