"""`transformer_lab.load("hf:<folder>")` and `ckpt_path=hf:<folder>`: a random GPT2LMHeadModel (2 layers, 2
heads, width 32, gelu_new, tied embeddings) with a byte-level BPE, saved with save_pretrained, opened here
and compared with transformers; taken apart by interpret (heads, circuit) and the explorer; sent back with
to=huggingface; and hostile folders refused in one line with nothing run and nothing large allocated.
The activation gelu_new against PyTorch's. Nothing is downloaded (HF_HUB_OFFLINE=1)."""

import json
import math
import struct

import pytest
import torch

from tests.conftest import load_script
from transformer_lab import load
from transformer_lab.cli import run
from transformer_lab.data.text import shipped_text
from transformer_lab.errors import ConfigError
from transformer_lab.interop import hf_import
from transformer_lab.nn import ModelConfig
from transformer_lab.nn.blocks import MLP

pytestmark = pytest.mark.usefixtures("offline")  # no network; the interop cache in tmp

TOLERANCE = 1e-4


def gpt2_folder(transformers, folder, seed: int = 0, slow_tokenizer: bool = False, **config: object):
    """A random GPT2LMHeadModel (2 layers, 2 heads, width 32; every LayerNorm and bias random too) and a
    byte-level BPE of 300 tokens trained on a piece of Tiny Shakespeare, saved with save_pretrained."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        [shipped_text().read_text()[:100_000]], vocab_size=300, special_tokens=["<|endoftext|>"]
    )
    binary = config.pop("bin", False)
    shards = config.pop("shards", False)
    settings = dict(
        vocab_size=300, n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**(settings | config))).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                parameter.add_(0.2 * torch.randn_like(parameter))
    model.save_pretrained(folder, max_shard_size="40KB" if shards else "50GB")
    if binary:  # as transformers 4 wrote it by default: a zip of the state dict (torch.save)
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    if slow_tokenizer:  # GPT-2's own files: vocab.json and merges.txt
        bpe.save_model(str(folder))
    else:
        fast = transformers.PreTrainedTokenizerFast(
            tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>"
        )
        fast.save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def gpt2(transformers, tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    return folder, gpt2_folder(transformers, folder)


TEXT = "ROMEO:\nBut soft, what light through yonder window breaks?"


def test_gelu_new_is_pytorchs_tanh_gelu():
    x = torch.linspace(-6, 6, 1001)
    mlp = MLP(4, 8, "gelu_new", 0.0)
    assert torch.equal(mlp.act(x), torch.nn.functional.gelu(x, approximate="tanh"))
    formula = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))  # GPT-2's
    assert float((mlp.act(x) - formula).abs().max()) < 1e-6
    assert float((mlp.act(x) - torch.nn.functional.gelu(x)).abs().max()) > 1e-4  # not the exact GELU
    assert ModelConfig(vocab_size=5, activation="gelu_new").activation == "gelu_new"
    with pytest.raises(ValueError, match="'swish': use relu or gelu"):
        ModelConfig(vocab_size=5, activation="swish")


def test_a_saved_gpt2_is_a_decoder_with_its_logits_hooks_and_tokenizer(gpt2, transformers):
    folder, reference = gpt2
    checkpoint = load(f"hf:{folder}")
    model, config = checkpoint.model, checkpoint.config
    assert (config.arch, config.activation, config.num_layers, config.num_heads, config.model_dim) == (
        "decoder",
        "gelu_new",
        2,
        2,
        32,
    )
    assert config.tie_embeddings and config.positional_encoding == "learned" and config.eos_id == 0
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    ids = checkpoint.encode(TEXT)
    assert ids.tolist() == tokenizer(TEXT).input_ids and checkpoint.decode(ids) == TEXT
    tokens = torch.stack([ids[:30], ids[5:35]])
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
        expected = reference(tokens, output_hidden_states=True)
    assert float((logits - expected.logits).abs().max()) < TOLERANCE
    assert float((cache["ln_final.hook_normalized"] - expected.hidden_states[-1]).abs().max()) < TOLERANCE
    assert float((cache["blocks.0.hook_resid_post"] - expected.hidden_states[1]).abs().max()) < TOLERANCE
    assert {"blocks.1.attn.hook_pattern", "blocks.1.mlp.hook_post", "hook_pos_embed"} <= set(cache.keys())
    inputs, labels = checkpoint.examples(4)  # Tiny Shakespeare, tokenized by its BPE
    assert inputs[0].shape == (4, 64) and torch.equal(labels[:, :-1], inputs[0][:, 1:])


@pytest.mark.parametrize(
    "variant",
    [
        dict(tie_word_embeddings=False, activation_function="relu"),
        dict(slow_tokenizer=True, bin=True),
        dict(shards=True),
    ],
    ids=["untied relu", "vocab.json and pytorch_model.bin", "sharded safetensors"],
)
def test_the_other_ways_a_gpt2_is_saved(transformers, tmp_path, variant):
    reference = gpt2_folder(transformers, tmp_path, seed=3, **variant)
    assert (tmp_path / "pytorch_model.bin").exists() == ("bin" in variant)
    assert (tmp_path / "merges.txt").exists() == ("slow_tokenizer" in variant)
    assert (tmp_path / "model.safetensors.index.json").exists() == ("shards" in variant)
    checkpoint = load(f"hf:{tmp_path}")
    ids = checkpoint.encode(TEXT)[None]
    with torch.no_grad():
        assert float((checkpoint.model(ids) - reference(ids).logits).abs().max()) < TOLERANCE


def test_the_round_trip_to_huggingface_keeps_the_logits(gpt2, transformers, tmp_path, capsys):
    folder, reference = gpt2
    load_script("export").main([f"ckpt_path=hf:{folder}", "to=huggingface", f"out={tmp_path}"])
    assert "GPT2LMHeadModel" in capsys.readouterr().out
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    assert ids[0].tolist() == transformers.AutoTokenizer.from_pretrained(folder)(TEXT).input_ids
    with torch.no_grad():
        assert float((again(ids).logits - reference(ids).logits).abs().max()) < 1e-5


def test_sample_writes_what_transformers_generates(gpt2, transformers, capsys):
    folder, reference = gpt2
    load_script("sample").main(
        [f"ckpt_path=hf:{folder}", "prompt=ROMEO:", "max_new_tokens=12", "temperature=0"]
    )
    printed = capsys.readouterr().out
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tokenizer("ROMEO:", return_tensors="pt").input_ids
    with torch.no_grad():
        out = reference.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)[0].tolist()
    expected = tokenizer.decode(out[: out.index(0, ids.size(1))] if 0 in out[ids.size(1) :] else out)
    assert printed.rstrip("\n") == expected


def test_interpret_takes_it_apart(gpt2, tmp_path, capsys):
    folder, _ = gpt2
    interpret = load_script("interpret")
    interpret.main([f"ckpt_path=hf:{folder}", "analysis=heads", "num_examples=16", f"out_dir={tmp_path}"])
    printed = capsys.readouterr().out
    assert "L1H1" in printed and (tmp_path / "heads.json").is_file()
    heads = json.loads((tmp_path / "heads.json").read_text())
    assert len(heads["ablated"]) == 2 and len(heads["ablated"][0]) == 2
    interpret.main(
        [f"ckpt_path=hf:{folder}", "analysis=circuit", "num_examples=8", "verify=4", f"out_dir={tmp_path}"]
    )
    circuit = json.loads((tmp_path / "circuit.json").read_text())
    assert circuit["method"] == "eap" and circuit["num_examples"] == 8
    assert (
        any(edge["src"] == "blocks.1.attn.head.1" for edge in circuit["edges"]) and circuit["verified"] == 4
    )


@pytest.mark.browser
def test_its_live_page_runs_it_as_pytorch_does(gpt2, tmp_path, capsys, browser):
    """The explorer's page of the model, with the model in it (gelu_new and its BPE run in JavaScript),
    opened in Chromium: its forward pass gives PyTorch's logits."""
    folder, _ = gpt2
    page = tmp_path / "page.html"
    load_script("explore").main([f"ckpt_path=hf:{folder}", "text=ROMEO: I", f"out={page}"])
    assert "live page" in capsys.readouterr().out
    checkpoint = load(f"hf:{folder}")
    tokens = checkpoint.encode(TEXT)[:24]
    with torch.no_grad():
        expected = checkpoint.model(tokens[None])[0]
    tab = browser.new_page()
    errors = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    try:
        tab.goto(page.resolve().as_uri())
        tab.wait_for_selector("body[data-live]", timeout=30_000)
        got = torch.tensor(
            tab.evaluate("(ids) => window.transformerLab.forward(ids).logits", tokens.tolist())
        )
        vocab = tab.evaluate("() => window.transformerLab.vocab")
    finally:
        tab.close()
    assert errors == [] and vocab == checkpoint.config.tokens
    assert float((got - expected).abs().max()) < TOLERANCE * float(expected.abs().max())


