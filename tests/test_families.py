"""hf:<folder> for every family beside GPT-2: GPT-NeoX (Pythia), Llama (SmolLM), Qwen2, Mistral (a window
shorter than its length) and GPT-Neo (TinyStories' local layers). Each built by transformers from a small
config with random weights (nothing downloaded), saved with save_pretrained beside its kind of tokenizer
(a byte-level BPE; Mistral's a SentencePiece-style one, as Llama 2's and TinyLlama's), opened here:
logits equal transformers' to 1e-4 and greedy tokens (KV cache) equal generate's; interpret (heads,
circuit), sample and the live page run on it, the page tokenizing typed text as Python does; and hostile
folders (sizes that cannot be a model, rope scaling, mixtures of experts, windows Llama has not, no
tokenizer, another family's weights) are one line each, before any weight is read."""

import json

import pytest
import torch

from tests.conftest import load_script
from tests.test_hf_import import TEXT, copy_folder, refused
from transformer_lab import load
from transformer_lab.data.text import shipped_text
from transformer_lab.interop import hf_import

pytestmark = pytest.mark.usefixtures("offline")

TOLERANCE = 1e-4
SMALL = dict(vocab_size=300, max_position_embeddings=64, eos_token_id=0, bos_token_id=0)
FAMILIES = {  # name: (transformers config class, its arguments)
    "pythia": ("GPTNeoXConfig", dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, rotary_pct=0.25,
        use_parallel_residual=True)),
    "smollm": ("LlamaConfig", dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=48, tie_word_embeddings=True, rms_norm_eps=1e-5, rope_theta=100.0)),
    "qwen2": ("Qwen2Config", dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
        intermediate_size=48)),
    "mistral": ("MistralConfig", dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=48, sliding_window=6)),
    "tinystories": ("GPTNeoConfig", dict(
        hidden_size=32, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
        window_size=5)),
}  # fmt: skip


def bpe():
    """A byte-level BPE of 300 tokens trained on a piece of Tiny Shakespeare (Pythia's, SmolLM's, Qwen2's
    and TinyStories' tokenizers are byte-level BPEs)."""
    from tokenizers import ByteLevelBPETokenizer

    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(
        [shipped_text().read_text()[:100_000]], vocab_size=300, special_tokens=["<|endoftext|>"]
    )
    return tokenizer


