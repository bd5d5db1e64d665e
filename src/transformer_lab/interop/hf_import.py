"""`transformer_lab.load("hf:<folder>")`: a GPT-2 saved with `save_pretrained` as this project's DecoderLM.

    ckpt = transformer_lab.load("hf:gpt2-folder")          # ckpt_path=hf:gpt2-folder in every tool
    ckpt.model                                             # a DecoderLM with every hook point

The folder is read as a file from someone else, by the rules of `transformer_lab.checkpoint`, without
`transformers` and without the network (`from_pretrained` is never called):
* config.json: a regular file of at most `MAX_JSON`, read as JSON; a GPT-2 (`model_type` gpt2, a
  GPT2LMHeadModel); every size a positive integer within this package's limits (`ModelConfig.LIMITS`),
  checked before anything is allocated; settings GPT-2 has and this project's decoder does not
  (`scale_attn_by_inverse_layer_idx`, another LayerNorm epsilon, cross-attention) refused by name.
* the weights: model.safetensors (or the shards of model.safetensors.index.json, files of the folder
  itself): each header read and checked (its names, dtypes and shapes against the config's model, built
  on the meta device) before a tensor is read, then the tensors read with `safetensors` (no code runs);
  without safetensors, pytorch_model.bin read with `torch.load(weights_only=True)` after the checks
  `checkpoint.read` makes of a zip archive (a pickle that names code is refused, never run). The memory
  the model needs is compared with what the machine has free first.
* the tokenizer: tokenizer.json, or GPT-2's vocab.json and merges.txt (made into the same byte-level
  BPE), each at most `MAX_TOKENIZER`, one token per embedding: it goes into the record of the task, the
  text task (`data.text.TextDataModule`, as a model trained with task=text holds its BPE), so every tool
  encodes and decodes text with it (`Checkpoint.tokenizer`), and the examples are windows of Tiny
  Shakespeare tokenized with it (or of the text `data_path=` names).

GPT-2 -> DecoderLM (the inverse of `interop.huggingface`; GPT-2's Conv1D stores [in, out], transposed):

    config: n_embd -> model_dim, n_head -> num_heads, n_layer -> num_layers, n_positions -> max_len,
            vocab_size, n_inner -> dim_feedforward (None: 4 n_embd), activation_function -> activation
            (gelu_new, gelu_pytorch_tanh: gelu_new; gelu; relu), scale_attn_weights -> scale_attention,
            tie_word_embeddings -> tie_embeddings; pre-norm, learned positions, biases, one Linear out
    transformer.wte -> embed;  transformer.wpe -> pos_embed.embedding;  transformer.ln_f -> ln_final.norm
    transformer.h.i.ln_1, ln_2 -> blocks.i.norm1, norm2
    transformer.h.i.attn.c_attn [D, 3D] -> blocks.i.attn.qkv_proj (weight^T: the same [q | k | v] layout)
    transformer.h.i.attn.c_proj -> attn.o_proj;  mlp.c_fc -> mlp.fc_in;  mlp.c_proj -> mlp.fc_out (^T)
    lm_head.weight -> unembed.weight (tied: wte's); unembed.bias = 0 (GPT-2's output layer has none)
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import torch
from torch import Tensor

from transformer_lab.data.text import SHAKESPEARE_SHA256
from transformer_lab.data.tokenizer import MAX_TOKENIZER_JSON, BPETokenizer
from transformer_lab.errors import ConfigError, require
from transformer_lab.files import reading, require_regular_file, require_small_unpacked, unpickling_refusal
from transformer_lab.interop import require_package
from transformer_lab.limits import require_memory, size_text
from transformer_lab.nn import ModelConfig, build_model
from transformer_lab.nn.config import LIMITS

PREFIX = "hf:"
MAX_JSON = 16 * 2**20  # a config.json or an index is kilobytes
MAX_TOKENIZER = MAX_TOKENIZER_JSON  # GPT-2's tokenizer.json is 1.4 MB (the text task's bound: 32 MB)
MAX_HEADER = 100 * 2**20  # safetensors' own limit on a header
TASK = "transformer_lab.data.text.TextDataModule"
BLOCK_SIZE = 64  # tokens per example window (at most the model's positions)
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}
DTYPE_BYTES = {  # every dtype of the safetensors format, by its size in bytes
    **{"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1},
    **{"I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1},
}
ACTIVATIONS = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
BUFFERS = (".attn.bias", ".attn.masked_bias")  # GPT-2's causal-mask buffers, in files of older versions
SIZES = {  # config.json key -> (ModelConfig field, required)
    "n_embd": ("model_dim", True),
    "n_head": ("num_heads", True),
    "n_layer": ("num_layers", True),
    "n_positions": ("max_len", True),
    "vocab_size": ("vocab_size", True),
    "n_inner": ("dim_feedforward", False),
}


def read(location: str) -> dict:
    """The model of the folder `hf:<folder>` names, checked (the module docstring), as the contents of a
    checkpoint file (`transformer_lab.load` makes it a Checkpoint)."""
    folder = _folder(location)
    config = gpt2_model_config(read_json(folder / "config.json", location), location)
    tokenizer = read_tokenizer(folder, location)
    vocab = BPETokenizer(tokenizer, f"{location}'s tokenizer").vocab
    require(
        len(vocab) == config.vocab_size,
        f"{location}: its tokenizer has {len(vocab)} tokens but config.json's model has {config.vocab_size} "
        "(vocab_size); the tools need one token per embedding: save the model's own tokenizer beside it",
    )
    config.vocab = vocab
    config.check()
    skeleton = _skeleton(config)
    weights = read_weights(folder, location, gpt2_shapes(skeleton), skeleton)
    contents = {
        "format_version": 1,
        "state_dict": {f"net.{k}": v for k, v in weights.items()},
        "hyper_parameters": {"net": config.to_dict()},
        "task": {"class": TASK, "separator": "", "label_rule": "next", "tokenizer": tokenizer},
        "datamodule_hyper_parameters": {
            "path": None,  # Tiny Shakespeare, shipped (data_path= names another text)
            "sha256": SHAKESPEARE_SHA256,
            "tokenizer": "bpe",  # the record's tokenizer is used (Checkpoint.task: use_tokenizer)
            "vocab_size": config.vocab_size,
            "block_size": min(BLOCK_SIZE, config.max_len),
        },
    }
    return contents


# ------------------------------------------------------------------------------------ the folder
def _folder(location: str) -> Path:
    text = location.removeprefix(PREFIX)
    require(text.strip() != "", f"{location} names no folder; write hf:<folder saved with save_pretrained>")
    folder = Path(text).expanduser()
    try:
        folder.stat()
    except FileNotFoundError:
        raise ConfigError(
            f"{location}: the folder {folder} does not exist; hf: opens a local folder saved with "
            "save_pretrained (nothing is downloaded)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{location} cannot be read: {exc.strerror or exc}") from None
    require(
        folder.is_dir(),
        f"{location}: {folder} is not a folder; hf: opens a folder saved with save_pretrained",
    )
    return folder


def _read_text(path: Path, location: str, limit: int, what: str) -> str:
    require(path.exists(), f"{location} has no {path.name}, which {what}")
    require_regular_file(path, "file", limit)
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{location}: {path.name} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{location}: {path.name} cannot be read: {exc.strerror or exc}") from None


def read_json(path: Path, location: str, limit: int = MAX_JSON, what: str = "a saved model has") -> dict:
    """A JSON object from a regular file of at most `limit` bytes."""
    text = _read_text(path, location, limit, what)
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{location}: {path.name} is not valid JSON ({exc})") from None
    require(isinstance(value, dict), f"{location}: {path.name} is not a JSON object")
    return value


# ------------------------------------------------------------------------------------ the config
KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list"}


def setting(hf: dict, where: str, key: str, kind: type, default: object) -> object:
    """config.json's `key`, of `kind` (bool, int, float, str or list) or null, else `default` where it is
    absent; a one-line ConfigError naming the key where its value is of another type (a list where a
    string is expected fails later as `unhashable type`, far from the file). An int is a float too; a
    bool is no int."""
    value = hf.get(key, default)
    if value is None:
        return default
    fits = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    fits = fits or (kind is float and isinstance(value, int) and not isinstance(value, bool))
    require(fits, f"{where}: {key}={json.dumps(value)[:60]} must be {KINDS[kind]}")
    return float(value) if kind is float else value


def gpt2_model_config(hf: dict, location: str) -> ModelConfig:
    """The DecoderLM config of a GPT-2 config.json (the module docstring's table): every size checked
    against this package's limits before anything is built, every setting the decoder lacks refused."""
    where = f"{location}/config.json"
    kind = setting(hf, where, "model_type", str, None)
    architectures = setting(hf, where, "architectures", list, None) or ["GPT2LMHeadModel"]
    require(
        kind == "gpt2" and "GPT2LMHeadModel" in architectures,
        f"{where} is of a {kind!r} model ({', '.join(map(str, architectures))}); hf: opens GPT-2-family "
        "causal language models (model_type gpt2, GPT2LMHeadModel)",
    )
    sizes = {}
    for key, (field, required) in SIZES.items():
        value = setting(hf, where, key, int, None)
        if value is None and not required:
            continue
        require(value is not None and value > 0, f"{where}: {key}={value!r} must be a positive integer")
        require(
            value <= LIMITS[field],
            f"{where}: {key}={value} is more than this package's limit of {LIMITS[field]} ({field}); it is "
            "not a model this can open",
        )
        sizes[field] = value
    sizes.setdefault("dim_feedforward", 4 * sizes["model_dim"])  # GPT-2's n_inner=None
    activation = setting(hf, where, "activation_function", str, "gelu_new")
    require(
        activation in ACTIVATIONS,
        f"{where}: activation_function={activation!r} is not one this project's models have; they have "
        f"{', '.join(ACTIVATIONS)}",
    )
    for key in ("scale_attn_by_inverse_layer_idx", "add_cross_attention"):
        value = setting(hf, where, key, bool, False)
        require(not value, f"{where}: {key}={value!r}: this project's decoder has no such setting")
    eps = setting(hf, where, "layer_norm_epsilon", float, 1e-5)
    require(
        math.isclose(eps, 1e-5, rel_tol=1e-6),
        f"{where}: layer_norm_epsilon={eps!r}: this project's LayerNorms use 1e-05 (PyTorch's)",
    )
    eos = hf.get("eos_token_id")  # generation ends there, as transformers' generate ends it
    eos = eos[0] if isinstance(eos, list) and eos else eos
    eos = (
        eos if isinstance(eos, int) and not isinstance(eos, bool) and 0 <= eos < sizes["vocab_size"] else None
    )
    flags = {}
    for key, field in (("scale_attn_weights", "scale_attention"), ("tie_word_embeddings", "tie_embeddings")):
        flags[field] = setting(hf, where, key, bool, True)
    # no pad_id: positions count every token, as GPT-2's do (a pad_id would make them skip padding)
    return _model_config(
        {
            "arch": "decoder",
            **sizes,
            **flags,
            "eos_id": eos,
            "activation": ACTIVATIONS[activation],
            "norm_first": True,
            "bias": True,
            "positional_encoding": "learned",
            "output_mlp": False,
            "mlp": True,
        },
        where,
    )


def _skeleton(config: ModelConfig) -> torch.nn.Module:
    """The model on the meta device (no memory), for the shapes its weights must have."""
    with torch.device("meta"):
        return build_model(config)


def gpt2_shapes(skeleton: torch.nn.Module) -> dict[str, tuple[str, tuple[int, ...], bool]]:
    """GPT-2 name -> (this project's name, the shape the file must hold, whether it is transposed)."""
    out = {}
    names = {
        "wte.weight": "embed.weight",
        "wpe.weight": "pos_embed.embedding.weight",
        "ln_f.weight": "ln_final.norm.weight",
        "ln_f.bias": "ln_final.norm.bias",
    }
    block = {
        "ln_1": "norm1",
        "ln_2": "norm2",
        "attn.c_attn": "attn.qkv_proj",
        "attn.c_proj": "attn.o_proj",
        "mlp.c_fc": "mlp.fc_in",
        "mlp.c_proj": "mlp.fc_out",
    }
    for i in range(len(skeleton.blocks)):
        for theirs, ours in block.items():
            for part in ("weight", "bias"):
                names[f"h.{i}.{theirs}.{part}"] = f"blocks.{i}.{ours}.{part}"
    state = skeleton.state_dict()
    for theirs, ours in names.items():
        shape = tuple(state[ours].shape)
        transposed = theirs.endswith("weight") and ".c_" in theirs
        out[f"transformer.{theirs}"] = (ours, shape[::-1] if transposed else shape, transposed)
    if not skeleton.config.tie_embeddings:
        out["lm_head.weight"] = ("unembed.weight", tuple(state["unembed.weight"].shape), False)
    return out


# ------------------------------------------------------------------------------------ the weights
def read_weights(
    folder: Path,
    location: str,
    expected: dict[str, tuple[str, tuple[int, ...], bool]],
    skeleton: torch.nn.Module,
) -> dict[str, Tensor]:
    """This project's weights from the folder's files (the module docstring): every name and shape
    checked before a tensor is read, then read without running code; first of all, the memory the
    config's model needs (from its sizes alone) against what the machine has free."""
    _require_room(skeleton, location)
    if (folder / "model.safetensors").exists():
        files = {"model.safetensors": None}
    elif (folder / "model.safetensors.index.json").exists():
        files = _shards(folder, location)
    elif (folder / "pytorch_model.bin").exists():
        return _from_state(
            _read_bin(folder / "pytorch_model.bin", location, expected), location, expected, skeleton
        )
    else:
        raise ConfigError(
            f"{location} holds no weights (model.safetensors, model.safetensors.index.json or "
            "pytorch_model.bin); save the model with save_pretrained"
        )
    found: dict[str, tuple[str, str, tuple[int, ...]]] = {}  # name -> (file, dtype, shape)
    for name in files:
        for key, (dtype, shape) in _header(folder / name, location).items():
            found[key] = (name, dtype, shape)
    _check_names(found, location, expected, lambda key: found[key][2], lambda key: found[key][1])
    safetensors = require_package("safetensors", f"{location}")
    tensors: dict[str, Tensor] = {}
    for name in files:
        wanted = [k for k, (file, _, _) in found.items() if file == name and k in expected]
        with reading(f"{location}: {name}"), safetensors.safe_open(str(folder / name), framework="pt") as f:
            for key in wanted:
                tensors[key] = f.get_tensor(key)
    return _from_state(tensors, location, expected, skeleton)


def _shards(folder: Path, location: str) -> dict[str, None]:
    index = read_json(folder / "model.safetensors.index.json", location)
    weight_map = index.get("weight_map")
    require(
        isinstance(weight_map, dict) and all(isinstance(v, str) for v in weight_map.values()),
        f"{location}: model.safetensors.index.json has no weight_map of names to files",
    )
    files = sorted(set(weight_map.values()))
    for name in files:
        require(
            Path(name).name == name and name.endswith(".safetensors"),
            f"{location}: model.safetensors.index.json names the file {name!r}, which is not a .safetensors "
            "file of the folder itself",
        )
    return dict.fromkeys(files)


def _header(path: Path, location: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """A safetensors file's header, read and checked by hand before the library maps the file: name ->
    (dtype, shape), every tensor's bytes inside the file."""
    require(path.exists(), f"{location}: the weights file {path.name} is missing")
    require_regular_file(path, "file", 1 << 50)
    size = path.stat().st_size
    with open(path, "rb") as f:
        prefix = f.read(8)
        require(len(prefix) == 8, f"{location}: {path.name} is not a safetensors file (too short)")
        (length,) = struct.unpack("<Q", prefix)
        require(
            length <= min(MAX_HEADER, size - 8),
            f"{location}: {path.name} is not a safetensors file this reads: its header claims "
            f"{size_text(length)} (the file has {size_text(size)})",
        )
        try:
            header = json.loads(f.read(length))
        except ValueError as exc:
            raise ConfigError(f"{location}: {path.name} has a header that is not JSON ({exc})") from None
    require(isinstance(header, dict), f"{location}: {path.name}'s header is not a JSON object")
    out = {}
    spans = []
    data = size - 8 - length  # the bytes after the header: every tensor's, one after the other
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("dtype"), str)
            and isinstance(entry.get("shape"), list)
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in entry["shape"])
            and isinstance(entry.get("data_offsets"), list)
            and len(entry["data_offsets"]) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) for n in entry["data_offsets"])
        )
        require(
            ok,
            f"{location}: {path.name}'s header entry {key!r:.80} is not a tensor's (dtype, shape, offsets)",
        )
        dtype, shape, (start, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
        require(
            dtype in DTYPE_BYTES,
            f"{location}: {path.name}'s tensor {key!r:.80} has the dtype {dtype!r:.20}, which is not a "
            "safetensors dtype",
        )
        require(
            0 <= start <= end <= data,
            f"{location}: {path.name}'s tensor {key!r:.80} lies outside the file (truncated?)",
        )
        require(
            end - start == math.prod(shape) * DTYPE_BYTES[dtype],
            f"{location}: {path.name}'s tensor {key!r:.80} spans {end - start} bytes, but its shape "
            f"{list(shape)} of {dtype} takes {math.prod(shape) * DTYPE_BYTES[dtype]}; the file is damaged",
        )
        spans.append((start, end, key))
        out[key] = (dtype, shape)
    position = 0
    for start, end, key in sorted(spans):
        require(
            start == position,
            f"{location}: {path.name}'s tensor {key!r:.80} "
            + ("shares bytes with another tensor" if start < position else "leaves a gap before it")
            + "; each tensor's bytes follow the last one's in a safetensors file: the file is damaged",
        )
        position = end
    require(
        position == data,
        f"{location}: {path.name} has {data - position} bytes after its last tensor; the file is damaged",
    )
    return out


def _check_names(found: object, location: str, expected: dict, shape_of: object, dtype_of: object) -> None:
    """Every weight the config's model needs is in the file with its shape and a float dtype; nothing
    else is (but GPT-2's old mask buffers)."""
    for key in expected:
        if key not in found and key.startswith("transformer.") and key.removeprefix("transformer.") in found:
            continue  # saved from GPT2Model: no `transformer.` prefix (handled by `_from_state`)
        require(
            key in found,
            f"{location} has no weight {key}, which its config's GPT-2 has; it is not a complete model",
        )
    for key in found:
        name = key if key in expected else f"transformer.{key}"
        if name not in expected and key == "lm_head.weight" and "transformer.wte.weight" in expected:
            name = "transformer.wte.weight"  # tied: the embedding's copy, which transformers ignores too
        if name not in expected:
            require(
                key.endswith(BUFFERS),
                f"{location} has a weight {key} that its config's GPT-2 does not have; it is not the model "
                "config.json describes",
            )
            continue
        shape, dtype = tuple(shape_of(key)), dtype_of(key)
        require(
            shape == expected[name][1],
            f"{location}: weight {key} has shape {shape} in the file but config.json makes "
            f"{expected[name][1]}; the file does not match its own config",
        )
        require(
            dtype in DTYPES or (isinstance(dtype, torch.dtype) and dtype.is_floating_point),
            f"{location}: weight {key} is {dtype}, not floating point",
        )


def _require_room(skeleton: torch.nn.Module, location: str) -> None:
    elements = sum(t.numel() for t in skeleton.parameters()) + sum(b.numel() for b in skeleton.buffers())
    require_memory(8 * elements, f"the model of {location}", "it is too large for this machine")


def _read_bin(path: Path, location: str, expected: dict) -> dict[str, Tensor]:
    """pytorch_model.bin with `torch.load(weights_only=True)`, after the zip's own checks (a pickle that
    names code is refused in one line, and nothing of it runs)."""
    require_regular_file(path, "file", 1 << 50)
    with open(path, "rb") as f:
        zipped = f.read(4) == b"PK\x03\x04"
    require(
        zipped,
        f"{location}: {path.name} is not the zip archive torch.save writes (a legacy-format pickle is not "
        "read); save the model with save_pretrained (safetensors)",
    )
    require_small_unpacked(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # torch.load raises many types for a bad file
        if "Weights only load failed" in str(exc):
            raise unpickling_refusal(path, exc) from None
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ConfigError(f"{location}: {path.name} is not a readable weights file: {first}") from None
    require(
        isinstance(state, dict)
        and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in state.items()),
        f"{location}: {path.name} is not a state dict (names to tensors)",
    )
    _check_names(state, location, expected, lambda key: state[key].shape, lambda key: state[key].dtype)
    return state


def _from_state(
    state: dict[str, Tensor], location: str, expected: dict, skeleton: torch.nn.Module
) -> dict[str, Tensor]:
    """This project's state dict from GPT-2's (checked) tensors: transposed where Conv1D stores [in, out],
    float32, the unembedding tied or GPT-2's lm_head, its bias zeros."""
    weights = {}
    for key, (ours, _, transposed) in expected.items():
        tensor = state[key] if key in state else state[key.removeprefix("transformer.")]
        tensor = tensor.to(torch.float32)
        weights[ours] = (tensor.T if transposed else tensor).contiguous()
    if skeleton.config.tie_embeddings:
        weights["unembed.weight"] = weights["embed.weight"]
    weights["unembed.bias"] = torch.zeros(skeleton.config.vocab_size)
    return weights


# ------------------------------------------------------------------------------------ the tokenizer
def read_tokenizer(folder: Path, location: str) -> str:
    """The tokenizer's JSON: tokenizer.json as it is, or GPT-2's vocab.json and merges.txt made into the
    byte-level BPE they describe (as GPT2TokenizerFast does)."""
    if (folder / "tokenizer.json").exists():
        return _read_text(folder / "tokenizer.json", location, MAX_TOKENIZER, "")
    require(
        (folder / "vocab.json").exists() and (folder / "merges.txt").exists(),
        f"{location} has no tokenizer (tokenizer.json, or vocab.json and merges.txt), which the tools need "
        "to read and write text; save it beside the model (tokenizer.save_pretrained(folder))",
    )
    vocab = read_json(folder / "vocab.json", location, MAX_TOKENIZER)
    require(
        all(isinstance(v, int) and not isinstance(v, bool) for v in vocab.values()),
        f"{location}: vocab.json must map tokens to integer ids",
    )
    lines = _read_text(folder / "merges.txt", location, MAX_TOKENIZER, "").splitlines()
    merges = []
    for line in lines:
        if line.startswith("#version") or not line.strip():
            continue
        parts = line.split(" ")
        require(len(parts) == 2, f"{location}: merges.txt has a line that is not two tokens: {line[:60]!r}")
        merges.append((parts[0], parts[1]))
    tk = require_package("tokenizers", location)
    try:
        tok = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=merges))
    except Exception as exc:  # the library's own error types vary
        raise ConfigError(f"{location}: vocab.json and merges.txt are not a BPE tokenizer: {exc}") from None
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    if "<|endoftext|>" in vocab:
        tok.add_special_tokens([tk.AddedToken("<|endoftext|>", special=True, normalized=False)])
    return tok.to_str()


__all__ = ["PREFIX", "read"]


def _model_config(net: dict, where: str) -> ModelConfig:
    """The project's model config of a GPT-2's settings, every value in bounds (a one-line refusal)."""
    try:
        return ModelConfig.from_dict(net)
    except ValueError as exc:
        raise ConfigError(
            f"{where}: its config.json gives a model this project cannot build: {exc}"
        ) from None
