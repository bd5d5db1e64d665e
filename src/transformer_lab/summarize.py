"""Compare runs: one table, one row per run, best first.

    python -m transformer_lab.summarize saved_models/multirun/<date>_<time>   # one sweep
    python -m transformer_lab.summarize saved_models [--csv runs.csv]         # every run

A run is a directory with `.hydra/config.yaml` (Hydra writes it). Columns: the settings that were
overridden in any of the runs and whose values differ between them (the swept hyperparameters), each
shown with the value that run actually used (its composed config, or the config group it picked, also
where it was not overridden), then the final val/ and test/ metrics from metrics.json, the half-way step
of the run's phase change (`none` if it had none) and the wall time. Rows are sorted by the task's
metric (the sweep objective: val/acc highest first, val/loss lowest first); runs without metrics.json
(failed, or still running) come last. Runs of different tasks get one table each, titled with the task.
--csv also writes every row to a CSV file, with a `task` column. Runs that differ only by their seed are
summed up over the seeds (mean +- sd [min..max]); with --ci 0.95, as the mean and its 95% interval over
the seeds (Student's t: mean +- t sd / sqrt(n), n seeds), to tell a difference between settings from the
seed's noise.
"""

import argparse
import csv
import math
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from transformer_lab import run_files
from transformer_lab.cli import ArgumentParser, run
from transformer_lab.errors import require

PHASE = "phase_change"  # the column: the half-way step of the run's phase change (or none)


@dataclass
class Run:
    """One run directory: its task, its composed config, the config groups it picked, the command-line
    overrides it ran with, and its metrics.json."""

    name: str
    task: str
    metric: str
    mode: str
    overrides: dict[str, str]
    config: DictConfig
    hydra: DictConfig
    choices: dict[str, str | None]
    removed: set[str]
    metrics: dict | None

    def value(self, key: str) -> str:
        """What the run used for `key`, overridden or not: the option it picked for a config group
        (`task`, `model`, `experiment`, `hydra/launcher`: `none` if none), else the value in its composed
        config (`hydra.*`: Hydra's); a section such as `callbacks.head_metrics` reads `on`, or `off` if
        the run removed it (`~key`); `-` only for a key the run's config does not have at all."""
        if key in self.choices:
            return "none" if self.choices[key] is None else str(self.choices[key])
        root, path = (self.hydra, key) if key.startswith("hydra.") else (self.config, key)
        absent = object()
        try:
            node = OmegaConf.select(root, path, default=absent, throw_on_missing=False)
        except Exception:  # an interpolation that only resolves inside the run (e.g. ${now:...})
            node = OmegaConf.select(root, path, default=absent, throw_on_resolution_failure=False)
        if node is absent:
            return "off" if key in self.removed else self.overrides.get(key, "-")
        if isinstance(node, DictConfig):
            return "on"
        if isinstance(node, ListConfig):
            return str(OmegaConf.to_container(node, resolve=False))
        return "null" if node is None else str(node)

    def score(self) -> float | None:
        value = (self.metrics or {}).get(self.metric)
        return value if isinstance(value, int | float) and math.isfinite(value) else None

    def phase_change(self) -> int | str | None:
        """The half-way step of the run's phase change (the `PhaseChange` callback's, in metrics.json),
        None if it had none, `-` if the run does not say (an older run, or the callback off)."""
        record = (self.metrics or {}).get("phase_change")
        step = record.get("step", "-") if isinstance(record, dict) else "-"
        return step if step is None or (isinstance(step, int) and not isinstance(step, bool)) else "-"


def load_run(run_dir: Path, root: Path) -> Run:
    """Read a run directory's Hydra files and metrics.json."""
    cfg = run_files.config(run_dir)
    has_overrides = (run_dir / ".hydra" / "overrides.yaml").exists()
    overrides, removed = {}, set()
    for token in run_files.overrides(run_dir) if has_overrides else []:
        key, _, value = token.partition("=")
        if key.startswith("~"):
            removed.add(key.lstrip("~"))
        overrides[key.lstrip("+~")] = value
    hydra = run_files.hydra(run_dir)
    choices = OmegaConf.to_container(hydra.hydra.runtime.choices) if "hydra" in hydra else {}
    metrics = run_files.metrics(run_dir)
    return Run(
        name=str(run_dir.relative_to(root)) if run_dir != root else run_dir.name,
        task=str(cfg.get("task_name", "?")),
        metric=str(cfg.get("metric", "")),
        mode=str(cfg.get("metric_mode", "max")),
        overrides=overrides,
        config=cfg,
        hydra=hydra,
        choices=choices,
        removed=removed,
        metrics=metrics,
    )


