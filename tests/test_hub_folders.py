"""Folders as the hub ships them: each family at its real config.json (the public values of Pythia-70M,
SmolLM-135M, Qwen2-0.5B, TinyStories-1M and TinyLlama-1.1B, shrunk in width, depth and vocabulary only,
the relation between the tokenizer's size and the embedding's rows kept), its weights in the dtype and
files the hub has (float16 pytorch_model.bin, sharded safetensors with their index, pytorch_model.bin
shards with theirs), generation_config.json and tokenizer_config.json beside them. `hf:` opens each with
the logits transformers' own from_pretrained gives on the same folder; a padded vocabulary's extra rows
are never generated and are named as unused; an export keeps the special tokens, writes files of the
usual permissions, and never replaces what it did not write."""

import json
import os
import stat

import pytest
import torch

from tests.conftest import load_script
from tests.test_families import bpe, sentencepiece_bpe
from tests.test_hf_import import TEXT
from transformer_lab import ConfigError, load

pytestmark = pytest.mark.usefixtures("offline")

TOLERANCE = 1e-4
HUB = {  # name: (config.json as the hub has it, shrunk; the weights' dtype; how the files are laid out)
    "pythia-70m": ({  # 50,304 rows for 50,277 tokens: padded to a multiple of 128
        "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "gelu",
        "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 256, "layer_norm_eps": 1e-05,
        "max_position_embeddings": 2048, "model_type": "gpt_neox", "num_attention_heads": 4,
        "num_hidden_layers": 2, "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False,
        "torch_dtype": "float16", "transformers_version": "4.24.0", "use_cache": True,
        "use_parallel_residual": True, "vocab_size": 384,
    }, torch.float16, "bin"),
    "smollm-135m": ({  # 49,152 rows, as many tokens
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 72,
        "initializer_range": 0.02, "intermediate_size": 192, "max_position_embeddings": 2048,
        "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 2, "num_key_value_heads": 3,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
        "tie_word_embeddings": True, "torch_dtype": "float32", "transformers_version": "4.40.1",
        "use_cache": True, "vocab_size": 300,
    }, torch.float32, "safetensors"),
    "qwen2-0.5b": ({  # 151,936 rows for about 151,646 tokens; a sliding window set but not used
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 0,
        "hidden_act": "silu", "hidden_size": 112, "initializer_range": 0.02, "intermediate_size": 608,
        "max_position_embeddings": 131072, "max_window_layers": 24, "model_type": "qwen2",
        "num_attention_heads": 14, "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
        "use_sliding_window": False, "vocab_size": 640,
    }, torch.bfloat16, "safetensors"),
    "tinystories-1m": ({  # 50,257 rows, as many tokens; GPT-Neo's local layers
        "activation_function": "gelu_new", "architectures": ["GPTNeoForCausalLM"], "attention_dropout": 0,
        "attention_layers": ["global", "local"], "attention_types": [[["global", "local"], 1]],
        "bos_token_id": 0, "embed_dropout": 0, "eos_token_id": 0, "gradient_checkpointing": False,
        "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": None, "layer_norm_epsilon": 1e-05,
        "max_position_embeddings": 2048, "model_type": "gpt_neo", "num_heads": 16, "num_layers": 2,
        "resid_dropout": 0, "torch_dtype": "float32", "transformers_version": "4.26.1", "use_cache": True,
        "vocab_size": 300, "window_size": 256,
    }, torch.float32, "bin_shards"),
    "tinyllama-1.1b": ({  # 32,000 rows, as many tokens; a SentencePiece-style tokenizer
        "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
        "hidden_size": 128, "initializer_range": 0.02, "intermediate_size": 352,
        "max_position_embeddings": 2048, "model_type": "llama", "num_attention_heads": 32,
        "num_hidden_layers": 2, "num_key_value_heads": 4, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.31.0.dev0", "use_cache": True, "vocab_size": 300,
    }, torch.bfloat16, "safetensors_shards"),
}  # fmt: skip
META = ("architectures", "model_type", "torch_dtype", "transformers_version")


