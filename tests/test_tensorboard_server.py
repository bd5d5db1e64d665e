"""`tensorboard --logdir <sweep>` serves the runs of a two-job sweep: scalars and the HPARAMS table."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, TINY_REVERSE

ALL_STATUSES = ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """`python train.py -m model.num_heads=1,2`: two jobs, one after another, each in its own directory."""
    log_dir = tmp_path_factory.mktemp("sweep")
    result = subprocess.run(
        [sys.executable, "train.py", "-m", "model.num_heads=1,2", f"paths.log_dir={log_dir}", *TINY_REVERSE],
        cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "2"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (sweep_dir,) = (log_dir / "multirun").iterdir()
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == ["0", "1"]
    return sweep_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, body: dict | None = None):
    """JSON from TensorBoard's HTTP data API (POST when there is a body)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def hparams_rows(base: str) -> dict[str, dict]:
    """The HPARAMS tab's table: one session group (row) per run."""
    body = {"experimentName": "", "allowedStatuses": ALL_STATUSES, "startIndex": 0, "sliceSize": 100}
    return {g["name"]: g for g in get(f"{base}/data/plugin/hparams/session_groups", body)["sessionGroups"]}


@pytest.fixture
def tensorboard(sweep, tmp_path):
    """A TensorBoard server on 127.0.0.1, up once it has read both runs; stopped afterwards."""
    port = free_port()
    log = (tmp_path / "tensorboard.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(sweep), "--host", "127.0.0.1",
         "--port", str(port), "--load_fast=false"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, (tmp_path / "tensorboard.log").read_text()[-2000:]
            try:  # TensorBoard reads event files in the background: wait for the last records written
                tags = get(f"{base}/data/plugin/scalars/tags")
                scalars_read = all("hp/test_acc" in tags.get(run, {}) for run in ("0", "1"))
                if scalars_read and len(hparams_rows(base)) == 2:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.monotonic() < deadline, "TensorBoard did not serve both runs within 90 s"
            time.sleep(0.5)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    assert server.returncode is not None


def test_tensorboard_serves_the_scalars_and_hparams_of_a_sweep(tensorboard, sweep):
    metrics = {run: json.loads((sweep / run / "metrics.json").read_text()) for run in ("0", "1")}

    assert sorted(get(f"{tensorboard}/data/runs")) == ["0", "1"]
    tags = get(f"{tensorboard}/data/plugin/scalars/tags")
    for run in ("0", "1"):
        assert {"train/loss", "train/acc", "train/lr", "val/acc", "val/loss", "test/acc"} <= set(tags[run])
        # The last val/acc point is the final value metrics.json reports.
        points = get(f"{tensorboard}/data/plugin/scalars/scalars?run={run}&tag=val/acc")
        _, step, value = points[-1]
        assert value == pytest.approx(metrics[run]["val/acc"]) and step == metrics[run]["global_step"] - 1

    # The HPARAMS tab: one row per run, with its hyperparameters and final metrics.
    rows = hparams_rows(tensorboard)
    assert sorted(rows) == ["0", "1"]
    for run, heads in (("0", 1), ("1", 2)):
        assert rows[run]["hparams"]["model.num_heads"] == heads
        values = {m["name"]["tag"]: m["value"] for m in rows[run]["metricValues"]}
        assert values["hp/val_acc"] == pytest.approx(metrics[run]["val/acc"])
        assert values["hp/test_acc"] == pytest.approx(metrics[run]["test/acc"])
