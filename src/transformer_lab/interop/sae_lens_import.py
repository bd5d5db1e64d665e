"""`sae=saelens:<folder>`: an SAE saved by SAELens (`SAE.save_model`, or `to=sae_lens` here) read back as
this project's SparseAutoencoder, for a model this project opens (`ckpt_path=` names it).

    python -m transformer_lab.interpret sae=saelens:my-sae ckpt_path=<its model> analysis=features
    run = transformer_lab.load_sae("saelens:my-sae", source="pretrained:induction_heads")

The folder is read as a file from someone else, by the rules of `interop.hf_import`, without SAELens and
without the network: cfg.json a regular file of at most `MAX_JSON`, parsed as JSON, its sizes positive
integers within `nn.sae`'s limits, its architecture one this project has (`standard`, `topk`,
`jumprelu`) and its settings ones it can express, each refused by name otherwise; sae_weights.safetensors'
header read and checked (every name, dtype and shape against the config) before a tensor is read, the
memory needed compared with what is free. The conversion, the inverse of `interop.sae_lens_export`:

    standard -> relu, topk -> topk (k), jumprelu -> jumprelu (log_threshold = log(threshold), every
    threshold positive); input_scale 1; W_enc, b_enc, W_dec, b_dec as they are, except:
    apply_b_dec_to_input false:       b_enc + b_dec W_enc (this project always subtracts b_dec first)
    rescale_acts_by_decoder_norm true: the decoder's norms folded into the encoder (W_dec's rows to unit
                                      norm, W_enc's columns and b_enc times them), as SAELens folds them

SAELens names the model by TransformerLens's name (`metadata.model_name`), not a file: the model is the
one `ckpt_path=` gives, and the splice checks its hook and its activations' size (`nn.sae.splice`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from transformer_lab.errors import ConfigError, as_config_error, require
from transformer_lab.files import safetensors_header
from transformer_lab.interop import require_package
from transformer_lab.interop.hf_import import DTYPES, MAX_JSON, read_json
from transformer_lab.interop.sae_lens_export import CONFIG, WEIGHTS
from transformer_lab.limits import require_memory
from transformer_lab.nn import sae_kinds
from transformer_lab.nn.sae import MAX_D_IN, MAX_WIDTH, SAEConfig, SparseAutoencoder

PREFIX = "saelens:"


def is_saelens(location: object) -> bool:
    return isinstance(location, str) and location.startswith(PREFIX)


def read(location: str) -> dict:
    """The SAE of the folder `saelens:<folder>` names, checked (the module docstring), as the contents of
    an SAE run (`sae_checkpoint.SAECheckpoint`)."""
    text = location.removeprefix(PREFIX)
    require(text.strip() != "", f"{location} names no folder; write saelens:<folder saved by SAELens>")
    folder = Path(text).expanduser()
    require(
        folder.is_dir(), f"{location}: {folder} is not a folder (SAELens saves cfg.json and weights in one)"
    )
    cfg = read_json(folder / CONFIG, location, MAX_JSON, "an SAE saved by SAELens has")
    config, flags = sae_config(cfg, location)
    weights = read_weights(folder / WEIGHTS, location, config, flags)
    metadata = cfg.get("metadata") if isinstance(cfg.get("metadata"), dict) else {}
    return {
        "format_version": 1,
        "state_dict": {f"net.{k}": v for k, v in weights.items()},
        "hyper_parameters": {"sae": config.to_dict()},
        "task": {
            "class": "transformer_lab.data.ActivationsDataModule",
            "separator": "",
            "source": {"model_name": str(metadata.get("model_name", "?")), "hook": config.hook},
        },
    }


def sae_config(cfg: dict, location: str) -> tuple[SAEConfig, dict]:
    """This project's SAEConfig of SAELens's cfg.json, and the settings the weights' conversion needs."""
    where = f"{location}/{CONFIG}"
    architecture = cfg.get("architecture", "standard")
    rule = sae_kinds.reading_saelens(architecture) if isinstance(architecture, str) else None
    readable = [kind.saelens_reads for kind in map(sae_kinds.get, sae_kinds.names()) if kind.saelens_reads]
    require(
        rule is not None,
        f"{where}: architecture={architecture!r} is not one this project has; it reads {', '.join(readable)}",
    )
    sizes = {}
    for key, bound in (("d_in", MAX_D_IN), ("d_sae", MAX_WIDTH)):
        value = cfg.get(key)
        require(
            isinstance(value, int) and not isinstance(value, bool) and 0 < value <= bound,
            f"{where}: {key}={value!r} must be a positive integer of at most {bound}",
        )
        sizes[key] = value
    normalize = cfg.get("normalize_activations", "none")
    require(
        normalize in ("none", None),
        f"{where}: normalize_activations={normalize!r}: this project reads SAEs of raw activations; fold the "
        "normalisation into the weights first (SAELens: sae.fold_activation_norm_scaling_factor)",
    )
    reshape = cfg.get("reshape_activations", "none")
    require(reshape in ("none", "hook_z", None), f"{where}: reshape_activations={reshape!r} is unknown here")
    metadata = cfg.get("metadata") if isinstance(cfg.get("metadata"), dict) else {}
    hook = metadata.get("hook_name", cfg.get("hook_name")) or ""  # "": activations of no model
    require(isinstance(hook, str), f"{where}: hook_name={hook!r} must be a hook point's name")
    head = metadata.get("hook_head_index", cfg.get("hook_head_index"))
    require(head is None, f"{where}: hook_head_index={head!r}: an SAE of one head's slice is not read here")
    try:
        settings, rescale = rule.from_saelens(cfg)
        config = SAEConfig(kind=rule.name, d_in=sizes["d_in"], width=sizes["d_sae"], hook=hook, **settings)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    flags = {"apply_b_dec_to_input": cfg.get("apply_b_dec_to_input", True), "rescale": rescale}
    for key, value in flags.items():
        require(isinstance(value, bool), f"{where}: {key}={value!r} must be true or false")
    return config, flags


