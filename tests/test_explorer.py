"""The attention explorer, Python side: its numbers are explain.py's on tiny models, the matrices survive
packing, the page is one self-contained file (nothing fetched, data that cannot break out of its
<script>), Jupyter gets an iframe, and scripts/explore.py writes the page or fails with one line and no
file left behind. The page itself is tested in Chromium in test_explorer_browser.py."""

import html
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import encoder_classifier, gpt_decoder, load_script, run_cli, save_task_checkpoint
from transformer_lab import TransformerPredictor, explain, load_model
from transformer_lab.cli import run
from transformer_lab.data import ReverseDataModule
from transformer_lab.data.seq2seq import BOS, EOS, PAD
from transformer_lab.explorer import ExplorerPage, explore, explorer_data, render, write_page
from transformer_lab.explorer.collect import Ablation, AttentionKind, ExplorerData, Overlay, Prediction
from transformer_lab.explorer.pack import pack, pack_within, packed_size, unpack
from transformer_lab.nn import EncoderDecoder, ModelConfig

ARCHS = ("encoder", "decoder", "encoder_decoder")


def page_data(page: str) -> dict:
    """The JSON the page's script reads."""
    match = re.search(r'<script type="application/json" id="explorer-data">(.*?)</script>', page, re.S)
    return json.loads(match.group(1))


def encoder_decoder(**overrides: object) -> EncoderDecoder:
    torch.manual_seed(0)
    settings = dict(
        arch="encoder_decoder", vocab_size=12, pad_id=PAD, bos_id=BOS, eos_id=EOS, num_heads=2, num_layers=2,
        max_len=10,
    )  # fmt: skip
    return EncoderDecoder(ModelConfig(**(settings | overrides))).eval()


def synthetic_data(layers: int = 8, heads: int = 8, tokens: int = 256, seed: int = 0) -> ExplorerData:
    """Explorer data of the issue's large case without running a model: every attention row a softmax
    of Gaussian scores (about as incompressible as an untrained model's near-uniform rows)."""
    rng = np.random.default_rng(seed)

    def rows(*shape: int) -> np.ndarray:
        scores = rng.standard_normal(shape).astype(np.float32)
        weights = np.exp(scores)
        return weights / weights.sum(-1, keepdims=True)

    names = [f"t{i % 50}" for i in range(tokens)]
    kind = AttentionKind(
        "self", "Self-attention", names, names, "query", "key", rows(layers, heads, tokens, tokens)
    )
    top = [(names[1], 0.5), (names[2], 0.3), (names[3], 0.1)]
    return ExplorerData(
        arch="encoder",
        summary={"arch": "encoder", "join": " ", "layers": layers, "heads": heads, "model_dim": 128,
                 "parameters": 1, "input": names, "output": names, "causal": False},
        kinds=[kind],
        overlay_kind="self",
        overlay_rows=names,
        overlay_cols=names,
        overlays=[Overlay(name, name, rows(tokens, tokens)) for name in ("rollout", "relevance")],
        predictions=[Prediction(t, names[t], top, names[1], True) for t in range(tokens)],
        prediction_kinds=["self"],
        ablation=Ablation(
            [f"blocks.{i}.attn" for i in range(layers)], [f"L{i}" for i in range(layers)], ["self"] * layers,
            list(range(layers)), -0.5, rng.standard_normal((layers, heads)).tolist(), tokens,
        ),
    )  # fmt: skip


