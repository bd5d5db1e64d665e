"""transformer_lab.explain: the arithmetic on hand-made matrices, then sanity checks on trained models."""

import pytest
import torch
import torch.nn.functional as F

from transformer_lab import explain
from transformer_lab.nn import ModelConfig, TokenModel, build_model


def _model(causal: bool = False, num_layers: int = 2, num_heads: int = 2, **settings) -> TokenModel:
    """The course tutorial's architecture (post-norm, sinusoidal positions, MLP head), bidirectional or
    causal."""
    torch.manual_seed(0)
    arch = "decoder" if causal else "encoder"
    return build_model(
        ModelConfig(
            arch=arch, vocab_size=10, num_heads=num_heads, num_layers=num_layers, max_len=64, **settings
        )
    )


def _stochastic(*shape: int) -> torch.Tensor:
    """Random matrices whose rows are probability distributions, like attention weights."""
    return torch.rand(*shape).softmax(dim=-1)


def _reversal(n: int) -> torch.Tensor:
    return torch.eye(n).flip(-1)


# ------------------------------------------------------------------------------------ attention maps
@pytest.mark.parametrize("causal", [False, True])
def test_attention_maps_shapes_rows_and_mode(causal):
    model = _model(causal).train()
    x = torch.randint(10, (3, 7))
    maps = explain.attention_maps(model, x)
    assert model.training  # restored
    assert len(maps) == 2 and all(m.shape == (3, 2, 7, 7) for m in maps)
    for m in maps:
        torch.testing.assert_close(m.sum(-1), torch.ones(3, 2, 7))
        assert torch.equal(m, m.tril()) == causal


def test_head_mean_averages_heads_of_one_layer():
    maps = [_stochastic(2, 4, 5, 5), _stochastic(2, 4, 5, 5), _stochastic(2, 4, 5, 5)]
    assert explain.head_mean(maps, 0).shape == (2, 5, 5)
    torch.testing.assert_close(explain.head_mean(maps, 0), maps[0].mean(1))
    torch.testing.assert_close(explain.head_mean(maps, -1), maps[2].mean(1))


# --------------------------------------------------------------------------------------------- rollout
def test_rollout_multiplies_layers_later_on_the_left():
    torch.manual_seed(0)
    a1, a2 = _stochastic(1, 1, 4, 4), _stochastic(1, 1, 4, 4)
    assert not torch.allclose(a2[0, 0] @ a1[0, 0], a1[0, 0] @ a2[0, 0])
    torch.testing.assert_close(explain.attention_rollout([a1, a2], residual=False)[0], a2[0, 0] @ a1[0, 0])
    eye = torch.eye(4)
    with_residual = (0.5 * a2[0, 0] + 0.5 * eye) @ (0.5 * a1[0, 0] + 0.5 * eye)
    torch.testing.assert_close(explain.attention_rollout([a1, a2])[0], with_residual)


def test_rollout_rows_sum_to_one_and_heads_are_averaged():
    torch.manual_seed(0)
    maps = [_stochastic(3, 4, 6, 6) for _ in range(3)]
    for residual in (True, False):
        rollout = explain.attention_rollout(maps, residual=residual)
        assert rollout.shape == (3, 6, 6) and (rollout >= 0).all()
        torch.testing.assert_close(rollout.sum(-1), torch.ones(3, 6))
    two_heads = torch.stack([_reversal(4), torch.eye(4)]).unsqueeze(0)  # [1, 2, 4, 4]
    torch.testing.assert_close(
        explain.attention_rollout([two_heads], residual=False)[0], 0.5 * _reversal(4) + 0.5 * torch.eye(4)
    )


def test_rollout_counter_example_reverse_then_identity():
    """Layer 1 reverses, layer 2 attends to itself: information flows from input N-1-i to output i.
    The matrix product finds it; an element-wise product of the maps would be all zeros here."""
    n = 6
    maps = [_reversal(n)[None, None], torch.eye(n)[None, None]]
    assert (maps[0] * maps[1]).sum() == 0  # the element-wise "rollout" sees nothing
    torch.testing.assert_close(explain.attention_rollout(maps, residual=False)[0], _reversal(n))
    rollout = explain.attention_rollout(maps)[0]
    torch.testing.assert_close(rollout, 0.5 * _reversal(n) + 0.5 * torch.eye(n))
    assert explain.most_relevant(rollout).tolist() == list(range(n - 1, -1, -1))


