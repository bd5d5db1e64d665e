"""ActivationsDataModule: a model's activations at one hook point, what an SAE of that model trains on.

    python train.py experiment=sae source=pretrained:induction_heads hook=blocks.0.hook_attn_out
    python train.py experiment=sae source=<run> hook=blocks.1.hook_resid_post data.cache=true

The source is any checkpoint (a file, a run directory, `pretrained:<name>`, `hf:<folder>`), read by the
rules of `transformer_lab.checkpoint`; the examples are its task's (for a model of text, the text
`data.path=` names instead, as `data_path=` does in the tools). Every real position (not padding) of every
example gives one activation vector at the hook (per-head hooks [B, T, H, D]: flattened to H D). With
`output_hook` (a transcoder's: the MLP's output, the hook reading its input), each row is the pair
[x | y], the activation at `hook` and at `output_hook` of the same position, from one forward pass that
stops at the later of the two.

Training activations come two ways:

* on the fly (default): batches of the task's training examples (`data.source_batch_size` sequences) go
  through the model, which stops at the hook (nothing after it is computed); their activations fill a
  buffer of `data.buffer` vectors, which is shuffled and half emptied into batches of `data.batch_size`
  (SAELens's mixing buffer: a batch mixes positions of many sequences);
* from a cache (`data.cache=true`): `data.cache_tokens` activations computed once into a file of float32
  rows in `data.cache_dir` (`activations-<key>/activations.bin`, with a meta.json of its size and sha256,
  written by `data.tokens`' cache: a temporary folder renamed into place, one process building while the
  others wait), then read as a memory map, batches of random rows. The key hashes the source's weights
  (`nn.sae.fingerprint`), the hook, the text and the count: another model, hook or text never reads a
  stale file. Writing goes batch by batch and reading touches only a batch's rows, so neither holds the
  file in memory: its size is bounded by the disk, not the memory.

Validation and test batches are the source task's own `(*inputs, labels)` (`data.val_examples`,
`data.test_examples` of its val and test splits), so the model's loss is measured with the SAE spliced
in (`analysis.sae_measures`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import time
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from transformer_lab import pretrained
from transformer_lab.data.activation_task import ActivationTask, first_rows, rank_of
from transformer_lab.data.tokens import cached, check_member, count, default_cache_dir
from transformer_lab.errors import ConfigError, as_config_error, require
from transformer_lab.limits import require_memory, size_text
from transformer_lab.nn.sae import activations_at_hooks, check_hook, fingerprint, hook_dim, real_positions

if TYPE_CHECKING:
    from transformer_lab.checkpoint import Checkpoint
    from transformer_lab.nn import TokenModel

log = logging.getLogger(__name__)

CACHE_FORMAT = 1
MAX_BUFFER = 1 << 24  # activations held in the mixing buffer at most


def source_location(location: str) -> str:
    """A source as a checkpoint records it: `pretrained:` as it is, a path or an `hf:` folder made
    absolute (an SAE run read elsewhere finds its source)."""
    if pretrained.is_pretrained(location):
        return location
    if location.startswith("hf:"):
        return "hf:" + str(Path(location.removeprefix("hf:")).expanduser().resolve())
    return str(Path(location).expanduser().resolve())


class ActivationsDataModule(ActivationTask):
    """The activations of `source` at `hook` (see the module docstring)."""

    def __init__(
        self,
        source: str | None = None,
        hook: str | None = None,
        output_hook: str | None = None,
        path: str | None = None,
        batch_size: int = 1024,
        source_batch_size: int = 32,
        buffer: int = 65536,
        cache: bool = False,
        cache_tokens: int = 1 << 20,
        cache_dir: str | None = None,
        val_examples: int = 128,
        test_examples: int = 512,
        seed: int = 0,
        verbose: bool = True,
    ):
        super().__init__()
        require(
            isinstance(source, str) and source.strip() != "",
            "experiment=sae needs source=<the model>: a checkpoint, a run directory, pretrained:<name> or "
            "hf:<folder> (python -m transformer_lab.pretrained lists the shipped ones)",
        )
        require(
            isinstance(hook, str) and hook.strip() != "",
            "experiment=sae needs hook=<a hook point of the model>, e.g. hook=blocks.0.hook_resid_post",
        )
        for key, value in (
            ("batch_size", batch_size),
            ("source_batch_size", source_batch_size),
            ("buffer", buffer),
            ("cache_tokens", cache_tokens),
            ("val_examples", val_examples),
            ("test_examples", test_examples),
        ):
            require(
                isinstance(value, int) and not isinstance(value, bool) and value > 0,
                f"data.{key}={value!r} must be a positive integer",
            )
        require(
            batch_size <= buffer <= MAX_BUFFER,
            f"data.buffer={buffer} must be between data.batch_size={batch_size} and {MAX_BUFFER}",
        )
        require(isinstance(cache, bool), f"data.cache={cache!r} must be true or false")
        require(isinstance(seed, int), f"data.seed={seed!r} must be an integer")
        self.save_hyperparameters()
        self.location = source_location(source)
        self.batch_size, self.source_batch_size, self.buffer = batch_size, source_batch_size, buffer
        self.cache, self.cache_tokens, self.seed, self.verbose = cache, cache_tokens, seed, verbose
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.examples_of = {"val": val_examples, "test": test_examples}
        self.checkpoint = self._load(source, path)
        model = self.checkpoint.model
        require(
            output_hook is None or any(n.endswith("hook_mlp_out") for n in model.hook_names()),
            f"{source} has no MLP (an attention-only model), and a transcoder replaces one; train an SAE "
            "of its activations instead (experiment=sae)",
        )
        with as_config_error():
            check_hook(model, hook, source)
            if output_hook is not None:
                check_hook(model, output_hook, source)
        self.hook, self.output_hook = hook, output_hook
        self.d_in = hook_dim(model, hook)
        self.d_out = 0 if output_hook is None else hook_dim(model, output_hook)
        width = self.row_width
        require_memory(buffer * width * 4 * 2, f"data.buffer={buffer} activations of {width}", "lower it")
        self.splits: dict[str, list] = {}
        self.file: CachedActivations | None = None

    def _load(self, source: str, path: str | None) -> Checkpoint:
        from transformer_lab.checkpoint import load

        checkpoint = load(source, data_path=path)
        if path is not None:
            require(
                bool(type(checkpoint.task).data_files),
                f"data.path={path}: the task of {source} ({checkpoint.task_name}) reads no text; "
                "data.path= is "
                "for a model of text (leave it out: its own task's examples are used)",
            )
        return checkpoint

    # ------------------------------------------------------------------------------ what it states
    @property
    def source_model(self) -> TokenModel:
        return self.checkpoint.model

    @property
    def vocab(self) -> list[str]:
        return list(self.checkpoint.config.tokens)

    @property
    def max_len(self) -> int:
        return self.checkpoint.config.max_len

    @property
    def row_width(self) -> int:
        """The numbers a training row holds: d_in (an SAE's x), or d_in + d_out (a transcoder's [x | y])."""
        return self.d_in + self.d_out

    def model_settings(self) -> dict:
        written = {"d_out": self.d_out, "output_hook": self.output_hook} if self.output_hook else {}
        return super().model_settings() | written

    @cached_property
    def fingerprint(self) -> str:
        return fingerprint(self.source_model)

    def record(self) -> dict:
        """The task's record, with its source: where the model is, its weights' sha256, the hook (and
        the output hook)."""
        source = {"location": self.location, "fingerprint": self.fingerprint, "hook": self.hook}
        if self.output_hook:
            source["output_hook"] = self.output_hook
        return super().record() | {"source": source}

    # ----------------------------------------------------------------------------- the activations
    def activations(self, batch: tuple[Tensor, ...]) -> Tensor:
        """The rows [N, row_width] at the real positions of a batch of the source's task (*inputs,
        labels): the activations at the hook (and beside them those at the output hook)."""
        *inputs, _ = batch
        model = self.source_model
        device = next(model.parameters()).device
        inputs = tuple(x.to(device) for x in inputs)
        hooks = [self.hook] + ([self.output_hook] if self.output_hook else [])
        with torch.inference_mode():
            found = activations_at_hooks(model, hooks, *inputs)
            real = real_positions(model, self.hook, inputs)
            return torch.cat([x[real] for x in found], dim=-1).float().cpu()

    def source_batches(self, rank: int = 0, world: int = 1) -> Iterator[tuple[Tensor, ...]]:
        """The source task's training batches, epoch after epoch, this rank's share (every world-th batch),
        in batches of `source_batch_size` sequences. Each epoch's order comes from `seed` (the tasks draw
        it from torch's global generator when a pass begins: that draw is made under seed + epoch), so a
        cache's contents follow from its key."""
        task = self.checkpoint.task
        task.setup("fit")
        for epoch in itertools.count():
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed + epoch)
                batches = iter(task.train_dataloader())
                first = next(batches)
            index = 0
            for batch in itertools.chain([first], batches):
                for start in range(0, batch[0].size(0), self.source_batch_size):
                    if index % world == rank:
                        yield tuple(t[start : start + self.source_batch_size] for t in batch)
                    index += 1

    def scale_sample(self, count: int = 4096) -> Tensor:
        """`count` activations straight from the source (no mixing buffer to fill for them)."""
        return first_rows(self.stream(), count)

    def stream(self, rank: int = 0, world: int = 1) -> Iterator[Tensor]:
        """Rows [n, row_width], a source batch at a time, endlessly."""
        for batch in self.source_batches(rank, world):
            yield self.activations(batch)

    # ----------------------------------------------------------------------------------- the splits
    def setup(self, stage: str | None = None) -> None:
        if stage in ("fit", None) and self.cache and self.file is None:
            self.file = cached_activations(self)
        for split, wanted in (("val", ("fit", "validate", None)), ("test", ("test", None))):
            if stage in wanted and split not in self.splits:
                inputs, labels = self.checkpoint.examples(self.examples_of[split], split=split, exact=False)
                batch = (*inputs, labels)
                size = self.source_batch_size
                self.splits[split] = [
                    tuple(t[i : i + size].cpu() for t in batch) for i in range(0, len(labels), size)
                ]

    def train_dataloader(self) -> DataLoader:
        rank, world = rank_of(self)
        if self.cache:
            if self.file is None:
                self.file = cached_activations(self)
            data: IterableDataset = FileBatches(self.file, self.batch_size, self.seed + 7919 * rank)
        else:
            data = MixedBatches(self, rank, world)
        return DataLoader(data, batch_size=None)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["val"], batch_size=None)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["test"], batch_size=None)