def read_weights(path: Path, location: str, config: SAEConfig, flags: dict) -> dict[str, Tensor]:
    """The SAE's weights from sae_weights.safetensors: its header checked against the config before a
    tensor is read, then read without running code, converted (the module docstring)."""
    d, w = config.d_in, config.width
    rule = config.rule
    expected = {"W_enc": (d, w), "b_enc": (w,), "W_dec": (w, d), "b_dec": (d,)}
    expected |= dict.fromkeys(rule.saelens_tensors, (w,))
    require_memory(8 * (2 * d * w + w + d), f"the SAE of {location}", "it is too large for this machine")
    header = safetensors_header(path, location)
    for key, shape in expected.items():
        require(
            key in header, f"{location}: {WEIGHTS} has no tensor {key}, which its {config.kind} SAE needs"
        )
        dtype, found = header[key]
        require(
            tuple(found) == shape,
            f"{location}: {key} has shape {tuple(found)} in {WEIGHTS} but cfg.json makes {shape}",
        )
        require(dtype in DTYPES, f"{location}: {key} is {dtype}, not a float this reads")
    extra = sorted(set(header) - set(expected))
    require(
        not extra, f"{location}: {WEIGHTS} holds {extra[0] if extra else ''}, which its SAE does not have"
    )
    safetensors = require_package("safetensors", location)
    with safetensors.safe_open(str(path), framework="pt") as f:
        tensors = {key: f.get_tensor(key).to(torch.float32) for key in expected}
    for key, tensor in tensors.items():
        require(bool(torch.isfinite(tensor).all()), f"{location}: {key} holds NaN or infinite values")
    if not flags["apply_b_dec_to_input"]:
        tensors["b_enc"] = tensors["b_enc"] + tensors["b_dec"] @ tensors["W_enc"]
    if flags["rescale"]:
        norms = tensors["W_dec"].norm(dim=1).clamp(min=1e-12)
        tensors["W_dec"] = tensors["W_dec"] / norms[:, None]
        tensors["W_enc"] = tensors["W_enc"] * norms[None, :]
        tensors["b_enc"] = tensors["b_enc"] * norms
    state = {name: tensors[name] for name in ("W_enc", "b_enc", "W_dec", "b_dec")}
    state["input_scale"] = torch.ones(())
    with as_config_error():
        state |= rule.saelens_state(tensors, location)
    with torch.device("meta"):
        names = set(SparseAutoencoder(config).state_dict())
    require(set(state) == names, f"{location}: the converted weights do not make a {config.kind} SAE")
    return {k: v.contiguous() for k, v in state.items()}
