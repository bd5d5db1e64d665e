"""Benchmark: does training a small Transformer here cost more than writing the loop by hand?

    python scripts/bench.py                          # full run, a few minutes on 2 CPU cores
    python scripts/bench.py --quick                  # every figure in under a minute (the tests run this)
    python scripts/bench.py --json bench.json        # also write the figures as flat JSON
    python scripts/bench.py model.compile=true       # Hydra overrides for the training configuration
    python scripts/bench.py --phases training --threads 1   # only phases 1, 2 and 5; one torch thread

Everything runs in one process. The training contenders take turns in short chunks of steps (round
robin), and each figure is the median over rounds, so a machine that other jobs slow down slows every
contender alike and the ratios stay fair. For the figures with targets, the table and the JSON
(`<key>_quartiles`) also give the middle half of the rounds: how far the median could move by chance.

1. Training throughput (tokens/s) of `experiment=shakespeare_cpu` (block 64, batch 12, 4 layers, 4 heads,
   128 dims): the project's Lightning Trainer (its callbacks, TensorBoard logger and progress bar; no
   validation) + TransformerPredictor + ShakespeareDataModule, against
   * a bare PyTorch loop training a copy of the same module on batches from the same dataset, with the same
     optimizer, schedule and gradient clipping,
   * the same bare loop on a copy of the model whose hook points are removed (plain calls instead of
     identity modules): what the hook points cost when nothing is hooked, and
   * a nanoGPT-style reference: nanoGPT's GPT (no biases) and its CPU training loop (a Python-loop batch
     sampler, the learning rate set by hand each step, `loss.item()` logged every step).
2. Model FLOPs utilisation: (6 N + 12 L d T) training FLOPs per token x tokens/s over the peak matmul rate,
   measured in the same rounds (N = parameters except position embeddings, as nanoGPT counts them).
3. Generation: tokens/s for 500 new tokens (60 with --quick) from one token, with and without the KV
   cache, at block 64 (the trained model) and block 256 (same sizes), in 5 alternating rounds; the
   speed-up is the median of the rounds' ratios.
4. The reverse task: wall time of `python train.py` (the default config: train, then test) and its test/acc
   (--quick: experiment=reverse_tiny, which does not reach 1.0).
6. The encoder-decoder: tokens/s of `EncoderDecoder.generate` for 64 output tokens from sources of 16
   tokens, with and without the caches (decoder keys/values, and the cross-attention's keys/values
   computed once per source), for a batch of 128 sources (the task's batch: validation and test generate
   whole batches) and for one source, on an untrained model of `task=sort`'s sizes whose <eos> is made
   impossible so that every run writes all 64 tokens; and the wall time of `python train.py task=sort`
   (train, then test) with its test seq_acc (--quick: a few hundred examples, one epoch).
5. Peak memory of the training phase: the process's peak RSS on CPU, `torch.cuda.max_memory_allocated`
   on CUDA.
7. A whole run (`--phases end_to_end`): `python train.py experiment=shakespeare_cpu` in a subprocess, as a
   user runs it (its callbacks, validations, checkpoints, figures, samples, head metrics, the test), with
   one more callback (`transformer_lab.training.callbacks.FitTimer`, with the `HookTimes` profiler)
   measuring inside that run. The figure is the
   whole fit's training tokens/s (from the start to the end of `trainer.fit`: training steps, the sanity
   check, every validation with its callbacks, checkpoints, the end-of-training head ablation) over the
   training steps' own tokens/s (`on_train_batch_start` -> `on_train_batch_end` summed: the bare loop's
   time in the same run); start-up before the fit and the test after it are reported separately. Also
   each callback hook's total time in that run. (--quick: 20 steps, validating every 10.)
8. The attention explorer (`--phases explorer`): the page of `scripts/explore.py` for an untrained encoder
   of 8 layers x 8 heads over 256 tokens (the issue's large case; bidirectional maps compress least):
   its size in MB (target < 5), the time to gather its data in Python, and in headless Chromium (when
   `chromium` and playwright are installed) the time from the start of navigation to the first full
   render (target < 1000 ms) and to draw the model view's 64 heatmaps, medians of 3 loads. (--quick: 2 x 2
   over 32 tokens.) That page stores every map (`live=false`); a live page holds the model too, its
   precomputed part under 5 MB and its weights under 20 MB. Then the live page of every ready-made
   model: its size (precomputed part and weights), the time from navigation to the first drawn view and
   to the model decoded and checked, and per update (an input edited in the box, the views redrawn:
   `lastUpdateMs`; the forward pass alone: `forwardMs`) the median over 9 edits that change the first
   token (a causal model recomputes every position; targets: reverse and sort < 50 ms, shakespeare over
   its 64-character context < 100 ms) and over 9 that change the last (a causal model recomputes only
   that position); the long input (512 tokens x 6 layers x 8 heads at model_dim 128: its precomputed
   part, target < 5 MB, and weights, target < 20 MB; its first view, target < 2000 ms; its first live
   update, in a Web Worker); and the parity sweep: 20 test inputs per ready-made model, the page's
   logits and patterns against PyTorch's (largest difference, targets 1e-4 of the logits' scale and
   1e-5) and its greedy outputs (share identical). (--quick: the first two ready-made models, 2 inputs
   each, 64 tokens.)
9. Threads (`--phases threads`): where a second thread starts to pay (the median step time of decoders
   from 10 K to 3 M parameters with one thread and with one per core: the speed-up against the work of a
   step, parameters x tokens), and `python train.py` on a busy machine (one busy process per core in the
   background) with the default `threads=auto` against `threads=1` (target: at most 1.5x), and with a
   thread per core, torch's own default, for what auto avoids.
   (--quick: the two smallest sizes, and experiment=reverse_tiny.)
10. Circuits (`--phases circuits`, `transformer_lab.analysis.circuits`): the scoring time of eap at node level
   on pretrained:reverse_2l4h (256 examples; target < 2 s) and of acdc there (target < 2 min); eap over every
   edge of pretrained:shakespeare (q/k/v split, 128 windows; target < 5 s) and eap_ig with 5 steps (target
   < 5x eap), each from the examples to the scores (both forward passes and the backward pass), medians of
   3; the exact patching reference on both: its time, the copies of the batch per pass, the peak memory it
   adds, and the rank correlation of eap and eap_ig with it (both metrics are logit_diff: Shakespeare's
   corrupted answer is the corrupted run's most likely other token). What the evidence costs, on both: the
   whole analysis (`discover`, the default method) with verify=0 ci=0 and with the defaults verify=20
   ci=0.95 (medians of 3 alternating rounds, and their ratio), and inside the latter the exact patching of
   the top 20 (verify=) and the bootstrap of the intervals and the stability (ci=). (--quick: 16 examples,
   2 windows, once each.)
11. Text (`--phases text`): `python train.py experiment=text_small` on a generated corpus of 20 MB and of
   400 MB (a BPE trained on it, the corpus tokenized into a token file, 100 training steps): each run's peak
   RSS (target: within 100 MB of each other: the token file is read through a memory map), the
   tokenization's MB/s and tokens/s, and a batch's fetch as a share of a training step (target < 2%).
   (--quick: 1 and 2 MB, 5 steps.)
12. Intervals (`--phases intervals`): what `ci=0.95` (the tools' default) costs the other printed tables on
   pretrained:reverse_2l4h with 256 examples (16 with --quick): head ablation, activation patching, the
   logit lens and the deletion curves, each with ci=0 and with ci=0.95 (medians of 3 alternating rounds)
   and their ratio (target < 2x: the intervals resample the per-example numbers, no forward pass).
"""

import argparse
import copy
import json
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from transformer_lab import pretrained
from transformer_lab.data.seq2seq import SPECIALS
from transformer_lab.data.shakespeare import RandomWindowBatches, ShakespeareDataModule
from transformer_lab.nn import DecoderLM, HookPoint, build_model
from transformer_lab.training.compose import instantiate, run_config
from transformer_lab.training.datamodule import LightningTask
from transformer_lab.training.predictor import TransformerPredictor, build_predictor
from transformer_lab.training.run import build_trainer, train

# The training run measured: shakespeare_cpu without validation (the bare loop has none) and without
# snapshots (phase 5 times them within a whole run, as it does validation); everything else of the
# project's training stays: callbacks (checkpoints included), TensorBoard logger, progress bar.
TRAIN_OVERRIDES = ["experiment=shakespeare_cpu", "trainer.limit_val_batches=0", "callbacks.snapshots.count=0"]


QUIET_BAR = "callbacks.progress_bar.refresh_rate=0"


@dataclass(frozen=True)
class Mode:
    """How much to measure: training rounds of `chunk` steps per contender, generation length, reverse run."""

    warmup_rounds: int
    rounds: int
    chunk: int
    new_tokens: int
    gen_rounds: int
    matmul_size: int
    reverse_overrides: tuple[str, ...]
    sort_overrides: tuple[str, ...]
    end_to_end_overrides: tuple[str, ...] = ()
    explorer_shape: tuple[int, int, int] = (8, 8, 256)  # layers, heads, tokens
    explorer_long: int = 512  # tokens of the long live page (6 layers x 8 heads, model_dim 128)
    explorer_sweep: int = 20  # test inputs per ready-made model in the parity sweep
    explorer_models: int | None = None  # how many ready-made models get a live page (None: every one)
    threads_overrides: tuple[str, ...] = (QUIET_BAR,)  # the busy-machine run: `python train.py` itself


