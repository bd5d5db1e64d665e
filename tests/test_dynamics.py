"""Every analysis over time: the induction scores (analysis/induction.py) on hand-set attention, the
steepest change (events), and `interpret analysis=dynamics` / `step=` on the snapshots of a tiny run."""

import json
import math
import statistics

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import COMMON, compose_train_config, load_script
from transformer_lab import snapshots
from transformer_lab.analysis import dynamics, events
from transformer_lab.analysis.induction import (
    Repeats,
    induction_scores,
    previous_token_scores,
    repeats,
    task_repeats,
)
from transformer_lab.data import InductionDataModule
from transformer_lab.errors import ConfigError
from transformer_lab.train import train
from transformer_lab.training.callbacks import PhaseChange
from transformer_lab.training.callbacks.snapshots import snapshot_steps

T = 48


def example() -> Repeats:
    """Two sequences of the induction task (48 positions) with where their repeat is."""
    return task_repeats(InductionDataModule(), 2, split="test")


def induction_pattern(data: Repeats) -> torch.Tensor:
    """[B, 1, T, T]: each repeated position attends only to the token after its earlier occurrence; the
    others only to themselves."""
    batch, length = data.tokens.shape
    pattern = torch.eye(length).repeat(batch, 1, 1, 1)
    rows, queries = data.repeated.nonzero(as_tuple=True)
    pattern[rows, 0, queries, :] = 0
    pattern[rows, 0, queries, data.source[rows, queries]] = 1
    return pattern


def test_the_repeat_is_where_the_task_put_it():
    data = example()
    rows, queries = data.repeated.nonzero(as_tuple=True)
    keys = data.source[rows, queries]
    assert (keys < queries).all()
    assert torch.equal(data.tokens[rows, keys - 1], data.tokens[rows, queries])  # the same token earlier
    assert torch.equal(data.tokens[rows, keys], data.labels[rows, queries])  # what followed it: the answer
    assert torch.equal(data.first.sum(1), data.repeated.sum(1))  # as many first-occurrence positions
    # a sequence written by hand: 5 6 7 at 1..3 repeated at 5..7
    sequence = torch.tensor([[0, 5, 6, 7, 1, 5, 6, 7, 2]])
    determined = torch.tensor([[False, False, False, False, False, True, True, False]])
    hand = repeats(sequence, determined, torch.tensor([1]))
    assert hand.source.tolist() == [[-1] * 5 + [2, 3, -1]] and hand.first.nonzero()[:, 1].tolist() == [1, 2]


def test_scores_are_one_for_exactly_those_heads_and_near_zero_for_uniform_attention():
    data = example()
    assert induction_scores(induction_pattern(data), data).tolist() == [1.0]
    previous = torch.diag_embed(torch.ones(T - 1), offset=-1)
    previous[0, 0] = 1  # the first position has nothing before it
    assert previous_token_scores(previous.repeat(2, 1, 1, 1)).tolist() == [1.0]
    assert previous_token_scores(induction_pattern(data)).item() < 0.05
    uniform = torch.tril(torch.ones(T, T))
    uniform = (uniform / uniform.sum(-1, keepdim=True)).repeat(2, 1, 1, 1)  # causal: row t reads 1 / (t + 1)
    # mean over t >= 1 of 1 / (t + 1): 0.074 for 48 positions
    expected = sum(1 / (t + 1) for t in range(1, T)) / (T - 1)
    assert previous_token_scores(uniform).item() == pytest.approx(expected) and expected < 0.1
    _, queries = data.repeated.nonzero(as_tuple=True)
    assert induction_scores(uniform, data).item() == pytest.approx((1 / (queries + 1).float()).mean().item())
    assert induction_scores(uniform, data).item() < 0.1


