"""Checks of a composed training config, run before anything is built: which classes it may instantiate,
and whether every value has the type its class or function expects (`seed=abc`,
`trainer.max_steps=ten` are one-line errors, not tracebacks from deep inside a library)."""

import importlib
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import is_dataclass

from omegaconf import DictConfig, ListConfig, OmegaConf

from transformer_lab.errors import ConfigError, require

# The classes a config may instantiate, by exact name; a task's `data._target_` may also name any
# TaskDataModule subclass (a task of your own). Hydra's own `hydra.*` settings are Hydra's business.
ALLOWED_TARGETS = frozenset(
    {
        "lightning.pytorch.Trainer",
        *(
            f"lightning.pytorch.callbacks.{name}"
            for name in (
                "DeviceStatsMonitor",
                "EarlyStopping",
                "GradientAccumulationScheduler",
                "LearningRateMonitor",
                "ModelSummary",
                "RichModelSummary",
                "RichProgressBar",
                "StochasticWeightAveraging",
                "TQDMProgressBar",
                "Timer",
            )
        ),
        "lightning.pytorch.loggers.CSVLogger",
        "lightning.pytorch.loggers.TensorBoardLogger",
        "lightning.pytorch.profilers.AdvancedProfiler",
        "lightning.pytorch.profilers.PyTorchProfiler",
        "lightning.pytorch.profilers.SimpleProfiler",
        "lightning.pytorch.strategies.DDPStrategy",
        *(
            f"transformer_lab.callbacks.{name}"
            for name in (
                "AttentionMapCallback",
                "BestCheckpoint",
                "FiniteLossCheck",
                "FitTimer",
                "HeadMetricsCallback",
                "LastCheckpoint",
                "TextSampleCallback",
            )
        ),
    }
)
TOP_LEVEL_TYPES = {"seed": int | None, "test": bool, "ckpt_path": str | None, "resume": str | None}


def import_target(path: str) -> object:
    """The object a `_target_` names (module.attribute)."""
    module_name, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"_target_={path} cannot be imported: {exc}") from None


def check_targets(cfg: DictConfig) -> None:
    """Refuse a config whose `_target_` names anything but the allowed classes (and tasks)."""
    from transformer_lab.data.task import TaskDataModule

    def walk(node: object, key: str) -> None:
        if isinstance(node, dict):
            target = node.get("_target_")
            if target is not None:
                if key == "data" and str(target) not in ALLOWED_TARGETS:
                    cls = import_target(str(target))
                    require(
                        isinstance(cls, type) and issubclass(cls, TaskDataModule),
                        f"data._target_={target} is not a task; it must name a TaskDataModule subclass",
                    )
                else:
                    require(
                        str(target) in ALLOWED_TARGETS,
                        f"{key}._target_={target} is not allowed; configs may only instantiate the classes "
                        "listed in transformer_lab.config_checks.ALLOWED_TARGETS (and tasks under data)",
                    )
            for k, v in node.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{key}[{i}]")

    walk({k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items() if k != "hydra"}, "")


def check_types(cfg: DictConfig) -> None:
    """Every value of every `_target_` node (trainer, data, callbacks, loggers), and the top-level keys,
    against the type annotations of the class or function it goes to."""
    check_values(TOP_LEVEL_TYPES, {k: cfg.get(k) for k in TOP_LEVEL_TYPES if k in cfg}, "")

    def walk(node: object, key: str) -> None:
        if isinstance(node, dict):
            if "_target_" in node:
                target = import_target(str(node["_target_"]))
                check_arguments(target, {k: v for k, v in node.items() if not k.startswith("_")}, key)
            for k, v in node.items():
                walk(v, f"{key}.{k}")

    for key in ("trainer", "data", "callbacks", "logger"):
        node = cfg.get(key)
        if isinstance(node, DictConfig):
            walk(OmegaConf.to_container(node, resolve=True), key)


def check_arguments(target: Callable, values: Mapping, prefix: str) -> None:
    """Check `values` against the annotations of `target`'s parameters (a class: its constructor); an
    unknown key is an error too, unless `target` takes **kwargs."""
    function = target.__init__ if isinstance(target, type) and not is_dataclass(target) else target
    parameters = inspect.signature(target).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    unknown = sorted(set(values) - set(parameters))
    if unknown and not takes_any:
        name = getattr(target, "__name__", str(target))
        raise ConfigError(
            f"{prefix}.{unknown[0]} is not an argument of {name}; it takes {', '.join(parameters)}"
        )
    try:
        hints = typing.get_type_hints(function)
    except (NameError, TypeError):  # annotations that cannot be resolved here: nothing to check against
        return
    check_values(hints, {k: v for k, v in values.items() if k in parameters}, prefix)


def check_values(hints: Mapping[str, object], values: Mapping, prefix: str) -> None:
    for key, value in values.items():
        if key in hints and not matches(value, hints[key]):
            name = f"{prefix}.{key}" if prefix else key
            raise ConfigError(f"{name}={value!r} must be {describe(hints[key])}")


def matches(value: object, hint: object) -> bool:
    """Whether `value` (plain YAML data) can be `hint`. Types that YAML cannot express pass."""
    if hint is typing.Any:
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, arg) for arg in args)
    if origin is typing.Literal:
        return value in args
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (list, tuple) or hint in (list, tuple):
        return isinstance(value, list | tuple | ListConfig)
    if origin is dict or hint is dict:
        return isinstance(value, dict | DictConfig)
    return True  # a class or protocol a YAML value cannot be checked against


def describe(hint: object) -> str:
    """How to say what a type is, for an error message."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        literals = [
            v for arg in args if typing.get_origin(arg) is typing.Literal for v in typing.get_args(arg)
        ]
        others = [describe(arg) for arg in args if typing.get_origin(arg) is not typing.Literal]
        names = ([describe(typing.Literal[tuple(literals)])] if literals else []) + others
        return " or ".join(dict.fromkeys(names))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    names = {type(None): "null", bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if hint in names:
        return names[hint]
    if origin in (list, tuple) or hint in (list, tuple):
        return "a list"
    return getattr(hint, "__name__", str(hint))
