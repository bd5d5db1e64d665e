"""docs/dynamics.md's grokking sweep in full (`make reproduce`): what the page says make reproduce checks
of it, in every seed (its own file so that it trains beside the page's other runs: dynamics_runs.py)."""

import pytest

import transformer_lab
from tests.dynamics_runs import GROKKING_STEPS, sweep, within
from transformer_lab.analysis import events, grokking


@pytest.mark.reproduce
def test_grokking_forms_its_circuit_before_its_phase_change_in_every_seed(trained):
    """The held-out accuracy's event in every seed, and by the snapshot where it begins the Fourier
    sparsity has left its chance region: the circuit forms before the phase change shows it (a value at
    an event's step, not an order of half-way points, which only two events could give)."""
    runs, dynamics = sweep(trained, "grokking")
    assert len(runs) == 3 and all(within(m["phase_change"]["step"], GROKKING_STEPS) for m in runs)
    for name, run in dynamics["runs"].items():
        (acc,) = [e for e in run["events"] if e["curve"] == "acc"]
        begins = run["steps"].index(acc["start"])
        sparsity, scale = run["scores"]["fourier_sparsity"][begins], run["scales"]["fourier_sparsity"]
        assert sparsity >= scale["chance"] + events.CHANCE * scale["size"], name
    for run_dir in sorted((trained("grokking")).glob("[0-9]*")):
        checkpoint = transformer_lab.load(str(run_dir / "checkpoints" / "snapshots" / "step_00006000.ckpt"))
        found = grokking.key_frequencies(grokking.token_embeddings(checkpoint.model, checkpoint.task.p))
        assert 3 <= len(found) <= 12, (run_dir.name, found)