def test_rollout_keeps_a_causal_model_causal():
    maps = [_stochastic(1, 2, 5, 5).tril() for _ in range(3)]
    maps = [m / m.sum(-1, keepdim=True) for m in maps]
    rollout = explain.attention_rollout(maps)
    assert torch.equal(rollout, rollout.tril())


# -------------------------------------------------------------------------------- gradient attention
@pytest.mark.parametrize(
    "variant",
    [{}, {"causal": True, "norm_first": True, "activation": "gelu"}, {"positional_encoding": "learned"}],
)
def test_the_explaining_pass_gives_the_models_logits(variant):
    """explain's forward pass (which keeps the attention weights in the graph) must compute exactly
    model(x), and its maps must be the model's attention maps."""
    model = _model(num_layers=2, num_heads=2, **variant).eval()
    x = torch.randint(10, (3, 9))
    logits, maps = explain._logits_and_maps(model, (x,))
    with torch.no_grad():
        torch.testing.assert_close(logits.detach(), model(x), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(torch.stack(maps), torch.stack(model.get_attention_maps(x)))


def test_relevance_accumulates_layers_later_on_the_left():
    """R = (I + A_bar_2)(I + A_bar_1) with A_bar = mean_h relu(grad ⊙ A), for a logit whose gradient with
    respect to layer l's attention is a known matrix W_l (including negative entries, clipped by relu)."""
    torch.manual_seed(0)
    maps = [_stochastic(1, 2, 4, 4).requires_grad_(), _stochastic(1, 2, 4, 4).requires_grad_()]
    weights = [torch.randn(1, 2, 4, 4), torch.randn(1, 2, 4, 4)]
    logit = sum((w * a).sum() for w, a in zip(weights, maps, strict=True))
    relevance = explain._relevance(maps, logit, retain_graph=False)
    a_bar = [(w * a.detach()).clamp(min=0).mean(1)[0] for w, a in zip(weights, maps, strict=True)]
    eye = torch.eye(4)
    torch.testing.assert_close(relevance[0], (eye + a_bar[1]) @ (eye + a_bar[0]))


def test_gradient_is_taken_with_respect_to_the_softmax_output():
    """One post-norm layer with its attention matrix A as an explicit input: d log p(y) / d A computed
    here by hand must give the same relevance, I + mean_h relu(dy/dA ⊙ A), as explain.gradient_attention."""
    model = _model(num_layers=1).eval()
    x = torch.randint(10, (2, 6))
    block = model.blocks[0]
    attn = block.attn
    h = model.pos_embed(model.embed(x)).detach()
    q, k, v = attn.qkv_proj(h).view(2, 6, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    a = torch.softmax(q @ k.transpose(-1, -2) / attn.head_dim**0.5, dim=-1).detach().requires_grad_()
    out = attn.o_proj((a @ v).transpose(1, 2).reshape(2, 6, attn.embed_dim))
    h1 = block.norm1(h + out)
    logits = model.unembed(block.norm2(h1 + block.mlp(h1)))
    log_probs = logits[:, 3].log_softmax(-1)  # relevance explains the predicted class's log-probability
    target = log_probs.argmax(-1)
    (grad,) = torch.autograd.grad(log_probs.gather(1, target[:, None]).sum(), a)
    expected = torch.eye(6) + (grad * a).clamp(min=0).mean(1)
    torch.testing.assert_close(explain.gradient_attention(model, x, position=3), expected.detach())


@pytest.mark.parametrize("causal", [False, True])
def test_gradient_attention_shapes_and_invariants(causal):
    model = _model(causal).train()
    x = torch.randint(10, (4, 8))
    with torch.no_grad():
        before = model.eval()(x)
    model.train()
    relevance = explain.gradient_attention(model, x, position=5)
    assert relevance.shape == (4, 8, 8) and (relevance >= 0).all()
    assert model.training and all(p.grad is None for p in model.parameters())
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x), before)
    if causal:
        assert torch.equal(relevance, relevance.tril())
        assert (relevance[:, 5, 6:] == 0).all()  # output 5 (predicting token 6) cannot depend on the future
    # Sequences do not interact: one batch gives each sequence's own relevance.
    torch.testing.assert_close(relevance[1:2], explain.gradient_attention(model, x[1:2], position=5))