class MixedBatches(IterableDataset):
    """Batches of activations on the fly: a shuffled buffer of `task.buffer` activations, half of it
    emptied into batches whenever it is full (SAELens's mixing buffer)."""

    def __init__(self, task: ActivationsDataModule, rank: int, world: int):
        super().__init__()
        self.task, self.rank, self.world = task, rank, world

    def __iter__(self) -> Iterator[Tensor]:
        task = self.task
        generator = torch.Generator().manual_seed(task.seed + 7919 * self.rank)
        stream = task.stream(self.rank, self.world)
        pool = torch.empty(0, task.row_width)
        while True:
            parts = [pool]
            held = len(pool)
            while held < task.buffer:
                part = next(stream)
                parts.append(part)
                held += len(part)
            pool = torch.cat(parts)
            pool = pool[torch.randperm(len(pool), generator=generator)]
            out = len(pool) // 2 // task.batch_size * task.batch_size
            for start in range(0, out, task.batch_size):
                yield pool[start : start + task.batch_size]
            pool = pool[out:]


# ----------------------------------------------------------------------------------------- the cache
class CachedActivations:
    """A cache entry's activations (`activations.bin`: float32 rows [count, d_in + d_out]), opened and
    checked; each row read with pread into the batch: a memory map of the file would count every page
    its random rows fault in, and the pages the kernel maps around each of them, as the process's own
    resident memory (measured: +100 MB per batch on a 128 MB file), which then grows with the file."""

    def __init__(self, folder: Path, meta: dict, fd: int):
        self.folder, self.meta = folder, meta
        self.count, self.width = int(meta["count"]), int(meta["d_in"]) + int(meta.get("d_out", 0))
        self._file = os.fdopen(fd, "rb")

    def rows(self, index: np.ndarray) -> Tensor:
        """The rows at sorted row indices, [len(index), d_in + d_out]."""
        size = self.width * 4
        out = np.empty((len(index), self.width), dtype="<f4")
        view = memoryview(out).cast("B")
        fd = self._file.fileno()
        for k, row in enumerate(index.tolist()):
            got = os.preadv(fd, [view[k * size : (k + 1) * size]], row * size)
            require(
                got == size, f"data cache {self.folder}: activations.bin is shorter than its meta.json says"
            )
        return torch.from_numpy(out)


