"""Reading the residual stream: the logit lens and direct logit attribution.

The residual stream is a sum: resid_L = embedding + sum over blocks of what each attention head and MLP
wrote into it. The output layer reads it through the final norm: logits = W_U LN_final(resid_L) + b_U.

* `logit_lens` (nostalgebraist, 2020): apply the final norm and the output layer to the stream after
  the embedding and after every block, as if the model stopped there. The last reading is the model's
  own output.
* `direct_logit_attribution`: split the correct token's logit into what each component wrote directly.
  With LN_final(x) = gamma * (x - mean(x)) / sigma + beta and sigma fixed to its value on this input,
  the logit is linear in the components:

      logit_y = sum_c W_U[y] . (gamma * (c - mean(c)) / sigma)  +  W_U[y] . beta + b_U[y]

  over the components c (embeddings, each head's output z_h W_O,h, the attention output biases, each
  MLP's output). With RMSNorm (`model.norm=rms`) nothing is centred and sigma = sqrt(mean(x^2) + eps),
  so the logit is sum_c W_U[y] . (gamma * c / sigma) + b_U[y]. Exact only where the stream reaches the
  output layer as a sum: pre-norm models (`norm_first=True`) with a single Linear output layer. "Direct":
  what a head writes that later layers transform is credited to those layers.

For an encoder-decoder both read the decoder's stream.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_lab.analysis import intervals
from transformer_lab.analysis.arguments import as_inputs, as_model
from transformer_lab.nn import IGNORE_INDEX, TokenModel, evaluating
from transformer_lab.nn.blocks import RMSNorm

MEMORY = 2**28  # bytes of streams or logits a reading holds at once: examples and positions go in chunks


def _stream_names(model: TokenModel) -> list[str]:
    """The hook points the lens reads: the stream after the embedding and after each block."""
    prefix, stack = model.readout
    return [f"{prefix}blocks.0.hook_resid_pre"] + [
        f"{prefix}blocks.{i}.hook_resid_post" for i in range(len(stack.blocks))
    ]


def _chunks(total: int, size: int) -> list[slice]:
    """0 .. total in slices of `size`."""
    return [slice(start, min(start + size, total)) for start in range(0, total, size)]


def _read(model: TokenModel, stream: Tensor) -> Tensor:
    """logits = W_U LN_final(stream) + b_U, for a stream [..., D]."""
    return model.unembed(model.readout[1].ln_final(stream))


def logit_lens(
    model: TokenModel, inputs: Tensor | tuple[Tensor, ...], positions: Tensor | None = None
) -> list[Tensor]:
    """Logits read from the stream after the embedding and after each block: a list of num_layers + 1
    tensors [B, T, classes] (or [B, len(positions), classes] at the given positions only), the last equal
    to the model's output. Every layer's logits at once: for many examples of a large vocabulary, the
    measures of `lens_accuracy` keep only what they need."""
    model = as_model(model)
    inputs = as_inputs(inputs, model)
    names = _stream_names(model)
    with evaluating(model):
        _, cache = model.run_with_cache(*inputs, names_filter=lambda name: name in names, stop_at_last=True)
        streams = [cache[name] if positions is None else cache[name][:, positions] for name in names]
        return [_read(model, stream) for stream in streams]


@dataclass
class Lens:
    """The accuracy and the loss (mean cross-entropy) read at every layer (`layers[0]`: the embedding,
    `layers[-1]`: the model's output); with `level`, each accuracy's bootstrap interval over the examples
    ([low, high])."""

    layers: list[float]
    losses: list[float]
    metric: str = "acc"
    level: float = 0.0
    intervals: list[list[float]] | None = None

    def to_dict(self) -> dict:
        ci = {"ci": {"level": self.level, "layers": self.intervals}} if self.intervals is not None else {}
        return {"metric": self.metric, "layers": self.layers, "losses": self.losses, **ci}


def lens_accuracy(
    model: TokenModel, inputs: Tensor | tuple[Tensor, ...], labels: Tensor, level: float = 0.0
) -> Lens:
    """Accuracy and loss of the prediction read at each layer; the last entry is the model's own. With
    `level`, each accuracy's bootstrap interval over the examples (`analysis.intervals`).

    Memory stays flat in the number of examples and the vocabulary: the examples run in batches whose
    streams and attention scores fit `MEMORY`, the forward pass stops at the last stream (the model's
    own logits are read like the others'), and the logits are read only at labelled positions, a chunk
    of `MEMORY` at a time, each reduced to its hits and its cross-entropy before the next."""
    model = as_model(model)
    inputs = as_inputs(inputs, model)
    names = _stream_names(model)
    count, length = labels.shape
    config = model.config  # an example's bytes: its streams, and one layer's attention scores in the forward
    per_example = 4 * length * (config.model_dim * len(names) + config.num_heads * length)
    batch = max(1, MEMORY // per_example)
    rows = max(1, MEMORY // (4 * config.output_classes))
    correct = torch.zeros(count, len(names))
    nll = torch.zeros(count, len(names), dtype=torch.float64)
    labelled = labels != IGNORE_INDEX
    with evaluating(model):
        for part in _chunks(count, batch):
            start = part.start
            _, cache = model.run_with_cache(
                *(x[part] for x in inputs), names_filter=lambda n: n in names, stop_at_last=True
            )
            where = labelled[part]
            example = where.nonzero()[:, 0] + start  # the example of each labelled position
            y = labels[part][where]
            for j, name in enumerate(names):
                stream = cache[name][where]  # [N, D]: the labelled positions only
                for chunk in _chunks(len(y), rows):
                    logits = _read(model, stream[chunk][None])[0].float()  # [rows, classes]
                    hit = (logits.argmax(-1) == y[chunk]).float()
                    loss = F.cross_entropy(logits, y[chunk], reduction="none").double()
                    correct[:, j].index_add_(0, example[chunk], hit)
                    nll[:, j].index_add_(0, example[chunk], loss)
    total = labelled.sum().clamp(min=1)
    result = Lens((correct.sum(0) / total).tolist(), (nll.sum(0) / total).tolist())
    if level and count > 1:  # over one example, a bootstrap says nothing
        columns = {"correct": correct, "labelled": labelled.sum(1)}
        low, high = intervals.bootstrap(columns, lambda s: s["correct"] / s["labelled"][:, None], level)
        result.level, result.intervals = level, torch.stack([low, high], dim=-1).tolist()
    return result


def _check_linear_readout(model: TokenModel) -> nn.Linear:
    if not model.config.norm_first or not isinstance(model.unembed, nn.Linear):
        raise ValueError(
            "direct logit attribution needs a pre-norm model with one Linear output layer "
            "(model.norm_first=true, model.output_mlp=false); this model's later norms or output MLP "
            "make a component's direct effect undefined: use the logit lens or ablation instead"
        )
    return model.unembed


def direct_logit_attribution(
    model: TokenModel, inputs: Tensor | tuple[Tensor, ...], labels: Tensor
) -> dict[str, float]:
    """Each component's direct contribution to the correct logit, averaged over the labelled positions:
    `embed` (token and position embeddings), every head (`L0H1`, or `D0H1` / `X0H1` in an
    encoder-decoder's decoder), `L0 attn bias` (W_O's bias; `D0 cross-attn bias`), `L0 MLP` (`D0 MLP`),
    and `bias` (W_U . beta + b_U).
    They sum to the mean correct logit (see the module docstring)."""
    model = as_model(model)
    inputs = as_inputs(inputs, model)
    unembed = _check_linear_readout(model)
    prefix, stack = model.readout
    layers = [layer for layer in model.attention_layers() if layer.name.startswith(f"{prefix}blocks.")]
    last = f"{prefix}blocks.{len(stack.blocks) - 1}.hook_resid_post"
    first = f"{prefix}blocks.0.hook_resid_pre"
    names = set(model.hook_names())
    mlps = [f"{prefix}blocks.{i}.hook_mlp_out" for i in range(len(stack.blocks))]
    mlps = [name if name in names else None for name in mlps]  # None: an attention-only block
    wanted = {first, last, *filter(None, mlps), *(f"{layer.name}.hook_z" for layer in layers)}
    modules = dict(model.named_modules())
    with evaluating(model):
        _, cache = model.run_with_cache(*inputs, names_filter=lambda name: name in wanted)
        labelled = labels != IGNORE_INDEX
        y = labels[labelled]  # [N]
        norm = stack.ln_final.norm
        x = cache[last][labelled].float()  # [N, D]
        rms = isinstance(norm, RMSNorm)  # no centring: sigma = sqrt(mean(x^2) + eps)
        spread = x.pow(2).mean(dim=-1, keepdim=True) if rms else x.var(dim=-1, unbiased=False, keepdim=True)
        sigma = (spread + norm.eps).sqrt()
        gamma = norm.weight.float()
        readout = unembed.weight.float()[y] * gamma  # [N, D]: W_U[y] * gamma

        def direct(c: Tensor) -> Tensor:  # c: [..., N, D] -> mean over N of the direct effect
            if not rms:
                c = c - c.mean(dim=-1, keepdim=True)
            return (c * readout).sum(dim=-1).div(sigma[:, 0]).mean(dim=-1)

        parts = {"embed": float(direct(cache[first][labelled].float()))}
        for i, mlp in enumerate(mlps):
            in_block = [layer for layer in layers if layer.name.startswith(f"{prefix}blocks.{i}.")]
            for layer in in_block:
                attn = modules[layer.name]
                z = cache[f"{layer.name}.hook_z"][labelled].float()  # [N, H, d_head]
                w_o = attn.o_proj.weight.float().view(attn.embed_dim, attn.num_heads, attn.head_dim)
                per_head = torch.einsum("nhd,ehd->hne", z, w_o)  # [H, N, D]: z_h W_O,h^T
                for h, value in enumerate(direct(per_head).tolist()):
                    parts[layer.head(h)] = value
                if attn.o_proj.bias is not None:
                    kind = "cross-attn" if layer.kind == "cross" else "attn"
                    parts[f"{in_block[0].label} {kind} bias"] = float(
                        direct(attn.o_proj.bias.float().expand_as(x))
                    )
            if mlp is not None:
                parts[f"{in_block[0].label} MLP"] = float(direct(cache[mlp][labelled].float()))
        constant = readout.new_zeros(len(y))
        if getattr(norm, "bias", None) is not None:  # RMSNorm has none
            constant = constant + unembed.weight.float()[y] @ norm.bias.float()
        if unembed.bias is not None:
            constant = constant + unembed.bias.float()[y]
        parts["bias"] = float(constant.mean())
    return parts
