"""docs/dynamics.md's grokking sweep in full (`make reproduce`): what the page says make reproduce checks
of it, in every seed (its own file so that it trains beside the page's other runs: dynamics_runs.py)."""

import pytest
import torch

import transformer_lab
from tests.dynamics_runs import GROKKING_STEPS, sweep, within
from transformer_lab.analysis import grokking


@pytest.mark.reproduce
def test_grokking_forms_its_circuit_before_its_phase_change_in_every_seed(trained):
    """The held-out accuracy's event in every seed, and by the snapshot where it begins the Fourier
    sparsity is far from what an embedding that learned nothing has: more than ten standard deviations
    above the mean of 200 Gaussian embeddings of the same shape (0.034 +- 0.0045). The circuit forms
    before the phase change shows it (a value at an event's step, not an order of half-way points, which
    only two events could give). Not the events' coarser chance region (a tenth of the scale, 0.134):
    on another CPU's kernels one seed's event begins a snapshot earlier (step 1881), at 0.114."""
    runs, dynamics = sweep(trained, "grokking")
    assert len(runs) == 3 and all(within(m["phase_change"]["step"], GROKKING_STEPS) for m in runs)
    generator = torch.Generator().manual_seed(0)
    p, width = 59, 64  # configs/experiment/grokking.yaml
    untrained = torch.tensor(
        [grokking.fourier_sparsity(torch.randn(p, width, generator=generator)) for _ in range(200)]
    )
    for name, run in dynamics["runs"].items():
        (acc,) = [e for e in run["events"] if e["curve"] == "acc"]
        begins = run["steps"].index(acc["start"])
        sparsity = run["scores"]["fourier_sparsity"][begins]
        assert sparsity > untrained.mean() + 10 * untrained.std(), (name, sparsity)
    for run_dir in sorted((trained("grokking")).glob("[0-9]*")):
        checkpoint = transformer_lab.load(str(run_dir / "checkpoints" / "snapshots" / "step_00006000.ckpt"))
        found = grokking.key_frequencies(grokking.token_embeddings(checkpoint.model, checkpoint.task.p))
        assert 3 <= len(found) <= 12, (run_dir.name, found)
