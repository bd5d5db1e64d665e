"""What people see: the console of a training run (device, model, validations, result, where the files are;
no library noise) and train.log behind it; `--help` and argument errors of every script answered before
torch is imported."""

import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.callbacks import TQDMProgressBar

from tests.conftest import ROOT, TINY_REVERSE, compose_train_config, encoder_classifier, gpt_decoder
from transformer_lab.data import SortDataModule
from transformer_lab.nn import EncoderDecoder, ModelConfig
from transformer_lab.train import train
from transformer_lab.training import console
from transformer_lab.training.progress import CompactProgressBar, bar_only_where_watched

# Runs a script as `python <script> <args>` would, then reports (in a file, so the script's own output is
# untouched) its exit status and whether torch, lightning or matplotlib were imported.
WRAPPER = """
import json, runpy, sys
report, script, *args = sys.argv[1:]
sys.argv = [script, *args]
sys.path.insert(0, str(__import__("pathlib").Path(script).resolve().parent))
code = 0
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
heavy = sorted(m for m in ("torch", "lightning", "matplotlib") if m in sys.modules)
open(report, "w").write(json.dumps({"code": code, "heavy": heavy}))
sys.exit(code)
"""

# (script, a bad argument, the start of its one-line error; None: the script's own format)
SCRIPTS = [
    ("scripts/explain.py", ["foo=1"], "error: unknown argument 'foo=1'; use ckpt_path=..."),
    ("scripts/explain.py", [], "error: missing ckpt_path=..."),
    ("scripts/sample.py", ["foo=1"], "error: unknown argument 'foo=1'; use ckpt_path=..."),
    ("scripts/interpret.py", ["ckpt_path=x.ckpt", "analysis=nope"], "error: analysis=nope is unknown"),
    ("scripts/interpret.py", ["ckpt_path=x.ckpt", "analysis=heads", "method=max"], "error: method=max is"),
    ("scripts/summarize.py", [], "error: the following arguments are required: root; see summarize.py"),
    ("scripts/summarize.py", ["/nonexistent/runs"], "error: /nonexistent/runs is not a directory"),
    ("scripts/plots.py", ["foo=1"], "error: argument {positional_encoding,lr_schedule}: invalid choice"),
    ("scripts/plots.py", ["positional_encoding", "model_dim=7"], "error: model_dim=7 must be even"),
    # the other scripts (their own tests check their messages): exit status 2 before torch is imported
    ("scripts/explore.py", ["foo=1"], None),
    ("scripts/curves.py", [], None),
    ("scripts/params.py", ["foo=1"], None),
    ("scripts/pretrain.py", ["--bogus"], None),
]


def run_wrapped(tmp_path: Path, script: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(report), script, *args],
        cwd=ROOT,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result, json.loads(report.read_text())


@pytest.mark.parametrize("script", sorted({s for s, _, _ in SCRIPTS}))
def test_script_help_does_not_import_torch(tmp_path, script):
    if not (ROOT / script).is_file():
        pytest.skip(f"{script} is not in this checkout")
    result, report = run_wrapped(tmp_path, script, "--help")
    assert report == {"code": 0, "heavy": []}, result.stderr[-2000:]
    assert result.stdout.startswith("usage:") and result.stderr == ""


@pytest.mark.parametrize(("script", "args", "error"), SCRIPTS)
def test_script_argument_error_is_one_line_without_torch(tmp_path, script, args, error):
    if not (ROOT / script).is_file():
        pytest.skip(f"{script} is not in this checkout")
    result, report = run_wrapped(tmp_path, script, *args)
    assert report == {"code": 2, "heavy": []}, result.stderr[-2000:]
    if error is not None:
        assert result.stderr.startswith(error) and result.stderr.count("\n") == 1, result.stderr