QUIET = QUIET_BAR
FULL = Mode(2, 20, 25, 500, 5, 1024, (), ())
QUICK = Mode(
    1,
    2,
    5,
    60,
    1,
    512,
    ("experiment=reverse_tiny", QUIET),
    ("data.train_size=512", "data.val_size=64", "data.test_size=64", "trainer.max_epochs=1", QUIET),
    (
        "trainer.max_steps=20",
        "data.batches_per_epoch=10",
        "data.val_batches=2",
        "callbacks.text_samples.max_new_tokens=20",
        QUIET,
    ),
    explorer_shape=(2, 2, 32),
    explorer_long=64,
    explorer_sweep=2,
    explorer_models=2,
    threads_overrides=("experiment=reverse_tiny", QUIET),
)


PHASES = (
    "training",
    "generation",
    "reverse",
    "encoder_decoder",
    "end_to_end",
    "explorer",
    "threads",
    "circuits",
    "startup",
    "text",
    "intervals",
)

TARGETS = {  # key: (comparison, threshold), as in the issue; checked by the full benchmark only
    "lightning_over_bare": (">=", 0.95),
    "hooks_over_no_hooks": (">=", 0.99),
    "lightning_over_reference": (">=", 1.0),
    "mfu": (">=", 0.60),
    "kv_speedup": (">=", 3.0),
    "kv_speedup_block256": (">=", 5.0),
    "reverse_test_acc": (">=", 1.0),
    "encdec_cache_speedup": (">=", 2.0),
    "sort_test_seq_acc": (">=", 0.99),
    "end_to_end_over_loop": (">=", 0.90),
    "end_to_end_snapshot_share": ("<", 0.02),
    "explorer_mb": ("<", 5.0),
    "explorer_render_ms": ("<", 1000.0),
    "explorer_long_mb": ("<", 5.0),
    "explorer_weights_mb": ("<", 20.0),
    "explorer_update_ms_reverse": ("<", 50.0),
    "explorer_update_ms_sort": ("<", 50.0),
    "explorer_update_ms_shakespeare": ("<", 100.0),
    "explorer_long_first_view_ms": ("<", 2000.0),
    "explorer_parity_logits": ("<", 1e-4),
    "explorer_parity_patterns": ("<", 1e-5),
    "busy_auto_over_one_thread": ("<", 1.5),
}

ROOT = Path(__file__).resolve().parents[1]


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def quartiles(values: list[float]) -> list[float]:
    """[first, third] quartile: the middle half of the rounds, to judge a median against a target."""
    if len(values) < 2:
        return [values[0], values[0]]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return [q1, q3]


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so a clock read after it measures the work itself."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, work: Callable[[], object]) -> float:
    """Seconds `work()` takes, GPU work included."""
    synchronize(device)
    start = time.perf_counter()
    work()
    synchronize(device)
    return time.perf_counter() - start


# ------------------------------------------------------------------------------------------ FLOPs
def train_flops_per_token(num_params: int, num_layers: int, model_dim: int, block_size: int) -> float:
    """6 N + 12 L d T: forward + backward FLOPs per token (Kaplan et al. 2020; PaLM, appendix B).

    6 N counts the weight matmuls (2 N forward, 4 N backward); 12 L d T the attention scores and the
    weighted sum of values (QK^T and AV, each 2 d T forward per layer, twice that backward).
    """
    return 6 * num_params + 12 * num_layers * model_dim * block_size


def counted_params(model: TransformerPredictor) -> int:
    """N of the FLOPs formula, counted as nanoGPT counts it: every parameter except table lookups (position
    embeddings, and the token embedding unless tied to the output layer). Biases and norm weights stay in
    N although they cost about one FLOP per token rather than six: 0.9% of N for shakespeare_cpu, so the
    MFU is overstated by that much (nanoGPT's bias-free model: 0.1%)."""
    net = model.net
    lookups = [net.pos_embed, *([] if net.config.tie_embeddings else [net.embed])]
    looked_up = {id(p) for m in lookups for p in m.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in looked_up)


def peak_matmul_flops(size: int, device: torch.device, dtype: torch.dtype, seconds: float = 0.15) -> float:
    """FLOP/s of repeated [size, size] @ [size, size] products (2 size^3 FLOPs each) for about `seconds`."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    a @ b  # first call: allocation and kernel selection
    count, elapsed = 0, 0.0
    while elapsed < seconds:
        elapsed += timed(device, lambda: a @ b)
        count += 1
    return count * 2 * size**3 / elapsed


# --------------------------------------------------------------------------------- the contenders
class BareLoop:
    """The training loop one writes by hand: the same module, optimizer, schedule and clipping as the
    Lightning run, on batches drawn straight from the same dataset class."""

    def __init__(self, model: TransformerPredictor, batches: Iterator, clip: float | None, precision: str):
        self.model = model.train()
        self.model.configure_model()  # e.g. model.compile=true, exactly as Lightning applies it
        config = model.configure_optimizers()
        self.optimizer = config["optimizer"]
        self.scheduler = config["lr_scheduler"]["scheduler"]
        self.batches = batches
        self.clip = clip
        self.device = next(model.parameters()).device
        bf16 = precision.startswith("bf16")
        self.autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bf16)

    def steps(self, n: int) -> None:
        for _ in range(n):
            x, y = (t.to(self.device, non_blocking=True) for t in next(self.batches))
            with self.autocast:
                logits = self.model(x)
                loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
            self.optimizer.step()
            self.scheduler.step()


class _PlainIdentity:
    """A hook point's function without the module: a plain call (and never hooked)."""

    is_hooked = False

    def __call__(self, x: Tensor) -> Tensor:
        return x


