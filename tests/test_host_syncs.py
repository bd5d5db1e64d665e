"""Training steps read nothing back from the device between logging steps.

On a GPU every host read of a tensor (`.item()`, `bool(t)`, `float(t)`, ...) waits for all queued work:
a host-device sync that keeps the CPU from queueing the next step. On the CPU the same reads are free,
so this test counts them instead of timing them.
"""

import lightning as L
import pytest
import torch

import transformer_lab.training.run
from tests.conftest import compose_train_config
from transformer_lab.train import train

HOST_READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__")


@pytest.mark.filterwarnings("ignore:The number of training batches")
def test_training_steps_make_no_host_reads_between_logging_steps(tmp_path, monkeypatch):
    reads: list[str] = []
    window = {"open": False}

    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            if window["open"]:
                reads.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)

    class OpenWindow(L.Callback):  # first callback: before every other hook of a step from the second on
        def on_train_batch_start(self, trainer, *args):
            window["open"] = trainer.global_step >= 1

    class CloseWindow(L.Callback):  # last callback: after every other hook of the step
        def on_train_batch_end(self, *args):
            window["open"] = False

    build_trainer = transformer_lab.training.run.build_trainer

    def build_with_window(cfg):
        trainer = build_trainer(cfg)
        trainer.callbacks[:] = [OpenWindow(), *trainer.callbacks, CloseWindow()]
        return trainer

    monkeypatch.setattr(transformer_lab.training.run, "build_trainer", build_with_window)
    # 8 training steps, no logging step, no step checkpoint; every default callback and metric on
    train(compose_train_config(tmp_path, "trainer.log_every_n_steps=100"))
    assert reads == []
