"""The live explorer in a real browser (headless Chromium, as test_explorer_browser.py): the page's own
forward pass (model.js) against PyTorch on every architecture and option this package trains and on
every ready-made model (logits to 1e-4 of their scale, attention patterns to 1e-5), its head ablation
against `interventions`, its greedy generation against `generate`, its activation patching against
`interventions.activation_patching`; the input box, removed heads, the URL fragment, the step slider,
titled PNG and SVG downloads, two explorers in one notebook, the Web Worker, and the precomputed
fallback of a model over the budget. A few inputs per model here; the 20-input sweep over every
ready-made model is a bench figure (scripts/bench.py --phases explorer)."""

import math
import re
from pathlib import Path

import pytest
import torch

from tests.conftest import encoder_classifier, gpt_decoder, load_script, save_task_checkpoint
from tests.test_explorer import encoder_decoder, page_data
from transformer_lab import pretrained
from transformer_lab.analysis import interventions
from transformer_lab.checkpoint import load
from transformer_lab.data import ReverseDataModule
from transformer_lab.explorer import Snapshot, explore
from transformer_lab.explorer.live import same_or_tied
from transformer_lab.nn import evaluating
from transformer_lab.training.checkpoint_io import shippable

pytestmark = pytest.mark.browser
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

LOGIT_TOLERANCE = 1e-4  # of the logits' scale (their largest magnitude)
PATTERN_TOLERANCE = 1e-5


class Live:
    """A live page opened from disk: console errors collected, waiting until its model is decoded."""

    def __init__(self, browser, path: Path, init: str | None = None, wait: bool = True):
        self.page = browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        if init:
            self.page.add_init_script(init)
        self.open(path.resolve().as_uri(), wait)

    def open(self, url: str, wait: bool = True) -> None:
        self.page.goto(url)
        if wait:
            self.page.wait_for_selector("body[data-live]", timeout=30_000)

    def api(self, expression: str, *args: object) -> object:
        return self.page.evaluate(f"(args) => {expression}", list(args))

    def type_input(self, text: str) -> None:
        """Type into the box as a student does, and wait for the views to follow."""
        before = self.api("window.transformerLab.updates || 0")
        self.page.fill("#input-box", text)
        self.page.wait_for_function(f"(window.transformerLab.updates || 0) > {before}", timeout=15_000)


@pytest.fixture
def opened(browser):
    made = []

    def open_page(path: Path, init: str | None = None, wait: bool = True) -> Live:
        made.append(Live(browser, path, init, wait))
        return made[-1]

    yield open_page
    for live in made:
        live.page.close()


# ------------------------------------------------------------------------------------- references
def sharpened(model):
    """Larger random weights than the initialisation's, so attention is far from uniform and the
    comparison means something (an untrained model's near-uniform maps agree too easily)."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim > 1:
                p.normal_(0, 0.3)
            else:
                p.normal_(0, 0.1)
    return model.eval()


def reference(model, inputs: tuple[torch.Tensor, ...], heads=(), method="zero", ref=None):
    """PyTorch's logits and patterns for one input (a head set removed as interventions removes it)."""
    layers = interventions.attention_layers(model)
    means = None
    if method == "mean":
        names = {f"{layer}.hook_z" for layer in layers}
        with evaluating(model):
            _, cache = model.run_with_cache(*ref, names_filter=lambda n: n in names)
        means = {name: z.mean(dim=0, keepdim=True) for name, z in cache.items()}
    hooks = interventions.ablation_hooks(list(heads), layers, means) if heads else []
    kept = {}

    def keep(pattern: torch.Tensor, hook) -> None:
        kept[hook.name] = pattern.detach()

    with evaluating(model):
        model.run_with_hooks(*inputs, fwd_hooks=[(f"{layer}.hook_pattern", keep) for layer in layers] + hooks)
        logits = model.run_with_hooks(*inputs, fwd_hooks=hooks)  # as interventions computes them
    patterns = [kept[f"{layer}.hook_pattern"][0] for layer in layers]
    return logits[0], patterns


def page_input(inputs: tuple[torch.Tensor, ...]) -> object:
    """The API's input: token ids, or {source, target}."""
    if len(inputs) == 1:
        return inputs[0][0].tolist()
    return {"source": inputs[0][0].tolist(), "target": inputs[1][0].tolist()}


