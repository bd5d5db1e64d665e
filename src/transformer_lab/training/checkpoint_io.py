"""Writing checkpoint files: atomically (a run killed in the middle of a save keeps the previous file),
readable as the user's umask says, with the record of the task the tools rebuild, and stripped to what a
shipped model keeps.

A checkpoint (format_version 1) holds Lightning's keys (`state_dict`, `hyper_parameters` with the model's
config under `net`, the optimizer and loop state, the callbacks' state), plus `format_version`, `task`
(`TaskDataModule.record()`: `{"class": "package.module.Class", "separator": str}`, and the page's label
rule where the task has one) and the task's hyperparameters
(`datamodule_hyper_parameters`). `transformer_lab.checkpoint` reads it.
"""

import io
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from transformer_lab.errors import TrainingFailed
from transformer_lab.files import write_atomically

FORMAT_VERSION = 1
# What a shipped (pretrained) file or a snapshot keeps of a Lightning checkpoint: what the tools and
# TransformerPredictor.load_from_checkpoint read. No optimizer, scheduler, loop or callback state.
SHIPPED_KEYS = (
    "state_dict",
    "hyper_parameters",
    "hparams_name",
    "format_version",
    "task",
    "datamodule_hyper_parameters",
    "datamodule_hparams_name",
    "pytorch-lightning_version",
)


def shippable(checkpoint: dict) -> dict:
    """The part of a train.py checkpoint that a shipped model or a snapshot keeps (SHIPPED_KEYS): the
    `net.` weights as contiguous copies (so no view keeps a larger storage alive in the file), the
    hyperparameters and the task's record."""
    stripped = {key: checkpoint[key] for key in SHIPPED_KEYS if key in checkpoint}
    stripped["state_dict"] = {
        key: value.detach().cpu().clone().contiguous()
        for key, value in checkpoint["state_dict"].items()
        if key.startswith("net.")
    }
    stripped.setdefault("format_version", FORMAT_VERSION)
    return stripped


def save_atomically(content: object, path: str | Path) -> None:
    """torch.save to a temporary file next to `path`, then renamed into place (`files.write_atomically`).
    The bytes are made in memory first, so a disk that refuses them (full, a file-size limit) shows as the
    OSError of that write, not as a broken zip writer."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(content, buffer)
    write_atomically(path, lambda f: f.write(buffer.getbuffer()))


def save_or_fail(content: object, path: str | Path, step: int | None) -> None:
    """`save_atomically`, where a save the disk refuses (full, a file-size limit, a read-only folder)
    stops training with one line (TrainingFailed, exit 1) that says what was kept."""
    try:
        save_atomically(content, path)
    except OSError as exc:
        path = Path(path)
        kept = f"the previous {path.name} is kept" if path.is_file() else "nothing was saved"
        checkpoints = path.parent.parent if path.parent.name == "snapshots" else path.parent
        then = (
            f"resume with resume={checkpoints.parent}"
            if (checkpoints / "last.ckpt").is_file()
            else "run it again"
        )
        raise TrainingFailed(
            f"cannot write {path} at step {step}: {exc.strerror or exc}; "
            f"{kept}; free some space or make the folder writable, then {then}"
        ) from None


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write each checkpoint to a temporary file in its own directory, fsync it, then rename it into place.

    A rename within one directory is atomic, so a run killed in the middle of a save leaves the previous
    `last.ckpt` intact (Lightning's own save stages the file in the system temp directory, and a move from
    there to another filesystem is a copy that can be cut short).
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None
    ) -> None:
        save_or_fail(checkpoint, path, checkpoint.get("global_step"))
