"""Phase 14 (`families`).

The families people study, against `transformers` at their real sizes: a Pythia-70M-shaped model
(GPT-NeoX: 6 layers of 512, 8 heads, rotary positions on a quarter of each head, parallel attention and
MLP, 50,304 tokens) and a SmolLM-135M-shaped one (Llama: 30 layers of 576, 9 query heads and 3 key-value
heads, SwiGLU of 1,536, RMSNorm, tied embeddings, 49,152 tokens), with random weights, float32, in one
process with the same torch threads. transformers' model is built from the family's config and this
project's `DecoderLM` gets its weights through the family's mapping (`interop.families`), so both compute
the same function (the largest logit difference is reported). Timed, in 9 alternating rounds (the median of
each round's ratio ours / theirs; target <= 1.0 each): a forward pass of 4 x 128 tokens (no cache), a
training step (forward, cross-entropy, backward, AdamW's fused kernel: the optimizer this project's runs
and transformers' Trainer both default to on torch >= 2.8) on the same batch, and 64 new tokens of greedy
generation with the KV cache from an 8-token prompt (both writing all 64: no end-of-text token). And what
the hook points cost when nothing is hooked: the forward pass with them over a copy whose hook points are
plain calls (target < 2%). (--quick: the same shapes with 2 layers, 32 tokens, 16 new tokens, one round.)
"""

import copy
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from bench_phases import Context, register
from bench_phases.common import QUICK, progress, quartiles
from bench_phases.training import without_hook_points
from transformer_lab.interop import families
from transformer_lab.nn import ModelConfig, build_model

SHAPES = {  # name: (family, transformers config class, its arguments)
    "pythia70m": ("gpt_neox", "GPTNeoXConfig", dict(
        vocab_size=50304, hidden_size=512, num_hidden_layers=6, num_attention_heads=8,
        intermediate_size=2048, rotary_pct=0.25, max_position_embeddings=2048, use_parallel_residual=True,
        tie_word_embeddings=False)),
    "smollm135m": ("llama", "LlamaConfig", dict(
        vocab_size=49152, hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
        intermediate_size=1536, max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=True)),
}  # fmt: skip
WHAT = ("forward", "train_step", "generate")

ROWS = [
    row
    for name in SHAPES
    for row in (
        (
            f"families: {name}, forward 4 x 128 tokens, ours / transformers (seconds)",
            "{:.3f} ({:.3f} s / {:.3f} s)",
            [f"family_{name}_forward_ratio", f"family_{name}_forward_s", f"family_{name}_forward_theirs_s"],
        ),
        (
            f"families: {name}, a training step, ours / transformers (seconds)",
            "{:.3f} ({:.3f} s / {:.3f} s)",
            [
                f"family_{name}_train_step_ratio",
                f"family_{name}_train_step_s",
                f"family_{name}_train_step_theirs_s",
            ],
        ),
        (
            f"families: {name}, 64 tokens of greedy generation, ours / transformers (seconds)",
            "{:.3f} ({:.3f} s / {:.3f} s)",
            [
                f"family_{name}_generate_ratio",
                f"family_{name}_generate_s",
                f"family_{name}_generate_theirs_s",
            ],
        ),
        (
            f"families: {name}, hook points unused: forward with / without them; largest logit difference",
            "{:.3f}; {:.1e}",
            [f"family_{name}_hooks_ratio", f"family_{name}_logit_difference"],
        ),
    )
]
TARGETS = {
    **{f"family_{name}_{what}_ratio": ("<=", 1.0) for name in SHAPES for what in WHAT},
    **{f"family_{name}_hooks_ratio": ("<", 1.02) for name in SHAPES},
}


def pair(name: str, quick: bool) -> tuple[torch.nn.Module, torch.nn.Module]:
    """transformers' model of the shape (random weights, float32, eval) and this project's with its
    weights, through the family's mapping."""
    import transformers

    family_name, kind, arguments = SHAPES[name]
    family = families.families()[family_name]
    layers_key = "num_hidden_layers"
    arguments = arguments | ({layers_key: 2} if quick else {}) | {"eos_token_id": None, "bos_token_id": None}
    torch.manual_seed(0)
    config = getattr(transformers, kind)(**arguments)
    theirs = transformers.AutoModelForCausalLM.from_config(config).eval()
    theirs.generation_config.pad_token_id = 0
    settings = family.model_config(config.to_dict(), name)
    ours = build_model(ModelConfig.from_dict(settings)).eval()
    mapping = family.mapping(ours.config)
    shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    if ours.config.tie_embeddings:
        shapes.pop("unembed.weight")
    state = {k: v for k, v in theirs.state_dict().items()}
    state.setdefault("lm_head.weight", state.get("embed_out.weight"))
    weights = families.to_ours(state, mapping, shapes)
    if ours.config.tie_embeddings:
        weights["unembed.weight"] = weights["embed.weight"]
    ours.load_state_dict(weights)
    return ours, theirs