def compare(live: Live, model, inputs, heads=(), method="zero", ref=None, rows=None) -> None:
    """The page's logits and patterns against PyTorch's, for one input. `rows`: the positions whose
    logits count (real tokens: a padding query that sees only padding is left as the fused kernel
    leaves it in PyTorch)."""
    logits, patterns = reference(model, inputs, heads, method, ref)
    got = live.api(
        "window.transformerLab.forward(args[0], {ablate: args[1], ablation: args[2]})",
        page_input(inputs),
        [list(h) for h in heads],
        method,
    )
    page_logits = torch.tensor(got["logits"])
    keep = rows if rows is not None else slice(None)
    scale = float(logits[keep].abs().max())
    assert float((page_logits[keep] - logits[keep]).abs().max()) <= LOGIT_TOLERANCE * scale
    assert len(got["patterns"]) == len(patterns)
    for page_pattern, pattern in zip(got["patterns"], patterns, strict=True):
        assert float((torch.tensor(page_pattern) - pattern).abs().max()) <= PATTERN_TOLERANCE


# ------------------------------------------------------------------------------ every architecture
ARCHITECTURES = {  # a model of each architecture and option the JavaScript must reproduce
    "encoder": lambda: encoder_classifier(12, num_layers=2, num_heads=4, max_len=12),
    "encoder_prenorm_padded_attention_only": lambda: encoder_classifier(
        12,
        num_layers=2,
        num_heads=2,
        max_len=12,
        pad_id=0,
        norm_first=True,
        mlp=False,
        positional_encoding="learned",
        output_mlp=False,
    ),
    "decoder": lambda: gpt_decoder(12, block_size=12, num_layers=2, num_heads=4),
    "decoder_bare": lambda: gpt_decoder(
        12, block_size=12, mlp=False, bias=False, scale_attention=False, positional_encoding="sinusoidal"
    ),
    "decoder_postnorm_padded": lambda: gpt_decoder(
        12,
        block_size=12,
        norm_first=False,
        output_mlp=True,
        tie_embeddings=False,
        activation="relu",
        positional_encoding="none",
        pad_id=0,
    ),
    "decoder_gpt2": lambda: gpt_decoder(  # GPT-2's choices: learned positions, gelu_new, tied
        12, block_size=12, activation="gelu_new", positional_encoding="learned", tie_embeddings=True
    ),
    # the modern blocks (model.norm, positional_encoding=rotary, gated MLPs, grouped-query attention,
    # parallel residual, local windows, biases per part)
    "decoder_llama": lambda: gpt_decoder(
        12,
        block_size=12,
        num_heads=4,
        num_kv_heads=2,
        norm="rms",
        norm_eps=1e-6,
        mlp_ratio=3,
        positional_encoding="rotary",
        activation="swiglu",
        bias=False,
        tie_embeddings=False,
    ),
    "decoder_neox_padded": lambda: gpt_decoder(
        12,
        block_size=12,
        positional_encoding="rotary",
        rotary_fraction=0.5,
        rotary_base=100.0,
        parallel_residual=True,
        pad_id=0,
        unembed_bias=False,
        tie_embeddings=False,
    ),
    "decoder_neo_local": lambda: gpt_decoder(
        12,
        block_size=12,
        attention_window=3,
        window_layers=[1],
        scale_attention=False,
        qkv_bias=False,
        activation="geglu",
        num_kv_heads=1,
    ),
    "encoder_rotary_local_padded": lambda: encoder_classifier(
        12,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        max_len=12,
        pad_id=0,
        positional_encoding="rotary",
        attention_window=2,
        norm="rms",
    ),
    "encoder_decoder": lambda: encoder_decoder(max_len=12),
    "encoder_decoder_rotary_gqa": lambda: encoder_decoder(
        max_len=12,
        norm_first=True,
        num_kv_heads=1,
        positional_encoding="rotary",
        norm="rms",
        activation="swiglu",
        attention_window=3,
        window_layers=[0],
        output_mlp=False,
    ),
    "encoder_decoder_prenorm_tied": lambda: encoder_decoder(
        max_len=12, norm_first=True, activation="gelu", tie_embeddings=True, output_mlp=False, bias=False
    ),
}


def inputs_for(model, seed: int) -> tuple[torch.Tensor, ...]:
    """A random input: tokens (with padding where the model has a pad id), or source and <bos> target."""
    g = torch.Generator().manual_seed(seed)
    low = 4 if model.config.pad_id is not None else 1
    if model.num_inputs == 2:
        source = torch.randint(4, 12, (1, 3 + seed % 5), generator=g)
        target = torch.cat(
            [torch.tensor([[model.config.bos_id]]), torch.randint(4, 12, (1, 2 + seed % 4), generator=g)], 1
        )
        if seed % 2:  # padding in the source and the target
            source = torch.cat([source, torch.zeros(1, 2, dtype=torch.long)], 1)
            target = torch.cat([target, torch.zeros(1, 1, dtype=torch.long)], 1)
        return source, target
    tokens = torch.randint(low, 12, (1, 5 + seed % 6), generator=g)
    if model.config.pad_id is not None and seed % 2:
        tokens[0, 0] = tokens[0, 3] = model.config.pad_id  # padding-aware positions
    return (tokens,)


