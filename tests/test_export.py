"""python -m transformer_lab.export: each shipped model in each format that can express it, opened by the
other library and compared with PyTorch (TransformerLens: logits and every activation both name;
transformers: logits, the tokenizer and greedy generation; ONNX Runtime: logits on other batch sizes and
lengths than traced); the variants a pre-norm decoder can have; and one-line refusals (exit status 2).
Nothing is downloaded: HF_HUB_OFFLINE=1, every model comes from this package or from a config."""

import json
import re

import pytest
import torch

from tests.conftest import gpt_decoder, load_script
from transformer_lab import load
from transformer_lab.cli import run
from transformer_lab.errors import ConfigError
from transformer_lab.interop import hf_export, onnx, transformer_lens
from transformer_lab.nn import evaluating

pytestmark = pytest.mark.usefixtures("offline")  # no network; the interop cache in tmp

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def lens():
    return pytest.importorskip("transformer_lens")


@pytest.fixture(scope="module")
def shakespeare():
    return load("pretrained:shakespeare")


def export_main(*args: str) -> None:
    load_script("export").main(list(args))


def refused(capsys, *args: str) -> str:
    """The one line a refused export prints (exit status 2)."""
    with pytest.raises(SystemExit) as exit_status:
        run(load_script("export").main, list(args))
    assert exit_status.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def random_layer_norms(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every LayerNorm's weight and bias random (a fresh model's are 1 and 0: a missed one would pass)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1 + 0.3 * torch.randn(module.weight.shape, generator=generator))
                if module.bias is not None:
                    module.bias.copy_(0.3 * torch.randn(module.bias.shape, generator=generator))
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=generator))
    return model


# --------------------------------------------------------------------------------- TransformerLens
def open_in_transformer_lens(lines: list[str], tokens: torch.Tensor):
    """Run the snippet the export printed, as a user would paste it: its `model`."""
    namespace = {"tokens": tokens}
    exec(lines[-1], namespace)
    return namespace["model"]


def compare_with_transformer_lens(model, tl_model, tokens) -> dict[str, float]:
    """Logits and every activation both models name: the largest difference of each."""
    with evaluating(model), torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
        tl_logits, tl_cache = tl_model.run_with_cache(tokens)
    differences = {"logits": float((logits - tl_logits).abs().max())}
    for name in model.hook_names():
        if name not in tl_cache:  # TransformerLens's attention-only blocks have no stream between
            assert not model.config.mlp and name.endswith("hook_resid_mid"), name
            continue
        theirs = tl_cache[name].detach()
        if name == "ln_final.hook_normalized" and not torch.allclose(theirs, cache[name], atol=TOLERANCE):
            # TransformerLens reads it before the LayerNorm's weight and bias (this project after)
            norm = model.ln_final.norm
            theirs = theirs * norm.weight.detach() + (0 if norm.bias is None else norm.bias.detach())
        differences[name] = float((cache[name] - theirs).abs().max())
    return differences


def test_shakespeare_in_transformer_lens_has_its_logits_and_every_activation(
    tmp_path, lens, shakespeare, capsys
):
    export_main("ckpt_path=pretrained:shakespeare", "to=transformer_lens", f"out={tmp_path / 'tl'}")
    lines = capsys.readouterr().out.strip().split("\n", 1)
    assert "HookedTransformer" in lines[1] and "convert_tl_checkpoint" in lines[1]
    assert json.loads((tmp_path / "tl" / "vocab.json").read_text()) == shakespeare.config.tokens
    tokens = shakespeare.encode("ROMEO:\nWhat light through yonder window breaks?")[None, :40]
    tokens = torch.cat([tokens, tokens.flip(1)])
    tl_model = open_in_transformer_lens(lines, tokens)
    differences = compare_with_transformer_lens(shakespeare.model, tl_model, tokens)
    assert len(differences) == len(shakespeare.model.hook_names()) + 1 > 40
    assert max(differences.values()) < TOLERANCE, differences


@pytest.mark.parametrize(
    "variant",
    [
        dict(positional_encoding="sinusoidal", activation="relu", bias=False, tie_embeddings=False),
        dict(positional_encoding="none", activation="gelu_new", mlp=False, num_heads=4),
    ],
)
def test_every_pre_norm_decoder_goes_to_transformer_lens(tmp_path, lens, variant):
    torch.manual_seed(1)
    model = random_layer_norms(gpt_decoder(11, block_size=12, **variant))
    tokens = torch.randint(0, 11, (3, 12))
    lines = transformer_lens.export(model, tmp_path)
    differences = compare_with_transformer_lens(model, open_in_transformer_lens(lines, tokens), tokens)
    assert len(differences) >= 20 and max(differences.values()) < TOLERANCE, differences


