"""`transformer_lab.load("hf:<folder>")`: a causal language model saved with `save_pretrained` (GPT-2,
Pythia, Llama, Qwen2, Mistral, GPT-Neo) as this project's DecoderLM.

    ckpt = transformer_lab.load("hf:pythia-folder")        # ckpt_path=hf:pythia-folder in every tool
    ckpt.model                                             # a DecoderLM with every hook point

The folder is read as a file from someone else, by the rules of `transformer_lab.checkpoint`, without
`transformers` and without the network (`from_pretrained` is never called):
* config.json: a regular file of at most `MAX_JSON`, read as JSON; its family found by its
  `architectures` (or `model_type`) in the registry of `interop.families`, which maps it onto this
  project's ModelConfig: every value's type checked, every size a positive integer within this package's
  limits (`ModelConfig.LIMITS`), checked before anything is allocated; every setting a family has and
  this project's blocks do not (rope scaling, mixtures of experts, GPT-2's scale_attn_by_inverse_layer_idx,
  ...) refused by name.
* the weights: model.safetensors (or the shards of model.safetensors.index.json, files of the folder
  itself): each header read and checked (its names, dtypes and shapes against the family's tensors of
  the config's model, built on the meta device) before a tensor is read, then the tensors read with
  `safetensors` (no code runs); without safetensors, pytorch_model.bin read with
  `torch.load(weights_only=True)` after the checks `checkpoint.read` makes of a zip archive (a pickle
  that names code is refused, never run). The memory the model needs is compared with what the machine
  has free first. The family's mapping (`families.to_ours`) places each tensor in this project's.
* the tokenizer: tokenizer.json, or GPT-2's vocab.json and merges.txt (made into the same byte-level
  BPE), each at most `MAX_TOKENIZER`, one token per embedding: it goes into the record of the task, the
  text task (`data.text.TextDataModule`, as a model trained with task=text holds its BPE), so every tool
  encodes and decodes text with it (`Checkpoint.tokenizer`), and the examples are windows of Tiny
  Shakespeare tokenized with it (or of the text `data_path=` names).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import torch
from torch import Tensor

from transformer_lab import signals, snapshots
from transformer_lab.data.text import SHAKESPEARE_SHA256
from transformer_lab.data.tokenizer import MAX_TOKENIZER_JSON, BPETokenizer
from transformer_lab.errors import ConfigError, require
from transformer_lab.files import (
    reading,
    require_regular_file,
    require_small_unpacked,
    safetensors_header,
    unpickling_refusal,
)
from transformer_lab.interop import families, require_package
from transformer_lab.limits import require_memory
from transformer_lab.nn import ModelConfig, build_model

PREFIX = "hf:"
MAX_JSON = 16 * 2**20  # a config.json or an index is kilobytes
MAX_TOKENIZER = MAX_TOKENIZER_JSON  # GPT-2's tokenizer.json is 1.4 MB (the text task's bound: 32 MB)
TASK = "transformer_lab.data.text.TextDataModule"
BLOCK_SIZE = 64  # tokens per example window (at most the model's positions)
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def read(location: str) -> dict:
    """The model of the folder `hf:<folder>` names, checked (the module docstring), as the contents of a
    checkpoint file (`transformer_lab.load` makes it a Checkpoint)."""
    folder = _folder(location)
    series = snapshots.hf_series(location)
    if series:
        steps = f"step{series[0].step}" + (f" ... step{series[-1].step}" if len(series) > 1 else "")
        raise ConfigError(
            f"{location} holds checkpoints over training ({steps}), not one model: pick one with step=N "
            f"(or hf:<folder>/step<N>); interpret analysis=dynamics reads them all"
        )
    hf = read_json(folder / "config.json", location)
    where = f"{location}/config.json"
    family = families.family_of(hf, where)
    config = _model_config(family.model_config(hf, where), where, family)
    tokenizer = read_tokenizer(folder, location)
    own = BPETokenizer(tokenizer, f"{location}'s tokenizer")
    require(
        len(own) <= config.vocab_size,
        f"{location}: its tokenizer has {len(own)} tokens but config.json's model has {config.vocab_size} "
        "embedding rows (vocab_size), and a token no row holds cannot be read; save the model's own "
        "tokenizer beside it",
    )
    vocab = own.padded(config.vocab_size).vocab  # rows after the tokenizer's: unused (<unused_i>)
    config.unused_rows = config.vocab_size - len(own)
    config.vocab = vocab
    _special_tokens_of_tokenizer(folder, location, config)
    config.check()
    _require_room(config, location)  # from one block's size: a thousand layers take seconds to build
    skeleton = _skeleton(config)
    mapping = family.mapping(config)
    shapes = our_shapes(skeleton)
    state = read_weights(folder, location, family, families.expected_shapes(mapping, shapes))
    weights = families.to_ours(state, mapping, shapes)
    if config.tie_embeddings:
        weights["unembed.weight"] = weights["embed.weight"]
    return {
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


def our_shapes(skeleton: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    """This project's state_dict shapes of the model (a tied output layer left out: it is the embedding)."""
    shapes = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
    if skeleton.config.tie_embeddings:
        shapes.pop("unembed.weight", None)
    return shapes


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
    with reading(f"{location}: {path.name}", "is not valid JSON"):  # nested 200,000 deep: RecursionError
        value = json.loads(text)
    require(isinstance(value, dict), f"{location}: {path.name} is not a JSON object")
    return value