def without_hook_points(model: nn.Module) -> nn.Module:
    """The model with every HookPoint module replaced by a plain identity call: the same arithmetic,
    without the `nn.Module.__call__` machinery of the hook points."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, HookPoint):
                delattr(module, name)
                setattr(module, name, _PlainIdentity())
    return model


class ReferenceGPT(nn.Module):
    """nanoGPT's architecture with its defaults: pre-norm blocks, GELU MLP of 4 d, learned positions,
    tied embeddings, and no biases in Linear or LayerNorm layers."""

    def __init__(self, vocab_size: int, block_size: int, num_layers: int, num_heads: int, dim: int):
        super().__init__()
        self.num_heads = num_heads
        self.wte = nn.Embedding(vocab_size, dim)
        self.wpe = nn.Embedding(block_size, dim)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "ln_1": nn.LayerNorm(dim, bias=False),
                    "qkv": nn.Linear(dim, 3 * dim, bias=False),
                    "proj": nn.Linear(dim, dim, bias=False),
                    "ln_2": nn.LayerNorm(dim, bias=False),
                    "fc": nn.Linear(dim, 4 * dim, bias=False),
                    "fc_proj": nn.Linear(4 * dim, dim, bias=False),
                }
            )
            for _ in range(num_layers)
        )
        self.ln_f = nn.LayerNorm(dim, bias=False)
        self.lm_head = nn.Linear(dim, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        for p in self.parameters():
            if p.ndim == 2:
                nn.init.normal_(p, std=0.02)

    def _attention(self, block: nn.ModuleDict, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = block.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.num_heads, d // self.num_heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return block.proj(y.transpose(1, 2).contiguous().view(b, t, d))

    def forward(self, idx: Tensor, targets: Tensor) -> Tensor:
        """Token ids [B, T] and next tokens [B, T] -> mean cross-entropy."""
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = x + self._attention(block, block.ln_1(x))
            x = x + block.fc_proj(F.gelu(block.fc(block.ln_2(x))))
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class ReferenceLoop:
    """nanoGPT's training loop as its CPU command runs it (`--device=cpu --compile=False --log_interval=1`):
    batches gathered by a Python loop over random offsets into a uint16 array, the cosine learning rate
    set on every step, gradient clipping at 1.0, AdamW (fused on CUDA only, as nanoGPT does) with weight
    decay 0.1 on 2-D parameters, and the loss read with `.item()` every step."""

    def __init__(self, data: Tensor, cfg: DictConfig, vocab_size: int, device: torch.device):
        self.data = data.numpy().astype(np.uint16)
        self.block, self.batch = cfg.data.block_size, cfg.data.batch_size
        m = cfg.model
        self.model = ReferenceGPT(vocab_size, self.block, m.num_layers, m.num_heads, m.model_dim).to(device)
        params = list(self.model.parameters())
        groups = [
            {"params": [p for p in params if p.ndim >= 2], "weight_decay": 0.1},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
        ]
        self.optimizer = torch.optim.AdamW(groups, lr=m.lr, betas=(0.9, 0.99), fused=device.type == "cuda")
        self.lr, self.warmup, self.max_iters = m.lr, m.warmup, cfg.trainer.max_steps
        self.device = device
        self.iter = 0
        self.last_loss = 0.0

    def _get_batch(self) -> tuple[Tensor, Tensor]:
        ix = torch.randint(len(self.data) - self.block, (self.batch,))
        x = torch.stack([torch.from_numpy(self.data[i : i + self.block].astype(np.int64)) for i in ix])
        y = torch.stack(
            [torch.from_numpy(self.data[i + 1 : i + 1 + self.block].astype(np.int64)) for i in ix]
        )
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def _get_lr(self) -> float:
        if self.iter < self.warmup:
            return self.lr * (self.iter + 1) / (self.warmup + 1)
        ratio = min(1.0, (self.iter - self.warmup) / max(1, self.max_iters - self.warmup))
        return self.lr / 10 + 0.5 * (1 + math.cos(math.pi * ratio)) * (self.lr - self.lr / 10)

    def steps(self, n: int) -> None:
        for _ in range(n):
            for group in self.optimizer.param_groups:
                group["lr"] = self._get_lr()
            x, y = self._get_batch()
            loss = self.model(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.last_loss = loss.item()
            self.iter += 1

    def flops_per_token(self) -> float:
        n = sum(p.numel() for p in self.model.parameters()) - self.model.wpe.weight.numel()
        return train_flops_per_token(n, len(self.model.blocks), self.model.wte.embedding_dim, self.block)


class RoundRobin(L.Callback):
    """Runs inside the Lightning fit: every `chunk` training steps it stops Lightning's clock, lets the
    other contenders train `chunk` steps each and measures the peak matmul rate, then restarts the clock.
    So Lightning's time covers whole steps with every hook, and all contenders share each round's load."""

    def __init__(self, mode: Mode, device: torch.device, others: dict[str, Callable[[int], None]], dtype):
        self.mode, self.device, self.others, self.dtype = mode, device, others, dtype
        self.seconds: dict[str, list[float]] = {"lightning": [], **{k: [] for k in others}, "peak": []}
        self._steps = 0
        self._start = 0.0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        synchronize(self.device)
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        self._steps += 1
        if self._steps % self.mode.chunk:
            return
        synchronize(self.device)
        self.seconds["lightning"].append(time.perf_counter() - self._start)
        names = list(self.others)
        if len(self.seconds["lightning"]) % 2:  # alternate the order, so neither always follows Lightning
            names.reverse()
        for name in names:
            self.seconds[name].append(timed(self.device, lambda n=name: self.others[n](self.mode.chunk)))
        self.seconds["peak"].append(peak_matmul_flops(self.mode.matmul_size, self.device, self.dtype))
        done = len(self.seconds["lightning"])
        total = self.mode.warmup_rounds + self.mode.rounds
        progress(
            f"training: round {done}/{total}" + (" (warm-up)" if done <= self.mode.warmup_rounds else "")
        )
        synchronize(self.device)
        self._start = time.perf_counter()

    def measured(self, name: str) -> list[float]:
        """Seconds per chunk after the warm-up rounds (compilation, allocator and cache warm-up)."""
        return self.seconds[name][self.mode.warmup_rounds :]


def bench_training(mode: Mode, overrides: list[str], workdir: Path) -> tuple[dict, DecoderLM]:
    """Phase 1, 2 and 5: throughput of the three contenders, MFU, peak memory."""
    total_steps = (mode.warmup_rounds + mode.rounds) * mode.chunk
    cfg = run_config(
        workdir / "shakespeare",
        [*TRAIN_OVERRIDES, f"trainer.max_steps={total_steps}", f"model.max_iters={total_steps}", *overrides],
    )
    datamodule: ShakespeareDataModule = instantiate(cfg.data)
    model = build_predictor(OmegaConf.to_container(cfg.model, resolve=True), datamodule)
    trainer = build_trainer(cfg)
    device = trainer.strategy.root_device
    precision = str(trainer.precision)
    dtype = torch.bfloat16 if precision.startswith("bf16") else torch.float32

    def batches() -> Iterator:
        return iter(
            RandomWindowBatches(datamodule.train_data, datamodule.block_size, datamodule.batch_size, 2**62)
        )

    clip = cfg.trainer.gradient_clip_val
    bare = BareLoop(copy.deepcopy(model).to(device), batches(), clip, precision)
    unhooked = copy.deepcopy(model)
    without_hook_points(unhooked.net)
    bare_no_hooks = BareLoop(unhooked.to(device), batches(), clip, precision)
    reference = ReferenceLoop(datamodule.train_data, cfg, len(datamodule.vocab), device)
    others = {"bare": bare.steps, "bare_no_hooks": bare_no_hooks.steps, "reference": reference.steps}
    timer = RoundRobin(mode, device, others, dtype)
    trainer.callbacks.append(timer)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    progress(f"training: {total_steps} steps per contender on {device} ({precision}), chunks of {mode.chunk}")
    trainer.fit(model, datamodule=LightningTask(datamodule))
    if device.type == "cuda":
        peak_mb = torch.cuda.max_memory_allocated(device) / 2**20
    else:  # ru_maxrss is in kilobytes on Linux (bytes on macOS)
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (
            2**20 if sys.platform == "darwin" else 2**10
        )

    tokens = mode.chunk * datamodule.batch_size * datamodule.block_size
    names = ("lightning", "bare", "bare_no_hooks", "reference")
    rates = {name: [tokens / s for s in timer.measured(name)] for name in names}
    peaks = timer.measured("peak")
    h = model.net.config
    flops = train_flops_per_token(counted_params(model), h.num_layers, h.model_dim, datamodule.block_size)
    by_round = lambda a, b: [x / y for x, y in zip(rates[a], rates[b], strict=True)]  # noqa: E731
    mfu_by_round = lambda name, f: [r * f / p for r, p in zip(rates[name], peaks, strict=True)]  # noqa: E731
    per_round = {  # one value per round, each from that round's own measurements
        "lightning_over_bare": by_round("lightning", "bare"),
        "hooks_over_no_hooks": by_round("bare", "bare_no_hooks"),
        "lightning_over_reference": by_round("lightning", "reference"),
        "mfu": mfu_by_round("lightning", flops),
    }
    results = {
        "device": str(device),
        "precision": precision,
        "bare_tokens_per_s": statistics.median(rates["bare"]),
        "bare_no_hooks_tokens_per_s": statistics.median(rates["bare_no_hooks"]),
        "lightning_tokens_per_s": statistics.median(rates["lightning"]),
        "reference_tokens_per_s": statistics.median(rates["reference"]),
        **{key: statistics.median(values) for key, values in per_round.items()},
        **{f"{key}_quartiles": quartiles(values) for key, values in per_round.items()},
        "flops_per_token": flops,
        "peak_gflops": statistics.median(peaks) / 1e9,
        "bare_mfu": statistics.median(mfu_by_round("bare", flops)),
        "reference_mfu": statistics.median(mfu_by_round("reference", reference.flops_per_token())),
        "peak_rss_mb": peak_mb,
    }
    return results, model.net.to(device)  # Lightning moves the model back to the CPU after fit


# ------------------------------------------------------------------------------------- generation
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


def bench_generation(mode: Mode, model: DecoderLM) -> dict:
    """Phase 3: the trained shakespeare_cpu model (block 64), and the same sizes at block 256."""
    progress(f"generation: {mode.new_tokens} new tokens at block {model.max_len}")
    generation_rates(model, 8, 1)  # warm-up
    nocache, cache, speedups = generation_rates(model, mode.new_tokens, mode.gen_rounds)
    long_model = build_model(replace(model.config, max_len=256)).to(next(model.parameters()).device)
    progress(f"generation: {mode.new_tokens} new tokens at block 256")
    nocache_256, cache_256, speedups_256 = generation_rates(long_model, mode.new_tokens, mode.gen_rounds)
    return {
        "gen_tokens_per_s_nocache": nocache,
        "gen_tokens_per_s_cache": cache,
        "kv_speedup": statistics.median(speedups),
        "kv_speedup_quartiles": quartiles(speedups),
        "gen_tokens_per_s_nocache_block256": nocache_256,
        "gen_tokens_per_s_cache_block256": cache_256,
        "kv_speedup_block256": statistics.median(speedups_256),
        "kv_speedup_block256_quartiles": quartiles(speedups_256),
    }


# ---------------------------------------------------------------------------------------- reverse
def bench_reverse(mode: Mode, workdir: Path) -> dict:
    """Phase 4: `python train.py` (the reverse task, default config): fit, then test the best checkpoint."""
    overrides = list(mode.reverse_overrides)
    progress(f"reverse: python train.py {' '.join(overrides)}".rstrip())
    cfg = run_config(workdir / "reverse", overrides)
    start = time.perf_counter()
    metrics = train(cfg)
    return {"reverse_seconds_to_100": time.perf_counter() - start, "reverse_test_acc": metrics["test/acc"]}


# -------------------------------------------------------------------------------- encoder-decoder
ENCDEC_OUTPUT_TOKENS = 64


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


def bench_encoder_decoder(mode: Mode, workdir: Path) -> dict:
    """Phase 6: encoder-decoder generation with and without the caches, for a batch of the task's size
    (validation and test generate whole batches) and for one source; then `python train.py task=sort`."""
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


# ------------------------------------------------------------------------------------- end to end
END_TO_END_COMMAND = ("train.py", "experiment=shakespeare_cpu")


def bench_end_to_end(mode: Mode, overrides: list[str], workdir: Path, threads: int | None) -> dict:
    """Phase 7: `python train.py experiment=shakespeare_cpu` in a subprocess, a `FitTimer` measuring the
    fit from inside; the figure is the whole fit's tokens/s over its training steps' tokens/s."""
    timing_path = workdir / "end_to_end" / "fit_timing.json"
    command = [
        sys.executable,
        *END_TO_END_COMMAND,
        *mode.end_to_end_overrides,
        *overrides,
        f"paths.log_dir={workdir / 'end_to_end'}",
        "+callbacks.fit_timer._target_=transformer_lab.training.callbacks.FitTimer",
        "+trainer.profiler._target_=transformer_lab.training.callbacks.HookTimes",
        f"+callbacks.fit_timer.path={timing_path}",
    ]
    env = os.environ | ({"OMP_NUM_THREADS": str(threads)} if threads else {})
    progress(f"end_to_end: python {' '.join(command[1:])}")
    start = time.time()
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    end = time.time()
    if run.returncode != 0:
        sys.exit(f"error: the end-to-end run failed (exit {run.returncode}): {run.stderr.strip()[-2000:]}")
    timing = json.loads(timing_path.read_text())
    (metrics_path,) = (workdir / "end_to_end").glob("*/*/metrics.json")
    metrics = json.loads(metrics_path.read_text())
    fit, steps, tokens = timing["fit_seconds"], timing["train_step_seconds"], timing["train_tokens"]
    # the snapshots (the Snapshots callback, on by default): their hooks' time in the fit, their files
    snapshot_seconds = sum(
        s for hook, s in timing["callback_seconds"].items() if hook.startswith("Snapshots.")
    )
    snapshot_files = list((metrics_path.parent / "checkpoints" / "snapshots").glob("step_*.ckpt"))
    return {
        "end_to_end_snapshot_share": snapshot_seconds / fit,
        "end_to_end_snapshot_seconds": snapshot_seconds,
        "end_to_end_snapshots": len(snapshot_files),
        "end_to_end_snapshot_mb": sum(f.stat().st_size for f in snapshot_files) / 1e6,
        "end_to_end_over_loop": steps / fit,  # (tokens / fit) / (tokens / steps)
        "end_to_end_fit_tokens_per_s": tokens / fit,
        "end_to_end_step_tokens_per_s": tokens / steps,
        "end_to_end_train_tokens": tokens,
        "end_to_end_train_steps": timing["train_steps"],
        "end_to_end_fit_seconds": fit,
        "end_to_end_step_seconds": steps,
        "end_to_end_outside_steps_seconds": fit - steps,
        "end_to_end_validation_seconds": timing["validation_seconds"],
        "end_to_end_validations": timing["validations"],
        "end_to_end_sanity_seconds": timing["sanity_seconds"],
        "end_to_end_startup_seconds": timing["fit_start_time"] - start,
        "end_to_end_after_fit_seconds": end - timing["fit_end_time"],
        "end_to_end_process_seconds": end - start,
        "end_to_end_val_loss": metrics.get("val/loss"),
        "end_to_end_test_loss": metrics.get("test/loss"),
        "end_to_end_callback_seconds": timing["callback_seconds"],
    }


THREAD_SIZES = (  # (model_dim, layers, tokens per sequence, sequences per batch): small to shakespeare_cpu
    (32, 1, 16, 128),
    (64, 2, 32, 64),
    (128, 4, 64, 12),
    (128, 4, 64, 64),
    (256, 4, 128, 32),
)


@contextmanager
def busy_cores() -> Iterator[int]:
    """One busy process per core in the background (a laptop with other programs, a shared machine)."""
    count = os.cpu_count() or 1
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(1.0)  # let the load show in /proc/stat
        yield count
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


def step_seconds(config: dict, tokens: int, batch: int, threads: int, steps: int) -> float:
    """Median seconds of a training step (forward, backward, AdamW) of a decoder of these sizes."""
    torch.set_num_threads(threads)
    model = build_model(dict(arch="decoder", vocab_size=65, max_len=tokens, **config))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(65, (batch, tokens))
    times = []
    for _ in range(steps + 2):
        start = time.perf_counter()
        loss = F.cross_entropy(model(x).flatten(0, 1), x.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return statistics.median(times[2:])


def bench_threads(mode: Mode, workdir: Path) -> dict:
    """Phase 9: where a second thread starts to pay (a quiet machine: the step time of a range of model
    sizes with 1 and with every core's thread), and a run on a busy machine (one busy process per core)
    with threads=auto, the default, against threads=1."""
    results: dict = {"thread_sizes": []}
    cores = os.cpu_count() or 1
    before = torch.get_num_threads()
    for dim, layers, tokens, batch in THREAD_SIZES[: 2 if mode is QUICK else None]:
        config = dict(model_dim=dim, num_layers=layers, num_heads=4, norm_first=True, output_mlp=False)
        params = sum(
            p.numel()
            for p in build_model(dict(arch="decoder", vocab_size=65, max_len=tokens, **config)).parameters()
        )
        one = step_seconds(config, tokens, batch, 1, mode.rounds * 5)
        many = step_seconds(config, tokens, batch, cores, mode.rounds * 5)
        results["thread_sizes"].append(
            {
                "decoder": f"d={dim} L={layers} T={tokens} B={batch}",
                "parameters": params,
                "work": params * tokens * batch,
                "one_thread_s": one,
                f"{cores}_threads_s": many,
                "speedup": one / many,
            }
        )
        progress(f"threads: d={dim} L={layers} T={tokens} B={batch}: x{one / many:.2f} with {cores} threads")
    torch.set_num_threads(before)
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    seconds = {}
    with busy_cores():
        results["busy_load_average"] = os.getloadavg()[0]
        for name, extra in (("auto", []), ("one", ["threads=1"]), ("every_core", [f"threads={cores}"])):
            command = [
                sys.executable,
                "train.py",
                *mode.threads_overrides,
                *extra,
                f"paths.log_dir={workdir / name}",
            ]
            progress(f"threads: busy machine, python {' '.join(command[1:])}")
            start = time.perf_counter()
            run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
            seconds[name] = time.perf_counter() - start
            if run.returncode != 0:
                sys.exit(f"error: the busy-machine run failed: {run.stderr.strip()[-2000:]}")
    results.update(
        busy_auto_seconds=seconds["auto"],
        busy_one_thread_seconds=seconds["one"],
        busy_auto_over_one_thread=seconds["auto"] / seconds["one"],
        busy_every_core_seconds=seconds["every_core"],
        busy_every_core_over_one_thread=seconds["every_core"] / seconds["one"],
    )
    return results


def threads_table(results: dict) -> str:
    """Where a second thread pays: each decoder's training step with one thread and with one per core."""
    many = next(key for key in results["thread_sizes"][0] if key.endswith("_threads_s"))
    lines = [
        f"| decoder (model_dim, layers, tokens, batch) | parameters | step, 1 thread | step, {many[:-10]} "
        "threads | speed-up |",
        "|---|---|---|---|---|",
    ]
    for size in results["thread_sizes"]:
        lines.append(
            f"| {size['decoder']} | {size['parameters']:,} | {size['one_thread_s'] * 1e3:.1f} ms | "
            f"{size[many] * 1e3:.1f} ms | {size['speedup']:.2f}x |"
        )
    return "\n".join(lines)


def end_to_end_table(results: dict) -> str:
    """Where the whole run's time went: the parts of the process, then each callback hook's total."""
    r = {k.removeprefix("end_to_end_"): v for k, v in results.items() if k.startswith("end_to_end_")}
    lines = [
        f"Whole run: python {' '.join(END_TO_END_COMMAND)} ({r['train_steps']} steps, "
        f"{r['validations']} validations)",
        "| part of the run | seconds | share of the fit |",
        "|---|---|---|",
        f"| start-up: interpreter, imports, config, data, model (before the fit) | "
        f"{r['startup_seconds']:.1f} | |",
        f"| the fit (on_fit_start -> on_fit_end) | {r['fit_seconds']:.1f} | 100% |",
        f"| - training steps (on_train_batch_start -> on_train_batch_end) | {r['step_seconds']:.1f} | "
        f"{r['step_seconds'] / r['fit_seconds']:.1%} |",
        f"| - validations, their callbacks included | {r['validation_seconds']:.1f} | "
        f"{r['validation_seconds'] / r['fit_seconds']:.1%} |",
        f"| - sanity check | {r['sanity_seconds']:.1f} | {r['sanity_seconds'] / r['fit_seconds']:.1%} |",
        f"| after the fit: test of best.ckpt, metrics, exit | {r['after_fit_seconds']:.1f} | |",
        "",
        "| callback hook (total over the run) | seconds | share of the fit |",
        "|---|---|---|",
    ]
    for hook, seconds in r["callback_seconds"].items():
        if seconds >= 0.005:
            lines.append(f"| {hook} | {seconds:.3f} | {seconds / r['fit_seconds']:.2%} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ explorer
def bench_explorer(mode: Mode, workdir: Path) -> dict:
    """Phase 8: the explorer page's size for an untrained encoder of `mode.explorer_shape`, and its render
    times in headless Chromium (skipped, with a note, where chromium or playwright is missing); then the
    live pages of the ready-made models, the long input and the parity sweep (`bench_live_pages`)."""
    import shutil

    from transformer_lab.explorer import explore
    from transformer_lab.nn import ModelConfig

    layers, heads, tokens = mode.explorer_shape
    progress(f"explorer: {layers} layers x {heads} heads x {tokens} tokens")
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=65, num_layers=layers, num_heads=heads, model_dim=128, max_len=tokens)
    model = build_model(config).eval()
    start = time.perf_counter()
    page = explore(model, torch.randint(0, 65, (tokens,)), title="bench", live=False)  # every map stored
    results = {
        "explorer_collect_seconds": time.perf_counter() - start,
        "explorer_mb": len(page.encode()) / 1e6,
    }
    path = page.save(workdir / "explorer.html")
    chromium = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        chromium = None
    if chromium is None:
        progress(
            "explorer: no chromium or playwright; render time not measured (apt-get install -y chromium)"
        )
        return results
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
    loads, model_views = [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=args)
        for _ in range(3):
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            tab.goto(path.resolve().as_uri())
            tab.wait_for_selector("body[data-ready='true']", timeout=60_000)
            loads.append(tab.evaluate("window.explorerLoadMs"))
            tab.click(".tab[data-view='model']")
            model_views.append(tab.evaluate("window.explorerTimings.model"))
            tab.close()
        results |= {
            "explorer_render_ms": statistics.median(loads),
            "explorer_model_view_ms": statistics.median(model_views),
        }
        results |= bench_live_pages(mode, workdir, browser)
        browser.close()
    return results


def _open_live(browser, path: Path):
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    tab.goto(path.resolve().as_uri())
    tab.wait_for_selector("body[data-live='true']", timeout=120_000)
    return tab


def _edit_timings(tab, tokens: list[str], separator: str, symbols: list[str], position: int) -> tuple:
    """Median lastUpdateMs and forwardMs over 9 edits of the token at `position` (after one warm-up)."""
    updates, forwards = [], []
    for k in range(10):
        edited = list(tokens)
        edited[position] = (
            symbols[k % len(symbols)] if symbols[k % len(symbols)] != tokens[position] else symbols[-1]
        )
        tab.evaluate("(text) => window.transformerLab.setInput(text)", separator.join(edited))
        if k:
            updates.append(tab.evaluate("window.transformerLab.lastUpdateMs"))
            forwards.append(tab.evaluate("window.transformerLab.forwardMs"))
    return statistics.median(updates), statistics.median(forwards)


def bench_live_pages(mode: Mode, workdir: Path, browser) -> dict:
    """The live page of every ready-made model (sizes, first view, decode, per-update times), the long
    input, and the parity sweep of the page's forward pass against PyTorch."""
    from transformer_lab.checkpoint import load
    from transformer_lab.explorer import explore
    from transformer_lab.explorer.live import same_or_tied
    from transformer_lab.nn import ModelConfig, evaluating

    results: dict = {}
    worst_logits, worst_patterns, same, generated = 0.0, 0.0, 0, 0
    for name in pretrained.names()[: mode.explorer_models]:
        progress(f"explorer: live page of pretrained:{name}")
        checkpoint = load(f"pretrained:{name}")
        model = checkpoint.model
        inputs, labels = checkpoint.without_padding(*checkpoint.example(0))
        page = explore(checkpoint, inputs, labels, title=name)
        results[f"explorer_page_mb_{name}"] = len(page.encode()) / 1e6
        results[f"explorer_weights_mb_{name}"] = page.weight_chars / 1e6
        tab = _open_live(browser, page.save(workdir / f"{name}.html"))
        results[f"explorer_first_view_ms_{name}"] = tab.evaluate("window.explorerLoadMs")
        results[f"explorer_live_ms_{name}"] = tab.evaluate("window.transformerLab.readyMs")
        box = tab.evaluate("document.getElementById('input-box').value")
        separator = checkpoint.tokenizer.separator
        tokens = checkpoint.tokenizer.split(box)
        specials = {model.config.pad_id, model.config.bos_id, model.config.eos_id, model.config.sep_id}
        symbols = [t for i, t in enumerate(model.vocab) if i not in specials and t not in ("\n", " ")]
        for where, position in (("", 0), ("_last", len(tokens) - 1)):
            update, forward = _edit_timings(tab, tokens, separator, symbols, position)
            results[f"explorer_update_ms_{name}{where}"] = update
            results[f"explorer_forward_ms_{name}{where}"] = forward
        # the parity sweep: test inputs, the page's forward pass against PyTorch's
        for index in range(mode.explorer_sweep):
            x, _ = checkpoint.without_padding(*checkpoint.example(index))
            given = (
                x[0][0].tolist() if len(x) == 1 else {"source": x[0][0].tolist(), "target": x[1][0].tolist()}
            )
            got = tab.evaluate("(x) => window.transformerLab.forward(x)", given)
            with evaluating(model):
                logits, cache = model.run_with_cache(*x, names_filter=lambda n: n.endswith("hook_pattern"))
            scale = float(logits.abs().max())
            worst_logits = max(
                worst_logits, float((torch.tensor(got["logits"]) - logits[0]).abs().max()) / scale
            )
            for layer, page_pattern in zip(model.attention_layers(), got["patterns"], strict=True):
                pattern = cache[f"{layer.name}.hook_pattern"][0]
                worst_patterns = max(
                    worst_patterns, float((torch.tensor(page_pattern) - pattern).abs().max())
                )
            if model.generates:
                if model.num_inputs == 2:
                    expected = model.answer(x[0])[0].tolist()
                    page_out = tab.evaluate("(s) => window.transformerLab.answer(s)", x[0][0].tolist())
                else:
                    prompt = x[0][:, :8]
                    expected = model.generate(prompt, 32, temperature=0)[0].tolist()
                    page_out = tab.evaluate(
                        "(p) => window.transformerLab.generate(p, {maxNewTokens: 32})", prompt[0].tolist()
                    )
                source = x[0] if model.num_inputs == 2 else None
                same += same_or_tied(model, expected, page_out, source)
                generated += 1
        tab.close()
    results["explorer_parity_logits"] = worst_logits
    results["explorer_parity_patterns"] = worst_patterns
    if generated:
        results["explorer_parity_generation"] = same / generated
    # the long input: 512 tokens x 6 layers x 8 heads at model_dim 128
    length = mode.explorer_long
    progress(f"explorer: the long input, {length} tokens x 6 layers x 8 heads")
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=65, num_layers=6, num_heads=8, model_dim=128, max_len=length)
    long_model = build_model(config).eval()
    start = time.perf_counter()
    page = explore(long_model, torch.randint(0, 65, (length,)), title="long input")
    results["explorer_long_collect_seconds"] = time.perf_counter() - start
    results["explorer_long_mb"] = (len(page.encode()) - page.weight_chars) / 1e6  # the precomputed part
    results["explorer_weights_mb"] = page.weight_chars / 1e6
    path = page.save(workdir / "long.html")
    views, ready, updates = [], [], []
    for _ in range(3):
        tab = _open_live(browser, path)
        views.append(tab.evaluate("window.explorerLoadMs"))
        ready.append(tab.evaluate("window.transformerLab.readyMs"))
        text = tab.evaluate("document.getElementById('input-box').value").split()
        text[0] = "1" if text[0] != "1" else "2"
        tab.evaluate("(t) => window.transformerLab.setInput(t)", " ".join(text))
        updates.append(tab.evaluate("window.transformerLab.lastUpdateMs"))
        results["explorer_long_worker"] = float(tab.evaluate("window.transformerLab.worker"))
        tab.close()
    results["explorer_long_first_view_ms"] = statistics.median(views)
    results["explorer_long_live_ms"] = statistics.median(ready)
    results["explorer_long_update_ms"] = statistics.median(updates)
    return results


