"""What a circuit analysis is asked for (the metric, the ablation, a method's options) and what a method
gives back (`Scores`). No torch: the command line checks these before torch loads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from transformer_lab.errors import require

if TYPE_CHECKING:
    from torch import Tensor

METRICS = ("logit_diff", "logprob", "kl")  # M: see metrics.py
ABLATIONS = ("corrupted", "zero", "mean")  # what a patched unit carries: see patcher.py
MAX_STEPS = 1000  # eap_ig integration steps: papers use 5-100
VERIFY = 20  # an estimate's top units checked by exact patching (verify=; 0: none)


@dataclass(frozen=True)
class Options:
    """What a method may read besides the setup; each reads what it needs and ignores the rest.
    `steps`: eap_ig's integration steps; `threshold`: acdc's share of |M(clean) - M(all patched)|;
    `max_seconds`: a method of one patched pass per unit refuses, before it starts, what would take
    longer (None: no limit)."""

    steps: int = 5
    threshold: float = 0.01
    max_seconds: float | None = 600.0


@dataclass
class Scores:
    """What a method returns: `scores` [units], per unit (edge, or node at node level) the (estimated)
    change of M when it alone is patched; `kept`: bool [units], the units a pruning method (acdc) kept;
    `per_example` [B, units], optional: each example's share of the scores (its rows sum to `scores`;
    `Setup.evaluate(..., per_example=True)` and the metric's `contributions` give such shares), from
    which `discover` bootstraps the scores' intervals over the examples."""

    scores: Tensor
    kept: Tensor | None = None
    per_example: Tensor | None = None


def _shown(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else repr(value)


def require_metric(metric: object) -> None:
    """The metric M by its name (metrics.py)."""
    require(metric in METRICS, f"metric={metric} is unknown; use metric={' | '.join(METRICS)}")


def require_ablation(ablation: object) -> None:
    """What a patched unit carries (patcher.py)."""
    require(ablation in ABLATIONS, f"ablation={ablation} is unknown; use ablation={' | '.join(ABLATIONS)}")


def require_verify(verify: object) -> None:
    """`verify=K`: how many of an estimate's top units exact patching checks, an integer >= 0."""
    require(
        isinstance(verify, int) and not isinstance(verify, bool) and verify >= 0,
        f"verify={_shown(verify)} must be an integer >= 0: the top edges checked by exact patching "
        f"(default {VERIFY}; 0: none)",
    )


def require_steps(steps: object) -> None:
    """eap_ig's `steps`: an integer from 1 to MAX_STEPS."""
    require(
        isinstance(steps, int) and not isinstance(steps, bool) and 1 <= steps <= MAX_STEPS,
        f"steps={_shown(steps)} must be an integer from 1 to {MAX_STEPS} (default 5; each step is a forward "
        "and backward pass)",
    )


def require_threshold(threshold: object) -> None:
    """acdc's `threshold`: a share of |M(clean) - M(all patched)|, strictly between 0 and 1."""
    require(
        isinstance(threshold, int | float) and not isinstance(threshold, bool) and 0 < threshold < 1,
        f"threshold={_shown(threshold)} is out of range: it is a share of |M(clean) - M(all patched)|, "
        "between 0 and 1 (default 0.01)",
    )
