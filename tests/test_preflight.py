"""Nothing a config, a shared experiment file or a command line says runs code, writes outside the run or
mixes two runs: what `python train.py` checks before Hydra runs (transformer_lab.train.prepare)."""

import fnmatch
import os
import re
import sys

import pytest
import yaml

from tests.conftest import ROOT, run_cli
from transformer_lab import ConfigError
from transformer_lab.train import prepare
from transformer_lab.training import preflight, run_dir

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


HYDRA_FROM_FILE = ".*may not say where the run goes or what Hydra runs"


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        (
            "hydra:\n  job_logging:\n    formatters:\n      console:\n        (): builtins.open\n",
            r"sets hydra\.job_logging\.formatters\.console\.\(\): " + HYDRA_FROM_FILE,
        ),
        (
            "hydra:\n  job_logging:\n    handlers:\n      file:\n        class: os.system\n",
            r"sets hydra\.job_logging\.handlers\.file\.class: ",
        ),
        (
            "hydra:\n  job_logging:\n    handlers:\n      console:\n        stream: ext://evil.x\n",
            r"sets hydra\.job_logging\.handlers\.console\.stream: ",
        ),
        (
            "hydra:\n  callbacks:\n    x:\n      _target_: builtins.print\n",
            r"sets hydra\.callbacks\.x\._target_",
        ),
        ("hydra:\n  job:\n    env_set:\n      LD_PRELOAD: x.so\n", r"sets hydra\.job\.env_set\.LD_PRELOAD"),
        # the cases: where Hydra writes its files, a log file of Hydra's own, a sweep from a file
        ("hydra:\n  output_subdir: /tmp/elsewhere\n", r"sets hydra\.output_subdir: " + HYDRA_FROM_FILE),
        (
            "hydra:\n  hydra_logging:\n    handlers:\n      f:\n        class: logging.FileHandler\n"
            "        filename: /tmp/x.log\n",
            r"sets hydra\.hydra_logging\.handlers\.f\.class",
        ),
        ("hydra:\n  mode: MULTIRUN\n  sweep:\n    dir: /tmp/elsewhere\n", r"sets hydra\.mode: "),
        ("hydra:\n  run:\n    dir: /tmp/elsewhere\n", r"sets hydra\.run\.dir: "),
        ("hydra:\n  sweeper:\n    storage: sqlite:////tmp/x.db\n", r"sets hydra\.sweeper\.storage: "),
        ("paths:\n  log_dir: /tmp/elsewhere\n", r"sets paths\.log_dir: "),
        (
            "defaults:\n  - override /hydra/launcher: submitit_local\n",
            r"chooses hydra/launcher=submitit_local",
        ),
        ("defaults:\n  - override /hydra/job_logging: disabled\n", r"chooses hydra/job_logging=disabled"),
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
            r"sets hydra\.job_logging\.handlers\.file\.filename",
        ),
        (
            "logger:\n  tensorboard:\n    name: /tmp/elsewhere\n",
            r"logger\.tensorboard\.name=/tmp/elsewhere is",
        ),
        (
            "logger:\n  tensorboard:\n    name: ../../x\n",
            r"logger\.tensorboard\.name=.*\.\./\.\./x is outside",
        ),
        ("logger:\n  tensorboard:\n    version: ../x\n", r"logger\.tensorboard\.version=.* is outside"),
        (
            "trainer:\n  profiler:\n    _target_: lightning.pytorch.profilers.SimpleProfiler\n"
            "    dirpath: ${paths.output_dir}\n    filename: ../../x\n",
            r"trainer\.profiler\.filename=.*/\.\./\.\./x is outside the run directory",
        ),
    ],
)
def test_a_shared_experiment_file_cannot_run_code_or_write_elsewhere(tmp_path, yaml, message):
    shared = _experiment(tmp_path, yaml)
    _refused([*TINY, shared, "experiment=shared", f"hydra.run.dir={tmp_path / 'run'}"], message)
    _refused([*TINY, shared, "experiment=shared", f"paths.log_dir={tmp_path / 'runs'}"], message)
    assert not (tmp_path / "run").exists() and not (tmp_path / "runs").exists()


def test_a_task_name_cannot_move_the_run_out_of_the_log_directory(tmp_path):
    shared = _experiment(tmp_path, "task_name: ../../../elsewhere\n")
    _refused(
        [*TINY, shared, "experiment=shared", f"paths.log_dir={tmp_path / 'a' / 'b'}"],
        r"is outside paths\.log_dir=.*: task_name='\.\./\.\./\.\./elsewhere' must be a plain name",
    )
    assert not any(tmp_path.rglob("elsewhere"))


