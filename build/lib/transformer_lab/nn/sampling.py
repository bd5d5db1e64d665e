"""Choosing the next token from a language model's logits."""

import torch
from torch import Tensor


def sample_next_token(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """logits [B, V] -> token ids [B, 1].

    temperature == 0 is greedy decoding (argmax). Otherwise sample from softmax(logits / temperature),
    restricted to the `top_k` most likely tokens and/or to the smallest set of tokens whose probability
    mass reaches `top_p` (nucleus sampling, Holtzman et al., 2020).
    """
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None:
        kth_best = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]
        logits = logits.masked_fill(logits < kth_best, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        sorted_logits = sorted_logits.masked_fill(mass_before >= top_p, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


def check_sampling_args(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Raise ValueError naming the bad argument."""
    if not temperature >= 0:
        raise ValueError(f"temperature={temperature} must be >= 0 (0 means greedy)")
    if top_k is not None and not top_k >= 1:
        raise ValueError(f"top_k={top_k} must be a positive integer (or null for no limit)")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p} must be in (0, 1] (or null for no limit)")
