"""What every sparse dictionary shares: an encoder to `width` features, a kind's sparse activation, a
decoder of unit-norm directions, an input scale, and the training terms (Bricken et al. 2023).

    pre    = encoder input W_enc + b_enc          [..., width]   (what the encoder reads: the subclass's)
    f      = act(pre)                            [..., width]   the kind's activation (`nn.sae_kinds`)
    out    = (f W_dec + b_dec) / s_out + skip    [..., d_out]   what it writes

An SAE (`nn.sae.SparseAutoencoder`) reads and writes the same activation (s_out = s, no skip); a
transcoder (`nn.transcoder.Transcoder`) reads an MLP's input and writes its output, with a scale of its
own for what it writes and an optional linear skip. Row i of W_dec is feature i's direction, kept at unit
norm while training; `s` (`input_scale`) makes the activations' mean norm sqrt(d_in), so that one
sparsity coefficient fits every hook (Anthropic's normalisation).

Hook points (SAELens's names): `hook_sae_input`, `hook_sae_acts_pre`, `hook_sae_acts_post` (the features),
`hook_sae_recons`, `hook_sae_error`, `hook_sae_output`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from transformer_lab.nn import sae_kinds
from transformer_lab.nn.hooks import HookedModule, HookPoint


def unit_rows(weight: Tensor) -> Tensor:
    """Each row divided by its norm (rows of norm 0 stay 0)."""
    return weight / weight.norm(dim=1, keepdim=True).clamp(min=1e-8)


class Dictionary(HookedModule):
    """The shared part of a sparse dictionary of `config` (kind, d_in, width and the kind's settings),
    writing `d_out` numbers per position (the module docstring)."""

    def __init__(self, config: Any, d_out: int):
        super().__init__()
        config.check()
        self.config = config
        d, w = config.d_in, config.width
        # W_dec's rows: random unit directions; W_enc starts as W_dec's transpose (Conerly et al. 2024)
        decoder = torch.randn(w, d_out)
        decoder /= decoder.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(decoder)
        self.W_enc = nn.Parameter(decoder.t().clone() if d_out == d else torch.randn(d, w) / d**0.5)
        self.b_enc = nn.Parameter(torch.zeros(w))
        self.b_dec = nn.Parameter(torch.zeros(d_out))
        self.register_buffer("input_scale", torch.ones(()))
        self.kind.add_parameters(self)
        self.hook_sae_input = HookPoint()
        self.hook_sae_acts_pre = HookPoint()
        self.hook_sae_acts_post = HookPoint()
        self.hook_sae_recons = HookPoint()
        self.hook_sae_error = HookPoint()
        self.hook_sae_output = HookPoint()

    @property
    def kind(self) -> sae_kinds.Kind:
        """Its kind (`nn.sae_kinds`): what switches features on and keeps them sparse."""
        return sae_kinds.get(self.config.kind)

    @property
    def width(self) -> int:
        return self.config.width

    @property
    def d_out(self) -> int:
        """The size of what it writes (an SAE: d_in)."""
        return self.W_dec.size(1)

    @property
    def threshold(self) -> Tensor | None:
        """Each feature's threshold theta [width] in use (jumprelu, batchtopk), else None."""
        return self.kind.threshold(self)

    # ------------------------------------------------------------------------------- the forward pass
    @property
    def output_scale(self) -> Tensor:
        """s_out, the scale of what it writes (an SAE writes what it reads: s)."""
        return self.input_scale

    def skip(self, x: Tensor) -> Tensor | None:
        """The part of the output read linearly from the input, in the scaled output space (or None)."""
        return None

    def encoder_input(self, x: Tensor) -> Tensor:
        """What the encoder multiplies by W_enc: s x (an SAE subtracts b_dec too)."""
        return x * self.input_scale

    def pre_activations(self, x: Tensor) -> Tensor:
        """pre = encoder_input(x) W_enc + b_enc."""
        x = self.hook_sae_input(x)
        return self.hook_sae_acts_pre(self.encoder_input(x) @ self.W_enc + self.b_enc)

    def activate(self, pre: Tensor) -> Tensor:
        """The kind's activation f = act(pre) (before `hook_sae_acts_post`)."""
        return self.kind.activate(self, pre)

    def encode(self, x: Tensor) -> Tensor:
        """The features f of activations x [..., d_in] -> [..., width]."""
        return self.hook_sae_acts_post(self.activate(self.pre_activations(x)))

    def decode(self, f: Tensor) -> Tensor:
        """(f W_dec + b_dec) / s_out: the features' part of what it writes."""
        return self.hook_sae_recons((f @ self.W_dec + self.b_dec) / self.output_scale)

    def write(self, x: Tensor, f: Tensor) -> Tensor:
        """What it writes for activations x and their features f: decode(f), plus the skip's part."""
        out, skip = self.decode(f), self.skip(x)
        return out if skip is None else out + skip / self.output_scale

    def forward(self, x: Tensor) -> Tensor:
        """What it writes for activations x [..., d_in]."""
        return self.hook_sae_output(self.write(x, self.encode(x)))

    # ----------------------------------------------------------------------------------- training
    def training_losses(
        self,
        x: Tensor,
        coefficient: float,
        aux_k: float = 0.0,
        dead: Tensor | None = None,
        target: Tensor | None = None,
    ) -> dict[str, Tensor]:
        """The terms of the training loss on activations x [N, d_in] writing `target` [N, d_out] (an SAE:
        x itself), in the scaled space:

            reconstruction = mean_n ||s_out target_n - (f_n W_dec + b_dec + skip)||^2   (summed over dims)
            sparsity       = coefficient * the kind's penalty (relu: mean_n sum_i f_ni; jumprelu: the L0)
            aux            = aux_k * mean_n ||e_n - e_hat_n||^2 (kinds with `aux`: AuxK, Gao et al. 2024):
                             the d_out / 2 largest pre-activations of the `dead` features [width] (bool)
                             alone reconstruct the error e, which gives dead features a gradient

        and `features` (f, detached) and `loss`, their sum."""
        kind = self.kind
        pre = self.pre_activations(x)
        f = self.hook_sae_acts_post(self.activate(pre))
        scaled = (x if target is None else target) * self.output_scale
        recon, skip = f @ self.W_dec + self.b_dec, self.skip(x)
        recon = recon if skip is None else recon + skip
        error = scaled - recon
        losses = {"reconstruction": error.pow(2).sum(-1).mean()}
        penalty = kind.penalty(self, pre, f)
        if penalty is not None:
            losses["sparsity"] = coefficient * penalty
        if kind.aux and self.training:
            losses["aux"] = aux_k * self._aux_loss(pre, error.detach(), dead)
            kind.after_loss(self, f)
        losses["loss"] = sum(losses.values())
        losses["features"] = f.detach()
        return losses

    def _aux_loss(self, pre: Tensor, error: Tensor, dead: Tensor | None) -> Tensor:
        """AuxK: the top k_aux = d_out / 2 dead features reconstruct the error, scaled down while few are
        dead (SAELens's form of Gao et al.'s auxiliary loss; an SAE's d_out is its d_in)."""
        count = 0 if dead is None else int(dead.sum())
        if count == 0:
            return pre.new_zeros(())
        half = max(self.W_dec.size(1) // 2, 1)
        k_aux = min(half, count)
        scale = min(count / half, 1.0)
        masked = torch.where(dead, pre, torch.full_like(pre, -torch.inf))
        top = masked.topk(k_aux, dim=-1)
        f = torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
        return scale * (f @ self.W_dec - error).pow(2).sum(-1).mean()

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        """Every feature's direction (row of W_dec) back to unit norm."""
        self.W_dec.copy_(unit_rows(self.W_dec))

    @torch.no_grad()
    def remove_parallel_gradient(self) -> None:
        """Remove from W_dec's gradient its component along each row: a step then turns the direction
        without changing its norm (to first order), so the sparsity penalty cannot shrink it away."""
        grad = self.W_dec.grad
        if grad is not None:
            rows = unit_rows(self.W_dec)
            grad -= (grad * rows).sum(dim=1, keepdim=True) * rows

    def directions(self) -> Tensor:
        """Each feature's unit direction in the output space [width, d_out] (W_dec's rows normalised)."""
        return unit_rows(self.W_dec)

    def state(self) -> dict[str, Any]:
        """The config as plain data and the weights: what a checkpoint holds."""
        return {"config": self.config.to_dict(), "state_dict": self.state_dict()}