def test_a_shared_search_may_set_its_space_size_and_sampler(tmp_path):
    """The allowlist: what a shared Optuna search file needs of Hydra's settings is accepted."""
    shared = _experiment(
        tmp_path,
        "defaults:\n  - override /hydra/sweeper: optuna\n  - override /hydra/sweeper/sampler: random\n"
        "hydra:\n  sweeper:\n    n_trials: 3\n    direction: maximize\n    sampler:\n      seed: 7\n"
        "    params:\n      model.lr: choice(0.01, 0.001)\n"
        "  job_logging:\n    loggers:\n      lightning:\n        level: WARNING\n",
    )
    argv = prepare(["-m", *TINY, shared, "experiment=shared", f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert argv[-1] == f"hydra.sweep.dir={tmp_path / 'sweep'}"


def test_the_command_line_may_set_what_a_file_may_not(tmp_path):
    """The same Hydra settings a shared file is refused are the user's to give on the command line."""
    argv = prepare([*TINY, f"hydra.run.dir={tmp_path / 'run'}", f"hydra.output_subdir={tmp_path / 'hydra'}"])
    assert argv[-1] == f"hydra.run.dir={tmp_path / 'run'}"
    _refused([*TINY, "hydra.mode=MULTIRUN"], "hydra.mode is not set by hand: a sweep is -m")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bomb.yaml", "a: &a [x, x]\nb: [*a, *a]\n", "an alias"),
        ("bad.yaml", "a: [unclosed\n", "is not valid YAML"),
        ("fifo.yaml", None, "is not a regular file"),
    ],
)
def test_a_search_path_file_that_would_hang_hydra_is_refused_before_hydra_reads_it(
    tmp_path, name, content, message
):
    folder = tmp_path / "shared" / "experiment"
    folder.mkdir(parents=True)
    if content is None:
        os.mkfifo(folder / name)
    else:
        (folder / name).write_text(content)
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'shared'}]"
    _refused([*TINY, searchpath, f"hydra.run.dir={tmp_path / 'run'}"], message)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bogus"], "--bogus is not an option; python train.py --help lists them"),
        (["--cfg", "everything"], "--cfg everything must be one of job, hydra, all"),
        (["seed=-5"], r"seed=-5 is out of range; use an integer from 0 to 4294967295"),
        (["seed=4294967296"], "seed=4294967296 is out of range"),
    ],
)
def test_flags_and_seeds_the_run_cannot_use_are_one_line_and_leave_no_folder(tmp_path, argv, message):
    _refused([*TINY, f"paths.log_dir={tmp_path}", *argv], message)
    assert not any(tmp_path.iterdir())


def test_a_rank_variable_in_the_environment_joins_no_run(tmp_path, monkeypatch):
    """LOCAL_RANK=1 alone (no run leading this process) is refused: it would skip the directory's lock."""
    finished = tmp_path / "run"
    (finished / "checkpoints").mkdir(parents=True)
    for variable in ("LOCAL_RANK", "RANK"):
        monkeypatch.setenv(variable, "1")
        _refused([*TINY, f"hydra.run.dir={finished}"], f"{variable}=1 is set in the environment, but")
        monkeypatch.delenv(variable)
    # a leftover lock variable naming a run that this process's parent does not lead joins nothing
    monkeypatch.setenv(run_dir.RANK_ENV, f"{os.getpid()}:{finished}")
    monkeypatch.setenv("LOCAL_RANK", "1")
    _refused([*TINY, f"hydra.run.dir={finished}"], "LOCAL_RANK=1 is set in the environment")
    assert sorted(p.name for p in finished.iterdir()) == ["checkpoints"]