# --------------------------------------------------------------------------------- Hugging Face
def test_shakespeare_in_transformers_has_its_logits_tokens_and_greedy_text(
    tmp_path, transformers, shakespeare, capsys
):
    out = tmp_path / "hf"
    export_main("ckpt_path=pretrained:shakespeare", "to=huggingface", f"out={out}", "prompt=ROMEO:")
    printed = capsys.readouterr().out
    assert 'from_pretrained("' in printed and 'tokenizer("ROMEO:"' in printed
    gpt2 = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert type(gpt2).__name__ == "GPT2LMHeadModel"
    text = "ROMEO:\nBut soft, what light through yonder window breaks?"
    ids = tokenizer(text, return_tensors="pt").input_ids
    assert ids[0].tolist() == shakespeare.encode(text).tolist()
    assert tokenizer.decode(ids[0]) == text
    model = shakespeare.model
    with torch.no_grad():
        assert float((gpt2(ids).logits - model(ids)).abs().max()) < TOLERANCE
        prompt = ids[:, :8]
        ours = model.generate(prompt, 40, temperature=0)
        theirs = gpt2.generate(prompt, max_new_tokens=40, do_sample=False)
    assert theirs.tolist() == ours.tolist()


@pytest.mark.parametrize(
    "variant",
    [
        dict(
            positional_encoding="sinusoidal", activation="relu", tie_embeddings=False, scale_attention=False
        ),
        dict(bias=False, mlp=False, activation="gelu_new"),
    ],
)
def test_every_pre_norm_decoder_goes_to_transformers(tmp_path, transformers, variant):
    torch.manual_seed(2)
    model = random_layer_norms(gpt_decoder(11, block_size=12, **variant))
    if model.unembed.bias is not None:
        torch.nn.init.zeros_(model.unembed.bias)  # V > D: a bias GPT-2 could not carry (next test)
    hf_export.export(model, tmp_path, " ", "1 2")
    gpt2 = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    tokens = torch.randint(0, 11, (3, 12))
    with torch.no_grad():
        assert float((gpt2(tokens).logits - model(tokens)).abs().max()) < TOLERANCE
    assert transformers.AutoTokenizer.from_pretrained(tmp_path)("3 1 10").input_ids == [3, 1, 10]


def test_an_output_bias_gpt2_cannot_carry_is_refused(tmp_path):
    model = gpt_decoder(64, model_dim=16, tie_embeddings=False)
    torch.nn.init.normal_(model.unembed.bias)
    with pytest.raises(ConfigError) as error:
        hf_export.export(model, tmp_path, "", "a")
    message = str(error.value)
    assert (
        "has no place in GPT-2, whose output layer has none, and it cannot be folded into ln_f's bias here"
        in message
    )
    assert "64 tokens, more than the model's width 16" in message and "\n" not in message
    assert not (tmp_path / "model.safetensors").exists()


# --------------------------------------------------------------------------------- ONNX
@pytest.mark.parametrize("name", ["shakespeare", "reverse_2l4h", "sort"])
def test_every_shipped_model_runs_in_onnx_runtime(tmp_path, name, capsys):
    pytest.importorskip("onnxruntime")
    out = tmp_path / name
    export_main(f"ckpt_path=pretrained:{name}", "to=onnx", f"out={out}")
    assert "Checked with ONNX Runtime" in capsys.readouterr().out
    checkpoint = load(f"pretrained:{name}")
    inputs, _ = checkpoint.examples(5)  # the test examples (padding included), another batch size
    if name == "shakespeare":
        inputs = (inputs[0][:, :37],)  # and another length
    with evaluating(checkpoint.model), torch.no_grad():
        expected = checkpoint.model(*inputs)
    got = onnx.run(out / "model.onnx", checkpoint.model, inputs)
    assert got.shape == expected.shape and float((got - expected).abs().max()) < TOLERANCE


