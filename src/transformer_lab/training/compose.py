"""The training config: composed (the one composer: train.py's config for a list of overrides, as the
tools and the tests need it) and instantiated, with every mistake a one-line ConfigError.

    cfg = compose_config(["model.model_dim=100"])      # Hydra's compose API, train.py's config
    task, model = task_and_model(cfg)                  # the task and its freshly initialised model
"""

import difflib
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import hydra.errors
import hydra.utils
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from transformer_lab.errors import ConfigError

CONFIG_MODULE = "transformer_lab.configs"  # the repository's configs/, installed inside the package


def compose_config(overrides: Sequence[str], return_hydra_config: bool = False) -> DictConfig:
    """train.py's composed config for `overrides` (key=value strings)."""
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException

    from transformer_lab.training.config_checks import check_targets

    for token in overrides:
        if "=" not in token and not token.startswith("~"):
            raise ConfigError(f"argument {token!r} is not key=value; e.g. model.model_dim=100")
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
    except HydraException as exc:
        message = " ".join(str(exc).split("Config search path")[0].split())  # one line
        unknown = re.match(r"Could not override '([\w.]+)'", message)
        if unknown and user_error(exc) is None:
            message = misspelled(
                unknown.group(1), [o for o in overrides if not o.startswith(unknown.group(1))]
            )
        raise user_error(exc) or ConfigError(message) from exc
    # only the classes train.py may build (the values are checked as it builds them), in a run writing here
    check_targets(cfg, output_dir=Path.cwd() / "saved_models" / "run")
    if not return_hydra_config:
        with read_write(cfg), open_dict(cfg):
            del cfg["hydra"]
    return cfg


def misspelled(key: str, other_overrides: Sequence[str]) -> str:
    """The one line for an override of a key the config does not have: the closest keys it does have."""
    from hydra import compose, initialize_config_module

    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            cfg = compose("train", overrides=list(other_overrides))
    except Exception:  # the other overrides have mistakes of their own: suggest from the defaults
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            cfg = compose("train")
    keys = []

    def walk(node: object, prefix: str) -> None:
        if isinstance(node, dict):
            for name, value in node.items():
                keys.append(f"{prefix}{name}")
                walk(value, f"{prefix}{name}.")

    walk(OmegaConf.to_container(cfg, resolve=False), "")
    close = difflib.get_close_matches(key, [k for k in keys if k != key], n=1, cutoff=0.6)

    hint = f"did you mean {close[0]}?" if close else f"use +{key}=... to add a new key"
    return f"{key} is not a setting of the config; {hint} (python train.py --cfg job lists them)"


def run_config(output_dir: str | Path, overrides: Sequence[str] = ()) -> DictConfig:
    """The config `python train.py <overrides>` would run, writing into `output_dir` (its run directory
    and log directory), set up as Hydra's main sets it up, for `training.run.train(cfg)` in-process."""
    from hydra.core.hydra_config import HydraConfig

    paths = [f"paths.output_dir={output_dir}", f"paths.log_dir={output_dir}"]
    cfg = compose_config([*paths, *overrides], return_hydra_config=True)
    HydraConfig().set_config(cfg)
    return cfg


def task_and_model(cfg: DictConfig, seed: bool = True):
    """The task of `cfg` and the model train.py would start from (seeded with `cfg.seed` when `seed`):
    (TaskDataModule, TokenModel in train mode)."""
    import lightning as L
    from omegaconf import OmegaConf

    from transformer_lab.training.predictor import build_predictor

    if seed and cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True, verbose=False)  # as train.py: the same first weights
    task = instantiate(cfg.data)
    return task, build_predictor(OmegaConf.to_container(cfg.model, resolve=True), task).net


def instantiate(config: DictConfig, **kwargs: object) -> object:
    """hydra.utils.instantiate, re-raising the ConfigError a constructor raised instead of Hydra's wrapper."""
    try:
        return hydra.utils.instantiate(config, **kwargs)
    except hydra.errors.InstantiationException as exc:
        error = user_error(exc)
        if error is None:
            raise
        raise error from None


def user_error(exc: BaseException) -> ConfigError | None:
    """The user mistake behind `exc`, if any: a ConfigError, or Lightning's MisconfigurationException (a
    Trainer argument Lightning refuses), as a one-line ConfigError. Hydra's instantiate wraps them."""
    # Lightning's exception class, if Lightning is loaded at all (if not, it raised nothing)
    exceptions = sys.modules.get("lightning.fabric.utilities.exceptions")
    misconfiguration = getattr(exceptions, "MisconfigurationException", ())
    while exc is not None:
        if isinstance(exc, ConfigError):
            return exc
        if isinstance(exc, misconfiguration):
            return ConfigError(" ".join(str(exc).split()))
        exc = exc.__cause__ or exc.__context__
    return None
