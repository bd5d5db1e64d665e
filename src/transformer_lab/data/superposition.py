"""The second answer key for SAEs: the hidden layer of a toy model of superposition (Elhage et al. 2022),
trained here, whose feature directions are known (`nn.superposition.ToyModel`).

A feature is on with probability `probability` (then uniform in (0, 1)), so about num_features *
probability are on at a time; feature i has importance importance**i. The toy model is trained first (a
few seconds: `toy_steps` Adam steps of 512 examples, seeded), and represents more features than its
`hidden` dimensions, in superposition; the task's activations are its hidden layer h = W x of fresh
examples. The SAE is graded on the directions of the represented features (norm of W_i above 0.5): MMCS
and the share matched above 0.9, as on the synthetic key.

    python train.py experiment=sae_toy              # mmcs and recovered_share in metrics.json
"""

from __future__ import annotations

import logging
from functools import cached_property

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from transformer_lab.data.activation_task import DrawnActivations
from transformer_lab.errors import require
from transformer_lab.nn.superposition import ToyModel

log = logging.getLogger(__name__)

TOY_BATCH = 512


class SuperpositionDataModule(DrawnActivations):
    """The hidden activations of a toy model of superposition (see the module docstring)."""

    hook = "hook_hidden"

    def __init__(
        self,
        num_features: int = 20,
        hidden: int = 5,
        probability: float = 0.05,
        importance: float = 0.9,
        toy_steps: int = 2000,
        toy_lr: float = 1e-2,
        batch_size: int = 256,
        val_size: int = 4096,
        test_size: int = 8192,
        seed: int = 0,
        verbose: bool = True,
    ):
        super().__init__()
        for key, value in (
            ("num_features", num_features),
            ("hidden", hidden),
            ("toy_steps", toy_steps),
            ("batch_size", batch_size),
            ("val_size", val_size),
            ("test_size", test_size),
        ):
            require(isinstance(value, int) and value > 0, f"data.{key}={value!r} must be a positive integer")
        require(hidden < num_features <= 4096, "data.hidden must be below data.num_features (at most 4096)")
        for key, value in (("probability", probability), ("importance", importance)):
            require(
                isinstance(value, int | float) and 0 < value <= 1, f"data.{key}={value!r} must be in (0, 1]"
            )
        require(isinstance(toy_lr, int | float) and toy_lr > 0, f"data.toy_lr={toy_lr!r} must be positive")
        require(isinstance(seed, int), f"data.seed={seed!r} must be an integer")
        self.save_hyperparameters()
        self.num_features, self.d_in, self.probability = num_features, hidden, float(probability)
        self.batch_size, self.seed, self.verbose = batch_size, seed, verbose
        self.sizes = {"val": val_size, "test": test_size}
        self.splits: dict[str, Tensor] = {}

    def features(self, count: int, generator: torch.Generator) -> Tensor:
        """`count` sparse feature vectors x [count, num_features]."""
        on = torch.rand(count, self.num_features, generator=generator) < self.probability
        return torch.rand(count, self.num_features, generator=generator) * on

    @cached_property
    def toy(self) -> ToyModel:
        """The toy model, trained (seeded: the same model for the same settings)."""
        h = self.hparams
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            toy = ToyModel(self.num_features, self.d_in)
        importance = h.importance ** torch.arange(self.num_features, dtype=torch.float32)
        optimizer = torch.optim.Adam(toy.parameters(), lr=h.toy_lr)
        generator = torch.Generator().manual_seed(self.seed + 100)
        with torch.enable_grad(), torch.inference_mode(False):
            for _ in range(h.toy_steps):
                x = self.features(TOY_BATCH, generator)
                loss = (importance * (x - toy(x)).pow(2)).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        toy.requires_grad_(False).eval()
        if self.verbose:
            log.info(
                f"Toy model of superposition: {int(toy.represented().sum())} of {self.num_features} features "
                f"represented in {self.d_in} dimensions (loss {float(loss):.2g} after {h.toy_steps} steps)"
            )
        return toy

    def true_features(self) -> Tensor:
        """The represented features' unit directions in the hidden layer [n_represented, hidden]."""
        toy = self.toy
        return toy.directions()[toy.represented()]

    def draw(self, count: int, generator: torch.Generator) -> Tensor:
        """`count` hidden activations h = W x [count, hidden]."""
        with torch.no_grad():
            return self.toy.hidden(self.features(count, generator))

    def train_dataloader(self) -> DataLoader:
        self.toy  # noqa: B018  (trained here, before the loader's stream begins)
        return super().train_dataloader()
