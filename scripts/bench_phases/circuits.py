"""Phase 10 (`circuits`).

Circuits (`transformer_lab.analysis.circuits`): the scoring time of eap at node level
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
"""

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from bench_phases import Context, register
from bench_phases.common import QUICK, progress

TARGETS = {
    "circuit_eap_reverse_2l4h_s": ("<", 2.0),
    "circuit_acdc_reverse_2l4h_s": ("<", 120.0),
    "circuit_eap_shakespeare_s": ("<", 5.0),
    "circuit_eap_ig_over_eap": ("<", 5.0),
    "circuit_ci_reverse_2l4h_s": ("<", 2.0),
    "circuit_ci_shakespeare_s": ("<", 2.0),
}
ROWS = [
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


@register("circuits", rows=ROWS, targets=TARGETS)
def bench_circuits(context: Context) -> dict:
    """Circuit discovery on the ready-made models (see the module docstring)."""
    quick = context.mode == QUICK
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
