"""Phase 6 (`encoder_decoder`).

The encoder-decoder: tokens/s of `EncoderDecoder.generate` for 64 output tokens from sources of 16
tokens, with and without the caches (decoder keys/values, and the cross-attention's keys/values
computed once per source), for a batch of 128 sources (the task's batch: validation and test generate
whole batches) and for one source, on an untrained model of `task=sort`'s sizes whose <eos> is made
impossible so that every run writes all 64 tokens; and the wall time of `python train.py task=sort`
(train, then test) with its test seq_acc (--quick: a few hundred examples, one epoch).
"""

import statistics
import time

import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from bench_phases import Context, register
from bench_phases.common import progress, quartiles, timed
from transformer_lab.data.seq2seq import SPECIALS
from transformer_lab.training.compose import instantiate, run_config
from transformer_lab.training.predictor import build_predictor
from transformer_lab.training.run import train

ENCDEC_OUTPUT_TOKENS = 64


ROWS = [
    (
        f"encoder-decoder generation, {ENCDEC_OUTPUT_TOKENS} tokens x 128 sources, no caches / caches",
        "{:,.0f} / {:,.0f} tokens/s",
        ["encdec_tokens_per_s_nocache", "encdec_tokens_per_s_cache"],
    ),
    ("encoder-decoder cache speed-up, 128 sources", "{:.2f}x", ["encdec_cache_speedup"]),
    (
        f"encoder-decoder generation, {ENCDEC_OUTPUT_TOKENS} tokens x 1 source, no caches / caches",
        "{:,.0f} / {:,.0f} tokens/s",
        ["encdec_tokens_per_s_nocache_batch1", "encdec_tokens_per_s_cache_batch1"],
    ),
    ("encoder-decoder cache speed-up, 1 source", "{:.2f}x", ["encdec_cache_speedup_batch1"]),
    ("sort: python train.py task=sort, wall time", "{:.1f} s", ["sort_seconds"]),
    ("sort: test/seq_acc", "{:.4f}", ["sort_test_seq_acc"]),
]

TARGETS = {
    "encdec_cache_speedup": (">=", 2.0),
    "sort_test_seq_acc": (">=", 0.99),
}


def encoder_decoder_rates(net: nn.Module, sources: Tensor, rounds: int) -> tuple[float, float, list[float]]:
    """Output tokens/s of `net.generate(sources)` without and with the caches (medians of `rounds`), and
    each round's speed-up."""
    rates: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for use_cache in (False, True):
            seconds = timed(sources.device, lambda c=use_cache: net.generate(sources, use_cache=c))
            rates[use_cache].append(sources.size(0) * ENCDEC_OUTPUT_TOKENS / seconds)
    speedups = [c / n for c, n in zip(rates[True], rates[False], strict=True)]
    return statistics.median(rates[False]), statistics.median(rates[True]), speedups


@register("encoder_decoder", rows=ROWS, targets=TARGETS)
def bench_encoder_decoder(context: Context) -> dict:
    """Phase 6: encoder-decoder generation with and without the caches, for a batch of the task's size
    (validation and test generate whole batches) and for one source; then `python train.py task=sort`."""
    mode, workdir = context.mode, context.workdir
    cfg = run_config(workdir / "sort-sizes", ["task=sort"])
    task = instantiate(cfg.data)
    settings = OmegaConf.to_container(cfg.model) | {"max_len": ENCDEC_OUTPUT_TOKENS}
    net = build_predictor(settings, task).net.eval()
    with torch.no_grad():
        net.unembed.bias[task.eos_id] = -1e9  # never stop early: every run writes all the tokens
    generator = torch.Generator().manual_seed(0)
    sources = torch.randint(len(SPECIALS), len(task.vocab), (task.batch_size, 16), generator=generator)
    net.generate(sources[:8], max_new_tokens=8)  # warm-up
    results = {}
    for batch, suffix in ((task.batch_size, ""), (1, "_batch1")):
        progress(
            f"encoder_decoder: {ENCDEC_OUTPUT_TOKENS} tokens for {batch} source(s), with and without caches"
        )
        nocache, cache, speedups = encoder_decoder_rates(net, sources[:batch], mode.gen_rounds)
        results |= {
            f"encdec_tokens_per_s_nocache{suffix}": nocache,
            f"encdec_tokens_per_s_cache{suffix}": cache,
            f"encdec_cache_speedup{suffix}": statistics.median(speedups),
            f"encdec_cache_speedup{suffix}_quartiles": quartiles(speedups),
        }

    overrides = ["task=sort", *mode.sort_overrides]
    progress(f"encoder_decoder: python train.py {' '.join(overrides)}")
    cfg = run_config(workdir / "sort", overrides)
    start = time.perf_counter()
    metrics = train(cfg)
    return results | {
        "sort_seconds": time.perf_counter() - start,
        "sort_test_seq_acc": metrics["test/seq_acc"],
    }