# --------------------------------------------------------------------------------- refusals
def test_what_a_format_cannot_express_is_refused_in_one_line(tmp_path, capsys):
    assert "to=huggingface takes a decoder-only language model, and this is an encoder model" in refused(
        capsys, "ckpt_path=pretrained:reverse_2l4h", "to=huggingface", f"out={tmp_path}"
    )
    assert "this is an encoder-decoder model (two stacks); to=onnx exports any model" in refused(
        capsys, "ckpt_path=pretrained:sort", "to=transformer_lens", f"out={tmp_path}"
    )
    assert (
        "to=safetensors is not a format; use to=transformer_lens | huggingface | onnx | sae_lens"
        in refused(capsys, "ckpt_path=pretrained:sort", "to=safetensors", f"out={tmp_path}")
    )
    assert not any(tmp_path.iterdir())
    post_norm, output_mlp = gpt_decoder(5, norm_first=False).config, gpt_decoder(5, output_mlp=True).config
    with pytest.raises(ConfigError, match="to=transformer_lens takes pre-norm blocks"):
        transformer_lens.check(post_norm)
    with pytest.raises(ConfigError, match="to=huggingface takes pre-norm blocks"):
        hf_export.check(post_norm)
    for check in (transformer_lens.check, hf_export.check):
        with pytest.raises(
            ConfigError, match="a single Linear output layer, and this model has the tutorial's"
        ):
            check(output_mlp)
    scale = re.escape("to=transformer_lens needs attention scaled by 1/sqrt(d_head)")
    with pytest.raises(ConfigError, match=scale + ".*scale_attention=false; to=huggingface or to=onnx"):
        transformer_lens.check(gpt_decoder(5, scale_attention=False).config)


def test_a_missing_library_is_named_with_its_install_command(tmp_path, monkeypatch, capsys):
    import builtins

    real_import = builtins.__import__

    def without_onnx(name, *args, **kwargs):
        if name == "onnx" or name.startswith("onnx."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_onnx)
    monkeypatch.delitem(__import__("sys").modules, "onnx", raising=False)
    err = refused(capsys, "ckpt_path=pretrained:sort", "to=onnx", f"out={tmp_path}")
    assert "to=onnx needs the package onnx, which is not installed" in err
    assert 'pip install "transformer-lab[interop]" (or pip install onnx)' in err


# --------------------------------------------------------------------------------- the folder out=
OTHER_FORMAT = {  # a file of another format's export, for each format
    "transformer_lens": "generation_config.json",
    "huggingface": "model.onnx",
    "onnx": "model.safetensors",
}


@pytest.mark.parametrize("to", ["transformer_lens", "huggingface", "onnx"])
def test_an_export_never_writes_through_a_link_nor_into_another_export(tmp_path, capsys, to):
    outside = tmp_path / "theirs.json"
    outside.write_text("not yours")
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").symlink_to(outside)  # a link in out= that a write would follow
    args = ("ckpt_path=pretrained:shakespeare", f"to={to}", f"out={out}")
    assert f"out={out} holds config.json, which this did not write; choose a new or empty folder" in refused(
        capsys, *args
    )
    assert "choose a new or empty folder, or add overwrite=true to replace" in refused(capsys, *args)
    (out / "config.json").unlink()
    (out / OTHER_FORMAT[to]).write_text("another export")
    assert f"holds {OTHER_FORMAT[to]}, which this did not write" in refused(capsys, *args)
    (out / "config.json").symlink_to(outside)
    export_main(*args, "overwrite=true")  # replaced whole: the link removed, never followed
    assert outside.read_text() == "not yours"
    written = sorted(p.name for p in out.iterdir())
    assert OTHER_FORMAT[to] not in written and not any((out / n).is_symlink() for n in written)
    export_main(*args)  # an earlier export of the same format is replaced whole, without overwrite=
    assert sorted(p.name for p in out.iterdir()) == written
    assert {p.name for p in tmp_path.iterdir()} - {"cache"} == {"out", "theirs.json"}  # no temporary folder
    link = tmp_path / "link"
    link.symlink_to(out)
    assert f"out={link} is a symlink; name a folder of its own" in refused(capsys, *args[:2], f"out={link}")


