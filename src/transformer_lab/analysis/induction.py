"""Induction heads (Olsson et al., 2022, "In-context learning and induction heads"): per-head scores on
sequences with a repeated segment (task=induction), and the repeat gain.

    ... [A B C D] ... [A B C D] ...      query: the repeated B (second occurrence)
                         ^       ^       induction head: attends to C, the token after the earlier B
                                         previous-token head: every position attends to the one before

* induction score of a head: its mean attention, over the repeated positions t (those whose next token
  the repeat determines), from t to s(t) + 1, where s(t) is the earlier occurrence of token t:
  mean_t A[t, s(t) + 1]. 1.0 for a head that does exactly that, about 1/t for uniform attention.
* previous-token score: its mean attention from each position t >= 1 to t - 1: mean_t A[t, t - 1].
* repeat gain: the loss on the tokens of the segment's first occurrence (random tokens: about
  log(vocab_size) whatever the model) minus the loss on the same tokens in its repeat, in nats: what
  having seen a token before gains; near 0 without an induction circuit, up to log(vocab_size) when the
  repeat is copied perfectly. It is not Olsson et al.'s "in-context learning score" (the loss of the
  500th token of a natural text minus the 50th's, which needs long natural contexts): it measures the
  gain on the repeat itself, the one thing in-context learning can do on random tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_lab.nn import TokenModel, evaluating, head_name


@dataclass
class Repeats:
    """Sequences with one repeated segment, and where it is. All [B, T] over the model's input positions:
    `tokens` the inputs, `labels` every next token, `repeated` the query positions whose next token the
    repeat determines (the second occurrence, from its first token to its last but one), `first` the
    same positions in the first occurrence, `source` for each repeated position t the key s(t) + 1 an
    induction head attends to (-1 elsewhere)."""

    tokens: Tensor
    labels: Tensor
    repeated: Tensor
    first: Tensor
    source: Tensor

    def to(self, device: torch.device | str) -> Repeats:
        return Repeats(
            *(getattr(self, f).to(device) for f in ("tokens", "labels", "repeated", "first", "source"))
        )


def repeats(sequences: Tensor, determined: Tensor, start: Tensor) -> Repeats:
    """`Repeats` from sequences [B, T + 1] (inputs and the last next token), `determined` [B, T] (as
    `InductionDataModule.draw` returns it: input positions whose next token the repeat determines) and
    `start` [B] (where the first occurrence begins)."""
    length = determined.size(1)
    second = determined.int().argmax(dim=1)  # the repeat's first token: its first determined position
    shift = second - start  # how far the repeat is from the first occurrence
    positions = torch.arange(length)
    source = torch.where(
        determined, positions[None, :] - shift[:, None] + 1, torch.full_like(determined, -1, dtype=torch.long)
    )
    earlier = (
        positions[None, :] + shift[:, None]
    )  # position t of the first occurrence is t + shift in the repeat
    first = torch.zeros_like(determined)
    inside = earlier < length
    first[inside] = determined.gather(1, earlier.clamp(max=length - 1))[inside]
    return Repeats(sequences[:, :-1], sequences[:, 1:], determined, first, source)


def task_repeats(task: object, count: int, split: str = "test") -> Repeats:
    """`count` sequences drawn as the induction task draws a split (from that split's seed: the same
    sequences every time, as `corrupted_pairs` draws them), with where their repeat is."""
    splits = ("train", "val", "test")
    generator = torch.Generator().manual_seed(task.seed + splits.index(split))
    sequences, determined, start = task.draw(count, generator)
    return repeats(sequences, determined, start)


def induction_scores(pattern: Tensor, data: Repeats) -> Tensor:
    """Per head, mean_t A[t, s(t) + 1] over the repeated positions t: [B, H, T, T] -> [H]."""
    rows, queries = data.repeated.nonzero(as_tuple=True)
    if rows.numel() == 0:
        return torch.zeros(pattern.size(1), device=pattern.device)
    return pattern[rows, :, queries, data.source[rows, queries]].mean(dim=0)


def previous_token_scores(pattern: Tensor) -> Tensor:
    """Per head, mean_t A[t, t - 1] over the positions t >= 1: [B, H, T, T] -> [H]."""
    return pattern.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))


def first_and_repeat_loss(logits: Tensor, data: Repeats) -> tuple[float, float]:
    """(loss on the first occurrence's determined positions, loss on the repeat's): mean cross-entropy of
    the next token at each, in nats."""
    losses = F.cross_entropy(logits.flatten(0, 1), data.labels.flatten(), reduction="none").view_as(
        data.labels
    )
    return float(losses[data.first].mean()), float(losses[data.repeated].mean())


@dataclass
class InductionScores:
    """Per head ([layer][head]) induction and previous-token scores; the largest of each; the losses on
    the first occurrence and on the repeat, and their difference (`repeat_gain`)."""

    layers: list[str]
    induction: list[list[float]]
    previous_token: list[list[float]]
    first_loss: float
    repeat_loss: float

    @property
    def repeat_gain(self) -> float:
        return self.first_loss - self.repeat_loss

    def best(self, name: str) -> float:
        return max(max(row) for row in getattr(self, name))

    def strongest(self, name: str) -> str:
        """The head with the largest score, `L1H0`."""
        rows = getattr(self, name)
        layer, head = max(
            ((i, h) for i, row in enumerate(rows) for h in range(len(row))), key=lambda ih: rows[ih[0]][ih[1]]
        )
        return head_name(self.layers[layer], head)


def induction_head_scores(model: TokenModel, data: Repeats) -> InductionScores:
    """Every attention layer's heads scored on `data` in one forward pass (hook_pattern of each layer)."""
    layers = model.attention_layers()
    with evaluating(model), torch.no_grad():
        logits, cache = model.run_with_cache(
            data.tokens, names_filter=lambda name: name.endswith("hook_pattern")
        )
    induction, previous = [], []
    for layer in layers:
        pattern = cache[f"{layer.name}.hook_pattern"]
        induction.append(induction_scores(pattern, data).tolist())
        previous.append(previous_token_scores(pattern).tolist())
    first, repeat = first_and_repeat_loss(logits, data)
    return InductionScores([layer.label for layer in layers], induction, previous, first, repeat)