def hub_folder(transformers, folder, name: str, tokenizer) -> None:
    """A random model of `name`'s config, saved as the hub lays it out: config.json as the hub has it,
    the weights in its dtype and files, generation_config.json, the tokenizer with tokenizer_config.json."""
    hub, dtype, layout = HUB[name]
    torch.manual_seed(0)
    settings = {k: v for k, v in hub.items() if k not in META}
    config = transformers.AutoConfig.for_model(hub["model_type"], **settings)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    model.to(dtype)
    model.save_pretrained(folder, max_shard_size="100KB" if layout == "safetensors_shards" else "10GB")
    if layout.startswith("bin"):  # as older uploads have them (transformers 5 saves safetensors only)
        write_bins(folder, model.state_dict(), shards=2 if layout == "bin_shards" else 1)
    if layout == "safetensors_shards":
        assert (folder / "model.safetensors.index.json").exists()
    (folder / "config.json").write_text(json.dumps(hub, indent=2))
    inner = getattr(tokenizer, "_tokenizer", tokenizer)
    eos = "<|endoftext|>" if inner.token_to_id("<|endoftext|>") is not None else "</s>"
    bos = eos if eos == "<|endoftext|>" else "<s>"
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=inner, eos_token=eos, bos_token=bos)
    fast.save_pretrained(folder)


def write_bins(folder, state: dict, shards: int) -> None:
    """The weights as pytorch_model.bin, or as `shards` files with pytorch_model.bin.index.json (the
    layout save_pretrained wrote before safetensors), in place of model.safetensors."""
    (folder / "model.safetensors").unlink()
    names = list(state)
    if shards == 1:
        torch.save({k: v.clone() for k, v in state.items()}, folder / "pytorch_model.bin")
        return
    weight_map = {}
    for i in range(shards):
        file = f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin"
        part = names[i * len(names) // shards : (i + 1) * len(names) // shards]
        torch.save({k: state[k].clone() for k in part}, folder / file)
        weight_map |= dict.fromkeys(part, file)
    index = {"metadata": {"total_size": sum(v.numel() * v.element_size() for v in state.values())}}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index | {"weight_map": weight_map}))


@pytest.fixture(scope="module")
def folders(transformers, tmp_path_factory):
    byte_level, sentencepiece = bpe(), sentencepiece_bpe()
    out = {}
    for name in HUB:
        folder = tmp_path_factory.mktemp(name)
        hub_folder(transformers, folder, name, sentencepiece if name.startswith("tinyllama") else byte_level)
        out[name] = folder
    return out


@pytest.mark.parametrize("name", list(HUB))
def test_each_hub_folder_opens_with_transformers_logits(folders, transformers, name):
    folder = folders[name]
    checkpoint = load(f"hf:{folder}")
    config = checkpoint.model.config
    rows, tokens = HUB[name][0]["vocab_size"], len(checkpoint.tokenizer) - config.unused_rows
    assert config.vocab_size == rows and config.unused_rows == rows - tokens
    assert (config.bos_id, config.eos_id) == (HUB[name][0]["bos_token_id"], HUB[name][0]["eos_token_id"])
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = checkpoint.encode(TEXT)[None, :40]
    with torch.no_grad():
        expected = reference(ids).logits
        assert float((checkpoint.model(ids) - expected).abs().max()) < TOLERANCE * max(
            1, float(expected.abs().max())
        )
    if config.unused_rows:  # the padded rows are named as such, and never written
        assert checkpoint.model.vocab[-1] == f"<unused_{rows - 1}>"
        assert checkpoint.tokenizer.display([rows - 1]) == [f"<unused_{rows - 1}>"]


@pytest.mark.parametrize("name", [n for n in HUB if HUB[n][0]["vocab_size"] > 300])
def test_a_padded_vocabulary_is_never_generated(folders, name):
    """The unused rows made the most likely tokens by hand: greedy and sampled generation still write
    only the tokenizer's own tokens."""
    checkpoint = load(f"hf:{folders[name]}")
    model, used = checkpoint.model, checkpoint.model.config.used_tokens
    prompt = checkpoint.encode(TEXT)[None, :6]
    with torch.no_grad():
        _, cache = model.run_with_cache(prompt, names_filter="ln_final.hook_normalized")
        last = cache["ln_final.hook_normalized"][0, -1]
        model.unembed.weight[used:] = 1000 * last / last.norm()  # aligned with the stream: they would win
        assert int(model(prompt)[0, -1].argmax()) >= used
    for temperature in (0, 1.0):
        written = model.generate(prompt, 24, temperature=temperature)[0, 6:]
        assert int(written.max()) < used, temperature


