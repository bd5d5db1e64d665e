"""`python train.py init_from=<weights>`: train a model further, from weights made elsewhere or earlier.

    python train.py init_from=hf:pythia-70m task=text data.path=stories/     # a model saved by transformers
    python train.py init_from=pretrained:shakespeare task=shakespeare          # a ready-made model
    python train.py init_from=saved_models/reverse/<run> model.lr=1e-4         # a run's best.ckpt

The model's architecture and weights come from `init_from` (anything `transformer_lab.load` opens), and so
does its tokenizer: a task that reads text (task=text) reads its corpus with the model's own tokens
instead of training a tokenizer. Every other setting comes from the config as for any run: the optimiser,
schedule and other training settings of `model.*`, the data, the trainer. A setting of the command line
that would change the architecture (`model.num_layers=`, `model.norm=`, ... or `data.tokenizer=`) is
refused in one line naming it, as is a task whose vocabulary is not the model's. Unlike `ckpt_path=` /
`resume=`, nothing of the earlier training continues (no optimiser state, the step count starts at 0):
the run and its checkpoints are this project's own, so every tool, and `export to=huggingface` back to
the model's family, reads them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from transformer_lab.errors import ConfigError, require
from transformer_lab.nn import ModelConfig

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from transformer_lab.checkpoint import Checkpoint
    from transformer_lab.data.task import TaskDataModule
    from transformer_lab.training.predictor import TransformerPredictor

log = logging.getLogger(__name__)
# what a run may still choose of the model: dropout does nothing to the weights' shapes
FREE = ("dropout", "input_dropout")
# what the task states (its vocabulary, special tokens, positions), checked against the model's instead
STATED = (
    "vocab",
    "vocab_size",
    "unused_rows",
    "num_classes",
    "pad_id",
    "bos_id",
    "eos_id",
    "sep_id",
    "max_len",
)


def command_line() -> list[str]:
    """The overrides of the command line (Hydra's record of them; [] outside a Hydra run)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return list(HydraConfig.get().overrides.task)


def architecture_overrides(overrides: list[str]) -> list[str]:
    """The command line's settings that would change an architecture taken from elsewhere."""
    keys = {f"model.{name}" for name in ModelConfig.__dataclass_fields__ if name not in FREE} | {
        "data.tokenizer"
    }
    return [o for o in overrides if o.partition("=")[0].lstrip("+~") in keys]


def initial_checkpoint(cfg: DictConfig) -> Checkpoint | None:
    """The checkpoint `init_from=` names, read (None without one); a one-line refusal of an architecture
    setting on the command line beside it, or of `ckpt_path=` / `resume=` beside it."""
    location = cfg.get("init_from")
    if location is None:
        return None
    require(
        cfg.get("ckpt_path") is None and cfg.get("resume") is None,
        f"init_from={location} starts a new run from those weights; ckpt_path= and resume= continue a run "
        "of this project: pass one of them",
    )
    changed = architecture_overrides(command_line())
    if changed:
        raise ConfigError(
            f"{changed[0]} would change the architecture of init_from={location}, which brings its own "
            "(its layers, widths, blocks and tokenizer); leave it out, or train from scratch without "
            "init_from"
        )
    from transformer_lab.checkpoint import load

    return load(str(location))


def adopt(checkpoint: Checkpoint, task: TaskDataModule, settings: dict) -> dict:
    """The `model.*` settings of a run from `checkpoint`: its architecture (but what the task states, and
    dropout) with the config's training settings; the task reads text with the model's tokenizer, and
    states the model's special tokens where it has none (a text task: the fine-tune keeps the source's
    bos_token_id and eos_token_id, so generation still stops at the end of a text)."""
    task.use_tokenizer(checkpoint.tokenizer)
    for key in ("bos_id", "eos_id"):  # a text task has none of its own: the model's, where it has them
        if getattr(task, key) is None and getattr(checkpoint.config, key) is not None:
            setattr(task, key, getattr(checkpoint.config, key))
    architecture = {k: v for k, v in checkpoint.config.to_dict().items() if k not in STATED and k not in FREE}
    kept = {k: v for k, v in settings.items() if k not in ModelConfig.__dataclass_fields__ or k in FREE}
    return kept | architecture | {"max_len": checkpoint.config.max_len}


def load_weights(model: TransformerPredictor, checkpoint: Checkpoint, location: str) -> None:
    """The checkpoint's weights into the new run's model, after checking that the task's vocabulary is
    the model's (a one-line refusal otherwise)."""
    ours, theirs = model.net.config, checkpoint.config
    require(
        ours.tokens == theirs.tokens and ours.output_classes == theirs.output_classes,
        f"init_from={location} reads {theirs.vocab_size} tokens (its own tokenizer's), and this task's "
        f"vocabulary has {ours.vocab_size}: fine-tune it on task=text (which reads a corpus with the model's "
        "tokenizer) or on the task it was trained on",
    )
    model.net.load_state_dict(checkpoint.model.state_dict())
    log.info(f"Initialised from {location}: {checkpoint.model.shape()}, its tokenizer and weights")


def recorded(location: str) -> str:
    """`init_from=` as a run's checkpoints record it: hf:<absolute folder>, an absolute path, or
    pretrained:<name> (an export refuses to write over what a model was made from)."""
    if location.startswith("pretrained:"):
        return location
    prefix = "hf:" if location.startswith("hf:") else ""
    return prefix + str(Path(location.removeprefix(prefix)).expanduser().resolve())