# ------------------------------------------------------------------------------------------ circuits
CIRCUIT_TARGETS = {
    "circuit_eap_reverse_2l4h_s": ("<", 2.0),
    "circuit_acdc_reverse_2l4h_s": ("<", 120.0),
    "circuit_eap_shakespeare_s": ("<", 5.0),
    "circuit_eap_ig_over_eap": ("<", 5.0),
    "circuit_ci_reverse_2l4h_s": ("<", 2.0),
    "circuit_ci_shakespeare_s": ("<", 2.0),
}
TARGETS.update(CIRCUIT_TARGETS)
CIRCUIT_ROWS = [
    (
        "circuits: eap, reverse_2l4h nodes (256 examples; --quick 16)",
        "{:.2f} s",
        ["circuit_eap_reverse_2l4h_s"],
    ),
    ("circuits: acdc, reverse_2l4h nodes", "{:.1f} s", ["circuit_acdc_reverse_2l4h_s"]),
    (
        "circuits: patching (exact), reverse_2l4h nodes: time, copies per pass, peak memory added",
        "{:.2f} s, {:.0f}, {:.0f} MB",
        [
            "circuit_patching_reverse_2l4h_s",
            "circuit_patching_reverse_2l4h_copies",
            "circuit_patching_reverse_2l4h_mb",
        ],
    ),
    ("circuits: eap, shakespeare edges (128 windows; --quick 2)", "{:.2f} s", ["circuit_eap_shakespeare_s"]),
    ("circuits: eap_ig (5 steps), shakespeare edges", "{:.2f} s", ["circuit_eap_ig_shakespeare_s"]),
    ("circuits: eap_ig / eap, shakespeare", "{:.2f}x", ["circuit_eap_ig_over_eap"]),
    (
        "circuits: patching (exact), shakespeare edges: time, copies per pass, peak memory added",
        "{:.1f} s, {:.0f}, {:.0f} MB",
        [
            "circuit_patching_shakespeare_s",
            "circuit_patching_shakespeare_copies",
            "circuit_patching_shakespeare_mb",
        ],
    ),
    (
        "circuits: rank correlation with patching, eap / eap_ig (reverse_2l4h); eap / eap_ig (shakespeare)",
        "{:.3f} / {:.3f}; {:.3f} / {:.3f}",
        [
            "circuit_eap_rank_reverse_2l4h",
            "circuit_eap_ig_rank_reverse_2l4h",
            "circuit_eap_rank_shakespeare",
            "circuit_eap_ig_rank_shakespeare",
        ],
    ),
    *(
        row
        for name, what in (("reverse_2l4h", "nodes"), ("shakespeare", "edges"))
        for row in (
            (
                f"circuits: the whole analysis, {name} {what}: verify=0 ci=0 / verify=20 ci=0.95 (ratio)",
                "{:.3f} s / {:.3f} s ({:.2f}x)",
                [
                    f"circuit_plain_{name}_s",
                    f"circuit_checked_{name}_s",
                    f"circuit_checked_over_plain_{name}",
                ],
            ),
            (
                f"circuits: inside it, {name}: verify=20 (exact patching of the top 20) / ci=0.95 (bootstrap "
                "and stability)",
                "{:.3f} s / {:.3f} s",
                [f"circuit_verify_{name}_s", f"circuit_ci_{name}_s"],
            ),
        )
    ),
]


