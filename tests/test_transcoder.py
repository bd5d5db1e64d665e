"""Transcoders (`nn.transcoder`): circuit-tracer's map, the training terms on the MLP's output, and the
config's refusals."""

import pytest
import torch

import transformer_lab
from tests.conftest import COMMON, compose_train_config, load_script
from transformer_lab import ConfigError
from transformer_lab.data.activations import ActivationsDataModule
from transformer_lab.nn.sae import real_positions
from transformer_lab.nn.transcoder import Transcoder, TranscoderConfig
from transformer_lab.sae_checkpoint import load_sae
from transformer_lab.train import train

D_IN, D_OUT, WIDTH = 12, 10, 48


def made(kind: str, skip: bool, seed: int = 0) -> Transcoder:
    """A transcoder with random weights, scales and (jumprelu) thresholds: nothing at its initial value."""
    torch.manual_seed(seed)
    k = {"k": 5} if kind in ("topk", "batchtopk") else {}
    transcoder = Transcoder(TranscoderConfig(d_in=D_IN, width=WIDTH, kind=kind, d_out=D_OUT, skip=skip, **k))
    with torch.no_grad():
        for parameter in transcoder.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.5)
        transcoder.input_scale.fill_(2.5)
        transcoder.scale_out.fill_(0.4)
        if kind == "topk":  # every pre-activation positive: circuit-tracer's TopK keeps negative ones
            transcoder.b_enc.add_(20.0)
    return transcoder.eval()


def circuit_tracer_forward(weights: dict, x: torch.Tensor, kind: str, threshold=None, k: int = 5):
    """circuit-tracer's SingleLayerTranscoder.forward (circuit_tracer/transcoder/single_layer_transcoder.py
    and activation_functions.py): F.linear(x, W_enc, b_enc), its activation, acts @ W_dec + b_dec, plus
    x @ W_skip.T."""
    pre = torch.nn.functional.linear(x, weights["W_enc"], weights["b_enc"])
    if kind == "relu":
        acts = pre.relu()
    elif kind == "jumprelu":
        acts = pre * (pre > threshold)
    else:  # TopK: a gate on the k largest
        gate = torch.zeros_like(pre).scatter_(-1, pre.topk(k, dim=-1).indices, 1.0)
        acts = pre * gate
    out = acts @ weights["W_dec"] + weights["b_dec"]
    if "W_skip" in weights:
        out = out + x @ weights["W_skip"].T
    return out


@pytest.mark.parametrize("skip", [False, True])
@pytest.mark.parametrize("kind", ["relu", "jumprelu", "topk"])
def test_a_transcoder_computes_circuit_tracer_s_map(kind, skip):
    transcoder = made(kind, skip)
    x = torch.randn(7, 3, D_IN)
    with torch.no_grad():
        ours = transcoder(x)
        reference = circuit_tracer_forward(transcoder.circuit_tracer_weights(), x, kind, transcoder.threshold)
    assert ours.shape == (7, 3, D_OUT)
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)
    assert ("W_skip" in transcoder.circuit_tracer_weights()) == skip


@pytest.mark.parametrize("skip", [False, True])
def test_the_training_loss_reconstructs_the_mlp_output_not_the_input(skip):
    """reconstruction = mean_n ||s_out y_n - (f_n W_dec + b_dec + s_out x_n W_skip)||^2, and its minimum is
    at y_hat = y: the loss written by hand from the weights, and 0 for a target the transcoder writes."""
    transcoder = made("relu", skip)
    x, y = torch.randn(16, D_IN), torch.randn(16, D_OUT)
    losses = transcoder.training_losses(x, coefficient=0.0, target=y)
    with torch.no_grad():
        f = (x * 2.5 @ transcoder.W_enc + transcoder.b_enc).relu()
        written = f @ transcoder.W_dec + transcoder.b_dec
        if skip:
            written = written + 0.4 * x @ transcoder.W_skip
        by_hand = (0.4 * y - written).pow(2).sum(-1).mean()
        torch.testing.assert_close(losses["reconstruction"], by_hand, rtol=1e-5, atol=1e-6)
        exact = transcoder(x)
        assert float(transcoder.training_losses(x, 0.0, target=exact)["reconstruction"]) < 1e-9


def test_an_sae_is_unchanged_by_the_transcoder_s_parts():
    """The SAE writes what it reads: its output scale is its input scale and it has no skip."""
    from transformer_lab.nn.sae import SAEConfig, SparseAutoencoder

    torch.manual_seed(0)
    sae = SparseAutoencoder(SAEConfig(d_in=D_IN, width=WIDTH, kind="relu"))
    with torch.no_grad():
        sae.input_scale.fill_(3.0)
        sae.b_dec.normal_()
        x = torch.randn(5, D_IN)
        by_hand = ((x * 3.0 - sae.b_dec) @ sae.W_enc + sae.b_enc).relu() @ sae.W_dec + sae.b_dec
        torch.testing.assert_close(sae(x), by_hand / 3.0, rtol=1e-5, atol=1e-6)
    assert sae.skip(x) is None and sae.output_scale is sae.input_scale


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"d_out": 0}, r"d_out=0 must be a positive integer"),
        ({"d_out": 10, "skip": "yes"}, r"model.skip='yes' must be true or false"),
        ({"d_out": 10, "output_hook": 3}, r"output_hook=3 must be a hook's name"),
        ({"d_out": 10, "unknown": 1}, r"unknown key 'unknown'"),
    ],
)
def test_a_bad_transcoder_config_is_refused_by_name(settings, message):
    with pytest.raises(ValueError, match=message):
        TranscoderConfig.from_dict({"d_in": D_IN, "width": WIDTH, "kind": "relu"} | settings)


