"""The blocks of the models people study (nn/): RMSNorm, rotary positions, gated MLPs, grouped-query
attention, parallel residual, local attention windows, biases per part. Each against the `transformers`
module of its family with the weights copied (the family modules of interop/families, export direction),
logits to 1e-5 and greedy tokens with the KV cache; the cache against no cache (padding, windows,
rotary positions of cached keys) on every architecture; the per-head hook points; circuits (GQA's key
and value inputs per key-value head, a parallel block's MLP reading the block's input); direct logit
attribution through an RMSNorm; the settings' one-line refusals; TransformerLens and ONNX. Nothing is
downloaded: every transformers model is built from a config with random weights."""

import pytest
import torch

from tests.conftest import COMMON, compose_train_config
from tests.test_circuits import _pairs
from tests.text_corpus import write_corpus
from transformer_lab.analysis import circuits, lens
from transformer_lab.interop import families, hf_export, onnx, transformer_lens
from transformer_lab.nn import ModelConfig, build_model, evaluating
from transformer_lab.train import train

V, T = 40, 20
transformers = pytest.importorskip("transformers")


def random_weights(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Weights far from the initialisation (norm gains and biases included), so that a block read in the
    wrong place shows."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_((0.3 if p.ndim > 1 else 0.2) * torch.randn(p.shape, generator=generator) + (p.ndim == 1))
    return model.eval()


def decoder(**settings: object) -> torch.nn.Module:
    base = dict(
        arch="decoder", vocab_size=V, model_dim=32, num_heads=4, num_layers=2, max_len=64, norm_first=True,
        output_mlp=False, dim_feedforward=48,
    )  # fmt: skip
    return random_weights(build_model(base | settings))


# the families' blocks: (family, this project's settings)
FAMILY_MODELS = {
    "llama_gqa": ("llama", dict(
        norm="rms", norm_eps=1e-6, positional_encoding="rotary", rotary_base=500.0, activation="swiglu",
        num_kv_heads=2, bias=False, tie_embeddings=False)),
    "llama_mqa_biases_tied_geglu": ("llama", dict(
        norm="rms", positional_encoding="rotary", activation="geglu", num_kv_heads=1, bias=False,
        qkv_bias=True, out_bias=True, mlp_bias=True, tie_embeddings=True)),
    "qwen2_window_on_one_layer": ("llama", dict(
        norm="rms", positional_encoding="rotary", activation="swiglu", num_kv_heads=2, bias=False,
        qkv_bias=True, attention_window=5, window_layers=[1])),
    "mistral_window": ("llama", dict(
        norm="rms", positional_encoding="rotary", activation="swiglu", num_kv_heads=2, bias=False,
        attention_window=6)),
    "pythia_parallel_quarter_rotary": ("gpt_neox", dict(
        positional_encoding="rotary", rotary_fraction=0.25, parallel_residual=True, unembed_bias=False,
        tie_embeddings=False, num_heads=2)),
    "neox_sequential_half_rotary_no_attention_bias": ("gpt_neox", dict(
        positional_encoding="rotary", rotary_fraction=0.5, activation="gelu_new", qkv_bias=False,
        out_bias=False, unembed_bias=False, tie_embeddings=True, norm_eps=1e-6)),
    "gpt_neo_local": ("gpt_neo", dict(
        positional_encoding="learned", activation="gelu_new", scale_attention=False, qkv_bias=False,
        unembed_bias=False, tie_embeddings=True, attention_window=4, window_layers=[1], dim_feedforward=128)),
}  # fmt: skip


def as_transformers(family, model) -> torch.nn.Module:
    """The transformers model of the family with this model's weights (what to=huggingface saves)."""
    return hf_export.transformers_model(model.config, families.export_state(family, model))


@pytest.fixture(scope="module")
def family_pairs() -> dict:
    out = {}
    for name, (family_name, settings) in FAMILY_MODELS.items():
        model = decoder(**settings)
        family = families.families()[family_name]
        out[name] = (model, family, as_transformers(family, model))
    return out


@pytest.mark.parametrize("name", list(FAMILY_MODELS))
def test_each_block_computes_its_families_function(family_pairs, name):
    model, family, hf = family_pairs[name]
    tokens = torch.randint(0, V, (3, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = model(tokens)
        theirs = hf(tokens).logits
    scale = float(theirs.abs().max())
    assert scale > 0.5 and float((ours - theirs).abs().max()) <= 1e-5 * max(1.0, scale)
    # greedy decoding with the KV cache (ours and theirs), past the window
    prompt = tokens[:1, :4]
    expected = hf.generate(prompt, max_new_tokens=24, do_sample=False, pad_token_id=0)[0]
    assert model.generate(prompt, 24, temperature=0)[0].tolist() == expected.tolist()
    # config.json both ways: the family reads back the settings it writes
    settings = family.model_config(family.hf_config(model.config), "config.json")
    rebuilt = ModelConfig.from_dict({**settings, "vocab_size": V})
    for key, value in rebuilt.architecture().items():
        if key not in ("eos_id", "bos_id", "pad_id", "vocab"):
            assert value == getattr(model.config, key) or (
                key.endswith("_bias") and rebuilt.has_bias(key[:-5]) == model.config.has_bias(key[:-5])
            ), key


def test_a_family_that_cannot_hold_a_model_says_what_each_lacks():
    with pytest.raises(Exception) as refused:
        families.family_for(decoder(norm="rms", positional_encoding="learned").config)
    message = str(refused.value)
    assert message.startswith("to=huggingface: no transformers family holds this model (GPT-2 has no RMSNorm")
    assert "Llama has no learned positions" not in message and "GPT-NeoX has no learned positions" in message
    assert families.family_for(decoder(**FAMILY_MODELS["llama_gqa"][1]).config).name == "llama"


# ---------------------------------------------------------------------------- training
FEW = ["trainer.limit_train_batches=3", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
       "trainer.max_epochs=1", "trainer.max_steps=-1", "callbacks.snapshots.count=0", *COMMON]  # fmt: skip
SMALL = ["model.model_dim=32", "model.num_layers=2", "model.mlp_ratio=2"]
TASKS = {  # every task, with the preset and with the other blocks (GPT-NeoX's and GPT-Neo's)
    "reverse": ["task=reverse", "model=llama_style", *SMALL],
    "sort": ["task=sort", "model=llama_style", *SMALL, "model.parallel_residual=true", "model.norm=layer"],
    "shakespeare": ["task=shakespeare", "model=llama_style", *SMALL, "model.attention_window=8"],
    "induction": ["task=induction", "model=llama_style", *SMALL, "model.num_kv_heads=1"],
    "modular_addition": ["task=modular_addition", "model=llama_style", *SMALL, "model.activation=geglu"],
    "text": ["task=text", "data.tokenizer=bpe", "data.vocab_size=300", "data.block_size=16",
             "data.batch_size=4", "data.batches_per_epoch=3", "data.val_batches=1", "model=llama_style",
             *SMALL, "model.positional_encoding=rotary", "model.rotary_fraction=0.5",
             "model.parallel_residual=true"],
    "reverse_encoder": ["task=reverse", "model=encoder", "model.positional_encoding=rotary", "model.norm=rms",
                        "model.num_heads=2", "model.num_kv_heads=1", "model.attention_window=4"],
    "sort_encoder_decoder": ["task=sort", "model=encoder_decoder", "model.positional_encoding=rotary",
                             "model.activation=swiglu", "model.num_kv_heads=1", "model.norm=rms",
                             "model.norm_first=true"],
}  # fmt: skip


@pytest.mark.parametrize("task", list(TASKS))
def test_the_blocks_train_from_scratch_on_every_task(task, tmp_path):
    """python train.py model=llama_style (and the other blocks) on every task: a few steps, validation and
    the test (generation with the cache), a finite loss, the checkpoint's architecture as asked."""
    overrides = list(TASKS[task])
    if task == "text":
        overrides.append(f"data.path={write_corpus(tmp_path / 'corpus', txt_files=1, chars=20_000)}")
        overrides.append(f"data.cache_dir={tmp_path / 'cache'}")
    cfg = compose_train_config(tmp_path / "run", *overrides, base=FEW)
    metrics = train(cfg)
    assert metrics["global_step"] > 0 and all(
        value == value for key, value in metrics.items() if key.startswith(("val/", "test/"))
    )
    (checkpoint,) = (tmp_path / "run").glob("checkpoints/last.ckpt")
    net = torch.load(checkpoint, map_location="cpu", weights_only=True)["hyper_parameters"]["net"]
    if "model=llama_style" in overrides:
        assert net["norm"] in ("rms", "layer") and net["positional_encoding"] == "rotary"
        assert net["activation"] in ("swiglu", "geglu") and net["bias"] is False


# ---------------------------------------------------------------------------- the KV cache
CACHED = {
    "decoder_llama_padded": dict(
        norm="rms", positional_encoding="rotary", activation="swiglu", num_kv_heads=2, bias=False, pad_id=0,
        eos_id=1),
    "decoder_window_rotary": dict(
        positional_encoding="rotary", rotary_fraction=0.5, attention_window=3, parallel_residual=True),
    "decoder_window_learned_padded": dict(
        positional_encoding="learned", attention_window=2, window_layers=[0], num_kv_heads=1, pad_id=0),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CACHED))
def test_cached_generation_equals_uncached(name):
    """Rotary positions of cached keys (also counting real tokens only, with left padding), windows over
    cached keys, grouped keys in the cache; and past the context (the cache re-encoded)."""
    model = decoder(**(CACHED[name] | {"max_len": 12}))
    prompt = (
        torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
        if model.pad_id is not None
        else torch.tensor([[5, 6, 7]])
    )
    new = 7 if model.pad_id is not None else 20
    cached = model.generate(prompt, new, temperature=0)
    assert cached.tolist() == model.generate(prompt, new, temperature=0, use_cache=False).tolist()


def test_the_encoder_decoder_generates_alike_with_and_without_its_caches():
    config = dict(arch="encoder_decoder", vocab_size=V, model_dim=32, num_heads=4, num_kv_heads=2,
                  num_layers=2, max_len=16, norm_first=True, norm="rms", positional_encoding="rotary",
                  activation="swiglu", attention_window=3, pad_id=0, bos_id=1, eos_id=2)  # fmt: skip
    model = random_weights(build_model(config))
    source = torch.tensor([[5, 6, 7, 8, 0], [9, 10, 11, 12, 13]])
    assert model.generate(source).tolist() == model.generate(source, use_cache=False).tolist()
    assert (
        model.generate(source, beam_size=3).tolist()
        == model.generate(source, beam_size=3, use_cache=False).tolist()
    )


# ---------------------------------------------------------------------------- hook points
def test_hook_points_are_where_transformer_lens_has_them():
    model = decoder(**FAMILY_MODELS["llama_gqa"][1])
    tokens = torch.randint(0, V, (2, 9))
    with evaluating(model):
        _, cache = model.run_with_cache(tokens)
    names = [n for n in cache if n.startswith("blocks.0.")]
    assert names == [
        "blocks.0.hook_resid_pre", "blocks.0.attn.hook_q", "blocks.0.attn.hook_k", "blocks.0.attn.hook_v",
        "blocks.0.attn.hook_rot_q", "blocks.0.attn.hook_rot_k", "blocks.0.attn.hook_pattern",
        "blocks.0.attn.hook_z", "blocks.0.hook_attn_out", "blocks.0.hook_resid_mid", "blocks.0.mlp.hook_in",
        "blocks.0.mlp.hook_pre",
        "blocks.0.mlp.hook_pre_linear", "blocks.0.mlp.hook_post", "blocks.0.hook_mlp_out",
        "blocks.0.hook_resid_post",
    ]  # fmt: skip
    assert cache["blocks.0.attn.hook_q"].shape == (2, 9, 4, 8)  # per query head
    assert (
        cache["blocks.0.attn.hook_k"].shape == cache["blocks.0.attn.hook_v"].shape == (2, 9, 2, 8)
    )  # per kv head
    assert cache["blocks.0.attn.hook_pattern"].shape == (2, 4, 9, 9)
    # the rotation keeps each rotated pair's length, moves position 0 not at all
    q, rotated = cache["blocks.0.attn.hook_q"], cache["blocks.0.attn.hook_rot_q"]
    torch.testing.assert_close(q[:, 0], rotated[:, 0])
    torch.testing.assert_close(q.norm(dim=-1), rotated.norm(dim=-1))
    assert not torch.allclose(q[:, 1:], rotated[:, 1:])
    mlp = model.blocks[0].mlp
    gate, up = cache["blocks.0.mlp.hook_pre"], cache["blocks.0.mlp.hook_pre_linear"]
    torch.testing.assert_close(cache["blocks.0.mlp.hook_post"], torch.nn.functional.silu(gate) * up)
    assert mlp.fc_gate.weight.shape == mlp.fc_in.weight.shape == (48, 32)
    parallel = decoder(parallel_residual=True)
    assert "blocks.0.hook_resid_mid" not in parallel.hook_names()  # as TransformerLens's parallel blocks


@pytest.mark.parametrize("settings", [
    dict(num_kv_heads=2, positional_encoding="rotary", norm="rms", activation="swiglu"),
    dict(parallel_residual=True, positional_encoding="rotary", rotary_fraction=0.5, attention_window=3),
])  # fmt: skip
def test_per_head_inputs_change_one_kv_head_and_keep_the_logits(settings):
    model = decoder(**settings)
    tokens = torch.randint(0, V, (2, 9))
    with evaluating(model), model.per_head_hooks():
        plain = model(tokens)
        _, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("_input"))
        same = model.run_with_hooks(
            tokens, fwd_hooks=[(lambda n: n.endswith("_input"), lambda x, hook: x + 0)]
        )
        torch.testing.assert_close(same, plain, atol=1e-5, rtol=1e-5)
        kv = model.config.num_kv_heads
        assert cache["blocks.0.hook_k_input"].shape == (2, 9, kv, 32)
        assert cache["blocks.0.hook_q_input"].shape == (2, 9, 4, 32)

        noise = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(0))

        def shift_last_kv_head(x, hook):  # a different shift at every position: no softmax can undo it
            x = x.clone()
            x[:, :, -1] += noise
            return x

        patterns = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))[1]
        hooks = [("blocks.0.hook_k_input", shift_last_kv_head)]
        changed = {}
        with model.hooks(hooks):
            changed = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))[1]
    group = 4 // kv
    difference = (changed["blocks.0.attn.hook_pattern"] - patterns["blocks.0.attn.hook_pattern"]).abs()
    per_head = difference.amax(dim=(0, 2, 3))
    # The untouched heads' patterns come from a second forward pass whose per-head inputs take another
    # kernel path (the hooked head split off): equal to float32 rounding (~1e-7 of a weight <= 1), not
    # bit for bit. The shifted head moves by orders of magnitude more.
    assert bool((per_head[: 4 - group] < 1e-5).all()) and bool((per_head[4 - group :] > 1e-3).all()), per_head


