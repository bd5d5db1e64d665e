"""A kind of SAE written outside the package: one class, one registration (docs/development.md).
f = pre [pre > 1] with an L1 penalty: a JumpReLU whose threshold stays at 1, which SAELens reads as its
jumprelu with that threshold. Importing this module is all it takes for `model.kind=fixed_threshold`,
every tool and `to=sae_lens` to have it."""

import torch

from transformer_lab.nn import sae_kinds


@sae_kinds.register
class FixedThreshold(sae_kinds.Kind):
    name = "fixed_threshold"
    coefficient = "l1_coefficient"  # SAELens's name of an L1 penalty's coefficient
    default_coefficient = 1.0
    penalty_sum = "l1"
    saelens = "jumprelu"
    saelens_tensors = ("threshold",)

    def activate(self, sae, pre):
        return pre * (pre > 1.0)

    def threshold(self, sae):
        return torch.ones(sae.width, device=sae.W_enc.device)

    def penalty(self, sae, pre, f):
        return f.sum(-1).mean()