# ------------------------------------------------------------------------------------ the numbers
def test_encoder_data_is_what_explain_computes():
    torch.manual_seed(0)
    model = encoder_classifier(10, num_layers=2, num_heads=2).eval()
    x = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    labels = [6, 2, 9, 5, 1, 4, 1, 3]
    data = explorer_data(model, x, labels)

    (kind,) = data.kinds
    maps = explain.attention_maps(model, x)
    assert kind.name == "self" and kind.maps.shape == (2, 2, 8, 8)
    assert np.allclose(kind.maps, torch.cat(maps).detach().numpy(), atol=1e-6)
    assert np.allclose(kind.maps.sum(-1), 1, atol=1e-5)
    rollout, relevance = data.overlays
    assert np.allclose(rollout.matrix, explain.attention_rollout(maps)[0].detach().numpy(), atol=1e-6)
    gradient = explain.gradient_attention_all(model, x)[0] - torch.eye(8)
    assert np.allclose(relevance.matrix, (gradient / gradient.sum(-1, keepdim=True)).numpy(), atol=1e-5)

    probs = model(x)[0].softmax(-1)
    top_p, top_i = probs.topk(3)
    for t, prediction in enumerate(data.predictions):
        assert [token for token, _ in prediction.top] == [model.vocab[i] for i in top_i[t].tolist()]
        assert [p for _, p in prediction.top] == pytest.approx(top_p[t].tolist(), abs=1e-4)
        assert prediction.label == str(labels[t])
        assert prediction.correct == (int(top_i[t, 0]) == labels[t])
    assert data.summary["input"] == [str(i) for i in x[0].tolist()]


def test_ablation_of_a_head_that_writes_nothing_costs_nothing():
    """Head 1 of layer 0 has a zero output projection: zeroing its z changes nothing; the other heads
    matter. The baseline is the mean log-probability of the model's own predictions."""
    torch.manual_seed(1)
    model = encoder_classifier(10, num_layers=2, num_heads=2).eval()
    head_dim = model.config.model_dim // 2
    with torch.no_grad():
        model.blocks[0].attn.o_proj.weight[:, head_dim:] = 0
    x = torch.tensor([[3, 1, 4, 1, 5, 9]])
    ablation = explorer_data(model, x).ablation
    with torch.no_grad():
        log_probs = model(x)[0].log_softmax(-1)
    assert ablation.baseline == pytest.approx(float(log_probs.max(-1).values.mean()), abs=1e-5)
    assert ablation.layers == ["blocks.0.attn", "blocks.1.attn"] and ablation.labels == ["L0", "L1"]
    assert ablation.drops[0][1] == pytest.approx(0.0, abs=1e-6)
    assert abs(ablation.drops[0][0]) > 1e-4 and abs(ablation.drops[1][0]) > 1e-4
    assert explorer_data(model, x, ablation=False).ablation is None


def test_decoder_data_is_causal_and_labels_mark_the_next_token():
    torch.manual_seed(0)
    model = gpt_decoder(12).eval()
    x = torch.tensor([2, 5, 7, 7, 1, 3])
    labels = [5, 7, 7, 1, 3, -100]
    data = explorer_data(model, x, labels)
    maps = data.kinds[0].maps
    assert maps.shape == (2, 2, 6, 6) and np.all(np.triu(maps, k=1) == 0)
    assert data.summary["causal"] and data.overlay_kind == "self"
    assert data.predictions[-1].label is None and data.predictions[-1].correct is None
    assert all(p.label is not None for p in data.predictions[:-1])
    # the ablation averages over the labelled positions only
    assert data.ablation.positions == 5


def test_encoder_decoder_explains_its_greedy_output():
    model = encoder_decoder()
    source = torch.tensor([[5, 6, 7, 8]])
    output = model.generate(source)
    target = torch.cat([torch.tensor([[BOS]]), output[:, :-1]], dim=1)
    expected = [8, 7, 6, 5, EOS]
    data = explorer_data(model, source, expected)

    assert [k.name for k in data.kinds] == ["encoder", "decoder", "cross"]
    maps = explain.encoder_decoder_maps(model, source, target)
    t, s = target.size(1), source.size(1)
    for kind in data.kinds:
        assert np.allclose(kind.maps, torch.cat(maps[kind.name]).numpy(), atol=1e-6)
    assert data.kinds[2].maps.shape == (2, 2, t, s) and data.kinds[2].rows[0] == model.vocab[BOS]
    rollout, relevance = data.overlays
    assert rollout.matrix.shape == relevance.matrix.shape == (t, s)
    assert np.allclose(relevance.matrix.sum(-1), 1, atol=1e-5)
    expected_relevance = explain.source_relevance(model, source, target)[0]
    assert np.allclose(
        relevance.matrix, (expected_relevance / expected_relevance.sum(-1, keepdim=True)).numpy()
    )
    assert data.overlay_rows == [model.vocab[i] for i in output[0].tolist()]
    assert [p.top[0][0] for p in data.predictions] == data.overlay_rows  # greedy = the top prediction
    assert [p.label for p in data.predictions][: len(expected)] == [model.vocab[i] for i in expected][:t]
    ablation = data.ablation
    assert ablation.labels == ["E0", "E1", "D0", "X0", "D1", "X1"]
    assert ablation.kinds == ["encoder", "encoder", "decoder", "cross", "decoder", "cross"]
    assert ablation.indices == [0, 1, 0, 0, 1, 1]