def test_an_event_is_the_move_of_a_curve_that_passes_the_rule():
    """`dynamics.event` is `analysis.events.detect` (tests/test_events.py grades it on known series)."""
    steps = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    loss = [3.5, 3.5, 3.49, 3.5, 3.48, 3.1, 1.2, 1.0, 0.95, 0.96, 0.94]
    change = dynamics.event("loss", steps, loss)
    assert change.event and (change.start, change.end) == (16, 32) and 16 < change.halfway < 32
    assert change.describe().startswith("loss fell 3.1 -> 1.2 between steps 16 and 32 (")
    flat = dynamics.event("loss", steps, [3.5] * 10 + [3.49])
    assert flat is None or not flat.event  # no phase change: a flat curve
    # a late spike and its recovery (a slingshot after grokking) is no progress: the rise is the jump
    accuracy = [0.3, 0.3, 0.3, 0.3, 0.3, 0.8, 1.0, 1.0, 0.2, 1.0, 1.0]
    rise = dynamics.event("acc", steps, accuracy, "rise")
    assert rise.event and (rise.start, rise.end) == (8, 16)  # the smoothed curve: 0.3 -> 0.8 (0.8, 1.0)


@pytest.fixture(scope="module")
def induction_run(tmp_path_factory):
    """A tiny attention-only decoder on task=induction, 20 steps, 6 snapshots."""
    run = tmp_path_factory.mktemp("dynamics") / "run"
    cfg = compose_train_config(
        run,
        "task=induction",
        "data.train_size=640",
        "data.val_size=64",
        "data.test_size=64",
        "model.mlp=false",
        "model.model_dim=16",
        "model.num_heads=2",
        "trainer.max_epochs=2",
        "trainer.val_check_interval=5",
        "callbacks=[default,phase_change]",
        "callbacks.snapshots.count=6",
        base=COMMON,
    )
    train(cfg)
    return run


def test_the_runs_metrics_say_whether_it_had_a_phase_change(induction_run):
    """metrics.json carries the PhaseChange callback's answer (20 steps: no phase change)."""
    change = json.loads((induction_run / "metrics.json").read_text())["phase_change"]
    assert change["curve"] == "val/loss" and change["step"] is None
    assert change["what"].startswith("No phase change in val/loss: its largest move, ")


def test_dynamics_json_holds_every_measure_of_every_snapshot(induction_run, tmp_path, capsys):
    load_script("interpret").main([f"ckpt_path={induction_run}", "analysis=dynamics", f"out_dir={tmp_path}"])
    printed = capsys.readouterr().out
    assert (tmp_path / "dynamics.png").stat().st_size > 10_000
    record = json.loads((tmp_path / "dynamics.json").read_text())
    assert list(record) == [
        "steps",
        "loss",
        "metric",
        "heads",
        "scores",
        "events",
        "no_events",
        "spikes",
        "scales",
        "margins",
        "onset",
        "halfway",
    ]
    assert record["steps"] == snapshot_steps(20, 6) == [0, 1, 2, 4, 9, 20]
    snapshots, layers, heads = 6, 2, 2
    assert len(record["loss"]) == len(record["metric"]) == snapshots
    assert set(record["heads"]) == {"entropy", "ablation", "induction", "previous_token"}
    for measure, values in record["heads"].items():
        assert [len(values), len(values[0]), len(values[0][0])] == [snapshots, layers, heads], measure
    assert {"induction", "previous_token", "repeat_gain"} <= set(record["scores"])
    assert {"lens_embed", "lens_L0", "lens_L1"} <= set(record["scores"])
    for name, values in record["scores"].items():
        assert len(values) == snapshots, name
    # the largest per-head score is the score; the loss before training is log(32) per random token
    for name in ("induction", "previous_token"):
        best = [max(max(row) for row in snapshot) for snapshot in record["heads"][name]]
        assert record["scores"][name] == pytest.approx(best)
    assert record["loss"][0] == pytest.approx(torch.log(torch.tensor(32.0)).item(), abs=0.1)
    assert all(
        set(e) == {"start", "step", "halfway", "onset", "curve", "what", "ratios"}
        and e["step"] in record["steps"]
        for e in record["events"]
    )
    assert all(set(e) == {"curve", "what", "ratios"} for e in record["no_events"])
    assert "6 snapshots, steps 0 to 20" in printed and "Events (phase changes" in printed
    # every curve has its scale: the loss in nats of log 32 (chance: a uniform guess), each head's
    # attention scores on 1 with the chance of uniform attention, the entropy on uniform attention's
    scales = record["scales"]
    assert scales["loss"] == {"size": pytest.approx(math.log(32)), "chance": pytest.approx(math.log(32)),
                              "unit": "nats: log 32"}  # fmt: skip
    assert scales["acc"]["chance"] == pytest.approx(1 / 32) and scales["repeat_gain"]["chance"] == 0
    uniform = sum(1 / (t + 1) for t in range(1, T)) / (T - 1)  # previous-token score of uniform attention
    assert scales["L0H0 previous_token"]["chance"] == pytest.approx(uniform, rel=1e-4)
    assert scales["previous_token"]["chance"] == pytest.approx(uniform, rel=1e-4)
    assert scales["L1H1 induction"]["size"] == 1.0 and "L0H0 entropy" not in scales  # drawn, not claimed
    assert set(record["margins"]["tests"]) == {"range", "scale", "chance", "noise", "sudden", "kept"}
    assert "Margins (each test's largest ratio" in printed and "Spikes (training loss" in printed