# --------------------------------------------------------------------------------- hostile folders
def refused(folder, capsys) -> str:
    """The one line `sample ckpt_path=hf:<folder>` prints (exit status 2)."""
    with pytest.raises(SystemExit) as exit_status:
        run(load_script("sample").main, [f"ckpt_path=hf:{folder}", "prompt=a"])
    assert exit_status.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def copy_folder(source, target):
    target.mkdir()
    for path in source.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    return target


def test_absurd_sizes_are_refused_before_anything_is_read_or_allocated(gpt2, tmp_path, capsys, monkeypatch):
    folder = copy_folder(gpt2[0], tmp_path / "absurd")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"n_embd": 10**9}))
    built = []  # the layers of every model built on the meta device: one layer only, before a refusal
    skeleton = hf_import._skeleton
    monkeypatch.setattr(hf_import, "_skeleton", lambda c: built.append(c.num_layers) or skeleton(c))
    assert "config.json: n_embd=1000000000 is more than this package's limit of 32768" in refused(
        folder, capsys
    )
    # every size within its limit, the whole far beyond memory: refused from the sizes alone
    (folder / "config.json").write_text(
        json.dumps(config | {"n_embd": 32768, "n_layer": 1024, "n_head": 64, "n_positions": 1 << 20})
    )
    (folder / "tokenizer.json").write_text(  # a tokenizer of that many tokens is not needed to get there
        (gpt2[0] / "tokenizer.json").read_text()
    )
    assert "too large for this machine" in refused(folder, capsys)
    assert built == [1]  # counted on one block, not on 1024 built (seconds on the meta device)
    (folder / "config.json").write_text(json.dumps(config | {"model_type": "llama"}))
    assert "names the architecture GPT2LMHeadModel but model_type 'llama'" in refused(folder, capsys)
    (folder / "config.json").write_text(json.dumps(config | {"architectures": ["BertModel"]}))
    assert "is of a BertModel model; hf: opens causal language models of the families" in refused(
        folder, capsys
    )
    (folder / "config.json").write_text("[1, 2")
    assert "config.json is not valid JSON" in refused(folder, capsys)


