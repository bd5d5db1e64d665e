"""Retrain the ready-made models shipped in src/transformer_lab/pretrained/ (all of them, or those named).

    python scripts/pretrain.py                       # every model of models.json, one after the other
    python scripts/pretrain.py reverse sort          # only these
    python scripts/pretrain.py reverse --from-run saved_models/reverse/<run>   # package a finished run
    python scripts/pretrain.py --remeasure           # only measure the shipped files again

For each model: `python -m transformer_lab.train <its overrides> trainer.accelerator=cpu` (train.py, in a
subprocess, in a temporary run directory or under --log-dir), then its best.ckpt is stripped to the
weights, hyperparameters and task record, its test metrics are measured on the stripped file with
`transformer_lab.training.evaluate.evaluate` (the same function the tests use) and compared with what
train.py printed, and the file and its record in models.json are replaced atomically. A model's overrides,
description and headline metrics are read from models.json: to add a model, add its entry there and run
this script with its name.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from transformer_lab import pretrained, run_files
from transformer_lab.cli import run
from transformer_lab.errors import require

# Settings of the run that are not the model's: where it writes, and the device (the shipped models are
# trained on the CPU, so the same command gives the same model on any machine).
RUN_ONLY_KEYS = ("paths.", "hydra.", "trainer.accelerator=", "trainer=")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "names", nargs="*", metavar="name", help=f"models to retrain (default: all of {pretrained.names()})"
    )
    parser.add_argument("--log-dir", help="keep the training runs here (default: a temporary directory)")
    parser.add_argument(
        "--from-run",
        help="package this finished train.py run directory instead of training (one name only; the run's "
        "overrides must be the model's)",
    )
    parser.add_argument(
        "--remeasure",
        action="store_true",
        help="do not train: measure the shipped files again and update their metrics in models.json",
    )
    args = parser.parse_args(argv)
    for name in args.names:
        pretrained.record(name)  # an unknown name is a one-line error
    if args.from_run is not None:
        require(
            len(args.names) == 1,
            "--from-run packages one run: name its model, e.g. reverse --from-run saved_models/reverse/<run>",
        )
    args.names = args.names or pretrained.names()
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch  # noqa: F401  (after the arguments: --help and argument errors answer at once)

    started = time.perf_counter()
    for number, name in enumerate(args.names, 1):
        print(f"[{number}/{len(args.names)}] {name}: {pretrained.command(name)}", flush=True)
        model_start = time.perf_counter()
        hand_built = pretrained.record(name).get("hand_built")  # an answer key: built, not trained
        if hand_built and not args.remeasure:
            record_answer_key(name)
        elif args.remeasure:
            remeasure(name)
        elif args.from_run is not None:
            run_dir = Path(args.from_run)
            check_run(name, run_dir)
            package(name, run_dir)
        elif args.log_dir is not None:
            package(name, train(name, Path(args.log_dir)))
        else:
            with tempfile.TemporaryDirectory(prefix=f"pretrain-{name}-") as tmp:
                package(name, train(name, Path(tmp)))
        print(
            f"[{number}/{len(args.names)}] {name}: done in {time.perf_counter() - model_start:.0f} s",
            flush=True,
        )
    verb = "Measured" if args.remeasure else "Retrained"
    elapsed = time.perf_counter() - started
    print(f"{verb} {', '.join(args.names)} in {elapsed:.0f} s; list: {pretrained.LIST_COMMAND}")


def train(name: str, log_dir: Path) -> Path:
    """Run train.py for model `name` (its output on this screen: the step, the metrics); its run directory."""
    run_dir = log_dir / name / time.strftime("%Y-%m-%d_%H-%M-%S")
    overrides = pretrained.record(name)["overrides"]
    command = [
        sys.executable, "-m", "transformer_lab.train", *overrides, "trainer.accelerator=cpu",
        f"paths.log_dir={log_dir.absolute()}", f"hydra.run.dir={run_dir.absolute()}",
    ]  # fmt: skip
    result = subprocess.run(command)
    require(
        result.returncode == 0, f"training {name} failed (exit code {result.returncode}): {' '.join(command)}"
    )
    return run_dir


def check_run(name: str, run_dir: Path) -> None:
    """A run given with --from-run must be finished and trained with the model's overrides."""

    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    require(
        (run_dir / "metrics.json").is_file() and overrides_file.is_file(),
        f"--from-run {run_dir} is not a finished train.py run (no metrics.json or .hydra/overrides.yaml)",
    )
    used = [o for o in run_files.overrides(run_dir) if not o.startswith(RUN_ONLY_KEYS)]
    wanted = pretrained.record(name)["overrides"]
    require(
        sorted(used) == sorted(wanted),
        f"--from-run {run_dir} was trained with {used or 'no overrides'}, but {name} is trained with "
        f"{wanted or 'no overrides'}; train it with: {pretrained.command(name)}",
    )


