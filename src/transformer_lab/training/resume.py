"""Resuming a run: which checkpoint, and whether it can go on under the configured model and limits."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from transformer_lab import pretrained
from transformer_lab.errors import ConfigError, require

if TYPE_CHECKING:  # the entry point reads runs before torch and Lightning are imported
    import lightning as L

    from transformer_lab.training.predictor import TransformerPredictor

log = logging.getLogger(__name__)


def newest_resumable(task_dir: Path) -> Path:
    """`resume=auto`: the newest run directory of a task whose last.ckpt can be read; a one-line error
    naming an unreadable newest one (and the newest valid run, if any)."""
    from transformer_lab import sae_checkpoint
    from transformer_lab.checkpoint import read, read_file

    runs = sorted(task_dir.glob("*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime, reverse=True)
    require(bool(runs), f"resume=auto found no {task_dir}/<run>/checkpoints/last.ckpt; train a run first")
    problems = []
    for last in runs:
        try:
            contents = read_file(last)
            is_sae = isinstance(contents, dict) and "sae" in (contents.get("hyper_parameters") or {})
            sae_checkpoint.read(last, last) if is_sae else read(last)
        except ConfigError as error:
            problems.append((last, error))
            continue
        if problems:
            newest, error = problems[0]
            raise ConfigError(
                f"resume=auto: the newest run's {newest} cannot be resumed ({error}); the newest run that "
                f"can is {last.parent.parent}: resume it with resume={last.parent.parent}"
            )
        return last.parent.parent
    newest, error = problems[0]
    raise ConfigError(
        f"resume=auto: the newest run's {newest} cannot be resumed ({error}); no run of {task_dir} can"
    )


def resume_checkpoint(cfg: DictConfig) -> str | None:
    """The checkpoint to resume from: `ckpt_path=FILE`, or `resume=<run dir>` (its checkpoints/last.ckpt),
    or `resume=auto` (the newest readable last.ckpt of this task under paths.log_dir)."""
    ckpt_path, resume = cfg.get("ckpt_path"), cfg.get("resume")
    if resume is not None:
        require(ckpt_path is None, "pass either resume= or ckpt_path=, not both")
        if str(resume) == "auto":
            resume = newest_resumable(Path(cfg.paths.log_dir) / cfg.task_name)
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
            "run can resume from it; to train it further, start a run from its weights: "
            f"init_from={ckpt_path}",
        )
        require(
            not str(ckpt_path).startswith("hf:"),
            f"ckpt_path={ckpt_path} resumes a run of this project, and a model saved by transformers is "
            f"none; to train it further, start a run from its weights: init_from={ckpt_path}",
        )
        require(
            Path(ckpt_path).is_file(),
            f"ckpt_path={ckpt_path} does not exist; pass a checkpoint such as <run>/checkpoints/last.ckpt",
        )
    return ckpt_path


# What a resumed run may change: how long it trains, where, and how it shows it. Everything else is a
# setting of the run it continues (its model, data, optimiser, seed), read from its own .hydra/.
CHANGEABLE = (
    "trainer.max_steps",
    "trainer.max_epochs",
    "trainer.max_time",
    "trainer.devices",
    "trainer.accelerator",
    "trainer.strategy",
    "trainer.num_nodes",
    "trainer.enable_progress_bar",
    "trainer.limit_val_batches",
    "trainer.limit_test_batches",
    "data.num_workers",
    "callbacks.progress_bar.refresh_rate",
    "threads",
    "console",
    "test",
    "paths.log_dir",
    "trainer",  # the device presets: trainer=cpu, trainer=gpu, trainer=ddp
)


def run_of(location: str) -> Path | None:
    """The run directory a `resume=` or `ckpt_path=` value names: a run directory, or a checkpoint inside
    one's checkpoints/ (the hint a stopped run prints); None for a checkpoint file of no run."""
    path = Path(location).expanduser()
    run = path if path.is_dir() else path.parent.parent if path.parent.name == "checkpoints" else None
    if run is None or not (run / ".hydra" / "overrides.yaml").is_file():
        return None
    return run.resolve()


def resumed_overrides(run: Path, new: list[str]) -> list[str]:
    """The overrides that continue `run`: its own (from its .hydra/overrides.yaml), then those of `new`
    that may change (`CHANGEABLE`); a one-line error for any other change."""
    from transformer_lab import run_files

    own = run_files.overrides(run)
    own = [o for o in own if o.partition("=")[0].lstrip("+~") not in ("resume", "ckpt_path")]
    for override in new:
        key = override.partition("=")[0].lstrip("+~")
        require(
            override in own or key in CHANGEABLE,
            f"{override}: a resumed run keeps the settings of the run it continues ({run}); only how long "
            f"and where it trains may change ({', '.join(CHANGEABLE[:4])}, ...); start a new run to change "
            f"{key}",
        )
    return [*own, *(o for o in new if o not in own)]