@pytest.fixture(scope="module")
def arch_pages(tmp_path_factory) -> dict[str, tuple]:
    folder = tmp_path_factory.mktemp("live_pages")
    pages = {}
    for name, make in ARCHITECTURES.items():
        model = sharpened(make())
        first = inputs_for(model, 0)
        # the batch whose mean z replaces a head in mean ablation: 6 sequences as long as the longest input
        batch = torch.randint(4, 12, (6, 12), generator=torch.Generator().manual_seed(3))
        reference_batch = batch if model.num_inputs == 1 else (batch, batch[:, :8])
        page = explore(model, first, ablation=False, reference=reference_batch)
        assert page.live_note is None
        pages[name] = (model, folder / f"{name}.html", reference_batch)
        page.save(pages[name][1])
    return pages


def real_rows(model, inputs) -> torch.Tensor | None:
    if model.config.pad_id is None:
        return None
    return inputs[-1][0] != model.config.pad_id


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_forward_pass_equals_pytorch(arch_pages, opened, name):
    model, path, reference_batch = arch_pages[name]
    live = opened(path)
    assert live.api("window.transformerLab.check.relative") <= LOGIT_TOLERANCE
    assert live.api("window.transformerLab.vocab") == model.vocab
    layers = len(interventions.attention_layers(model))
    ref = reference_batch if isinstance(reference_batch, tuple) else (reference_batch,)
    for seed in (1, 2, 3):
        inputs = inputs_for(model, seed)
        rows = real_rows(model, inputs)
        compare(live, model, inputs, rows=rows)
        compare(live, model, inputs, heads=[(0, 1)], rows=rows)  # zero ablation of a head
        if inputs[-1].size(1) <= reference_batch_len(ref):
            compare(live, model, inputs, heads=[(layers - 1, 0), (0, 0)], method="mean", ref=ref, rows=rows)
    assert live.errors == []


def reference_batch_len(ref: tuple[torch.Tensor, ...]) -> int:
    return min(x.size(1) for x in ref)


@pytest.mark.parametrize("name", [n for n in ARCHITECTURES if "decoder" in n])
def test_greedy_generation_equals_pytorch(arch_pages, opened, name):
    """Greedy decoding with the page's KV cache writes what `generate` writes: a language model past
    its context (the cache re-encodes the last half window), an encoder-decoder up to <eos>."""
    model, path, _ = arch_pages[name]
    live = opened(path)
    if model.num_inputs == 2:
        source = torch.tensor([[5, 6, 7, 8, 9]])
        expected = model.generate(source)[0].tolist()
        assert live.api("window.transformerLab.generate({source: args[0]})", source[0].tolist()) == expected
    else:
        prompt = torch.tensor([[3, 5, 7, 2, 9]])
        new = 4 if model.config.pad_id is not None else 16  # padding: generation stops at max_len
        expected = model.generate(prompt, new, temperature=0)[0].tolist()
        got = live.api(
            "window.transformerLab.generate(args[0], {maxNewTokens: args[1]})", prompt[0].tolist(), new
        )
        assert got == expected
    assert live.errors == []


def test_erf_is_good_to_1e_9(arch_pages, opened):
    live = opened(arch_pages["decoder"][1])
    xs = [i / 97 - 7 for i in range(1400)]
    values = live.api("args[0].map((x) => TransformerLabModel.erf(x))", xs)
    assert max(abs(v - math.erf(x)) for x, v in zip(xs, values, strict=True)) < 1e-9