@pytest.mark.parametrize(
    ("args", "code", "output"),
    [
        (["--help"], 0, "transformer-lab: train a hand-built Transformer"),
        (
            ["task=nope"],
            2,
            "error: In 'train': Could not find 'task/nope' Available options in 'task': ",
        ),
        (
            ["trainer.max_stepz=5"],
            2,
            "error: trainer.max_stepz is not a setting of the config; did you mean ",
        ),
        (
            ["model.num_head=4"],
            2,
            "error: model.num_head is not a setting of the config; did you mean model.num_heads?",
        ),
    ],
)
def test_train_help_and_hydra_errors_do_not_import_torch(tmp_path, args, code, output):
    result, report = run_wrapped(tmp_path, "train.py", *args)
    assert report == {"code": code, "heavy": []}, result.stderr[-2000:]
    assert output in result.stdout + result.stderr
    assert not list(ROOT.glob("saved_models/nope"))


def test_the_console_of_a_run_says_what_a_person_needs(tmp_path):
    """`python train.py` (tiny), output to a pipe as in CI or `| tee`: the run's lines, nothing else."""
    overrides = [o for o in TINY_REVERSE if "refresh_rate" not in o]  # the default progress bar
    result = subprocess.run(
        [sys.executable, "train.py", f"paths.log_dir={tmp_path}", *overrides],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "reverse").iterdir()
    text = result.stdout + result.stderr
    lines = text.splitlines()
    assert lines[0].startswith(
        "Training on cpu (32-true precision, 2 threads: OMP_NUM_THREADS=2); run directory "
    )
    assert lines[0].endswith(str(run_dir)) or lines[0].endswith(console.shown_path(run_dir))
    assert lines[1] == "Model: EncoderClassifier (1 layer, 1 head, model_dim 32), 10.6 K parameters"
    assert lines[2].startswith("epoch 0  step 8  val/loss=") and "val/acc=" in lines[2]
    assert lines[3] == "`Trainer.fit` stopped: `max_epochs=1` reached."
    assert lines[4].startswith("Test: test/loss=") and "test/seq_acc=" in lines[4]
    best = run_dir / "checkpoints" / "best.ckpt"
    assert any(str(best) in line and "best.ckpt" in line for line in lines[5:])
    assert any(f"tensorboard --logdir {run_dir}" in line for line in lines[5:])
    assert any(f"ckpt_path={best}" in line and line.split()[1] == "python" for line in lines[5:])
    assert len(lines) <= 12 and len(text) < 2000, text
    for noise in ("\r", "Tip:", "litlogger", "LeafSpec", "FLOPs", "GPU available", "INFO", "Sanity", "┃"):
        assert noise not in text, noise

    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["best_score"] == pytest.approx(metrics["val/acc"])  # one validation: it is the best
    log = (run_dir / "train.log").read_text()  # everything, for debugging: Lightning's lines too
    for record in ("GPU available: False", "Restoring states from the checkpoint path", "epoch 0  step 8"):
        assert record in log, record
    assert "litlogger" not in log


def test_model_summary_names_the_model_and_counts_shared_weights_once():
    decoder = gpt_decoder(vocab_size=65, block_size=16)  # tied embeddings
    total = sum(p.numel() for p in decoder.parameters())
    assert total < sum(p.numel() for _, p in decoder.named_parameters(remove_duplicate=False))
    assert console.model_summary(decoder) == (
        f"Model: DecoderLM (2 layers, 2 heads, model_dim 32), {console.count(total)} parameters"
    )
    task = SortDataModule(train_size=8, val_size=8, test_size=8)
    seq2seq = EncoderDecoder(ModelConfig(arch="encoder_decoder", num_layers=2, **task.model_settings()))
    assert console.model_summary(seq2seq).startswith(
        "Model: EncoderDecoder (2 encoder + 2 decoder layers, 1 head,"
    )
    encoder = encoder_classifier()
    encoder.embed.weight.requires_grad_(False)
    assert "trainable)" in console.model_summary(encoder)
    assert [console.count(n) for n in (999, 10_600, 809_152, 12_345_678)] == [
        "999",
        "10.6 K",
        "809 K",
        "12.3 M",
    ]


