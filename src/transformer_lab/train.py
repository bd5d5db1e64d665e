"""Hydra entry point: config -> datamodule -> model (sized from the datamodule) -> Trainer -> run directory.

`python train.py [overrides]` calls `main`; tests call `train(cfg)` with a config from Hydra's compose API.
"""

import inspect
import json
import logging
import os
import sys
import time
from pathlib import Path

import hydra
import hydra.errors
import hydra.utils
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from lightning.pytorch.strategies.launchers import _SubprocessScriptLauncher
from omegaconf import DictConfig, OmegaConf

from transformer_lab.checkpoints import AtomicCheckpointIO, read_checkpoint
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
    return instantiate(
        cfg.trainer, callbacks=callbacks, logger=loggers or False, plugins=[AtomicCheckpointIO()], **extra
    )


# Hyperparameters that fix the shapes of the weights: a checkpoint can only resume into the same ones.
ARCHITECTURE = (
    "vocab_size", "num_classes", "model_dim", "num_heads", "num_layers", "dim_feedforward", "mlp_ratio",
    "positional_encoding", "max_len", "causal", "output_mlp", "tie_embeddings", "norm_first", "activation",
    "bias",
)  # fmt: skip
# Configs may instantiate classes from these packages only.
ALLOWED_TARGETS = ("transformer_lab.", "lightning.pytorch.", "torch.")