def find_runs(root: Path) -> list[Run]:
    """Every run under `root` (or `root` itself)."""
    require(
        root.is_dir(),
        f"{root} is not a directory; pass a sweep directory such as saved_models/multirun/<date>_<time>, "
        "or saved_models",
    )
    run_dirs = sorted({p.parent for p in root.rglob(".hydra") if os.path.lexists(p / "config.yaml")})
    require(bool(run_dirs), f"no runs under {root} (a run directory holds .hydra/config.yaml)")
    runs = []
    for run_dir in run_dirs:
        try:
            runs.append(load_run(run_dir, root))
        except Exception as exc:  # a run whose files are damaged: the others are still worth a table
            reason = " ".join(str(exc).split())[:300] or type(exc).__name__
            require(len(run_dirs) > 1, f"{run_dir} cannot be read: {reason}")  # one run: the answer
            print(f"warning: skipping {run_dir}: {reason}", file=sys.stderr)

    require(bool(runs), f"no run under {root} could be read (see the warnings above)")
    return runs


def ranked(runs: list[Run]) -> list[Run]:
    """Best first by the task's metric; runs without that metric last, in directory order."""
    scored = [r for r in runs if r.score() is not None]
    scored.sort(key=lambda r: r.score(), reverse=runs[0].mode == "max")
    return scored + [r for r in runs if r.score() is None]


def columns(runs: list[Run]) -> tuple[list[str], list[str]]:
    """The overridden settings whose values (as each run used them) differ between the runs, and the val/
    and test/ metrics the runs report."""
    keys = list(dict.fromkeys(k for r in runs for k in r.overrides))
    differing = [k for k in keys if len({r.value(k) for r in runs}) > 1]
    names = list(dict.fromkeys(k for r in runs for k in r.metrics or {} if k.startswith(("val/", "test/"))))
    metrics = [k for k in names if k.startswith("val/")] + [k for k in names if k.startswith("test/")]
    return differing, metrics


def fmt(value: object) -> str:
    """Numbers to 4 significant digits (overrides arrive as text: '0.0016291949914665768' -> '0.001629')."""
    if isinstance(value, str):
        for kind in (int, float):
            try:
                value = kind(value)
                break
            except ValueError:
                pass
        else:
            return value
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def rows(runs: list[Run], differing: list[str], metrics: list[str]) -> list[dict[str, str]]:
    """Table rows (cell text by column name), best run first."""
    table = []
    for r in ranked(runs):
        m = r.metrics or {}
        row = {"run": r.name}
        row.update({k: fmt(r.value(k)) for k in differing})
        row.update({k: fmt(m[k]) if k in m else "-" for k in metrics})
        if any(run.phase_change() != "-" for run in runs):
            step = r.phase_change()
            row[PHASE] = "none" if step is None else str(step)
        row["wall_s"] = fmt(m.get("wall_time_s", "-"))
        row["status"] = "ok" if r.metrics is not None else "no metrics.json"
        table.append(row)
    return table


def render(table: list[dict[str, str]]) -> str:
    """Aligned text: run names and text left, numbers right; the wall time in seconds as `45 s` (a
    duration, which the machine sets, not a result)."""

    def seconds(text: str) -> str:
        return f"{float(text):.0f} s" if _is_number(text) else text

    table = [
        {("wall" if k == "wall_s" else k): seconds(v) if k == "wall_s" else v for k, v in r.items()}
        for r in table
    ]

    headers = list(table[0])

    widths = {h: max(len(h), *(len(row[h]) for row in table)) for h in headers}

    numeric = {h for h in headers[1:] if all(_is_number(row[h]) or row[h] == "-" for row in table)}

    def line(cells: dict[str, str]) -> str:
        text = "  ".join(
            cells[h].rjust(widths[h]) if h in numeric else cells[h].ljust(widths[h]) for h in headers
        )
        return text.rstrip()

    rule = "  ".join("-" * widths[h] for h in headers)
    return "\n".join([line({h: h for h in headers}), rule, *(line(row) for row in table)])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def summarize(
    root: Path, ci: float | None = None
) -> list[tuple[str, list[dict[str, str]], list[dict[str, str]]]]:
    """(title, rows) for each task found under `root`, and for each the runs that differ only by their
    seed summed up over the seeds (`over_seeds`, with `ci` its intervals)."""
    runs = find_runs(root)
    tables = []
    for task in dict.fromkeys(r.task for r in runs):
        group = [r for r in runs if r.task == task]
        differing, metrics = columns(group)
        better = "highest" if group[0].mode == "max" else "lowest"
        title = f"{task}: {len(group)} run(s) under {root}, by {group[0].metric} ({better} first)"
        tables.append((title, rows(group, differing, metrics), over_seeds(group, differing, metrics, ci)))
    return tables


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t distribution with `df` degrees of freedom (p > 0.5): the t with
    P(T <= t) = p, by bisection on its CDF, 1/2 + the integral of the density from 0 to t (Simpson's
    rule; the density's normalisation from log-gamma)."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(t: float, steps: int = 2000) -> float:
        h = t / steps
        f = [math.exp(log_norm - (df + 1) / 2 * math.log1p((i * h) ** 2 / df)) for i in range(steps + 1)]
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))

    low, high = 0.0, 1.0
    while cdf(high) < p:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if cdf(middle) < p else (low, middle)
    return (low + high) / 2


