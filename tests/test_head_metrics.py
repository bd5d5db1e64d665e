"""Heads watched while they learn: per-head entropy and alignment (explain), and the callback that logs
them to TensorBoard under heads/ with the ablation table at the end of training."""

import io
import math

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from hydra.utils import instantiate
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import fit_with_callback, toy_task
from tests.test_interpret import digits, hand_made, hooks_left
from transformer_lab import explain
from transformer_lab.data import ReverseDataModule, SortDataModule
from transformer_lab.errors import ConfigError
from transformer_lab.train import CONFIG_MODULE
from transformer_lab.training.callbacks import HeadMetricsCallback


def test_entropy_is_log_t_for_uniform_attention_and_zero_for_one_hot():
    uniform = torch.full((2, 3, 5, 5), 0.2)
    one_hot = torch.eye(5).expand(2, 3, 5, 5)
    assert torch.allclose(explain.attention_entropy(uniform), torch.full((3,), math.log(5)))
    assert torch.allclose(explain.attention_entropy(one_hot), torch.zeros(3))
    mixed = torch.cat([uniform[:, :, :2], one_hot[:, :, 2:]], dim=2)  # rows 0-1 uniform, rows 2-4 one-hot
    query_mask = torch.tensor([[True, True, False, False, False]] * 2)
    assert torch.allclose(explain.attention_entropy(mixed, query_mask), torch.full((3,), math.log(5)))


def test_alignment_mass_of_the_hand_made_reversing_head_is_one():
    model, x = hand_made(mirror=True), digits(8)
    (pattern,) = explain.attention_maps(model, x)
    task = ReverseDataModule(seq_len=6, train_size=8, val_size=8, test_size=8)
    expected = task.alignment((x + 4,), x.flip(1))  # token ids: digits after the 4 special tokens
    assert explain.alignment_mass(pattern, expected).item() == pytest.approx(1.0, abs=1e-4)
    copying = explain.attention_maps(hand_made(mirror=False), x)[0]
    assert explain.alignment_mass(copying, expected).item() < 0.2  # only the middle could coincide


def _events(tmp_path) -> EventAccumulator:
    (events,) = tmp_path.glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def _small(cls, arch: str, **sizes):
    return cls(
        arch=arch, seq_len=6, min_seq_len=3, train_size=64, val_size=32, test_size=32, batch_size=32, **sizes
    )


def test_a_reverse_run_logs_entropy_and_alignment_per_head_at_every_validation(tmp_path):
    task = _small(ReverseDataModule, "encoder")
    fit_with_callback(tmp_path, task, HeadMetricsCallback(num_examples=16), epochs=2)
    events = _events(tmp_path)
    scalars = events.Tags()["scalars"]
    for head in ("L0H0", "L0H1", "L1H0", "L1H1"):
        entropy, alignment = (
            events.Scalars(f"heads/entropy/{head}"),
            events.Scalars(f"heads/alignment/{head}"),
        )
        assert [e.step for e in entropy] == [2, 4] and [e.step for e in alignment] == [2, 4]
        assert all(0 <= e.value <= math.log(6) + 1e-5 for e in entropy)
        assert all(0 <= e.value <= 1 for e in alignment)
    # entropy and alignment at every validation; the ablation (a pass per head) once, at the end
    assert len([tag for tag in scalars if tag.startswith("heads/")]) == 12
    assert [e.step for e in events.Scalars("heads/ablation/L1H1")] == [4]
    (image,) = events.Images("heads/ablation")
    assert image.step == 4 and image.width > 200 and image.height > 80
    pixels = np.asarray(Image.open(io.BytesIO(image.encoded_image_string)).convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50  # the coloured cells and bar, not just text
    assert "heads/ablation/text_summary" in events.Tags()["tensors"]


def test_an_encoder_decoder_is_measured_on_its_cross_attention(tmp_path):
    model = fit_with_callback(
        tmp_path,
        _small(SortDataModule, "encoder_decoder"),
        HeadMetricsCallback(),
        epochs=1,
        arch="encoder_decoder",
    )
    tags = [tag for tag in _events(tmp_path).Tags()["scalars"] if tag.startswith("heads/")]
    alignment = sorted(tag.split("/")[-1] for tag in tags if tag.startswith("heads/alignment/"))
    assert alignment == ["X0H0", "X0H1", "X1H0", "X1H1"]  # cross-attention reads the source
    entropy = {tag.split("/")[-1][0] for tag in tags if tag.startswith("heads/entropy/")}
    assert entropy == {"E", "D", "X"}
    assert hooks_left(model.net) == 0


def test_a_language_model_gets_entropy_but_no_alignment(tmp_path):
    class Text(toy_task("copy_task").CopyDataModule):  # a task without an alignment, as a language model's
        def alignment(self, inputs, labels):
            return None

    fit_with_callback(tmp_path, Text(seq_len=6, size=64), HeadMetricsCallback(ablation=False), epochs=1)
    tags = [tag for tag in _events(tmp_path).Tags()["scalars"] if tag.startswith("heads/")]
    assert tags and all(tag.startswith("heads/entropy/") for tag in tags)
    assert "heads/ablation" not in _events(tmp_path).Tags()["images"]


def test_the_copy_task_expects_each_position_itself():
    CopyDataModule = toy_task("copy_task").CopyDataModule
    x = torch.randint(10, (3, 5))
    assert torch.equal(
        CopyDataModule(seq_len=5).alignment((x,), x), torch.eye(5, dtype=torch.bool).expand(3, 5, 5)
    )


def test_without_tensorboard_nothing_is_measured(tmp_path):
    callback = HeadMetricsCallback()
    fit_with_callback(tmp_path, _small(ReverseDataModule, "encoder"), callback, epochs=1, logger=False)
    assert callback._batch is None


def test_on_by_default_removable_and_checked():
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        default = compose("train")
        removed = compose("train", overrides=["~callbacks.head_metrics"])
    assert isinstance(instantiate(default.callbacks.head_metrics), HeadMetricsCallback)
    assert "head_metrics" not in removed.callbacks
    with pytest.raises(ConfigError, match="every_n_epochs=0 must be a positive integer"):
        HeadMetricsCallback(every_n_epochs=0)


def test_the_end_of_training_ablation_reads_the_examples_its_budget_allows(monkeypatch, caplog):
    """A pass per head ablated on every example takes minutes on a 70 M-parameter model: the ablation at
    the end of training reads as many of the callback's examples as fit analysis=heads' time budget (here
    a budget that holds the fewest), saying so; a small model within it keeps them all."""
    import logging

    from transformer_lab.analysis import budget, measures

    model, x = hand_made(mirror=True), digits(32)
    heads = measures.Heads(model, (x,), x.flip(1))
    assert HeadMetricsCallback._within_budget(heads) is heads  # 32 examples of a tiny model: all
    monkeypatch.setattr(budget, "SECONDS", 1e-9)
    with caplog.at_level(logging.INFO, logger="transformer_lab"):
        fewer = HeadMetricsCallback._within_budget(heads)
    assert fewer.labels.shape[0] == budget.FEWEST and torch.equal(fewer.inputs[0], x[: budget.FEWEST])
    assert f"head ablation at the end of training: {budget.FEWEST} examples, not 32" in caplog.text
    assert "callbacks.head_metrics.num_examples= sets it" in caplog.text