def _rank_correlation(a: Tensor, b: Tensor) -> float:
    """Spearman's rho of |a| and |b|: Pearson's correlation of their ranks."""
    ranks = [x.abs().argsort().argsort().double() for x in (a, b)]
    return float(torch.corrcoef(torch.stack(ranks))[0, 1])


def _peak_rss_during(work: Callable[[], object]) -> tuple[object, float]:
    """work()'s result and the most resident memory it added (MB), sampled every 10 ms."""
    import threading

    page = os.sysconf("SC_PAGE_SIZE")

    def rss() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * page

    start, peak, done = rss(), [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = work()
    finally:
        done.set()
        sampler.join()
    return result, max(0, max(peak[0], rss()) - start) / 1e6


def bench_circuits(mode: Mode) -> dict:
    """Circuit discovery on the ready-made models (see the module docstring, 10)."""
    quick = mode == QUICK
    repeats = 1 if quick else 3
    out = _bench_circuit("reverse_2l4h", 16 if quick else 256, position=0, repeats=repeats)
    return out | _bench_circuit("shakespeare", 2 if quick else 128, position=1, repeats=repeats)


def _bench_circuit(name: str, count: int, position: int, repeats: int) -> dict:
    """The circuit figures of one ready-made model on `count` examples and their corruption."""
    from transformer_lab import load
    from transformer_lab.analysis import circuits

    progress(f"circuits: {name}, {count} examples")
    checkpoint = load(f"pretrained:{name}")
    clean, corrupted = checkpoint.corrupted_pairs(count, position=position)

    scorers = {"eap": circuits.score_eap, "eap_ig": circuits.score_eap_ig, "acdc": circuits.score_acdc}

    def scores(method: str) -> Tensor:  # from the examples to the scores (eap's time only, with kl: its
        setup = circuits.prepare(checkpoint.model, *clean, corrupted)  # scores are 0 there)
        return scorers[method](setup)

    def median_seconds(work: Callable[[], object], repeats: int = repeats) -> float:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            work()
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    scores("eap")  # warm-up
    out = {f"circuit_eap_{name}_s": median_seconds(lambda: scores("eap"))}
    if name == "shakespeare":  # eap and eap_ig in turns: the ratio of each round, as the machine is then
        rounds = [
            (median_seconds(lambda: scores("eap"), 1), median_seconds(lambda: scores("eap_ig"), 1))
            for _ in range(repeats)
        ]
        out[f"circuit_eap_ig_{name}_s"] = statistics.median(ig for _, ig in rounds)
        out["circuit_eap_ig_over_eap"] = statistics.median(ig / eap for eap, ig in rounds)
    else:
        out[f"circuit_acdc_{name}_s"] = median_seconds(lambda: scores("acdc"), repeats=1)
    setup = circuits.prepare(checkpoint.model, *clean, corrupted)
    out[f"circuit_patching_{name}_copies"] = circuits.replicas_for(setup.model, setup.inputs, setup.graph)
    started = time.perf_counter()
    exact, out[f"circuit_patching_{name}_mb"] = _peak_rss_during(lambda: circuits.score_patching(setup, None))
    out[f"circuit_patching_{name}_s"] = time.perf_counter() - started
    out[f"circuit_eap_rank_{name}"] = _rank_correlation(exact, circuits.score_eap(setup))
    out[f"circuit_eap_ig_rank_{name}"] = _rank_correlation(exact, circuits.score_eap_ig(setup, 5))
    return out | _bench_evidence(name, checkpoint.model, clean, corrupted, repeats)


def _bench_evidence(name: str, model: object, clean: tuple, corrupted: tuple, repeats: int) -> dict:
    """What verify= and ci= cost: the whole analysis without and with them, in alternating rounds."""
    from transformer_lab.analysis import circuits

    def run(verify: int, ci: float) -> tuple[float, object]:
        started = time.perf_counter()
        result = circuits.discover(model, *clean, corrupted, verify=verify, ci=ci)
        return time.perf_counter() - started, result

    rounds = [(run(0, 0.0)[0], run(circuits.VERIFY, 0.95)) for _ in range(repeats)]
    checked = [result for _, (_, result) in rounds]
    out = {
        f"circuit_plain_{name}_s": statistics.median(plain for plain, _ in rounds),
        f"circuit_checked_{name}_s": statistics.median(seconds for _, (seconds, _) in rounds),
        f"circuit_checked_over_plain_{name}": statistics.median(s / plain for plain, (s, _) in rounds),
        f"circuit_verify_{name}_s": statistics.median(r.check.seconds for r in checked),
        f"circuit_ci_{name}_s": statistics.median(r.intervals.seconds for r in checked),
    }
    progress(
        f"circuits: {name}, evidence: {out[f'circuit_plain_{name}_s']:.2f} s plain, "
        f"{out[f'circuit_checked_{name}_s']:.2f} s checked"
    )
    return out


# ------------------------------------------------------------------------------------------ report
ROWS = [  # (figure, format of the value, the results keys it shows; the first one is checked against TARGETS)
    ("training, Lightning (project)", "{:,.0f} tokens/s", ["lightning_tokens_per_s"]),
    ("training, bare PyTorch loop", "{:,.0f} tokens/s", ["bare_tokens_per_s"]),
    ("training, bare loop, hook points removed", "{:,.0f} tokens/s", ["bare_no_hooks_tokens_per_s"]),
    ("training, nanoGPT-style reference", "{:,.0f} tokens/s", ["reference_tokens_per_s"]),
    ("Lightning / bare loop", "{:.3f}", ["lightning_over_bare"]),
    ("bare loop: hook points / hook points removed", "{:.3f}", ["hooks_over_no_hooks"]),
    ("Lightning / nanoGPT-style reference", "{:.3f}", ["lightning_over_reference"]),
    ("peak matmul rate", "{:.1f} GFLOP/s", ["peak_gflops"]),
    ("training FLOPs per token (6N + 12LdT)", "{:,.0f}", ["flops_per_token"]),
    ("MFU, Lightning", "{:.1%}", ["mfu"]),
    ("MFU, bare loop / reference", "{:.1%} / {:.1%}", ["bare_mfu", "reference_mfu"]),
    ("peak memory (training phase)", "{:,.0f} MB", ["peak_rss_mb"]),
    (
        "generation, no cache / KV cache (block 64)",
        "{:,.0f} / {:,.0f} tokens/s",
        ["gen_tokens_per_s_nocache", "gen_tokens_per_s_cache"],
    ),
    ("KV-cache speed-up, block 64", "{:.2f}x", ["kv_speedup"]),
    (
        "generation, no cache / KV cache (block 256)",
        "{:,.0f} / {:,.0f} tokens/s",
        ["gen_tokens_per_s_nocache_block256", "gen_tokens_per_s_cache_block256"],
    ),
    ("KV-cache speed-up, block 256", "{:.2f}x", ["kv_speedup_block256"]),
    ("reverse: python train.py, wall time", "{:.1f} s", ["reverse_seconds_to_100"]),
    (
        "busy machine (a busy process per core): python train.py, threads=auto / threads=1",
        "{:.2f} ({:.0f} s / {:.0f} s)",
        ["busy_auto_over_one_thread", "busy_auto_seconds", "busy_one_thread_seconds"],
    ),
    (
        "busy machine: python train.py, a thread per core (torch's own default) / threads=1",
        "{:.2f} ({:.0f} s)",
        ["busy_every_core_over_one_thread", "busy_every_core_seconds"],
    ),
    ("reverse: test/acc", "{:.4f}", ["reverse_test_acc"]),
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
    (
        "whole run, python train.py experiment=shakespeare_cpu: fit / training steps, tokens/s",
        "{:,.0f} / {:,.0f} tokens/s",
        ["end_to_end_fit_tokens_per_s", "end_to_end_step_tokens_per_s"],
    ),
    ("whole run: fit tokens/s over training-step tokens/s", "{:.3f}", ["end_to_end_over_loop"]),
    (
        "whole run: snapshots' share of the fit (seconds; files, MB on disk)",
        "{:.2%} ({:.2f} s; {:.0f} files, {:.1f} MB)",
        [
            "end_to_end_snapshot_share",
            "end_to_end_snapshot_seconds",
            "end_to_end_snapshots",
            "end_to_end_snapshot_mb",
        ],
    ),
    (
        "whole run: start-up / fit / after the fit (test)",
        "{:.1f} / {:.1f} / {:.1f} s",
        ["end_to_end_startup_seconds", "end_to_end_fit_seconds", "end_to_end_after_fit_seconds"],
    ),
    (
        "explorer page (8 x 8 heads, 256 tokens; --quick: 2 x 2, 32), every map stored",
        "{:.2f} MB",
        ["explorer_mb"],
    ),
    ("explorer: data from the model (python)", "{:.1f} s", ["explorer_collect_seconds"]),
    ("explorer: first full render in Chromium, from navigation", "{:.0f} ms", ["explorer_render_ms"]),
    ("explorer: model view, all layer x head heatmaps", "{:.0f} ms", ["explorer_model_view_ms"]),
    *[
        row
        for name in pretrained.names()
        for row in (
            (
                f"live page of pretrained:{name}: page / weights",
                "{:.2f} / {:.2f} MB",
                [f"explorer_page_mb_{name}", f"explorer_weights_mb_{name}"],
            ),
            (
                f"  {name}: first view / model decoded and checked, from navigation",
                "{:.0f} / {:.0f} ms",
                [f"explorer_first_view_ms_{name}", f"explorer_live_ms_{name}"],
            ),
            (
                f"  {name}: per update, first token edited (views / forward pass)",
                "{:.1f} / {:.1f} ms",
                [f"explorer_update_ms_{name}", f"explorer_forward_ms_{name}"],
            ),
            (
                f"  {name}: per update, last token edited (views / forward pass)",
                "{:.1f} / {:.1f} ms",
                [f"explorer_update_ms_{name}_last", f"explorer_forward_ms_{name}_last"],
            ),
        )
    ],
    ("explorer parity sweep: logits, largest difference / their scale", "{:.1e}", ["explorer_parity_logits"]),
    ("explorer parity sweep: attention patterns, largest difference", "{:.1e}", ["explorer_parity_patterns"]),
    (
        "explorer parity sweep: greedy outputs identical (or parting at a tie)",
        "{:.0%}",
        ["explorer_parity_generation"],
    ),
    (
        "explorer long input (512 tokens x 6 x 8, d 128; --quick: 64): precomputed part, python",
        "{:.2f} MB, {:.1f} s",
        ["explorer_long_mb", "explorer_long_collect_seconds"],
    ),
    ("  long input: the model's weights and means in the page", "{:.2f} MB", ["explorer_weights_mb"]),
    ("  long input: first view, from navigation", "{:.0f} ms", ["explorer_long_first_view_ms"]),
    (
        "  long input: model decoded / first live update (worker = 1)",
        "{:.0f} / {:.0f} ms ({:.0f})",
        ["explorer_long_live_ms", "explorer_long_update_ms", "explorer_long_worker"],
    ),
]
ROWS += CIRCUIT_ROWS
ROWS.append(
    (
        "start-up of an analysis (load pretrained:reverse_2l4h, 64 examples, head ablation; Lightning?)",
        "{:.2f} s ({})",
        ["startup_analysis_seconds", "startup_imports_lightning"],
    )
)


STARTUP_SCRIPT = """
import sys, time
start = time.perf_counter()
import transformer_lab
from transformer_lab.analysis import interventions
checkpoint = transformer_lab.load("pretrained:reverse_2l4h")
inputs, labels = checkpoint.examples(64)
interventions.ablate_heads(checkpoint.model, inputs, labels)
print(time.perf_counter() - start, any(m == "lightning" or m.startswith("lightning.") for m in sys.modules))
"""


def bench_intervals(mode: Mode) -> dict:
    """What ci=0.95 costs each printed table (see the module docstring, 12)."""
    from transformer_lab import load
    from transformer_lab.analysis import faithfulness, interventions, lens

    count = 16 if mode is QUICK else 256
    progress(f"intervals: pretrained:reverse_2l4h, {count} examples")
    checkpoint = load("pretrained:reverse_2l4h")
    model, (inputs, labels) = checkpoint.model, checkpoint.examples(count)
    clean, corrupted = checkpoint.corrupted_pairs(count)
    tables = {
        "heads": lambda level: interventions.ablate_heads(model, inputs, labels, level=level),
        "patching": lambda level: interventions.activation_patching(model, clean, corrupted, level),
        "lens": lambda level: lens.lens_accuracy(model, inputs, labels, level),
        "faithfulness": lambda level: faithfulness.deletion_curves(model, inputs, labels, level=level),
    }
    out = {}
    for name, work in tables.items():
        times: dict[float, list[float]] = {0.0: [], 0.95: []}
        for _ in range(1 if mode is QUICK else 3):
            for level in times:  # alternating, so that a busy moment costs both alike
                started = time.perf_counter()
                work(level)
                times[level].append(time.perf_counter() - started)
        plain, checked = statistics.median(times[0.0]), statistics.median(times[0.95])
        out |= {f"ci_{name}_s": plain, f"ci_{name}_checked_s": checked, f"ci_{name}_ratio": checked / plain}
    return out


INTERVAL_ROWS = [
    (
        f"{name}: ci=0 vs ci=0.95 (reverse_2l4h, 256 examples)",
        "{:.2f}x ({:.3f} s -> {:.3f} s)",
        [f"ci_{name}_ratio", f"ci_{name}_s", f"ci_{name}_checked_s"],
    )
    for name in ("heads", "patching", "lens", "faithfulness")
]
TARGETS.update({f"ci_{name}_ratio": ("<", 2.0) for name in ("heads", "patching", "lens", "faithfulness")})


def bench_startup(mode: Mode) -> dict:
    """A tool's start-up without training: a fresh interpreter that loads `pretrained:reverse_2l4h`, its
    task's examples and runs an analysis (head ablation): the median wall time of 5 runs (1 with
    --quick), in-process from the first import, and whether Lightning was imported (it must not be)."""
    seconds, lightning = [], []
    for _ in range(1 if mode is QUICK else 5):
        out = subprocess.run(
            [sys.executable, "-c", STARTUP_SCRIPT], capture_output=True, text=True, check=True
        )
        value, loaded = out.stdout.split()
        seconds.append(float(value))
        lightning.append(loaded == "True")
    return {
        "startup_analysis_seconds": statistics.median(seconds),
        "startup_imports_lightning": any(lightning),
    }


# ------------------------------------------------------------------------------------------------ text
TEXT_CORPUS_MB = {"full": (20, 400), "quick": (1, 2)}  # the same run on a small and a large corpus
TEXT_STEPS = {"full": 100, "quick": 5}
TEXT_FETCHES = 200  # batches drawn to time a fetch
TEXT_SYLLABLES = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "la", "ve", "do", "zu", "shi", "an", "el"]
TEXT_SYLLABLES += ["or", "um", "ba", "ké", "ñu", "ø", "ß", "ю", "я", "語", "文"]  # some of them non-ASCII