# ------------------------------------------------------------------------------------ the config
def _skeleton(config: ModelConfig) -> torch.nn.Module:
    """The model on the meta device (no memory), for the shapes its weights must have."""
    with torch.device("meta"):
        return build_model(config)


# ------------------------------------------------------------------------------------ the weights
def read_weights(
    folder: Path,
    location: str,
    family: families.Family,
    expected: dict[str, tuple[int, ...]],
) -> dict[str, Tensor]:
    """The family's tensors from the folder's files (the module docstring), by their names in
    `expected` (name -> shape): every name and shape checked before a tensor is read, then read without
    running code (the memory the model needs was checked before: `_require_room`)."""
    if (folder / "model.safetensors").exists():
        files = {"model.safetensors": None}
    elif (folder / "model.safetensors.index.json").exists():
        files = _shards(folder, location, "model.safetensors.index.json", ".safetensors")
    elif (folder / "pytorch_model.bin").exists():
        return _read_bins(folder, ["pytorch_model.bin"], location, family, expected)
    elif (folder / "pytorch_model.bin.index.json").exists():
        shards = list(_shards(folder, location, "pytorch_model.bin.index.json", ".bin"))
        return _read_bins(folder, shards, location, family, expected)
    else:
        raise ConfigError(
            f"{location} holds no weights (model.safetensors, model.safetensors.index.json, "
            "pytorch_model.bin or pytorch_model.bin.index.json); save the model with save_pretrained"
        )
    found: dict[str, tuple[str, str, tuple[int, ...]]] = {}  # name -> (file, dtype, shape)
    for name in files:
        for key, (dtype, shape) in safetensors_header(folder / name, location).items():
            found[key] = (name, dtype, shape)
    names = _check_names(found, location, family, expected, lambda k: found[k][2], lambda k: found[k][1])
    safetensors = require_package("safetensors", f"{location}")
    tensors: dict[str, Tensor] = {}
    for name in files:
        wanted = {key: ours for ours, key in names.items() if found[key][0] == name}
        with reading(f"{location}: {name}"), safetensors.safe_open(str(folder / name), framework="pt") as f:
            for key, ours in wanted.items():
                tensors[ours] = f.get_tensor(key)
    return tensors


def _shards(folder: Path, location: str, index_name: str, suffix: str) -> dict[str, None]:
    """The shard files an index (`model.safetensors.index.json`, `pytorch_model.bin.index.json`) names:
    files of the folder itself, each ending in `suffix`."""
    index = read_json(folder / index_name, location)
    weight_map = index.get("weight_map")
    require(
        isinstance(weight_map, dict) and all(isinstance(v, str) for v in weight_map.values()),
        f"{location}: {index_name} has no weight_map of names to files",
    )
    files = sorted(set(weight_map.values()))
    for name in files:
        require(
            Path(name).name == name and name.endswith(suffix),
            f"{location}: {index_name} names the file {name!r}, which is not a {suffix} file of the folder "
            "itself",
        )
    return dict.fromkeys(files)


def _canonical(key: str, family: families.Family, expected: dict) -> str:
    """A tensor's name as the family's mapping names it: an old name by its new one (`ALIASES`), a
    headless base model's without the prefix of the whole model's (`PREFIX`)."""
    key = family.aliases.get(key, key)
    if key not in expected and family.prefix + key in expected:
        key = family.prefix + key
    return family.aliases.get(key, key)


