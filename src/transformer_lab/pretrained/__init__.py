"""Ready-made models shipped inside the package: small checkpoints trained by this project's own train.py.

    python -m transformer_lab.pretrained                  # the list: metrics, the command that trained each
    model = load_model("pretrained:reverse")              # wherever a checkpoint path goes
    python scripts/sample.py ckpt_path=pretrained:sort source="3 1 3 9 1"
    python scripts/pretrain.py [names...]                 # retrain them (a few minutes of CPU)

`models.json` is the record: for each name its file, what it is, the train.py overrides that trained it
and the test metrics the shipped file reaches (measured by `evaluate`, the LightningModule's own
test_step). A shipped file holds only tensors and plain values (the `net.` weights, the hyperparameters,
the task's record): `torch.load(..., weights_only=True)` reads it, and it has no optimizer state, so it
is for using and taking apart, not for resuming training.

This module imports neither torch nor Lightning until `evaluate` or `strip_checkpoint` is called, so the
list prints at once.
"""

import json
import logging
import os
from pathlib import Path

from transformer_lab.errors import require

PREFIX = "pretrained:"
DIRECTORY = Path(__file__).resolve().parent
RECORDS = DIRECTORY / "models.json"
CHECKOUT = DIRECTORY.parents[2]  # the repository root, when the package runs from a checkout (src/ layout)
LIST_COMMAND = "python -m transformer_lab.pretrained"
RETRAIN_COMMAND = "python scripts/pretrain.py"
# The tests re-measure each model on the first CHECK_BATCHES batches of its test split (seconds on a CPU;
# the whole split, 10,000 generated outputs for sort, takes minutes on a busy one).
CHECK_BATCHES = 10
# What a shipped file keeps of a Lightning checkpoint: what load_model, task_from_checkpoint,
# tokenizer_from_checkpoint and TransformerPredictor.load_from_checkpoint read.
KEPT_KEYS = (
    "state_dict",
    "hyper_parameters",
    "hparams_name",
    "task",
    "datamodule_hyper_parameters",
    "datamodule_hparams_name",
    "pytorch-lightning_version",
)


def records() -> dict[str, dict]:
    """Every shipped model's record from models.json, by name, in the order the list shows them."""
    return json.loads(RECORDS.read_text())


def names() -> list[str]:
    """The names `pretrained:<name>` accepts."""
    return list(records())


def record(name: str) -> dict:
    """One model's record; an unknown name is a one-line ConfigError listing the valid ones."""
    known = records()
    require(
        name in known,
        f"unknown pretrained model {name!r}; the pretrained models are {', '.join(known)} "
        f"({LIST_COMMAND} lists them)",
    )
    return known[name]


def path(name: str) -> Path:
    """The shipped checkpoint file of model `name`."""
    file = DIRECTORY / record(name)["file"]
    require(
        file.is_file(),
        f"the pretrained model {name!r} is listed but its file {file} is missing; rebuild it with "
        f"{RETRAIN_COMMAND} {name}",
    )
    return file


def is_pretrained(location: str | Path) -> bool:
    """Whether a checkpoint location is `pretrained:<name>`."""
    return isinstance(location, str) and location.startswith(PREFIX)


def resolve(location: str | Path) -> Path:
    """`pretrained:<name>` -> the shipped file; any other location -> itself, as a Path."""
    if is_pretrained(location):
        return path(location.removeprefix(PREFIX))
    return Path(location)


def command(name: str) -> str:
    """The command that trained model `name` (in a checkout; `python -m transformer_lab.train` elsewhere)."""
    return " ".join(["python train.py", *record(name)["overrides"]])


