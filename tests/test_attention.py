import math

import pytest
import torch

from transformer_lab.nn import MultiheadAttention, causal_mask, expand_mask, scaled_dot_product


def test_scaled_dot_product_shapes_and_rows():
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
    values, attention = scaled_dot_product(q, k, v)
    assert values.shape == (2, 3, 5, 4)
    assert attention.shape == (2, 3, 5, 7)
    assert (attention >= 0).all()
    torch.testing.assert_close(attention.sum(-1), torch.ones(2, 3, 5))


def test_scaled_dot_product_matches_formula():
    q, k, v = torch.randn(1, 1, 4, 6), torch.randn(1, 1, 4, 6), torch.randn(1, 1, 4, 6)
    expected = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(6), dim=-1) @ v
    torch.testing.assert_close(scaled_dot_product(q, k, v)[0], expected)


def test_masked_positions_get_exactly_zero_attention():
    torch.manual_seed(0)
    q = k = v = torch.randn(2, 2, 5, 4)
    mask = torch.ones(2, 5, 5)
    mask[0, :, 3:] = 0  # sequence 0: keys 3 and 4 are padding
    _, attention = scaled_dot_product(q, k, v, mask=mask)
    assert (attention[0, :, :, 3:] == 0).all()
    assert (attention[1] > 0).all()
    torch.testing.assert_close(attention.sum(-1), torch.ones(2, 2, 5))


def test_expand_mask_shapes():
    assert expand_mask(torch.ones(5, 5)).shape == (1, 1, 5, 5)
    assert expand_mask(torch.ones(3, 5, 5)).shape == (3, 1, 5, 5)
    assert expand_mask(torch.ones(3, 2, 5, 5)).shape == (3, 2, 5, 5)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        expand_mask(torch.ones(5))


def test_causal_mask_with_cache_offset():
    assert torch.equal(causal_mask(3, 3), torch.tril(torch.ones(3, 3, dtype=torch.bool)))
    # Two new queries at positions 3 and 4 of a 5-long sequence.
    assert causal_mask(2, 5).tolist() == [[True, True, True, True, False], [True, True, True, True, True]]


def test_num_heads_must_divide_embed_dim():
    with pytest.raises(ValueError, match="divisible"):
        MultiheadAttention(16, 30, 4)


def test_qkv_init_is_xavier_with_zero_bias():
    mha = MultiheadAttention(64, 64, 4)
    assert torch.count_nonzero(mha.qkv_proj.bias) == 0 and torch.count_nonzero(mha.o_proj.bias) == 0
    bound = math.sqrt(6 / (64 + 192))
    assert mha.qkv_proj.weight.abs().max() <= bound


def _torch_mha_like(mha: MultiheadAttention) -> torch.nn.MultiheadAttention:
    ref = torch.nn.MultiheadAttention(mha.embed_dim, mha.num_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(mha.qkv_proj.weight)
        ref.in_proj_bias.copy_(torch.randn_like(ref.in_proj_bias))
        mha.qkv_proj.bias.copy_(ref.in_proj_bias)
        ref.out_proj.weight.copy_(mha.o_proj.weight)
        ref.out_proj.bias.copy_(torch.randn_like(ref.out_proj.bias))
        mha.o_proj.bias.copy_(ref.out_proj.bias)
    return ref


@pytest.mark.parametrize("use_mask", [False, True])
def test_multihead_attention_equals_torch(use_mask):
    torch.manual_seed(0)
    mha = MultiheadAttention(32, 32, 4)
    ref = _torch_mha_like(mha)
    x = torch.randn(3, 6, 32)
    mask = torch.rand(6, 6) > 0.3 if use_mask else None
    if mask is not None:
        mask.fill_diagonal_(True)
    out, attention = mha(x, mask=mask, return_attention=True)
    ref_out, ref_attention = ref(
        x, x, x, attn_mask=None if mask is None else ~mask, need_weights=True, average_attn_weights=False
    )
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(attention, ref_attention, atol=1e-5, rtol=1e-5)
    # The fused path computes the same function.
    torch.testing.assert_close(mha(x, mask=mask), ref_out, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mask_kind", [None, "padding"])
def test_fused_and_handwritten_paths_agree_causal(mask_kind):
    torch.manual_seed(1)
    mha = MultiheadAttention(16, 16, 2)
    x = torch.randn(2, 7, 16)
    mask = None
    if mask_kind == "padding":
        mask = torch.ones(2, 7, 7)
        mask[1, :, 5:] = 0
    hand, attention = mha(x, mask=mask, causal=True, return_attention=True)
    fused = mha(x, mask=mask, causal=True)
    torch.testing.assert_close(fused, hand, atol=1e-5, rtol=1e-5)
    assert (attention.triu(diagonal=1) == 0).all()