def package(name: str, run_dir: Path) -> None:
    """Strip the run's best.ckpt into the package, measure it, and record it in models.json."""
    import lightning
    import torch

    from transformer_lab.checkpoint import load_model
    from transformer_lab.training.checkpoint_io import shippable

    run_metrics = run_files.metrics(run_dir)
    best = run_dir / "checkpoints" / "best.ckpt"
    require(best.is_file(), f"{run_dir} has no checkpoints/best.ckpt")
    entry = pretrained.record(name)
    if entry.get("snapshots") is not None:  # a series: the run's snapshots, the model is the last of them
        best = ship_snapshots(name, run_dir, entry)
    stripped = shippable(torch.load(best, map_location="cpu", weights_only=True))
    target = pretrained.DIRECTORY / entry["file"]
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        torch.save(stripped, tmp)
        print(f"  measuring {target.name} ({tmp.stat().st_size / 1e6:.2f} MB) on the test split", flush=True)
        measured = measure(tmp)
        metrics = measured["test_metrics"]
        model = load_model(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    printed = {k: v for k, v in run_metrics.items() if k.startswith("test/")}
    differences = {k: abs(metrics[k] - v) for k, v in printed.items() if k in metrics}
    for key, value in metrics.items():
        print(f"  {key:<14} {value:.6f}   (train.py printed {printed.get(key, float('nan')):.6f})")
    if max(differences.values(), default=0.0) > 1e-4:
        print(f"  warning: the shipped file's metrics differ from the run's by up to "
              f"{max(differences.values()):.2e}", flush=True)  # fmt: skip
    config = run_files.config(run_dir)
    net = model.config
    entry.update(
        architecture=net.arch,
        layers=net.num_layers,
        heads=net.num_heads,
        shape=model.shape(),
        model_dim=net.model_dim,
        parameters=sum(p.numel() for p in model.parameters()),
        **measured,
        train_test_metrics=printed,
        evaluated_on=describe_test_split(stripped["datamodule_hyper_parameters"]),
        seed=config.get("seed"),
        global_step=run_metrics.get("global_step"),
        train_wall_time_s=run_metrics.get("wall_time_s"),
        device=run_metrics.get("device"),
        date=time.strftime("%Y-%m-%d"),
        torch=torch.__version__,
        lightning=lightning.__version__,
        size_bytes=target.stat().st_size,
        sha256=sha256(target),
    )
    if entry.get("snapshots") is not None:  # the last snapshot is the model's file, rewritten stripped
        series = entry["snapshots"]
        series["sha256"][target.name] = entry["sha256"]
        series["size_bytes"] = sum((target.parent / file).stat().st_size for file in series["sha256"])
    write_record(name, entry)


def ship_snapshots(name: str, run_dir: Path, entry: dict) -> Path:
    """Copy the run's snapshots (already shippable files) into the package folder the record names, each
    recorded with its sha256; the model's own file becomes the last snapshot (set in `entry`). Returns
    the run's last snapshot."""
    import shutil

    from transformer_lab import snapshots

    found = snapshots.find(run_dir)
    folder = pretrained.DIRECTORY / entry["snapshots"]["directory"]
    folder.mkdir(exist_ok=True)
    for old in folder.glob("step_*.ckpt"):
        old.unlink()
    for snapshot in found:
        shutil.copyfile(snapshot.path, folder / snapshot.path.name)
    entry["snapshots"]["sha256"] = {s.path.name: sha256(folder / s.path.name) for s in found}
    entry["snapshots"]["size_bytes"] = sum((folder / s.path.name).stat().st_size for s in found)
    entry["file"] = f"{entry['snapshots']['directory']}/{found[-1].path.name}"
    print(
        f"  {len(found)} snapshots, {entry['snapshots']['size_bytes'] / 1e6:.2f} MB, into {folder}",
        flush=True,
    )
    return found[-1].path


def measure(file: Path) -> dict:
    """The test metrics of a checkpoint file on its whole test split, and on the first batches the tests
    re-measure (`check_metrics`)."""
    from transformer_lab.training.evaluate import evaluate

    return {
        "test_metrics": evaluate(str(file)),
        "check_batches": pretrained.CHECK_BATCHES,
        "check_metrics": evaluate(str(file), limit_batches=pretrained.CHECK_BATCHES),
    }


def remeasure(name: str) -> None:
    """Measure the shipped file again (after a change to the evaluation) and update its record."""
    entry = pretrained.record(name)
    before = entry.get("test_metrics", {})
    entry.update(measure(pretrained.path(name)), measured=time.strftime("%Y-%m-%d"))
    for key, value in entry["test_metrics"].items():
        print(f"  {key:<14} {value:.6f}   (recorded {before.get(key, float('nan')):.6f})", flush=True)
    write_record(name, entry)


def describe_test_split(data: dict) -> str:
    """What the test metrics were measured on, from the task's hyperparameters."""
    if "test_size" in data:
        return f"the whole test split: {data['test_size']} sequences (data seed {data.get('seed')})"
    if "val_batches" in data:
        return (
            f"the whole test split: {data['val_batches']} batches of {data['batch_size']} windows of "
            f"{data['block_size']} characters, at fixed places in the last {1 - data['train_fraction']:.0%} "
            f"of the text (data seed {data.get('seed')})"
        )
    return "the whole test split"


def sha256(file: Path) -> str:
    import hashlib

    with open(file, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_record(name: str, entry: dict) -> None:
    """Replace one record of models.json (atomically: a reader never sees half a file)."""
    records = pretrained.records()
    records[name] = entry
    tmp = pretrained.RECORDS.with_name(f".{pretrained.RECORDS.name}.tmp")
    tmp.write_text(json.dumps(records, indent=2) + "\n")
    os.replace(tmp, pretrained.RECORDS)


# ------------------------------------------------------------------ the hand-built answer keys
def answer_key_contents(key) -> dict:
    """An answer key's checkpoint file contents (`transformer_lab.pretrained.answer_keys`: built by hand,
    not trained): what a shipped model holds (weights, hyperparameters, the task's record), as train.py
    would have written them."""
    import lightning

    from transformer_lab.training.checkpoint_io import FORMAT_VERSION
    from transformer_lab.training.predictor import TransformerPredictor

    model = key.model()
    predictor = TransformerPredictor(net=model.config.to_dict(), metrics=key.metrics)
    predictor.net.load_state_dict(model.state_dict())
    return {
        "state_dict": {k: v.detach().clone().contiguous() for k, v in predictor.state_dict().items()},
        "hyper_parameters": dict(predictor.hparams),
        "hparams_name": "kwargs",
        "format_version": FORMAT_VERSION,
        "task": {"class": key.task_class, "separator": " "},
        "datamodule_hyper_parameters": dict(key.task_hparams),
        "pytorch-lightning_version": lightning.__version__,
    }


def ship_answer_key(name: str) -> dict:
    """Write the key's file into the package, measure it on its test split and return its record."""
    import hashlib

    import lightning
    import torch

    from transformer_lab.files import write_atomically
    from transformer_lab.pretrained.answer_keys import KEYS
    from transformer_lab.training.evaluate import evaluate

    key = KEYS[name]
    target = pretrained.DIRECTORY / f"{name}.ckpt"
    checkpoint = answer_key_contents(key)
    write_atomically(target, lambda file: torch.save(checkpoint, file))
    model = key.model()
    test_metrics = evaluate(str(target))
    record = {
        "file": target.name,
        "description": key.description,
        "task": "reverse" if "reverse" in name else "induction",
        "hand_built": True,
        "overrides": [],
        "headline": key.headline,
        "architecture": model.config.arch,
        "layers": model.config.num_layers,
        "heads": model.config.num_heads,
        "shape": model.shape(),
        "model_dim": model.config.model_dim,
        "parameters": sum(p.numel() for p in model.parameters()),
        "test_metrics": test_metrics,
        "train_test_metrics": test_metrics,
        "evaluated_on": f"the whole test split: {key.task_hparams['test_size']} sequences (data seed 0)",
        "device": "cpu",
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "size_bytes": target.stat().st_size,
        "sha256": hashlib.sha256(target.read_bytes()).hexdigest(),
        "check_batches": pretrained.CHECK_BATCHES,
        "check_metrics": evaluate(str(target), limit_batches=pretrained.CHECK_BATCHES),
        "measured": time.strftime("%Y-%m-%d"),
        "circuit": {
            "level": "edge",
            "metric": "logit_diff",
            "edges": key.circuit,
            "mechanism": key.mechanism,
            "distractors": key.distractors,
        },
    }
    return record


def record_answer_key(name: str) -> None:
    """Build answer key `name`, write its file, measure it and replace its record in models.json."""
    record = ship_answer_key(name)
    shown = "  ".join(f"{k} {v:.4f}" for k, v in record["test_metrics"].items())
    print(f"{name}: {record['size_bytes']} bytes, {shown}", flush=True)
    current = json.loads(pretrained.RECORDS.read_text())  # shared: read again now, write in one step
    current[name] = record
    Path(pretrained.RECORDS).write_text(json.dumps(current, indent=2) + "\n")


if __name__ == "__main__":
    run(main)