def write_text_corpus(folder: Path, megabytes: int, seed: int = 0, file_mb: int = 8) -> Path:
    """`megabytes` MB of made-up text in files of `file_mb` MB (nothing downloaded): sentences of 6,000
    words built from syllables (some of them non-ASCII), drawn with Zipf-like frequencies."""
    rng = np.random.default_rng(seed)
    syllables = np.array(TEXT_SYLLABLES)
    words = np.array(["".join(rng.choice(syllables, size=n)) for n in rng.integers(1, 4, size=5000)])
    words = np.concatenate([words, [w + "." for w in words[:500]], [w + "," for w in words[:500]], ["\n"]])
    frequency = 1.0 / np.arange(1, len(words) + 1) ** 1.1
    rng.shuffle(frequency)
    frequency /= frequency.sum()
    folder.mkdir(parents=True, exist_ok=True)
    written, index = 0, 0
    while written < megabytes * 1_000_000:
        size = min(file_mb * 1_000_000, megabytes * 1_000_000 - written)
        with open(folder / f"part_{index:04d}.txt", "w", encoding="utf-8") as f:
            done = 0
            while done < size:
                text = " ".join(words[rng.choice(len(words), size=100_000, p=frequency)]) + "\n"
                f.write(text)
                done += len(text.encode())
        written, index = written + done, index + 1
    return folder


