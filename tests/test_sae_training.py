"""An SAE trained by train.py, end to end through Hydra's compose API: the synthetic answer key (its MMCS),
the run's files (checkpoints, metrics.json under SAELens's names, TensorBoard), resume, and the refusals."""

import json
import os
import subprocess
import sys

import lightning as L
import pytest
import torch

from tests.conftest import COMMON, ROOT, compose_train_config
from tests.test_train_reverse import _scalars
from transformer_lab import ConfigError
from transformer_lab.data import SuperpositionDataModule, SyntheticFeaturesDataModule
from transformer_lab.train import train
from transformer_lab.training.datamodule import LightningTask
from transformer_lab.training.sae_module import build_sae_module

SYNTHETIC = ["experiment=sae_synthetic", "threads=1", *COMMON, "trainer.log_every_n_steps=50"]
SMALL = [
    "data.val_size=512",
    "data.test_size=2048",
    "trainer.max_steps=600",
    "trainer.val_check_interval=300",
]
MEASURES = (
    "l0",
    "l1",
    "mse",
    "explained_variance",
    "cossim",
    "dead_feature_share",
    "dense_feature_share",
    "loss",
)


def test_the_synthetic_key_in_a_short_run(tmp_path):
    metrics = train(compose_train_config(tmp_path, *SMALL, base=SYNTHETIC))
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["mmcs"] == metrics["mmcs"] >= 0.9
    assert 0.8 <= saved["recovered_share"] <= 1
    for name in MEASURES:
        assert f"test/{name}" in saved and f"val/{name}" in saved
    assert abs(saved["test/l0"] - 4) < 0.5  # topk, k=4
    histogram = saved["feature_density_histogram"]
    assert sum(histogram["counts"]) + histogram["dead"] == 256  # every feature counted once
    checkpoint = torch.load(tmp_path / "checkpoints" / "best.ckpt", weights_only=True)
    assert checkpoint["hyper_parameters"]["sae"]["width"] == 256
    rows = checkpoint["state_dict"]["net.W_dec"]
    torch.testing.assert_close(rows.norm(dim=1), torch.ones(256))  # unit norm after every step
    scalars = _scalars(tmp_path)
    assert {
        "train/loss",
        "train/reconstruction_loss",
        "train/l0",
        "train/dead_feature_share",
        "val/explained_variance",
    } <= set(scalars)


def test_the_toy_model_key_in_a_short_run(tmp_path):
    """The toy model of superposition represents more features than its 5 dimensions; the SAE on its
    hidden layer finds their directions."""
    toy = ["experiment=sae_toy", "threads=1", *COMMON, "trainer.log_every_n_steps=50", "data.toy_steps=1000"]
    metrics = train(compose_train_config(tmp_path, *SMALL, base=toy))
    assert metrics["mmcs"] >= 0.9 and metrics["recovered_share"] >= 0.8
    task = SuperpositionDataModule(toy_steps=1000, verbose=False)
    assert 5 < int(task.toy.represented().sum()) <= 20  # in superposition: more than its dimensions


@pytest.mark.parametrize("kind", ["relu", "batchtopk", "jumprelu"])
def test_every_kind_trains(tmp_path, kind):
    steps = [
        "trainer.max_steps=200",
        "trainer.val_check_interval=100",
        "data.val_size=256",
        "data.test_size=256",
    ]
    metrics = train(compose_train_config(tmp_path, f"model.kind={kind}", *steps, base=SYNTHETIC))
    assert metrics["test/explained_variance"] > 0.3 and 0 < metrics["mmcs"] <= 1


def test_an_sae_run_resumes_where_it_stopped(tmp_path):
    """resume: the SAE, Adam's state, the dead-feature counts and the step go on from last.ckpt; another
    SAE is refused."""
    steps = ["data.val_size=64", "data.test_size=64", "trainer.val_check_interval=20"]
    train(compose_train_config(tmp_path / "first", "trainer.max_steps=20", *steps, base=SYNTHETIC))
    last = tmp_path / "first" / "checkpoints" / "last.ckpt"
    saved = torch.load(last, weights_only=True)
    assert saved["global_step"] == 20 and "steps_since_fired" in saved["state_dict"]
    resumed = train(
        compose_train_config(
            tmp_path / "resumed", f"ckpt_path={last}", "trainer.max_steps=40", *steps, base=SYNTHETIC
        )
    )
    assert resumed["global_step"] == 40
    final = torch.load(tmp_path / "resumed" / "checkpoints" / "last.ckpt", weights_only=True)
    assert final["optimizer_states"][0]["state"][0]["step"].item() == 40
    with pytest.raises(ConfigError, match="was trained with another model or data"):
        train(
            compose_train_config(
                tmp_path / "other", f"ckpt_path={last}", "model.expansion=4", *steps, base=SYNTHETIC
            )
        )


