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
  MLP's output). Exact only where the stream reaches the output layer as a sum: pre-norm models
  (`norm_first=True`) with a single Linear output layer. "Direct": what a head writes that later layers
  transform is credited to those layers.

For an encoder-decoder both read the decoder's stream.
"""

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from transformer_lab.interventions import accuracy, head_label
from transformer_lab.nn import EncoderDecoder, HookedModule


def _stack_and_inputs(model: HookedModule) -> tuple[str, nn.Module]:
    """The hook-name prefix of the stack the output layer reads, and its final norm."""
    if isinstance(model, EncoderDecoder):
        return "decoder.", model.decoder.ln_final
    return "", model.ln_final


def logit_lens(model: HookedModule, inputs: tuple[Tensor, ...]) -> list[Tensor]:
    """Logits read from the stream after the embedding and after each block: a list of num_layers + 1
    tensors [B, T, classes], the last equal to the model's output."""
    prefix, ln_final = _stack_and_inputs(model)
    num_layers = model.config.num_layers
    names = [f"{prefix}blocks.0.hook_resid_pre"] + [
        f"{prefix}blocks.{i}.hook_resid_post" for i in range(num_layers)
    ]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            _, cache = model.run_with_cache(*inputs, names_filter=lambda name: name in names)
            return [model.unembed(ln_final(cache[name])) for name in names]
    finally:
        model.train(was_training)


@dataclass
class Lens:
    """The metric read at every layer (`layers[0]`: the embedding, `layers[-1]`: the model's output)."""

    layers: list[float]
    metric: str = "acc"

    def to_dict(self) -> dict:
        return {"metric": self.metric, "layers": self.layers}


def lens_accuracy(model: HookedModule, inputs: tuple[Tensor, ...], labels: Tensor) -> Lens:
    """Accuracy of the prediction read at each layer; the last entry is the model's own accuracy."""
    return Lens([accuracy(logits, labels) for logits in logit_lens(model, inputs)])


def _check_linear_readout(model: HookedModule) -> nn.Linear:
    if not model.config.norm_first or not isinstance(model.unembed, nn.Linear):
        raise ValueError(
            "direct logit attribution needs a pre-norm model with one Linear output layer "
            "(model.norm_first=true, model.output_mlp=false); this model's later norms or output MLP "
            "make a component's direct effect undefined: use the logit lens or ablation instead"
        )
    return model.unembed


def direct_logit_attribution(
    model: HookedModule, inputs: tuple[Tensor, ...], labels: Tensor
) -> dict[str, float]:
    """Each component's direct contribution to the correct logit, averaged over the labelled positions:
    `embed` (token and position embeddings), every head (`L0H1`, or `D0H1` / `X0H1` in an
    encoder-decoder's decoder), `L0 attn bias` (W_O's bias; `D0 cross-attn bias`), `L0 MLP` (`D0 MLP`),
    and `bias` (W_U . beta + b_U).
    They sum to the mean correct logit (see the module docstring)."""
    unembed = _check_linear_readout(model)
    prefix, ln_final = _stack_and_inputs(model)
    names = model.hook_names()
    num_layers = model.config.num_layers
    last = f"{prefix}blocks.{num_layers - 1}.hook_resid_post"
    wanted = {f"{prefix}blocks.0.hook_resid_pre", last} | {
        n for n in names if n.startswith(prefix) and n.endswith(("hook_z", "hook_mlp_out"))
    }
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            _, cache = model.run_with_cache(*inputs, names_filter=lambda name: name in wanted)
            labelled = labels != -100
            y = labels[labelled]  # [N]
            norm = ln_final.norm
            x = cache[last][labelled].float()  # [N, D]
            sigma = (x.var(dim=-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
            gamma = norm.weight.float()
            readout = unembed.weight.float()[y] * gamma  # [N, D]: W_U[y] * gamma

            def direct(c: Tensor) -> float:  # c: [..., N, D] -> mean over N of the direct effect
                c = c - c.mean(dim=-1, keepdim=True)
                return (c * readout).sum(dim=-1).div(sigma[:, 0]).mean(dim=-1)

            parts = {"embed": float(direct(cache[f"{prefix}blocks.0.hook_resid_pre"][labelled].float()))}
            stack = model.decoder if isinstance(model, EncoderDecoder) else model
            letter = "D" if prefix else "L"
            for i, block in enumerate(stack.blocks):
                attentions = [("attn", block.attn)]
                if hasattr(block, "cross_attn"):
                    attentions.append(("cross_attn", block.cross_attn))
                for kind, attn in attentions:
                    layer = f"{prefix}blocks.{i}.{kind}"
                    z = cache[f"{layer}.hook_z"][labelled].float()  # [N, H, d_head]
                    w_o = attn.o_proj.weight.float().view(attn.embed_dim, attn.num_heads, attn.head_dim)
                    per_head = torch.einsum("nhd,ehd->hne", z, w_o)  # [H, N, D]: z_h W_O,h^T
                    for h, value in enumerate(direct(per_head).tolist()):
                        parts[head_label(layer, h)] = value
                    if attn.o_proj.bias is not None:
                        bias = attn.o_proj.bias.float().expand_as(x)
                        parts[f"{letter}{i} {kind.replace('_', '-')} bias"] = float(direct(bias))
                parts[f"{letter}{i} MLP"] = float(
                    direct(cache[f"{prefix}blocks.{i}.hook_mlp_out"][labelled].float())
                )
            constant = readout.new_zeros(len(y))
            if norm.bias is not None:
                constant = constant + unembed.weight.float()[y] @ norm.bias.float()
            if unembed.bias is not None:
                constant = constant + unembed.bias.float()[y]
            parts["bias"] = float(constant.mean())
    finally:
        model.train(was_training)
    return parts
