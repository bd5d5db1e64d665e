"""task=modular_addition and the grokking progress measures (analysis/grokking.py): the split, the
optimizer settings Nanda et al. train with, and restricted / excluded loss and Fourier sparsity computed
as the paper defines them, on logits and embeddings built from chosen frequencies."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.conftest import COMMON, compose_train_config, gpt_decoder, predictor_like
from transformer_lab import TransformerPredictor, pretrained
from transformer_lab.analysis import dynamics, grokking
from transformer_lab.data import ModularAdditionDataModule
from transformer_lab.errors import ConfigError
from transformer_lab.nn import IGNORE_INDEX
from transformer_lab.nn.schedules import ConstantWarmupScheduler
from transformer_lab.train import train

P = 13


# ------------------------------------------------------------------------------------------- the task
def test_train_and_test_pairs_are_disjoint_cover_every_pair_and_are_fixed_by_the_seed():
    task = ModularAdditionDataModule(p=P, train_fraction=0.3, seed=0)
    train_pairs, test_pairs = task.split_indices()
    assert len(train_pairs) == int(0.3 * P * P) == 50 and len(test_pairs) == P * P - 50
    assert set(train_pairs.tolist()).isdisjoint(test_pairs.tolist())
    assert sorted(train_pairs.tolist() + test_pairs.tolist()) == list(range(P * P))
    again = ModularAdditionDataModule(p=P, train_fraction=0.3, seed=0).split_indices()
    assert torch.equal(again[0], train_pairs) and torch.equal(again[1], test_pairs)
    other = ModularAdditionDataModule(p=P, train_fraction=0.3, seed=1).split_indices()
    assert not torch.equal(other[0], train_pairs)


def test_a_batch_is_a_b_equals_with_the_answer_at_equals():
    task = ModularAdditionDataModule(p=P, train_fraction=0.5)
    task.setup("fit")
    (tokens, labels), *_ = list(task.train_dataloader())  # full batch: every training pair in one step
    assert tokens.shape == (int(0.5 * P * P), 3) and len(task.train_dataloader()) == 100
    assert (tokens[:, 2] == task.equals_id).all() and task.vocab[task.equals_id] == "="
    assert (labels[:, :2] == IGNORE_INDEX).all()
    assert torch.equal(labels[:, 2], (tokens[:, 0] + tokens[:, 1]) % P)
    val, test = task.splits["val"].tensors[0], task.splits["test"].tensors[0]
    assert torch.equal(val, test) and len(val) == P * P - len(tokens)  # val and test: the held-out pairs
    _, text_labels = task.text_example(task.tokenizer.encode("9 7 ="))
    assert text_labels.tolist() == [[IGNORE_INDEX, IGNORE_INDEX, (9 + 7) % P]]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"p": 100},
            "data.p=100 is not prime; modular addition needs a prime p: use data.p=97 or data.p=101",
        ),
        ({"p": 1}, "data.p=1 must be a prime from 2 to 1000"),
        ({"train_fraction": 1.0}, r"data.train_fraction=1.0 must be in \(0, 1\)"),
        ({"train_fraction": 0}, r"data.train_fraction=0 must be in \(0, 1\)"),
        ({"train_fraction": 1e-05}, "0 of 12769 pairs to train on"),
    ],
)
def test_bad_settings_are_one_line_errors(settings, message):
    with pytest.raises(ConfigError, match=message) as info:
        ModularAdditionDataModule(**settings)
    assert "\n" not in str(info.value)


def test_a_run_with_a_p_that_is_not_prime_stops_before_training(tmp_path):
    cfg = compose_train_config(tmp_path, "task=modular_addition", "data.p=57", base=COMMON)
    with pytest.raises(ConfigError, match=r"^data\.p=57 is not prime; .* use data\.p=53 or data\.p=59$"):
        train(cfg)
    assert not (tmp_path / "checkpoints").exists()


def test_a_few_steps_of_the_task_train_and_report_the_held_out_accuracy(tmp_path):
    cfg = compose_train_config(
        tmp_path,
        "task=modular_addition",
        "data.p=7",
        "data.batches_per_epoch=3",
        "trainer.max_steps=6",
        "callbacks.snapshots.max_disk=null",  # every snapshot, as experiment=grokking keeps them
        base=COMMON,
    )
    metrics = train(cfg)
    assert metrics["global_step"] == 6 and 0 <= metrics["test/acc"] <= 1 and metrics["metric"] == "val/acc"
    hparams = torch.load(tmp_path / "checkpoints" / "best.ckpt", weights_only=True)["hyper_parameters"]
    assert (hparams["schedule"], hparams["weight_decay_on"], hparams["weight_decay"]) == (
        "constant",
        "all",
        1.0,
    )
    assert hparams["betas"] == [0.9, 0.98] and hparams["net"]["tie_embeddings"] is False
    # its snapshots, over time: the progress measures of every one
    result = dynamics.over_snapshots(str(tmp_path), count=16)
    assert result.steps == [0, 1, 2, 3, 4, 5, 6]
    assert {"restricted_loss", "excluded_loss", "test_loss", "train_loss", "fourier_sparsity"} <= set(
        result.scores
    )
    assert all(len(values) == 7 for values in result.scores.values())
    assert result.scores["train_loss"][0] == pytest.approx(math.log(7), abs=0.5)  # about chance at the start
    assert result.notes[0].startswith("key frequencies (each embedding of steps 3 to 6): ")


# ------------------------------------------------------------------------------ optimizer and schedule
def test_weight_decay_on_all_decays_every_parameter_and_the_default_is_unchanged():
    model = gpt_decoder(11)
    default = predictor_like(model, max_iters=10, weight_decay=0.1)
    decay, no_decay = default.parameter_groups()
    embedding = default.net.embed.weight
    assert all(p is not embedding for p in decay) and any(p is embedding for p in no_decay)
    everything = predictor_like(model, weight_decay=1.0, weight_decay_on="all", schedule="constant")
    groups = everything.configure_optimizers()["optimizer"].param_groups
    assert len(groups) == 1 and groups[0]["weight_decay"] == 1.0
    assert len(groups[0]["params"]) == len(list(everything.parameters()))
    with pytest.raises(ConfigError, match=r"model\.weight_decay_on='some' is unknown; use matrices or all"):
        predictor_like(model, weight_decay_on="some")
    with pytest.raises(ConfigError, match=r"model\.schedule='step' is unknown; use cosine or constant"):
        predictor_like(model, schedule="step")


def test_the_constant_schedule_warms_up_then_stays_put():
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.5)
    schedule = ConstantWarmupScheduler(optimizer, warmup=4)
    rates = []
    for _ in range(12):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert rates == pytest.approx([0.0, 0.125, 0.25, 0.375, *[0.5] * 8])
    assert ConstantWarmupScheduler(optimizer, warmup=0).get_lr_factor(0) == 1.0
    predictor = predictor_like(gpt_decoder(11), schedule="constant")
    assert isinstance(predictor.configure_optimizers()["lr_scheduler"]["scheduler"], ConstantWarmupScheduler)


def test_checkpoints_from_before_the_new_settings_load_with_todays_defaults():
    restored = TransformerPredictor.load_from_checkpoint(pretrained.path("reverse"), weights_only=True)
    assert (restored.hparams.schedule, restored.hparams.weight_decay_on) == ("cosine", "matrices")


# ----------------------------------------------------------------------------- the progress measures
def cube(p: int, frequencies: dict[int, float]) -> torch.Tensor:
    """Logits [p^2, p] (row a * p + b, column c) = sum_k scale_k cos(w_k (a + b - c)): the logits of the
    paper's algorithm, made of the chosen frequencies."""
    x = torch.arange(p, dtype=torch.float64)
    a, b, c = x.repeat_interleave(p)[:, None], x.repeat(p)[:, None], x[None, :]
    logits = torch.zeros(p * p, p, dtype=torch.float64)
    for k, scale in frequencies.items():
        logits += scale * torch.cos(2 * math.pi * k * (a + b - c) / p)
    return logits


