"""One training run: config -> task (datamodule) -> TransformerPredictor (sized by the task) -> Trainer;
fit, test the best checkpoint, write metrics.json in the run directory.

Tests call `train(cfg)` with a config from Hydra's compose API (`training.compose.compose_config`); the
command line reaches it through `transformer_lab.train` (Hydra's main).
"""

import inspect
import json
import logging
import time
from pathlib import Path

import lightning as L
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from transformer_lab.data.activation_task import ActivationTask
from transformer_lab.data.task import TaskDataModule
from transformer_lab.errors import Terminated, require
from transformer_lab.files import write_text
from transformer_lab.training import console
from transformer_lab.training.callbacks.ctrl_c import StopOnCtrlC
from transformer_lab.training.callbacks.phase_change import PhaseChange
from transformer_lab.training.compose import instantiate
from transformer_lab.training.datamodule import LightningTask
from transformer_lab.training.run_dir import remove_unused_run_dir

log = logging.getLogger(__name__)


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
    `trainer.enable_model_summary=true`; the progress bar shows where someone watches (progress.py);
    Ctrl-C stops between batches (callbacks/ctrl_c.py)."""
    import torch

    from transformer_lab.training.checkpoint_io import AtomicCheckpointIO
    from transformer_lab.training.progress import ValidationLog, bar_only_where_watched

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
        # Overfitting one batch is about the training metrics (train/acc must reach 1): show them too.
        callbacks=[*callbacks, ValidationLog(console_metrics(cfg)), StopOnCtrlC()],
        logger=loggers or False,
        plugins=[AtomicCheckpointIO()],
        **extra,
    )
    bar_only_where_watched(trainer, cfg.trainer.get("enable_progress_bar"))
    return trainer


def console_metrics(cfg: DictConfig) -> tuple[str, ...]:
    """The metrics each validation's line shows (`console`: names or prefixes), every training metric too
    where one batch is overfitted (train/acc must reach 1)."""
    shown = tuple(str(name) for name in cfg.get("console") or ("val/",))
    return ("train/", *shown) if cfg.trainer.get("overfit_batches") else shown


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


def require_step_memory(model: L.LightningModule, task: object) -> None:
    """Refuse, before the first step, a training step that cannot fit in memory: the weights with their
    gradients and AdamW's two moments, and the activations a batch keeps for the backward pass (per layer
    about 16 d + 2 d_ff values per token, and the attention weights, H T^2 per sequence, kept twice)."""
    from transformer_lab.limits import require_memory, size_text

    batch, tokens = getattr(task, "batch_size", None), getattr(task, "max_len", None)
    if not isinstance(batch, int) or not isinstance(tokens, int):
        return  # a task of one's own that does not say: Lightning will find out
    config = model.net.config
    layers = sum(len(stack.blocks) for stack in model.net.stacks().values())
    state = 16 * sum(p.numel() for p in model.parameters())
    per_token = layers * (16 * config.model_dim + 2 * config.dim_feedforward) + 3 * config.output_classes
    attention = layers * config.num_heads * tokens * tokens * 2
    activations = 4 * batch * (tokens * per_token + attention)
    require_memory(
        state + activations,
        f"a training step (data.batch_size={batch} sequences of {tokens} tokens: {size_text(state)} of "
        f"weights and optimizer state, {size_text(activations)} of activations)",
        "lower data.batch_size or the sequence length, or the model's size",
    )


def use_threads(cfg: DictConfig) -> str:
    """Set torch's threads as `threads=` says (see `limits.choose_threads`); the words for the header."""
    import torch

    from transformer_lab.limits import choose_threads

    trainer = cfg.trainer
    ddp_on_cpu = str(trainer.get("strategy", "")).startswith("ddp") and str(trainer.accelerator) == "cpu"
    processes = int(trainer.devices) if ddp_on_cpu and str(trainer.devices).isdigit() else 1
    deterministic = bool(trainer.get("deterministic"))
    count, why = choose_threads(cfg.get("threads", "auto"), processes, deterministic)
    torch.set_num_threads(count)
    return f"{count} thread{'s' * (count != 1)}: {why}"