@pytest.mark.parametrize("name", ["encoder", "decoder", "encoder_decoder"])
def test_activation_patching_equals_interventions(arch_pages, opened, name):
    """The page's patching of every residual position and head equals `activation_patching` on the
    same clean / corrupted pair and answers."""
    model, path, _ = arch_pages[name]
    live = opened(path)
    clean = inputs_for(model, 2)
    corrupted = tuple(x.clone() for x in clean)
    corrupted[0][0, 1] = 4 + (int(corrupted[0][0, 1]) - 3) % 8  # another symbol at source position 1
    width = clean[-1].size(1)
    position = width - 1
    with evaluating(model):
        clean_top = model(*clean)[0, position].argmax().item()
        bad_logits = model(*corrupted)[0, position]
    bad_logits[clean_top] = -1e9
    bad_top = bad_logits.argmax().item()
    clean_labels = torch.full((1, width), -100)
    bad_labels = clean_labels.clone()
    clean_labels[0, position], bad_labels[0, position] = clean_top, bad_top
    expected = interventions.activation_patching(model, (clean, clean_labels), (corrupted, bad_labels))
    answer = {"position": position, "cleanAnswer": clean_top, "corruptedAnswer": bad_top}
    got = live.api(
        "window.transformerLab.patching(args[0], args[1], args[2])",
        page_input(clean),
        page_input(corrupted),
        answer,
    )
    assert got["clean"] == pytest.approx(expected.clean, abs=1e-4)
    assert got["corrupted"] == pytest.approx(expected.corrupted, abs=1e-4)
    assert set(got["resid"]) == set(expected.resid)
    # shares of a logit difference: float32 noise divided by (LD_clean - LD_corrupted), so relative too
    for hook, row in expected.resid.items():
        assert got["resid"][hook] == pytest.approx(row, rel=1e-3, abs=1e-3)
    flat = [v for row in got["heads"] for v in row]
    assert flat == pytest.approx([v for row in expected.heads for v in row], rel=1e-3, abs=1e-3)
    assert live.errors == []


# ---------------------------------------------------------------------------- the ready-made models
@pytest.fixture(scope="module")
def pretrained_pages(tmp_path_factory) -> dict[str, tuple]:
    folder = tmp_path_factory.mktemp("pretrained_pages")
    pages = {}
    for name in pretrained.names():
        checkpoint = load(f"pretrained:{name}")
        inputs, labels = checkpoint.without_padding(*checkpoint.example(0))
        page = explore(checkpoint, inputs, labels, title=name, ablation=False)
        assert page.live_note is None, page.live_note
        weights = page_data(page)["live"]["chars"]  # the budgets: < 5 MB precomputed, <= 20 MB weights
        assert len(page.encode()) - weights < 5_000_000 and weights <= 20_000_000
        path = folder / f"{name}.html"
        page.save(path)
        pages[name] = (checkpoint, path)
    return pages


@pytest.mark.parametrize("name", pretrained.names())
def test_every_pretrained_model_runs_in_its_page(pretrained_pages, opened, name):
    """Three test examples per ready-made model: logits and patterns as PyTorch's; a model that writes
    its output writes the same greedy output in the page."""
    checkpoint, path = pretrained_pages[name]
    model = checkpoint.model
    live = opened(path)
    assert live.api("window.transformerLab.check.relative") <= LOGIT_TOLERANCE
    for index in (1, 2, 3):
        inputs, _ = checkpoint.without_padding(*checkpoint.example(index))
        compare(live, model, inputs)
    if model.generates:
        inputs, _ = checkpoint.without_padding(*checkpoint.example(4))
        source = inputs[0] if model.num_inputs == 2 else None
        if source is not None:
            expected = model.answer(source)[0].tolist()
            got = live.api("window.transformerLab.answer(args[0])", source[0].tolist())
        else:
            prompt = inputs[0][:, : min(8, inputs[0].size(1))]
            expected = model.generate(prompt, 24, temperature=0)[0].tolist()
            got = live.api("window.transformerLab.generate(args[0], {maxNewTokens: 24})", prompt[0].tolist())
        assert same_or_tied(model, expected, got, source)
    assert live.errors == []


@pytest.mark.parametrize("name", ["shakespeare", "reverse_2l4h"])
def test_first_view_is_the_last_layer_and_its_sharpest_query(pretrained_pages, opened, name):
    """The page opens on the last layer and on the query whose attention there is sharpest (the largest
    mean over heads of 1 - entropy / log(keys it can see)), not on query 0, which a causal model's can
    only see itself."""
    from transformer_lab.explorer.pack import unpack

    checkpoint, path = pretrained_pages[name]
    kind = page_data(path.read_text())["kinds"][0]
    maps = torch.tensor(unpack(kind["maps"]))[-1]  # the last layer stored: [heads, queries, keys]
    causal = checkpoint.model.generates
    entropy = -(maps * maps.clamp_min(1e-30).log()).sum(-1).mean(0)  # [queries]
    visible = torch.arange(1, maps.size(1) + 1) if causal else torch.full((maps.size(1),), maps.size(2))
    sharpness = 1 - entropy / visible.clamp_min(2).log()
    sharpness[visible < 2] = -1
    live = opened(path)
    assert live.page.input_value("#layer-select") == str(checkpoint.config.num_layers - 1)
    highlighted = "g => g.firstChild.getAttribute('fill') === '#fff3b0'"  # the selected query's box
    selected = live.page.eval_on_selector_all(".hv-token.query", f"gs => gs.findIndex({highlighted})")
    assert selected == int(sharpness.argmax()) and selected > 0
    assert f"query={selected}" in live.page.evaluate("window.location.hash")
    assert live.errors == []


