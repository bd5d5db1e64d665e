"""The per-head hook points (`model.per_head_hooks()`): TransformerLens's split q/k/v inputs, the MLP's
input and each head's result, on every architecture, pre- and post-norm; absent outside the block."""

import pytest
import torch

from transformer_lab.nn import ModelConfig, build_model

B, T, S, V, D, H = 3, 6, 7, 12, 16, 4


def _model(arch: str, norm_first: bool):
    torch.manual_seed(0)
    seq2seq = arch == "encoder_decoder"
    config = ModelConfig(
        arch=arch,
        vocab_size=V,
        model_dim=D,
        num_heads=H,
        num_layers=2,
        norm_first=norm_first,
        pad_id=0 if arch != "decoder" else None,
        bos_id=1 if seq2seq else None,
        eos_id=2 if seq2seq else None,
        max_len=10,
    )
    model = build_model(config).eval()
    tokens = torch.randint(3, V, (B, S))
    tokens[0, -2:] = 0  # padding for the models with pad_id=0
    inputs = (tokens, torch.randint(3, V, (B, T))) if seq2seq else (tokens,)
    return model, inputs


CASES = [(arch, nf) for arch in ("encoder", "decoder", "encoder_decoder") for nf in (False, True)]


@pytest.mark.parametrize(("arch", "norm_first"), CASES)
def test_attached_only_inside_the_block_and_the_same_logits(arch, norm_first):
    model, inputs = _model(arch, norm_first)
    before = model.hook_names()
    with torch.no_grad():
        plain = model(*inputs)
        with model.per_head_hooks():
            names = model.hook_names()
            logits, cache = model.run_with_cache(*inputs)
    assert model.hook_names() == before and not any("input" in n or "result" in n for n in before)
    added = [n for n in names if n not in before]
    assert [n for n in names if n in before] == before  # the others keep their order
    assert list(cache) == names  # every hook point fires, in the order hook_names lists them
    prefix = "decoder." if arch == "encoder_decoder" else ""
    block = [n.removeprefix(f"{prefix}blocks.1.") for n in added if n.startswith(f"{prefix}blocks.1.")]
    expected = ["hook_q_input", "hook_k_input", "hook_v_input", "attn.hook_result"]
    if arch == "encoder_decoder":
        expected += [
            "hook_cross_q_input",
            "hook_cross_k_input",
            "hook_cross_v_input",
            "cross_attn.hook_result",
        ]
    assert block == [*expected, "hook_mlp_in"]
    torch.testing.assert_close(logits, plain, atol=1e-5, rtol=1e-5)
    queries = inputs[-1].size(1)
    for name, activation in cache.items():
        if name.endswith(("q_input", "v_input", "k_input", "hook_result")):
            source = name.startswith("encoder.") or name.endswith(("cross_k_input", "cross_v_input"))
            assert activation.shape == (B, S if source else queries, H, D), name


@pytest.mark.parametrize(("arch", "norm_first"), CASES)
def test_the_inputs_are_the_stream_and_the_results_sum_to_the_output(arch, norm_first):
    model, inputs = _model(arch, norm_first)
    with torch.no_grad(), model.per_head_hooks():
        _, cache = model.run_with_cache(*inputs)
    for prefix, stack in model.stacks().items():
        for i, block in enumerate(stack.blocks):
            name = f"{prefix}blocks.{i}."
            pre = cache[name + "hook_resid_pre"]
            for part in "qkv":
                torch.testing.assert_close(
                    cache[f"{name}hook_{part}_input"], pre[:, :, None].expand(-1, -1, H, -1)
                )
            result = cache[name + "attn.hook_result"].sum(2) + block.attn.o_proj.bias
            torch.testing.assert_close(result, cache[name + "hook_attn_out"], atol=1e-5, rtol=1e-5)
            mid = cache[name + ("hook_resid_mid_cross" if prefix == "decoder." else "hook_resid_mid")]
            torch.testing.assert_close(cache[name + "hook_mlp_in"], mid)
            if prefix == "decoder.":
                memory = cache["encoder.ln_final.hook_normalized"][:, :, None].expand(-1, -1, H, -1)
                torch.testing.assert_close(cache[name + "hook_cross_k_input"], memory)
                torch.testing.assert_close(cache[name + "hook_cross_v_input"], memory)


@pytest.mark.parametrize("norm_first", [False, True])
def test_changing_one_heads_query_input_changes_that_head_only(norm_first):
    model, inputs = _model("decoder", norm_first)

    def shift_head_2(x, hook):
        x = x.clone()
        x[:, :, 2] += torch.linspace(-1, 1, D)  # not a constant: a pre-norm block's LayerNorm removes one
        return x

    with torch.no_grad(), model.per_head_hooks():
        _, clean = model.run_with_cache(*inputs, names_filter="blocks.1.attn.hook_z")
        hooks = [("blocks.1.hook_q_input", shift_head_2)]
        with model.hooks(hooks):
            _, changed = model.run_with_cache(*inputs, names_filter="blocks.1.attn.hook_z")
    z, z_changed = clean["blocks.1.attn.hook_z"], changed["blocks.1.attn.hook_z"]
    others = [0, 1, 3]
    torch.testing.assert_close(z[:, :, others], z_changed[:, :, others])
    assert not torch.allclose(z[:, 1:, 2], z_changed[:, 1:, 2])  # position 0 sees one key: always itself


def test_the_hook_points_are_removed_when_the_block_raises_and_generation_still_runs():
    model, inputs = _model("encoder_decoder", True)
    before = model.hook_names()
    with pytest.raises(RuntimeError, match="boom"), model.per_head_hooks():
        raise RuntimeError("boom")
    assert model.hook_names() == before
    with model.per_head_hooks():  # the caches of generation take the usual path
        out = model.generate(inputs[0], max_new_tokens=4)
    torch.testing.assert_close(out, model.generate(inputs[0], max_new_tokens=4))


def test_the_example_of_docs_hooks_md_prints_what_the_page_shows():
    import contextlib
    import io
    import re

    from tests.conftest import ROOT

    text = (ROOT / "docs" / "hooks.md").read_text().split("## Per-head inputs and outputs")[1]
    code, shown = re.findall(r"```python\n(.*?)```\s*```\n(.*?)```", text, re.S)[0]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "docs/hooks.md", "exec"), {})
    assert printed.getvalue() == shown