def train(cfg: DictConfig) -> dict:
    """Fit, test the best checkpoint, write metrics.json in the run directory, and return the metrics."""
    from transformer_lab.training import init_from
    from transformer_lab.training.config_checks import check_targets, check_types
    from transformer_lab.training.predictor import build_predictor
    from transformer_lab.training.resume import check_resumable, resume_checkpoint

    start = time.perf_counter()
    output_dir = Path(cfg.paths.output_dir)
    console.ignore_known_noise()
    check_targets(cfg)
    check_types(cfg)
    ckpt_path = resume_checkpoint(cfg)
    initial = init_from.initial_checkpoint(cfg)
    if cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True, verbose=False)

    task = instantiate(cfg.data)
    require(
        isinstance(task, TaskDataModule),
        f"data._target_={cfg.data.get('_target_')} is not a task (a transformer_lab.data.TaskDataModule)",
    )
    settings = OmegaConf.to_container(cfg.model, resolve=True)
    require(
        initial is None or not isinstance(task, ActivationTask),
        f"init_from={cfg.init_from} starts a Transformer from a checkpoint, and experiment=sae trains a "
        "sparse autoencoder of one (source= names it); leave init_from= out",
    )
    if initial is not None:
        settings = init_from.adopt(initial, task, settings)
    if isinstance(task, ActivationTask):  # a sparse autoencoder of activations
        from transformer_lab.training.sae_module import build_sae_module

        model = build_sae_module(settings, task)
    else:
        model = build_predictor(settings, task)
    if initial is not None:
        init_from.load_weights(model, initial, str(cfg.init_from))
        model.init_from = init_from.recorded(str(cfg.init_from))  # in its checkpoints: what it started from
        del initial
    threads = use_threads(cfg)
    if not isinstance(task, ActivationTask):
        require_step_memory(model, task)
    trainer = build_trainer(cfg)
    if ckpt_path is not None:
        check_resumable(ckpt_path, model, trainer)
    check_launch_in_sweep(cfg, trainer)
    log.info(
        f"Training on {trainer.strategy.root_device} ({trainer.precision} precision, {threads}); "
        f"run directory {console.shown_path(output_dir)}"
    )
    log.info(console.model_summary(model.net))
    if cfg.get("note"):
        log.info(f"Note: {cfg.note}")

    try:
        results = fit_and_test(trainer, model, LightningTask(task), ckpt_path, test=cfg.get("test", True))
    except SIGTERMException:  # Lightning saw SIGTERM, ran the callbacks' on_exception (last.ckpt), stopped
        raise Terminated(stopped_by("SIGTERM", trainer, output_dir), exit_status=143) from None
    except SystemExit:  # Lightning's exit after Ctrl-C, once the callbacks' on_exception saved last.ckpt
        if not any(isinstance(c, StopOnCtrlC) and c.stopped for c in trainer.callbacks):
            raise
        raise Terminated(stopped_by("Ctrl-C", trainer, output_dir), exit_status=130) from None
    metrics = {k: v for k, v in results.items() if "/" in k}
    metrics.update(
        metric=cfg.metric,
        best_score=results["best_score"],
        best_ckpt_path=results["best_ckpt_path"],
        global_step=results["global_step"],
        device=str(trainer.strategy.root_device),
        wall_time_s=round(time.perf_counter() - start, 2),
    )
    if results["phase_change"] is not None:
        metrics["phase_change"] = results["phase_change"]
    metrics.update(getattr(model, "grades", {}))  # an SAE's answer keys (analysis.sae_measures)
    if getattr(model, "histogram", None) is not None:
        metrics["feature_density_histogram"] = model.histogram
    if trainer.is_global_zero:
        _write_results(trainer, cfg, metrics, output_dir)
    return metrics


