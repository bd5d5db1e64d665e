"""Looking inside a trained Transformer: attention maps, attention rollout and gradient-weighted attention.

Functions of a model of `transformer_lab.nn` (any of them: they read it through its hook points) and its
inputs. Every function puts the model in eval mode for the call (and restores its mode afterwards), never
touches its parameters or their `.grad`, leaves no hook behind, and works on any batch and device.

* `attention_maps` / `head_mean`: the raw softmax(QK^T / sqrt(d_k)) weights of every layer and head.
* `attention_rollout`: Abnar & Zuidema (2020), "Quantifying Attention Flow in Transformers".
* `gradient_attention`: Chefer, Gur & Wolf (2021), "Generic Attention-model Explainability for
  Interpreting Bi-Modal and Encoder-Decoder Transformers" (their rule for self-attention).

Conventions: a relevance matrix R is [B, T, T]; row i is about output position i, column j about input
position j. In a causal decoder output t predicts token t + 1, and R is lower-triangular.
Attention weights are where information is *routed*, not proof of what the prediction depends on
(Jain & Wallace, 2019; Wiegreffe & Pinter, 2019): use the deletion test in the tests as a reality check.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from transformer_lab.nn import HookedModule, HookPoint


@contextmanager
def _eval_mode(model: HookedModule) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def attention_maps(model: HookedModule, *inputs: Tensor) -> list[Tensor]:
    """Attention weights of every layer, each [B, H, T, T] (row = query, column = key), in eval mode:
    the `hook_pattern` activations, in forward order. With grad enabled they stay in the autograd graph.
    """
    with _eval_mode(model):
        return model.get_attention_maps(*inputs)


def head_mean(maps: list[Tensor], layer: int) -> Tensor:
    """Average over heads of one layer's map: [..., H, T, T] -> [..., T, T]. `layer=-1` is the last."""
    return maps[layer].mean(dim=-3)