def test_resampling_gives_dead_features_the_direction_of_a_badly_reconstructed_input(tmp_path):
    task = SyntheticFeaturesDataModule(val_size=64, test_size=64)
    module = build_sae_module({"kind": "relu", "expansion": 2, "lr": 1e-3}, task)
    trainer = L.Trainer(
        max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(module, datamodule=LightningTask(task))
    net = module.net
    dead = torch.arange(5)
    module.steps_since_fired[dead] = module.hparams.dead_window
    before = net.W_dec.detach().clone()
    x = task.draw(512, torch.Generator().manual_seed(0))
    with torch.no_grad():
        error = x * net.input_scale - net.decode(net.encode(x)) * net.input_scale
    assert module.resample(x) == 5
    changed = (net.W_dec.detach() - before).norm(dim=1) > 1e-6
    assert changed[:5].all() and not changed[5:].any()  # the dead ones only
    torch.testing.assert_close(net.W_dec.detach().norm(dim=1), torch.ones(net.width))
    directions = error / error.norm(dim=1, keepdim=True)
    best = (net.W_dec.detach()[:5] @ directions.t()).max(dim=1).values
    torch.testing.assert_close(best, torch.ones(5), atol=1e-4, rtol=0)  # each one is an input's error
    assert (net.b_enc.detach()[:5] == 0).all() and (module.steps_since_fired[:5] == 0).all()
    state = trainer.optimizers[0].state[net.W_dec]
    assert (state["exp_avg"][:5] == 0).all() and (state["exp_avg_sq"][:5] == 0).all()
    assert module.resample(x) == 0  # nothing dead any more


@pytest.mark.slow
def test_ddp_two_processes_with_resampling(tmp_path):
    """`python train.py experiment=sae_synthetic trainer=ddp` on 2 CPU processes, relu resampling its dead
    features (the batch and the dead set taken from rank 0 and the ranks' minimum: the ranks stay one
    model): one run directory, the measures and the grade in metrics.json."""
    result = subprocess.run(
        [sys.executable, "train.py", "experiment=sae_synthetic", "trainer=ddp", "trainer.accelerator=cpu",
         "trainer.devices=2", "model.kind=relu", "model.resample_every=20", "model.dead_window=10",
         "trainer.max_steps=40", "trainer.val_check_interval=20", "data.val_size=256", "data.test_size=256",
         f"hydra.run.dir={tmp_path}"],
        cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "0"},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["global_step"] == 40 and 0 < saved["mmcs"] <= 1 and "test/explained_variance" in saved


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.k=300"], "model.k=300 is more than the SAE's width of 256 features"),
        (["model.expansion=100000000"], "model.expansion=100000000 x d_in=32"),
        (["model.kind=gated"], "model.kind='gated' is unknown"),
        (["model.expansion=0"], "model.expansion=0 must be a positive integer"),
        (["model.kind=relu", "model.l1_coefficient=-1"], "model.l1_coefficient=-1 must be a number >= 0"),
        # every number checked finite and in range where it is read (inf diverged at step 5, threshold=inf
        # trained an SAE none of whose features could fire, both with exit 0)
        *[
            ([f"model.kind={kind}", f"model.{key}={value}"], f"model.{key}={shown}")
            for kind, key in (
                ("relu", "l1_coefficient"),
                ("jumprelu", "l0_coefficient"),
                ("topk", "aux_k"),
                ("topk", "lr"),
                ("jumprelu", "threshold"),
                ("jumprelu", "bandwidth"),
            )
            for value, shown in (("inf", "inf"), ("-inf", "-inf"), ("nan", "nan"))
        ],
    ],
)
def test_bad_settings_are_one_line(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        train(compose_train_config(tmp_path, *overrides, base=SYNTHETIC))


# The answer keys graded with the defaults (mmcs >= 0.95 for topk and relu on the synthetic and toy keys,
# the induction key's previous_token_share and ce_loss_score): docs/features.md's table of every kind on
# every key, run in full by tests/test_docs_features.py under make reproduce (numbers within 2%).


@pytest.fixture
def fixed_threshold():
    """The kind of tests/extensions/fixed_threshold.py, registered for the test and removed after it."""
    import importlib

    from transformer_lab.nn import sae_kinds

    module = importlib.reload(importlib.import_module("tests.extensions.fixed_threshold"))
    yield module
    sae_kinds.KINDS.pop("fixed_threshold", None)


def test_a_kind_registered_outside_the_package_trains_and_exports(fixed_threshold, tmp_path):
    """One class and its registration: train.py trains it (its L1 penalty in the loss, its coefficient
    under its own name), the SAE reads it back, and to=sae_lens writes it as a jumprelu of threshold 1
    whose SAELens equations give its features."""
    import transformer_lab
    from tests.conftest import load_script
    from tests.test_sae_interop import saelens_encode

    run = tmp_path / "run"
    short = [
        "trainer.max_steps=60",
        "trainer.val_check_interval=60",
        "data.val_size=256",
        "data.test_size=256",
    ]
    metrics = train(
        compose_train_config(
            run, "model.kind=fixed_threshold", "model.l1_coefficient=0.5", *short, base=SYNTHETIC
        )
    )
    assert 0 < metrics["test/l0"] < 256
    hparams = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["hyper_parameters"]
    assert hparams["l1_coefficient"] == 0.5 and hparams["l0_coefficient"] is None
    sae = transformer_lab.load_sae(run).sae
    assert sae.kind.name == "fixed_threshold" and sae.kind.in_use == "threshold"
    with pytest.raises(
        ConfigError, match=r"model\.l0_coefficient=1\.0 is not a setting of model\.kind=fixed_threshold"
    ):
        train(compose_train_config(tmp_path / "bad", "model.kind=fixed_threshold", "model.l0_coefficient=1.0",
                                   *short, base=SYNTHETIC))  # fmt: skip
    out = tmp_path / "saelens"
    load_script("export").main([f"sae={run}", "to=sae_lens", f"out={out}"])
    cfg = json.loads((out / "cfg.json").read_text())
    from safetensors.torch import load_file

    weights = load_file(out / "sae_weights.safetensors")
    assert cfg["architecture"] == "jumprelu" and torch.equal(weights["threshold"], torch.ones(sae.width))
    x = SyntheticFeaturesDataModule().draw(256, torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(saelens_encode(cfg, weights, x), sae.encode(x), atol=1e-5, rtol=1e-5)