def loss_on(logits: torch.Tensor, task: ModularAdditionDataModule, rows: torch.Tensor) -> float:
    _, labels = task.all_pairs()
    return float(F.cross_entropy(logits[rows].double(), labels[rows, -1]))


def test_restricted_and_excluded_loss_keep_and_remove_exactly_the_key_frequencies():
    """Logits from key frequencies 2 and 5 plus a weaker 'memorising' frequency 3: the restricted logits
    are those of 2 and 5 alone (loss on the test pairs); the excluded logits are those of 3 alone (loss on
    the training pairs), as the paper defines them."""
    task = ModularAdditionDataModule(p=P, train_fraction=0.3)
    train_pairs, test_pairs = task.split_indices()
    logits = cube(P, {2: 4.0, 5: 4.0, 3: 1.5}) + 0.7  # plus a constant: kept by restriction
    key = [2, 5]
    torch.testing.assert_close(grokking.restricted_logits(logits, key), cube(P, {2: 4.0, 5: 4.0}) + 0.7)
    torch.testing.assert_close(grokking.excluded_logits(logits, key), cube(P, {3: 1.5}) + 0.7)
    measures = grokking.progress_measures(logits.float(), torch.randn(P, 8), task, key)
    assert measures.restricted_loss == pytest.approx(
        loss_on(cube(P, {2: 4.0, 5: 4.0}), task, test_pairs), abs=1e-4
    )
    assert measures.excluded_loss == pytest.approx(loss_on(cube(P, {3: 1.5}), task, train_pairs), abs=1e-4)
    assert measures.test_loss == pytest.approx(loss_on(logits, task, test_pairs), abs=1e-4)
    # the algorithm's logits peak at c = a + b: right everywhere; without its frequencies, near chance
    assert measures.train_acc == measures.test_acc == 1.0
    assert max(measures.restricted_loss, measures.test_loss) < 0.05 < 1.5 < measures.excluded_loss
    everything = grokking.restricted_logits(logits, range(1, (P - 1) // 2 + 1))
    torch.testing.assert_close(everything, logits)  # all frequencies kept: the logits themselves


class FourierModel(nn.Module):
    """A stand-in model whose answer logits are `cube(p, frequencies)` and whose embedding is made of the
    same frequencies: what `answer_logits` and `token_embeddings` read from a model."""

    def __init__(self, p: int, frequencies: dict[int, float]):
        super().__init__()
        self.p, self.logits = p, cube(p, frequencies).float()
        x = torch.arange(p + 1)[:, None] * 2 * math.pi / p
        columns = [torch.cos(k * x) for k in frequencies] + [torch.sin(k * x) for k in frequencies]
        self.embed = nn.Embedding(p + 1, len(columns))
        self.embed.weight.data = torch.cat(columns, dim=1)
        self.source_stack = ("", self)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(len(tokens), 3, self.p + 1)
        out[:, -1, : self.p] = self.logits[tokens[:, 0] * self.p + tokens[:, 1]]
        return out


def test_a_model_built_from_chosen_frequencies_shows_them_as_key_and_a_sparse_embedding():
    task = ModularAdditionDataModule(p=P, train_fraction=0.3)
    model = FourierModel(P, {2: 3.0, 5: 3.0})
    embedding = grokking.token_embeddings(model, P)
    assert grokking.key_frequencies(embedding) == [2, 5]
    norms = grokking.frequency_norms(embedding)
    assert norms[[1, 4]].tolist() == pytest.approx(
        [math.sqrt(P)] * 2, rel=1e-4
    ) and norms.sum() == pytest.approx(2 * math.sqrt(P), rel=1e-4)
    # two of six frequencies hold everything: Gini (n - 2) / n = 4 / 6; a random embedding is far less sparse
    assert grokking.fourier_sparsity(embedding) == pytest.approx(4 / 6, abs=1e-4)
    assert grokking.fourier_sparsity(torch.randn(P, 64, generator=torch.Generator().manual_seed(0))) < 0.3
    logits = grokking.answer_logits(model, task)
    assert logits.shape == (P * P, P)
    measures = grokking.progress_measures(logits, embedding, task, [2, 5])
    assert measures.excluded_loss == pytest.approx(math.log(P), abs=1e-4)  # nothing left: uniform
    assert measures.restricted_loss == pytest.approx(measures.test_loss, abs=1e-4)


def test_key_frequencies_are_those_that_stand_out_in_every_last_snapshot():
    """A flat spectrum (a Gaussian embedding, Fourier sparsity within its chance region) has no key
    frequency, though every frequency is within a fifth of the largest's norm; a frequency that is key in
    some of the last snapshots but not all is uncertain, and said apart."""
    flat = torch.randn(P, 64, generator=torch.Generator().manual_seed(1))
    energy = grokking.frequency_norms(flat).pow(2)
    assert (energy >= 0.2 * energy.max()).all() and not grokking.sparse(flat)
    assert grokking.key_frequencies(flat) == []
    model = FourierModel(P, {2: 3.0, 5: 3.0})
    both = grokking.token_embeddings(model, P)
    fading = both.clone()
    fading[:, [1, 3]] *= 0.3  # frequency 5's columns: 0.09 of frequency 2's squared norm
    assert grokking.key_frequencies(fading) == [2]
    assert grokking.stable_key_frequencies([both, fading, both]) == ([2], [5])
    assert grokking.stable_key_frequencies([flat, flat]) == ([], [])
    assert 0 < grokking.chance_sparsity(P, 64) < grokking.SPARSE


def test_gini():
    assert grokking.gini(torch.ones(5)) == 0.0
    assert grokking.gini(torch.tensor([0.0, 0.0, 0.0, 1.0])) == pytest.approx(3 / 4)
    assert grokking.gini(torch.zeros(3)) == 0.0
