"""docs/dynamics.md's training commands in full, for the three files of `make reproduce` that check what
the page says of them (test_dynamics_page.py: the induction sweeps; test_dynamics_grokking.py;
test_dynamics_controls.py). Three files, so that the runs (about 25 minutes of one core in all on a
quiet machine) share the two cores: pytest-xdist hands each file to one process. The controls' one-layer
run is the one-layer sweep's seed 1 trained again (a minute), the price of the two files running apart."""

import contextlib
import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, load_script
from tests.pages import page_steps, run_command

PAGE = ROOT / "docs" / "dynamics.md"
INDUCTION_STEPS = (800, 1600)  # the 2-layer runs' phase change, half way (the page says so)
GROKKING_STEPS = (2000, 4500)  # the held-out accuracy's phase change, half way
CONTROL_SEED = 1  # the seed of every control: the one-layer control is the one-layer sweep's seed-1 run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The page's training commands in full, each run once for the module's tests: `trained(name)` ->
    the folder saved_models/<name> (trained by the page's block that writes it, not one analysing it)."""
    root = tmp_path_factory.mktemp("page")
    done: set[str] = set()

    def train_(name: str) -> Path:
        if name not in done:
            (command,) = [
                c
                for kind, c, _ in page_steps(PAGE)
                if "python train.py" in c and f"=saved_models/{name} " in c + " "
            ]
            with contextlib.chdir(root):
                run_command(command, root, full=True)
            done.add(name)
        return root / "saved_models" / name

    train_.root = root
    return train_


def sweep(trained, name: str) -> tuple[list[dict], dict]:
    """The page's sweep into saved_models/<name> in full, then analysis=dynamics over it: (each run's
    metrics.json, dynamics.json)."""
    folder = trained(name)
    out = trained.root / f"dynamics_{name}"
    with contextlib.chdir(trained.root):
        load_script("interpret").main([f"ckpt_path={folder}", "analysis=dynamics", f"out_dir={out}"])
    runs = sorted(folder.glob("[0-9]*/metrics.json"), key=lambda p: int(p.parent.name))
    return [json.loads(p.read_text()) for p in runs], json.loads((out / "dynamics.json").read_text())


def within(step: float | None, span: tuple[int, int]) -> bool:
    return step is not None and span[0] <= step <= span[1]
