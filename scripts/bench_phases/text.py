"""Phase 11 (`text`).

Text: `python train.py experiment=text_small` on a generated corpus of 20 MB and of
400 MB (a BPE trained on it, the corpus tokenized into a token file, 100 training steps): each run's peak
RSS (target: within 100 MB of each other: the token file is read through a memory map), the
tokenization's MB/s and tokens/s, and a batch's fetch as a share of a training step (target < 2%). The
same run on 200 MB that is one line without whitespace: its peak RSS (target: within 300 MB of the 20 MB
run; before words were cut and the BPE's share of them bounded, 10 MB of it took 589 MB and 200 MB 7 GB).
(--quick: 1, 2 and 2 MB, 5 steps.)
"""

import json
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from bench_phases import Context, register
from bench_phases.common import QUICK, QUIET, peak_rss_of, progress
from transformer_lab.training.compose import instantiate, run_config

TEXT_CORPUS_MB = {"full": (20, 400), "quick": (1, 2)}  # the same run on a small and a large corpus
UNSPACED_MB = {"full": 200, "quick": 2}  # and on one line of letters without whitespace
TEXT_STEPS = {"full": 100, "quick": 5}
TEXT_FETCHES = 200  # batches drawn to time a fetch
TEXT_SYLLABLES = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "la", "ve", "do", "zu", "shi", "an", "el"]
TEXT_SYLLABLES += ["or", "um", "ba", "ké", "ñu", "ø", "ß", "ю", "я", "語", "文"]  # some of them non-ASCII


TARGETS = {
    "text_tokenize_vs_library": (">", 0.9),
    "text_rss_gap_mb": ("<", 100.0),
    "text_fetch_share": ("<", 0.02),
    "text_unspaced_rss_gap_mb": ("<", 300.0),
}
ROWS = [
    (
        "text: tokenizing at the library's speed: its encode_batch's time over ours, large corpus",
        "{:.2f} ({:.1f} s / {:.1f} s)",
        ["text_tokenize_vs_library", "text_large_library_seconds", "text_large_tokenize_seconds"],
    ),
    (
        "text: peak RSS of the run, 20 MB / 400 MB corpus (--quick: 1 / 2 MB): the gap",
        "{:.0f} MB ({:.0f} / {:.0f} MB)",
        ["text_rss_gap_mb", "text_small_peak_rss_mb", "text_large_peak_rss_mb"],
    ),
    (
        "text: peak RSS on 200 MB without whitespace (--quick: 2 MB), above the 20 MB run",
        "{:.0f} MB ({:.0f} MB)",
        ["text_unspaced_rss_gap_mb", "text_unspaced_peak_rss_mb"],
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


def write_unspaced_corpus(folder: Path, megabytes: int, seed: int = 0) -> Path:
    """`megabytes` MB of made-up text that is one line without whitespace: the syllables of
    `write_text_corpus`, drawn uniformly and written one after the other (a stream of letters, as a
    genome or a text with its spaces stripped)."""
    rng = np.random.default_rng(seed)
    syllables = np.array(TEXT_SYLLABLES)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "one_line.txt", "w", encoding="utf-8") as f:
        written = 0
        while written < megabytes * 1_000_000:
            text = "".join(syllables[rng.integers(len(syllables), size=200_000)])
            f.write(text)
            written += len(text.encode())
    return folder


def library_tokenize_seconds(corpus: Path, tokenizer_json: str) -> float:
    """What the `tokenizers` library alone takes to tokenize the corpus's files: each file read, its lines
    encoded with `encode_batch_fast` (on every core, as the run's tokenizing is) and their ids taken."""
    from tokenizers import Tokenizer

    library = Tokenizer.from_str(tokenizer_json)
    started = time.perf_counter()
    tokens = 0
    for file in sorted(corpus.iterdir()):
        for encoding in library.encode_batch_fast(file.read_text().split("\n"), add_special_tokens=False):
            tokens += len(encoding.ids)  # the ids, as a token file needs them
    return time.perf_counter() - started


@register("text", rows=ROWS, targets=TARGETS)
def bench_text(context: Context) -> dict:
    """Phase 11 (`--phases text`): `python train.py experiment=text_small` (a byte-level BPE of 1024
    tokens trained on the corpus, the corpus tokenized into a token file, then training steps) on a
    generated corpus of 20 MB and of 400 MB: each run's peak RSS (the target: within 100 MB of each other,
    as the token file is read through a memory map), the tokenization's throughput, and the share of a
    training step spent fetching its batch (a batch's fetch timed on the same prepared corpus; the step:
    FitTimer's on_train_batch_start -> on_train_batch_end)."""
    workdir = context.workdir
    name = "quick" if context.mode is QUICK else "full"
    steps, results = TEXT_STEPS[name], {}
    small, large = TEXT_CORPUS_MB[name]
    for key, megabytes in (("small", small), ("large", large), ("unspaced", UNSPACED_MB[name])):
        write = write_unspaced_corpus if key == "unspaced" else write_text_corpus
        corpus = write(workdir / f"text_{key}_{megabytes}mb", megabytes)
        cache, runs = workdir / f"text_cache_{key}", workdir / f"text_runs_{key}"
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
        progress(f"text: {megabytes} MB {key} corpus, python {' '.join(command[1:3])} ... ({steps} steps)")
        runs.mkdir(parents=True, exist_ok=True)
        status, peak_mb = peak_rss_of(command, runs / "run.log")
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
        library = library_tokenize_seconds(corpus, task.tokenizer.json)
        step = timing["train_step_seconds"] / timing["train_steps"]
        results |= {
            f"text_{key}_mb": megabytes,
            f"text_{key}_peak_rss_mb": peak_mb,
            f"text_{key}_tokens": meta["num_tokens"],
            f"text_{key}_tokenize_mb_per_s": sum(f.stat().st_size for f in corpus.iterdir())
            / 1e6
            / meta["seconds"],
            f"text_{key}_tokenize_tokens_per_s": meta["num_tokens"] / meta["seconds"],
            f"text_{key}_tokenize_seconds": meta["seconds"],
            f"text_{key}_library_seconds": library,
            f"text_{key}_bpe_seconds": float(trained.group(1)) if trained else float("nan"),
            f"text_{key}_fetch_ms": fetch * 1e3,
            f"text_{key}_step_ms": step * 1e3,
            f"text_{key}_fetch_share": fetch / (fetch + step),
        }
        shutil.rmtree(corpus)  # 400 MB of text, and as much again of tokens: gone before the next size
        shutil.rmtree(cache)
    results["text_rss_gap_mb"] = abs(results["text_large_peak_rss_mb"] - results["text_small_peak_rss_mb"])
    results["text_tokenize_vs_library"] = (
        results["text_large_library_seconds"] / results["text_large_tokenize_seconds"]
    )
    small_rss = results["text_small_peak_rss_mb"]
    results["text_unspaced_rss_gap_mb"] = results["text_unspaced_peak_rss_mb"] - small_rss
    results["text_fetch_share"] = max(results[f"text_{k}_fetch_share"] for k in ("small", "large"))
    return results
