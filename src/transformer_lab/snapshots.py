"""The snapshots of a run: the model at log-spaced steps (the `Snapshots` callback, on by default).

    <run>/checkpoints/snapshots/step_00000000.ckpt ... step_00004000.ckpt

    find("saved_models/induction/<run>")          every snapshot of the run, oldest first
    find("pretrained:induction_heads")            a shipped series (its files checked against their sha256)
    find("hf:pythia-70m-steps")                   checkpoints over training of a model from elsewhere:
                                                  <folder>/step<N>/, each saved with save_pretrained (as
                                                  Pythia publishes revisions step0 ... step143000)
    nearest("saved_models/induction/<run>", 1000) the snapshot nearest step 1000

Each file is an ordinary checkpoint (`transformer_lab.load(snapshot.path)`). Imports no torch.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from transformer_lab import pretrained
from transformer_lab.errors import ConfigError, require

FOLDER = Path("checkpoints") / "snapshots"
NAME = re.compile(r"step_(\d{8})\.ckpt")
HF_STEP = re.compile(r"step(\d{1,12})")  # <folder>/step<N>/: Pythia's revision names


@dataclass(frozen=True)
class Snapshot:
    """One snapshot: the optimisation step it was taken at and its file."""

    step: int
    path: Path


def local(location: str | Path) -> Path:
    """The path a location names on this machine; a one-line error where the system cannot even look at
    it (a name too long, a symlink loop, no permission), as for a checkpoint."""
    path = Path(location).expanduser()
    try:
        os.stat(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConfigError(f"ckpt_path={location} cannot be read: {exc.strerror or exc}") from None
    return path


def folder(location: str | Path) -> Path | None:
    """The snapshots folder a location names: a run directory (its checkpoints/snapshots), the folder
    itself, or a checkpoint file of a run (best.ckpt, last.ckpt, a snapshot); None where there is none."""
    path = local(location)
    candidates = [path / FOLDER, path] if path.is_dir() else []
    if path.is_file():
        parent = path.parent
        candidates = [parent] if parent.name == "snapshots" else [parent / "snapshots"]
    return next(
        (c for c in candidates if c.is_dir() and any(NAME.fullmatch(f.name) for f in c.iterdir())), None
    )


def _one_per_step(snapshots: list[Snapshot], location: str | Path) -> list[Snapshot]:
    """The snapshots, each step once: two files or folders naming the same step (step0 and step00) are
    refused in one line, not measured twice."""
    for before, after in itertools.pairwise(snapshots):
        require(
            before.step != after.step,
            f"{location} holds {before.path.name} and {after.path.name}, both step {after.step}; keep one",
        )
    return snapshots


def hf_series(location: str | Path) -> list[Snapshot]:
    """The checkpoints over training of `hf:<folder>`: its step<N>/ folders holding a config.json, each
    a snapshot named `hf:<folder>/step<N>` (what `transformer_lab.load` opens), oldest first; [] where the
    folder is a model of its own or holds none."""
    path = local(str(location).removeprefix("hf:"))
    if not path.is_dir() or (path / "config.json").exists():
        return []
    found = []
    for child in path.iterdir():
        match = HF_STEP.fullmatch(child.name)
        if match and child.is_dir() and (child / "config.json").is_file():
            found.append(Snapshot(int(match.group(1)), Path(f"hf:{child}")))
    return _one_per_step(sorted(found, key=lambda s: s.step), location)


def find(location: str | Path) -> list[Snapshot]:
    """Every snapshot of a run directory (or of `pretrained:<name>`, or the checkpoints over training of
    `hf:<folder>`), oldest first; a one-line error where there are none."""
    if pretrained.is_pretrained(location):
        name = str(location).removeprefix(pretrained.PREFIX)
        files = pretrained.snapshots(name)
        with_series = [n for n, r in pretrained.records().items() if r.get("snapshots")]
        require(
            bool(files),
            f"{location} has no snapshots (only its final weights); the ready-made models with a series "
            f"of snapshots are {', '.join('pretrained:' + n for n in with_series) or 'none'}",
        )
    elif str(location).startswith("hf:"):
        series = hf_series(location)
        require(
            bool(series),
            f"{location} is one set of weights, with no snapshots; a folder of checkpoints over training "
            "holds step<N>/ folders (Pythia's revisions: step0, step1000, ...), each saved with "
            "save_pretrained; or pass the directory of a run trained with the snapshots callback",
        )
        return series
    else:
        require(local(location).exists(), f"ckpt_path={location} does not exist")
        found = folder(location)
        require(
            found is not None,
            f"ckpt_path={location} has no snapshots ({FOLDER}/step_*.ckpt); pass the directory of a run "
            "trained with the snapshots callback (on by default: callbacks.snapshots.count > 0), or "
            "pretrained:induction_heads",
        )
        files = [f for f in found.iterdir() if NAME.fullmatch(f.name)]
    snapshots = [Snapshot(int(NAME.fullmatch(f.name).group(1)), f) for f in files]
    return _one_per_step(sorted(snapshots, key=lambda s: s.step), location)


def runs(location: str | Path) -> list[Path]:
    """The run directories with snapshots under a folder that has none of its own (a sweep of seeds:
    `python train.py -m ... seed=0,1,2`), in the order of their job numbers (2 before 10); [] for anything
    else."""
    if pretrained.is_pretrained(location) or str(location).startswith("hf:"):
        return []
    path = local(location)
    if not path.is_dir() or folder(path) is not None:
        return []
    found = [p.parent.parent for p in path.glob(f"*/{FOLDER}") if folder(p.parent.parent) is not None]
    return sorted(
        found, key=lambda run: (not run.name.isdigit(), int(run.name) if run.name.isdigit() else 0, run.name)
    )


def nearest(location: str | Path, step: int) -> Snapshot:
    """The snapshot of `location` nearest optimisation step `step` (the earlier one on a tie); a one-line
    error for a step before 0 or after the run's last snapshot."""
    snapshots = find(location)
    last = snapshots[-1].step
    require(
        isinstance(step, int) and 0 <= step <= last,
        f"step={step} is beyond the run: its snapshots go from step {snapshots[0].step} to step {last}; "
        f"use step=0..{last}",
    )
    return min(snapshots, key=lambda s: (abs(s.step - step), s.step))


def at_step(location: str | Path, step: int | None) -> str:
    """`step=N` of a tool: the file of the snapshot of `location` nearest step N, said in one line."""
    require(step is not None, "step= needs a number, e.g. step=1000")
    snapshot = nearest(location, step)
    print(f"step={step}: the snapshot at step {snapshot.step} ({snapshot.path.name})")
    return str(snapshot.path)
