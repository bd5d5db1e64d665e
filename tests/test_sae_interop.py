"""SAELens interop: `export to=sae_lens` writes the folder SAELens saves, whose encode and decode (SAELens's
equations, written out here from its source: standard, topk, jumprelu) equal this project's SAE to 1e-5;
`sae=saelens:<folder>` reads such a folder back (the files checked as files from elsewhere), also one
written with SAELens's other settings. With sae_lens installed, SAE.load_from_disk itself is compared."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

import transformer_lab
from tests.conftest import COMMON, compose_train_config, load_script
from transformer_lab import ConfigError
from transformer_lab.train import train

KINDS = ("relu", "topk", "batchtopk", "jumprelu")
# A spliced SAE passes on x_hat + (x - x_hat), which is x only to float32 rounding of x_hat (these random
# SAEs reconstruct badly: |x_hat| several times |x|); the layer after it carries that to the logits.
SPLICED = dict(atol=1e-4, rtol=1e-4)
SHORT = ["trainer.max_steps=40", "trainer.val_check_interval=40", "data.val_size=256", "data.test_size=256"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A short synthetic-key run of every kind (its thresholds and input scale not at their defaults)."""
    found = {}
    for kind in KINDS:
        run = tmp_path_factory.mktemp(kind)
        base = ["experiment=sae_synthetic", "threads=1", *COMMON]
        train(compose_train_config(run, f"model.kind={kind}", *SHORT, base=base))
        found[kind] = run
    return found


def saelens_encode(cfg: dict, w: dict, x: torch.Tensor) -> torch.Tensor:
    """SAELens's encode (sae_lens/saes/standard_sae.py, topk_sae.py, jumprelu_sae.py): process_sae_in
    subtracts b_dec when apply_b_dec_to_input, hidden_pre = sae_in W_enc + b_enc, then the activation."""
    sae_in = x - w["b_dec"] * cfg.get("apply_b_dec_to_input", True)
    pre = sae_in @ w["W_enc"] + w["b_enc"]
    if cfg["architecture"] == "standard":
        return pre.relu()
    if cfg["architecture"] == "topk":
        if cfg.get("rescale_acts_by_decoder_norm"):
            pre = pre * w["W_dec"].norm(dim=-1)
        values, index = pre.topk(cfg["k"], dim=-1)
        return torch.zeros_like(pre).scatter(-1, index, values.relu())
    return pre.relu() * (pre > w["threshold"])


def saelens_decode(cfg: dict, w: dict, f: torch.Tensor) -> torch.Tensor:
    if cfg.get("rescale_acts_by_decoder_norm"):
        f = f / w["W_dec"].norm(dim=-1)
    return f @ w["W_dec"] + w["b_dec"]