def _peak_rss_of(command: list[str], log: Path) -> tuple[int, float]:
    """Run `command` (output to `log`) and return its exit status and its own peak RSS in MB (wait4's
    rusage: this child's alone, not the most of every child so far as RUSAGE_CHILDREN would say)."""
    with open(log, "w") as out:
        child = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4: Popen must not wait again
    return child.returncode, usage.ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)


def bench_text(mode: Mode, workdir: Path) -> dict:
    """Phase 11 (`--phases text`): `python train.py experiment=text_small` (a byte-level BPE of 1024
    tokens trained on the corpus, the corpus tokenized into a token file, then training steps) on a
    generated corpus of 20 MB and of 400 MB: each run's peak RSS (the target: within 100 MB of each other,
    as the token file is read through a memory map), the tokenization's throughput, and the share of a
    training step spent fetching its batch (a batch's fetch timed on the same prepared corpus; the step:
    FitTimer's on_train_batch_start -> on_train_batch_end)."""
    name = "quick" if mode is QUICK else "full"
    steps, results = TEXT_STEPS[name], {}
    for megabytes in TEXT_CORPUS_MB[name]:
        corpus = write_text_corpus(workdir / f"text_{megabytes}mb", megabytes)
        cache, runs = workdir / f"text_cache_{megabytes}mb", workdir / f"text_runs_{megabytes}mb"
        timing_path = runs / "fit_timing.json"
        data = [f"data.path={corpus}", f"data.cache_dir={cache}"]
        command = [
            sys.executable,
            "train.py",
            "experiment=text_small",
            *data,
            f"trainer.max_steps={steps}",
            "trainer.limit_val_batches=0",
            "test=false",
            "callbacks.snapshots.count=0",
            "~callbacks.head_metrics",
            f"paths.log_dir={runs}",
            QUIET,
            "+callbacks.fit_timer._target_=transformer_lab.training.callbacks.FitTimer",
            f"+callbacks.fit_timer.path={timing_path}",
        ]
        progress(f"text: {megabytes} MB corpus, python {' '.join(command[1:3])} ... ({steps} steps)")
        runs.mkdir(parents=True, exist_ok=True)
        status, peak_mb = _peak_rss_of(command, runs / "run.log")
        if status != 0:
            sys.exit(f"error: the text run failed (exit {status}): {(runs / 'run.log').read_text()[-2000:]}")
        (meta_path,) = cache.glob("tokens-*/meta.json")
        meta = json.loads(meta_path.read_text())
        trained = re.search(
            r"Tokenizer: bpe, \d+ tokens \(built in ([\d.]+) s", (runs / "run.log").read_text()
        )
        timing = json.loads(timing_path.read_text())
        task = instantiate(run_config(workdir / "text_probe", ["experiment=text_small", *data]).data)
        loader = iter(task.train_dataloader())  # the prepared corpus, found in the cache
        next(loader)
        started = time.perf_counter()
        for _ in range(TEXT_FETCHES):
            next(loader)
        fetch = (time.perf_counter() - started) / TEXT_FETCHES
        step = timing["train_step_seconds"] / timing["train_steps"]
        key = "small" if megabytes == TEXT_CORPUS_MB[name][0] else "large"
        results |= {
            f"text_{key}_mb": megabytes,
            f"text_{key}_peak_rss_mb": peak_mb,
            f"text_{key}_tokens": meta["num_tokens"],
            f"text_{key}_tokenize_mb_per_s": sum(f.stat().st_size for f in corpus.iterdir())
            / 1e6
            / meta["seconds"],
            f"text_{key}_tokenize_tokens_per_s": meta["num_tokens"] / meta["seconds"],
            f"text_{key}_bpe_seconds": float(trained.group(1)) if trained else float("nan"),
            f"text_{key}_fetch_ms": fetch * 1e3,
            f"text_{key}_step_ms": step * 1e3,
            f"text_{key}_fetch_share": fetch / (fetch + step),
        }
        shutil.rmtree(corpus)  # 400 MB of text, and as much again of tokens: gone before the next size
        shutil.rmtree(cache)
    results["text_rss_gap_mb"] = abs(results["text_large_peak_rss_mb"] - results["text_small_peak_rss_mb"])
    results["text_fetch_share"] = max(results["text_small_fetch_share"], results["text_large_fetch_share"])
    return results