def test_the_ranks_of_a_ddp_run_are_known_by_the_lock_their_parent_holds(tmp_path, monkeypatch):
    """What Lightning's launcher does: rank 0 claims and locks the directory; a child it starts (its
    parent is rank 0) with that directory joins it; the same variables in any other process do not."""
    run = tmp_path / "run"
    assert prepare([*TINY, f"hydra.run.dir={run}"])[-1] == f"hydra.run.dir={run}"
    pid, _, directory = os.environ[run_dir.RANK_ENV].partition(":")
    assert pid == str(os.getpid()) and directory == str(run.resolve())
    child = [*TINY, f"hydra.run.dir={run}", "hydra.job.name=train_ddp_process_1"]
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(os, "getppid", os.getpid)  # as the child sees it: its parent is rank 0
    assert run_dir.joining_ddp_run(child)
    with pytest.raises(ConfigError, match="LOCAL_RANK=1 is set"):  # told to join another directory
        run_dir.joining_ddp_run([*TINY, f"hydra.run.dir={tmp_path / 'other'}"])
    monkeypatch.setattr(os, "getppid", lambda: 1)  # the same variables, another parent
    with pytest.raises(ConfigError, match="LOCAL_RANK=1 is set"):
        run_dir.joining_ddp_run(child)
    run_dir.release_all()  # rank 0 ended: its lock is gone, and nothing joins the directory
    monkeypatch.setattr(os, "getppid", os.getpid)
    monkeypatch.setenv(run_dir.RANK_ENV, f"{os.getpid()}:{run.resolve()}")
    with pytest.raises(ConfigError, match="LOCAL_RANK=1 is set"):
        run_dir.joining_ddp_run(child)


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
    (explicit / "checkpoints" / "last.ckpt").write_bytes(b"a checkpoint")
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


def test_every_setting_of_hydra_a_shared_file_could_set_is_refused_but_the_allowlist(tmp_path):
    """Not key by key: every leaf of Hydra's composed settings, set by a file on the search path."""
    from omegaconf import OmegaConf

    from transformer_lab.training.compose import compose_config

    hydra = OmegaConf.to_container(compose_config(TINY, return_hydra_config=True).hydra, resolve=False)
    keys = [k for k in preflight._settings(hydra, "hydra") if not k.startswith("hydra.runtime.")]
    allowed = [k for k in keys if any(fnmatch.fnmatchcase(k, a) for a in preflight.FILE_HYDRA_KEYS)]
    assert len(keys) > 50 and "hydra.run.dir" in keys and "hydra.mode" in keys
    folder = tmp_path / "shared" / "experiment"
    folder.mkdir(parents=True)
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'shared'}]"
    for number, key in enumerate(keys):
        nested = "x"
        for part in reversed(key.split(".")):
            nested = {part: nested}
        (folder / f"k{number}.yaml").write_text("# @package _global_\n" + yaml.safe_dump(nested))
        job = [*TINY, searchpath, f"experiment=k{number}"]
        if key in allowed:
            preflight.check_files_from_elsewhere(job, [tmp_path / "shared"], multirun=False)
        else:
            with pytest.raises(ConfigError, match=f"k{number}.yaml sets {re.escape(key)}: "):
                preflight.check_files_from_elsewhere(job, [tmp_path / "shared"], multirun=False)


def test_a_shared_file_cannot_move_the_token_cache_out_of_the_project(tmp_path):
    """task=text's token files (data.cache_dir, shared by runs) stay in the project's data/cache unless the
    command line puts them elsewhere."""
    shared = _experiment(
        tmp_path, "defaults:\n  - override /task: text\ndata:\n  cache_dir: /tmp/elsewhere\n"
    )
    run = f"hydra.run.dir={tmp_path / 'run'}"
    _refused(
        [shared, "experiment=shared", run],
        r"data\.cache_dir=/tmp/elsewhere is outside its folder .*data/cache",
    )
    argv = prepare(["task=text", f"data.cache_dir={tmp_path / 'cache'}", run])
    assert argv[-1] == run


def test_a_mistake_leaves_no_run_behind_and_removes_nothing_it_did_not_make(tmp_path):
    """After a config error (run_job): a run directory this process made goes, with the TensorBoard file a
    fit writes as it starts; a folder that was there keeps everything in it but this attempt's log."""
    from transformer_lab.training import run_dir

    try:
        made = run_dir.claim(tmp_path / "runs" / "new", explicit=True, resuming=False)
        (made / ".hydra").mkdir()
        (made / "train.log").write_text("error: ...\n")
        (made / "events.out.tfevents.1795742361.host.1.0").write_bytes(b"")
        run_dir.remove_unused_run_dir(made)
        assert not (tmp_path / "runs").exists()  # and saved_models/<task>/, made for it too

        mine = tmp_path / "mine"
        mine.mkdir()
        (mine / "events.out.tfevents.1.host.1.0").write_bytes(b"someone's curves")
        claimed = run_dir.claim(mine, explicit=True, resuming=False)
        (claimed / "train.log").write_text("error: ...\n")
        run_dir.remove_unused_run_dir(claimed)
        assert (mine / "events.out.tfevents.1.host.1.0").read_bytes() == b"someone's curves"
    finally:
        run_dir.release_all()
