"""Hydra entry point: config -> datamodule -> model (sized from the datamodule) -> Trainer -> run directory.

`python train.py [overrides]` calls `main`; tests call `train(cfg)` with a config from Hydra's compose API.
"""

import json
import logging
import sys
import time
from pathlib import Path

import hydra
import hydra.errors
import hydra.utils
import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from transformer_lab.errors import ConfigError, require

log = logging.getLogger(__name__)
CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "configs")


def instantiate(config: DictConfig, **kwargs):
    """hydra.utils.instantiate, re-raising the ConfigError a constructor raised instead of Hydra's wrapper."""
    try:
        return hydra.utils.instantiate(config, **kwargs)
    except hydra.errors.InstantiationException as exc:
        error = user_error(exc)
        if error is None:
            raise
        raise error from None


def check_accelerator(accelerator: str) -> None:
    """Fail early, in one line, when the requested device is not on this machine."""
    accelerator = str(accelerator)
    if accelerator in ("gpu", "cuda"):
        require(
            torch.cuda.is_available(),
            f"trainer.accelerator={accelerator} but no CUDA GPU is available; "
            "use trainer.accelerator=auto (or trainer=cpu)",
        )
    elif accelerator == "mps":
        require(
            torch.backends.mps.is_available(),
            "trainer.accelerator=mps but Apple's MPS backend is not available; use trainer.accelerator=auto",
        )
    else:
        require(
            accelerator in ("auto", "cpu"),
            f"trainer.accelerator={accelerator} is unknown; use auto, cpu, gpu/cuda or mps",
        )


def build_trainer(cfg: DictConfig) -> L.Trainer:
    """Instantiate the Trainer with the config's callbacks and loggers, and pick device defaults:
    on CUDA, bf16-mixed precision where supported and TF32 matmuls."""
    check_accelerator(cfg.trainer.accelerator)
    on_cuda = torch.cuda.is_available() and str(cfg.trainer.accelerator) in ("auto", "gpu", "cuda")
    extra = {}
    if cfg.trainer.get("precision") is None:
        extra["precision"] = "bf16-mixed" if on_cuda and torch.cuda.is_bf16_supported() else "32-true"
    if on_cuda:
        torch.set_float32_matmul_precision("high")
    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    loggers = [instantiate(lg) for lg in (cfg.get("logger") or {}).values() if lg is not None]
    return instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False, **extra)


def _existing_checkpoint(path: str | None) -> str | None:
    if path is None:
        return None
    require(
        Path(path).is_file(),
        f"ckpt_path={path} does not exist; pass a checkpoint such as <run>/checkpoints/last.ckpt",
    )
    return str(path)


def train(cfg: DictConfig) -> dict:
    """Fit, test the best checkpoint, write metrics.json in the run directory, and return the metrics."""
    start = time.perf_counter()
    output_dir = Path(cfg.paths.output_dir)
    ckpt_path = _existing_checkpoint(cfg.get("ckpt_path"))
    if cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True)

    datamodule = instantiate(cfg.data)
    model = instantiate(
        cfg.model,
        vocab_size=datamodule.vocab_size,
        num_classes=datamodule.num_classes,
        vocab=datamodule.vocab,
        block_size=datamodule.block_size,
    )
    trainer = build_trainer(cfg)
    log.info(
        f"Training on {trainer.strategy.root_device} ({trainer.precision} precision), run dir {output_dir}"
    )

    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    checkpoint = trainer.checkpoint_callback
    best_path = checkpoint.best_model_path if checkpoint is not None else ""
    if cfg.get("test", True) and not trainer.interrupted:
        results = trainer.test(model, datamodule=datamodule, ckpt_path=best_path or None, verbose=False)
        metrics.update({k: float(v) for k, v in results[0].items()})
    metrics.update(
        metric=cfg.metric,
        best_score=float(checkpoint.best_model_score)
        if best_path and checkpoint.best_model_score is not None
        else None,
        best_ckpt_path=best_path or None,
        global_step=trainer.global_step,
        device=str(trainer.strategy.root_device),
        wall_time_s=round(time.perf_counter() - start, 2),
    )
    if trainer.is_global_zero:
        _write_results(trainer, cfg, metrics, output_dir)
    return metrics


def _write_results(trainer: L.Trainer, cfg: DictConfig, metrics: dict, output_dir: Path) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    scores = {f"hp/{k.replace('/', '_')}": v for k, v in metrics.items() if "/" in k}
    hparams = {
        **{f"model.{k}": v for k, v in trainer.lightning_module.hparams.items() if k != "vocab"},
        **{
            f"data.{k}": v
            for k, v in OmegaConf.to_container(cfg.data, resolve=True).items()
            if k != "_target_"
        },
        "seed": cfg.get("seed"),
    }
    hparams = {k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in hparams.items()}
    for logger in trainer.loggers:
        logger.log_hyperparams(hparams, metrics=scores)
    summary = "  ".join(f"{k}={v:.4f}" for k, v in metrics.items() if k.startswith("test/"))
    log.info(f"Test: {summary or 'skipped'}")
    log.info(f"Metrics written to {output_dir / 'metrics.json'}")


def user_error(exc: BaseException) -> ConfigError | None:
    """The ConfigError behind `exc`, if any (Hydra's instantiate wraps exceptions raised in __init__)."""
    while exc is not None:
        if isinstance(exc, ConfigError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Returns the task's metric (for Hydra sweepers); a user mistake prints one line and exits 2."""
    try:
        metrics = train(cfg)
    except Exception as exc:
        error = user_error(exc)
        if error is None:
            raise
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    return metrics.get(cfg.metric)