# ------------------------------------------------------------------------------- the student's page
@pytest.fixture(scope="module")
def reverse_page(pretrained_pages) -> tuple:
    return pretrained_pages["reverse_2l4h"]


def top_predictions(live: Live) -> list[tuple[str, float]]:
    rows = live.page.eval_on_selector_all("tr.prediction", "rows => rows.map(r => r.children[2].innerText)")
    out = []
    for text in rows:
        token, _, prob = text.replace("\n", " ").strip().rpartition(" ")
        out.append((token.strip(), prob))
    return out


def test_editing_the_input_updates_the_predictions(reverse_page, opened):
    """Typing a new input in the box: the predictions table is PyTorch's for the new input, the head
    view follows, and nothing is logged as an error."""
    checkpoint, path = reverse_page
    live = opened(path)
    text = "9 8 7 6 5 4 3 2 1 0 1 2 3 4 5 6"
    live.type_input(text)
    live.page.click(".tab[data-view='predictions']")
    tokens = checkpoint.encode(text)[None]
    with evaluating(checkpoint.model):
        probs = checkpoint.model(tokens)[0].softmax(-1)
    shown = top_predictions(live)
    assert [token for token, _ in shown] == [checkpoint.model.vocab[i] for i in probs.argmax(-1).tolist()]
    page_rows = live.api("window.transformerLab.forward(args[0]).logits", tokens[0].tolist())
    assert torch.tensor(page_rows).softmax(-1).max(-1).values == pytest.approx(probs.max(-1).values, abs=1e-5)
    assert live.page.inner_text("#io").splitlines()[0].split(maxsplit=1)[1] == text
    marks = live.api("[...document.querySelectorAll('.prediction .mark-right')].length")
    assert marks == 16  # the reverse task's expected output, known for an edited input too
    live.page.click(".tab[data-view='head']")
    assert live.page.locator(".hv-token.query").count() == 16
    assert (
        live.api("window.transformerLab.lastUpdateMs") > 0 and live.api("window.transformerLab.forwardMs") > 0
    )
    assert live.errors == []


def test_unknown_tokens_and_long_inputs_are_named_not_dropped(reverse_page, opened):
    _, path = reverse_page
    live = opened(path)
    updates = live.api("window.transformerLab.updates")
    live.page.fill("#input-box", "3 1 x 4 yy")
    live.page.wait_for_function("document.getElementById('input-message').classList.contains('bad')")
    message = live.page.inner_text("#input-message")
    assert '"x"' in message and '"yy"' in message and "not in the model's vocabulary" in message
    assert live.page.locator("#input-backdrop mark").all_inner_texts() == ["x", "yy"]
    assert live.page.get_attribute("#input-box", "aria-invalid") == "true"
    long_text = " ".join(["1"] * 20)
    live.page.fill("#input-box", long_text)
    live.page.wait_for_function("document.getElementById('input-message').innerText.includes('more than')")
    assert "20 tokens, more than the 16" in live.page.inner_text("#input-message")
    assert live.page.input_value("#input-box") == long_text  # nothing cut
    assert live.api("window.transformerLab.updates") == updates  # the views keep the last good input
    assert live.errors == []


def test_removing_a_head_updates_the_views_and_the_url_restores_them(reverse_page, opened):
    """Clicking heads removes them (the predictions become interventions' own); the URL fragment keeps
    input, view, layer and removed heads, and a reload shows the same."""
    checkpoint, path = reverse_page
    live = opened(path)
    text = "1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6"
    live.type_input(text)
    before = live.api("window.transformerLab.updates")
    live.page.click(".head-toggle[data-layer='0'][data-head='3']")
    live.page.wait_for_function(f"window.transformerLab.updates > {before}")
    live.page.select_option("#layer-select", "0")
    live.page.click(".tab[data-view='model']")
    fragment = live.page.evaluate("window.location.hash")
    assert "off=L0H3" in fragment and "view=model" in fragment and "layer=0" in fragment
    tokens = checkpoint.encode(text)[None]
    logits, _ = reference(checkpoint.model, (tokens,), heads=[(0, 3)])
    page_top = live.api(
        "window.transformerLab.forward(args[0], {ablate: [[0, 3]]}).logits", tokens[0].tolist()
    )
    assert torch.tensor(page_top).argmax(-1).tolist() == logits.argmax(-1).tolist()
    assert live.page.locator(".model-grid .heatmap.removed").count() == 1
    url = live.page.url
    live.page.goto("about:blank")  # a fresh load of the bookmarked URL, not only a change of its fragment
    live.open(url)
    live.page.wait_for_function("(window.transformerLab.updates || 0) > 0")
    assert live.page.input_value("#input-box") == text
    assert live.page.get_attribute(".head-toggle[data-layer='0'][data-head='3']", "aria-pressed") == "true"
    assert (
        live.page.is_visible("#view-model") and live.page.locator(".model-grid .heatmap.removed").count() == 1
    )
    live.page.click(".tab[data-view='head']")  # the head view shows the fragment's layer
    assert live.page.input_value("#layer-select") == "0"
    assert live.errors == []