def check_targets(cfg: DictConfig) -> None:
    """Refuse a config whose `_target_` names a class outside the project and the listed libraries
    (Hydra's own `hydra.*` settings, which name its launchers and sweepers, are Hydra's business)."""

    def walk(node: object, key: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "_target_":
                    require(
                        str(v).startswith(ALLOWED_TARGETS),
                        f"{key}._target_={v} is not allowed; configs may only instantiate classes from "
                        f"{', '.join(t.rstrip('.') for t in ALLOWED_TARGETS)}",
                    )
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{key}[{i}]")

    user_config = {k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items() if k != "hydra"}
    walk(user_config, "")


def resume_checkpoint(cfg: DictConfig) -> str | None:
    """The checkpoint to resume from: `ckpt_path=FILE`, or `resume=<run dir>` (its checkpoints/last.ckpt),
    or `resume=auto` (the newest last.ckpt of this task under paths.log_dir)."""
    ckpt_path, resume = cfg.get("ckpt_path"), cfg.get("resume")
    if resume is not None:
        require(ckpt_path is None, "pass either resume= or ckpt_path=, not both")
        if str(resume) == "auto":
            task_dir = Path(cfg.paths.log_dir) / cfg.task_name
            runs = sorted(task_dir.glob("*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime)
            require(
                bool(runs), f"resume=auto found no {task_dir}/<run>/checkpoints/last.ckpt; train a run first"
            )
            ckpt_path = str(runs[-1])
        else:
            ckpt_path = str(Path(resume) / "checkpoints" / "last.ckpt")
            require(
                Path(ckpt_path).is_file(),
                f"resume={resume} has no checkpoints/last.ckpt; pass a run directory such as "
                f"{cfg.paths.log_dir}/{cfg.task_name}/<date>_<time>",
            )
        log.info(f"Resuming from {ckpt_path}")
    if ckpt_path is not None:
        require(
            Path(ckpt_path).is_file(),
            f"ckpt_path={ckpt_path} does not exist; pass a checkpoint such as <run>/checkpoints/last.ckpt",
        )
    return ckpt_path


def check_resumable(ckpt_path: str, model: L.LightningModule) -> None:
    """Read the checkpoint safely (weights_only) and check it fits the configured model and data."""
    saved = read_checkpoint(ckpt_path)["hyper_parameters"]
    # A checkpoint older than a hyperparameter lacks it; loading it gives the constructor's default.
    defaults = {k: p.default for k, p in inspect.signature(type(model)).parameters.items()}
    architecture = {k: saved.get(k, defaults.get(k)) for k in ARCHITECTURE}
    diffs = [
        f"{k}={v!r} (config: {model.hparams[k]!r})" for k, v in architecture.items() if v != model.hparams[k]
    ]
    require(
        not diffs,
        f"ckpt_path={ckpt_path} was trained with another model or data: {', '.join(diffs)}; "
        "resume with the task and model settings it was trained with",
    )
    require(
        saved.get("vocab") == model.hparams.vocab,
        f"ckpt_path={ckpt_path} was trained on another vocabulary (a different data file?); "
        "resume with the data it was trained on",
    )


def check_launch_in_sweep(trainer: L.Trainer) -> None:
    """Lightning's `ddp` starts the other ranks by re-running the command line, which in a local sweep is the
    whole sweep (and only once per process). On SLURM the ranks are SLURM tasks, so sweeps work there."""
    launcher = trainer.strategy.launcher
    require(
        not (
            HydraConfig.initialized()
            and HydraConfig.get().mode == RunMode.MULTIRUN
            and isinstance(launcher, _SubprocessScriptLauncher)
            and not launcher.cluster_environment.creates_processes_externally
        ),
        "trainer.strategy=ddp cannot start its processes inside a local sweep (-m); run DDP jobs one at "
        "a time without -m, or sweep on a SLURM cluster with hydra/launcher=slurm",
    )


def train(cfg: DictConfig) -> dict:
    """Fit, test the best checkpoint, write metrics.json in the run directory, and return the metrics."""
    start = time.perf_counter()
    output_dir = Path(cfg.paths.output_dir)
    check_targets(cfg)
    ckpt_path = resume_checkpoint(cfg)
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
    if ckpt_path is not None:
        check_resumable(ckpt_path, model)
    trainer = build_trainer(cfg)
    check_launch_in_sweep(trainer)
    log.info(
        f"Training on {trainer.strategy.root_device} ({trainer.precision} precision), run dir {output_dir}"
    )

    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
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
        # Write these last records now: the Trainer already finalized its loggers, and leaving the flush
        # to garbage collection at exit can lose them (the last job of a sweep then has no hp/ scalars).
        logger.finalize("success")
    summary = "  ".join(f"{k}={v:.4f}" for k, v in metrics.items() if k.startswith("test/"))
    log.info(f"Test: {summary or 'skipped'}")
    log.info(f"Metrics written to {output_dir / 'metrics.json'}")


class RunDirectories(Callback):
    """Hydra callback, run before Hydra creates any directory: an unwritable `paths.log_dir` is a one-line
    error instead of a traceback from inside Hydra; a sweep's directory is created up front, so the sweeper
    can keep files there before the first job runs (the Optuna sweeper's SQLite study)."""

    def on_run_start(self, config: DictConfig, **kwargs: object) -> None:
        _exit_unless_writable(config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: object) -> None:
        _exit_unless_writable(config.hydra.sweep.dir)
        Path(config.hydra.sweep.dir).mkdir(parents=True, exist_ok=True)


def _exit_unless_writable(directory: str) -> None:
    existing = Path(directory).absolute()
    while not existing.exists():
        existing = existing.parent
    if not (existing.is_dir() and os.access(existing, os.W_OK)):
        print(
            f"error: cannot create the run directory {directory}: {existing} is not a writable directory; "
            "set paths.log_dir to a writable place",
            file=sys.stderr,
        )
        sys.exit(2)


def user_error(exc: BaseException) -> ConfigError | None:
    """The ConfigError behind `exc`, if any (Hydra's instantiate wraps exceptions raised in __init__)."""
    while exc is not None:
        if isinstance(exc, ConfigError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


class SweepJobError(hydra.errors.CompactHydraException):
    """A user mistake in one job of a sweep: Hydra records the job as failed (Optuna: a failed trial), the
    sweep goes on, and the message is printed as one line."""


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Returns the task's metric (for Hydra sweepers); a user mistake prints one line and exits 2 (in a
    sweep: fails that job only)."""
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        metrics = train(cfg)
    except Exception as exc:
        error = user_error(exc)
        if error is None:
            raise
        if multirun:
            raise SweepJobError(f"error: {error}") from None
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    return metrics.get(cfg.metric)
