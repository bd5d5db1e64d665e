"""The sparse autoencoder of `transformer_lab.nn.sae`: each kind's activation, the decoder's unit norm,
the training losses, and splicing into a model (the output unchanged, a feature's change moving it by its
decoder direction), with the refusals of bad input."""

import math

import pytest
import torch

from tests.conftest import encoder_classifier, gpt_decoder
from transformer_lab.nn import EncoderDecoder, ModelConfig
from transformer_lab.nn.sae import (
    SAEConfig,
    SparseAutoencoder,
    activations_at,
    check_hook,
    fingerprint,
    hook_dim,
    splice,
    spliced,
    unsplice,
)


def sae(
    kind: str = "relu", d_in: int = 8, width: int = 32, k: int | None = None, hook: str = ""
) -> SparseAutoencoder:
    torch.manual_seed(0)
    model = SparseAutoencoder(SAEConfig(kind=kind, d_in=d_in, width=width, k=k, hook=hook))
    with torch.no_grad():  # a nonzero encoder bias and input scale, so every term of the equations counts
        model.b_enc.normal_(0, 0.1)
        model.b_dec.normal_(0, 0.1)
        model.input_scale.fill_(1.7)
        if kind == "batchtopk":
            model.batch_threshold.fill_(0.05)
    return model.eval()


@pytest.mark.parametrize("kind, k", [("relu", None), ("topk", 3), ("batchtopk", 3), ("jumprelu", None)])
def test_encode_and_decode_are_the_equations(kind, k):
    model = sae(kind, k=k)
    x = torch.randn(5, 7, 8)
    pre = (x * 1.7 - model.b_dec) @ model.W_enc + model.b_enc
    f = model.encode(x)
    if kind == "relu":
        expected = pre.relu()
    elif kind == "topk":
        top = pre.topk(3, dim=-1)
        expected = torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
        assert ((f > 0).sum(-1) <= 3).all()
    else:  # a threshold: batchtopk's one value, jumprelu's per feature
        expected = pre * (pre > model.threshold)
    torch.testing.assert_close(f, expected)
    torch.testing.assert_close(model.decode(f), (f @ model.W_dec + model.b_dec) / 1.7)
    torch.testing.assert_close(model(x), model.decode(f))


def test_batchtopk_keeps_k_per_position_on_average_in_training():
    model = sae("batchtopk", k=3).train()
    x = torch.randn(64, 8)
    f = model.encode(x)
    assert int((f > 0).sum()) == 3 * 64
    assert (f >= 0).all()


def test_decoder_rows_unit_norm_and_gradient_orthogonal_to_them():
    model = sae()
    with torch.no_grad():
        model.W_dec.mul_(3.0)
    model.normalize_decoder()
    torch.testing.assert_close(model.W_dec.norm(dim=1), torch.ones(32))
    model.W_dec.grad = torch.randn_like(model.W_dec)
    model.remove_parallel_gradient()
    assert float((model.W_dec.grad * model.W_dec.detach()).sum(1).abs().max()) < 1e-5


def test_training_losses():
    model = sae("relu").train()
    x = torch.randn(16, 8)
    losses = model.training_losses(x, coefficient=0.5)
    f = model.encode(x)
    error = x * 1.7 - (f @ model.W_dec + model.b_dec)
    torch.testing.assert_close(losses["reconstruction"], error.pow(2).sum(-1).mean())
    torch.testing.assert_close(losses["sparsity"], 0.5 * f.sum(-1).mean())
    torch.testing.assert_close(losses["loss"], losses["reconstruction"] + losses["sparsity"])
    # topk: AuxK only where features are dead, and then it gives them a gradient
    topk = sae("topk", k=2).train()
    assert float(topk.training_losses(x, 0.0, aux_k=1.0, dead=torch.zeros(32, dtype=torch.bool))["aux"]) == 0
    dead = torch.zeros(32, dtype=torch.bool)
    dead[:10] = True
    out = topk.training_losses(x, 0.0, aux_k=1.0, dead=dead)
    assert float(out["aux"].detach()) > 0
    out["aux"].backward()
    assert topk.W_dec.grad[:10].abs().sum() > 0 and topk.W_dec.grad[10:].abs().sum() == 0


def test_jumprelu_threshold_learns_through_its_estimator():
    model = sae("jumprelu").train()
    x = torch.randn(256, 8)
    with torch.no_grad():  # every pre-activation near its threshold, inside the estimator's window
        model.log_threshold.fill_(math.log(0.5))
    model.training_losses(x, coefficient=1.0)["sparsity"].backward()
    # the L0 penalty's gradient raises the thresholds (fewer features on): d loss / d theta < 0
    assert model.log_threshold.grad is not None and float(model.log_threshold.grad.sum()) < 0


