"""The synthetic answer key for SAEs: activations made of known features (Sharkey et al. 2022, "Taking
features out of superposition with sparse autoencoders").

`num_features` random unit directions g_1 .. g_n in `d_in` dimensions, more of them than dimensions (so
they cannot be orthogonal: they are in superposition). An activation is a sparse, non-negative
combination of them,

    x = sum_i c_i g_i,    c_i = u_i [feature i is on],   u_i ~ U(0, 1),   P(on) = active / n

so `active` features are on on average. An SAE that finds the features has a decoder direction close to
every g_i: the grade is the mean over i of the best cosine similarity of g_i to a learned direction (MMCS)
and the share of g_i matched above 0.9 (`ActivationTask.true_features`, `activation_task.mmcs`).

    python train.py experiment=sae_synthetic          # mmcs and recovered_share in metrics.json
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_lab.data.activation_task import DrawnActivations
from transformer_lab.errors import require


class SyntheticFeaturesDataModule(DrawnActivations):
    """Activations `d_in` wide made of `num_features` known directions, `active` on at a time on average
    (see the module docstring); the directions from `seed`, the validation and test sets from seed + 1
    and seed + 2, training batches drawn anew forever (a run ends at trainer.max_steps)."""

    def __init__(
        self,
        d_in: int = 32,
        num_features: int = 128,
        active: float = 4.0,
        batch_size: int = 256,
        val_size: int = 4096,
        test_size: int = 8192,
        seed: int = 0,
    ):
        super().__init__()
        for key, value in (
            ("d_in", d_in),
            ("num_features", num_features),
            ("batch_size", batch_size),
            ("val_size", val_size),
            ("test_size", test_size),
        ):
            require(isinstance(value, int) and value > 0, f"data.{key}={value!r} must be a positive integer")
        require(d_in <= 4096 and num_features <= 65536, "data.d_in <= 4096 and data.num_features <= 65536")
        require(
            isinstance(active, int | float) and 0 < active <= num_features,
            f"data.active={active!r} must be a number in (0, data.num_features={num_features}]",
        )
        require(isinstance(seed, int), f"data.seed={seed!r} must be an integer")
        self.save_hyperparameters()
        self.d_in, self.num_features, self.active = d_in, num_features, float(active)
        self.batch_size, self.seed = batch_size, seed
        self.sizes = {"val": val_size, "test": test_size}
        # drawn [d_in, n] and transposed: a stream of its own, never the first rows a model's init draws
        directions = torch.randn(d_in, num_features, generator=torch.Generator().manual_seed(seed)).t()
        self.directions = directions / directions.norm(dim=1, keepdim=True)
        self.splits: dict[str, Tensor] = {}

    def true_features(self) -> Tensor:
        return self.directions

    def draw(self, count: int, generator: torch.Generator) -> Tensor:
        """`count` activations [count, d_in]."""
        on = torch.rand(count, self.num_features, generator=generator) < self.active / self.num_features
        return (torch.rand(count, self.num_features, generator=generator) * on) @ self.directions