def sentencepiece_bpe():
    """A SentencePiece-style BPE as transformers converts Llama 2's, Mistral's and TinyLlama's (spaces
    as "▁", one put before the text, characters merged, a character the vocabulary lacks as its bytes'
    tokens "<0xE6>"): 300 tokens, 41 learned on a piece of Tiny Shakespeare, then the 256 bytes."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers

    tokenizer = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tokenizer.train_from_iterator(
        [shipped_text().read_text()[:100_000]],
        trainers.BpeTrainer(vocab_size=44, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=30),
    )
    spec = json.loads(tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    vocab |= {f"<0x{b:02X}>": len(vocab) + b for b in range(256)}
    return Tokenizer.from_str(json.dumps(spec))


SENTENCEPIECE = {"mistral"}  # the families whose tokenizer here is sentencepiece_bpe()


def family_folder(transformers, folder, name: str, tokenizer, seed: int = 0, **changes: object):
    """A random model of the family (weights, norms and biases moved off their initial values), saved
    with save_pretrained beside the tokenizer; the transformers model."""
    kind, arguments = FAMILIES[name]
    torch.manual_seed(seed)
    config = getattr(transformers, kind)(**(SMALL | arguments | changes))
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    model.save_pretrained(folder)
    inner = getattr(tokenizer, "_tokenizer", tokenizer)
    eos = "<|endoftext|>" if inner.token_to_id("<|endoftext|>") is not None else "</s>"
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=inner, eos_token=eos)
    fast.save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def folders(transformers, tmp_path_factory):
    byte_level, sentencepiece = bpe(), sentencepiece_bpe()
    out = {}
    for name in FAMILIES:
        folder = tmp_path_factory.mktemp(name)
        tokenizer = sentencepiece if name in SENTENCEPIECE else byte_level
        out[name] = (folder, family_folder(transformers, folder, name, tokenizer))
    return out


@pytest.mark.parametrize("name", list(FAMILIES))
def test_each_family_opens_with_its_logits_and_greedy_tokens(folders, name):
    folder, reference = folders[name]
    checkpoint = load(f"hf:{folder}")
    ids = checkpoint.encode(TEXT)[None, :40]
    with torch.no_grad():
        logits = checkpoint.model(ids)
        expected = reference(ids).logits
    assert float((logits - expected).abs().max()) < TOLERANCE
    prompt = ids[:, :6]
    theirs = reference.generate(prompt, max_new_tokens=30, do_sample=False, pad_token_id=0)[0].tolist()
    ours = checkpoint.model.generate(prompt, 30, temperature=0)[0].tolist()
    assert ours == theirs[: len(ours)] and len(ours) > 6
    config = checkpoint.config
    expected_blocks = {
        "pythia": dict(
            positional_encoding="rotary", rotary_fraction=0.25, parallel_residual=True, norm="layer"),
        "smollm": dict(
            norm="rms", activation="swiglu", num_kv_heads=2, tie_embeddings=True, rotary_base=100.0),
        "qwen2": dict(norm="rms", qkv_bias=True, out_bias=False, num_kv_heads=1),
        "mistral": dict(attention_window=6, window_layers=None, num_kv_heads=2),
        "tinystories": dict(attention_window=5, window_layers=[1], scale_attention=False),
    }[name]  # fmt: skip
    assert {key: getattr(config, key) for key in expected_blocks} == expected_blocks


@pytest.mark.parametrize("name", ["pythia", "smollm", "mistral", "tinystories"])
def test_the_tools_take_it_apart(folders, name, tmp_path, capsys):
    folder, _ = folders[name]
    interpret = load_script("interpret")
    interpret.main([f"ckpt_path=hf:{folder}", "analysis=heads", "num_examples=8", f"out_dir={tmp_path}"])
    heads = json.loads((tmp_path / "heads.json").read_text())
    assert len(heads["ablated"]) == 2 and len(heads["ablated"][0]) == 4
    interpret.main(
        [f"ckpt_path=hf:{folder}", "analysis=circuit", "num_examples=4", "verify=3", f"out_dir={tmp_path}"]
    )
    circuit = json.loads((tmp_path / "circuit.json").read_text())
    assert circuit["num_examples"] == 4 and circuit["verified"] == 3 and circuit["edges"]
    printed = capsys.readouterr().out
    if name == "smollm":  # grouped-query attention: keys and values read once per key-value head
        assert "KV" in printed or any("kv_head" in edge["dst"] for edge in circuit["edges"])
    load_script("sample").main(
        [f"ckpt_path=hf:{folder}", "prompt=ROMEO:", "max_new_tokens=5", "temperature=0"]
    )
    assert capsys.readouterr().out.startswith("ROMEO:")


@pytest.mark.browser
@pytest.mark.parametrize("name", list(FAMILIES))
def test_its_live_page_runs_it_as_pytorch_does(folders, name, tmp_path, capsys, browser):
    folder, _ = folders[name]
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
        generated = tab.evaluate(
            "(ids) => window.transformerLab.generate(ids, {maxNewTokens: 12})", tokens[:5].tolist()
        )
        typed = TEXT[:100] + " naïve 東京 🙂  two spaces"  # bytes the vocabulary lacks, spaces in a row
        encoded = tab.evaluate("(text) => window.transformerLab.encode(text)", typed)
    finally:
        tab.close()
    assert errors == []
    assert encoded == checkpoint.tokenizer.encode(typed).tolist()  # the page tokenizes as the model does
    assert float((got - expected).abs().max()) < TOLERANCE * float(expected.abs().max())
    assert generated == checkpoint.model.generate(tokens[None, :5], 12, temperature=0)[0].tolist()


# --------------------------------------------------------------------------------- hostile folders
HOSTILE = [  # (family, config.json changes, the one line)
    ("smollm", {"num_key_value_heads": 3},
     "config.json: not a model this project can build: num_key_value_heads=3 must divide num_attention_heads=4"),  # noqa: E501
    ("pythia",
     {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.5}},
     "partial_rotary_factor=1.5 must be in (0, 1]"),
    ("pythia", {"rope_parameters": None, "rotary_pct": 1.5}, "rotary_pct=1.5 must be in (0, 1]"),
    ("pythia", {"hidden_size": 40, "rope_parameters": {"partial_rotary_factor": 0.3}},
     "partial_rotary_factor=0.3 of a head of 10 dimensions rotates 3"),
    ("smollm", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}},
     "config.json: rope scaling of type 'yarn': this project's rotary positions have only the default"),
    ("smollm", {"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope scaling of type 'linear'"),
    ("smollm", {"num_local_experts": 8}, "num_local_experts=8: a mixture of experts, which this project's"),
    ("smollm", {"sliding_window": 16}, "sliding_window=16: a sliding attention window (Llama has none)"),
    ("smollm", {"head_dim": 16}, "head_dim=16 is not hidden_size / num_attention_heads = 8"),
    ("smollm", {"hidden_act": "relu"}, "hidden_act='relu' is not one this project's models have"),
    ("smollm", {"hidden_size": 36, "head_dim": None},
     "partial_rotary_factor=1.0 of a head of 9 dimensions rotates 9"),
    ("tinystories", {"attention_layers": ["global", "sparse"]},
     "attention kind 'sparse' is not global or local"),
    ("pythia", {"hidden_size": 2**20}, "hidden_size=1048576 is more than this package's limit of 32768"),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 4, "layer_types": ["full_attention"]},
     "layer_types must list each of the 2 layers' attention"),
    # a value of another type than the family's config holds: named where it is read, for every family
    ("pythia", {"use_parallel_residual": "true"}, 'use_parallel_residual="true" must be true or false'),
    ("pythia", {"hidden_size": 64.0}, "hidden_size=64.0 must be an integer"),
    ("smollm", {"hidden_act": ["silu"]}, 'hidden_act=["silu"] must be a string'),
    ("smollm", {"rms_norm_eps": "1e-5"}, 'rms_norm_eps="1e-5" must be a number'),
    ("qwen2", {"num_key_value_heads": [2]}, "num_key_value_heads=[2] must be an integer"),
    ("tinystories", {"window_size": "4"}, 'window_size="4" must be an integer'),
    ("tinystories", {"attention_layers": "global"}, "attention_layers names 'global' layers' attention"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "changes", "says"), HOSTILE)
def test_a_hostile_config_is_one_line_before_any_weight_is_read(
    folders, name, changes, says, tmp_path, capsys, monkeypatch
):
    folder = copy_folder(folders[name][0], tmp_path / "hostile")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | changes))
    monkeypatch.setattr(hf_import, "read_weights", lambda *args, **kwargs: pytest.fail("weights read"))
    assert says in refused(folder, capsys)


def test_another_familys_weights_or_no_tokenizer_are_one_line(folders, tmp_path, capsys, monkeypatch):
    """A Llama config.json over GPT-NeoX's weights: refused from the safetensors header's names, no
    tensor read; a folder without its tokenizer: refused before the weights."""
    import safetensors

    folder = copy_folder(folders["pythia"][0], tmp_path / "mixed")
    (folder / "config.json").write_text((folders["smollm"][0] / "config.json").read_text())
    monkeypatch.setattr(safetensors, "safe_open", lambda *args, **kwargs: pytest.fail("a tensor was read"))
    assert "has no weight model.embed_tokens.weight, which its config's Llama has" in refused(folder, capsys)
    monkeypatch.undo()
    folder = copy_folder(folders["smollm"][0], tmp_path / "untokenized")
    (folder / "tokenizer.json").unlink()
    monkeypatch.setattr(hf_import, "read_weights", lambda *args, **kwargs: pytest.fail("weights read"))
    assert "has no tokenizer (tokenizer.json, or vocab.json and merges.txt)" in refused(folder, capsys)


def test_pythias_own_file_names_and_old_buffers_are_read(folders, tmp_path):
    """Pythia's files name the output layer embed_out (as transformers still writes it), others lm_head;
    older files keep the attention's mask and rotary buffers: each read as the same model."""
    from safetensors.torch import load_file, save_file

    folder = copy_folder(folders["pythia"][0], tmp_path / "old")
    state = load_file(folder / "model.safetensors")
    state["lm_head.weight"] = state.pop("embed_out.weight")
    state["gpt_neox.layers.0.attention.bias"] = torch.ones(1, 1, 4, 4)
    state["gpt_neox.layers.0.attention.rotary_emb.inv_freq"] = torch.ones(2)
    save_file(state, folder / "model.safetensors")
    ids = load(f"hf:{folder}").encode(TEXT)[None, :20]
    with torch.no_grad():
        assert torch.equal(load(f"hf:{folder}").model(ids), load(f"hf:{folders['pythia'][0]}").model(ids))