def _check_names(
    found: object, location: str, family: families.Family, expected: dict, shape_of: object, dtype_of: object
) -> dict[str, str]:
    """Every tensor the config's model needs is in the file with its shape and a float dtype; nothing
    else is (but the buffers of old files, and a tied output layer's copy of the embedding). The file's
    name of each needed tensor, by its name in `expected`."""
    names = {_canonical(key, family, expected): key for key in found}
    for name in expected:
        require(
            name in names,
            f"{location} has no weight {name}, which its config's {family.title} has; it is not a complete "
            "model",
        )
    for name, key in names.items():
        if name not in expected:
            require(
                key.endswith(family.ignored) or name == "lm_head.weight",  # tied: transformers ignores it too
                f"{location} has a weight {key} that its config's {family.title} does not have; it is not "
                "the model config.json describes",
            )
            continue
        shape, dtype = tuple(shape_of(key)), dtype_of(key)
        require(
            shape == expected[name],
            f"{location}: weight {key} has shape {shape} in the file but config.json makes "
            f"{expected[name]}; the file does not match its own config",
        )
        require(
            dtype in DTYPES or (isinstance(dtype, torch.dtype) and dtype.is_floating_point),
            f"{location}: weight {key} is {dtype}, not floating point",
        )
    return {name: key for name, key in names.items() if name in expected}


def _require_room(config: ModelConfig, location: str) -> None:
    """The memory the model of `config` needs (8 bytes an element: float32 weights and a copy while they
    are read) against what the machine has free: counted on a one-layer model on the meta device, its
    block times the layers, so that a config of absurd depth is refused at once."""
    one = _skeleton(replace(config, num_layers=1, window_layers=None))

    def elements(module: torch.nn.Module) -> int:
        return sum(t.numel() for t in module.parameters()) + sum(b.numel() for b in module.buffers())

    block = elements(one.blocks[0])
    total = elements(one) + (config.num_layers - 1) * block
    require_memory(8 * total, f"the model of {location}", "it is too large for this machine")


def _read_bins(
    folder: Path, names: list[str], location: str, family: families.Family, expected: dict
) -> dict[str, Tensor]:
    """pytorch_model.bin (or its shards) with `torch.load(weights_only=True)`, after the zip's own checks
    (a pickle that names code is refused in one line, and nothing of it runs); every name and shape
    checked once all are read (memory-mapped: nothing is copied until it is used)."""
    state: dict[str, Tensor] = {}
    for name in names:
        path = folder / name
        require(path.exists(), f"{location}: the weights file {name} is missing")
        require_regular_file(path, "file", 1 << 50)
        with open(path, "rb") as f:
            zipped = f.read(4) == b"PK\x03\x04"
        require(
            zipped,
            f"{location}: {name} is not the zip archive torch.save writes (a legacy-format pickle is not "
            "read); save the model with save_pretrained (safetensors)",
        )
        require_small_unpacked(path)
        since = signals.received()
        try:
            part = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception as exc:  # torch.load raises many types for a bad file
            signals.raise_pending(since)  # a signal during the read ends as the signal, not the file's fault
            if "Weights only load failed" in str(exc):
                raise unpickling_refusal(path, exc) from None
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise ConfigError(f"{location}: {name} is not a readable weights file: {first}") from None
        require(
            isinstance(part, dict)
            and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in part.items()),
            f"{location}: {name} is not a state dict (names to tensors)",
        )
        repeated = sorted(set(part) & set(state))
        require(not repeated, f"{location}: {name} holds {repeated[:1]}, which another shard holds too")
        state |= part
    checked = _check_names(
        state, location, family, expected, lambda k: state[k].shape, lambda k: state[k].dtype
    )
    return {ours: state[key] for ours, key in checked.items()}


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


def _special_tokens_of_tokenizer(folder: Path, location: str, config: ModelConfig) -> None:
    """bos_id and eos_id from tokenizer_config.json's bos_token and eos_token where config.json gives
    none (many hub folders name them only there), each a token of the vocabulary."""
    path = folder / "tokenizer_config.json"
    if not path.exists() or (config.bos_id is not None and config.eos_id is not None):
        return
    settings = read_json(path, location)
    index = {token: i for i, token in enumerate(config.vocab)}
    for key in ("bos", "eos"):
        token = settings.get(f"{key}_token")
        token = token.get("content") if isinstance(token, dict) else token
        if getattr(config, f"{key}_id") is None and isinstance(token, str) and token in index:
            setattr(config, f"{key}_id", index[token])


__all__ = ["PREFIX", "read"]


def _model_config(net: dict, where: str, family: families.Family) -> ModelConfig:
    """The project's model config of a family's settings, every value in bounds and the structure whole
    (`ModelConfig.check`): a one-line refusal naming config.json's keys otherwise."""
    try:
        return ModelConfig.from_dict(net)
    except ValueError as exc:
        text = str(exc)
        for name, key in family.config_keys.items():
            text = re.sub(rf"\bmodel\.{name}\b", key, text)
        raise ConfigError(f"{where}: not a model this project can build: {text}") from None
