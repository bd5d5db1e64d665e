"""The encoder-decoder of transformer_lab.nn against PyTorch's layers, padding that changes nothing,
cached generation against recomputation, beam search against greedy, and its hook points."""

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import encoder_classifier, gpt_decoder
from transformer_lab.nn import DecoderBlock, EncoderDecoder, ModelConfig

PAD, BOS, EOS = 0, 1, 2
V = 12


def _model(**settings) -> EncoderDecoder:
    torch.manual_seed(0)
    config = dict(
        arch="encoder_decoder", vocab_size=V, pad_id=PAD, bos_id=BOS, eos_id=EOS, model_dim=32,
        num_heads=4, num_layers=2, max_len=12, output_mlp=False,
    )  # fmt: skip
    return EncoderDecoder(ModelConfig(**(config | settings))).eval()


def _copy_attention(ours, theirs) -> None:
    theirs.in_proj_weight.copy_(ours.qkv_proj.weight)
    theirs.out_proj.weight.copy_(ours.o_proj.weight)
    if theirs.in_proj_bias is not None:
        theirs.in_proj_bias.copy_(ours.qkv_proj.bias)
        theirs.out_proj.bias.copy_(ours.o_proj.bias)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("padded", [False, True])
def test_decoder_block_equals_torch_decoder_layer(norm_first, activation, padded):
    torch.manual_seed(0)
    block = DecoderBlock(32, num_heads=4, dim_feedforward=64, norm_first=norm_first, activation=activation)
    ref = torch.nn.TransformerDecoderLayer(
        32, 4, 64, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )
    with torch.no_grad():
        for p in block.parameters():  # non-zero biases, so that a bias copied to the wrong place shows
            p.add_(0.1 * torch.randn_like(p))
        _copy_attention(block.attn, ref.self_attn)
        _copy_attention(block.cross_attn, ref.multihead_attn)
        ref.linear1.load_state_dict(block.mlp.fc_in.state_dict())
        ref.linear2.load_state_dict(block.mlp.fc_out.state_dict())
        for name in ("norm1", "norm2", "norm3"):
            getattr(ref, name).load_state_dict(getattr(block, name).state_dict())
    block.eval(), ref.eval()
    target, memory = torch.randn(3, 6, 32), torch.randn(3, 9, 32)
    target_real = torch.ones(3, 6, dtype=torch.bool)
    memory_real = torch.ones(3, 9, dtype=torch.bool)
    if padded:
        target_real[0, 4:], memory_real[1, 5:], memory_real[2, 8:] = False, False, False
    causal = torch.ones(6, 6, dtype=torch.bool).triu(1)  # True: hidden, PyTorch's convention
    with torch.no_grad():
        ours = block(target, memory, target_real[:, None, None, :], memory_real[:, None, None, :])
        theirs = ref(
            target, memory, tgt_mask=causal, tgt_key_padding_mask=~target_real,
            memory_key_padding_mask=~memory_real, tgt_is_causal=True,
        )  # fmt: skip
    torch.testing.assert_close(ours[target_real], theirs[target_real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_stack_equals_torch_transformer_encoder(norm_first):
    """The encoder's blocks and final norm, fed an embedding of our choosing through its hook points."""
    model = _model(norm_first=norm_first, activation="gelu")
    stack = model.encoder
    layer = torch.nn.TransformerEncoderLayer(
        32, 4, 64, dropout=0.0, activation="gelu", batch_first=True, norm_first=norm_first
    )
    ref = torch.nn.TransformerEncoder(
        layer, 2, norm=torch.nn.LayerNorm(32) if norm_first else None, enable_nested_tensor=False
    )
    with torch.no_grad():
        for ours, theirs in zip(stack.blocks, ref.layers, strict=True):
            _copy_attention(ours.attn, theirs.self_attn)
            theirs.linear1.load_state_dict(ours.mlp.fc_in.state_dict())
            theirs.linear2.load_state_dict(ours.mlp.fc_out.state_dict())
            theirs.norm1.load_state_dict(ours.norm1.state_dict())
            theirs.norm2.load_state_dict(ours.norm2.state_dict())
        if norm_first:
            ref.norm.load_state_dict(stack.ln_final.norm.state_dict())
    ref.eval()
    x = torch.randn(2, 7, 32)
    tokens = torch.randint(3, V, (2, 7))
    tokens[1, 5:] = PAD
    with torch.no_grad():
        ours = stack.run_with_hooks(
            tokens,
            fwd_hooks=[("hook_embed", lambda a, h: x), ("hook_pos_embed", lambda a, h: torch.zeros_like(a))],
        )
        theirs = ref(x, src_key_padding_mask=tokens == PAD)
    real = tokens != PAD
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)


def _padded(rows: list[list[int]], left: bool = False) -> torch.Tensor:
    width = max(map(len, rows))
    pads = [[PAD] * (width - len(r)) for r in rows]
    return torch.tensor([p + r if left else r + p for r, p in zip(rows, pads, strict=True)])


SOURCES = [[5, 7, 3, 9], [4, 4, 8, 6, 10, 11, 3], [9]]
TARGETS = [[BOS, 3, 5, 7], [BOS, 3, 4, 6, 8, 10], [BOS, 9]]


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_changes_no_logit_of_the_encoder_decoder(norm_first):
    model = _model(norm_first=norm_first)
    with torch.no_grad():
        batch = model(_padded(SOURCES), _padded(TARGETS))
        for i, (source, target) in enumerate(zip(SOURCES, TARGETS, strict=True)):
            alone = model(torch.tensor([source]), torch.tensor([target]))[0]
            torch.testing.assert_close(batch[i, : len(target)], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["encoder", "decoder"])
def test_padding_changes_no_logit_of_the_one_stack_models(arch):
    torch.manual_seed(0)
    model = (
        encoder_classifier(V, pad_id=PAD, num_layers=2, num_heads=2)
        if arch == "encoder"
        else gpt_decoder(V, pad_id=PAD)
    ).eval()
    sequences = SOURCES
    with torch.no_grad():
        for left in (False, True):  # a causal model reads prompts padded on the left
            batch = model(_padded(sequences, left=left))
            for i, seq in enumerate(sequences):
                alone = model(torch.tensor([seq]))[0]
                real = batch[i, -len(seq) :] if left else batch[i, : len(seq)]
                torch.testing.assert_close(real, alone, atol=1e-5, rtol=1e-5)


def _greedy_by_recomputation(model: EncoderDecoder, source: torch.Tensor, steps: int) -> torch.Tensor:
    """The reference: the whole decoder re-run for every new token, argmax, <eos> then padding."""
    target = torch.full((source.size(0), 1), BOS)
    done = torch.zeros(source.size(0), dtype=torch.bool)
    with torch.no_grad():
        for _ in range(steps):
            token = model(source, target)[:, -1].argmax(-1)
            token = token.masked_fill(done, PAD)
            done |= token == EOS
            target = torch.cat([target, token[:, None]], 1)
            if done.all():
                break
    return target[:, 1:]


def _log_prob(model: EncoderDecoder, source: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """log p(output | source) by teacher forcing, summed over the tokens up to and including <eos>."""
    target = torch.cat([torch.full((source.size(0), 1), BOS), output], 1)
    with torch.no_grad():
        log_probs = F.log_softmax(model(source, target[:, :-1]), -1).gather(2, output[..., None])[..., 0]
    return log_probs.masked_fill(output == PAD, 0).sum(1)


def test_cached_generation_equals_recomputation_and_greedy_is_beam_one():
    model = _model()
    source = _padded(SOURCES)
    reference = _greedy_by_recomputation(model, source, 12)
    for beam_size in (1,):
        cached = model.generate(source, beam_size=beam_size)
        uncached = model.generate(source, beam_size=beam_size, use_cache=False)
        assert torch.equal(cached, uncached)
        assert torch.equal(cached, reference[:, : cached.size(1)])
    wide = model.generate(source, beam_size=4)
    assert torch.equal(wide, model.generate(source, beam_size=4, use_cache=False))


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_beam_search_never_scores_below_greedy(length_penalty):
    torch.manual_seed(1)
    model = _model()
    source = torch.randint(3, V, (40, 6))
    greedy = model.generate(source, beam_size=1)
    for beam_size in (2, 4):
        beam = model.generate(source, beam_size=beam_size, length_penalty=length_penalty)
        assert beam.size(0) == 40
        if length_penalty == 0:
            assert (_log_prob(model, source, beam) >= _log_prob(model, source, greedy) - 1e-4).all()


def test_generated_outputs_stop_at_eos_then_pad():
    model = _model()
    with torch.no_grad():
        model.unembed.bias.zero_()
        model.unembed.bias[EOS] = 50.0  # <eos> wins at once
    out = model.generate(_padded(SOURCES), beam_size=3)
    assert out.tolist() == [[EOS]] * 3


def test_encoder_decoder_hook_points():
    model = _model()
    source, target = _padded(SOURCES), _padded(TARGETS)
    names = model.hook_names()
    assert names[0] == "encoder.hook_embed" and names[-1] == "decoder.ln_final.hook_normalized"
    block = [n.removeprefix("decoder.blocks.0.") for n in names if n.startswith("decoder.blocks.0.")]
    assert block == [
        "hook_resid_pre", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_pattern", "attn.hook_z",
        "hook_attn_out", "hook_resid_mid", "cross_attn.hook_q", "cross_attn.hook_k", "cross_attn.hook_v",
        "cross_attn.hook_pattern", "cross_attn.hook_z", "hook_cross_attn_out", "hook_resid_mid_cross",
        "mlp.hook_in", "mlp.hook_post", "hook_mlp_out", "hook_resid_post",
    ]  # fmt: skip
    logits, cache = model.run_with_cache(source, target)
    assert list(cache) == names
    cross = cache["decoder.blocks.1.cross_attn.hook_pattern"]
    assert cross.shape == (3, 4, target.size(1), source.size(1))
    torch.testing.assert_close(cross.sum(-1), torch.ones(3, 4, target.size(1)))
    assert (cross[0, ..., 4:] == 0).all() and (cross[2, ..., 1:] == 0).all()  # padded source positions
    assert cache["decoder.blocks.0.attn.hook_pattern"].shape == (3, 4, target.size(1), target.size(1))
    with torch.no_grad():
        torch.testing.assert_close(model.unembed(cache["decoder.ln_final.hook_normalized"]), logits)
    assert len(model.get_attention_maps(source, target)) == 2 + 2 * 2


@pytest.mark.parametrize(
    ("source", "kwargs", "message"),
    [
        (torch.tensor([[PAD, PAD]]), {}, "source row 0 is empty"),
        (torch.zeros(1, 0, dtype=torch.long), {}, r"source must be \[batch, S>0\]"),
        (torch.full((1, 13), 5), {}, "the source has 13 tokens, more than the model's max_len=12"),
        (torch.tensor([[5, 40]]), {}, r"token ids must be in \[0, 12\)"),
        (torch.tensor([[5]]), {"beam_size": 0}, "beam_size=0 must be an integer >= 1"),
        (torch.tensor([[5]]), {"max_new_tokens": 13}, "max_new_tokens=13 must be between 1 and max_len=12"),
    ],
)
def test_bad_generation_input_is_a_clear_error(source, kwargs, message):
    with pytest.raises(ValueError, match=message):
        _model().generate(source, **kwargs)
