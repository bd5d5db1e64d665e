"""Progress measures for grokking (Nanda et al., 2023, "Progress measures for grokking via mechanistic
interpretability"), for a model of task=modular_addition: (a + b) mod p read at "=".

A model that has grokked computes the answer with a few key frequencies w_k = 2 pi k / p: it embeds a and
b as cos(w_k a), sin(w_k a), ..., and its logits are sums of cos(w_k (a + b - c)). So:

* the embedding in the Fourier basis over the p tokens (constant, cos(w_k x), sin(w_k x) for k = 1 ..
  (p - 1) / 2, each of norm 1): its norm per frequency, ||F_k W_E|| over the cos and sin rows;
* key frequencies: the few frequencies that carry most of that norm in the final model
  (`key_frequencies`; none where no frequency stands out, and only those that do in each of the run's
  last snapshots, `stable_key_frequencies`);
* Fourier sparsity: the Gini coefficient of the per-frequency norms (0: every frequency alike; towards 1:
  a few frequencies only), which rises as the embedding sheds the frequencies it does not use;
* restricted loss: the loss with the logits kept only along the key frequencies: over the p^2 inputs, for
  each output c, the logits' mean plus their projection on cos(w_k (a + b)) and sin(w_k (a + b)), k key;
  on the held-out pairs (the paper's notebook projects the neuron activations the same way and maps them
  through W_out W_U: the same when the key-frequency part of the logits comes through the MLP);
* excluded loss: the loss with those key-frequency directions removed from the logits, on the training
  pairs: it rises while the model still fits the training pairs, showing that the fit has moved from
  memorisation to the Fourier circuit before the test loss falls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_lab.nn import evaluating


def fourier_basis(p: int) -> Tensor:
    """[p, p] orthonormal rows over x = 0 .. p - 1: the constant, then cos(w_k x), sin(w_k x) for
    k = 1 .. (p - 1) // 2 (w_k = 2 pi k / p)."""
    x = torch.arange(p, dtype=torch.float64)
    rows = [torch.ones(p, dtype=torch.float64)]
    for k in range(1, (p - 1) // 2 + 1):
        rows += [torch.cos(2 * math.pi * k * x / p), torch.sin(2 * math.pi * k * x / p)]
    basis = torch.stack(rows)
    return basis / basis.norm(dim=1, keepdim=True)


def frequency_norms(embedding: Tensor) -> Tensor:
    """||F_k W_E|| for k = 1 .. (p - 1) // 2: the norm of the p token embeddings [p, d] along cos(w_k x)
    and sin(w_k x) together."""
    p = embedding.size(0)
    projected = fourier_basis(p) @ embedding.detach().double()  # [p, d]: constant, cos 1, sin 1, ...
    per_row = projected[1:].pow(2).sum(dim=1)  # cos 1, sin 1, cos 2, ...
    return per_row.view(-1, 2).sum(dim=1).sqrt().float()


def gini(values: Tensor) -> float:
    """The Gini coefficient of non-negative values: sum_i (2 i - n - 1) x_(i) / (n sum x), x_(i) sorted
    ascending (0: all equal; (n - 1) / n: one value holds everything)."""
    x = values.detach().double().flatten().sort().values
    n = x.numel()
    if n == 0 or float(x.sum()) == 0:
        return 0.0
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return float(((2 * i - n - 1) * x).sum() / (n * x.sum()))


def fourier_sparsity(embedding: Tensor) -> float:
    """Gini coefficient of the embedding's per-frequency norms (`frequency_norms`)."""
    return gini(frequency_norms(embedding))


def chance_sparsity(p: int, width: int, draws: int = 32) -> float:
    """The Fourier sparsity of an embedding that has learned nothing: its mean over `draws` Gaussian
    [p, width] embeddings (from a fixed seed), where a model's starts."""
    generator = torch.Generator().manual_seed(0)
    values = [fourier_sparsity(torch.randn(p, width, generator=generator)) for _ in range(draws)]
    return sum(values) / draws


def key_frequencies(embedding: Tensor, share: float = 0.2) -> list[int]:
    """The frequencies k (1 .. (p - 1) // 2) whose squared norm in the embedding is at least `share` of the
    largest one's: the few spikes of a grokked model's embedding spectrum. None where no frequency stands
    out: an embedding whose Fourier sparsity is within its chance region (`sparse`) has no key frequency
    (every frequency of an untrained one would pass)."""
    if not sparse(embedding):
        return []
    energy = frequency_norms(embedding).pow(2)
    return [k + 1 for k in range(energy.numel()) if energy[k] >= share * energy.max()]


SPARSE = 0.1  # Fourier sparsity above chance by this (a tenth of its scale, 1): some frequencies stand out


def sparse(embedding: Tensor) -> bool:
    """Whether the embedding's Fourier sparsity has left its chance region (that of a Gaussian embedding of
    the same shape, `chance_sparsity`, plus SPARSE): whether any frequency stands out at all."""
    p, width = embedding.shape
    return fourier_sparsity(embedding) >= chance_sparsity(p, width) + SPARSE


def stable_key_frequencies(embeddings: Sequence[Tensor], share: float = 0.2) -> tuple[list[int], list[int]]:
    """(key, uncertain) over several embeddings of one run (its last snapshots): the key frequencies of
    every one of them, and those that are key in some but not all (their share of the largest's squared
    norm crosses `share` within the range the snapshots span)."""
    found = [set(key_frequencies(embedding, share)) for embedding in embeddings]
    every, some = set.intersection(*found), set.union(*found)
    return sorted(every), sorted(some - every)


def pair_directions(p: int, frequencies: Sequence[int]) -> Tensor:
    """[2 K, p^2] orthonormal directions over the pairs (row a * p + b): cos(w_k (a + b)), sin(w_k (a + b))
    for each key frequency k."""
    a = torch.arange(p, dtype=torch.float64).repeat_interleave(p)
    b = torch.arange(p, dtype=torch.float64).repeat(p)
    rows = []
    for k in frequencies:
        angle = 2 * math.pi * k * (a + b) / p
        rows += [torch.cos(angle), torch.sin(angle)]
    if not rows:
        return torch.zeros(0, p * p, dtype=torch.float64)
    directions = torch.stack(rows)
    return directions / directions.norm(dim=1, keepdim=True)


def key_component(logits: Tensor, frequencies: Sequence[int]) -> Tensor:
    """The part of the logits [p^2, p] (one row per pair a * p + b, one column per answer c) along the
    key frequencies' directions over the pairs: sum_u <L[:, c], u> u, u in `pair_directions`."""
    p = logits.size(1)
    u = pair_directions(p, frequencies).to(logits.device)
    return (u.T @ (u @ logits.double())).to(logits.dtype)


def restricted_logits(logits: Tensor, frequencies: Sequence[int]) -> Tensor:
    """Only the key frequencies kept: each answer's mean logit over the pairs plus its key component."""
    return logits.mean(dim=0, keepdim=True) + key_component(logits, frequencies)


def excluded_logits(logits: Tensor, frequencies: Sequence[int]) -> Tensor:
    """The key frequencies removed: the logits minus their key component."""
    return logits - key_component(logits, frequencies)


def answer_logits(model: torch.nn.Module, task: object) -> Tensor:
    """The model's logits for the answer of every pair, [p^2, p] (rows a * p + b; the "=" output left
    out, as the paper's d_vocab_out = p)."""
    tokens, _ = task.all_pairs()
    device = next(model.parameters()).device
    with evaluating(model), torch.no_grad():
        return model(tokens.to(device))[:, -1, : task.p].float().cpu()


def answer_loss(logits: Tensor, answers: Tensor) -> float:
    return float(F.cross_entropy(logits.double(), answers))


@dataclass
class ProgressMeasures:
    """One model's measures (losses in nats)."""

    train_loss: float
    test_loss: float
    restricted_loss: float
    excluded_loss: float
    fourier_sparsity: float
    train_acc: float
    test_acc: float

    def scores(self) -> dict[str, float]:
        """The measures `analysis=dynamics` tracks, by name (the held-out accuracy is its `metric`)."""
        return {
            "restricted_loss": self.restricted_loss,
            "excluded_loss": self.excluded_loss,
            "test_loss": self.test_loss,
            "train_loss": self.train_loss,
            "fourier_sparsity": self.fourier_sparsity,
            "train_acc": self.train_acc,
        }


def progress_measures(
    logits: Tensor, embedding: Tensor, task: object, frequencies: Sequence[int]
) -> ProgressMeasures:
    """The measures of a model with answer logits [p^2, p] (`answer_logits`) and token embeddings [p, d],
    for `task`'s split and the key `frequencies` (of the final model, as the paper keeps them fixed)."""
    _, labels = task.all_pairs()
    answers = labels[:, -1]
    train, test = task.split_indices()
    restricted = restricted_logits(logits, frequencies)
    excluded = excluded_logits(logits, frequencies)
    predicted = logits.argmax(dim=-1) == answers
    return ProgressMeasures(
        train_loss=answer_loss(logits[train], answers[train]),
        test_loss=answer_loss(logits[test], answers[test]),
        restricted_loss=answer_loss(restricted[test], answers[test]),
        excluded_loss=answer_loss(excluded[train], answers[train]),
        fourier_sparsity=fourier_sparsity(embedding),
        train_acc=float(predicted[train].float().mean()),
        test_acc=float(predicted[test].float().mean()),
    )


def token_embeddings(model: torch.nn.Module, p: int) -> Tensor:
    """W_E of the p number tokens, [p, d] (the "=" token left out)."""
    return model.source_stack[1].embed.weight[:p].detach().float().cpu()