def test_console_filter_and_formatter():
    keep, fmt = console.ConsoleFilter(), console.ConsoleFormatter("%(message)s")

    def record(name: str, level: int, message: str, **extra: object) -> logging.LogRecord:
        made = logging.LogRecord(name, level, __file__, 1, message, None, None)
        made.__dict__.update(extra)
        return made

    assert keep.filter(record("transformer_lab.train", logging.INFO, "Training on cpu"))
    assert not keep.filter(record("lightning.pytorch.utilities.rank_zero", logging.INFO, "GPU available"))
    assert keep.filter(record("lightning.pytorch.utilities.rank_zero", logging.INFO, "`Trainer.fit` stopped"))
    assert not keep.filter(record("transformer_lab.train", logging.INFO, "file only", console=False))
    warning = record(
        "py.warnings",
        logging.WARNING,
        "/x/site-packages/lightning/pytorch/loops/fit_loop.py:321: UserWarning: Too few batches.\n  f(x)\n",
    )
    assert keep.filter(warning)
    assert fmt.format(warning) == "warning: Too few batches. [lightning/pytorch/loops/fit_loop.py:321]"
    assert fmt.format(record("x", logging.ERROR, "boom")) == "error: boom"


def test_known_warnings_are_filtered_by_message_only():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        console.ignore_known_noise()
        warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated, use ...", FutureWarning, stacklevel=1)
        warnings.warn("Your `IterableDataset` has `__len__` defined. In combination ...", stacklevel=1)
        warnings.warn("Something real happened", UserWarning, stacklevel=1)
        warnings.warn("`isinstance(x, Y)` is deprecated", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["Something real happened", "`isinstance(x, Y)` is deprecated"]


@pytest.mark.parametrize(("requested", "enabled"), [(None, False), (True, True), (False, False)])
def test_progress_bar_off_a_terminal_unless_asked_for(monkeypatch, requested, enabled):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    trainer = L.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=requested is not False,
        callbacks=[TQDMProgressBar(refresh_rate=20)] if requested is not False else None,
    )
    bar_only_where_watched(trainer, requested)
    assert (trainer.progress_bar_callback is not None and trainer.progress_bar_callback.is_enabled) == enabled


def test_a_line_logged_under_a_progress_bar_gets_a_line_of_its_own():
    """At 80 columns the bar kept its width (one number after it) and a logged line, such as Lightning's
    "`Trainer.fit` stopped", is written above the bar, not on its line."""
    import io

    from tqdm import tqdm

    terminal = io.StringIO()
    bar = tqdm(total=100, file=terminal, ncols=80)
    bar.update(100)
    handler = console.ConsoleHandler(terminal)
    handler.emit(logging.LogRecord("lightning", logging.INFO, "", 0, "`Trainer.fit` stopped", None, None))
    bar.close()
    shown = [line.rpartition("\r")[2].rstrip() for line in terminal.getvalue().split("\n")]
    assert "`Trainer.fit` stopped" in shown
    assert sum("100%" in line for line in shown) == 1

    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False)
    trainer.progress_bar_metrics.update({"train/loss": 2.4113, "train/acc": 0.5, "train/lr": 1e-3})
    assert CompactProgressBar().get_metrics(trainer, None) == {"loss": "2.411"}


def test_interpret_checks_methods_without_importing_the_analyses():
    from tests.conftest import load_script
    from transformer_lab import interventions

    assert load_script("interpret").METHODS == interventions.ABLATIONS


