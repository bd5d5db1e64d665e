"""Ready-made models shipped inside the package: small checkpoints trained by this project's own train.py.

    python -m transformer_lab.pretrained                  # the list: metrics, the command that trained each
    model = load_model("pretrained:reverse")              # wherever a checkpoint path goes
    python -m transformer_lab.sample ckpt_path=pretrained:sort source="3 1 3 9 1"
    python scripts/pretrain.py [names...]                 # retrain them (a few minutes of CPU)

This module is the registry: `models.json` is the record, for each name its file, its sha256 (checked
whenever the file is read), what it is, the train.py overrides that trained it and the test metrics the
shipped file reaches (measured by `training.evaluate.evaluate`: the LightningModule's own test_step). A
shipped file holds only tensors and plain values (the `net.` weights, the hyperparameters, the task's
record), and no optimizer state: it is for using and taking apart, not for resuming training.

The registry imports nothing but the standard library (and errors.py), so the list prints at once, and
nothing of the code that evaluates or builds the models (evaluation.py, answer_keys.py import it).
"""

import hashlib
import json
from pathlib import Path

from transformer_lab import deprecated
from transformer_lab.errors import require

PREFIX = "pretrained:"
DIRECTORY = Path(__file__).resolve().parent
RECORDS = DIRECTORY / "models.json"
LIST_COMMAND = "python -m transformer_lab.pretrained"
RETRAIN_COMMAND = "python scripts/pretrain.py"
BUILD_COMMAND = "python scripts/pretrain.py"  # builds the hand-built answer keys too
# The tests re-measure each model on the first CHECK_BATCHES batches of its test split (seconds on a CPU;
# the whole split, 10,000 generated outputs for sort, takes minutes on a busy one).
CHECK_BATCHES = 10


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
    """The shipped checkpoint file of model `name`, checked against the sha256 in its record."""
    entry = record(name)
    file = DIRECTORY / entry["file"]
    require(
        file.is_file(),
        f"the pretrained model {name!r} is listed but its file {file} is missing; rebuild it with "
        f"{RETRAIN_COMMAND} {name}",
    )
    expected = entry.get("sha256")
    if expected is not None:
        _check_sha256(file, expected, name, f"the pretrained model {name!r} ({file})")
    return file


def _check_sha256(file: Path, expected: str, name: str, what: str) -> None:
    """Refuse a shipped file of model `name` whose sha256 is not the `expected` of its record (`what`
    names the file in the message)."""
    with open(file, "rb") as f:
        actual = hashlib.file_digest(f, "sha256").hexdigest()
    require(
        actual == expected,
        f"{what} has sha256 {actual}, not the {expected} of its record: the file was changed or damaged; "
        f"reinstall the package, or rebuild it with {RETRAIN_COMMAND} {name}",
    )


def snapshots(name: str) -> list[Path]:
    """The snapshot files a model ships with (a training run's series: `python -m transformer_lab.interpret
    ckpt_path=pretrained:<name> analysis=dynamics`), oldest first, each checked against the sha256 of its
    record (`snapshots`: `{"directory": ..., "sha256": {file name: sha256}}`); [] for a model without."""
    series = record(name).get("snapshots")
    if not series:
        return []
    files = []
    for file_name, expected in sorted(series["sha256"].items()):
        file = DIRECTORY / series["directory"] / file_name
        require(
            file.is_file(),
            f"the pretrained model {name!r} lists the snapshot {file} but it is missing; rebuild it with "
            f"{RETRAIN_COMMAND} {name}",
        )
        _check_sha256(file, expected, name, f"the pretrained model {name!r}'s snapshot {file}")
        files.append(file)
    return files


def is_pretrained(location: str | Path) -> bool:
    """Whether a checkpoint location is `pretrained:<name>`."""
    return isinstance(location, str) and location.startswith(PREFIX)


def resolve(location: str | Path) -> Path:
    """`pretrained:<name>` -> the shipped file; any other location -> itself, as a Path."""
    if is_pretrained(location):
        return path(location.removeprefix(PREFIX))
    return Path(location)


def command(name: str) -> str:
    """The command that trained model `name` (`python train.py` in a checkout is
    `python -m transformer_lab.train` anywhere), or built it: a hand-built answer key."""
    entry = record(name)
    if entry.get("hand_built"):
        return f"hand-built: {BUILD_COMMAND} {name}"
    return " ".join(["python train.py", *entry["overrides"]])


def headline(name: str) -> str:
    """The metrics the list shows for a model, e.g. `test/acc 1.0000  test/seq_acc 1.0000`."""
    entry = record(name)
    metrics = entry.get("test_metrics") or {}
    shown = [f"{key} {metrics[key]:.4f}" for key in entry.get("headline", []) if key in metrics]
    return "  ".join(shown) or "(not measured)"


def __getattr__(name: str) -> object:
    """`pretrained.evaluate` of earlier versions, with a DeprecationWarning: it is
    `transformer_lab.training.evaluate.evaluate` (measuring runs Lightning, which this registry does not
    import)."""
    if name != "evaluate":
        raise AttributeError(f"module 'transformer_lab.pretrained' has no attribute {name!r}")
    return deprecated.forward(__name__, "transformer_lab.training.evaluate")(name)
