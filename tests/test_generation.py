"""Causal decoding: causality, fused vs hand-written attention, sampling rules, and the KV cache."""

import pytest
import torch

from tests.conftest import encoder_classifier, gpt_decoder
from transformer_lab.nn import DecoderLM, sample_next_token


def _decoder(block_size: int = 16, positional_encoding: str = "learned", seed: int = 0) -> DecoderLM:
    torch.manual_seed(seed)
    return gpt_decoder(11, block_size, num_heads=4, positional_encoding=positional_encoding).eval()


def test_changing_later_tokens_leaves_earlier_outputs_unchanged():
    model = _decoder()
    x = torch.randint(11, (3, 12))
    changed = x.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % 11
    with torch.no_grad():
        before, after = model(x), model(changed)
    torch.testing.assert_close(after[:, :7], before[:, :7])
    assert not torch.allclose(after[:, 7:], before[:, 7:])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("pad_id", [None, 0])
def test_fused_path_equals_handwritten_path(causal, pad_id):
    """The training path (fused kernel) and the looking-inside path (explicit softmax, taken when
    `hook_pattern` is hooked) compute one function, with and without padding keys."""
    torch.manual_seed(0)
    build = gpt_decoder if causal else encoder_classifier
    model = build(11, num_heads=4, pad_id=pad_id).eval()
    x = torch.randint(1, 11, (2, 10))
    x[0, 8:] = 0  # padding in sequence 0 (an ordinary token when pad_id is None)
    with torch.no_grad():
        fused = model(x)
        hand = model.run_with_hooks(
            x, fwd_hooks=[(lambda name: name.endswith("hook_pattern"), lambda a, h: a)]
        )
    torch.testing.assert_close(fused, hand, atol=1e-5, rtol=1e-5)


def test_generate_shapes_and_greedy_determinism():
    model = _decoder()
    prompt = torch.randint(11, (2, 3))
    first = model.generate(prompt, 10, temperature=0)
    assert first.shape == (2, 13) and torch.equal(first[:, :3], prompt)
    assert torch.equal(model.generate(prompt, 10, temperature=0), first)
    assert model.training is False


def test_greedy_picks_the_argmax_of_the_model():
    model = _decoder()
    prompt = torch.randint(11, (1, 5))
    out = model.generate(prompt, 1, temperature=0)
    with torch.no_grad():
        assert out[0, -1] == model(prompt)[0, -1].argmax()


def test_top_k_never_samples_outside_the_k_best():
    logits = torch.randn(4, 50)
    allowed = torch.topk(logits, 5).indices
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        token = sample_next_token(logits, temperature=1.5, top_k=5, generator=generator)
        assert (token == allowed).any(dim=-1).all()


def test_top_p_never_samples_outside_the_nucleus():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0, -2.0]])
    probs = torch.softmax(logits, -1)[0]
    # Smallest prefix of the sorted tokens with mass >= 0.8: tokens 0 and 1 hold 0.665 + 0.245 = 0.91.
    assert probs[0] < 0.8 <= probs[0] + probs[1]
    generator = torch.Generator().manual_seed(0)
    seen = {sample_next_token(logits, top_p=0.8, generator=generator).item() for _ in range(300)}
    assert seen == {0, 1}


def test_sampling_with_the_same_seed_gives_the_same_text():
    model = _decoder()
    prompt = torch.randint(11, (1, 4))
    runs = [
        model.generate(prompt, 20, temperature=0.8, top_k=5, generator=torch.Generator().manual_seed(7))
        for _ in range(2)
    ]
    assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize("positional_encoding", ["learned", "sinusoidal"])
def test_kv_cache_matches_full_recompute_within_the_block(positional_encoding):
    model = _decoder(block_size=24, positional_encoding=positional_encoding)
    prompt = torch.randint(11, (3, 5))
    cached = model.generate(prompt, 19, temperature=0, use_cache=True)  # 5 + 19 = 24 = block size
    uncached = model.generate(prompt, 19, temperature=0, use_cache=False)
    assert torch.equal(cached, uncached)
    sampled = [
        model.generate(prompt, 19, temperature=1.0, use_cache=c, generator=torch.Generator().manual_seed(3))
        for c in (True, False)
    ]
    assert torch.equal(sampled[0], sampled[1])


def test_kv_cache_past_the_block_reencodes_the_last_half_window():
    """When the cache is full, the last block/2 tokens are re-encoded from position 0 and decoding goes on.

    Reference: recompute from scratch on exactly the context the policy keeps."""
    block = 8
    model = _decoder(block_size=block)
    prompt = torch.randint(11, (2, 3))
    cached = model.generate(prompt, 30, temperature=0, use_cache=True)

    idx, start = prompt, 0  # the cache holds idx[:, start:]
    with torch.no_grad():
        for _ in range(30):
            if idx.size(1) - start > block:  # the next token would not fit: keep the last half window
                start = idx.size(1) - block // 2
            next_token = model(idx[:, start:])[:, -1].argmax(-1, keepdim=True)
            idx = torch.cat([idx, next_token], dim=1)
    assert torch.equal(cached, idx)


def test_long_prompt_is_cropped_to_the_block():
    model = _decoder(block_size=8)
    prompt = torch.randint(11, (1, 20))
    out = model.generate(prompt, 1, temperature=0, use_cache=False)
    with torch.no_grad():
        assert out[0, -1] == model(prompt[:, -8:])[0, -1].argmax()


def test_generate_rejects_bad_arguments():
    model = _decoder()
    prompt = torch.randint(11, (1, 3))
    with pytest.raises(ValueError, match="temperature=-1"):
        model.generate(prompt, 5, temperature=-1)
    with pytest.raises(ValueError, match="top_k=0"):
        model.generate(prompt, 5, top_k=0)
    with pytest.raises(ValueError, match=r"top_p=1\.5"):
        model.generate(prompt, 5, top_p=1.5)
    with pytest.raises(ValueError, match="max_new_tokens=-1"):
        model.generate(prompt, -1)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        model.generate(prompt[0], 5)
    assert not hasattr(encoder_classifier(11), "generate")