@pytest.mark.parametrize(
    "make, hook",
    [
        (lambda: gpt_decoder(11), "blocks.0.hook_resid_post"),
        (lambda: gpt_decoder(11), "blocks.1.attn.hook_z"),  # per head [B, T, H, D]
        (lambda: encoder_classifier(10), "blocks.0.hook_mlp_out"),
        (
            lambda: EncoderDecoder(
                ModelConfig(arch="encoder_decoder", vocab_size=12, pad_id=0, bos_id=1, eos_id=2, max_len=16)
            ),
            "decoder.blocks.0.hook_resid_mid",
        ),
    ],
)
@pytest.mark.parametrize("kind", ["relu", "topk", "batchtopk", "jumprelu"])
def test_spliced_with_its_error_the_model_is_unchanged(make, hook, kind):
    torch.manual_seed(1)
    model = make().eval()
    inputs = tuple(torch.randint(3, 10, (2, 9)) for _ in range(model.num_inputs))
    d_in = hook_dim(model, hook)
    autoencoder = sae(
        kind, d_in=d_in, width=4 * d_in, k=3 if kind in ("topk", "batchtopk") else None, hook=hook
    )
    with torch.no_grad():
        clean = model(*inputs)
        with spliced(model, autoencoder):
            assert f"{hook}.sae.hook_sae_acts_post" in model.hook_names()
            torch.testing.assert_close(model(*inputs), clean, atol=1e-5, rtol=1e-5)
    assert f"{hook}.sae.hook_sae_acts_post" not in model.hook_names()  # taken out again


def test_changing_a_feature_moves_the_activation_by_its_direction():
    torch.manual_seed(2)
    model = gpt_decoder(11).eval()
    hook = "blocks.0.hook_attn_out"
    autoencoder = sae("relu", d_in=32, width=64, hook=hook)
    tokens = torch.randint(0, 11, (2, 6))
    with torch.no_grad():
        x = activations_at(model, hook, tokens)
        f = autoencoder.encode(x)
        feature = int(f.flatten(0, 1).sum(0).argmax())

        def ablate(acts, point):
            acts = acts.clone()
            acts[..., feature] = 0
            return acts

        seen = {}

        def keep(activation, point):
            seen["out"] = activation

        with spliced(model, autoencoder):
            model.run_with_hooks(
                tokens,
                fwd_hooks=[(f"{hook}.sae.hook_sae_acts_post", ablate), (f"{hook}.sae.hook_sae_output", keep)],
            )
        expected = x - f[..., feature, None] * autoencoder.W_dec[feature] / autoencoder.input_scale
        torch.testing.assert_close(seen["out"], expected, atol=1e-5, rtol=1e-5)
        # the error zeroed: the activation is the reconstruction itself
        with spliced(model, autoencoder):
            model.run_with_hooks(
                tokens,
                fwd_hooks=[
                    (f"{hook}.sae.hook_sae_error", lambda a, p: torch.zeros_like(a)),
                    (f"{hook}.sae.hook_sae_output", keep),
                ],
            )
        torch.testing.assert_close(seen["out"], autoencoder(x), atol=1e-6, rtol=1e-5)


def test_activations_at_stops_at_the_hook_and_equals_the_cache():
    model = gpt_decoder(11).eval()
    tokens = torch.randint(0, 11, (3, 8))
    _, cache = model.run_with_cache(tokens)
    torch.testing.assert_close(
        activations_at(model, "blocks.0.hook_resid_mid", tokens), cache["blocks.0.hook_resid_mid"]
    )
    assert hook_dim(model, "blocks.0.attn.hook_z") == 32


def test_bad_input_is_one_line():
    model = gpt_decoder(11)
    with pytest.raises(
        ValueError,
        match=r"hook=blocks.0.hook_atn_out is not a hook point .* nearest are blocks.0.hook_attn_out",
    ):
        check_hook(model, "blocks.0.hook_atn_out")
    with pytest.raises(ValueError, match=r"attention maps"):
        check_hook(model, "blocks.0.attn.hook_pattern")
    with pytest.raises(ValueError, match=r"model.k=40 is more than the SAE's width of 32 features"):
        SAEConfig(kind="topk", d_in=8, width=32, k=40)
    assert SAEConfig(kind="topk", d_in=8, width=32).k == 16  # the kind's default
    with pytest.raises(ValueError, match=r"needs model\.k"):
        SAEConfig(kind="topk", d_in=8, width=32, k=0)
    with pytest.raises(ValueError, match=r"limit"):
        SAEConfig(kind="relu", d_in=8, width=10**9)
    with pytest.raises(ValueError, match=r"model\.kind='gated' is unknown"):
        SAEConfig(kind="gated", d_in=8, width=32)
    # an SAE of another model's activations: its size differs, or its hook does
    wrong = sae("relu", d_in=16, width=32, hook="blocks.0.hook_resid_post")
    with pytest.raises(ValueError, match=r"reads activations of size 16 but blocks.0.hook_resid_post has 32"):
        splice(model, wrong)
    other = sae("relu", d_in=32, width=32, hook="blocks.1.hook_resid_post")
    with pytest.raises(ValueError, match=r"trained on blocks.1.hook_resid_post, not blocks.0"):
        splice(model, other, "blocks.0.hook_resid_post")
    assert not any(".sae." in name for name in model.hook_names())  # nothing was spliced in
    unsplice(model)


def test_fingerprint_names_the_weights():
    a, b = gpt_decoder(11), gpt_decoder(11)
    assert fingerprint(a) != fingerprint(b)  # two initialisations
    b.load_state_dict(a.state_dict())
    assert fingerprint(a) == fingerprint(b)
    assert len(fingerprint(a)) == 64
