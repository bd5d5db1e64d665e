"""EAP with integrated gradients (EAP-IG, Hanna et al. 2024): eap's estimate with the gradient averaged
along the path from the corrupted input to the clean one.

    M(patched) - M(clean)  ~  (out_u' - out_u) . (1/steps) sum_{k=1..steps} dM/d input_d (alpha = k/steps)

where at alpha the embeddings are out' + alpha (out - out') (alpha = 0: corrupted, 1: clean; a right
Riemann sum of the path integral; steps=1 is eap). It sees what saturates at the clean input, and works
with metric=kl, whose gradient at the clean input is 0.
"""

from __future__ import annotations

from torch import Tensor

from transformer_lab.analysis.circuits.attribution import attribution, gradients
from transformer_lab.analysis.circuits.methods import register
from transformer_lab.analysis.circuits.options import Options, Scores, require_steps
from transformer_lab.analysis.circuits.patcher import Setup


@register(
    "eap_ig",
    "eap's gradient averaged over `steps` points on the line from the corrupted to the clean embeddings "
    "(integrated gradients): 2 + `steps` passes",
)
def score(setup: Setup, options: Options) -> Scores:
    """EAP-IG: the gradient averaged over alpha = k / steps, k = 1 .. steps (right Riemann sum of the
    path from the corrupted embeddings, alpha = 0, to the clean ones, alpha = 1)."""
    steps = options.steps
    require_steps(steps)
    total: dict[str, Tensor] = {}
    for k in range(1, steps + 1):
        for name, gradient in gradients(setup, k / steps).items():
            total[name] = total[name] + gradient if name in total else gradient
    return attribution(setup, {name: t / steps for name, t in total.items()})
