"""scripts/summarize.py on run directories whose `.hydra/` files hold configs composed here by Hydra, exactly
as train.py would compose them (no training: metrics.json is written by hand)."""

import csv
import json
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from tests.conftest import load_script
from transformer_lab.cli import run
from transformer_lab.train import CONFIG_MODULE


def make_run(run_dir: Path, overrides: list[str], metrics: dict | None) -> dict:
    """A run directory as Hydra leaves it (.hydra/config.yaml, hydra.yaml, overrides.yaml) for
    `python train.py <overrides>`, plus metrics.json; returns the composed config (resolved)."""
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    hydra_dir = run_dir / ".hydra"
    hydra_dir.mkdir(parents=True)
    hydra = cfg.hydra
    OmegaConf.set_struct(cfg, False)
    del cfg["hydra"]
    (hydra_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (hydra_dir / "hydra.yaml").write_text(OmegaConf.to_yaml({"hydra": hydra}))
    (hydra_dir / "overrides.yaml").write_text(OmegaConf.to_yaml(overrides))
    if metrics is not None:
        (run_dir / "metrics.json").write_text(json.dumps({**metrics, "wall_time_s": 1.5}))
    return {"model.lr": cfg.model.lr, "model.num_heads": cfg.model.num_heads, "task": cfg.task_name}


def table(lines: list[str], title_start: str) -> list[dict[str, str]]:
    """The rows of the printed table whose title starts with `title_start`, as dicts by column."""
    start = next(i for i, line in enumerate(lines) if line.startswith(title_start))
    spans = [m.span() for m in re.finditer(r"-+", lines[start + 2])]  # the rule: one run of - per column
    spans[-1] = (spans[-1][0], None)
    cells = lambda line: [line[a:b].strip() for a, b in spans]  # noqa: E731
    header, rows = cells(lines[start + 1]), []
    for line in lines[start + 3 :]:
        if not line.strip():
            break
        rows.append(dict(zip(header, cells(line), strict=True)))
    return rows


def test_every_row_shows_the_value_its_run_used(tmp_path, capsys):
    sweep = tmp_path / "runs"
    composed = {
        "a": make_run(sweep / "a", ["task=sort", "model=decoder", "model.lr=0.004"], {"val/seq_acc": 0.5}),
        "b": make_run(sweep / "b", ["task=sort"], {"val/seq_acc": 0.9}),
        "c": make_run(sweep / "c", ["task=sort", "~callbacks.head_metrics"], {"val/seq_acc": 0.7}),
        "d": make_run(sweep / "d", ["model.num_heads=2"], {"val/acc": 0.8}),
        "e": make_run(sweep / "e", ["experiment=reverse_tiny"], None),
    }
    csv_path = tmp_path / "runs.csv"
    load_script("summarize").main([str(sweep), "--csv", str(csv_path)])
    lines = capsys.readouterr().out.splitlines()

    sort = table(lines, "sort: 3 run(s)")
    assert [row["run"] for row in sort] == ["b", "c", "a"]  # highest val/seq_acc first
    # `task` is the same for all three, so no column; every other overridden setting shows the value the
    # run used, where it was not overridden too: b and c kept the task's encoder-decoder and its lr
    assert {row["run"]: row["model"] for row in sort} == {
        "a": "decoder",
        "b": "encoder_decoder",
        "c": "encoder_decoder",
    }
    assert {row["run"]: float(row["model.lr"]) for row in sort} == {k: composed[k]["model.lr"] for k in "abc"}
    assert composed["b"]["model.lr"] != 0.004
    assert {row["run"]: row["callbacks.head_metrics"] for row in sort} == {"a": "on", "b": "on", "c": "off"}

    reverse = table(lines, "reverse: 2 run(s)")  # no task= given: the default task, reverse
    assert [row["run"] for row in reverse] == ["d", "e"]  # e has no metrics.json: last
    assert {row["run"]: row["experiment"] for row in reverse} == {"d": "none", "e": "reverse_tiny"}
    assert {row["run"]: int(row["model.num_heads"]) for row in reverse} == {
        "d": 2,
        "e": composed["e"]["model.num_heads"],
    }
    assert all("-" not in (row[k] for k in ("experiment", "model.num_heads")) for row in reverse)

    rows = {row["run"]: row for row in csv.DictReader(csv_path.open())}
    assert {run: row["task"] for run, row in rows.items()} == {k: v["task"] for k, v in composed.items()}
    assert rows["a"]["model"] == "decoder" and rows["d"]["experiment"] == "none"


def test_runs_that_differ_only_by_seed_are_summed_up_over_the_seeds(tmp_path, capsys):
    """python train.py -m ... seed=0,1,2 then summarize: mean +- sd and the range of every metric, per
    setting, over the runs whose settings differ only by their seed."""
    sweep = tmp_path / "sweep"
    scores = {(2, 0): 0.70, (2, 1): 0.80, (2, 2): 0.90, (4, 0): 0.95, (4, 1): 0.97}
    for (heads, seed), acc in scores.items():
        make_run(sweep / f"{heads}_{seed}", [f"model.num_heads={heads}", f"seed={seed}"], {"val/acc": acc})
    load_script("summarize").main([str(sweep)])
    lines = capsys.readouterr().out.splitlines()
    assert len(table(lines, "reverse: 5 run(s)")) == 5
    seeds = {row["model.num_heads"]: row for row in table(lines, "reverse over seeds")}
    assert seeds["2"]["runs"] == "3" and seeds["4"]["runs"] == "2"
    assert seeds["2"]["val/acc"] == "0.8 +- 0.1 [0.7..0.9]"
    assert seeds["4"]["val/acc"] == "0.96 +- 0.014 [0.95..0.97]"


def test_the_phase_change_of_each_run_and_over_seeds(tmp_path, capsys):
    """metrics.json's phase_change (the PhaseChange callback's half-way step, None without one): a column
    per run, and over seeds in how many it happened, its median [range] over those runs alone, and the
    seeds of the runs without one (by seed: the sweep's job numbers are not seeds); a run that does not
    say, or says it in a shape no run writes, shows -."""
    sweep = tmp_path / "sweep"
    said = {0: 928, 1: None, 2: 1200, 3: 990}
    for seed, step in said.items():
        record = {"curve": "val/loss", "step": step, "what": "..."}
        make_run(sweep / str(seed), [f"seed={seed}"], {"val/acc": 0.5 + seed / 10, "phase_change": record})
    make_run(sweep / "4", ["seed=4"], {"val/acc": 0.1, "phase_change": {"step": "soon"}})
    load_script("summarize").main([str(sweep)])
    lines = capsys.readouterr().out.splitlines()
    runs = {row["seed"]: row["phase_change"] for row in table(lines, "reverse: 5 run(s)")}
    assert runs == {"0": "928", "1": "none", "2": "1200", "3": "990", "4": "-"}
    (over,) = table(lines, "reverse over seeds")
    assert over["runs"] == "5" and over["phase_change"] == "in 3 of 4, 990 [928..1200] (none: seed 1)"


def test_over_seeds_with_ci_the_mean_and_its_student_t_interval(tmp_path, capsys):
    """--ci 0.95: each setting's mean over its seeds and mean +- t sd / sqrt(n) (t of n - 1 degrees of
    freedom, as the tables give it: 12.71, 4.303, 2.776, 2.228); a level outside (0, 1) is one line."""
    summarize = load_script("summarize")
    for df, t in ((1, 12.706), (2, 4.3027), (4, 2.7764), (10, 2.2281)):
        assert summarize.t_quantile(0.975, df) == pytest.approx(t, abs=1e-3)
    sweep = tmp_path / "sweep"
    for seed, acc in enumerate((0.70, 0.80, 0.90)):
        make_run(sweep / str(seed), ["model.num_heads=2", f"seed={seed}"], {"val/acc": acc})
    summarize.main([str(sweep), "--ci", "0.95"])
    lines = capsys.readouterr().out.splitlines()
    assert any("over seeds (mean [95% interval, Student's t] of runs" in line for line in lines)
    (row,) = table(lines, "reverse over seeds")
    assert row["val/acc"] == "0.8 [0.5516..1.048]"  # 0.8 +- 4.303 x 0.1 / sqrt(3)
    with pytest.raises(SystemExit) as refused:
        run(summarize.main, [str(sweep), "--ci", "95"])
    assert refused.value.code == 2 and "--ci 95.0: give a level between 0 and 1" in capsys.readouterr().err