def check_resumable(ckpt_path: str, model: TransformerPredictor, trainer: L.Trainer) -> None:
    """Read the checkpoint as any shared file is read (`transformer_lab.checkpoint`) and check that it fits
    the configured model and data, that its training state has the shapes the optimizer will load
    (Lightning would copy mismatched state into the optimizer unchecked), and that it has training left to
    do under the configured limits. An SAE run's (`sae_checkpoint`) the same, its SAE for a model."""
    from transformer_lab.checkpoint import load

    if "sae" in model.hparams:
        from transformer_lab.sae_checkpoint import load_sae

        run = load_sae(ckpt_path)
        contents, saved, configured = run.contents, run.config.to_dict(), dict(model.hparams["sae"])
    else:
        checkpoint = load(ckpt_path)
        contents = checkpoint.contents
        saved = checkpoint.config.architecture()
        configured = model.net.config.architecture()
    diffs = [f"{k}={v!r} (config: {configured[k]!r})" for k, v in saved.items() if v != configured[k]]
    require(
        not diffs,
        f"ckpt_path={ckpt_path} was trained with another model or data: {', '.join(diffs)}; "
        "resume with the task and model settings it was trained with",
    )
    check_training_state(contents, ckpt_path, model)
    callbacks = contents.get("callbacks") or {}
    last = callbacks.get("LastCheckpoint") if isinstance(callbacks, dict) else None
    finished_epochs = last.get("finished_epochs") if isinstance(last, dict) else None
    step, max_steps, max_epochs = contents.get("global_step", 0), trainer.max_steps, trainer.max_epochs
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


def check_training_state(contents: dict, ckpt_path: str, model: TransformerPredictor) -> None:
    """The optimizer's and the schedule's saved state, checked against the parameters they will update."""
    from torch import Tensor

    no_state = (
        f"ckpt_path={ckpt_path} holds no training state (a shipped model, a snapshot, or a file stripped "
        "to its weights): it cannot be resumed; start a new run"
    )
    states = contents.get("optimizer_states")
    require(isinstance(states, list) and len(states) == 1 and isinstance(states[0], dict), no_state)
    require(isinstance(contents.get("global_step"), int), no_state)
    state, groups = states[0].get("state"), states[0].get("param_groups")
    require(isinstance(state, dict) and isinstance(groups, list), no_state)
    parameters = [p for group in model.parameter_groups() for p in group]
    indices = [i for group in groups if isinstance(group, dict) for i in group.get("params", [])]
    require(
        indices == list(range(len(parameters))),
        f"ckpt_path={ckpt_path}: its optimizer state covers {len(indices)} parameters, this model has "
        f"{len(parameters)}; the file does not fit the configured model",
    )
    for index, entries in state.items():
        require(
            isinstance(index, int) and 0 <= index < len(parameters) and isinstance(entries, dict),
            f"ckpt_path={ckpt_path}: its optimizer state names a parameter {index!r} this model lacks",
        )
        for key, value in entries.items():
            if key == "step":
                continue
            require(
                isinstance(value, Tensor) and value.shape == parameters[index].shape,
                f"ckpt_path={ckpt_path}: optimizer state {key} of parameter {index} has shape "
                f"{tuple(getattr(value, 'shape', ()))}, the parameter {tuple(parameters[index].shape)}; the "
                "file does not fit the configured model",
            )
    schedulers = contents.get("lr_schedulers", [])
    require(
        isinstance(schedulers, list) and all(isinstance(s, dict) for s in schedulers),
        f"ckpt_path={ckpt_path}: its learning-rate schedule state is not a list of mappings",
    )


def continued_run(value: dict[str, str], overrides: list[str]) -> tuple[Path, list[str]] | None:
    """For a command line that continues a run (`resume=<run dir>`, `resume=auto`, or `ckpt_path=` the
    last.ckpt of a run): that run's directory and the overrides that continue it (`resumed_overrides`).
    None for `ckpt_path=` a checkpoint of no run directory (it starts a new run from those weights)."""
    from transformer_lab.training.compose import compose_config

    require("resume" not in value or "ckpt_path" not in value, "pass either resume= or ckpt_path=, not both")
    key = "resume" if "resume" in value else "ckpt_path"
    location = value[key].strip("'\"")
    new = [o for o in overrides if o.partition("=")[0].lstrip("+~") not in ("resume", "ckpt_path")]
    if key == "resume" and location == "auto":
        cfg = compose_config(new)
        run = newest_resumable(Path(cfg.paths.log_dir) / cfg.task_name).resolve()
    else:
        run = run_of(location)
        if key == "ckpt_path" and (run is None or Path(location).name != "last.ckpt"):
            return None
        require(
            run is not None,
            f"resume={location} is not a run directory (no .hydra/overrides.yaml); pass one such as "
            "saved_models/<task>/<date>_<time>, or resume=auto",
        )
    require(
        (run / "checkpoints" / "last.ckpt").is_file(),
        f"resume={run} has no checkpoints/last.ckpt to continue from",
    )
    log.info(f"Resuming {run}")
    return run, resumed_overrides(run, new)