# --------------------------------------------------------------------------------- checkpoints over training
@pytest.fixture(scope="module")
def series(transformers, tmp_path_factory):
    """A folder of checkpoints over training as Pythia publishes them: step0/, step1000/, step3000/, each
    saved with save_pretrained (here three random models of one config)."""
    root = tmp_path_factory.mktemp("pythia-steps")
    tokenizer = bpe()
    for seed, step in enumerate((0, 1000, 3000)):
        family_folder(transformers, root / f"step{step}", "pythia", tokenizer, seed=seed)
    return root


def test_a_folder_of_checkpoints_over_training_is_the_runs_snapshots(series, tmp_path, capsys):
    from transformer_lab import snapshots

    assert [(s.step, s.path.name) for s in snapshots.find(f"hf:{series}")] == [
        (0, "step0"), (1000, "step1000"), (3000, "step3000")
    ]  # fmt: skip
    interpret = load_script("interpret")
    interpret.main([f"ckpt_path=hf:{series}", "analysis=dynamics", "num_examples=8", f"out_dir={tmp_path}"])
    dynamics = json.loads((tmp_path / "dynamics.json").read_text())
    assert dynamics["steps"] == [0, 1000, 3000] and len(dynamics["loss"]) == 3
    # each snapshot is its step's model: the loss at step 1000 is step1000's own
    checkpoint = load(f"hf:{series}/step1000")
    inputs, labels = checkpoint.examples(8, exact=False)
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(checkpoint.model(*inputs).flatten(0, 1), labels.flatten())
    assert dynamics["loss"][1] == pytest.approx(float(loss), rel=1e-4)
    capsys.readouterr()
    interpret.main(
        [f"ckpt_path=hf:{series}", "analysis=heads", "step=1400", "num_examples=8", f"out_dir={tmp_path}"]
    )
    assert "step=1400: the snapshot at step 1000 (step1000)" in capsys.readouterr().out
    assert "holds checkpoints over training (step0 ... step3000), not one model: pick one with step=N" in (
        refused(series, capsys)
    )


