"""Nothing a config, a shared experiment file or a command line says runs code, writes outside the run or
mixes two runs: what `python train.py` checks before Hydra runs (transformer_lab.train.prepare)."""

import os
import sys

import pytest

from tests.conftest import ROOT, run_cli
from transformer_lab import ConfigError
from transformer_lab.train import prepare
from transformer_lab.training import run_dir

TINY = ["experiment=reverse_tiny"]


@pytest.fixture(autouse=True)
def released():
    yield
    run_dir.release_all()


@pytest.fixture
def marker(tmp_path):
    """A file that appears if any of the refused nodes is ever called."""
    return tmp_path / "ran"


def _experiment(tmp_path, text: str) -> str:
    """A shared experiment file, found through hydra.searchpath as people share them."""
    folder = tmp_path / "shared" / "experiment"
    folder.mkdir(parents=True)
    (folder / "shared.yaml").write_text("# @package _global_\n" + text)
    return f"hydra.searchpath=[file://{tmp_path / 'shared'}]"


def _refused(argv: list[str], message: str) -> str:
    with pytest.raises(ConfigError, match=message) as info:
        prepare(argv)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_an_interpolation_that_makes_a_node_is_resolved_before_it_is_judged(tmp_path, marker):
    node = f"{{_target_: builtins.open, file: {marker}, mode: w}}"
    _refused(
        [*TINY, f"hydra.run.dir={tmp_path / 'run'}", f"+callbacks.x='${{oc.decode:\"{node}\"}}'"],
        r"callbacks\.x\._target_=builtins\.open is not allowed",
    )
    shared = _experiment(tmp_path, f"callbacks:\n  x: \"${{oc.decode:'{node}'}}\"\n")
    _refused([shared, "experiment=shared", f"hydra.run.dir={tmp_path / 'run'}"], r"builtins\.open is not")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["+hydra.callbacks.x._target_=builtins.open"],
            r"hydra\.callbacks\.x\._target_=builtins\.open is not",
        ),
        (
            ["hydra/launcher=submitit_local", "+hydra.launcher._target_=os.system"],
            r"hydra\.launcher\._target_",
        ),
        (["+hydra.job.env_set.PYTHONSTARTUP=/tmp/x.py"], r"hydra\.job\.env_set=.* is not allowed"),
        (["hydra.searchpath=[pkg://os]"], "hydra.searchpath entry pkg://os is not allowed"),
        (["--experimental-rerun", "config.pickle"], "--experimental-rerun is not accepted here"),
        (["--config-dir", "/tmp"], "--config-dir is not accepted here"),
    ],
)
def test_hydra_s_own_settings_are_checked_too(tmp_path, argv, message):
    _refused([*TINY, f"hydra.run.dir={tmp_path / 'run'}", *argv], message)


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        (
            "hydra:\n  job_logging:\n    formatters:\n      console:\n        (): builtins.open\n",
            r"\(\)=builtins",
        ),
        ("hydra:\n  job_logging:\n    handlers:\n      file:\n        class: os.system\n", "class=os.system"),
        (
            "hydra:\n  job_logging:\n    handlers:\n      console:\n        stream: ext://evil.x\n",
            "ext://evil",
        ),
        ("hydra:\n  callbacks:\n    x:\n      _target_: builtins.print\n", r"hydra\.callbacks\.x\._target_"),
        ("hydra:\n  job:\n    env_set:\n      LD_PRELOAD: x.so\n", r"hydra\.job\.env_set="),
        ("callbacks:\n  best_checkpoint:\n    dirpath: /tmp/elsewhere\n", "is outside the run directory"),
        ("logger:\n  tensorboard:\n    save_dir: /tmp/elsewhere\n", r"logger\.tensorboard\.save_dir=/tmp"),
        ("trainer:\n  default_root_dir: /tmp/elsewhere\n", r"trainer\.default_root_dir=/tmp/elsewhere"),
        (
            "trainer:\n  profiler:\n    _target_: lightning.pytorch.profilers.SimpleProfiler\n"
            "    dirpath: /tmp/elsewhere\n",
            r"trainer\.profiler\.dirpath=/tmp/elsewhere is outside",
        ),
        (
            "hydra:\n  job_logging:\n    handlers:\n      file:\n        filename: /tmp/x.log\n",
            "filename=/tmp",
        ),
    ],
)
def test_a_shared_experiment_file_cannot_run_code_or_write_elsewhere(tmp_path, yaml, message):
    shared = _experiment(tmp_path, yaml)
    _refused([*TINY, shared, "experiment=shared", f"hydra.run.dir={tmp_path / 'run'}"], message)