def test_step_runs_any_analysis_on_the_nearest_snapshot(induction_run, tmp_path, capsys):
    interpret = load_script("interpret")
    interpret.main([f"ckpt_path={induction_run}", "analysis=heads", "step=5", f"out_dir={tmp_path}"])
    out = capsys.readouterr().out
    assert "step=5: the snapshot at step 4 (" in out and "step_00000004.ckpt" in out
    assert json.loads((tmp_path / "heads.json").read_text())["layers"] == ["blocks.0.attn", "blocks.1.attn"]
    interpret.main([f"ckpt_path={induction_run}", "analysis=lens", "step=20", f"out_dir={tmp_path}"])
    assert "the snapshot at step 20" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["analysis=heads", "step=21"],
            r"step=21 is beyond the run: its snapshots go from step 0 to step 20",
        ),
        (["analysis=heads", "step=ten"], "step=ten is not an integer"),
        (["analysis=dynamics", "step=3"], "step= picks one snapshot; analysis=dynamics reads them all"),
    ],
)
def test_bad_steps_are_one_line_errors(induction_run, tmp_path, args, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_script("interpret").main([f"ckpt_path={induction_run}", *args, f"out_dir={tmp_path}"])
    assert "\n" not in str(info.value)


def test_a_run_without_snapshots_is_a_one_line_error(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    for args in (["analysis=dynamics"], ["analysis=heads", "step=1"]):
        with pytest.raises(ConfigError, match=r"has no snapshots \(checkpoints/snapshots/step_\*\.ckpt\)"):
            load_script("interpret").main([f"ckpt_path={tmp_path}", *args, f"out_dir={tmp_path}"])


def test_the_run_says_whether_its_validation_metric_had_a_phase_change():
    callback = PhaseChange(monitor="val/acc", direction="rise")
    assert callback.describe() is None  # fewer than three validations
    grokking = [0.29, 0.30, 0.29, 0.30, 0.31, 0.30, 0.29, 0.45, 0.97, 0.99, 1.0, 0.99]
    callback.history = [(100 * (i + 1), acc) for i, acc in enumerate(grokking)]
    text = callback.describe()
    assert text.startswith("Phase change: val/acc rose 0.3 -> 0.995 between steps 600 and 1200 (")
    assert text.endswith("half way at step 837")  # between 800 (0.45) and 900 (0.97)
    assert callback.record() == {"curve": "val/acc", "step": 837, "what": text}  # metrics.json's
    control = PhaseChange(monitor="val/loss", direction="fall")  # a slow drift, as one layer learns
    control.history = [(250 * (i + 1), 3.46 - 0.03 * i + 0.004 * (-1) ** i) for i in range(12)]
    assert control.describe().startswith("No phase change in val/loss: its largest move, ")
    assert control.record()["step"] is None and PhaseChange().record() is None
    resumed = PhaseChange(monitor="val/acc", direction="rise")
    resumed.load_state_dict(callback.state_dict())
    assert resumed.history == callback.history
    with pytest.raises(ConfigError, match="direction='up' is unknown; use rise or fall"):
        PhaseChange(direction="up")


def test_dynamics_over_a_sweep_of_seeds_says_in_how_many_each_event_appeared(tmp_path, capsys):
    """`python train.py -m ... seed=1,0` then analysis=dynamics on the sweep: every run, named by its
    seed (job 0 is seed 1), and each event's step as median [range] over the seeds it appeared in."""
    sweep = tmp_path / "sweep"
    for job, seed in enumerate((1, 0)):
        cfg = compose_train_config(
            sweep / str(job), "task=induction", f"seed={seed}", "data.train_size=640", "data.val_size=64",
            "data.test_size=64", "model.mlp=false", "model.model_dim=16", "model.num_heads=2",
            "trainer.max_epochs=2", "callbacks.snapshots.count=6", "~callbacks.head_metrics", base=COMMON,
        )  # fmt: skip
        train(cfg)
        (sweep / str(job) / ".hydra").mkdir()
        OmegaConf.save(
            {k: v for k, v in cfg.items() if k != "hydra"}, sweep / str(job) / ".hydra" / "config.yaml"
        )
    load_script("interpret").main([f"ckpt_path={sweep}", "analysis=dynamics", f"out_dir={tmp_path}"])
    printed = capsys.readouterr().out
    record = json.loads((tmp_path / "dynamics.json").read_text())
    assert list(record) == ["runs", "seeds", "events", "orders", "onset", "halfway"]
    assert list(record["runs"]) == ["0", "1"]
    assert all(len(run["steps"]) == 6 for run in record["runs"].values())
    for event in record["events"]:
        assert event["of"] == 2 and 1 <= event["seeds"] <= 2 and len(event["steps"]) == event["seeds"]
        assert event["range"][0] <= event["median"] <= event["range"][1]
    assert record["seeds"] == {"0": "1", "1": "0"}
    assert (
        "Events over 2 seeds (seed 1 (run 0), seed 0 (run 1)):" in printed and "run 0 (seed 1):\n" in printed
    )
    # each curve's half way, per seed, is the run's own
    for curve, steps in record["halfway"].items():
        assert steps == [run["halfway"][curve] for run in record["runs"].values()], curve
    assert set(record["halfway"]) == set(record["onset"]) >= {"loss", "acc", "induction", "previous_token"}
    assert (tmp_path / "dynamics.png").stat().st_size > 10_000


def test_dynamics_over_a_folder_refuses_runs_of_different_settings(tmp_path):
    """A sweep over model.num_layers (and seeds) is not a set of seeds: one line naming what differs."""
    sweep = tmp_path / "sweep"
    for job, layers in enumerate((1, 2)):
        run = sweep / str(job)
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "overrides.yaml").write_text(f"- model.num_layers={layers}\n- seed={job}\n")
        (run / "checkpoints" / "snapshots").mkdir(parents=True)
        (run / "checkpoints" / "snapshots" / "step_00000000.ckpt").write_bytes(b"")
    for job in (10, 2):  # jobs in their numbers' order, 2 before 10
        (sweep / str(job) / "checkpoints" / "snapshots").mkdir(parents=True)
        (sweep / str(job) / "checkpoints" / "snapshots" / "step_00000000.ckpt").write_bytes(b"")
    assert [run.name for run in snapshots.runs(sweep)] == ["0", "1", "2", "10"]
    with pytest.raises(
        ConfigError, match=r"differ by more than their seed: run 0 has model.num_layers=1, run 1 "
    ):
        load_script("interpret").main([f"ckpt_path={sweep}", "analysis=dynamics", f"out_dir={tmp_path}"])


def _run(acc: list[float], score: list[float]) -> dynamics.Dynamics:
    """A run's Dynamics from its accuracy and one task score (an attention score) over the log-spaced
    snapshots, its loss flat: the events found as analysis=dynamics finds them."""
    result = dynamics.Dynamics(list(STEPS), [3.4] * len(STEPS), acc, scores={"score": score})
    result.scales = {"loss": events.nats(32), "acc": events.accuracy(32), "score": events.Scale(1.0, 0.05)}
    dynamics.find_events(result)
    return result


STEPS = snapshot_steps(3000, 32)


def _step_at(at: float, low: float, high: float) -> list[float]:
    return [low + (high - low) / (1 + math.exp(-(math.log(max(s, 1)) - math.log(at)) / 0.05)) for s in STEPS]


def test_over_seeds_summarises_events_only_and_names_the_seeds_without_one():
    """Three runs (jobs 0, 1, 2 of seeds 1, 0, 2): the accuracy has an event in seeds 0 and 2 (half way
    near 1000 and 1500); in seed 1 it drifts (its largest move is no event). `in 2 of 3 seeds`, the
    median and range over those two only, seed 1 named as without it; the score's event comes in the
    same snapshot interval as the accuracy's in seed 0, a few intervals later in seed 2: ordered in
    one, not resolved in the other, so no order is claimed."""
    from transformer_lab.analysis.seeds import over_seeds

    drift = [0.03 + 0.3 * i / (len(STEPS) - 1) for i in range(len(STEPS))]
    runs = {
        "0": _run(drift, _step_at(1000, 0.05, 0.8)),
        "1": _run(_step_at(1000, 0.03, 0.9), _step_at(1010, 0.05, 0.8)),
        "2": _run(_step_at(1500, 0.03, 0.9), _step_at(2500, 0.05, 0.8)),
    }
    assert [e["curve"] for e in runs["0"].events] == ["score"] and runs["0"].timing()["acc"] is None
    found = over_seeds(runs, {"0": "1", "1": "0", "2": "2"})
    (acc,) = [e for e in found.events if e.curve == "acc"]
    assert (acc.seeds, acc.of, acc.missing) == (2, 3, ["seed 1"])
    assert 900 < min(acc.steps) < 1100 and 1400 < max(acc.steps) < 1600  # the drift's step is in no median
    assert acc.describe().endswith("(median [range] of those); none in seed 1")
    (order,) = found.orders()
    assert (order.before, order.after) == ("score", "acc")  # by their medians: 1010 and about 1250
    assert (order.ahead, order.behind, order.unresolved) == (0, 1, 1)
    assert not order.claimed and "no order" in order.describe()
    lines = found.summary()
    assert lines[0] == "Events over 3 seeds (seed 1 (run 0), seed 0 (run 1), seed 2 (run 2)):"
    (row,) = [line for line in lines if line.strip().startswith("acc ")]
    assert "(no event in seed 1)" in row and row.split("half: ")[1].startswith(
        f"{statistics.median(acc.steps):.0f} ["
    )
    record = found.to_dict()
    assert record["halfway"]["acc"][0] is None and record["orders"][0]["claimed"] is False


def test_analysis_controls_says_each_runs_events_and_margins(induction_run, tmp_path, capsys):
    """A folder of runs (here the tiny run twice, one named as a control): one row each, the events
    (none), each test's largest ratio and the curve nearest an event; controls.json with the curves
    judged: the loss, the accuracy, the task's scores and every head's measures of formation."""
    import shutil

    from transformer_lab.analysis import controls

    folder = tmp_path / "controls"
    for name in ("steps_600", "mine"):
        shutil.copytree(induction_run, folder / name)
    load_script("interpret").main([f"ckpt_path={folder}", "analysis=controls", f"out_dir={tmp_path}"])
    printed = capsys.readouterr().out
    assert (
        "steps_600 (experiment=induction_heads trainer.max_steps=600: stopped before the heads form): 6 "
        in printed
    )
    header = next(line for line in printed.splitlines() if line.startswith("run "))
    assert header.split()[:8] == ["run", "events", "range", "scale", "chance", "noise", "sudden", "kept"]
    record = json.loads((tmp_path / "controls.json").read_text())
    assert list(record) == ["steps_600", "mine"] and record["mine"]["overrides"] is None
    judged = set(record["steps_600"]["curves"])
    heads = {
        f"L{layer}H{head} {m}" for layer in (0, 1) for head in (0, 1) for m in ("induction", "previous_token")
    }
    assert judged == {"loss", "acc", "induction", "previous_token", "repeat_gain"} | heads
    for run in record.values():
        assert run["unexpected"] == run["events"] and set(run["margins"]["tests"]) == set(events.TESTS)
    assert [c.name for c in controls.CONTROLS] == [
        "one_layer", "lr_tenth", "steps_600", "reverse", "no_decay", "shuffled_labels"
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="holds no runs with snapshots; analysis=controls reads a folder"):
        load_script("interpret").main(
            [f"ckpt_path={induction_run}", "analysis=controls", f"out_dir={tmp_path}"]
        )


def test_a_control_expects_only_the_events_it_names():
    """Grokking without weight decay memorises, and its held-out accuracy rises with it to the share of
    pairs whose mirror is trained (about 0.29) by step ~60, as in every grokking run: that event its
    control expects; the same rise after step 100, or any other curve's event, it does not."""
    from transformer_lab.analysis import controls

    memorised = _step_at(55, 0.01, 0.29)
    late = _step_at(2000, 0.01, 0.29)
    no_decay = controls.BY_NAME["no_decay"]
    early_run = _run(memorised, [0.05] * len(STEPS))
    assert [e["curve"] for e in early_run.events] == ["acc"] and no_decay.unexpected(early_run) == []
    late_run = _run(late, [0.05] * len(STEPS))
    assert [e["curve"] for e in no_decay.unexpected(late_run)] == ["acc"]
    assert controls.BY_NAME["lr_tenth"].unexpected(early_run) == early_run.events
    lines = controls.table({"no_decay": early_run, "lr_tenth": early_run})
    assert any("(expected: the held-out accuracy rising with memorisation" in line for line in lines)
    assert sum("no_decay: step" in line or "lr_tenth: step" in line for line in lines) == 2


def test_the_runs_phase_change_is_on_the_metrics_scale_and_leaves_out_the_spikes():
    """The PhaseChange callback measures val/loss in nats of log V (V: the model's output classes, set
    when the fit starts): the one-layer control's 0.15-nat dip is no phase change on log 32 (its scale
    test fails), though it is 87% of its own range. The training loss it records at each validation
    finds the spikes (two validations side by side, after the phase change, whose training and
    validation losses jump 3.5 nats: a slingshot), which are left out: the fall at step 1500 is the
    event, not the spike's larger recovery at step 2200."""
    dip = PhaseChange(monitor="val/loss", direction="fall")
    dip.outputs = 32
    dip.history = [
        (250 * (i + 1), v) for i, v in enumerate([3.46, 3.45, 3.44, 3.29, 3.28, 3.27] + [3.26] * 6)
    ]
    assert dip.change().failed == "scale" and "of its scale 3.47 nats: log 32" in dip.describe()
    spiky = PhaseChange(monitor="val/loss", direction="fall")
    spiky.outputs = 32
    steps = list(range(100, 3001, 100))
    loss = [0.8 + 2.6 / (1 + math.exp((math.log(s) - math.log(1500)) / 0.08)) for s in steps]
    train = [v - 0.1 for v in loss]
    for k in (19, 20):  # steps 2000 and 2100
        loss[k] += 3.5
        train[k] += 3.5
    spiky.history = list(zip(steps, loss, strict=True))
    spiky.training_loss = dict(zip(steps, train, strict=True))
    assert spiky.spikes() == [2000, 2100]
    change = spiky.change()
    assert change.event and 1400 <= change.halfway <= 1600
    spiky.training_loss = {}
    assert spiky.change().halfway > 2100  # with the spikes in: the largest fall is the spike's recovery
    resumed = PhaseChange(monitor="val/loss", direction="fall")
    resumed.load_state_dict({**spiky.state_dict(), "training_loss": [[2000, 4.1]]})
    assert resumed.training_loss == {2000: 4.1}


def test_the_figures_mark_the_spikes(induction_run):
    """A spike (here the snapshot at step 4, as if its training loss had jumped) is drawn as a red cross
    on the loss and a red band on every panel, in the run's figure and in the seeds' figure."""
    from transformer_lab.analysis.seeds import over_seeds
    from transformer_lab.figures.dynamics import dynamics_figure, seeds_figure

    result = dynamics.over_snapshots(str(induction_run), count=16)
    result.spikes = [4]
    figure = dynamics_figure(result, "spikes")
    top = figure.axes[0]
    crosses = [line for line in top.get_lines() if line.get_marker() == "x"]
    assert list(crosses[0].get_xdata()) == [4]
    assert any(text.get_text() == "spike (left out of timings)" for text in top.get_legend().get_texts())
    assert all(any(p.get_facecolor()[0] == 1.0 for p in ax.patches) for ax in figure.axes[:1])
    seeds = seeds_figure(over_seeds({"0": result, "1": result}), "spikes")
    assert sum(line.get_marker() == "x" for line in seeds.axes[0].get_lines()) == 2