def test_gradient_attention_target_defaults_to_the_prediction():
    model = _model()
    x = torch.randint(10, (3, 8))
    with torch.no_grad():
        predicted = model.eval()(x)[:, 2].argmax(-1)
    default = explain.gradient_attention(model, x, position=2)
    torch.testing.assert_close(default, explain.gradient_attention(model, x, 2, target=predicted))
    other = explain.gradient_attention(model, x, 2, target=(predicted + 1) % 10)
    assert not torch.allclose(default, other)
    single = explain.gradient_attention(model, x[:1], 2, target=int(predicted[0]))
    torch.testing.assert_close(single, default[:1])


def test_gradient_attention_works_under_inference_mode_and_frozen_weights():
    """Lightning validates under inference_mode; relevance still needs autograd."""
    model = _model(causal=True)
    x = torch.randint(10, (2, 6))
    expected = explain.gradient_attention(model, x, position=4)
    with torch.inference_mode():
        x_inference = x.clone()
        torch.testing.assert_close(explain.gradient_attention(model, x_inference, position=4), expected)
    model.requires_grad_(False)
    torch.testing.assert_close(explain.gradient_attention(model, x, position=4), expected)


@pytest.mark.parametrize("chunk_bytes", [1, 10**9])  # one output position per backward pass, or all
def test_gradient_attention_all_stacks_one_row_per_position(monkeypatch, chunk_bytes):
    """The batched backward passes (several output positions at once) give each position's own row."""
    monkeypatch.setattr("transformer_lab.analysis.explain.BATCHED_BYTES", chunk_bytes)
    model = _model(causal=True)
    x = torch.randint(10, (2, 6))
    every = explain.gradient_attention_all(model, x)
    assert every.shape == (2, 6, 6) and torch.equal(every, every.tril())
    for t in range(6):
        torch.testing.assert_close(every[:, t], explain.gradient_attention(model, x, t)[:, t])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_explain_on_gpu_matches_cpu():
    model = _model(causal=True)
    x = torch.randint(10, (2, 6))
    cpu = explain.gradient_attention_all(model, x)
    gpu = explain.gradient_attention_all(model.cuda(), x.cuda())
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-4, rtol=1e-4)
    rollout = explain.attention_rollout(explain.attention_maps(model, x.cuda()))
    assert rollout.is_cuda


def test_most_relevant_excludes_self_and_future():
    relevance = torch.tensor([[5.0, 1.0, 2.0], [3.0, 9.0, 4.0], [1.0, 2.0, 7.0]])
    assert explain.most_relevant(relevance, exclude_self=False).tolist() == [0, 1, 2]
    assert explain.most_relevant(relevance).tolist() == [2, 2, 1]
    assert explain.most_relevant(relevance, causal=True).tolist() == [-1, 0, 1]


# ------------------------------------------------------------------- sanity checks on trained models
SEQ_LEN = 16


