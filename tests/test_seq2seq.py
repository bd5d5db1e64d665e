"""Sequence-to-sequence tasks: the same examples laid out for each architecture, the sort task's
targets, generation from padded prompts, and each architecture trained to the target end to end."""

import json

import pytest
import torch

from tests.conftest import COMMON, compose_train_config, gpt_decoder
from transformer_lab.data import IGNORE_INDEX, ReverseDataModule, SortDataModule
from transformer_lab.data.seq2seq import BOS, EOS, PAD, SEP
from transformer_lab.errors import ConfigError
from transformer_lab.train import train


def _digits(task, ids: torch.Tensor) -> str:
    return task.tokenizer.decode([i for i in ids.tolist() if i >= 0], skip={PAD})


def _first(task):
    task.setup("test")
    return next(iter(task.test_dataloader()))


def test_one_example_laid_out_for_each_architecture():
    tasks = {
        arch: ReverseDataModule(arch=arch, min_seq_len=2, seq_len=6, test_size=8)
        for arch in ("encoder", "decoder", "encoder_decoder")
    }
    tokens, labels = _first(tasks["encoder"])
    n = int((tokens[0] != PAD).sum())
    source = _digits(tasks["encoder"], tokens[0])
    target = " ".join(reversed(source.split()))
    assert _digits(tasks["encoder"], labels[0]) == target and (labels[0, n:] == IGNORE_INDEX).all()

    source_ids, target_in, labels = _first(tasks["encoder_decoder"])
    assert _digits(tasks["encoder"], source_ids[0]) == source
    assert target_in[0, 0] == BOS and _digits(tasks["encoder"], target_in[0, 1:]) == target
    assert labels[0, n] == EOS and _digits(tasks["encoder"], labels[0, :n]) == target

    tokens, labels = _first(tasks["decoder"])
    assert tokens[0, n] == SEP and _digits(tasks["encoder"], tokens[0, :n]) == source
    assert _digits(tasks["encoder"], tokens[0, n + 1 : 2 * n + 1]) == target
    assert (labels[0, :n] == IGNORE_INDEX).all()  # no loss on reading the source
    assert labels[0, 2 * n] == EOS and torch.equal(labels[0, n : 2 * n], tokens[0, n + 1 : 2 * n + 1])
    assert {a: t.max_len for a, t in tasks.items()} == {"encoder": 6, "decoder": 13, "encoder_decoder": 7}


def test_lengths_vary_between_min_and_max():
    task = ReverseDataModule(min_seq_len=1, seq_len=16, test_size=2000)
    task.setup("test")
    tokens, _ = task.splits["test"].tensors
    lengths = (tokens != PAD).sum(1)
    assert lengths.min() == 1 and lengths.max() == 16 and len(set(lengths.tolist())) == 16
    fixed = ReverseDataModule(test_size=50)
    fixed.setup("test")
    assert (fixed.splits["test"].tensors[0] != PAD).all()  # the tutorial's task: all 16 long


def test_sort_targets_are_the_sorted_distinct_digits():
    task = SortDataModule(test_size=500)
    task.setup("test")
    source_ids, _, labels = task.splits["test"].tensors
    for source, label in zip(source_ids[:500].tolist(), labels[:500].tolist(), strict=True):
        digits = [task.vocab[i] for i in source if i != PAD]
        output = [task.vocab[i] for i in label if i != IGNORE_INDEX]
        assert output == [*sorted(set(digits), key=int), "<eos>"]
        assert 1 <= len(digits) <= 16
    assert task.max_len == 16 and task.max_target_len == 10


def test_architectures_that_cannot_learn_a_task_are_refused():
    with pytest.raises(ConfigError, match="model=encoder cannot learn SortDataModule's task"):
        SortDataModule(arch="encoder")
    with pytest.raises(ConfigError, match=r"data\.min_seq_len=0 must be an integer from 1"):
        ReverseDataModule(min_seq_len=0)


def test_a_decoder_generates_from_prompts_padded_on_the_left_as_from_each_alone():
    """Rows of different lengths, one batch: the same tokens as each prompt alone. A batch reads its
    padding too, so it fits max_len - (width of the prompts) new tokens; the last one may fill it."""
    torch.manual_seed(0)
    model = gpt_decoder(14, block_size=14, pad_id=PAD, eos_id=EOS).eval()
    prompts = [[5, 6, 7, SEP], [8, SEP], [9, 9, 4, 5, 6, 7, 8, SEP]]
    batch = torch.full((3, 8), PAD)
    for i, p in enumerate(prompts):
        batch[i, 8 - len(p) :] = torch.tensor(p)
    together = model.generate(batch, 6, temperature=0)[:, 8:]
    for i, p in enumerate(prompts):
        alone = model.generate(torch.tensor([p]), 6, temperature=0)[0, len(p) :]
        assert together[i, : len(alone)].tolist() == alone.tolist()
    full = model.generate(torch.tensor([prompts[2]]), 10, temperature=0)
    assert full.size(1) == 15  # 8 + 6 read in 14 positions, the 15th predicted from them


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "model", "target"),
    [
        ("reverse", "encoder_decoder", 0.99),
        ("reverse", "decoder", 0.99),
        ("sort", "encoder_decoder", 0.99),
        ("sort", "decoder", 0.99),
    ],
)
def test_the_shipped_settings_reach_the_target(tmp_path, task, model, target):
    """What the README reports: each architecture learns the task with the settings the task ships
    (configs/task_model/), measured by generating the whole output."""
    metrics = train(compose_train_config(tmp_path, f"task={task}", f"model={model}", base=COMMON))
    assert metrics["test/seq_acc"] >= target
    assert json.loads((tmp_path / "metrics.json").read_text())["test/seq_acc"] == metrics["test/seq_acc"]
