"""The metric M a circuit is scored and evaluated by, per copy of the batch.

`logit_diff`: the logit of the clean answer minus that of the corrupted answer at each row's answer
position, averaged over the rows. That position is the row's first output the corruption changes; where
it changes none (a language model's corruption: the same next token follows both texts), it is the row's
last labelled output, and the corrupted answer is the corrupted run's most likely token there other than
the clean answer (`Metric.chosen` marks those rows; the command line names them).
`logprob`: the log-probability of the clean answer, averaged over the outputs `kl` compares; it needs no
corruption.
`kl`: KL(p_clean || p) at the outputs the corruption changes, or at every labelled output where it
changes none.

Each is a mean of terms (one per row for logit_diff, one per output compared for the others): `values`
gives each example's sum of terms, `counts` how many it has, and M = sum of values / sum of counts, so a
bootstrap over the examples (`analysis.intervals`) recomputes M exactly from resampled sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_lab.analysis.circuits.options import require_metric
from transformer_lab.analysis.interventions import answers
from transformer_lab.errors import as_config_error, require
from transformer_lab.nn import IGNORE_INDEX


@dataclass
class Metric:
    """M(logits) per copy of the batch: [R * B, T, V] -> [R] (see the module docstring)."""

    name: str
    batch: int
    counts: Tensor  # [B]: the terms of each example (1 for logit_diff; its outputs compared for the others)
    positions: Tensor | None = None  # logit_diff: each row's position, its clean and corrupted answers
    good: Tensor | None = None
    bad: Tensor | None = None
    chosen: Tensor | None = None  # logit_diff: bool [B], rows whose corrupted answer the corrupted run chose
    mask: Tensor | None = None  # logprob, kl: bool [B, T], the outputs compared
    answers: Tensor | None = None  # logprob: the clean answers at those outputs [N]
    clean_log_probs: Tensor | None = None  # kl: [N, V] at those outputs

    @property
    def total(self) -> float:
        """The number of terms M averages."""
        return float(self.counts.sum())

    def values(self, logits: Tensor) -> Tensor:
        """Each example's sum of terms, per copy of the batch: [R * B, T, V] -> [R, B]."""
        copies = logits.size(0) // self.batch
        logits = logits.float().view(copies, self.batch, *logits.shape[1:])
        if self.name == "logit_diff":
            rows = torch.arange(self.batch, device=logits.device)
            at = logits[:, rows, self.positions]  # [R, B, V]
            return at[:, rows, self.good] - at[:, rows, self.bad]
        log_probs = F.log_softmax(logits[:, self.mask], dim=-1)  # [R, N, V]
        if self.name == "logprob":
            terms = log_probs[:, torch.arange(log_probs.size(1), device=logits.device), self.answers]
        else:
            clean = self.clean_log_probs
            terms = (clean.exp() * (clean - log_probs)).sum(dim=-1)  # [R, N]
        rows = self.mask.nonzero()[:, 0]
        return terms.new_zeros(copies, self.batch).index_add(1, rows, terms)

    def contributions(self, logits: Tensor) -> Tensor:
        """Each example's share of M, per copy: [R, B], summing to M over the examples."""
        return self.values(logits) / self.total

    def __call__(self, logits: Tensor) -> Tensor:
        return self.values(logits).sum(dim=1) / self.total


def make_metric(
    name: str,
    logits: Tensor,
    labels: Tensor,
    corrupted_labels: Tensor | None,
    corrupted_logits: Tensor | None = None,
) -> Metric:
    """The metric `name` for a batch whose clean logits are `logits` (see the module docstring);
    logit_diff reads the corrupted run's logits (`corrupted_logits`) in the rows whose answer the
    corruption leaves."""
    require_metric(name)
    batch = labels.size(0)
    labelled = labels != IGNORE_INDEX
    differs = labelled & (corrupted_labels != labels) if corrupted_labels is not None else None
    if name == "logit_diff":
        require(
            differs is not None,
            "metric=logit_diff needs a corruption (the corrupted run's answer is what the clean one is "
            "compared with); use metric=logprob or metric=kl, or give corrupted inputs",
        )
        with as_config_error():
            found = answers(labels, corrupted_labels, corrupted_logits)
        positions, good, bad, chosen = found.positions, found.good, found.bad, found.chosen
        ones = torch.ones(batch, device=labels.device)
        return Metric(name, batch, ones, positions=positions, good=good, bad=bad, chosen=chosen)
    mask = labelled
    if differs is not None:
        mask = torch.where(differs.any(dim=1, keepdim=True), differs, labelled)
    require(bool(mask.any()), "these examples have no labelled output to compare; use other examples")
    counts = mask.sum(dim=1).float()
    if name == "logprob":
        return Metric(name, batch, counts, mask=mask, answers=labels[mask])
    clean = F.log_softmax(logits.float()[mask], dim=-1)
    return Metric(name, batch, counts, mask=mask, clean_log_probs=clean)
