"""to=sae_lens: an SAE run as the folder SAELens saves (`SAE.save_model`), which `SAE.load_from_disk` opens.

    python -m transformer_lab.export sae=<SAE run> to=sae_lens out=my-sae
    from sae_lens import SAE; sae = SAE.load_from_disk("my-sae")      # encode, decode as here (1e-5)

    out/cfg.json                   SAELens's inference config: architecture, d_in, d_sae, dtype, k, ...,
                                   metadata (the model, the hook, where the SAE came from)
    out/sae_weights.safetensors    W_enc [d_in, d_sae], b_enc [d_sae], W_dec [d_sae, d_in], b_dec [d_in]
                                   (and threshold [d_sae] for jumprelu)

SAELens computes f = act((x - b_dec) W_enc + b_enc), x_hat = f W_dec + b_dec (`apply_b_dec_to_input`);
this project's SAE scales its input by s first (nn.sae), which is folded into the weights:

    W_enc' = s W_enc,  b_enc' = b_enc,  W_dec' = W_dec / s,  b_dec' = b_dec / s   (pre-activations unchanged)

Kinds (each kind's SAELens form is its own, `nn.sae_kinds`): relu -> `standard`; topk -> `topk` (k,
`rescale_acts_by_decoder_norm` false: the decoder is used as it is); jumprelu -> `jumprelu` (threshold =
exp(log_threshold)); batchtopk -> `jumprelu` with its one threshold for every feature, as SAELens saves a
BatchTopK SAE for use. A per-head hook ([B, T, H, D]:
`hook_z`) is read flattened to H D, SAELens's `reshape_activations: hook_z`. The other direction is
`interop.sae_lens_import` (`sae=saelens:<folder>`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from transformer_lab.interop import require_package
from transformer_lab.nn.sae import SparseAutoencoder

WEIGHTS = "sae_weights.safetensors"
# The SAELens config format written (6.x: the model, hook and prepend_bos in `metadata`). Without a version
# there, SAE.load_from_disk takes a config for a pre-6.0 one and drops them.
SAELENS_VERSION = "6.0.0"
CONFIG = "cfg.json"


def weights(sae: SparseAutoencoder) -> dict[str, torch.Tensor]:
    """SAELens's state dict of `sae`: the input scale folded in (the module docstring)."""
    s = float(sae.input_scale)
    out = {
        "W_enc": sae.W_enc.detach() * s,
        "b_enc": sae.b_enc.detach(),
        "W_dec": sae.W_dec.detach() / s,
        "b_dec": sae.b_dec.detach() / s,
    }
    if "threshold" in sae.kind.saelens_tensors:
        out["threshold"] = sae.threshold.detach()
    return {k: v.float().contiguous().cpu().clone() for k, v in out.items()}


def config(sae: SparseAutoencoder, model_name: str, source: str) -> dict:
    """SAELens's inference config of `sae` (SAEConfig.to_dict's keys)."""
    c = sae.config
    out = {
        "architecture": sae.kind.saelens,
        "d_in": c.d_in,
        "d_sae": c.width,
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": True,
        "normalize_activations": "none",
        "reshape_activations": "hook_z" if c.hook.endswith("hook_z") else "none",
        "metadata": {
            "sae_lens_version": SAELENS_VERSION,
            "sae_lens_training_version": None,
            "model_name": model_name,
            "hook_name": c.hook,
            "hook_head_index": None,
            "prepend_bos": False,
            "exported_from": f"transformer-lab SAE run {source} ({c.kind})",
        },
    }
    return out | sae.kind.saelens_config(c)


def export(sae: SparseAutoencoder, out: Path, model_name: str, source: str) -> list[str]:
    """Write cfg.json and sae_weights.safetensors into `out`; the lines to print."""
    safetensors = require_package("safetensors.torch", "to=sae_lens")
    out.mkdir(parents=True, exist_ok=True)
    safetensors.save_file(weights(sae), str(out / WEIGHTS))
    (out / CONFIG).write_text(json.dumps(config(sae, model_name, source), indent=1) + "\n")
    return [
        f"Wrote {CONFIG} and {WEIGHTS} ({sae.config.kind} as SAELens's {sae.kind.saelens}) to "
        f"{out}; open it with:",
        f'    from sae_lens import SAE; sae = SAE.load_from_disk("{out}")',
    ]
