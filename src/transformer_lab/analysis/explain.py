"""Looking inside a trained Transformer: attention maps, attention rollout and gradient-weighted attention.

Functions of a model of `transformer_lab.nn` (any of them: they read it through its hook points) and its
inputs. Every function puts the model in eval mode for the call (and restores its mode afterwards), never
touches its parameters or their `.grad`, leaves no hook behind, and works on any batch and device.

* `attention_maps` / `head_mean`: the raw softmax(QK^T / sqrt(d_k)) weights of every layer and head.
* `attention_rollout`: Abnar & Zuidema (2020), "Quantifying Attention Flow in Transformers".
* `gradient_attention`: Chefer, Gur & Wolf (2021), "Generic Attention-model Explainability for
  Interpreting Bi-Modal and Encoder-Decoder Transformers" (their rule for self-attention).
* `encoder_decoder_maps`, `encoder_decoder_rollout`, `source_relevance`: the same for an
  encoder-decoder, whose outputs read the source through cross-attention (Chefer et al.'s rules for
  encoder-decoder models): how much each source token matters for each output token.
* `grouped_maps`, `rollout`, `relevance`: any model, whichever of the three it is: the maps by group
  (`self`, or `encoder`, `decoder`, `cross`), and what each output relies on in the input it reads.

Conventions: a relevance matrix R is [B, T, T]; row i is about output position i, column j about input
position j. In a causal decoder output t predicts token t + 1, and R is lower-triangular. For an
encoder-decoder R is [B, T_target, S_source]: row t is about the output predicted at target position t.
Attention weights are where information is *routed*, not proof of what the prediction depends on
(Jain & Wallace, 2019; Wiegreffe & Pinter, 2019): use the deletion test in the tests as a reality check.
"""

import torch
from torch import Tensor

from transformer_lab.nn import HookedModule, HookPoint, TokenModel, evaluating


def attention_maps(model: HookedModule, *inputs: Tensor) -> list[Tensor]:
    """Attention weights of every layer, each [B, H, T, T] (row = query, column = key), in eval mode:
    the `hook_pattern` activations, in forward order. With grad enabled they stay in the autograd graph.
    """
    with evaluating(model, autograd="keep"):
        return model.get_attention_maps(*inputs)


def grouped_maps(model: TokenModel, *inputs: Tensor) -> dict[str, list[Tensor]]:
    """The attention weights by group (`AttentionLayer.group`: `self` for an encoder or a decoder-only
    model; `encoder`, `decoder` and `cross` for an encoder-decoder), each list in layer order."""
    with evaluating(model):
        _, cache = model.run_with_cache(*inputs, names_filter=lambda name: name.endswith("hook_pattern"))
    return _group(model, cache)


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


def _logits_and_patterns(model: HookedModule, inputs: tuple[Tensor, ...]) -> tuple[Tensor, dict[str, Tensor]]:
    """One forward pass returning the logits *and* the attention weights they were computed from (the
    `hook_pattern` activations by name, kept in the graph, so d logit / d attention exists). For a frozen
    model the token embeddings are made to require grad, so gradients still flow back to the weights."""
    patterns: dict[str, Tensor] = {}

    def track(embedding: Tensor, hook: HookPoint) -> Tensor:
        return embedding if embedding.requires_grad else embedding.detach().requires_grad_()

    def keep(pattern: Tensor, hook: HookPoint) -> None:
        patterns[hook.name] = pattern

    hooks = [
        (lambda name: name.endswith("hook_embed"), track),
        (lambda name: name.endswith("hook_pattern"), keep),
    ]
    return model.run_with_hooks(*inputs, fwd_hooks=hooks), patterns


def _logits_and_maps(model: HookedModule, inputs: tuple[Tensor, ...]) -> tuple[Tensor, list[Tensor]]:
    """`_logits_and_patterns` with the patterns as a list, in forward order."""
    logits, patterns = _logits_and_patterns(model, inputs)
    return logits, list(patterns.values())


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
    """Sum over the batch of log p(target_b) at `position`: sequences do not interact, so the gradient of
    the sum with respect to sequence b's attention is the gradient of sequence b's own log-probability.

    The log-probability, log p(y) = logit_y - logsumexp(logits), not the raw logit of Chefer et al.'s
    code: what raises the other classes as much as y explains nothing about y. On a trained sort model
    the most relevant source position then holds the output digit for at least 90% of outputs
    (tests/test_explain_encoder_decoder.py)."""
    scores = logits[:, position].float().log_softmax(dim=-1)
    if target is None:
        target = scores.argmax(dim=-1)
    target = torch.as_tensor(target, device=scores.device).expand(scores.size(0))
    return scores.gather(1, target.unsqueeze(1)).sum()


