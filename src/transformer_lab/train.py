"""Hydra entry point: config -> task (datamodule) -> TransformerPredictor (sized by the task) -> Trainer.

    python train.py [overrides]                   # from a checkout
    python -m transformer_lab.train [overrides]   # from anywhere, once installed

Tests call `train(cfg)` with a config from Hydra's compose API (`initialize_config_module(CONFIG_MODULE)`).

Torch and Lightning are imported inside the functions that use them, after Hydra has parsed the command
line: `python train.py --help` and Hydra's own argument errors answer without loading them, and Lightning,
imported once Hydra has set up logging, sends its messages to train.log (see transformer_lab.console).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
import hydra.errors
import hydra.utils
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from transformer_lab import console, pretrained
from transformer_lab.errors import ConfigError, require

if TYPE_CHECKING:
    import lightning as L

    from transformer_lab.predictor import TransformerPredictor

log = logging.getLogger(__name__)
SCRIPTS_DIR = Path(__file__).resolve().parents[2] / "scripts"  # in a checkout: the analysis scripts
CONFIG_MODULE = "transformer_lab.configs"  # the repository's configs/, installed inside the package


def instantiate(config: DictConfig, **kwargs: object) -> object:
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
    import torch

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
    on CUDA, bf16-mixed precision where supported and TF32 matmuls. The console gets one line per
    validation; Lightning's model table gives way to train()'s one-line summary unless
    `trainer.enable_model_summary=true`; the progress bar shows where someone watches (progress.py)."""
    import torch

    from transformer_lab.checkpoint_io import AtomicCheckpointIO
    from transformer_lab.progress import ValidationLog, bar_only_where_watched

    check_accelerator(cfg.trainer.accelerator)
    on_cuda = torch.cuda.is_available() and str(cfg.trainer.accelerator) in ("auto", "gpu", "cuda")
    extra = {}
    if cfg.trainer.get("precision") is None:
        extra["precision"] = "bf16-mixed" if on_cuda and torch.cuda.is_bf16_supported() else "32-true"
    if cfg.trainer.get("enable_model_summary") is None:
        extra["enable_model_summary"] = False
    if on_cuda:
        torch.set_float32_matmul_precision("high")
    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    loggers = [instantiate(lg) for lg in (cfg.get("logger") or {}).values() if lg is not None]
    trainer = instantiate(
        cfg.trainer,
        callbacks=[*callbacks, ValidationLog()],
        logger=loggers or False,
        plugins=[AtomicCheckpointIO()],
        **extra,
    )
    bar_only_where_watched(trainer, cfg.trainer.get("enable_progress_bar"))
    return trainer


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
            not pretrained.is_pretrained(str(ckpt_path)),
            f"ckpt_path={ckpt_path} is a ready-made model: it holds weights but no optimizer state, so no "
            "run can resume from it; train your own run (python train.py ...) and resume that",
        )
        require(
            Path(ckpt_path).is_file(),
            f"ckpt_path={ckpt_path} does not exist; pass a checkpoint such as <run>/checkpoints/last.ckpt",
        )
    return ckpt_path


def check_resumable(ckpt_path: str, model: TransformerPredictor, trainer: L.Trainer) -> None:
    """Read the checkpoint safely (weights_only) and check it fits the configured model and data, and that
    it has training left to do under the configured limits."""
    from transformer_lab.checkpoints import model_from_checkpoint, read_checkpoint

    checkpoint = read_checkpoint(ckpt_path)
    saved = model_from_checkpoint(checkpoint, ckpt_path).config.architecture()
    configured = model.net.config.architecture()
    diffs = [f"{k}={v!r} (config: {configured[k]!r})" for k, v in saved.items() if v != configured[k]]
    require(
        not diffs,
        f"ckpt_path={ckpt_path} was trained with another model or data: {', '.join(diffs)}; "
        "resume with the task and model settings it was trained with",
    )
    finished_epochs = checkpoint.get("callbacks", {}).get("LastCheckpoint", {}).get("finished_epochs")
    step, max_steps, max_epochs = checkpoint.get("global_step", 0), trainer.max_steps, trainer.max_epochs
    steps_left = max_steps < 0 or step < max_steps
    epochs_left = (
        max_epochs is None or max_epochs < 0 or finished_epochs is None or finished_epochs < max_epochs
    )
    require(
        steps_left and epochs_left,
        f"{ckpt_path} is of a run that finished training (epoch {finished_epochs}, step {step}); "
        f"with trainer.max_epochs={max_epochs} and trainer.max_steps={max_steps} there is nothing left to "
        "train: raise the limit that stopped it (e.g. "
        + (
            f"trainer.max_epochs={2 * (finished_epochs or 1)})"
            if steps_left
            else f"trainer.max_steps={2 * step})"
        )
        + ", or start a new run without resume=/ckpt_path=",
    )