@pytest.mark.parametrize("to", ["transformer_lens", "huggingface", "onnx"])
def test_an_interrupted_export_leaves_the_earlier_one_and_nothing_a_library_would_load(
    tmp_path, monkeypatch, capsys, to
):
    from transformer_lab import export as export_tool

    out = tmp_path / "out"
    export_main("ckpt_path=pretrained:shakespeare", f"to={to}", f"out={out}")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    stale = tmp_path / ".out.999999999.tmp"  # a folder a killed export left (no such process)
    stale.mkdir()

    def interrupted(checkpoint, to, folder, prompt=None):
        (folder / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(export_tool, "export", interrupted)
    with pytest.raises(SystemExit) as stopped:
        run(export_tool.main, ["ckpt_path=pretrained:shakespeare", f"to={to}", f"out={out}"])
    assert stopped.value.code == 130 and capsys.readouterr().err == "error: stopped by Ctrl-C\n"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert {p.name for p in tmp_path.iterdir()} - {"cache"} == {"out"}  # the stale folder gone too


@pytest.mark.parametrize("experiment", ["text_small", "shakespeare_cpu"])
def test_every_recipe_of_the_docs_trains_a_model_that_exports(tmp_path, experiment):
    """The docs' recipes (and the shipped models, above) make models GPT-2 can hold: no output bias that
    cannot be folded (text_small: 1024 tokens, 128 wide, so no biases at all)."""
    from omegaconf import OmegaConf

    from tests.conftest import compose_train_config
    from transformer_lab.training.compose import instantiate
    from transformer_lab.training.predictor import build_predictor

    cache = f"data.cache_dir={tmp_path}/cache"
    cfg = compose_train_config(tmp_path, f"experiment={experiment}", cache, base=[])
    model = build_predictor(OmegaConf.to_container(cfg.model), instantiate(cfg.data)).net
    hf_export.check(model.config)
    if model.unembed.bias is not None:
        with torch.no_grad():
            model.unembed.bias.normal_()  # as training leaves it: a bias GPT-2 must hold
    written = set(hf_export.state_dict(model))
    assert "transformer.ln_f.bias" in written and ("lm_head.weight" in written) != model.config.tie_embeddings


def test_patching_prompts_of_a_language_model_equals_transformer_lens(tmp_path, lens, shakespeare, capsys):
    """analysis=patching on two prompts of a language model: the residual stream at every layer and
    position, every MLP output, every head's output, as TransformerLens's get_act_patch_resid_pre,
    get_act_patch_mlp_out and get_act_patch_attn_head_out_all_pos compute them on the exported model
    (their metric values here as shares of clean - corrupted), to 1e-4."""
    from transformer_lens import patching

    from transformer_lab.analysis import interventions

    export_main("ckpt_path=pretrained:shakespeare", "to=transformer_lens", f"out={tmp_path / 'tl'}")
    lines = capsys.readouterr().out.strip().split("\n", 1)
    prompts = {"clean": ["JULIET:", "ROMEO: "], "corrupted": ["ROMEO: ", "JULIET:"], "answer": [None, None]}
    clean, corrupted = shakespeare.prompt_pairs(**prompts, wrong=[None, None])
    ours = interventions.activation_patching(shakespeare.model, clean, corrupted)
    tokens, bad_tokens = clean[0][0], corrupted[0][0]
    tl_model = open_in_transformer_lens(lines, tokens).eval()
    good, bad = clean[1][:, -1], corrupted[1][:, -1]
    rows = torch.arange(len(good))

    def metric(logits):
        return (logits[rows, -1, good] - logits[rows, -1, bad]).mean()

    with torch.no_grad():
        clean_logits, clean_cache = tl_model.run_with_cache(tokens)
        assert float(metric(clean_logits)) == pytest.approx(ours.clean, abs=1e-4)
        assert float(metric(tl_model(bad_tokens))) == pytest.approx(ours.corrupted, abs=1e-4)
        scale = ours.clean - ours.corrupted
        for theirs_fn, found in (
            (patching.get_act_patch_resid_pre, {n: v for n, v in ours.resid.items() if "resid_pre" in n}),
            (patching.get_act_patch_mlp_out, ours.mlp),
        ):
            theirs = (theirs_fn(tl_model, bad_tokens, clean_cache, metric) - ours.corrupted) / scale
            assert theirs.shape == (len(found), tokens.size(1))
            torch.testing.assert_close(torch.tensor(list(found.values())), theirs.float(), atol=1e-4, rtol=0)
        theirs = patching.get_act_patch_attn_head_out_all_pos(tl_model, bad_tokens, clean_cache, metric)
        torch.testing.assert_close(
            torch.tensor(ours.heads), ((theirs - ours.corrupted) / scale).float(), atol=1e-4, rtol=0
        )


@pytest.mark.parametrize("to", ["transformer_lens", "huggingface", "onnx"])
def test_no_format_writes_over_the_run_it_exports(to, tmp_path, capsys):
    """out= the run being exported, or a folder holding it, is refused even with overwrite=true: an
    export never replaces what it is made from (its checkpoint stays)."""
    from tests.conftest import TINY_REVERSE, compose_train_config
    from transformer_lab.train import train

    run = tmp_path / "runs" / "decoder"
    train(compose_train_config(run, "model=decoder", "trainer.max_steps=2", base=TINY_REVERSE))
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    for out in (run, tmp_path / "runs"):
        err = refused(capsys, f"ckpt_path={run}", f"to={to}", f"out={out}", "overwrite=true")
        assert "which this is made from; write it to another folder" in err, err
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before