class FileBatches(IterableDataset):
    """Endless batches of `batch_size` random rows of a cache file (drawn with replacement, each batch's
    rows read in file order)."""

    def __init__(self, file: CachedActivations, batch_size: int, seed: int):
        super().__init__()
        self.file, self.batch_size, self.seed = file, batch_size, seed

    def __iter__(self) -> Iterator[Tensor]:
        generator = np.random.default_rng(self.seed)
        while True:
            index = np.sort(generator.integers(0, self.file.count, self.batch_size))
            yield self.file.rows(index)


def cache_key(task: ActivationsDataModule) -> str:
    """What a cache file's activations depend on: the source's weights, the hook, the text, the count."""
    text = task.checkpoint.contents.get("datamodule_hyper_parameters") or {}
    parts = {
        "format": CACHE_FORMAT,
        "fingerprint": task.fingerprint,
        "hook": task.hook,
        **({"output_hook": task.output_hook} if task.output_hook else {}),
        "data": {k: v for k, v in text.items() if k not in ("batch_size", "verbose", "cache_dir")},
        "path": task.hparams.path,
        "count": task.cache_tokens,
        "source_batch_size": task.source_batch_size,
        "seed": task.seed,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def cached_activations(task: ActivationsDataModule) -> CachedActivations:
    """The task's activations from its cache entry, built first if it is not there (with progress)."""
    key = cache_key(task)
    name = f"activations-{key[:24]}"
    size = task.cache_tokens * task.row_width * 4

    def read(folder: Path, meta: dict) -> CachedActivations:
        require(
            meta.get("count") == task.cache_tokens
            and meta.get("d_in") == task.d_in
            and meta.get("d_out", 0) == task.d_out,
            f"data cache {folder}/meta.json does not describe {task.cache_tokens} activations of "
            f"{task.row_width}; remove {folder}",
        )
        return CachedActivations(folder, meta, check_member(folder, meta, "activations.bin", size))

    def build():
        def write(folder: Path) -> dict:
            return write_activations(task, folder / "activations.bin")

        return write

    started = time.perf_counter()
    file, built, _ = cached(task.cache_dir, name, key, read, build)
    if task.verbose:
        how = f"built in {time.perf_counter() - started:.1f} s" if built else "cached"
        log.info(
            f"Activations of {task.hparams.source} at {task.hook}: {count(file.count)} x {task.row_width} "
            f"({size_text(size)}) in {file.folder}, {how}"
        )
    return file


def write_activations(task: ActivationsDataModule, path: Path) -> dict:
    """`task.cache_tokens` activations of the source at its hook, written a source batch at a time, with
    a progress line every tenth; what meta.json says of them."""
    started, written, next_report = time.perf_counter(), 0, 0.1
    try:
        with open(path, "wb") as out:
            for part in task.stream():
                part = part[: task.cache_tokens - written].numpy().astype("<f4", copy=False)
                out.write(part.tobytes())
                written += len(part)
                if written / task.cache_tokens >= next_report:
                    if task.verbose:
                        rate = written / max(time.perf_counter() - started, 1e-9)
                        log.info(
                            f"Caching activations: {written / task.cache_tokens:.0%} ({count(written)} of "
                            f"{count(task.cache_tokens)}, {count(rate)}/s)"
                        )
                    next_report += 0.1
                if written >= task.cache_tokens:
                    break
    except OSError as exc:
        raise ConfigError(f"data.cache_dir={task.cache_dir}: {exc.strerror or exc}") from None
    seconds = time.perf_counter() - started
    return {
        "count": written,
        "d_in": task.d_in,
        **({"d_out": task.d_out} if task.output_hook else {}),
        "source": task.location,
        "fingerprint": task.fingerprint,
        "hook": task.hook,
        "seconds": round(seconds, 3),
    }