def test_an_optuna_search_may_only_vary_plain_settings(tmp_path):
    shared = _experiment(
        tmp_path, "hydra:\n  sweeper:\n    params:\n      callbacks.x._target_: choice(builtins.print)\n"
    )
    argv = ["-m", shared, "experiment=shared", "hparams_search=reverse_optuna", f"hydra.sweep.dir={tmp_path}"]
    _refused(argv, "may only vary plain settings")


def test_each_job_of_a_sweep_is_checked(tmp_path):
    _refused(
        ["-m", *TINY, "+callbacks.x._target_=lightning.pytorch.callbacks.Timer,builtins.print"],
        r"callbacks\.x\._target_=builtins\.print is not allowed",
    )
    argv = prepare(["-m", *TINY, "model.num_heads=1,2", f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert argv[-1] == f"hydra.sweep.dir={tmp_path / 'sweep'}"


def test_the_command_line_may_name_where_things_go(tmp_path):
    argv = prepare(
        [*TINY, f"hydra.run.dir={tmp_path / 'run'}", f"callbacks.best_checkpoint.dirpath={tmp_path}"]
    )
    assert argv[-1] == f"hydra.run.dir={tmp_path / 'run'}"


def test_a_task_module_in_the_current_directory_is_not_imported(tmp_path, marker, monkeypatch):
    (tmp_path / "evilmod.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    _refused([*TINY, "data._target_=evilmod.Task"], "evilmod is not found outside the current directory")
    assert not marker.exists()


def test_two_runs_never_share_a_directory(tmp_path):
    explicit = tmp_path / "run"
    assert prepare([*TINY, f"hydra.run.dir={explicit}"])[-1] == f"hydra.run.dir={explicit}"
    # the first run holds its directory (an OS lock, released when its process ends)
    _refused([*TINY, f"hydra.run.dir={explicit}"], "is in use by a training run that is still going")
    run_dir.release_all()
    (explicit / "checkpoints").mkdir()  # the first run is over and left its files
    _refused([*TINY, f"hydra.run.dir={explicit}"], "holds another run; .* continue that run with resume=")
    assert sorted(p.name for p in explicit.iterdir()) == ["checkpoints"]  # nothing of it removed


def test_a_taken_default_name_gets_a_suffix(tmp_path):
    first = prepare([*TINY, f"paths.log_dir={tmp_path}"])[-1].partition("=")[2]
    (tmp_path / "reverse" / os.path.basename(first) / ".hydra").mkdir(parents=True, exist_ok=True)
    second = prepare([*TINY, f"paths.log_dir={tmp_path}"])[-1].partition("=")[2]
    assert second != first and os.path.dirname(second) == os.path.dirname(first)


def test_the_refusals_reach_the_command_line_as_one_line_and_run_nothing(tmp_path, marker):
    node = f"{{_target_: builtins.open, file: {marker}, mode: w}}"
    attack = f"+callbacks.x='${{oc.decode:\"{node}\"}}'"
    for entry in (["train.py"], ["-m", "transformer_lab.train"]):
        result = run_cli(*entry, *TINY, f"paths.log_dir={tmp_path}", attack)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("error: callbacks.x._target_=builtins.open is not allowed")
    assert not marker.exists() and not (tmp_path / "reverse").exists()


def test_python_m_shows_what_python_train_py_shows(tmp_path):
    """The documented way without the checkout prints the run's header, test result and directory."""
    result = run_cli(
        "-m", "transformer_lab.train", *TINY, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    text = result.stdout + result.stderr
    assert "Training on cpu" in text and "Test: test/loss=" in text and "Run directory: run" in text
    assert (ROOT / "train.py").is_file()
