"""Edge attribution patching (EAP, Syed et al. 2023): every edge's score from two forward passes and one
backward pass.

The change of M when edge u -> d alone is patched, to first order in the change of d's input:

    M(patched) - M(clean)  ~  (out_u' - out_u) . dM/d input_d        (gradient at the clean input)

(at node level: (out_u' - out_u) . dM/d out_u). Exact where the model is linear in the patched values; a
gradient at the clean input misses what saturates there (a softmax near 0 or 1), and with metric=kl it
is 0 everywhere (KL to the clean output is at its minimum there): use eap_ig, or logit_diff or logprob.
"""

from __future__ import annotations

from transformer_lab.analysis.circuits.attribution import attribution, gradients
from transformer_lab.analysis.circuits.methods import register
from transformer_lab.analysis.circuits.options import Options, Scores
from transformer_lab.analysis.circuits.patcher import Setup
from transformer_lab.errors import require


@register(
    "eap",
    "the first-order estimate (corrupted - clean output of u) . dM/d(input of d) at the clean input, "
    "every edge at once: 2 forward passes and 1 backward pass",
)
def score(setup: Setup, options: Options) -> Scores:
    """EAP: (out_u' - out_u) . dM/d input_d at the clean input, every edge from one backward pass."""
    require(
        setup.metric.name != "kl",
        "method=eap with metric=kl scores every edge 0: KL divergence to the clean output has zero gradient "
        "at the clean input, where eap takes it; use method=eap_ig (integrated gradients), or "
        "metric=logit_diff or metric=logprob",
    )
    return attribution(setup, gradients(setup, None))