def check_launch_in_sweep(cfg: DictConfig, trainer: L.Trainer) -> None:
    """Lightning's `ddp` starts the other ranks by re-running the command line, which in a local sweep is the
    whole sweep (and only once per process). On SLURM the ranks are SLURM tasks, so sweeps work there."""
    strategy = trainer.strategy
    reruns_command = (
        str(cfg.trainer.get("strategy")) == "ddp"  # ddp_spawn / ddp_fork start processes differently
        and trainer.world_size > 1
        and not strategy.cluster_environment.creates_processes_externally
    )
    require(
        not (HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN and reruns_command),
        "trainer.strategy=ddp cannot start its processes inside a local sweep (-m); run DDP jobs one at "
        "a time without -m, or sweep on a SLURM cluster with hydra/launcher=slurm",
    )


def train(cfg: DictConfig) -> dict:
    """Fit, test the best checkpoint, write metrics.json in the run directory, and return the metrics."""
    import lightning as L

    from transformer_lab.config_checks import check_targets, check_types
    from transformer_lab.predictor import build_predictor

    start = time.perf_counter()
    output_dir = Path(cfg.paths.output_dir)
    console.ignore_known_noise()
    check_targets(cfg)
    check_types(cfg)
    ckpt_path = resume_checkpoint(cfg)
    if cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True, verbose=False)

    task = instantiate(cfg.data)
    settings = OmegaConf.to_container(cfg.model, resolve=True)
    model = build_predictor(settings, task)
    trainer = build_trainer(cfg)
    if ckpt_path is not None:
        check_resumable(ckpt_path, model, trainer)
    check_launch_in_sweep(cfg, trainer)
    log.info(
        f"Training on {trainer.strategy.root_device} ({trainer.precision} precision); "
        f"run directory {console.shown_path(output_dir)}"
    )
    log.info(console.model_summary(model.net))

    trainer.fit(model, datamodule=task, ckpt_path=ckpt_path, weights_only=True)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    best = trainer.checkpoint_callback
    best_path = getattr(best, "best_model_path", "") or None
    # read before testing: loading best.ckpt for the test restores the callbacks' state saved in it,
    # which predates the score of best.ckpt itself
    best_score = getattr(best, "best_model_score", None) if best_path else None
    global_step = trainer.global_step
    if cfg.get("test", True) and not trainer.interrupted:
        results = trainer.test(model, datamodule=task, ckpt_path=best_path, verbose=False, weights_only=True)
        metrics.update({k: float(v) for k, v in results[0].items()})
    metrics.update(
        metric=cfg.metric,
        best_score=best_score,
        best_ckpt_path=best_path,
        global_step=global_step,
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
    hparams = trainer.lightning_module.hparams
    flat = {
        **{f"model.{k}": v for k, v in hparams["net"].items() if k != "vocab"},
        **{f"model.{k}": v for k, v in hparams.items() if k != "net"},
        **{
            f"data.{k}": v
            for k, v in OmegaConf.to_container(cfg.data, resolve=True).items()
            if k != "_target_"
        },
        "seed": cfg.get("seed"),
    }
    flat = {k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in flat.items()}
    for logger in trainer.loggers:
        logger.log_hyperparams(flat, metrics=scores)
        # Write these last records now: the Trainer already finalized its loggers, and leaving the flush
        # to garbage collection at exit can lose them (the last job of a sweep then has no hp/ scalars).
        logger.finalize("success")
    scripts = SCRIPTS_DIR if SCRIPTS_DIR.is_dir() else None
    for line in console.run_summary(output_dir, metrics, metrics.get("best_ckpt_path"), scripts):
        log.info(line)


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


def _remove_unused_run_dir(output_dir: Path) -> None:
    """After a config error: remove the run directory Hydra made for this run if it holds nothing but
    Hydra's own files (`.hydra/`, the log), so a mistake leaves no run behind for summarize.py to list."""
    if output_dir.is_dir() and {p.name for p in output_dir.iterdir()} <= {".hydra", "train.log"}:
        shutil.rmtree(output_dir, ignore_errors=True)


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


class SweepJobError(hydra.errors.CompactHydraException):
    """A user mistake in one job of a sweep: Hydra records the job as failed (Optuna: a failed trial), the
    sweep goes on, and the message is printed as one line."""


@hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Returns the task's metric (for Hydra sweepers); a user mistake prints one line and exits 2 (in a
    sweep: fails that job only)."""
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    console.lightning_logs_to_root()
    logging.captureWarnings(True)  # library warnings go to train.log as well as to the console
    try:
        metrics = train(cfg)
    except Exception as exc:
        error = user_error(exc)
        if error is None:
            # the traceback in train.log too (Hydra prints it on the console)
            log.exception("training failed", extra={"console": False})
            raise
        log.info(f"error: {error}", extra={"console": False})  # printed below, once
        if multirun:
            raise SweepJobError(f"error: {error}") from None
        _remove_unused_run_dir(Path(HydraConfig.get().runtime.output_dir))
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    return metrics.get(cfg.metric)


if __name__ == "__main__":
    main()
