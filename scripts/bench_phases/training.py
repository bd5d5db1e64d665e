"""Phases 1, 2 and 5 (`training`).

Training throughput (tokens/s) of `experiment=shakespeare_cpu` (block 64, batch 12, 4 layers, 4 heads,
128 dims): the project's Lightning Trainer (its callbacks, TensorBoard logger and progress bar; no
validation) + TransformerPredictor + ShakespeareDataModule, against
* a bare PyTorch loop training a copy of the same module on batches from the same dataset, with the same
  optimizer, schedule and gradient clipping,
* the same bare loop on a copy of the model whose hook points are removed (plain calls instead of
  identity modules): what the hook points cost when nothing is hooked, and
* a nanoGPT-style reference: nanoGPT's GPT (no biases) and its CPU training loop (a Python-loop batch
  sampler, the learning rate set by hand each step, `loss.item()` logged every step).

Model FLOPs utilisation: (6 N + 12 L d T) training FLOPs per token x tokens/s over the peak matmul rate,
measured in the same rounds (N = parameters except position embeddings, as nanoGPT counts them).

Peak memory of the training phase: the process's peak RSS on CPU, `torch.cuda.max_memory_allocated`
on CUDA.
"""

import copy
import math
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from bench_phases import Context, register
from bench_phases.common import Mode, progress, quartiles, synchronize, timed
from transformer_lab.data.shakespeare import RandomWindowBatches, ShakespeareDataModule
from transformer_lab.nn import HookPoint
from transformer_lab.training.compose import instantiate, run_config
from transformer_lab.training.datamodule import LightningTask
from transformer_lab.training.predictor import TransformerPredictor, build_predictor
from transformer_lab.training.run import build_trainer

# The training run measured: shakespeare_cpu without validation (the bare loop has none) and without
# snapshots (phase 5 times them within a whole run, as it does validation); everything else of the
# project's training stays: callbacks (checkpoints included), TensorBoard logger, progress bar.
TRAIN_OVERRIDES = ["experiment=shakespeare_cpu", "trainer.limit_val_batches=0", "callbacks.snapshots.count=0"]


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
]

TARGETS = {  # key: (comparison, threshold), as in the issue; checked by the full benchmark only
    "lightning_over_bare": (">=", 0.95),
    "hooks_over_no_hooks": (">=", 0.99),
    "lightning_over_reference": (">=", 1.0),
    "mfu": (">=", 0.60),
}


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


@register("training", rows=ROWS, targets=TARGETS)
def bench_training(context: Context) -> dict:
    """Phase 1, 2 and 5: throughput of the three contenders, MFU, peak memory. Leaves the trained model
    for the generation phase (`context.shared["trained"]`)."""
    mode, overrides, workdir = context.mode, context.overrides, context.workdir
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
    context.shared["trained"] = model.net.to(device)  # Lightning moves the model back to the CPU after fit
    return results
