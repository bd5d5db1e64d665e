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

Each phase is a module of scripts/bench_phases/ (its docstring says what it measures, its rows of the
table and its targets beside its code), registered there; this file runs the phases asked for, in the
registry's order, and prints the report: the table of every figure, each phase's own tables, the JSON.
"""

import argparse
import json
import operator
import os
import re
import sys
import tempfile
from pathlib import Path

import lightning as L
import torch
from bench_phases import Context, phases
from bench_phases.common import FULL, QUICK

PHASES = tuple(phases())


COMPARISONS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}  # a target's op


def table(results: dict, check_targets: bool) -> str:
    """The measured figures as a Markdown table, with the middle half of the rounds where a figure is a
    median over rounds, and the issue's targets and whether the median meets them."""
    lines = ["| figure | value | middle half of rounds | target |", "|---|---|---|---|"]
    for phase in phases().values():
        for name, fmt, keys in phase.rows:
            if keys[0] not in results:  # its phase did not run
                continue
            spread = results.get(f"{keys[0]}_quartiles")
            first = re.match(r"[^{]*\{[^}]*\}", fmt).group()  # the first value's format, for its quartiles
            spread = " - ".join(first.format(q) for q in spread) if spread else ""
            target = ""
            if check_targets and keys[0] in phase.targets:
                op, threshold = phase.targets[keys[0]]
                value = results[keys[0]]
                met = COMPARISONS[op](value, threshold)
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
    registry = phases()
    chosen = args.phases.split(",")
    unknown = sorted(set(chosen) - set(registry))
    needs = {name: registry[name].needs for name in registry if registry[name].needs}
    if unknown or any(need not in chosen for name in chosen if name in needs for need in needs[name]):
        wanted = "; ".join(f"{name} needs {', '.join(need)}" for name, need in needs.items())
        print(f"error: --phases={args.phases}: choose from {','.join(registry)}; {wanted}", file=sys.stderr)
        sys.exit(2)
    if args.threads:
        torch.set_num_threads(args.threads)
    mode_name = "quick" if args.quick else "full"
    mode = QUICK if args.quick else FULL
    L.seed_everything(0, verbose=False)
    load_before = os.getloadavg()[0]
    results: dict = {}
    ran = [phase for name, phase in registry.items() if name in chosen]
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        context = Context(mode, Path(tmp), args.overrides, args.threads)
        for phase in ran:
            results.update(phase.run(context))
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
    for phase in ran:
        for own_table in phase.tables:
            print(own_table(results))
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
