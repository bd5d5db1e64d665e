"""The measures of `analysis.sae_measures` against an independent computation: the SAE's equations written
out here and spliced into the model by hand (a forward hook that returns the reconstruction or zeros),
the losses and distributions compared as SAELens's evals.py defines them; and the same numbers in the
metrics.json of a run of train.py."""

import json

import pytest
import torch
import torch.nn.functional as F

import transformer_lab
from tests.conftest import COMMON, compose_train_config
from transformer_lab.analysis import sae_measures
from transformer_lab.nn import IGNORE_INDEX
from transformer_lab.nn.sae import SAEConfig, SparseAutoencoder
from transformer_lab.train import train

HOOK = "blocks.0.hook_attn_out"


def by_hand(sae: SparseAutoencoder, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(features, reconstruction) of activations x, from the SAE's weights and its kind's equation."""
    s = float(sae.input_scale)
    pre = (x * s - sae.b_dec) @ sae.W_enc + sae.b_enc
    if sae.config.kind == "relu":
        f = pre.clamp(min=0)
    else:  # topk
        values, index = pre.topk(sae.config.k, dim=-1)
        f = torch.zeros_like(pre).scatter(-1, index, values.clamp(min=0))
    return f, (f @ sae.W_dec + sae.b_dec) / s


def independent(model, sae: SparseAutoencoder, tokens: torch.Tensor, labels: torch.Tensor) -> dict:
    """The measures, computed without analysis.sae_measures: three forward passes with plain hooks."""
    seen = {}

    def clean(activation, point):
        seen["x"] = activation.detach().clone()

    def reconstruct(activation, point):
        return by_hand(sae, activation)[1]

    def zero(activation, point):
        return torch.zeros_like(activation)

    with torch.no_grad():
        logits = {
            "without": model.run_with_hooks(tokens, fwd_hooks=[(HOOK, clean)]),
            "with": model.run_with_hooks(tokens, fwd_hooks=[(HOOK, reconstruct)]),
            "ablation": model.run_with_hooks(tokens, fwd_hooks=[(HOOK, zero)]),
        }
        x = seen["x"].reshape(-1, seen["x"].size(-1)).double()
        f, x_hat = (t.double() for t in by_hand(sae, seen["x"].reshape(-1, seen["x"].size(-1))))
    ce = {
        k: float(F.cross_entropy(v.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX))
        for k, v in logits.items()
    }
    keep = labels != IGNORE_INDEX
    p = logits["without"][keep].double().softmax(-1)
    kl = {
        k: float((p * (p.log() - logits[k][keep].double().log_softmax(-1))).sum(-1).mean())
        for k in ("with", "ablation")
    }
    residual = (x - x_hat).pow(2).sum()
    total = (x - x.mean(0)).pow(2).sum()
    density = (f > 0).double().mean(0)
    return {
        "explained_variance": float(1 - residual / total),
        "mse": float((x - x_hat).pow(2).sum(-1).mean()),  # SAELens's: summed over dimensions, per position
        "l0": float((f > 0).double().sum(-1).mean()),
        "l1": float(f.sum(-1).mean()),
        "cossim": float(F.cosine_similarity(x, x_hat, dim=-1).mean()),
        "ce_loss_without_sae": ce["without"],
        "ce_loss_with_sae": ce["with"],
        "ce_loss_with_ablation": ce["ablation"],
        "ce_loss_score": (ce["ablation"] - ce["with"]) / (ce["ablation"] - ce["without"]),
        "kl_div_with_sae": kl["with"],
        "kl_div_with_ablation": kl["ablation"],
        "kl_div_score": (kl["ablation"] - kl["with"]) / kl["ablation"],
        "dead_feature_share": float((density == 0).double().mean()),
        "dense_feature_share": float((density > 0.1).double().mean()),
    }


def fitted_sae(model, kind: str, tokens: torch.Tensor) -> SparseAutoencoder:
    """An SAE whose reconstruction is good but not perfect: its directions the top principal directions
    of the activations, a few dozen Adam steps on them."""
    torch.manual_seed(0)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=HOOK)
    x = cache[HOOK].reshape(-1, cache[HOOK].size(-1))
    sae = SparseAutoencoder(
        SAEConfig(kind=kind, d_in=x.size(1), width=96, k=6 if kind == "topk" else None, hook=HOOK)
    )
    sae.input_scale.fill_(x.size(1) ** 0.5 / float(x.norm(dim=1).mean()))
    optimizer = torch.optim.Adam(sae.parameters(), lr=3e-3)
    for _ in range(60):
        loss = sae.training_losses(x, 1.0)["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        sae.normalize_decoder()
    return sae.eval()


@pytest.mark.parametrize("kind", ["relu", "topk"])
def test_the_measures_equal_an_independent_computation(kind):
    checkpoint = transformer_lab.load("pretrained:induction_heads")
    (tokens,), labels = checkpoint.examples(48)
    model = checkpoint.model
    sae = fitted_sae(model, kind, tokens[:16])
    sums = sae_measures.empty_sums(sae.width, sae.config.d_in)
    with torch.no_grad():
        for rows in (slice(0, 20), slice(20, 48)):  # two batches, summed
            sae_measures.add(sums, sae_measures.model_sums(model, sae, (tokens[rows],), labels[rows]))
    found = sae_measures.measures(sums)
    expected = independent(model, sae, tokens, labels)
    assert 0.2 < expected["ce_loss_score"] < 1  # a reconstruction neither perfect nor useless
    for name, value in expected.items():
        assert found[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
    assert set(sae_measures.SAELENS_NAMES) <= set(found)


def test_previous_token_share_counts_features_that_fire_when_and_only_when():
    """Token 0 and 2 have a feature each that fires exactly after them; token 1's fires after it and as
    often after token 2 (precision 0.5): 2 of the 3 tokens found."""
    previous = torch.tensor([0, 0, 1, 1, 2, 2, 2, 2])
    fired = torch.zeros(8, 3, dtype=torch.bool)
    fired[:, 0] = previous == 0
    fired[:, 1] = previous >= 1  # after 1 and after 2
    fired[:, 2] = previous == 2
    sums = {
        "previous": fired.double().t() @ F.one_hot(previous, 3).double(),
        "previous_count": F.one_hot(previous, 3).double().sum(0),
    }
    assert sae_measures.previous_token_grades(sums)["previous_token_share"] == pytest.approx(2 / 3)
    fired[0, 0] = False  # recall of token 0's feature: 1/2 < 0.9
    sums["previous"] = fired.double().t() @ F.one_hot(previous, 3).double()
    assert sae_measures.previous_token_grades(sums)["previous_token_share"] == pytest.approx(1 / 3)


def test_density_histogram_counts_every_feature_once():
    sums = sae_measures.empty_sums(5, 2)
    sums["positions"] += 1000
    sums["fired"] += torch.tensor([0.0, 1.0, 10.0, 500.0, 1000.0], dtype=torch.float64)
    histogram = sae_measures.density_histogram(sums)
    assert histogram["dead"] == 1 and sum(histogram["counts"]) == 4
    assert histogram["counts"][-1] == 2  # densities 0.5 and 1 in [-1, 0]
    assert histogram["counts"][-3] == 1  # 0.001 in [-3, -2)


def test_a_run_writes_the_measures_of_its_best_checkpoint(tmp_path):
    """metrics.json's test/ measures are those of best.ckpt's SAE on the source's first test examples,
    computed independently."""
    overrides = [
        "experiment=sae", "source=pretrained:induction_heads", f"hook={HOOK}", "threads=1", *COMMON,
        "trainer.max_steps=40", "trainer.val_check_interval=20", "data.val_examples=16",
        "data.test_examples=64", "data.buffer=4096", "data.batch_size=256", "model.k=6",
    ]  # fmt: skip
    train(compose_train_config(tmp_path, base=overrides))
    saved = json.loads((tmp_path / "metrics.json").read_text())
    state = torch.load(tmp_path / "checkpoints" / "best.ckpt", weights_only=True)
    sae = SparseAutoencoder(SAEConfig(**state["hyper_parameters"]["sae"]))
    sae.load_state_dict(
        {k.removeprefix("net."): v for k, v in state["state_dict"].items() if k.startswith("net.")}
    )
    checkpoint = transformer_lab.load("pretrained:induction_heads")
    (tokens,), labels = checkpoint.examples(64)
    expected = independent(checkpoint.model, sae.eval(), tokens, labels)
    for name in ("explained_variance", "ce_loss_score", "kl_div_score", "l0", "mse"):
        assert saved[f"test/{name}"] == pytest.approx(expected[name], rel=1e-4, abs=1e-6), name
    assert 0 <= saved["previous_token_share"] <= 1
