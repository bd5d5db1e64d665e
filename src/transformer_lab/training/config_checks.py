"""Checks of a composed training config, run before anything is built: which classes it may instantiate,
and whether every value has the type its class or function expects (`seed=abc`,
`trainer.max_steps=ten` are one-line errors, not tracebacks from deep inside a library)."""

import copy
import functools
import importlib
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import is_dataclass
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from transformer_lab.errors import ConfigError, require

CALLBACKS = (
    "AttentionMapCallback",
    "BestCheckpoint",
    "FiniteLossCheck",
    "FitTimer",
    "HeadMetricsCallback",
    "LastCheckpoint",
    "PhaseChange",
    "Snapshots",
    "TextSampleCallback",
)
# The classes a config may instantiate, by exact name; a task's `data._target_` may also name a task of
# your own (found as `transformer_lab.data.find` says). This package's callbacks are allowed under their
# old names too (`transformer_lab.callbacks.*`), which the configs of earlier runs name.
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
        "transformer_lab.training.callbacks.HookTimes",
        "transformer_lab.training.progress.CompactProgressBar",
        *(f"transformer_lab.training.callbacks.{name}" for name in CALLBACKS),
        *(f"transformer_lab.callbacks.{name}" for name in CALLBACKS),
    }
)
TOP_LEVEL_TYPES = {
    "seed": int | None,
    "test": bool,
    "ckpt_path": str | None,
    "resume": str | None,
    "threads": str | int,
    "console": list,
}


def import_target(path: str) -> object:
    """The object a `_target_` names (module.attribute)."""
    module_name, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"_target_={path} cannot be imported: {exc}") from None


def resolved(cfg: DictConfig, output_dir: str | Path | None = None) -> dict:
    """The whole config with every interpolation resolved, as it will be in the run. With `output_dir`,
    Hydra's part is resolved as for a run writing there (a composed config that Hydra's main has not set
    up yet); without it, Hydra's own settings (HydraConfig) are those of the running job."""
    from hydra.core.hydra_config import HydraConfig

    if output_dir is not None and "hydra" in cfg:
        cfg = copy.deepcopy(cfg)
        for node in (cfg, cfg.hydra, cfg.hydra.runtime, cfg.hydra.job):
            OmegaConf.set_readonly(node, False)
        cfg.hydra.runtime.output_dir = str(output_dir)
        cfg.hydra.job.num = 0
        HydraConfig.instance().set_config(cfg)
    try:
        if output_dir is not None:
            return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
        # the job's config: Hydra's part (if composed with it) is Hydra's, already running
        plain = {}
        for key in cfg:
            if key != "hydra":
                value = OmegaConf.select(cfg, str(key), throw_on_missing=False)
                is_node = isinstance(value, DictConfig | ListConfig)
                plain[key] = OmegaConf.to_container(value, resolve=True) if is_node else value
        return plain
    except Exception as exc:  # an interpolation that cannot be resolved: a config mistake
        raise ConfigError(f"the config cannot be resolved: {' '.join(str(exc).split())[:300]}") from None


def check_targets(cfg: DictConfig, output_dir: str | Path | None = None) -> None:
    """Refuse a config that would instantiate anything but the allowed classes (and tasks): every node,
    after resolving its interpolations (`${oc.decode:...}` can make an instantiable node); see `resolved`
    for `output_dir`."""
    check_instantiable(resolved(cfg, output_dir))


# Where in the config Hydra's own instantiable nodes are, and what they may name.
HYDRA_TARGETS = {
    "hydra.callbacks": set(),  # train.py claims its directory before Hydra runs: no callback of Hydra's
    "hydra.launcher": {
        "hydra._internal.core_plugins.basic_launcher.BasicLauncher",
        "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher",
        "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
    },
    "hydra.sweeper.sampler": {
        f"optuna.samplers.{name}"
        for name in (
            "TPESampler",
            "RandomSampler",
            "CmaEsSampler",
            "NSGAIISampler",
            "GridSampler",
            "QMCSampler",
        )
    },
    "hydra.sweeper": {
        "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
        "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper",
    },
}
LOGGING_FACTORIES = {  # `()` and `class` in hydra.job_logging / hydra.hydra_logging
    "logging.Formatter",
    "logging.StreamHandler",
    "logging.FileHandler",
    "logging.NullHandler",
    "transformer_lab.training.console.ConsoleFormatter",
    "transformer_lab.training.console.ConsoleFilter",
    "transformer_lab.training.console.ConsoleHandler",
}
LOGGING_STREAMS = {"ext://sys.stdout", "ext://sys.stderr"}


