"""The MLPs' activations by name (`model.activation`): plain ones, applied to W_1 x, and gated ones, applied
to the gate W_gate x of a gated linear unit (Shazeer, 2020)."""

import torch.nn.functional as F
from torch import nn


class GELUNew(nn.GELU):
    """GPT-2's `gelu_new`: GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
    (Hendrycks & Gimpel, 2016), which GPT-2 was trained with; `gelu` is the exact x Phi(x)."""

    def __init__(self) -> None:
        super().__init__(approximate="tanh")


PLAIN = {"relu": nn.ReLU, "gelu": nn.GELU, "gelu_new": GELUNew}  # the module of each
GATES = {"swiglu": F.silu, "geglu": F.gelu}  # the gate's activation: SiLU (Llama's SwiGLU), GELU
NAMES = (*PLAIN, *GATES)