def test_recomputed_ablation_table_equals_python(reverse_page, opened):
    from transformer_lab.explorer import explorer_data

    checkpoint, path = reverse_page
    live = opened(path)
    text = "5 5 1 2 9 9 0 3 4 8 7 6 1 1 2 2"
    live.type_input(text)
    live.page.click(".tab[data-view='ablation']")
    live.page.click("#ablation-recompute")
    live.page.wait_for_selector(".ablation-cell")
    live.page.wait_for_function("!document.getElementById('ablation-recompute').disabled")
    cells = live.page.eval_on_selector_all(".ablation-cell", "cs => cs.map(c => Number(c.innerText))")
    inputs, labels = checkpoint.text_example(text)
    expected = explorer_data(checkpoint.model, inputs, labels).ablation.drops
    assert cells == pytest.approx([v for row in expected for v in row], abs=2e-3)  # shown to 3 decimals
    assert live.errors == []


def test_patching_view_of_a_clicked_token(reverse_page, opened):
    """Clicking a token corrupts it; the view's numbers are activation_patching's for that pair."""
    checkpoint, path = reverse_page
    live = opened(path)
    text = "1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6"
    live.type_input(text)
    live.page.click(".tab[data-view='patching']")
    live.page.click(".patch-token[data-index='2']")
    live.page.wait_for_function("window.transformerLab.patch && window.transformerLab.patch.result")
    patch = live.api("window.transformerLab.patch")
    assert patch["to"] == "4" and patch["answer"]["position"] == 13  # the mirror of position 2
    clean = checkpoint.encode(text)[None]
    corrupted = torch.tensor([patch["corrupted"][0]])
    width = clean.size(1)
    labels = [torch.full((1, width), -100) for _ in range(2)]
    labels[0][0, 13], labels[1][0, 13] = patch["answer"]["cleanAnswer"], patch["answer"]["corruptedAnswer"]
    expected = interventions.activation_patching(
        checkpoint.model, ((clean,), labels[0]), ((corrupted,), labels[1])
    )
    for hook, row in expected.resid.items():
        assert patch["result"]["resid"][hook] == pytest.approx(row, abs=1e-3)
    assert live.page.locator("#patch-panels canvas").count() == 2  # the residual stream and the heads
    assert live.errors == []


def test_saved_figures_carry_a_title(reverse_page, opened, tmp_path):
    _, path = reverse_page
    live = opened(path)
    live.type_input("4 4 4 1 2 3 4 5 6 7 8 9 0 1 2 3")
    for view in ("head", "model", "predictions"):
        live.page.click(f".tab[data-view='{view}']")
        with live.page.expect_download() as download:
            live.page.click("#save-svg")
        assert download.value.suggested_filename == f"attention-{view}-view.svg"
        saved = tmp_path / f"{view}.svg"
        download.value.save_as(saved)
        text = saved.read_text()
        assert text.startswith("<?xml") and "reverse_2l4h (encoder" in text
        assert "input: 4 4 4 1 2 3 4 5 6 7 8 9 0 1 2 3" in text
        if view == "head":
            assert "<line" in text and "attn-line" in text  # the head view stays a vector drawing
        with live.page.expect_download() as download:
            live.page.click("#save-png")
        assert live.api("window.explorerLastPng.title")[1] == "input: 4 4 4 1 2 3 4 5 6 7 8 9 0 1 2 3"
    assert live.errors == []


def test_language_model_generates_into_the_box(pretrained_pages, opened):
    checkpoint, path = pretrained_pages["shakespeare"]
    live = opened(path)
    live.type_input("ROMEO:")
    live.page.fill("#gen-temperature", "0")
    live.page.fill("#gen-count", "12")
    before = live.api("window.transformerLab.updates")
    live.page.click("#generate")
    live.page.wait_for_function(f"window.transformerLab.updates > {before}")
    prompt = checkpoint.encode("ROMEO:")[None]
    expected = checkpoint.decode(checkpoint.model.generate(prompt, 12, temperature=0)[0])
    assert live.page.input_value("#input-box") == expected
    assert live.errors == []