def test_special_tokens_come_from_tokenizer_config_where_config_json_has_none(folders, tmp_path):
    folder = tmp_path / "smollm"
    folder.mkdir()
    for file in folders["smollm-135m"].iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    hub = {k: v for k, v in HUB["smollm-135m"][0].items() if k not in ("bos_token_id", "eos_token_id")}
    (folder / "config.json").write_text(json.dumps(hub))
    config = load(f"hf:{folder}").model.config
    eos = load(f"hf:{folder}").tokenizer.vocab.index("<|endoftext|>")
    assert config.bos_id == config.eos_id == eos


def test_a_tokenizer_larger_than_the_embedding_is_refused(folders, tmp_path):
    folder = tmp_path / "short"
    folder.mkdir()
    for file in folders["smollm-135m"].iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    hub = HUB["smollm-135m"][0] | {"vocab_size": 256}
    (folder / "config.json").write_text(json.dumps(hub))
    with pytest.raises(ConfigError, match=r"its tokenizer has 300 tokens but config.json's model has 256"):
        load(f"hf:{folder}")


@pytest.mark.parametrize("name", ["pythia-70m", "qwen2-0.5b"])
def test_init_from_a_padded_folder_trains_and_exports_it_back(folders, transformers, name, tmp_path):
    """train.py init_from=hf:<padded folder> keeps the rows and their names; to=huggingface writes the
    family back with its rows, its special tokens, files of mode 0644 (under umask 022) and a manifest;
    transformers opens it with our logits."""
    from tests.conftest import COMMON, compose_train_config
    from transformer_lab.train import train

    run = tmp_path / "run"
    overrides = [f"init_from=hf:{folders[name]}", "task=text", "trainer.max_steps=2", "data.block_size=32"]
    overrides += ["data.batch_size=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1"]
    train(compose_train_config(run, *overrides, base=["threads=1", *COMMON]))
    tuned = load(str(run))
    rows = HUB[name][0]["vocab_size"]
    assert tuned.model.config.vocab_size == rows and tuned.model.config.unused_rows > 0
    assert tuned.init_from == f"hf:{folders[name].resolve()}"
    out = tmp_path / "exported"
    old = os.umask(0o022)
    try:
        load_script("export").main([f"ckpt_path={run}", "to=huggingface", f"out={out}"])
    finally:
        os.umask(old)
    written = json.loads((out / "config.json").read_text())
    assert written["vocab_size"] == rows
    assert (written["bos_token_id"], written["eos_token_id"]) == (0, 0)
    for file in out.iterdir():
        assert stat.S_IMODE(file.stat().st_mode) == 0o644, file.name
    back = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    ids = tuned.encode(TEXT)[None, :24]
    with torch.no_grad():
        assert float((back(ids).logits - tuned.model(ids)).abs().max()) < TOLERANCE


def test_an_export_replaces_only_what_it_wrote_and_never_its_source(folders, tmp_path, capsys):
    """A folder of a model's own files (its names are an export's) is not taken for an earlier export:
    only the manifest an export writes says so, with each file's sha256. The folder a model was read
    from is refused even with overwrite=true, and so is a folder holding it; nothing there is touched."""
    from tests.test_export import refused

    source = tmp_path / "smollm"
    source.mkdir()
    for file in folders["smollm-135m"].iterdir():
        (source / file.name).write_bytes(file.read_bytes())
    before = {p.name: p.read_bytes() for p in source.iterdir()}
    args = (f"ckpt_path=hf:{source}", "to=huggingface")
    for out, overwrite in ((source, ()), (source, ("overwrite=true",)), (tmp_path, ("overwrite=true",))):
        err = refused(capsys, *args, f"out={out}", *overwrite)
        assert "which this is made from; write it to another folder" in err, err
    assert {p.name: p.read_bytes() for p in source.iterdir()} == before
    theirs = tmp_path / "theirs"  # a transformers folder the user saved: the same file names
    theirs.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (theirs / name).write_bytes(before[name])
    assert "holds config.json, model.safetensors, tokenizer.json, which this did not write" in refused(
        capsys, *args, f"out={theirs}"
    )
    out = tmp_path / "exported"
    load_script("export").main([*args, f"out={out}"])
    manifest = json.loads((out / "transformer-lab-export.json").read_text())
    assert manifest["format"] == "huggingface" and "model.safetensors" in manifest["files"]
    load_script("export").main([*args, f"out={out}"])  # its own earlier export: replaced
    (out / "config.json").write_text("{}")  # changed since: no longer what it wrote
    assert "holds config.json changed since this wrote it" in refused(capsys, *args, f"out={out}")
    load_script("export").main([*args, f"out={theirs}", "overwrite=true"])  # said so: replaced whole
    assert (theirs / "transformer-lab-export.json").exists()