@pytest.mark.parametrize("kind", KINDS)
def test_export_is_saelens_folder_with_the_same_encode_and_decode(runs, kind, tmp_path):
    export = load_script("export")
    export.main([f"sae={runs[kind]}", "to=sae_lens", f"out={tmp_path}"])
    cfg = json.loads((tmp_path / "cfg.json").read_text())
    weights = load_file(tmp_path / "sae_weights.safetensors")
    sae = transformer_lab.load_sae(runs[kind]).sae
    assert cfg["architecture"] == {"relu": "standard", "topk": "topk"}.get(kind, "jumprelu")
    assert cfg["d_in"] == 32 and cfg["d_sae"] == 256 and cfg["normalize_activations"] == "none"
    task = transformer_lab.data.SyntheticFeaturesDataModule()
    x = task.draw(512, torch.Generator().manual_seed(5))
    with torch.no_grad():
        f = sae.encode(x)
        torch.testing.assert_close(saelens_encode(cfg, weights, x), f, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(saelens_decode(cfg, weights, f), sae.decode(f), atol=1e-5, rtol=1e-5)
    # and back: the folder read as this project's SAE
    back = transformer_lab.load_sae(f"saelens:{tmp_path}").sae
    with torch.no_grad():
        torch.testing.assert_close(back.encode(x), f, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(back.decode(f), sae.decode(f), atol=1e-5, rtol=1e-5)


def saelens_folder(path, cfg: dict, weights: dict) -> str:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cfg.json").write_text(json.dumps(cfg))
    save_file(weights, path / "sae_weights.safetensors")
    return f"saelens:{path}"


def random_saelens(architecture: str, **settings: object) -> tuple[dict, dict]:
    torch.manual_seed(3)
    d, w = 48, 96
    weights = {
        "W_enc": torch.randn(d, w) * 0.3,
        "b_enc": torch.randn(w) * 0.1,
        "W_dec": torch.randn(w, d) * 0.2,  # rows of any norm, as SAELens trains them
        "b_dec": torch.randn(d) * 0.1,
    }
    if architecture == "jumprelu":
        weights["threshold"] = torch.rand(w) * 0.5 + 0.01
    cfg = {
        "architecture": architecture,
        "d_in": d,
        "d_sae": w,
        "dtype": "float32",
        "apply_b_dec_to_input": True,
        "normalize_activations": "none",
        "metadata": {"model_name": "induction", "hook_name": "blocks.0.hook_attn_out"},
        **settings,
    }
    return cfg, weights


@pytest.mark.parametrize(
    "architecture, settings",
    [
        ("standard", {}),
        ("standard", {"apply_b_dec_to_input": False}),
        ("topk", {"k": 8}),
        ("topk", {"k": 8, "rescale_acts_by_decoder_norm": True}),
        ("jumprelu", {}),
    ],
)
def test_an_saelens_sae_is_read_as_this_projects(architecture, settings, tmp_path):
    cfg, weights = random_saelens(architecture, **settings)
    run = transformer_lab.load_sae(
        saelens_folder(tmp_path, cfg, weights), source="pretrained:induction_heads"
    )
    x = torch.randn(64, 48)
    with torch.no_grad():
        f = run.sae.encode(x)
        torch.testing.assert_close(f, saelens_encode(cfg, weights, x), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            run.sae(x),
            saelens_decode(
                cfg,
                weights,
                f if "rescale_acts_by_decoder_norm" not in settings else saelens_encode(cfg, weights, x),
            ),
            atol=1e-5,
            rtol=1e-5,
        )
    # spliced into the model it names by ckpt_path=: the output unchanged
    (tokens,), _ = run.source.examples(8)
    with torch.no_grad():
        clean = transformer_lab.load("pretrained:induction_heads").model(tokens)
        torch.testing.assert_close(run.model(tokens), clean, **SPLICED)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c, w: c.update(architecture="gated"), "architecture='gated' is not one this project has"),
        (lambda c, w: c.update(d_sae=10**9), "d_sae=1000000000 must be a positive integer of at most"),
        (lambda c, w: c.update(normalize_activations="expected_average_only_in"), "fold the normalisation"),
        (lambda c, w: c.update(metadata={"hook_name": 5}), "hook_name=5 must be a hook point's name"),
        (lambda c, w: w.update(W_enc=torch.zeros(3, 3)), r"W_enc has shape \(3, 3\)"),
        (lambda c, w: w.update(extra=torch.zeros(1)), "holds extra"),
        (lambda c, w: w.pop("b_dec"), "has no tensor b_dec"),
        (lambda c, w: w["W_dec"].fill_(float("nan")), "W_dec holds NaN"),
        (lambda c, w: c.update(k=1000), "model.k=1000 is more than the SAE's width of 96"),
    ],
)
def test_bad_saelens_folders_are_refused_in_one_line(change, message, tmp_path):
    cfg, weights = random_saelens("topk", k=8)
    change(cfg, weights)
    with pytest.raises(ConfigError, match=message):
        transformer_lab.load_sae(saelens_folder(tmp_path, cfg, weights))


