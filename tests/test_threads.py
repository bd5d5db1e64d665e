"""threads=auto: one torch thread per core that is free now, so a run beside other busy programs does not
collapse (torch's default of one thread per core does: 10-50x slower); an explicit threads=N or
OMP_NUM_THREADS always wins, and the run's header says which it used."""

import logging

import pytest
import torch

from tests.conftest import compose_train_config
from transformer_lab import ConfigError, limits
from transformer_lab.train import train


@pytest.mark.parametrize(
    ("idle", "processes", "expected"),
    [(0.1, 1, 1), (0.9, 1, 1), (1.6, 1, 2), (2.0, 1, 2), (2.0, 2, 1), (0.0, 2, 1)],
)
def test_auto_takes_the_cores_that_are_free(monkeypatch, idle, processes, expected):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(limits, "free_cores", lambda: (idle, 2))
    threads, why = limits.choose_threads("auto", processes)
    assert threads == expected and why == f"auto, {idle:.1f} of 2 cores free"


def test_an_explicit_choice_always_wins(monkeypatch):
    monkeypatch.setattr(limits, "free_cores", lambda: (0.0, 2))
    assert limits.choose_threads(2) == (2, "threads=2")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert limits.choose_threads("auto") == (3, "OMP_NUM_THREADS=3")
    with pytest.raises(ConfigError, match="threads=0 must be auto or a positive integer"):
        limits.choose_threads(0)
    monkeypatch.setattr(limits.os, "cpu_count", lambda: 2)
    assert limits.choose_threads(8) == (8, "threads=8")
    with pytest.raises(ConfigError, match="threads=100000 is more than 4 per core of this machine's 2; "):
        limits.choose_threads(100_000)  # would start 100,000 OpenMP threads


def test_a_deterministic_run_takes_one_thread_whatever_the_load(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for idle in (0.1, 2.0):
        monkeypatch.setattr(limits, "free_cores", lambda idle=idle: (idle, 2))
        assert limits.choose_threads("auto", deterministic=True) == (
            1,
            "auto, 1 for trainer.deterministic=true (threads=N for more)",
        )
    assert limits.choose_threads(2, deterministic=True) == (2, "threads=2")  # an explicit choice still wins


def test_the_run_uses_and_reports_the_chosen_count(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        with caplog.at_level(logging.INFO, logger="transformer_lab.training.run"):
            train(compose_train_config(tmp_path, "threads=1"))
        assert torch.get_num_threads() == 1
        assert any("(32-true precision, 1 thread: threads=1)" in r.getMessage() for r in caplog.records)
        monkeypatch.setattr(limits, "free_cores", lambda: (0.2, 2))  # a busy machine
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="transformer_lab.training.run"):
            train(compose_train_config(tmp_path / "auto"))
        assert torch.get_num_threads() == 1
        assert any("1 thread: auto, 0.2 of 2 cores free" in r.getMessage() for r in caplog.records)
    finally:
        torch.set_num_threads(before)
