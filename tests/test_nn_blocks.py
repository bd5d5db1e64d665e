import math

import pytest
import torch

from tests.conftest import encoder_classifier, gpt_decoder
from transformer_lab.nn import EncoderBlock, PositionalEncoding, TransformerEncoder


def _copy_block_to_torch(block: EncoderBlock, ref: torch.nn.TransformerEncoderLayer) -> None:
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(block.attn.qkv_proj.weight)
        ref.self_attn.out_proj.weight.copy_(block.attn.o_proj.weight)
        if ref.self_attn.in_proj_bias is not None:
            ref.self_attn.in_proj_bias.copy_(block.attn.qkv_proj.bias)
            ref.self_attn.out_proj.bias.copy_(block.attn.o_proj.bias)
        ref.linear1.load_state_dict(block.mlp.fc_in.state_dict())
        ref.linear2.load_state_dict(block.mlp.fc_out.state_dict())
        ref.norm1.load_state_dict(block.norm1.state_dict())
        ref.norm2.load_state_dict(block.norm2.state_dict())


@pytest.mark.parametrize(
    ("norm_first", "activation", "bias"), [(False, "relu", True), (True, "gelu", True), (True, "gelu", False)]
)
def test_encoder_block_equals_torch_layer(norm_first, activation, bias):
    torch.manual_seed(0)
    block = EncoderBlock(
        32, num_heads=4, dim_feedforward=64, norm_first=norm_first, activation=activation, bias=bias
    ).eval()
    ref = torch.nn.TransformerEncoderLayer(
        32, 4, 64, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first, bias=bias
    ).eval()
    _copy_block_to_torch(block, ref)
    x = torch.randn(3, 10, 32)
    mask = torch.ones(10, 10, dtype=torch.bool).tril()
    with torch.no_grad():
        torch.testing.assert_close(block(x), ref(x), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(block(x, mask=mask), ref(x, src_mask=~mask), atol=1e-5, rtol=1e-5)


def test_encoder_block_parameter_count_by_hand():
    d, ff = 100, 200
    attention = (d * 3 * d + 3 * d) + (d * d + d)  # fused qkv projection + output projection
    mlp = (d * ff + ff) + (ff * d + d)
    norms = 2 * (2 * d)  # two LayerNorms, gain and bias each
    block = EncoderBlock(input_dim=d, num_heads=4, dim_feedforward=ff)
    assert sum(p.numel() for p in block.parameters()) == attention + mlp + norms == 81_100
    without_bias = EncoderBlock(input_dim=d, num_heads=4, dim_feedforward=ff, bias=False)
    assert sum(p.numel() for p in without_bias.parameters()) == 3 * d * d + d * d + 2 * d * ff + 2 * d


def test_decoder_without_biases_has_none():
    model = gpt_decoder(12, bias=False)
    assert not [name for name, _ in model.named_parameters() if name.endswith("bias")]
    assert encoder_classifier(12).blocks[0].norm1.bias is not None


def test_attention_maps_follow_the_mask_in_every_layer():
    encoder = TransformerEncoder(3, input_dim=16, num_heads=2, dim_feedforward=32).eval()
    x = torch.randn(2, 6, 16)
    mask = torch.ones(2, 6, 6)
    mask[:, :, 4:] = 0
    maps = encoder.get_attention_maps(x, mask=mask)
    assert len(maps) == 3
    for attention in maps:
        assert attention.shape == (2, 2, 6, 6)
        assert (attention[..., 4:] == 0).all()
        torch.testing.assert_close(attention.sum(-1), torch.ones(2, 2, 6))


def test_attention_maps_come_from_the_same_pass_as_forward():
    """Each layer's map is computed on the input that layer sees (pre-norm included)."""
    torch.manual_seed(0)
    encoder = TransformerEncoder(2, input_dim=16, num_heads=2, dim_feedforward=32, norm_first=True).eval()
    x = torch.randn(1, 5, 16)
    second = encoder.blocks[1]
    _, expected = second.attn(second.norm1(encoder.blocks[0](x)), return_attention=True)
    torch.testing.assert_close(encoder.get_attention_maps(x)[1], expected)


def test_positional_encoding_closed_form():
    d_model, max_len = 16, 50
    pe = PositionalEncoding(d_model, max_len).pe
    assert pe.shape == (1, max_len, d_model)
    for pos in (0, 1, 7, 49):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert pe[0, pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert pe[0, pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


def test_positional_encoding_rejects_too_long_input():
    with pytest.raises(ValueError, match="max_len=8"):
        PositionalEncoding(4, max_len=8)(torch.zeros(1, 9, 4))


def _predictor(positional_encoding: str):
    torch.manual_seed(0)
    return encoder_classifier(num_heads=4, num_layers=2, positional_encoding=positional_encoding).eval()


def test_without_positions_the_encoder_is_permutation_equivariant():
    x = torch.randint(10, (4, 12))
    perm = torch.randperm(12)
    model = _predictor("none")
    with torch.no_grad():
        torch.testing.assert_close(model(x[:, perm]), model(x)[:, perm], atol=1e-5, rtol=1e-5)
    for kind in ("sinusoidal", "learned"):
        model = _predictor(kind)
        with torch.no_grad():
            assert not torch.allclose(model(x[:, perm]), model(x)[:, perm], atol=1e-3)