def _walk(node: object, path: str) -> Iterator[tuple[str, dict]]:
    """Every mapping of a plain (resolved) config, with its dotted path."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}[{i}]")


def _allowed_here(path: str, target: str) -> bool:
    for prefix, allowed in HYDRA_TARGETS.items():
        if path == prefix:
            return target in allowed
    return target in ALLOWED_TARGETS and not path.startswith("hydra")


@functools.cache
def shipped_tasks() -> frozenset[str]:
    """The tasks the package ships: the `_target_` of each of its own configs/data/*.yaml, read as text
    (knowing them needs no import of PyTorch, so train.py's checks answer in a fraction of a second)."""
    from importlib import resources

    folder = resources.files("transformer_lab.configs").joinpath("data")
    targets = set()
    for entry in folder.iterdir():
        if entry.name.endswith(".yaml"):
            targets.update(re.findall(r"^_target_: *([\w.]+) *$", entry.read_text(), flags=re.MULTILINE))
    return frozenset(targets)


def check_instantiable(resolved: dict) -> None:
    """Every node Hydra or train.py would call, in a fully resolved config (hydra node included)."""
    for path, node in _walk(resolved, ""):
        target = node.get("_target_")
        if target is not None:
            if path == "data" and str(target) in shipped_tasks():
                continue  # one of the package's own tasks
            if path == "data" and str(target) not in ALLOWED_TARGETS:
                from transformer_lab.data.find import task_class  # PyTorch: only for a task of one's own

                try:
                    task_class(str(target))
                except ConfigError as error:
                    raise ConfigError(f"data._target_={target} is not a task: {error}") from None
            else:
                require(
                    _allowed_here(path, str(target)),
                    f"{path}._target_={target} is not allowed; configs may only instantiate the classes in "
                    "transformer_lab.training.config_checks.ALLOWED_TARGETS (and tasks under data)",
                )
        if path.startswith(("hydra.job_logging", "hydra.hydra_logging")):
            for key in ("()", "class"):
                if key in node:
                    require(
                        str(node[key]) in LOGGING_FACTORIES,
                        f"{path}.{key}={node[key]} is not allowed in Hydra's logging config; "
                        f"it may only name {', '.join(sorted(LOGGING_FACTORIES))}",
                    )
            for key, value in node.items():
                if isinstance(value, str) and value.startswith("ext://"):
                    require(
                        value in LOGGING_STREAMS,
                        f"{path}.{key}={value} is not allowed; logging may only write to ext://sys.stdout "
                        "or ext://sys.stderr",
                    )


def check_types(cfg: DictConfig) -> None:
    """Every value of every `_target_` node (trainer, data, callbacks, loggers), and the top-level keys,
    against the type annotations of the class or function it goes to."""
    check_top_level({k: cfg.get(k) for k in TOP_LEVEL_TYPES if k in cfg})

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
    trainer = cfg.get("trainer")
    if isinstance(trainer, DictConfig):
        check_trainer_ranges(OmegaConf.to_container(trainer, resolve=True))


# Trainer settings Lightning takes without a check and then divides by, or reads a sign of as "off":
# what a value must be, as a test and in words.
TRAINER_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    "accumulate_grad_batches": (
        lambda v: v >= 1,
        "a positive integer: the batches whose gradients make one step",
    ),
    "check_val_every_n_epoch": (
        lambda v: v >= 1,
        "a positive integer (or null: validate by trainer.val_check_interval)",
    ),
    "val_check_interval": (
        lambda v: v > 0,
        "a share of an epoch in (0, 1], a number of batches, or a time DD:HH:MM:SS",
    ),
    "gradient_clip_val": (lambda v: v >= 0, "at least 0 (0 or null: no clipping)"),
}


def check_trainer_ranges(trainer: Mapping) -> None:
    """The trainer's settings that have the right type but a value Lightning would divide by zero with
    (`trainer.accumulate_grad_batches=0`) or silently ignore (a negative clipping value)."""
    for key, (allowed, meaning) in TRAINER_RANGES.items():
        value = trainer.get(key)
        numeric = isinstance(value, int | float)  # other types: check_types has judged them
        require(not numeric or allowed(value), f"trainer.{key}={value} must be {meaning}")


MAX_SEED = 2**32 - 1  # numpy's seeds (Lightning seeds numpy, random and torch with the same number)


def check_top_level(values: Mapping) -> None:
    """The top-level settings (`seed`, `test`, `ckpt_path`, `resume`, `threads`): their types, and a seed
    every generator takes."""
    check_values(TOP_LEVEL_TYPES, {k: v for k, v in values.items() if k in TOP_LEVEL_TYPES}, "")
    check_seed(values.get("seed"))


def check_seed(seed: int | None) -> None:
    """A seed every generator takes (train.py's `seed=`, sample's), or None for a random one."""
    require(
        seed is None or 0 <= seed <= MAX_SEED,
        f"seed={seed} is out of range; use an integer from 0 to {MAX_SEED} (or seed=null for a random one)",
    )


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