def seconds(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, tokens: torch.Tensor, logits_of) -> None:
    """One training step: next-token cross-entropy, backward, AdamW (fused)."""
    logits = logits_of(model, tokens[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def alternating(mine: Callable[[], object], other: Callable[[], object], rounds: int) -> tuple[list, list]:
    """Seconds of `mine` and of `other` in alternating rounds (after a warm-up of each)."""
    mine(), other()
    times: tuple[list, list] = ([], [])
    for r in range(rounds):
        order = ((0, mine), (1, other)) if r % 2 == 0 else ((1, other), (0, mine))
        for who, work in order:
            times[who].append(seconds(work))
    return times


def bench_shape(name: str, quick: bool, rounds: int, length: int, new: int) -> dict:
    """Forward, training step and generation of one shape, ours against transformers', and the hook
    points' cost."""
    progress(f"families: {name}{' (2 layers)' if quick else ''}: building both models")
    ours, theirs = pair(name, quick)
    tokens = torch.randint(
        0, ours.config.vocab_size, (4, length + 1), generator=torch.Generator().manual_seed(0)
    )
    inputs, prompt = tokens[:, :-1], tokens[:1, :8]

    def ours_logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        return model(x)

    def theirs_logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        return model(x, use_cache=False).logits

    def forward(model: torch.nn.Module, logits_of: Callable) -> Callable[[], object]:
        def run() -> None:
            with torch.no_grad():
                logits_of(model, inputs)

        return run

    with torch.no_grad():
        difference = float((ours_logits(ours, inputs) - theirs_logits(theirs, inputs)).abs().max())
    trained = (copy.deepcopy(ours).train(), copy.deepcopy(theirs).train())
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-5, fused=True) for m in trained]
    work = {
        "forward": (forward(ours, ours_logits), forward(theirs, theirs_logits)),
        "train_step": (
            lambda: step(trained[0], optimizers[0], tokens, ours_logits),
            lambda: step(trained[1], optimizers[1], tokens, theirs_logits),
        ),
        "generate": (
            lambda: ours.generate(prompt, new, temperature=0),
            lambda: theirs.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False),
        ),
    }
    out = {f"family_{name}_logit_difference": difference}
    for what, (mine, other) in work.items():
        times = alternating(mine, other, rounds)
        ratios = [a / b for a, b in zip(*times, strict=True)]
        out[f"family_{name}_{what}_s"] = statistics.median(times[0])
        out[f"family_{name}_{what}_theirs_s"] = statistics.median(times[1])
        out[f"family_{name}_{what}_ratio"] = statistics.median(ratios)
        out[f"family_{name}_{what}_ratio_quartiles"] = quartiles(ratios)
        progress(f"families: {name}, {what}: ours / transformers {out[f'family_{name}_{what}_ratio']:.3f}")
    hooks, plain = copy.deepcopy(ours), without_hook_points(copy.deepcopy(ours))  # two copies alike
    hooked, bare = alternating(forward(hooks, ours_logits), forward(plain, ours_logits), max(rounds, 3))
    ratios = [a / b for a, b in zip(hooked, bare, strict=True)]
    out[f"family_{name}_hooks_ratio"] = statistics.median(ratios)
    out[f"family_{name}_hooks_ratio_quartiles"] = quartiles(ratios)
    out[f"family_{name}_parameters"] = sum(p.numel() for p in ours.parameters())
    return out


@register("families", rows=ROWS, targets=TARGETS)
def bench_families(context: Context) -> dict:
    """Both shapes (see the module docstring)."""
    quick = context.mode is QUICK
    rounds, length, new = (1, 32, 16) if quick else (9, 128, 64)  # rounds vary by +-4%
    out: dict = {}
    for name in SHAPES:
        out |= bench_shape(name, quick, rounds, length, new)
    return out
