"""The toy model of superposition (Elhage et al. 2022, "Toy Models of Superposition"): n sparse features
squeezed through m < n hidden dimensions and read back,

    h = W x                      [m]   the hidden layer (hook point `hook_hidden`)
    x' = ReLU(W^T h + b)         [n]   the reconstruction

trained to minimise sum_i I_i (x_i - x'_i)^2 with importances I_i. When features are sparse it represents
more of them than it has dimensions: column W_i is feature i's direction in the hidden layer, of norm
about 1 for the features it represents and about 0 for the others, and the represented directions overlap
(superposition). Those directions are what an SAE on the hidden layer should find
(`data.superposition`, the second answer key for SAEs).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from transformer_lab.nn.hooks import HookedModule, HookPoint


class ToyModel(HookedModule):
    """x [..., n] -> ReLU(W^T W x + b) [..., n], W [m, n] (see the module docstring)."""

    def __init__(self, num_features: int, hidden: int):
        super().__init__()
        self.W = nn.Parameter(torch.randn(hidden, num_features) * (2 / (num_features + hidden)) ** 0.5)
        self.b = nn.Parameter(torch.zeros(num_features))
        self.hook_hidden = HookPoint()

    def hidden(self, x: Tensor) -> Tensor:
        """h = W x."""
        return self.hook_hidden(x @ self.W.t())

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.hidden(x) @ self.W + self.b)

    def represented(self, level: float = 0.5) -> Tensor:
        """Bool [n]: the features with a direction of norm above `level` (those the model represents)."""
        return self.W.norm(dim=0) > level

    def directions(self) -> Tensor:
        """Each feature's unit direction in the hidden layer, [n, m] (W's columns normalised)."""
        return (self.W / self.W.norm(dim=0, keepdim=True).clamp(min=1e-12)).t()