def strip_checkpoint(checkpoint: dict) -> dict:
    """The shippable part of a train.py checkpoint: the `net.` weights (contiguous copies, so no view keeps
    a larger storage alive in the file), the hyperparameters and the task's record. No optimizer,
    scheduler, loop or callback state. A data file path inside the checkout is made relative to it."""
    missing = [key for key in ("state_dict", "hyper_parameters", "task") if key not in checkpoint]
    require(not missing, f"not a train.py checkpoint: it has no {', '.join(missing)}")
    stripped = {key: checkpoint[key] for key in KEPT_KEYS if key in checkpoint}
    stripped["state_dict"] = {
        key: value.detach().cpu().clone().contiguous()
        for key, value in checkpoint["state_dict"].items()
        if key.startswith("net.")
    }
    data = dict(checkpoint.get("datamodule_hyper_parameters", {}))
    if isinstance(data.get("path"), str):
        data["path"] = _portable(data["path"])
    stripped["datamodule_hyper_parameters"] = data
    return stripped


def _portable(data_path: str) -> str:
    """`data/tinyshakespeare/input.txt` for the checkout's data file, however the run spelled it."""
    absolute = Path(data_path) if Path(data_path).is_absolute() else Path.cwd() / data_path
    try:
        return Path(os.path.normpath(absolute)).relative_to(CHECKOUT).as_posix()
    except ValueError:
        return os.path.normpath(data_path)


def data_file(data_path: str | Path, data_root: str | Path | None = None) -> Path:
    """Where a checkpoint's (relative) data path is: under `data_root` if given, else the current
    directory, else the checkout this package runs from."""
    data_path = Path(data_path)
    if data_path.is_absolute():
        return data_path
    if data_root is not None:
        return Path(data_root) / data_path
    for root in (Path.cwd(), CHECKOUT):
        if (root / data_path).is_file():
            return root / data_path
    return data_path


def evaluate(
    location: str | Path, data_root: str | Path | None = None, limit_batches: int | None = None
) -> dict[str, float]:
    """The test metrics of a checkpoint (a name, `pretrained:<name>` or a file), measured as train.py
    measures them after training: the TransformerPredictor rebuilt from the checkpoint's hyperparameters
    and weights, run by `Trainer.test` over the whole test split of the task rebuilt from its record
    (`limit_batches`: only its first batches, always the same ones; models.json's `check_metrics`).

    Needs the task's data where it has a file (shakespeare: `data/tinyshakespeare/input.txt`, found in the
    current directory or the checkout; `data_root` to say where); never downloads it.
    """
    if isinstance(location, str) and not is_pretrained(location) and location in records():
        location = PREFIX + location
    import lightning as L

    from transformer_lab.checkpoints import read_checkpoint, task_from_checkpoint
    from transformer_lab.predictor import TransformerPredictor

    checkpoint = read_checkpoint(location)
    hparams = dict(checkpoint.get("datamodule_hyper_parameters", {}))
    if isinstance(hparams.get("path"), str):
        file = data_file(hparams["path"], data_root)
        require(
            file.is_file(),
            f"evaluating {location} needs its data file {hparams['path']}; run from the checkout or pass "
            "data_root=<the directory that holds it>",
        )
        hparams["path"] = str(file)
    task = task_from_checkpoint({**checkpoint, "datamodule_hyper_parameters": hparams}, location)
    predictor = TransformerPredictor(**checkpoint["hyper_parameters"])
    predictor.load_state_dict(checkpoint["state_dict"])
    # Lightning's notes on the hardware ("GPU available: False", tips) are not results: keep them off screen.
    quiet = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            precision="32-true",
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            limit_test_batches=1.0 if limit_batches is None else limit_batches,
        )
        results = trainer.test(predictor, datamodule=task, verbose=False)
    finally:
        quiet.setLevel(level)
    return {key: float(value) for key, value in sorted(results[0].items())}


def headline(name: str) -> str:
    """The metrics the list shows for a model, e.g. `test/acc 1.0000  test/seq_acc 1.0000`."""
    entry = record(name)
    metrics = entry.get("test_metrics") or {}
    shown = [f"{key} {metrics[key]:.4f}" for key in entry.get("headline", []) if key in metrics]
    return "  ".join(shown) or "(not measured)"