# ------------------------------------------------------------------------------ trained by train.py
SOURCE = "pretrained:reverse_2l4h"
TINY_TRANSCODER = [
    "experiment=transcoder", f"source={SOURCE}", "layer=1", "threads=1", *COMMON, "trainer.max_steps=300",
    "trainer.val_check_interval=300", "data.val_examples=16", "data.test_examples=32", "data.buffer=4096",
    "data.batch_size=256", "model.kind=topk", "model.expansion=4", "model.skip=true", "model.lr=3e-3",
]  # fmt: skip


@pytest.fixture(scope="module")
def transcoder_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("transcoder_run")
    metrics = train(compose_train_config(run, base=TINY_TRANSCODER))
    return run, metrics


def test_the_rows_pair_an_mlp_s_input_with_its_output(tmp_path):
    """Each row is [x | y] at one real position: x what blocks.1's MLP reads, y what it writes, so the
    model's own MLP maps x to y."""
    data = ActivationsDataModule(
        source=SOURCE, hook="blocks.1.mlp.hook_in", output_hook="blocks.1.hook_mlp_out", verbose=False,
        cache_dir=str(tmp_path), source_batch_size=8,
    )  # fmt: skip
    rows = data.activations(next(data.source_batches()))
    d = data.d_in
    assert data.d_out == d and rows.shape[1] == 2 * d and data.row_width == 2 * d
    with torch.no_grad():
        mlp = data.source_model.blocks[1].mlp
        torch.testing.assert_close(mlp(rows[:, :d]), rows[:, d:], rtol=1e-5, atol=1e-5)


def test_a_transcoder_run_is_measured_where_it_writes(transcoder_run):
    """The run's test measures: explained variance of the MLP's output, and the loss with the MLP's output
    replaced by what the transcoder writes from the MLP's input, each computed here by hand."""
    run_dir, metrics = transcoder_run
    run = load_sae(run_dir)
    transcoder = run.sae
    assert isinstance(transcoder, Transcoder) and transcoder.W_skip is not None
    assert run.hook == "blocks.1.mlp.hook_in" and transcoder.config.output_hook == "blocks.1.hook_mlp_out"
    source = transformer_lab.load(SOURCE)
    model = source.model
    inputs, labels = source.examples(32, split="test")
    read, wrote = {}, {}

    def keep(store):
        def hook(activation, point):
            store["x"] = activation

        return hook

    def replace(activation, point):
        return transcoder(read["x"])

    with torch.no_grad():
        reads = ("blocks.1.mlp.hook_in", keep(read))
        model.run_with_hooks(*inputs, fwd_hooks=[reads, ("blocks.1.hook_mlp_out", keep(wrote))])
        logits = model.run_with_hooks(*inputs, fwd_hooks=[reads, ("blocks.1.hook_mlp_out", replace)])
        real = real_positions(model, run.hook, inputs)
        y, y_hat = wrote["x"][real].double(), transcoder(read["x"])[real].double()
    explained = 1 - (y - y_hat).pow(2).sum() / (y - y.mean(0)).pow(2).sum()
    assert metrics["test/explained_variance"] == pytest.approx(float(explained), abs=1e-4)
    flat = logits.flatten(0, 1).double()
    loss = torch.nn.functional.cross_entropy(flat, labels.flatten(), ignore_index=-100)
    assert metrics["test/ce_loss_with_sae"] == pytest.approx(float(loss), abs=1e-4)
    # 300 steps learn most of the MLP's output (0.93 here), and the model keeps its loss (0.99 here)
    assert metrics["test/explained_variance"] > 0.8 and metrics["test/ce_loss_score"] > 0.9


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["experiment=transcoder", "source=pretrained:induction_heads", "layer=0"], "has no MLP"),
        (["experiment=transcoder", f"source={SOURCE}", "layer=7"], r"blocks.7.mlp.hook_in is not a hook"),
        (["experiment=sae", f"source={SOURCE}", "hook=blocks.0.hook_resid_post", "+model.skip=true"],
         r"model.skip=true is a transcoder's"),
    ],
)  # fmt: skip
def test_a_transcoder_the_model_cannot_have_is_refused_by_name(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        train(compose_train_config(tmp_path, *COMMON, "trainer.max_steps=1", base=overrides))


def test_the_tools_that_read_an_sae_refuse_a_transcoder_in_one_line(transcoder_run, tmp_path):
    """The feature tools splice an SAE at the hook it reads, and to=sae_lens writes an SAE's format: a
    transcoder is neither, and nothing is written."""
    run_dir, _ = transcoder_run
    with pytest.raises(ConfigError, match=r"is a transcoder .* which the feature tools do not splice in yet"):
        _ = load_sae(run_dir).model
    with pytest.raises(ConfigError, match="is a transcoder, which to=sae_lens does not write yet"):
        load_script("export").main([f"sae={run_dir}", "to=sae_lens", f"out={tmp_path / 'out'}"])
    assert not (tmp_path / "out").exists()
