"""The config and the model `python train.py <overrides>` would build, for tools that look before training.

    cfg = compose_config(["model.model_dim=100"])      # Hydra's compose API, train.py's config
    task, model = task_and_model(cfg)                  # the task and its freshly initialised model

Mistakes in the overrides are one-line ConfigErrors, as in train.py.
"""

from collections.abc import Sequence

from omegaconf import DictConfig

from transformer_lab.errors import ConfigError


def compose_config(overrides: Sequence[str]) -> DictConfig:
    """train.py's composed config for `overrides` (key=value strings)."""
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException

    from transformer_lab.config_checks import check_targets
    from transformer_lab.train import CONFIG_MODULE, user_error

    for token in overrides:
        if "=" not in token:
            raise ConfigError(f"argument {token!r} is not key=value; e.g. model.model_dim=100")
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            cfg = compose("train", overrides=list(overrides))
    except HydraException as exc:
        message = " ".join(str(exc).split("Config search path")[0].split())  # one line
        raise user_error(exc) or ConfigError(message) from exc
    check_targets(cfg)  # only the classes train.py may build (the values are checked as it builds them)
    return cfg


def task_and_model(cfg: DictConfig, seed: bool = True):
    """The task of `cfg` and the model train.py would start from (seeded with `cfg.seed` when `seed`):
    (TaskDataModule, TokenModel in train mode)."""
    import lightning as L
    from omegaconf import OmegaConf

    from transformer_lab.predictor import build_predictor
    from transformer_lab.train import instantiate

    if seed and cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True, verbose=False)  # as train.py: the same first weights
    task = instantiate(cfg.data)
    return task, build_predictor(OmegaConf.to_container(cfg.model, resolve=True), task).net