def test_a_series_of_two_models_or_a_single_model_is_refused(series, folders, tmp_path, capsys):
    from transformer_lab import snapshots
    from transformer_lab.errors import ConfigError

    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in ("step0", "step1000"):
        copy_folder(series / name, mixed / name)
    copy_folder(folders["smollm"][0], mixed / "step2000")
    interpret = load_script("interpret")
    with pytest.raises(ConfigError, match="is a snapshot of another model than the run's last"):
        interpret.main(
            [f"ckpt_path=hf:{mixed}", "analysis=dynamics", "num_examples=4", f"out_dir={tmp_path}"]
        )
    with pytest.raises(
        ConfigError, match="is one set of weights, with no snapshots; a folder of checkpoints"
    ):
        snapshots.find(f"hf:{folders['pythia'][0]}")


# --------------------------------------------------------------------------------- trained further
FEW_TEXT = [  # task=text on Tiny Shakespeare (shipped) with the model's tokenizer, two steps
    "task=text", "data.block_size=32", "data.batch_size=4", "data.batches_per_epoch=2", "data.val_batches=1",
    "trainer.max_steps=2", "callbacks.snapshots.count=0", "callbacks.text_samples.max_new_tokens=4",
    "callbacks.progress_bar.refresh_rate=0", "trainer.accelerator=cpu",
]  # fmt: skip


@pytest.mark.parametrize("name", ["pythia", "smollm", "qwen2", "tinystories"])
def test_init_from_trains_it_further_and_to_huggingface_writes_it_back(folders, name, transformers, tmp_path):
    """train.py init_from=hf:<folder> task=text: its architecture, weights and tokenizer; two steps move the
    weights; export to=huggingface writes the fine-tuned model as its family, which transformers opens
    with this model's logits."""
    from tests.conftest import compose_train_config
    from transformer_lab.train import train

    folder, reference = folders[name]
    cfg = compose_train_config(tmp_path / "run", f"init_from=hf:{folder}", *FEW_TEXT, base=[])
    cfg.data.cache_dir = str(tmp_path / "cache")
    metrics = train(cfg)
    assert metrics["global_step"] == 2
    tuned = load(str(tmp_path / "run" / "checkpoints" / "last.ckpt"))
    original = load(f"hf:{folder}")
    assert tuned.config.architecture() | {"eos_id": None} == original.config.architecture() | {"eos_id": None}
    assert torch.equal(tuned.encode(TEXT), original.encode(TEXT))  # its own tokenizer
    ids = original.encode(TEXT)[None, :24]
    with torch.no_grad():
        moved = float((tuned.model(ids) - reference(ids).logits).abs().max())
    assert moved > 1e-4  # trained: no longer the folder's model
    load_script("export").main([f"ckpt_path={tmp_path / 'run'}", "to=huggingface", f"out={tmp_path / 'hf'}"])
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(again).__name__ == type(reference).__name__
    with torch.no_grad():
        assert float((again(ids).logits - tuned.model(ids)).abs().max()) < 1e-5