def test_weights_that_do_not_match_the_config_are_refused(gpt2, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    folder = copy_folder(gpt2[0], tmp_path / "shapes")
    weights = load_file(folder / "model.safetensors")
    save_file(weights | {"transformer.h.1.mlp.c_fc.weight": torch.zeros(32, 7)}, folder / "model.safetensors")
    assert (
        "weight transformer.h.1.mlp.c_fc.weight has shape (32, 7) in the file but config.json makes (32, 128)"
        in (refused(folder, capsys))
    )
    save_file({k: v for k, v in weights.items() if "ln_f" not in k}, folder / "model.safetensors")
    assert "has no weight transformer.ln_f.weight, which its config's GPT-2 has" in refused(folder, capsys)
    save_file(weights | {"transformer.h.9.attn.c_attn.weight": torch.zeros(2)}, folder / "model.safetensors")
    assert "has a weight transformer.h.9.attn.c_attn.weight that its config's GPT-2 does not have" in refused(
        folder, capsys
    )
    header = json.dumps(
        {"transformer.wte.weight": {"dtype": "F32", "shape": [300, 32], "data_offsets": [0, 38400]}}
    )
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 10**12) + header.encode())
    assert "its header claims 1.0 TB" in refused(folder, capsys)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode())
    assert "lies outside the file (truncated?)" in refused(folder, capsys)
    (folder / "model.safetensors").unlink()
    (folder / "tokenizer.json").unlink()
    assert "has no tokenizer (tokenizer.json, or vocab.json and merges.txt)" in refused(folder, capsys)


class Payload:
    """What a malicious pytorch_model.bin holds: unpickling it would create a file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_pickle_in_pytorch_model_bin_is_refused_and_never_run(gpt2, tmp_path, capsys):
    folder = copy_folder(gpt2[0], tmp_path / "pickle")
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "ran"
    torch.save({"transformer.wte.weight": Payload(marker)}, folder / "pytorch_model.bin")
    err = refused(folder, capsys)
    assert "refusing to load" in err and "pytorch_model.bin: it holds" in err, err
    assert "which unpickling would run" in err and "could run code" in err
    assert not marker.exists()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04not a zip")
    assert "not the zip archive torch.save writes" in refused(folder, capsys)


def test_a_location_that_is_no_folder_says_what_hf_opens(tmp_path):
    with pytest.raises(
        ConfigError, match="does not exist; hf: opens a local folder saved with save_pretrained"
    ):
        load(f"hf:{tmp_path / 'nope'}")
    with pytest.raises(ConfigError, match="names no folder"):
        load("hf:")