def attention_rollout(maps: list[Tensor], residual: bool = True) -> Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): how much each input token flows into each output.

    Per layer l: A_l = mean over heads; with `residual`, A_l <- 0.5 A_l + 0.5 I (the skip connection
    carries each token's own state forward) and rows renormalised to sum to 1. Then
        rollout = A_L ... A_2 A_1     (matrix product, later layers on the left),
    so rollout[i, j] sums, over all paths j -> ... -> i through the layers, the product of the weights.
    Rows sum to 1. (An element-wise product of the layers' maps is *not* rollout: if layer 1 reverses
    the sequence and layer 2 attends to itself, the element-wise product is zero off the diagonal.)

    maps: list of [..., H, T, T] -> [..., T, T].
    """
    rollout = None
    for attention in maps:
        a = attention.mean(dim=-3)
        if residual:
            a = 0.5 * a + 0.5 * torch.eye(a.size(-1), dtype=a.dtype, device=a.device)
        a = a / a.sum(dim=-1, keepdim=True)
        rollout = a if rollout is None else a @ rollout
    return rollout


def _logits_and_maps(model: HookedModule, inputs: tuple[Tensor, ...]) -> tuple[Tensor, list[Tensor]]:
    """One forward pass returning the logits *and* the attention weights they were computed from (the
    `hook_pattern` activations, kept in the graph, so d logit / d attention exists). For a frozen model
    the token embeddings are made to require grad, so gradients still flow back to the weights."""
    maps: list[Tensor] = []

    def track(embedding: Tensor, hook: HookPoint) -> Tensor:
        return embedding if embedding.requires_grad else embedding.detach().requires_grad_()

    def keep(pattern: Tensor, hook: HookPoint) -> None:
        maps.append(pattern)

    hooks = [
        (lambda name: name.endswith("hook_embed"), track),
        (lambda name: name.endswith("hook_pattern"), keep),
    ]
    return model.run_with_hooks(*inputs, fwd_hooks=hooks), maps


def _relevance(maps: list[Tensor], logit: Tensor, retain_graph: bool) -> Tensor:
    """Chefer et al. (2021), self-attention rule: R = I; per layer, R <- R + mean_h[relu(dA ⊙ A)] R."""
    grads = torch.autograd.grad(logit, maps, retain_graph=retain_graph)
    eye = torch.eye(maps[0].size(-1), dtype=maps[0].dtype, device=maps[0].device)
    relevance = eye.expand_as(maps[0][:, 0]).clone()
    for attention, grad in zip(maps, grads, strict=True):
        a_bar = (grad * attention).clamp(min=0).mean(dim=1)
        relevance = relevance + a_bar @ relevance
    return relevance.detach()


def _chosen_logit(logits: Tensor, position: int, target: int | Tensor | None) -> Tensor:
    """Sum over the batch of logit[b, position, target_b]: sequences do not interact, so the gradient of
    the sum with respect to sequence b's attention is the gradient of sequence b's own logit."""
    scores = logits[:, position]
    if target is None:
        target = scores.argmax(dim=-1)
    target = torch.as_tensor(target, device=scores.device).expand(scores.size(0))
    return scores.gather(1, target.unsqueeze(1)).sum()


@contextmanager
def _grad_enabled(model: HookedModule) -> Iterator[None]:
    """Eval mode with autograd on, even when called under `torch.inference_mode()` (Lightning's
    validate/test) or `torch.no_grad()`."""
    with _eval_mode(model), torch.inference_mode(False), torch.enable_grad():
        yield


def gradient_attention(
    model: HookedModule, x: Tensor, position: int, target: int | Tensor | None = None
) -> Tensor:
    """Gradient-weighted attention relevance (Chefer, Gur & Wolf, 2021) for one output position.

    For the logit y of class `target` (default: the predicted class) at output `position`, per layer
        A_bar = mean over heads of relu(dy/dA ⊙ A),   R <- R + A_bar R,   starting from R = I.
    A is the softmax output that multiplies V. Returns R [B, T, T] (non-negative); row `position` is the
    relevance of each input token for that output. `target`: an int or one class per sequence [B].
    """
    with _grad_enabled(model):
        # clone(): inputs created under inference_mode cannot be saved for backward.
        logits, maps = _logits_and_maps(model, (x.clone(),))
        return _relevance(maps, _chosen_logit(logits, position, target), retain_graph=False)


def gradient_attention_all(model: HookedModule, x: Tensor) -> Tensor:
    """Relevance of every input for every output's predicted class: [B, T, T] whose row t is row t of
    `gradient_attention(model, x, t)`. One forward pass, then one backward pass per position."""
    with _grad_enabled(model):
        logits, maps = _logits_and_maps(model, (x.clone(),))
        seq_len = x.size(1)
        rows = [
            _relevance(maps, _chosen_logit(logits, t, None), retain_graph=t < seq_len - 1)[:, t]
            for t in range(seq_len)
        ]
    return torch.stack(rows, dim=1)


def most_relevant(relevance: Tensor, exclude_self: bool = True, causal: bool = False) -> Tensor:
    """Per output row, the input position with the largest relevance: [..., T, T] -> [..., T].

    `exclude_self` ignores the diagonal, as Chefer et al.'s reference code does: the residual path makes
    every token rely on itself, which hides what it reads from the others. `causal` ignores future
    positions. Rows with no candidate left (position 0 of a causal model without itself) give -1.
    """
    seq_len = relevance.size(-1)
    allowed = torch.ones(seq_len, seq_len, dtype=torch.bool, device=relevance.device)
    if exclude_self:
        allowed &= ~torch.eye(seq_len, dtype=torch.bool, device=relevance.device)
    if causal:
        allowed &= torch.ones_like(allowed).tril()
    scores = relevance.masked_fill(~allowed, float("-inf"))
    best = scores.argmax(dim=-1)
    return best.masked_fill(~allowed.any(dim=-1), -1)