def test_a_cfg_json_nested_too_deeply_is_one_line(tmp_path):
    """A cfg.json of 200,000 nested brackets: a RecursionError in the JSON parser, read as the file's
    fault in one line (the reader boundary), not a traceback."""
    cfg, weights = random_saelens("standard")
    location = saelens_folder(tmp_path, cfg, weights)
    (tmp_path / "cfg.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ConfigError, match=r"cfg.json is not valid JSON \(it is nested too deeply\)"):
        transformer_lab.load_sae(location)


def test_an_saelens_sae_needs_its_model_named_and_fitting(tmp_path):
    cfg, weights = random_saelens("standard")
    location = saelens_folder(tmp_path, cfg, weights)
    with pytest.raises(ConfigError, match="pass the model with ckpt_path="):
        transformer_lab.load_sae(location).source  # noqa: B018
    with pytest.raises(ConfigError, match=r"reads activations of size 48 but blocks.0.hook_attn_out has 128"):
        transformer_lab.load_sae(location, source="pretrained:shakespeare").model  # noqa: B018
    with pytest.raises(ConfigError, match="not a folder"):
        transformer_lab.load_sae(f"saelens:{tmp_path / 'missing'}")


def test_with_sae_lens_itself(runs, tmp_path):
    """SAELens's own load_from_disk on an export, and an SAE SAELens saved, read here (skipped where
    sae_lens is not installed: it needs TransformerLens < 4)."""
    sae_lens = pytest.importorskip("sae_lens")
    x = torch.randn(256, 32)
    for kind in KINDS:
        out = tmp_path / kind
        load_script("export").main([f"sae={runs[kind]}", "to=sae_lens", f"out={out}"])
        theirs = sae_lens.SAE.load_from_disk(str(out))
        ours = transformer_lab.load_sae(runs[kind]).sae
        with torch.no_grad():
            torch.testing.assert_close(theirs.encode(x), ours.encode(x), atol=1e-5, rtol=1e-5)
            f = ours.encode(x)
            torch.testing.assert_close(theirs.decode(f), ours.decode(f), atol=1e-5, rtol=1e-5)
    for architecture, settings in (("standard", {}), ("topk", {"k": 8}), ("jumprelu", {})):
        cfg, weights = random_saelens(architecture, **settings)
        saved = tmp_path / f"saved_{architecture}"
        theirs = sae_lens.SAE.from_dict(cfg)
        theirs.load_state_dict(weights)
        theirs.save_model(saved)
        ours = transformer_lab.load_sae(f"saelens:{saved}").sae
        x = torch.randn(64, 48)
        with torch.no_grad():
            torch.testing.assert_close(ours.encode(x), theirs.encode(x), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(ours(x), theirs.decode(theirs.encode(x)), atol=1e-5, rtol=1e-5)


def test_sae_lens_reads_back_an_export_of_a_model_sae_and_its_evals_equal_ours(tmp_path):
    """The round trip SAELens users make (skipped where sae_lens is not installed; `make saelens` builds
    an environment with it and runs this): SAE.load_from_disk keeps the hook, the model's name and
    prepend_bos; HookedSAETransformer, on the model's TransformerLens export, splices it at its hook;
    SAELens's evals on the same tokens give this project's measures under the same names."""
    sae_lens = pytest.importorskip("sae_lens")
    from sae_lens import HookedSAETransformer
    from sae_lens.evals import get_downstream_reconstruction_metrics, get_sparsity_and_variance_metrics
    from sae_lens.training.activation_scaler import ActivationScaler
    from transformer_lens import HookedTransformerConfig

    from transformer_lab.analysis import sae_measures

    run = tmp_path / "sae"
    short = ["trainer.max_steps=60", "trainer.val_check_interval=60", "data.batch_size=256", "threads=1"]
    model_args = ["source=pretrained:induction_heads", "hook=blocks.0.hook_attn_out"]
    train(compose_train_config(run, *model_args, *short, base=["experiment=sae", *COMMON]))
    export = load_script("export").main
    export([f"sae={run}", "to=sae_lens", f"out={tmp_path / 'sl'}"])
    export(["ckpt_path=pretrained:induction_heads", "to=transformer_lens", f"out={tmp_path / 'tl'}"])

    sae = sae_lens.SAE.load_from_disk(str(tmp_path / "sl"))
    metadata = sae.cfg.metadata
    assert (metadata.hook_name, metadata.model_name, metadata.prepend_bos) == (
        "blocks.0.hook_attn_out",
        "pretrained:induction_heads",
        False,
    )
    config = json.loads((tmp_path / "tl" / "config.json").read_text())
    model = HookedSAETransformer(HookedTransformerConfig(**config))
    model.load_state_dict(load_file(tmp_path / "tl" / "model.safetensors"))
    model.add_sae(sae)
    ours = transformer_lab.load_sae(run)
    (tokens,), _ = ours.source.examples(32)
    _, cache = model.run_with_cache(tokens)
    assert "blocks.0.hook_attn_out.hook_sae_acts_post" in cache  # spliced, not skipped
    model.reset_saes()

    class Tokens:  # the activation store SAELens's evals ask for tokens
        def get_batch_tokens(self, count):
            return tokens[:count]

    common = dict(activation_store=Tokens(), activation_scaler=ActivationScaler(), n_batches=1)
    theirs, _ = get_sparsity_and_variance_metrics(
        sae, model, **common, compute_l2_norms=False, compute_sparsity_metrics=True,
        compute_variance_metrics=True, compute_featurewise_density_statistics=False,
        eval_batch_size_prompts=len(tokens), model_kwargs={},
    )  # fmt: skip
    theirs |= get_downstream_reconstruction_metrics(
        sae, model, **common, compute_kl=False, compute_ce_loss=True, eval_batch_size_prompts=len(tokens)
    )
    labels = torch.full_like(tokens, -100)
    labels[:, :-1] = tokens[:, 1:]  # SAELens's loss: the next token at every position but the last
    sums = sae_measures.empty_sums(ours.sae.width, ours.sae.config.d_in)
    with torch.no_grad():
        sae_measures.add(sums, sae_measures.model_sums(ours.source.model, ours.sae, (tokens,), labels))
    measured = sae_measures.measures(sums)
    for name in ("l0", "l1", "mse", "explained_variance", "cossim", "ce_loss_score", "ce_loss_with_sae"):
        assert measured[name] == pytest.approx(theirs[name], rel=1e-4, abs=1e-5), name
