"""The page's features view (explore sae=<run>): what Python packs for it, and, in headless Chromium, the
features the page computes itself (sae.js on model.js's activation at the hook) against PyTorch's, for
the first input and for one typed into the box, with a tooltip per feature."""

import re

import pytest
import torch

import transformer_lab
from tests.conftest import compose_train_config, encoder_classifier, gpt_decoder, load_script
from tests.test_explorer import page_data
from tests.test_sae_features import TINY_SAE
from transformer_lab.explorer.features import page_where
from transformer_lab.nn.sae import activations_at
from transformer_lab.train import train


@pytest.fixture(scope="module")
def sae_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("sae_page_run")
    train(compose_train_config(run, base=TINY_SAE))
    return run


def python_features(run, tokens: list[int]) -> list[list[int]]:
    """The active features per position, largest first (at most 8), of PyTorch's SAE on the model."""
    with torch.no_grad():
        x = activations_at(run.source.model, run.hook, torch.tensor([tokens]))[0]
        f = run.sae.encode(x)
    return [[int(i) for v, i in zip(*row.topk(8), strict=True) if v > 0] for row in f]


def test_where_the_page_finds_each_hook():
    decoder, encoder = gpt_decoder(7), encoder_classifier(7)
    assert page_where(decoder, "blocks.0.hook_resid_pre") == {"stack": 0, "at": "resid_pre", "block": 0}
    assert page_where(decoder, "blocks.1.hook_resid_post") == {"stack": 0, "at": "resid_pre", "block": 2}
    assert page_where(decoder, "blocks.1.hook_attn_out") == {"stack": 0, "at": "attn", "block": 1}
    assert page_where(encoder, "blocks.0.hook_mlp_out") == {"stack": 0, "at": "mlp", "block": 0}
    for hook in ("blocks.0.attn.hook_z", "blocks.0.hook_resid_mid", "hook_embed", "ln_final.hook_normalized"):
        assert page_where(decoder, hook) is None, hook


def test_explore_packs_the_features_view(sae_run, tmp_path):
    out = tmp_path / "page.html"
    load_script("explore").main([f"sae={sae_run}", f"out={out}", "live=false"])
    features = page_data(out.read_text())["features"]
    run = transformer_lab.load_sae(sae_run)
    (tokens,), _ = run.source.example(0)
    assert features["hook"] == run.hook and features["width"] == run.sae.width == len(features["density"])
    assert [[i for i, _ in row] for row in features["current"]] == python_features(run, tokens[0].tolist())
    alive = [i for i, d in enumerate(features["density"]) if d > 0]
    assert all(features["examples"][i] for i in alive) and all(
        "[" in e for e in features["examples"][alive[0]]
    )


@pytest.mark.browser
def test_the_page_computes_the_features_itself(sae_run, tmp_path, browser):
    out = tmp_path / "live.html"
    load_script("explore").main([f"sae={sae_run}", f"out={out}"])
    run = transformer_lab.load_sae(sae_run)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(out.resolve().as_uri())
        page.wait_for_selector("body[data-live]", timeout=30_000)
        page.click('[data-view="features"]')
        computed = "window.TransformerLab.view_features.liveFeatures()"
        page.wait_for_function(f"{computed} !== null", timeout=20_000)
        (tokens,), _ = run.source.example(0)
        expected = python_features(run, tokens[0].tolist())
        assert [[i for i, _ in row] for row in page.evaluate(computed)] == expected
        title = page.get_attribute(".feature", "title")
        assert re.match(r"F\d+: fires at [\d.]+% of \d+ positions", title) and "top examples" in title
        # a new input: the page's features follow, still PyTorch's
        before = page.evaluate("window.transformerLab.updates || 0")
        page.fill("#input-box", "3 1 4 1 5 9 2 6 3 1 4 1")
        page.wait_for_function(f"(window.transformerLab.updates || 0) > {before}", timeout=15_000)
        page.click('[data-view="head"]')
        page.click('[data-view="features"]')
        ids = run.source.encode("3 1 4 1 5 9 2 6 3 1 4 1").tolist()
        assert [[i for i, _ in row] for row in page.evaluate(computed)] == python_features(run, ids)
        assert not errors
    finally:
        page.close()
