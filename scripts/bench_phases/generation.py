"""Phase 3 (`generation`, after `training`).

Generation: tokens/s for 500 new tokens (60 with --quick) from one token, with and without the KV
cache, at block 64 (the trained model) and block 256 (same sizes), in 5 alternating rounds; the
speed-up is the median of the rounds' ratios.
"""

import statistics
from dataclasses import replace

import torch

from bench_phases import Context, register
from bench_phases.common import Mode, progress, quartiles, timed
from transformer_lab.nn import DecoderLM, build_model

BLOCKS = ((64, ""), (256, "_block256"))  # the trained model's block and a longer one; their figures' suffix

ROWS = [
    row
    for block, suffix in BLOCKS
    for row in (
        (
            f"generation, no cache / KV cache (block {block})",
            "{:,.0f} / {:,.0f} tokens/s",
            [f"gen_tokens_per_s_nocache{suffix}", f"gen_tokens_per_s_cache{suffix}"],
        ),
        (f"KV-cache speed-up, block {block}", "{:.2f}x", [f"kv_speedup{suffix}"]),
    )
]

TARGETS = {
    "kv_speedup": (">=", 3.0),
    "kv_speedup_block256": (">=", 5.0),
}


def generation_rates(model: DecoderLM, new_tokens: int, rounds: int) -> tuple[float, float, list[float]]:
    """Tokens/s of `model.generate` from one token without and with the KV cache (medians of `rounds`),
    and each round's speed-up (cached over uncached tokens/s in that round, so drift in the machine's
    speed between rounds cancels)."""
    device = next(model.parameters()).device
    idx = torch.zeros((1, 1), dtype=torch.long, device=device)
    rates: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for use_cache in (False, True):
            generator = torch.Generator(device=device).manual_seed(0)
            run = lambda c=use_cache, g=generator: model.generate(idx, new_tokens, use_cache=c, generator=g)  # noqa: E731
            rates[use_cache].append(new_tokens / timed(device, run))
    speedups = [c / n for c, n in zip(rates[True], rates[False], strict=True)]
    return statistics.median(rates[False]), statistics.median(rates[True]), speedups


@register("generation", rows=ROWS, targets=TARGETS, needs=("training",))
def bench_generation(context: Context) -> dict:
    """Phase 3: the trained shakespeare_cpu model (block 64), and the same sizes at block 256."""
    mode, model = context.mode, context.shared["trained"]
    progress(f"generation: {mode.new_tokens} new tokens at block {model.max_len}")
    generation_rates(model, 8, 1)  # warm-up
    results = generation_figures(model, mode, "")
    long_model = build_model(replace(model.config, max_len=256)).to(next(model.parameters()).device)
    progress(f"generation: {mode.new_tokens} new tokens at block 256")
    return results | generation_figures(long_model, mode, "_block256")


def generation_figures(model: DecoderLM, mode: Mode, suffix: str) -> dict:
    """One model's figures, their keys ending in `suffix` (`BLOCKS`): tokens/s without and with the KV
    cache, and the speed-up's median and quartiles over the rounds."""
    nocache, cache, speedups = generation_rates(model, mode.new_tokens, mode.gen_rounds)
    return {
        f"gen_tokens_per_s_nocache{suffix}": nocache,
        f"gen_tokens_per_s_cache{suffix}": cache,
        f"kv_speedup{suffix}": statistics.median(speedups),
        f"kv_speedup{suffix}_quartiles": quartiles(speedups),
    }
