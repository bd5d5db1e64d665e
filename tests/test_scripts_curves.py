"""scripts/curves.py: one figure of a metric's curve per run, read from the runs' TensorBoard logs."""

import pytest

from tests.conftest import compose_train_config, load_script
from transformer_lab.errors import ConfigError
from transformer_lab.train import train

curves = load_script("curves")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Two tiny runs that differ in one override, laid out as a Hydra sweep: <sweep>/<job>/.hydra/..."""
    root = tmp_path_factory.mktemp("sweep")
    for job, lr in enumerate(("1e-3", "1e-2")):
        run_dir = root / str(job)
        overrides = [f"model.lr={lr}", "model.warmup=0"]
        train(compose_train_config(run_dir, *overrides, "test=false", "~callbacks.head_metrics"))
        (run_dir / ".hydra").mkdir()
        (run_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return root


def test_one_curve_per_run_labelled_by_what_differs(sweep, tmp_path, capsys):
    out = tmp_path / "curves.png"
    curves.main([str(sweep), "metric=train/loss", f"out={out}"])
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed[:2]] == ["model.lr=1e-3", "model.lr=1e-2"]
    assert all("-> " in line and "at step 7" in line for line in printed[:2])  # 8 steps: 0 .. 7
    assert out.stat().st_size > 5000 and printed[-1] == f"Wrote {out}"


def test_the_scalars_are_the_logged_values(sweep):
    steps, values = curves.scalars(sweep / "0", "train/loss")
    assert steps == list(range(8)) and all(0 < v < 5 for v in values)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["SWEEP", "metric=val/nope"], "no run logged val/nope"),
        (["/nonexistent"], "is not a directory"),
        (["SWEEP", "colour=red"], "unknown argument colour"),
    ],
)
def test_bad_arguments_are_one_line_errors(sweep, arguments, message):
    with pytest.raises(ConfigError, match=message):
        curves.main([str(sweep) if a == "SWEEP" else a for a in arguments])