def fit_and_test(
    trainer: L.Trainer,
    model: L.LightningModule,
    task: L.LightningDataModule,
    ckpt_path: str | None,
    test: bool,
) -> dict:
    """Fit (from `ckpt_path`, if resuming), then test the best checkpoint: the val/ and test/ metrics,
    the best checkpoint and its score, the last step and the phase change (`PhaseChange.record`)."""
    trainer.fit(model, datamodule=task, ckpt_path=ckpt_path, weights_only=True)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    best = trainer.checkpoint_callback
    best_path = getattr(best, "best_model_path", "") or None
    # read before testing: loading best.ckpt for the test restores the callbacks' state saved in it,
    # which predates the score of best.ckpt itself
    best_score = getattr(best, "best_model_score", None) if best_path else None
    global_step = trainer.global_step
    phase = next((c for c in trainer.callbacks if isinstance(c, PhaseChange)), None)
    phase_change = phase.record() if phase is not None else None
    if test and not trainer.interrupted:
        results = trainer.test(model, datamodule=task, ckpt_path=best_path, verbose=False, weights_only=True)
        metrics.update({k: float(v) for k, v in results[0].items()})
    return {
        **metrics,
        "best_score": best_score,
        "best_ckpt_path": best_path,
        "global_step": global_step,
        "phase_change": phase_change,
    }


def stopped_by(cause: str, trainer: L.Trainer, output_dir: Path) -> str:
    """The line for a run that a signal (`cause`: SIGTERM or Ctrl-C) stopped: where it stopped, what was
    saved, how to go on."""
    from transformer_lab.training.callbacks import LastCheckpoint

    last = next((c for c in trainer.callbacks if isinstance(c, LastCheckpoint)), None)
    saved = last.saved_step if last is not None else None
    if trainer.state.fn != "fit":
        return (
            f"stopped by {cause} while testing; training had finished, its checkpoints are in "
            f"{output_dir / 'checkpoints'}, no metrics.json was written"
        )
    if saved is None:  # nothing to resume: the run directory goes, as when a signal comes before fit
        remove_unused_run_dir(output_dir)
        kept = f"what the run wrote is in {output_dir}" if output_dir.exists() else "nothing was kept"
        return (
            f"stopped by {cause} at step {trainer.global_step}, before any checkpoint was saved; {kept}: "
            "start the run again"
        )
    return (
        f"stopped by {cause} at step {trainer.global_step} (last.ckpt holds step {saved}); "
        f"resume with resume={output_dir}"
    )


def _write_results(trainer: L.Trainer, cfg: DictConfig, metrics: dict, output_dir: Path) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    write_text(output_dir / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    scores = {f"hp/{k.replace('/', '_')}": v for k, v in metrics.items() if "/" in k}
    hparams = trainer.lightning_module.hparams
    flat = {
        **{f"model.{k}": v for k, v in (hparams.get("net") or hparams["sae"]).items() if k != "vocab"},
        **{f"model.{k}": v for k, v in hparams.items() if k not in ("net", "sae")},
        **{
            f"data.{k}": v
            for k, v in OmegaConf.to_container(cfg.data, resolve=True).items()
            if k != "_target_"
        },
        "seed": cfg.get("seed"),
    }
    flat = {k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in flat.items()}
    for logger in trainer.loggers:
        if "metrics" in inspect.signature(logger.log_hyperparams).parameters:  # TensorBoard's hparams view
            logger.log_hyperparams(flat, metrics=scores)
        else:  # CSVLogger: the settings in hparams.yaml, the scores as a last row
            logger.log_hyperparams(flat)
            logger.log_metrics(scores, step=trainer.global_step)
        # Write these last records now: the Trainer already finalized its loggers, and leaving the flush
        # to garbage collection at exit can lose them (the last job of a sweep then has no hp/ scalars).
        logger.finalize("success")
    sae = "sae" in hparams
    transcoder = sae and "d_out" in hparams["sae"]
    best = metrics.get("best_ckpt_path")
    for line in console.run_summary(output_dir, metrics, best, sae=sae, transcoder=transcoder):
        log.info(line)
