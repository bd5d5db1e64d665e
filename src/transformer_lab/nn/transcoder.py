"""Transcoders: a sparse dictionary that reads an MLP's input and writes its output (Dunefsky et al. 2024,
"Transcoders find interpretable LLM feature circuits"), so that the MLP can be replaced by features whose
effect on later features is linear (the attribution graphs of Ameisen et al. 2025).

    pre   = (s_in x) W_enc + b_enc                          [..., width]   x: the MLP's input
    f     = act(pre)                                        [..., width]   the kind's activation
    y_hat = (f W_dec + b_dec) / s_out + x W_skip            [..., d_out]   y: the MLP's output

Unlike an SAE, the encoder does not subtract b_dec (input and output live in different spaces), the
input and the output have a scale each (`input_scale`, `output_scale`: mean norms sqrt(d_in), sqrt(d_out)
after scaling), and `skip=True` adds a linear skip connection W_skip [d_in, d_out] (Paulo et al. 2025,
"Transcoders beat sparse autoencoders for interpretability"), which carries what the MLP does linearly
and leaves the features the rest. circuit-tracer's `SingleLayerTranscoder` computes the same map with
its weights stored as W_enc^T and W_skip^T and the scales folded into them (`circuit_tracer_weights`).

The kinds (relu, topk, batchtopk, jumprelu) are the SAE's (`nn.sae_kinds`), with the same training terms
(`nn.dictionary.Dictionary`), reconstructing y instead of x.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from transformer_lab.nn.config import from_plain, is_int, require
from transformer_lab.nn.dictionary import Dictionary
from transformer_lab.nn.sae import MAX_D_IN, SAEConfig, SparseAutoencoder


@dataclass
class TranscoderConfig(SAEConfig):
    """A transcoder's shape: an SAE's (d_in, width, kind and its settings; `hook`, the point it reads: the
    MLP's input) and d_out, the size of what it writes at `output_hook` (the MLP's output); `skip`,
    whether it has a linear skip connection."""

    d_out: int = 0
    output_hook: str = ""
    skip: bool = False

    @classmethod
    def from_dict(cls, values: dict) -> TranscoderConfig:
        def unknown(key: str, known: str) -> Exception:
            return ValueError(f"the transcoder config has an unknown key {key!r} (it has {known})")

        return from_plain(cls, values, unknown)

    def check(self) -> None:
        super().check()
        require(
            is_int(self.d_out) and 0 < self.d_out <= MAX_D_IN,
            f"the transcoder's d_out={self.d_out!r} must be a positive integer of at most {MAX_D_IN}",
        )
        require(isinstance(self.output_hook, str), f"output_hook={self.output_hook!r} must be a hook's name")
        require(isinstance(self.skip, bool), f"model.skip={self.skip!r} must be true or false")


class Transcoder(Dictionary):
    """The transcoder of `config` (the module docstring): `encode` x -> f, `decode` f -> the features'
    part of y, `forward` x -> y_hat (with the skip)."""

    def __init__(self, config: TranscoderConfig):
        super().__init__(config, config.d_out)
        self.register_buffer("scale_out", torch.ones(()))
        self.W_skip = nn.Parameter(torch.zeros(config.d_in, config.d_out)) if config.skip else None

    @property
    def output_scale(self) -> Tensor:
        return self.scale_out

    def shape(self) -> str:
        """`relu, 256 features from 64-dim blocks.1.mlp.hook_in to 64-dim blocks.1.hook_mlp_out, skip`."""
        c = self.config
        reads = f" {c.hook}" if c.hook else " activations"
        writes = f" {c.output_hook}" if c.output_hook else " activations"
        skip = ", skip" if c.skip else ""
        return (
            f"{self.kind.describe(c)}, {c.width} features from {c.d_in}-dim{reads} to {c.d_out}-dim{writes}"
            + skip
        )

    def skip(self, x: Tensor) -> Tensor | None:
        """s_out x W_skip: the skip connection's part of the output, in the scaled output space."""
        return None if self.W_skip is None else (x @ self.W_skip) * self.scale_out

    def circuit_tracer_weights(self) -> dict[str, Tensor]:
        """The weights under circuit-tracer's names and layout (`SingleLayerTranscoder`: W_enc [width,
        d_in], W_dec [width, d_out], W_skip [d_out, d_in], no scales): the same map, the scales folded in.
        pre = x (s_in W_enc) + b_enc; y_hat = f (W_dec / s_out) + b_dec / s_out + x W_skip."""
        with torch.no_grad():
            weights = {
                "W_enc": (self.W_enc * self.input_scale).t().contiguous(),
                "b_enc": self.b_enc.clone(),
                "W_dec": (self.W_dec / self.scale_out).contiguous(),
                "b_dec": self.b_dec / self.scale_out,
            }
            if self.W_skip is not None:
                weights["W_skip"] = self.W_skip.t().contiguous()
        return weights


def dictionary_config(values: dict) -> SAEConfig:
    """The config plain data describes, checked: a transcoder's where it says what it writes (`d_out`),
    else an SAE's. A ValueError names a bad value."""
    return (TranscoderConfig if "d_out" in values else SAEConfig).from_dict(values)


def build_dictionary(values: dict) -> SparseAutoencoder | Transcoder:
    """The dictionary of `dictionary_config(values)`: a transcoder or an SAE."""
    config = dictionary_config(values)
    return Transcoder(config) if isinstance(config, TranscoderConfig) else SparseAutoencoder(config)