def test_init_from_refuses_what_would_change_its_architecture(folders, tmp_path):
    from tests.conftest import compose_train_config
    from transformer_lab.errors import ConfigError
    from transformer_lab.train import train

    folder = folders["smollm"][0]
    cases = [
        (
            ["model.num_layers=3"],
            f"model.num_layers=3 would change the architecture of init_from=hf:{folder}",
        ),
        (["model.norm=layer"], "model.norm=layer would change the architecture"),
        (["data.tokenizer=char"], "data.tokenizer=char would change the architecture"),
    ]
    for overrides, says in cases:
        cfg = compose_train_config(tmp_path / "run", f"init_from=hf:{folder}", *FEW_TEXT, *overrides, base=[])
        with pytest.raises(ConfigError, match=re_escaped(says)):
            train(cfg)
    cfg = compose_train_config(
        tmp_path / "reverse", f"init_from=hf:{folder}", "task=reverse", "model=decoder"
    )
    with pytest.raises(
        ConfigError, match=re_escaped("reads 300 tokens (its own tokenizer's), and this task's")
    ):
        train(cfg)
    cfg = compose_train_config(tmp_path / "resumed", f"ckpt_path=hf:{folder}", *FEW_TEXT, base=[])
    with pytest.raises(ConfigError, match=re_escaped("a model saved by transformers is none; to train it")):
        train(cfg)


def re_escaped(text: str) -> str:
    import re

    return re.escape(text)


def test_init_from_a_ready_made_model_or_a_run(tmp_path):
    """init_from=pretrained:<name> and init_from=<run dir>: the first validation is that model's own."""
    from tests.conftest import COMMON, compose_train_config
    from transformer_lab.train import train

    few = ["trainer.max_steps=1", "data.batches_per_epoch=1", "data.val_batches=2", "test=false", *COMMON]
    same = ["task=shakespeare", "data.block_size=64", "model.lr=1e-9", "model.warmup=0", *few]
    cfg = compose_train_config(tmp_path / "a", "init_from=pretrained:shakespeare", *same, base=[])
    first = train(cfg)
    assert first["val/loss"] < 2.0  # the shipped model's loss (an untrained one's is about 4.2)
    cfg = compose_train_config(tmp_path / "b", f"init_from={tmp_path / 'a'}", *same, base=[])
    assert train(cfg)["val/loss"] == pytest.approx(first["val/loss"], abs=1e-3)


@pytest.fixture
def stablelm():
    """The family of tests/extensions/stablelm.py, registered for the test and removed after it."""
    import importlib

    from transformer_lab.interop import families

    module = importlib.reload(importlib.import_module("tests.extensions.stablelm"))
    yield module
    families.FAMILIES.pop("stablelm", None)


def test_a_family_registered_outside_the_package_opens_and_exports(stablelm, transformers, tmp_path):
    """One module and its registration: hf: opens a StableLM folder with transformers' logits (to 1e-4),
    its structure checked by ModelConfig in config.json's words, and to=huggingface writes it back as a
    StableLM that transformers opens with the same logits."""
    FAMILIES["stablelm"] = ("StableLmConfig", dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=48, use_qkv_bias=True))  # fmt: skip
    try:
        reference = family_folder(transformers, tmp_path / "in", "stablelm", bpe())
    finally:
        FAMILIES.pop("stablelm")
    checkpoint = load(f"hf:{tmp_path / 'in'}")
    assert checkpoint.model.config.rotary_fraction == 0.25 and checkpoint.model.config.norm == "layer"
    ids = checkpoint.encode(TEXT)[None, :40]
    with torch.no_grad():
        assert float((checkpoint.model(ids) - reference(ids).logits).abs().max()) < TOLERANCE
    load_script("export").main(
        [f"ckpt_path=hf:{tmp_path / 'in'}", "to=huggingface", f"out={tmp_path / 'out'}"]
    )
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert type(back).__name__ == "StableLmForCausalLM"
    with torch.no_grad():
        assert float((back(ids).logits - reference(ids).logits).abs().max()) < TOLERANCE
    config = json.loads((tmp_path / "in" / "config.json").read_text())
    (tmp_path / "in" / "config.json").write_text(json.dumps(config | {"num_key_value_heads": 3}))
    with pytest.raises(
        hf_import.ConfigError, match=r"num_key_value_heads=3 must divide num_attention_heads=4"
    ):
        load(f"hf:{tmp_path / 'in'}")
