"""A run directory's own files, read as files someone else may have made (a run folder copied from a
colleague): the one reader that resume, summarize, curves and the scripts use.

    run_files.overrides(run)    .hydra/overrides.yaml: the command line's overrides, a list of strings
    run_files.config(run)       .hydra/config.yaml: the composed config (an OmegaConf DictConfig)
    run_files.hydra(run)        .hydra/hydra.yaml: Hydra's settings of the run (empty if missing)
    run_files.metrics(run)      metrics.json: the final metrics (None if missing: a failed or running run)

Each refuses, in one line naming the file, a symlink, a FIFO or a device, a file larger than a run file
can be, YAML aliases and anything but the structure it must have (`transformer_lab.files`).
"""

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from transformer_lab.errors import require
from transformer_lab.files import read_json, read_yaml


def overrides(run: Path) -> list[str]:
    """The overrides `run` was started with (`.hydra/overrides.yaml`)."""
    path = Path(run) / ".hydra" / "overrides.yaml"
    values = read_yaml(path)
    values = [] if values is None else values
    require(
        isinstance(values, list) and all(isinstance(v, str) for v in values),
        f"{path} is not a list of overrides (key=value strings); it is not the file train.py wrote",
    )
    return values


def _mapping(path: Path) -> DictConfig:
    values = read_yaml(path)
    require(isinstance(values, dict), f"{path} is not a mapping of settings; it is not the file Hydra wrote")
    return OmegaConf.create(values)


def config(run: Path) -> DictConfig:
    """The config `run` was composed with (`.hydra/config.yaml`)."""
    return _mapping(Path(run) / ".hydra" / "config.yaml")


def hydra(run: Path) -> DictConfig:
    """Hydra's settings of `run` (`.hydra/hydra.yaml`); empty where the run has none."""
    path = Path(run) / ".hydra" / "hydra.yaml"
    return _mapping(path) if path.exists() or path.is_symlink() else OmegaConf.create({})


def metrics(run: Path) -> dict | None:
    """The metrics `run` wrote when it finished (`metrics.json`); None where it has none."""
    path = Path(run) / "metrics.json"
    if not (path.exists() or path.is_symlink()):
        return None
    values = read_json(path)
    require(
        isinstance(values, dict), f"{path} is not a mapping of metrics; it is not the file train.py wrote"
    )
    return values