def test_bad_inputs_raise_value_errors():
    model = encoder_classifier(10, max_len=8)
    with pytest.raises(ValueError, match="not in the model's vocabulary"):
        explorer_data(model, [1, 2, 10])
    with pytest.raises(ValueError, match="max_len=8"):
        explorer_data(model, list(range(9)))
    with pytest.raises(ValueError, match="labels has 2 entries for 3 output positions"):
        explorer_data(model, [1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="empty"):
        explorer_data(model, [])


def test_eight_layers_of_eight_heads_over_256_tokens_stay_under_5_mb():
    """The issue's large case, at its least compressible: the maps are thinned to fit, nothing else."""
    page = render(synthetic_data(), "large")
    assert len(page.encode()) < 5_000_000
    data = page_data(page)
    assert data["kinds"][0]["maps"]["levels"] < 255  # thinned to fit
    assert data["overlays"]["items"][0]["matrix"]["levels"] == 255  # small enough as they are
    assert unpack(data["kinds"][0]["maps"]).shape == (8, 8, 256, 256)


# ---------------------------------------------------------------------------------------- packing
def test_pack_round_trip_is_within_half_a_level_of_each_row_max():
    rng = np.random.default_rng(0)
    values = rng.random((2, 3, 5, 7)).astype(np.float32) ** 3
    values[0, 0, 1] = 0  # an all-zero row stays zero
    for levels in (255, 15):
        packed = pack(values, levels)
        restored = unpack(packed)
        assert packed["shape"] == [2, 3, 5, 7] and packed["levels"] == levels
        error = np.abs(restored - values) / values.max(-1, keepdims=True).clip(1e-12)
        assert error.max() <= 0.5 / levels + 1e-6
        assert np.all(restored[0, 0, 1] == 0)
        assert np.allclose(restored.max(-1), values.max(-1), rtol=1e-6)  # the row max is exact


def test_pack_within_thins_only_what_does_not_fit():
    noise = np.random.default_rng(0).random((4, 64, 64)).astype(np.float32)
    fine = pack_within([noise], budget=10**9)
    assert fine[0]["levels"] == 255
    coarse = pack_within([noise], budget=packed_size(fine[0]) * 3 // 4)
    assert coarse[0]["levels"] < 255 and packed_size(coarse[0]) <= packed_size(fine[0]) * 3 // 4


# -------------------------------------------------------------------------------------- the page
@pytest.fixture(scope="module")
def encoder_page() -> ExplorerPage:
    torch.manual_seed(0)
    vocab = ["a", "b", "</script><b>x</b>", "<!--", "&amp;"]  # tokens that must not break the page
    model = encoder_classifier(num_layers=2, num_heads=2, vocab=vocab, vocab_size=None, max_len=8).eval()
    return explore(model, [0, 2, 3, 4, 1], labels=[1, 1, 1, 1, 1], title="A <test> page")


def test_page_is_self_contained(encoder_page):
    page = str(encoder_page)
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(?:src|href|action|poster)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?(?:https?:)?//|<link\b|<script[^>]+\bsrc=", page, re.I)
    assert not re.search(r"\bfetch\(|XMLHttpRequest|WebSocket|EventSource|import\(", page)
    # the data, the model's forward pass and the views' code, inline
    assert page.count("<script") == 3 and page.count("</script>") == 3
    assert "<style>" in page and ".head-chip" in page and "DecompressionStream" in page
    assert "<title>A &lt;test&gt; page</title>" in page


def test_page_data_survives_odd_tokens(encoder_page):
    data = page_data(encoder_page)
    assert data["summary"]["input"] == ["a", "</script><b>x</b>", "<!--", "&amp;", "b"]
    assert data["title"] == "A <test> page" and data["arch"] == "encoder"
    (kind,) = data["kinds"]
    maps = unpack(kind["maps"])
    assert maps.shape == (2, 2, 5, 5) and np.allclose(maps.sum(-1), 1, atol=0.02)
    assert len(data["predictions"]["rows"]) == 5 and len(data["ablation"]["drops"]) == 2


def test_repr_html_is_an_iframe_of_the_page(encoder_page):
    frame = encoder_page._repr_html_()
    assert frame.startswith('<iframe srcdoc="') and frame.endswith("</iframe>")
    srcdoc = re.match(r'<iframe srcdoc="([^"]*)"', frame).group(1)
    assert "<" not in srcdoc and html.unescape(srcdoc) == str(encoder_page)
    assert isinstance(encoder_page, str)


def test_write_page_replaces_atomically(tmp_path, monkeypatch):
    out = tmp_path / "page.html"
    out.write_text("old")
    write_page("new page", out)
    assert out.read_text() == "new page" and sorted(p.name for p in tmp_path.iterdir()) == ["page.html"]

    def broken(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("transformer_lab.files.os.replace", broken)
    with pytest.raises(OSError):
        write_page("newer page", out)
    assert out.read_text() == "new page" and sorted(p.name for p in tmp_path.iterdir()) == ["page.html"]


# ------------------------------------------------------------------------------ scripts/explore.py
@pytest.fixture(scope="module")
def script():
    return load_script("explore")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """An untrained reverse checkpoint per architecture, saved as train.py saves them."""
    folder = tmp_path_factory.mktemp("explore_ckpts")
    paths = {}
    for arch in ARCHS:
        task = ReverseDataModule(
            arch, seq_len=6, min_seq_len=3, train_size=16, val_size=16, test_size=16, batch_size=16
        )
        torch.manual_seed(0)
        paths[arch] = save_task_checkpoint(folder / f"{arch}.ckpt", task, arch=arch)
    return paths


def _fails(script, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        run(script.main, argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("given", ["index=3", "source=1 2 3 4", "text=5 6 7"])
def test_script_writes_one_page(script, checkpoints, arch, given, tmp_path, capsys):
    out = tmp_path / "page.html"
    script.main([f"ckpt_path={checkpoints[arch]}", given, f"out={out}"])
    printed = capsys.readouterr().out
    assert (
        f"Wrote {out} (" in printed
        and out.resolve().as_uri() in printed
        and "open it in a browser" in printed
    )
    data = page_data(out.read_text())
    assert data["arch"] == arch and [p.name for p in tmp_path.iterdir()] == ["page.html"]
    rows = data["predictions"]["rows"]
    if given.startswith("source") and arch != "decoder":  # the task's own answer labels the outputs
        assert any(row["label"] is not None for row in rows)
    if arch == "encoder":
        expected_input = {"source=1 2 3 4": ["1", "2", "3", "4"], "text=5 6 7": ["5", "6", "7"]}
        if given in expected_input:
            assert data["summary"]["input"] == expected_input[given]
        if given == "source=1 2 3 4":
            assert [row["label"] for row in rows] == ["4", "3", "2", "1"]
    if arch == "decoder" and given == "source=1 2 3 4":
        assert data["summary"]["input"][:5] == ["1", "2", "3", "4", "<sep>"]
        assert rows[4]["label"] == "4"  # <sep> predicts the first output: the last source token


def test_script_bad_inputs_are_one_line_errors(script, checkpoints, tmp_path, capsys):
    encoder = f"ckpt_path={checkpoints['encoder']}"
    out = f"out={tmp_path / 'page.html'}"
    not_a_model = tmp_path / "tensors.ckpt"
    torch.save({"weights": torch.zeros(3)}, not_a_model)
    assert "not a transformer-lab checkpoint" in _fails(script, [f"ckpt_path={not_a_model}", out], capsys)
    text_file = tmp_path / "notes.ckpt"
    text_file.write_text("not a checkpoint")
    assert str(text_file) in _fails(script, [f"ckpt_path={text_file}", out], capsys)
    assert "use an integer from 0 to 15" in _fails(script, [encoder, "index=16", out], capsys)
    assert "'x'" in _fails(script, [encoder, "text=1 x 2", out], capsys)
    too_long = _fails(script, [encoder, "source=1 2 3 4 5 6 7", out], capsys)
    assert "source= has 7 tokens, more than the model's 6 positions" in too_long
    assert "not index= and text=" in _fails(script, [encoder, "index=1", "text=1", out], capsys)
    missing = tmp_path / "missing" / "page.html"
    assert "does not exist" in _fails(script, [encoder, f"out={missing}"], capsys)
    assert "is a folder" in _fails(script, [encoder, f"out={tmp_path}"], capsys)
    assert sorted(tmp_path.iterdir()) == sorted([not_a_model, text_file])  # no page, no temporary file


def test_script_failing_write_leaves_nothing(script, checkpoints, tmp_path, capsys, monkeypatch):
    def broken(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("transformer_lab.files.os.replace", broken)
    err = _fails(script, [f"ckpt_path={checkpoints['encoder']}", f"out={tmp_path / 'page.html'}"], capsys)
    assert "cannot write out=" in err and "No space left on device" in err
    assert list(tmp_path.iterdir()) == []


def test_script_help_lists_the_keys():
    result = run_cli("scripts/explore.py", "--help")
    assert result.returncode == 0
    for key in ("ckpt_path", "index", "text", "source", "out", "device"):
        assert key in result.stdout


def test_script_text_on_a_character_model_labels_the_next_character(script, tmp_path, capsys):
    """A Shakespeare-style checkpoint (characters, no task data needed for text=): position t's label is
    character t + 1 of the text, the last has none, and the page writes the text as characters."""
    torch.manual_seed(0)
    vocab = list("\n !:;?ABEIMORST")
    net = ModelConfig(arch="decoder", vocab=vocab, max_len=32, num_heads=2, num_layers=2, norm_first=True)
    model = TransformerPredictor(net=net.to_dict())
    task = {"class": "transformer_lab.data.shakespeare.ShakespeareDataModule", "separator": ""}
    path = tmp_path / "chars.ckpt"
    torch.save(
        {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams), "task": task}, path
    )
    out = tmp_path / "romeo.html"
    script.main([f"ckpt_path={path}", "text=ROMEO: I", f"out={out}"])
    data = page_data(out.read_text())
    rows = data["predictions"]["rows"]
    assert [row["reads"] for row in rows] == list("ROMEO: I")
    assert [row["label"] for row in rows] == [*"OMEO: I", None]
    assert data["summary"]["join"] == "" and data["title"].endswith('text "ROMEO: I"')


# ------------------------------------------------------------------------------------- the live page
def test_live_page_holds_the_model_and_what_its_interventions_need():
    """A live page carries the weights (tied ones once), the structure read through the models' shared
    interface, the mean z per layer and position over the reference batch, and PyTorch's logits for
    the first input (the page checks itself against them)."""
    from transformer_lab.explorer.live import unpack_values

    torch.manual_seed(0)
    model = gpt_decoder(12, num_layers=2, num_heads=2).eval()
    reference = torch.randint(0, 12, (5, 8))
    live = page_data(explore(model, [1, 2, 3, 4], ablation=False, reference=reference))["live"]
    spec = live["spec"]
    assert [s["prefix"] for s in spec["stacks"]] == [""] and spec["stacks"][0]["causal"]
    assert [layer["name"] for layer in spec["layers"]] == ["blocks.0.attn", "blocks.1.attn"]
    offsets = {name: offset for name, offset, _ in live["weights"]["manifest"]}
    assert offsets["embed.weight"] == offsets["unembed.weight"]  # tied: stored once
    weights = unpack_values(live["weights"])
    state = model.state_dict()
    for name, offset, shape in live["weights"]["manifest"]:
        size = int(np.prod(shape))
        assert np.array_equal(weights[offset : offset + size], state[name].reshape(-1).numpy())
    means = unpack_values(live["means"])
    with torch.no_grad():
        _, cache = model.run_with_cache(reference)
    assert np.allclose(means[: 8 * 32], cache["blocks.0.attn.hook_z"].mean(0).reshape(-1).numpy(), atol=1e-6)
    box = live["input"]
    assert (box["mode"], box["tokens"], box["inputs"], box["label_rule"]) == (
        "tokens",
        [1, 2, 3, 4],
        [[1, 2, 3, 4]],
        "next",
    )
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3, 4]]))[0]
    assert np.allclose(unpack_values(live["check"]).reshape(4, 12), logits.numpy())


def test_a_source_is_the_box_of_a_sequence_to_sequence_model():
    model = encoder_decoder()
    live = page_data(explore(model, [[5, 6, 7, 8]], ablation=False))["live"]
    assert live["input"]["mode"] == "source" and live["input"]["tokens"] == [5, 6, 7, 8]
    assert live["input"]["specials"] == [PAD, BOS, EOS] and live["spec"]["numInputs"] == 2
    assert [s["prefix"] for s in live["spec"]["stacks"]] == ["encoder.", "decoder."]
    assert [layer["label"] for layer in live["spec"]["layers"]] == ["E0", "E1", "D0", "X0", "D1", "X1"]


def test_a_model_over_the_budget_or_with_unknown_parts_gets_the_precomputed_page():
    torch.manual_seed(0)
    model = encoder_classifier(10, num_layers=1)
    page = explore(model, [1, 2, 3], weight_budget=10_000)
    assert "more than the 0.01 MB a page may hold (weights=float16 halves them)" in page.live_note
    assert page_data(page)["live"] is None and page_data(page)["live_note"] == page.live_note
    model.register_parameter("extra", torch.nn.Parameter(torch.zeros(3)))  # a part the page cannot run
    assert "a weight the page's forward pass does not know (extra)" in explore(model, [1, 2, 3]).live_note
    assert page_data(explore(model, [1, 2, 3], live=False))["live"] is None


def test_float16_weights_halve_the_page_and_are_the_rounded_models():
    from transformer_lab.explorer.live import live_model, rounded_model, unpack_values

    torch.manual_seed(0)
    model = gpt_decoder(12)
    full, half = live_model(model), live_model(model, dtype="float16")
    assert half.chars < 0.6 * full.chars
    rounded = rounded_model(model, "float16")
    values = unpack_values(half.weights)
    for name, offset, shape in half.weights["manifest"]:
        size = int(np.prod(shape))
        assert np.array_equal(values[offset : offset + size], rounded.state_dict()[name].reshape(-1).numpy())
    with pytest.raises(ValueError, match="weights='float64' is unknown"):
        live_model(model, dtype="float64")


def test_script_live_and_weights_arguments(script, checkpoints, tmp_path, capsys, monkeypatch):
    encoder = f"ckpt_path={checkpoints['encoder']}"
    out = tmp_path / "page.html"
    script.main([encoder, f"out={out}", "weights=float16"])
    assert "live page" in capsys.readouterr().out
    assert page_data(out.read_text())["live"]["weights"]["dtype"] == "float16"
    script.main([encoder, f"out={out}", "live=false"])
    assert page_data(out.read_text())["live"] is None
    script.main([encoder, f"out={out}"])  # weights=auto: a small model's are float32
    assert page_data(out.read_text())["live"]["weights"]["dtype"] == "float32"
    values = sum(p.numel() for p in load_model(checkpoints["encoder"]).state_dict().values())
    monkeypatch.setattr("transformer_lab.explore.WEIGHTS_IN_PAGE", values * 4)  # float16's fit, not float32's
    script.main([encoder, f"out={out}"])
    assert page_data(out.read_text())["live"]["weights"]["dtype"] == "float16"
    capsys.readouterr()
    budgets = {
        "transformer_lab.explore.WEIGHTS_IN_PAGE": [],
        "transformer_lab.explorer.live.WEIGHT_BUDGET": ["weights=float32"],
    }
    for budget, extra in budgets.items():  # the default's budget, and an explicit dtype's
        monkeypatch.setattr(budget, 1000)
        script.main([encoder, f"out={out}", *extra])
        printed = capsys.readouterr()
        assert printed.err.startswith("note: the page shows the precomputed views only: its weights take")
        assert "live page" not in printed.out and page_data(out.read_text())["live"] is None
    assert "live=maybe is not true or false" in _fails(script, [encoder, "live=maybe", f"out={out}"], capsys)
    assert "weights=float64 is unknown" in _fails(script, [encoder, "weights=float64", f"out={out}"], capsys)


def test_script_on_a_shipped_series_slides_over_its_snapshots(script, tmp_path, capsys):
    """`ckpt_path=pretrained:<name>` of a model shipped with its training's snapshots: the slider holds
    every snapshot once, the shipped model (the last snapshot) among them, and opens on it."""
    from transformer_lab import pretrained

    series = [name for name in pretrained.names() if pretrained.record(name).get("snapshots")]
    if not series:
        pytest.skip("no ready-made model ships a series of snapshots")
    out = tmp_path / "series.html"
    script.main([f"ckpt_path=pretrained:{series[0]}", f"out={out}"])
    steps = [int(re.search(r"step_(\d+)", f.name).group(1)) for f in pretrained.snapshots(series[0])]
    assert f"a step slider over {len(steps)} checkpoints" in capsys.readouterr().out
    live = page_data(out.read_text())["live"]["series"]
    assert live["steps"] == sorted(steps) and live["current"] == len(steps) - 1


def test_a_named_checkpoint_file_is_its_own_page_and_a_run_directory_slides(script, tmp_path, capsys):
    """`ckpt_path=<run>/checkpoints/best.ckpt` names one checkpoint: its page, no slider over the run's
    snapshots (steps=true asks for it); `ckpt_path=<run>` slides over them."""
    from transformer_lab.training.checkpoint_io import shippable

    task = ReverseDataModule(
        "encoder", seq_len=6, min_seq_len=3, train_size=16, val_size=16, test_size=16, batch_size=16
    )
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "snapshots").mkdir(parents=True)
    for i, step in enumerate((0, 10, 100)):
        torch.manual_seed(i)
        contents = torch.load(save_task_checkpoint(tmp_path / f"s{step}.ckpt", task), weights_only=True)
        contents["global_step"] = step
        torch.save(shippable(contents), run_dir / "checkpoints" / "snapshots" / f"step_{step:08d}.ckpt")
    torch.save(contents, run_dir / "checkpoints" / "best.ckpt")
    best, out = run_dir / "checkpoints" / "best.ckpt", tmp_path / "page.html"
    script.main([f"ckpt_path={best}", f"out={out}"])
    assert "step slider" not in capsys.readouterr().out
    assert page_data(out.read_text())["live"].get("series") is None
    for location, extra in ((best, ["steps=true"]), (run_dir, [])):
        script.main([f"ckpt_path={location}", f"out={out}", *extra])
        assert "a step slider over 3 checkpoints" in capsys.readouterr().out


def test_a_language_models_long_window_is_shown_by_its_first_tokens(script, tmp_path, capsys):
    """The page of a language model's test window longer than PAGE_TOKENS shows its first PAGE_TOKENS
    tokens (relevance costs a backward pass per token), and says so; text= shows any input."""
    from transformer_lab.data import ShakespeareDataModule
    from transformer_lab.explore import PAGE_TOKENS

    task = ShakespeareDataModule(block_size=PAGE_TOKENS + 36)
    checkpoint = save_task_checkpoint(tmp_path / "lm.ckpt", task, arch="decoder", norm_first=True)
    out = tmp_path / "page.html"
    script.main([f"ckpt_path={checkpoint}", f"out={out}"])
    assert f"note: the page shows the first {PAGE_TOKENS} tokens of test example 0" in capsys.readouterr().err
    assert len(page_data(out.read_text())["summary"]["input"]) == PAGE_TOKENS