def _train_reverse(num_layers: int, num_heads: int, steps: int = 400) -> TokenModel:
    """A reverse-task model trained in a few seconds with a plain PyTorch loop."""
    model = _model(num_layers=num_layers, num_heads=num_heads)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        x = torch.randint(10, (64, SEQ_LEN))
        loss = F.cross_entropy(model(x).flatten(0, 1), x.flip(-1).flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def test_inputs() -> torch.Tensor:
    return torch.randint(10, (200, SEQ_LEN), generator=torch.Generator().manual_seed(123))


@pytest.fixture(scope="module")
def deep_model() -> TokenModel:
    return _train_reverse(num_layers=2, num_heads=4)


def test_cached_patterns_are_the_attention_the_blocks_compute(deep_model, test_inputs):
    """run_with_cache on a trained reverse model gives the maps the tutorial's way gives: each block's
    MultiheadAttention called with return_attention=True on the stream that block reads."""
    x = test_inputs[:20]
    with torch.no_grad():
        _, cache = deep_model.run_with_cache(x)
        for i, block in enumerate(deep_model.blocks):
            stream = cache[f"blocks.{i}.hook_resid_pre"]
            _, expected = block.attn(
                block.norm1(stream) if block.norm_first else stream, return_attention=True
            )
            torch.testing.assert_close(cache[f"blocks.{i}.attn.hook_pattern"], expected)


def _share_reversed(choice: torch.Tensor) -> float:
    """Fraction of (sequence, position i) pairs whose choice is input N-1-i."""
    return (choice == torch.arange(SEQ_LEN - 1, -1, -1)).float().mean().item()


def test_one_layer_attention_is_the_anti_diagonal(test_inputs):
    model = _train_reverse(num_layers=1, num_heads=1)
    with torch.no_grad():
        maps = explain.attention_maps(model, test_inputs)
    assert _share_reversed(maps[0][:, 0].argmax(-1)) >= 0.9


def test_rollout_and_gradient_attention_find_the_reversed_input(deep_model, test_inputs):
    with torch.no_grad():
        assert (deep_model(test_inputs).argmax(-1) == test_inputs.flip(-1)).float().mean() > 0.95
        rollout = explain.attention_rollout(explain.attention_maps(deep_model, test_inputs))
    relevance = explain.gradient_attention_all(deep_model, test_inputs)
    assert _share_reversed(explain.most_relevant(rollout)) >= 0.9
    assert _share_reversed(explain.most_relevant(relevance)) >= 0.9


def test_deletion_changing_the_most_relevant_input_flips_the_output(deep_model, test_inputs):
    """Faithfulness check: replace one input token and see whether output i changes. The token the
    relevance points to must matter far more than a random one."""
    generator = torch.Generator().manual_seed(0)
    x = test_inputs[:50]
    relevance = explain.gradient_attention_all(deep_model, x)
    most = explain.most_relevant(relevance)  # [B, T]
    random = torch.randint(SEQ_LEN, most.shape, generator=generator)
    with torch.no_grad():
        predicted = deep_model(x).argmax(-1)

    def flip_rate(chosen: torch.Tensor) -> float:
        flips = []
        for i in range(SEQ_LEN):
            changed = x.clone()
            rows = torch.arange(x.size(0))
            shift = torch.randint(1, 10, (x.size(0),), generator=generator)
            changed[rows, chosen[:, i]] = (x[rows, chosen[:, i]] + shift) % 10  # a different token
            with torch.no_grad():
                flips.append(deep_model(changed)[:, i].argmax(-1) != predicted[:, i])
        return torch.stack(flips).float().mean().item()

    relevant, baseline = flip_rate(most), flip_rate(random)
    assert relevant >= 0.9 and baseline <= 0.3 and relevant >= 3 * baseline


def test_decoder_relevance_points_one_period_back_on_a_copy_task():
    """Causal decoder on sequences that repeat with period K: output t predicts token t+1 = token t+1-K,
    so its most relevant earlier position must be t+1-K, and nothing after t is relevant."""
    period = 6
    model = _model(causal=True, num_layers=2, num_heads=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(300):
        seq = torch.randint(10, (64, period)).repeat(1, 2)
        loss = F.cross_entropy(model(seq[:, :-1])[:, period - 1 :].flatten(0, 1), seq[:, period:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    x = torch.randint(10, (100, period), generator=torch.Generator().manual_seed(1)).repeat(1, 2)[:, :-1]
    relevance = explain.gradient_attention_all(model.eval(), x)
    assert torch.equal(relevance, relevance.tril())
    positions = torch.arange(period - 1, 2 * period - 1)
    chosen = explain.most_relevant(relevance, causal=True)[:, positions]
    assert (chosen == positions + 1 - period).float().mean() >= 0.9