# --------------------------------------------------------------------- snapshots, notebooks, budget
def test_step_slider_over_a_runs_snapshots(tmp_path, opened, capsys):
    """A run directory with snapshots: `explore ckpt_path=<run>` writes a slider; each step's page model
    is that snapshot's."""
    task = ReverseDataModule(
        "encoder", seq_len=6, min_seq_len=3, train_size=16, val_size=16, test_size=16, batch_size=16
    )
    run = tmp_path / "run"
    (run / "checkpoints" / "snapshots").mkdir(parents=True)
    models = {}
    for i, step in enumerate((0, 10, 100)):
        torch.manual_seed(i)
        file = save_task_checkpoint(tmp_path / f"s{step}.ckpt", task, arch="encoder")
        contents = torch.load(file, weights_only=True)
        contents["global_step"] = step
        torch.save(shippable(contents), run / "checkpoints" / "snapshots" / f"step_{step:08d}.ckpt")
        if step == 100:
            torch.save(contents, run / "checkpoints" / "best.ckpt")
        models[step] = load(run / "checkpoints" / "snapshots" / f"step_{step:08d}.ckpt").model
    out = tmp_path / "slider.html"
    load_script("explore").main([f"ckpt_path={run}", "source=1 2 3 4", f"out={out}"])
    assert "a step slider over 3 checkpoints" in capsys.readouterr().out
    live = opened(out)
    assert live.api("window.transformerLab.steps") == [0, 10, 100]
    assert live.page.is_visible("#step-slider")
    tokens = live.api("window.transformerLab.inputs")[0]
    for index, step in enumerate((0, 10, 100)):
        live.api("window.transformerLab.setStep(args[0])", index)
        with evaluating(models[step]):
            expected = models[step](torch.tensor([tokens]))[0]
        got = torch.tensor(live.api("window.transformerLab.forward(args[0]).logits", tokens))
        assert float((got - expected).abs().max()) <= LOGIT_TOLERANCE * float(expected.abs().max())
    assert "step=10" not in live.page.evaluate("window.location.hash")  # the last step is the default
    live.api("window.transformerLab.setStep(1)")
    assert "step=10" in live.page.evaluate("window.location.hash")
    assert live.errors == []


@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_a_source_in_the_box_is_answered_as_python_answers_it(tmp_path, opened, capsys, arch):
    """A sequence-to-sequence model's box holds the source: the page writes the output greedily and
    shows the model reading it (decoder-only: source <sep> output; encoder-decoder: source and <bos>
    output), as the Python side explains a source; special tokens in a source are refused."""
    task = ReverseDataModule(
        arch, seq_len=6, min_seq_len=3, train_size=16, val_size=16, test_size=16, batch_size=16
    )
    torch.manual_seed(0)
    path = save_task_checkpoint(tmp_path / "model.ckpt", task, arch=arch)
    out = tmp_path / "page.html"
    load_script("explore").main([f"ckpt_path={path}", "source=1 2 3 4", f"out={out}"])
    capsys.readouterr()
    checkpoint = load(path)
    model = checkpoint.model
    live = opened(out)
    live.type_input("5 3 8")
    source = checkpoint.encode("5 3 8")[None]
    prompt = model.prompt(source)
    expected = model.forced_inputs(prompt, model.answer(prompt))
    assert live.api("window.transformerLab.inputs") == [x[0].tolist() for x in expected]
    compare(live, model, expected)
    live.page.fill("#input-box", "5 <sep> 8")
    live.page.wait_for_function("document.getElementById('input-message').innerText.includes('<sep>')")
    assert "the source holds <sep>" in live.page.inner_text("#input-message")
    assert live.errors == []


def test_two_explorers_in_one_notebook_do_not_interfere(arch_pages, opened, tmp_path):
    """Jupyter shows each page in its own iframe: each has its own `transformerLab`, and typing in one
    leaves the other as it was."""
    first = explore(arch_pages["encoder"][0], [4, 5, 6, 7], ablation=False)
    second = explore(arch_pages["decoder"][0], [3, 4, 5], ablation=False)
    notebook = tmp_path / "notebook.html"
    notebook.write_text(
        f"<!DOCTYPE html><html><body>{first._repr_html_()}{second._repr_html_()}</body></html>"
    )
    page = opened(notebook, wait=False)
    page.page.wait_for_function("document.querySelectorAll('iframe').length === 2")
    frames = [f for f in page.page.frames if f != page.page.main_frame]
    assert len(frames) == 2
    for frame in frames:
        frame.wait_for_selector("body[data-live='true']", timeout=30_000)
    encoder, decoder = frames
    assert encoder.evaluate("window.transformerLab.config.arch") == "encoder"
    assert decoder.evaluate("window.transformerLab.config.arch") == "decoder"
    updates = decoder.evaluate("window.transformerLab.updates")
    encoder.fill("#input-box", "4 4 5")
    encoder.wait_for_function("window.transformerLab.inputs[0].length === 3")
    assert decoder.evaluate("window.transformerLab.updates") == updates
    assert decoder.input_value("#input-box") == "3 4 5"
    assert page.errors == []