# ---------------------------------------------------------------------------- analyses
@pytest.mark.parametrize("settings", [
    dict(num_kv_heads=2, positional_encoding="rotary", norm="rms", activation="swiglu", bias=False),
    dict(parallel_residual=True, positional_encoding="rotary", rotary_fraction=0.5, num_kv_heads=1),
    dict(attention_window=2, window_layers=[1], activation="geglu", norm="rms"),
])  # fmt: skip
def test_patching_every_edge_is_the_corrupted_run(settings):
    """Edges of a parallel block's MLP come from before its heads, grouped keys and values are read once
    per key-value head: patching nothing is the clean run, every edge the corrupted one."""
    model = decoder(**(settings | {"max_len": 10}))
    (clean, labels), (bad, bad_labels) = _pairs("decoder")
    clean = (torch.remainder(clean[0], V),)
    bad = (torch.remainder(bad[0], V),)
    setup = circuits.prepare(model, clean, labels, (bad, bad_labels), metric="kl")
    g = setup.graph
    kv = model.config.num_kv_heads
    k_readers = [r for r in g.readers if r.hook == "blocks.1.hook_k_input"]
    assert len(k_readers) == kv and all(len(r.nodes) == 4 // kv for r in k_readers)
    if kv < 4:
        assert k_readers[0].name == "blocks.1.attn.kv_head.0.k"
    mlp = next(r for r in g.readers if r.name == "blocks.0.mlp")
    sources = {g.nodes[u].name for u in g.writers[""][slice(*mlp.sources)]}
    assert ("blocks.0.attn.head.0" in sources) != model.config.parallel_residual
    units = g.units
    with torch.no_grad():
        torch.testing.assert_close(
            setup.patcher.run(torch.zeros(1, units)), model(*clean), atol=1e-5, rtol=1e-5
        )
        torch.testing.assert_close(setup.patcher.run(torch.ones(1, units)), model(*bad), atol=1e-5, rtol=1e-5)
    result = circuits.discover(model, clean, labels, (bad, bad_labels), method="acdc", verify=0, ci=0)
    assert result.graph.units == units


def test_direct_logit_attribution_sums_to_the_logit_through_an_rmsnorm():
    model = decoder(norm="rms", positional_encoding="rotary", activation="swiglu", num_kv_heads=2,
                    parallel_residual=True, bias=False)  # fmt: skip
    tokens = torch.randint(0, V, (3, 10), generator=torch.Generator().manual_seed(2))
    labels = torch.roll(tokens, -1, dims=1)
    parts = lens.direct_logit_attribution(model, tokens, labels)
    with torch.no_grad():
        logits = model(tokens)
    correct = logits.gather(-1, labels[..., None]).mean()
    assert sum(parts.values()) == pytest.approx(float(correct), abs=1e-4)
    assert "L0H3" in parts and "L1 MLP" in parts


# ---------------------------------------------------------------------------- the settings' checks
@pytest.mark.parametrize(("settings", "message"), [
    (dict(num_kv_heads=3), "model.num_kv_heads=3 must divide model.num_heads=4"),
    (dict(num_kv_heads=0), "model.num_kv_heads=0 must divide"),
    (dict(positional_encoding="rotary", rotary_fraction=1.5), "model.rotary_fraction=1.5 must be in (0, 1]"),
    (dict(positional_encoding="rotary", rotary_fraction=0.1),
     "rotary_fraction=0.1 of a head of 8 dimensions rotates 0"),
    (dict(model_dim=36, positional_encoding="rotary"), "of a head of 9 dimensions rotates 9"),
    (dict(parallel_residual=True, norm_first=False), "model.parallel_residual=true needs pre-norm blocks"),
    (dict(attention_window=0), "model.attention_window=0 must be a positive integer"),
    (dict(attention_window=3, window_layers=[2]), "model.window_layers=[2] must list distinct layers 0 .. 1"),
    (dict(window_layers=[0]), "model.window_layers is set but model.attention_window is null"),
    (dict(norm="batch"), "model.norm='batch': use layer (LayerNorm) or rms (RMSNorm)"),
    (dict(norm="rms", norm_bias=True), "RMSNorm has no bias"),
    (dict(norm_eps=0), "model.norm_eps=0 must be a small positive number"),
    (dict(activation="reglu"), "model.activation='reglu'"),
    (dict(qkv_bias="yes"), "model.qkv_bias='yes' must be true, false or null"),
])  # fmt: skip
def test_every_setting_is_checked_in_one_line(settings, message):
    base = dict(
        arch="decoder", vocab_size=V, model_dim=32, num_heads=4, num_layers=2, max_len=16, norm_first=True
    )
    with pytest.raises(ValueError) as refused:
        ModelConfig(**(base | settings))
    assert message in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(ValueError, match="is for blocks of one attention sub-layer"):
        ModelConfig(arch="encoder_decoder", vocab_size=V, pad_id=0, bos_id=1, eos_id=2, norm_first=True,
                    parallel_residual=True)  # fmt: skip


# ---------------------------------------------------------------------------- exports
@pytest.mark.parametrize(
    "name", ["llama_gqa", "llama_mqa_biases_tied_geglu", "neox_sequential_half_rotary_no_attention_bias"]
)
def test_transformer_lens_runs_the_blocks_it_has(family_pairs, name, tmp_path):
    pytest.importorskip("transformer_lens")
    from tests.test_export import open_in_transformer_lens

    model = family_pairs[name][0]
    if model.config.has_bias("mlp") and model.config.activation in ("swiglu", "geglu"):
        with pytest.raises(Exception, match="no biases in a gated MLP"):
            transformer_lens.export(model, tmp_path)
        return
    tokens = torch.randint(0, V, (2, 12))
    lines = transformer_lens.export(model, tmp_path)
    tl_model = open_in_transformer_lens(lines, tokens)
    with evaluating(model), torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
        tl_logits, tl_cache = tl_model.run_with_cache(tokens)
    assert float((logits - tl_logits).abs().max()) < 1e-4
    order = transformer_lens.adjacent_pairs(model.config)  # TransformerLens's order of a head's dimensions
    compared = 0
    for hook in model.hook_names():
        if hook not in tl_cache or hook == "ln_final.hook_normalized":
            continue
        ours = cache[hook]
        if hook.endswith(("hook_q", "hook_k")):
            ours = ours[..., order]
        assert float((ours - tl_cache[hook]).abs().max()) < 1e-4, hook
        compared += 1
    assert compared >= 20


@pytest.mark.parametrize(("settings", "what"), [
    (dict(parallel_residual=True),
     "to=transformer_lens: TransformerLens 4's native model has no parallel attention and MLP"),
    (dict(attention_window=4),
     "to=transformer_lens: TransformerLens 4's native model has no local attention windows"),
])  # fmt: skip
def test_transformer_lens_refuses_what_its_native_model_lacks(settings, what, tmp_path):
    with pytest.raises(Exception) as refused:
        transformer_lens.export(decoder(**settings), tmp_path)
    assert what in str(refused.value)
    assert "to=huggingface (then TransformerBridge.boot_transformers) or to=onnx" in str(refused.value)
    assert not (tmp_path / "model.safetensors").exists()


def test_onnx_runs_the_modern_blocks(tmp_path):
    pytest.importorskip("onnxruntime")
    model = decoder(norm="rms", positional_encoding="rotary", activation="swiglu", num_kv_heads=2,
                    parallel_residual=True, attention_window=3, window_layers=[1], max_len=16)  # fmt: skip
    lines = onnx.export(model, tmp_path)
    assert "Checked with ONNX Runtime" in lines[1]
    tokens = torch.randint(0, V, (3, 11))
    with evaluating(model), torch.no_grad():
        expected = model(tokens)
    assert float((onnx.run(tmp_path / "model.onnx", model, (tokens,)) - expected).abs().max()) < 1e-4


def test_generation_allocates_only_the_cache_it_writes(monkeypatch):
    """A model of a long context (Qwen2's 32,768 positions and more; rotary positions need no table of
    them) generates with a cache of the prompt and the new tokens, not of its whole context; past a short
    context the cache still re-encodes its last half window, as before."""
    from transformer_lab.nn import attention

    sizes = []
    original = attention.KVCache.__init__

    def spy(self, batch, heads, max_len, head_dim, like):
        sizes.append(max_len)
        original(self, batch, heads, max_len, head_dim, like)

    monkeypatch.setattr(attention.KVCache, "__init__", spy)
    long_context = decoder(positional_encoding="rotary", max_len=1 << 20, num_kv_heads=2)
    prompt = torch.tensor([[5, 6, 7]])
    out = long_context.generate(prompt, 4, temperature=0)
    assert set(sizes) == {3 + 4} and out.shape == (1, 7)
    assert out.tolist() == long_context.generate(prompt, 4, temperature=0, use_cache=False).tolist()
    sizes.clear()
    short = decoder(positional_encoding="rotary", max_len=8)
    assert (
        short.generate(prompt, 12, temperature=0).tolist()
        == short.generate(prompt, 12, temperature=0, use_cache=False).tolist()
    )
    assert max(sizes) == 8