def over_seeds(
    runs: list[Run], differing: list[str], metrics: list[str], ci: float | None = None
) -> list[dict[str, str]]:
    """Where runs differ only by their seed: one row per setting (the other differing values), with how
    many seeds finished and, per metric, the mean +- the standard deviation over them and their range
    (min..max): how far a result moves when nothing but the seed does (with `ci`, the mean and its
    interval at that level over the seeds, Student's t); and in how many seeds the run had a phase change,
    its half-way step's median [range] over those runs alone, and the seeds of the runs without one. Empty
    without such runs."""
    if "seed" not in differing:
        return []
    others = [k for k in differing if k != "seed"]
    groups: dict[tuple[str, ...], list[Run]] = {}
    for r in runs:
        if r.metrics is not None:
            groups.setdefault(tuple(fmt(r.value(k)) for k in others), []).append(r)
    table = []
    for setting, group in groups.items():
        if len(group) < 2:
            continue
        row = {"runs": str(len(group)), **dict(zip(others, setting, strict=True))}
        for metric in metrics:
            values = [r.metrics[metric] for r in group if isinstance(r.metrics.get(metric), int | float)]
            if len(values) < 2:
                row[metric] = "-"
                continue
            mean, sd = statistics.mean(values), statistics.stdev(values)
            if ci is None:
                row[metric] = f"{mean:.4g} +- {sd:.2g} [{min(values):.4g}..{max(values):.4g}]"
            else:
                half = t_quantile((1 + ci) / 2, len(values) - 1) * sd / math.sqrt(len(values))
                row[metric] = f"{mean:.4g} [{mean - half:.4g}..{mean + half:.4g}]"
        said = [r for r in group if r.phase_change() != "-"]
        if said:
            steps = [r.phase_change() for r in said if r.phase_change() is not None]
            where = f", {statistics.median(steps):.0f} [{min(steps)}..{max(steps)}]" if steps else ""
            none = [fmt(r.value("seed")) for r in said if r.phase_change() is None]
            without = f" (none: seed {', '.join(none)})" if none and steps else ""
            row[PHASE] = f"in {len(steps)} of {len(said)}{where}{without}"
        table.append(row)
    return table


def write_csv(path: Path, tables: list[tuple[str, list[dict[str, str]], list]]) -> None:
    """All rows of all runs' tables in one CSV file, with a `task` column."""
    fields = list(dict.fromkeys(["task", *(h for _, table, _ in tables for h in table[0])]))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        for title, table, _ in tables:
            for row in table:
                writer.writerow({"task": title.split(":")[0], **row})


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="a sweep directory, a run directory, or saved_models")
    parser.add_argument("--csv", type=Path, metavar="FILE", help="also write the rows to this CSV file")
    parser.add_argument(
        "--ci",
        type=float,
        metavar="LEVEL",
        help="over seeds, the mean and its interval at this level (e.g. 0.95; Student's t) instead of "
        "mean +- sd [min..max]",
    )
    args = parser.parse_args(argv)
    require(args.ci is None or 0 < args.ci < 1, f"--ci {args.ci}: give a level between 0 and 1, e.g. 0.95")
    if args.csv is not None:
        require(args.csv.parent.is_dir(), f"--csv {args.csv}: the directory {args.csv.parent} does not exist")
    tables = summarize(args.root, args.ci)
    shown = []
    for title, table, seeds in tables:
        shown.append(f"{title}\n{render(table)}")
        if seeds:
            task = title.split(":")[0]
            what = (
                "mean +- sd [min..max]" if args.ci is None else f"mean [{args.ci:.0%} interval, Student's t]"
            )
            shown.append(f"{task} over seeds ({what} of runs that differ only by seed)\n{render(seeds)}")
    print("\n\n".join(shown))
    if args.csv is not None:
        write_csv(args.csv, tables)
        print(f"\nwrote {args.csv}", file=sys.stderr)


if __name__ == "__main__":
    run(main)