def test_overfitting_one_batch_shows_the_training_metrics_it_is_about(tmp_path, caplog):
    """debug=overfit: train/acc must reach 1, so each console line shows it beside the val/ metrics."""
    cfg = compose_train_config(
        tmp_path,
        "debug=overfit",
        "trainer.max_epochs=null",
        "trainer.max_steps=20",
        "trainer.check_val_every_n_epoch=10",
    )
    with caplog.at_level(logging.INFO, logger="transformer_lab"):
        train(cfg)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch ")]
    assert [line.split()[3] for line in lines] == ["10", "20"]
    assert all("train/acc=" in line and "train/loss=" in line and "val/acc=" in line for line in lines)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="transformer_lab"):
        train(compose_train_config(tmp_path / "plain"))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch ")]
    assert lines and not any("train/" in line for line in lines)  # a normal run: val/ only


def test_a_run_stopped_before_its_first_validation_says_where_its_weights_are(tmp_path):
    """No validation ran (max_steps before the first), so no best.ckpt: the summary names last.ckpt and
    how to explore it, instead of nothing."""
    from tests.conftest import compose_train_config
    from transformer_lab.train import train

    metrics = train(compose_train_config(tmp_path, "trainer.max_steps=3"))
    assert metrics["best_ckpt_path"] is None
    lines = console.run_summary(tmp_path, metrics, None)
    last = console.shown_path(tmp_path / "checkpoints" / "last.ckpt")
    assert f"  last.ckpt     {last} (no validation ran, so there is no best.ckpt)" in lines
    assert f"  Explore       python -m transformer_lab.explore ckpt_path={last}" in lines


def test_output_to_a_file_gets_a_progress_line_between_validations(tmp_path, monkeypatch, caplog):
    """Where no bar is shown (output to a file: no terminal), a line at least every progress.EVERY
    seconds: the step of the total, the training loss, the pace, the time left (here EVERY=0: each step)."""
    import logging

    from transformer_lab.training import progress

    monkeypatch.setattr(progress, "EVERY", 0.0)
    monkeypatch.setattr(progress, "interactive", lambda: False)  # an earlier test may have imported ipykernel
    with caplog.at_level(logging.INFO, logger="transformer_lab"):
        train(compose_train_config(tmp_path, "trainer.max_steps=3", base=TINY_REVERSE))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(progress.HEARTBEAT)]
    assert len(lines) == 3, lines
    assert lines[-1].startswith("progress: step 3 of 3  train/loss=") and " tokens/s" in lines[-1]
    assert lines[0].startswith("progress: step 1 of 3") and lines[-1].endswith("about 0 s left")


@pytest.mark.parametrize(("seconds_a_step", "lines_at"), [(20.0, [1, 2, 3, 4, 5, 6]), (10.0, [2, 4, 6])])
def test_progress_lines_never_leave_a_gap_longer_than_every(monkeypatch, caplog, seconds_a_step, lines_at):
    """Steps of 20 s with EVERY=30: waiting for 30 s since the last line would leave 40 s gaps, so a line
    follows every step; steps of 10 s: every second step (20 s apart). Each line carries that step's loss."""
    from types import SimpleNamespace

    import torch

    from transformer_lab.training import progress

    clock = {"now": 0.0}
    monkeypatch.setattr(progress.time, "perf_counter", lambda: clock["now"])
    monkeypatch.setattr(progress, "interactive", lambda: False)
    callback = progress.ValidationLog()
    trainer = SimpleNamespace(global_step=0, estimated_stepping_batches=6, is_global_zero=True)
    callback.on_fit_start(trainer, None)
    printed = []
    with caplog.at_level(logging.INFO, logger="transformer_lab"):
        for step in range(1, 7):
            clock["now"] += seconds_a_step
            trainer.global_step = step
            before = len(caplog.records)
            batch = (torch.zeros(4, 8, dtype=torch.long),)
            callback.on_train_batch_end(trainer, None, {"loss": torch.tensor(2.5)}, batch, step)
            if len(caplog.records) > before:
                printed.append(step)
                assert (
                    caplog.records[-1]
                    .getMessage()
                    .startswith(f"progress: step {step} of 6  train/loss=2.5000")
                )
    assert printed == lines_at
