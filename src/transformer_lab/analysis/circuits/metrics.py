"""The metric M a circuit is scored and evaluated by, per copy of the batch.

`logit_diff`: the logit of the clean answer minus that of the corrupted answer at each row's first output
the corruption changes, averaged over the rows; `kl`: KL(p_clean || p) at the outputs the corruption
changes, or at every labelled output where it changes none (the corruption of a text task keeps the
answer: its KL is the default there).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_lab.analysis.circuits.options import require_metric
from transformer_lab.analysis.interventions import answer_positions
from transformer_lab.errors import require
from transformer_lab.nn import IGNORE_INDEX


@dataclass
class Metric:
    """M(logits) per copy of the batch: [R * B, T, V] -> [R] (see the module docstring)."""

    name: str
    batch: int
    positions: Tensor | None = None  # logit_diff: each row's position, its clean and corrupted answers
    good: Tensor | None = None
    bad: Tensor | None = None
    mask: Tensor | None = None  # kl: bool [B, T], the outputs compared
    clean_log_probs: Tensor | None = None  # kl: [N, V] at those outputs

    def __call__(self, logits: Tensor) -> Tensor:
        copies = logits.size(0) // self.batch
        logits = logits.float().view(copies, self.batch, *logits.shape[1:])
        if self.name == "logit_diff":
            rows = torch.arange(self.batch, device=logits.device)
            at = logits[:, rows, self.positions]  # [R, B, V]
            return (at[:, rows, self.good] - at[:, rows, self.bad]).mean(dim=1)
        log_probs = F.log_softmax(logits[:, self.mask], dim=-1)  # [R, N, V]
        clean = self.clean_log_probs
        return (clean.exp() * (clean - log_probs)).sum(dim=-1).mean(dim=1)


def make_metric(name: str, logits: Tensor, labels: Tensor, corrupted_labels: Tensor | None) -> Metric:
    """The metric `name` for a batch whose clean logits are `logits` (see the module docstring)."""
    require_metric(name)
    batch = labels.size(0)
    labelled = labels != IGNORE_INDEX
    differs = labelled & (corrupted_labels != labels) if corrupted_labels is not None else None
    if name == "logit_diff":
        require(
            differs is not None and bool(differs.any(dim=1).all()),
            "metric=logit_diff needs a corruption that changes an answer of every example (this one "
            "leaves some answers as they were, or there is none); use metric=kl",
        )
        positions = answer_positions(labels, corrupted_labels)
        rows = torch.arange(batch, device=labels.device)
        good, bad = labels[rows, positions], corrupted_labels[rows, positions]
        return Metric(name, batch, positions=positions, good=good, bad=bad)
    mask = labelled
    if differs is not None:
        mask = torch.where(differs.any(dim=1, keepdim=True), differs, labelled)
    require(bool(mask.any()), "these examples have no labelled output to compare; use other examples")
    clean = F.log_softmax(logits.float()[mask], dim=-1)
    return Metric(name, batch, mask=mask, clean_log_probs=clean)