TEXT_TARGETS = {"text_rss_gap_mb": ("<", 100.0), "text_fetch_share": ("<", 0.02)}
TARGETS.update(TEXT_TARGETS)
TEXT_ROWS = [
    (
        "text: peak RSS of the run, 20 MB / 400 MB corpus (--quick: 1 / 2 MB): the gap",
        "{:.0f} MB ({:.0f} / {:.0f} MB)",
        ["text_rss_gap_mb", "text_small_peak_rss_mb", "text_large_peak_rss_mb"],
    ),
    (
        "text: a batch's fetch, share of a training step (fetch / step, large corpus)",
        "{:.2%} ({:.2f} / {:.1f} ms)",
        ["text_fetch_share", "text_large_fetch_ms", "text_large_step_ms"],
    ),
    (
        "text: tokenizing the large corpus (byte-level BPE of 1024), MB/s and tokens/s",
        "{:.1f} MB/s, {:,.0f} tokens/s",
        ["text_large_tokenize_mb_per_s", "text_large_tokenize_tokens_per_s"],
    ),
    (
        "text: training the BPE, small / large corpus",
        "{:.1f} / {:.1f} s",
        ["text_small_bpe_seconds", "text_large_bpe_seconds"],
    ),
]
ROWS += TEXT_ROWS
ROWS += INTERVAL_ROWS


def table(results: dict, check_targets: bool) -> str:
    """The measured figures as a Markdown table, with the middle half of the rounds where a figure is a
    median over rounds, and the issue's targets and whether the median meets them."""
    lines = ["| figure | value | middle half of rounds | target |", "|---|---|---|---|"]
    for name, fmt, keys in ROWS:
        if keys[0] not in results:  # its phase did not run
            continue
        spread = results.get(f"{keys[0]}_quartiles")
        spread = " - ".join(fmt.format(q) for q in spread) if spread else ""
        target = ""
        if check_targets and keys[0] in TARGETS:
            op, threshold = TARGETS[keys[0]]
            met = results[keys[0]] >= threshold if op == ">=" else results[keys[0]] < threshold
            target = f"{op} {threshold:g}: {'met' if met else 'NOT met'}"
        lines.append(f"| {name} | {fmt.format(*(results[k] for k in keys))} | {spread} | {target} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a few steps of everything (< 1 minute)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures to PATH as JSON")
    parser.add_argument(
        "--phases",
        default=",".join(PHASES),
        help=f"comma-separated subset of {','.join(PHASES)} (default: all; generation needs training)",
    )
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides for the training config, e.g. model.compile=true"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    phases = args.phases.split(",")
    unknown = sorted(set(phases) - set(PHASES))
    if unknown or ("generation" in phases and "training" not in phases):
        print(
            f"error: --phases={args.phases}: choose from {','.join(PHASES)}; generation needs training",
            file=sys.stderr,
        )
        sys.exit(2)
    if args.threads:
        torch.set_num_threads(args.threads)
    mode_name = "quick" if args.quick else "full"
    mode = QUICK if args.quick else FULL
    L.seed_everything(0, verbose=False)
    load_before = os.getloadavg()[0]
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        workdir = Path(tmp)
        if "training" in phases:
            training, model = bench_training(mode, args.overrides, workdir)
            results.update(training)
        if "generation" in phases:
            results.update(bench_generation(mode, model))
        if "reverse" in phases:
            results.update(bench_reverse(mode, workdir))
        if "encoder_decoder" in phases:
            results.update(bench_encoder_decoder(mode, workdir))
        if "end_to_end" in phases:
            results.update(bench_end_to_end(mode, args.overrides, workdir, args.threads))
        if "explorer" in phases:
            results.update(bench_explorer(mode, workdir))
        if "threads" in phases:
            results.update(bench_threads(mode, workdir))
        if "circuits" in phases:
            results.update(bench_circuits(mode))
        if "startup" in phases:
            results.update(bench_startup(mode))
        if "text" in phases:
            results.update(bench_text(mode, workdir))
        if "intervals" in phases:
            results.update(bench_intervals(mode))
    results.update(
        mode=mode_name,
        overrides=" ".join(args.overrides),
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        load_average_start=load_before,
        load_average_end=os.getloadavg()[0],
    )
    print(
        f"transformer-lab benchmark ({mode_name}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}"
        + (f", overrides: {results['overrides']}" if args.overrides else "")
    )
    print(table(results, check_targets=mode_name == "full"))
    if "end_to_end_over_loop" in results:
        print(end_to_end_table(results))
    if results.get("thread_sizes"):
        print(threads_table(results))
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