def gradient_attention(
    model: HookedModule, x: Tensor, position: int, target: int | Tensor | None = None
) -> Tensor:
    """Gradient-weighted attention relevance (Chefer, Gur & Wolf, 2021) for one output position.

    For y = log p(`target`) (default: the predicted class) at output `position`, per layer
        A_bar = mean over heads of relu(dy/dA ⊙ A),   R <- R + A_bar R,   starting from R = I.
    A is the softmax output that multiplies V. Returns R [B, T, T] (non-negative); row `position` is the
    relevance of each input token for that output. `target`: an int or one class per sequence [B].
    """
    with evaluating(model, autograd="on"):
        # clone(): inputs created under inference_mode cannot be saved for backward.
        logits, maps = _logits_and_maps(model, (x.clone(),))
        return _relevance(maps, _chosen_logit(logits, position, target), retain_graph=False)


BATCHED_BYTES = 256 * 2**20  # the gradients of the maps for a chunk of output positions at once


def gradient_attention_all(model: HookedModule, x: Tensor) -> Tensor:
    """Relevance of every input for every output's predicted class: [B, T, T] whose row t is row t of
    `gradient_attention(model, x, t)`. One forward pass, then a backward pass per output position, run
    several at a time (`is_grads_batched`: the same passes, vectorised, 2-3x faster on a CPU), in chunks
    whose gradients of the attention maps take at most `BATCHED_BYTES`."""
    with evaluating(model, autograd="on"):
        logits, maps = _logits_and_maps(model, (x.clone(),))
        seq_len = x.size(1)
        scores = logits.float().log_softmax(dim=-1)
        chosen = scores.gather(-1, scores.argmax(dim=-1, keepdim=True))[..., 0]  # log p(prediction) [B, T]
        per_position = sum(m.numel() * m.element_size() for m in maps)
        chunk = max(1, min(seq_len, BATCHED_BYTES // per_position))
        rows = []
        for start in range(0, seq_len, chunk):
            positions = torch.arange(start, min(start + chunk, seq_len), device=x.device)
            # grad_outputs[i] selects output position positions[i] of every sequence
            select = torch.zeros(len(positions), *chosen.shape, dtype=chosen.dtype, device=x.device)
            select[torch.arange(len(positions)), :, positions] = 1.0
            last = start + chunk >= seq_len
            grads = torch.autograd.grad(chosen, maps, select, retain_graph=not last, is_grads_batched=True)
            eye = torch.eye(seq_len, dtype=maps[0].dtype, device=x.device)
            relevance = eye.expand(len(positions), *maps[0][:, 0].shape).clone()  # [P, B, T, T]
            for attention, grad in zip(maps, grads, strict=True):
                a_bar = (grad * attention).clamp(min=0).mean(dim=2)  # Chefer et al.'s rule, per position
                relevance = relevance + a_bar @ relevance
            rows += [relevance[i, :, t] for i, t in enumerate(positions.tolist())]
    return torch.stack(rows, dim=1).detach()


def row_shares(matrix: Tensor) -> Tensor:
    """Each row as shares of 1: rows of a relevance matrix then compare across outputs (a confident
    output's gradient, and so its relevance, is small in absolute terms)."""
    return matrix / matrix.sum(dim=-1, keepdim=True).clamp_min(1e-12)


def attention_added(relevance: Tensor) -> Tensor:
    """A self-attention relevance R = I + (what attention added), [..., T, T], as the part attention
    added, each row as shares of 1 (`row_shares(R - I)`)."""
    eye = torch.eye(relevance.size(-1), dtype=relevance.dtype, device=relevance.device)
    return row_shares(relevance - eye)


def most_relevant(relevance: Tensor, exclude_self: bool = True, causal: bool = False) -> Tensor:
    """Per output row, the input position with the largest relevance: [..., T_out, T_in] -> [..., T_out].

    `exclude_self` ignores the diagonal, as Chefer et al.'s reference code does: the residual path makes
    every token rely on itself, which hides what it reads from the others (for a model whose outputs read
    another sequence, an encoder-decoder's source, there is no such diagonal: pass False). `causal`
    ignores future positions. Rows with no candidate left (position 0 of a causal model without itself)
    give -1.
    """
    rows, cols = relevance.shape[-2:]
    allowed = torch.ones(rows, cols, dtype=torch.bool, device=relevance.device)
    if exclude_self:
        allowed &= ~torch.eye(rows, cols, dtype=torch.bool, device=relevance.device)
    if causal:
        allowed &= torch.ones_like(allowed).tril()
    scores = relevance.masked_fill(~allowed, float("-inf"))
    best = scores.argmax(dim=-1)
    return best.masked_fill(~allowed.any(dim=-1), -1)


# ------------------------------------------------------------------------------ encoder-decoder models
def _group(model: TokenModel, patterns: dict[str, Tensor]) -> dict[str, list[Tensor]]:
    """Patterns (or anything per attention layer, by hook name) by the layers' groups, in layer order."""
    groups: dict[str, list[Tensor]] = {}
    for layer in model.attention_layers():
        groups.setdefault(layer.group, []).append(patterns[f"{layer.name}.hook_pattern"])
    return groups


def encoder_decoder_maps(model: TokenModel, source: Tensor, target: Tensor) -> dict[str, list[Tensor]]:
    """The attention weights of an encoder-decoder, by kind: `encoder` [B, H, S, S] (self-attention over
    the source), `decoder` [B, H, T, T] (causal self-attention over the target) and `cross`
    [B, H, T, S] (target rows reading source columns), one per layer. `target` starts with <bos>."""
    return grouped_maps(model, source, target)


def _normalised(relevance: Tensor) -> Tensor:
    """Chefer et al.'s eq. 8-9: a self-relevance R without its identity, rows rescaled to sum to 1, plus
    the identity again, so that a stack that mostly kept each token to itself does not dominate."""
    eye = torch.eye(relevance.size(-1), dtype=relevance.dtype, device=relevance.device)
    context = relevance - eye
    return context / context.sum(dim=-1, keepdim=True).clamp(min=1e-12) + eye


def _propagate(encoder: list[Tensor], decoder: list[Tensor], cross: list[Tensor]) -> Tensor:
    """Relevance of the source for every target position, [B, T, S], from head-aggregated maps A_bar
    ([B, ., .] per layer), following Chefer et al. (2021) for encoder-decoder models:

        encoder layers:                R_ss <- R_ss + A_bar R_ss                    (R_ss = I at first)
        each decoder block, self:      R_tt <- R_tt + A_bar R_tt,  R_ts <- R_ts + A_bar R_ts
                            cross:     R_ts <- R_ts + norm(R_tt) A_bar norm(R_ss)  (R_tt = I, R_ts = 0)

    Their rule 10 multiplies by norm(R_tt) transposed; their decoders (DETR, LXMERT) attend both ways.
    Here the decoder is causal, and its row t has only read positions <= t: the transpose would let an
    output take relevance from later outputs, so norm(R_tt) is used as it is.
    """
    batch, source_len, target_len = encoder[0].size(0), encoder[0].size(-1), decoder[0].size(-1)
    like = encoder[0]
    r_ss = torch.eye(source_len, dtype=like.dtype, device=like.device).expand(batch, -1, -1)
    for a_bar in encoder:
        r_ss = r_ss + a_bar @ r_ss
    r_tt = torch.eye(target_len, dtype=like.dtype, device=like.device).expand(batch, -1, -1)
    r_ts = torch.zeros(batch, target_len, source_len, dtype=like.dtype, device=like.device)
    for self_bar, cross_bar in zip(decoder, cross, strict=True):
        r_tt, r_ts = r_tt + self_bar @ r_tt, r_ts + self_bar @ r_ts
        r_ts = r_ts + _normalised(r_tt) @ cross_bar @ _normalised(r_ss)
    return r_ts


def encoder_decoder_rollout(maps: dict[str, list[Tensor]]) -> Tensor:
    """Attention-only relevance of the source for each target position, [B, T, S]: the propagation of
    `source_relevance` with each layer's plain head-mean attention (rollout's weights, no gradients)."""
    kinds = {kind: [m.mean(dim=1) for m in layers] for kind, layers in maps.items()}
    return _propagate(kinds["encoder"], kinds["decoder"], kinds["cross"]).detach()


def source_relevance(model: HookedModule, source: Tensor, target: Tensor) -> Tensor:
    """Gradient-weighted relevance of each source token for each output of an encoder-decoder, [B, T, S]
    (Chefer, Gur & Wolf, 2021): row t explains y = log p of the class predicted at target position t (the
    token after target[:, t]), with A_bar = mean over heads of relu(dy/dA ⊙ A) in every layer. One
    forward pass, then one backward pass per target position. `target` starts with <bos>."""
    with evaluating(model, autograd="on"):
        logits, patterns = _logits_and_patterns(model, (source.clone(), target.clone()))
        names, maps = list(patterns), list(patterns.values())
        rows = []
        for t in range(target.size(1)):
            logit = _chosen_logit(logits, t, None)
            grads = torch.autograd.grad(logit, maps, retain_graph=t < target.size(1) - 1)
            a_bar = {
                name: (g * a).clamp(min=0).mean(dim=1) for name, g, a in zip(names, grads, maps, strict=True)
            }
            kinds = _group(model, a_bar)
            rows.append(_propagate(kinds["encoder"], kinds["decoder"], kinds["cross"])[:, t])
    return torch.stack(rows, dim=1).detach()


# ------------------------------------------------------------------------------ any model
def rollout(groups: dict[str, list[Tensor]]) -> Tensor:
    """What each output reads of the input by attention alone, [B, T_out, T_in], each row as shares of
    1: attention rollout for a single stack (`groups` from `grouped_maps`), the encoder-decoder
    propagation of plain head means when outputs read the input through cross-attention."""
    if "cross" in groups:
        return row_shares(encoder_decoder_rollout(groups))
    return attention_rollout(groups["self"])


def relevance(model: TokenModel, *inputs: Tensor) -> Tensor:
    """Gradient-weighted relevance of each input token for each output's predicted class, [B, T_out,
    T_in], each row as shares of 1: for a single stack what the attention layers added (R - I, see
    `attention_added`), for an encoder-decoder the source relevance (`source_relevance`)."""
    if model.has_cross_attention:
        return row_shares(source_relevance(model, *inputs))
    return attention_added(gradient_attention_all(model, inputs[0]))


# ------------------------------------------------------------------------------ per-head statistics
def attention_entropy(pattern: Tensor, query_mask: Tensor | None = None) -> Tensor:
    """Mean entropy of each head's attention rows, H = -sum_k A_qk log A_qk (nats; 0 log 0 = 0):
    [B, H, Tq, Tk] -> [H]. 0 = every query reads one key; log(Tk) = uniform. `query_mask` [B, Tq]
    (False at padding) leaves padding rows out."""
    entropy = -(pattern * pattern.clamp_min(1e-30).log()).sum(dim=-1)  # [B, H, Tq]
    weight = torch.ones_like(entropy[:, 0]) if query_mask is None else query_mask.to(entropy.dtype)
    return (entropy * weight[:, None]).sum(dim=(0, 2)) / weight.sum().clamp_min(1)


def alignment_mass(pattern: Tensor, expected: Tensor) -> Tensor:
    """Each head's attention mass on the keys a task expects, sum_k A_qk [k expected for q], averaged over
    the queries that expect any: [B, H, Tq, Tk] and bool [B, Tq, Tk] -> [H]. 1 = all attention where
    the task says the information is (the mirror position of the reverse task)."""
    rows = expected.any(dim=-1).to(pattern.dtype)  # [B, Tq]
    mass = (pattern * expected[:, None].to(pattern.dtype)).sum(dim=-1)  # [B, H, Tq]
    return (mass * rows[:, None]).sum(dim=(0, 2)) / rows.sum().clamp_min(1)
