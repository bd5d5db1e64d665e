"""Hook points: every name of DESIGN.md with its shape and one property, reading and replacing
activations, hooks that never outlive their call, gradients through hooked activations, and the fused
kernel while nothing is hooked."""

import pytest
import torch

from tests.conftest import encoder_classifier, gpt_decoder
from transformer_lab.nn import HookPoint, attention

B, T, V, D, H, FF = 3, 7, 11, 32, 4, 64
PER_BLOCK = {  # name -> shape, for block i
    "hook_resid_pre": (B, T, D),
    "attn.hook_q": (B, T, H, D // H),
    "attn.hook_k": (B, T, H, D // H),
    "attn.hook_v": (B, T, H, D // H),
    "attn.hook_pattern": (B, H, T, T),
    "attn.hook_z": (B, T, H, D // H),
    "hook_attn_out": (B, T, D),
    "hook_resid_mid": (B, T, D),
    "mlp.hook_in": (B, T, D),
    "mlp.hook_post": (B, T, FF),
    "hook_mlp_out": (B, T, D),
    "hook_resid_post": (B, T, D),
}


def _models() -> dict:
    torch.manual_seed(0)
    return {
        "encoder": encoder_classifier(V, num_heads=H, num_layers=2, pad_id=0).eval(),
        "encoder_pre_norm": encoder_classifier(V, num_heads=H, num_layers=2, norm_first=True).eval(),
        "decoder": gpt_decoder(V, num_heads=H, num_layers=2, mlp_ratio=2).eval(),
    }


@pytest.fixture(params=["encoder", "encoder_pre_norm", "decoder"])
def model(request):
    return _models()[request.param]


def _tokens() -> torch.Tensor:
    x = torch.randint(1, V, (B, T))
    x[0, 5:] = 0  # padding for the model with pad_id=0, an ordinary token for the others
    return x


def test_cache_has_every_hook_point_in_forward_order_with_its_shape(model):
    expected = ["hook_embed", "hook_pos_embed"]
    expected += [f"blocks.{i}.{name}" for i in range(2) for name in PER_BLOCK]
    expected += ["ln_final.hook_normalized"]
    assert model.hook_names() == expected
    logits, cache = model.run_with_cache(_tokens())
    assert list(cache) == expected  # activations arrive in the order hook_names lists them
    assert logits.shape == (B, T, V)
    for name, activation in cache.items():
        short = name.split(".", 2)[-1] if name.startswith("blocks.") else name
        assert activation.shape == PER_BLOCK.get(short, (B, T, D)), name
        assert not activation.requires_grad


def test_a_cache_that_stops_at_its_last_hook_computes_nothing_after_it(model):
    x = _tokens()
    _, full = model.run_with_cache(x)
    later: list[str] = []
    last = "blocks.0.hook_resid_post"
    with model.hooks(
        [
            (
                lambda name: name in ("blocks.1.hook_resid_pre", "ln_final.hook_normalized"),
                lambda a, hook: later.append(hook.name),
            )
        ]
    ):
        output, cache = model.run_with_cache(x, names_filter=last, stop_at_last=True)
    assert output is None and list(cache) == [last] and later == []  # nothing after the last hook ran
    torch.testing.assert_close(cache[last], full[last])  # (hooks elsewhere change the attention kernel)
    with pytest.raises(ValueError, match=r"'blocks\.9\.hook_resid_post' is not a hook point"):
        model.run_with_cache(x, names_filter="blocks.9.hook_resid_post", stop_at_last=True)


def test_pattern_rows_are_distributions_and_zero_on_hidden_keys(model):
    x = _tokens()
    _, cache = model.run_with_cache(x, names_filter=lambda name: name.endswith("hook_pattern"))
    assert len(cache) == 2
    hidden = torch.zeros(B, 1, T, T, dtype=torch.bool)
    if model.causal:
        hidden |= torch.ones(T, T, dtype=torch.bool).triu(1)
    if model.pad_id is not None:
        hidden |= (x == model.pad_id)[:, None, None, :]
    for pattern in cache.values():
        torch.testing.assert_close(pattern.sum(-1), torch.ones(B, H, T))
        assert (pattern.masked_select(hidden.expand_as(pattern)) == 0).all()
        assert (pattern.masked_select(~hidden.expand_as(pattern)) > 0).all()


def test_activations_compose_into_the_logits(model):
    x = _tokens()
    logits, cache = model.run_with_cache(x)
    with torch.no_grad():
        resid = cache["hook_embed"] + cache["hook_pos_embed"]
        torch.testing.assert_close(resid, cache["blocks.0.hook_resid_pre"])
        for i, block in enumerate(model.blocks):
            z = cache[f"blocks.{i}.attn.hook_z"]
            torch.testing.assert_close(block.attn.o_proj(z.flatten(2)), cache[f"blocks.{i}.hook_attn_out"])
            post = cache[f"blocks.{i}.mlp.hook_post"]
            torch.testing.assert_close(block.mlp.fc_out(post), cache[f"blocks.{i}.hook_mlp_out"])
            if block.norm_first:  # pre-norm: the stream is a sum of what every layer wrote
                pre, mid = cache[f"blocks.{i}.hook_resid_pre"], cache[f"blocks.{i}.hook_resid_mid"]
                torch.testing.assert_close(pre + cache[f"blocks.{i}.hook_attn_out"], mid)
                torch.testing.assert_close(
                    mid + cache[f"blocks.{i}.hook_mlp_out"], cache[f"blocks.{i}.hook_resid_post"]
                )
        last = cache["blocks.1.hook_resid_post"]
        torch.testing.assert_close(model.ln_final(last), cache["ln_final.hook_normalized"])
        torch.testing.assert_close(model.unembed(model.ln_final(last)), logits)


def test_a_hook_can_replace_an_activation(model):
    x = _tokens()
    with torch.no_grad():
        clean = model(x)

        def zero_head_2(z, hook):
            z = z.clone()
            z[:, :, 2] = 0
            return z

        ablated = model.run_with_hooks(x, fwd_hooks=[("blocks.1.attn.hook_z", zero_head_2)])
        assert not torch.allclose(ablated, clean)
        # Replacing the last stream by its own value changes nothing; replacing it by zeros gives the
        # unembedding of the normalised zero vector at every position.
        same = model.run_with_hooks(x, fwd_hooks=[("blocks.1.hook_resid_post", lambda a, h: a.clone())])
        torch.testing.assert_close(same, clean)
        zeros = model.run_with_hooks(
            x, fwd_hooks=[("blocks.1.hook_resid_post", lambda a, h: torch.zeros_like(a))]
        )
        torch.testing.assert_close(zeros, model.unembed(model.ln_final(torch.zeros(B, T, D))))


def test_hooks_see_their_names_and_a_filter_picks_several(model):
    seen = []
    model.run_with_hooks(
        _tokens(), fwd_hooks=[(lambda n: n.endswith("hook_z"), lambda a, h: seen.append(h.name))]
    )
    assert seen == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z"]


def _attached(model) -> int:
    return sum(len(m._forward_hooks) for m in model.modules() if isinstance(m, HookPoint))


def test_hooks_are_gone_after_the_call_and_after_an_exception(model):
    model.run_with_cache(_tokens())
    assert _attached(model) == 0

    def fails(activation, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        model.run_with_hooks(
            _tokens(), fwd_hooks=[("hook_embed", lambda a, h: None), ("blocks.1.hook_resid_mid", fails)]
        )
    assert _attached(model) == 0
    with pytest.raises(ValueError, match=r"'blocks\.9\.attn\.hook_z' is not a hook point .*hook_names\(\)"):
        model.run_with_hooks(_tokens(), fwd_hooks=[("blocks.9.attn.hook_z", lambda a, h: None)])
    assert _attached(model) == 0


def test_gradients_reach_hooked_activations(model):
    """d logit / d pattern through a hook, with the fused kernel replaced by the explicit softmax."""
    kept = {}

    def keep(activation, hook):
        activation.retain_grad()
        kept[hook.name] = activation

    logits = model.run_with_hooks(
        _tokens(), fwd_hooks=[(lambda n: n.endswith(("hook_pattern", "hook_z")), keep)]
    )
    logits[:, -1].sum().backward()
    assert set(kept) == {f"blocks.{i}.attn.hook_{k}" for i in range(2) for k in ("pattern", "z")}
    for name, activation in kept.items():
        assert activation.grad is not None and activation.grad.abs().sum() > 0, name
    model.zero_grad()


def test_nothing_hooked_runs_the_fused_kernel(model, monkeypatch):
    """The attention matrix is only materialised when someone hooks `hook_pattern`."""
    calls = []
    explicit = attention.attention_pattern
    monkeypatch.setattr(attention, "attention_pattern", lambda *a, **k: calls.append(1) or explicit(*a, **k))
    x = _tokens()
    with torch.no_grad():
        model(x)
        model.run_with_cache(x, names_filter=lambda n: n.endswith("hook_z"))
        assert calls == []
        model.run_with_cache(x, names_filter="blocks.1.attn.hook_pattern")
        assert len(calls) == 1  # the hooked layer only