def test_model_over_the_budget_falls_back_with_a_note(arch_pages, opened, tmp_path):
    model = arch_pages["encoder"][0]
    page = explore(model, [4, 5, 6, 7], weight_budget=1000)
    assert re.search(r"weights take \d+\.\d MB in the page, more than", page.live_note)
    assert page_data(page)["live"] is None
    path = tmp_path / "fallback.html"
    page.save(path)
    live = opened(path)
    assert live.page.evaluate("document.body.dataset.live") == "none"
    assert "the model is not in the page, because its weights take" in live.page.inner_text("#live-status")
    assert live.page.evaluate("typeof window.transformerLab") == "undefined"
    assert live.page.is_hidden("#live-input") and live.page.is_hidden("#patching-tab")
    assert live.errors == []


def test_web_worker_runs_the_views(reverse_page, opened):
    """Large models run the views' passes in a Web Worker (forced here on a small one): the same numbers."""
    checkpoint, path = reverse_page
    live = opened(path, init="window.transformerLabOptions = {worker: true}")
    assert live.api("window.transformerLab.worker") is True
    text = "2 7 1 8 2 8 1 8 2 8 4 5 9 0 4 5"
    live.type_input(text)
    live.page.click(".tab[data-view='predictions']")
    tokens = checkpoint.encode(text)[None]
    with evaluating(checkpoint.model):
        expected = checkpoint.model(tokens)[0].argmax(-1).tolist()
    assert [t for t, _ in top_predictions(live)] == [checkpoint.model.vocab[i] for i in expected]
    assert live.errors == []


def test_maps_over_the_budget_store_the_last_layer_and_the_page_computes_the_rest(
    arch_pages, opened, tmp_path, monkeypatch
):
    """A live page whose maps do not fit stores each kind's last layer (its first view); once its model
    runs, every layer is there, computed in the page."""
    model = arch_pages["encoder_decoder"][0]
    monkeypatch.setattr("transformer_lab.explorer.page.ATTENTION_BUDGET", 300)
    page = explore(model, [[5, 6, 7, 8, 9, 4, 5]], ablation=False)
    kinds = page_data(page)["kinds"]
    assert [k["first"] for k in kinds] == [1, 1, 1] and all(k["maps"]["shape"][0] == 1 for k in kinds)
    assert all(k["first"] == 0 for k in page_data(explore(model, [[5, 6, 7]], live=False))["kinds"])
    path = tmp_path / "partial.html"
    page.save(path)
    live = opened(path)
    live.page.click(".tab[data-view='model']")
    assert live.page.locator(".model-grid .heatmap").count() == 2 * 2  # 2 layers x 2 heads, computed
    assert live.page.eval_on_selector_all("#layer-select option", "os => os.map(o => o.value)") == ["0", "1"]
    assert live.errors == []


def test_float16_page_runs_the_rounded_model(arch_pages, opened, tmp_path):
    """weights=float16 (opt-in): the page is exact for the model with the same rounded weights."""
    from transformer_lab.explorer.live import rounded_model

    model = arch_pages["decoder"][0]
    path = tmp_path / "half.html"
    explore(model, [3, 4, 5, 6], ablation=False, weights="float16").save(path)
    live = opened(path)
    inputs = inputs_for(model, 2)
    compare(live, rounded_model(model, "float16"), inputs)
    assert "as float16" in live.page.inner_text("#live-status")
    assert live.errors == []


def test_snapshot_thinning_keeps_the_opened_model(arch_pages):
    from transformer_lab.explorer.live import live_model

    model = arch_pages["encoder"][0]
    series = [
        Snapshot(step, f"step {step}", model if step == 30 else ARCHITECTURES["encoder"]())
        for step in (0, 10, 20, 30)
    ]
    one = live_model(model, (torch.tensor([[4, 5, 6]]),)).chars
    page = explore(model, [4, 5, 6], ablation=False, snapshots=series, weight_budget=int(2.5 * one))
    data = page_data(page)["live"]
    assert 30 in data["series"]["steps"] and len(data["series"]["steps"]) < 4
    assert data["series"]["steps"][data["series"]["current"]] == 30
    assert any("snapshots fit" in note for note in data["notes"])
