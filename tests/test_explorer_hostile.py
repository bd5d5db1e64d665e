"""The explorer page against a hostile URL fragment and hostile calls to its API (headless Chromium, as
test_explorer_browser.py). Every fragment field with a value of the wrong type, out of range, or the
name of a prototype property (`constructor`, `__proto__`, ...): the page still becomes ready, shows
the default, and says in a notice which field and value it ignored and what is allowed. Every function
of `window.transformerLab` with a bad argument: an Error whose message names the function, the
argument, its value and what is allowed; with a good one, the call still works. On a decoder page
(with means and two snapshots), an encoder page and an encoder-decoder page, where the inputs differ
(token lists against {source, target}). The pages are tiny untrained models; one browser, and one tab
per page, for the whole module."""

import json
import re
from pathlib import Path
from urllib.parse import quote

import pytest
import torch

from tests.conftest import ROOT, encoder_classifier, gpt_decoder
from tests.test_explorer import encoder_decoder, page_data
from transformer_lab.explorer import Snapshot, explore

pytestmark = pytest.mark.browser
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

DECODER_TEXT = "2 5 7 7 1 3"  # the decoder page's input: 6 query positions
NO_VIEW = ["head", "model", "overlays", "ablation", "patching", "predictions"]


# ------------------------------------------------------------------------------------------ pages
def _without_means(html: str) -> str:
    """The same page carrying no means (as a page whose reference batch was not given would)."""
    data = page_data(html)
    data["live"]["means"] = None
    if data["live"]["series"]:
        data["live"]["series"]["means"] = [None] * len(data["live"]["series"]["means"])
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    pattern = r'(<script type="application/json" id="explorer-data">).*?(</script>)'
    return re.sub(pattern, lambda m: m.group(1) + text + m.group(2), html, count=1, flags=re.S)


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    """decoder: 2 layers x 2 heads, vocabulary 0-11, max_len 16, means, snapshots at steps 0 and 10
    (it opens on 10); encoder: 1 layer x 2 heads, vocabulary 0-9, max_len 12, no snapshots;
    encoder_decoder: E/D/X layers x 2 heads, max_len 10, its box holds a source; precomputed: the
    decoder without its model; no_means: the decoder without means."""
    folder = tmp_path_factory.mktemp("hostile_pages")
    torch.manual_seed(0)
    decoder = gpt_decoder(12, num_layers=2, num_heads=2)
    earlier = gpt_decoder(12, num_layers=2, num_heads=2)
    series = [Snapshot(0, "step 0", earlier), Snapshot(10, "step 10", decoder)]
    tokens = [int(t) for t in DECODER_TEXT.split()]
    html = {
        "decoder": explore(decoder, tokens, ablation=False, snapshots=series),
        "encoder": explore(
            encoder_classifier(10, num_layers=1, num_heads=2, max_len=12), [3, 1, 4, 1, 5], ablation=False
        ),
        "encoder_decoder": explore(encoder_decoder(), [5, 6, 7, 8, 9], ablation=False),
        "precomputed": explore(decoder, tokens, ablation=False, live=False),
    }
    html["no_means"] = _without_means(html["decoder"])
    paths = {}
    for name, text in html.items():
        paths[name] = folder / f"{name}.html"
        paths[name].write_text(text, encoding="utf-8")
    return paths


class Tab:
    """One browser tab, reused: open() loads a page afresh (from about:blank, so a new fragment is a
    new document, not a hash change) and collects its errors."""

    def __init__(self, browser):
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, path: Path, fragment: str = "") -> "Tab":
        self.errors.clear()
        self.page.goto("about:blank")
        self.page.goto(path.resolve().as_uri() + (f"#{fragment}" if fragment else ""))
        self.page.wait_for_selector("body[data-ready='true']", timeout=15_000)
        self.page.wait_for_selector("body[data-live]", timeout=15_000)  # the live part has run too
        return self

    def js(self, expression: str, *args: object) -> object:
        return self.page.evaluate(f"(args) => {expression}", list(args))

    def notices(self) -> dict[str, str]:
        """The fragment notices, by field."""
        return dict(
            self.page.eval_on_selector_all(
                "#fragment-notice p[data-field]", "ps => ps.map(p => [p.dataset.field, p.innerText])"
            )
        )

    def shown_views(self) -> list[str]:
        return self.js(
            "[...document.querySelectorAll('.view')].filter(v => !v.hidden).map(v => v.dataset.view)"
        )

    def selected_query(self) -> int:
        highlighted = "g => g.firstChild.getAttribute('fill') === '#fff3b0'"
        return self.page.eval_on_selector_all(".hv-token.query", f"gs => gs.findIndex({highlighted})")

    def fragment(self) -> str:
        return self.js("window.location.hash")


@pytest.fixture(scope="module")
def tab(browser):
    """The tab the fragment tests load their pages in."""
    opened = Tab(browser)
    yield opened
    opened.page.close()


@pytest.fixture(scope="module")
def defaults(tab, pages) -> dict[str, dict]:
    """What each page shows with no fragment: the query it opens on, its layer, its kind."""
    out = {}
    for name in ("decoder", "encoder_decoder"):
        tab.open(pages[name])
        out[name] = {
            "query": tab.selected_query(),
            "layer": tab.page.input_value("#layer-select"),
            "kind": tab.page.input_value("#kind-select"),
        }
        assert tab.notices() == {} and tab.errors == []
    return out


# -------------------------------------------------------------------------------- URL fragment
def _expect_defaults(tab: Tab, default: dict, fields: set[str]) -> None:
    """The page shows its default for every ignored field."""
    assert tab.js("document.body.dataset.ready") == "true"
    if "view" in fields:
        assert tab.shown_views() == ["head"]
    if "layer" in fields:
        assert tab.page.input_value("#layer-select") == default["layer"]
    if "query" in fields:
        assert tab.selected_query() == default["query"]
    if "kind" in fields:
        assert tab.page.input_value("#kind-select") == default["kind"]
    if "input" in fields:
        assert tab.page.input_value("#input-box") == DECODER_TEXT
    if "off" in fields:
        assert tab.page.locator(".head-toggle[aria-pressed='true']").count() == 0
    if "ablation" in fields:
        assert tab.page.input_value("#ablation-method") == "zero"
    if "step" in fields:
        assert tab.js("window.transformerLab.step") == 1 and tab.page.input_value("#step-slider") == "1"


# (field, value, what the notice says is allowed): per kind of bad value, on the decoder page
DECODER_CASES = {
    "wrong_type": [
        ("view", "3", "use head, model, overlays, ablation, patching, predictions"),
        ("layer", "0.5", "use an integer from 0 to 1"),
        ("query", "0.5", "use an integer from 0 to 5 (a query position)"),
        ("off", "3", "use head labels such as L0H0 (layers L0, L1; heads H0 to H1)"),
        ("ablation", "1", "use zero or mean"),
        ("step", "ten", "use one of the steps 0, 10"),
    ],
    "out_of_range": [
        ("view", "heads", "use head, model, overlays, ablation, patching, predictions"),
        ("layer", "2", "use an integer from 0 to 1"),
        ("query", "-1", "use an integer from 0 to 5 (a query position)"),
        ("off", "L0H2,L2H0", "use head labels such as L0H0"),
        ("ablation", "max", "use zero or mean"),
        ("step", "5", "use one of the steps 0, 10"),
    ],
    "prototype_name": [
        ("view", "constructor", "use head, model, overlays, ablation, patching, predictions"),
        ("layer", "constructor", "use an integer from 0 to 1"),
        ("query", "__proto__", "use an integer from 0 to 5 (a query position)"),
        ("off", "hasOwnProperty", "use head labels such as L0H0"),
        ("ablation", "toString", "use zero or mean"),
        ("step", "valueOf", "use one of the steps 0, 10"),
    ],
}


@pytest.mark.parametrize("variant", list(DECODER_CASES))
def test_bad_fragment_fields_fall_back_with_a_notice(tab, pages, defaults, variant):
    """Every field bad at once (of one kind): ready, each default shown, one notice per field naming
    field, value and what is allowed; the URL is rewritten without the ignored values."""
    cases = DECODER_CASES[variant]
    fragment = "&".join(f"{field}={quote(value)}" for field, value, _ in cases)
    tab.open(pages["decoder"], fragment)
    notices = tab.notices()
    assert set(notices) == {field for field, _, _ in cases}
    for field, value, allowed in cases:
        assert notices[field].startswith(f"URL fragment: {field}={value} is ignored; "), notices[field]
        assert allowed in notices[field]
    _expect_defaults(tab, defaults["decoder"], set(notices))
    assert tab.page.is_visible("#fragment-notice")
    for field, value, _ in cases:
        assert f"{field}={quote(value)}" not in tab.fragment()
    assert tab.errors == []


@pytest.mark.parametrize(
    ("fragment", "notice"),
    [  # the hostile tester's cases, word for word
        ("query=-1", "URL fragment: query=-1 is ignored; use an integer from 0 to 5 (a query position)."),
        ("query=0.5", "URL fragment: query=0.5 is ignored; use an integer from 0 to 5 (a query position)."),
        ("query=6", "URL fragment: query=6 is ignored; use an integer from 0 to 5 (a query position)."),
        ("query=1e1", "URL fragment: query=1e1 is ignored; use an integer from 0 to 5 (a query position)."),
        ("query=", 'URL fragment: query="" is ignored; use an integer from 0 to 5 (a query position).'),
        (
            "view=constructor",
            "URL fragment: view=constructor is ignored; use head, model, overlays, ablation, patching, "
            "predictions.",
        ),
        (
            "view=__proto__",
            "URL fragment: view=__proto__ is ignored; use head, model, overlays, ablation, patching, "
            "predictions.",
        ),
        (
            "view=hasOwnProperty",
            "URL fragment: view=hasOwnProperty is ignored; use head, model, overlays, ablation, patching, "
            "predictions.",
        ),
        ("layer=-1", "URL fragment: layer=-1 is ignored; use an integer from 0 to 1."),
        ("layer=%201", 'URL fragment: layer=" 1" is ignored; use an integer from 0 to 1.'),
        ("ablation=MEAN", "URL fragment: ablation=MEAN is ignored; use zero or mean."),
        ("step=10.0", "URL fragment: step=10.0 is ignored; use one of the steps 0, 10."),
        ("step=-1", "URL fragment: step=-1 is ignored; use one of the steps 0, 10."),
        (
            "off=L0H1,bogus",
            "URL fragment: off=bogus is ignored; use head labels such as L0H0 (layers L0, L1; heads H0 to "
            "H1).",
        ),
        (
            "colour=red",
            "URL fragment: colour=red is ignored; the fragment's fields are view, kind, layer, query, "
            "input, off, ablation, step.",
        ),
        (
            "__proto__=1",
            "URL fragment: __proto__=1 is ignored; the fragment's fields are view, kind, layer, query, "
            "input, off, ablation, step.",
        ),
        ("kind=constructor", "URL fragment: kind=constructor is ignored; use self."),
    ],
)
def test_one_bad_field_names_itself(tab, pages, defaults, fragment, notice):
    tab.open(pages["decoder"], fragment)
    field = fragment.partition("=")[0]
    assert tab.notices() == {field: notice}
    if field != "off":
        _expect_defaults(tab, defaults["decoder"], {field})
    else:  # the list's good label is kept
        assert tab.page.get_attribute(".head-toggle[data-layer='0'][data-head='1']", "aria-pressed") == "true"
        assert tab.page.locator(".head-toggle[aria-pressed='true']").count() == 1
    assert tab.errors == []


def test_input_over_the_bound_is_ignored_and_junk_is_named_by_the_box(tab, pages, defaults):
    long = " ".join(["1"] * 50_001)  # 100,001 characters
    tab.open(pages["decoder"], f"input={quote(long)}&query=3")
    notices = tab.notices()
    assert notices["input"].endswith("is ignored; it has 100001 characters; use at most 100000.")
    assert notices["input"].startswith('URL fragment: input="1 1 1')
    assert tab.selected_query() == 3  # checked against the page's own input, which stays
    _expect_defaults(tab, defaults["decoder"], {"input"})
    # not the fragment's to refuse: an input the vocabulary does not hold is the box's to name
    tab.open(pages["decoder"], "input=" + quote("1 x constructor"))
    assert tab.notices() == {}
    assert tab.page.input_value("#input-box") == "1 x constructor"
    assert '"x", "constructor" are not in the model\'s vocabulary' in tab.page.inner_text("#input-message")
    assert tab.errors == []


def test_a_good_fragment_is_restored_on_a_fresh_load(tab, pages):
    """Every field valid: restored from a new page load (the query is one of the URL's own input, which
    has more positions than the page's first input)."""
    text = "1 2 3 4 5 6 7 8 9 10"
    fragment = f"view=model&layer=0&query=8&input={quote(text)}&off=L1H0&ablation=mean&step=0"
    tab.open(pages["decoder"], fragment)
    assert tab.notices() == {}
    assert tab.shown_views() == ["model"]
    assert tab.page.input_value("#input-box") == text
    assert tab.page.get_attribute(".head-toggle[data-layer='1'][data-head='0']", "aria-pressed") == "true"
    assert tab.page.input_value("#ablation-method") == "mean"
    assert tab.js("window.transformerLab.step") == 0 and tab.page.input_value("#step-slider") == "0"
    for part in ("view=model", "layer=0", "query=8", "off=L1H0", "ablation=mean", "step=0"):
        assert part in tab.fragment()
    tab.page.click(".tab[data-view='head']")
    assert tab.page.input_value("#layer-select") == "0" and tab.selected_query() == 8
    assert tab.errors == []


@pytest.mark.parametrize(
    ("fragment", "fields"),
    [
        ("kind=2&view=__proto__&layer=x&query=10&off=Q0H0", {"kind", "view", "layer", "query", "off"}),
        ("kind=constructor&layer=2&query=-3&off=__proto__", {"kind", "layer", "query", "off"}),
        ("kind=selfish&layer=toString&query=0.5&off=X2H0", {"kind", "layer", "query", "off"}),
    ],
)
def test_encoder_decoder_fragment(tab, pages, defaults, fragment, fields):
    """kinds encoder, decoder, cross; layers E0..X1; the cross-attention's queries are the 10
    positions of the output the page writes."""
    tab.open(pages["encoder_decoder"], fragment)
    notices = tab.notices()
    assert set(notices) == fields
    assert "use encoder, decoder, cross" in notices["kind"]
    assert "use an integer from 0 to 9 (a query position)" in notices["query"]
    assert "use head labels such as E0H0 (layers E0, E1, D0, X0, D1, X1; heads H0 to H1)" in notices["off"]
    if "layer" in notices:
        assert "use an integer from 0 to 1" in notices["layer"]
    _expect_defaults(tab, defaults["encoder_decoder"], fields)
    assert tab.errors == []


def test_encoder_decoder_good_kind_and_query(tab, pages):
    tab.open(pages["encoder_decoder"], "kind=encoder&query=4&layer=0")
    assert tab.notices() == {}
    assert tab.page.eval_on_selector("#kind-select", "s => s.options[s.selectedIndex].text").startswith(
        "Encoder"
    )
    assert tab.page.input_value("#layer-select") == "0" and tab.selected_query() == 4
    assert tab.errors == []


def test_precomputed_page_ignores_the_live_fields(tab, pages):
    tab.open(pages["precomputed"], "input=1+2&off=L0H0&ablation=zero&step=0&view=patching&query=2")
    notices = tab.notices()
    assert tab.js("document.body.dataset.live") == "none"
    for field in ("input", "off", "ablation", "step"):
        assert notices[field].endswith("is ignored; this page does not run its model."), notices[field]
    assert notices["view"] == (
        "URL fragment: view=patching is ignored; use head, model, overlays, ablation, predictions."
    )
    assert tab.shown_views() == ["head"] and tab.selected_query() == 2  # the good field is kept
    assert tab.errors == []


def test_mean_ablation_without_means(tab, pages):
    tab.open(pages["no_means"], "ablation=mean&off=L0H0")
    assert tab.notices() == {
        "ablation": "URL fragment: ablation=mean is ignored; use zero (this page carries no means for mean "
        "ablation)."
    }
    assert tab.page.input_value("#ablation-method") == "zero"
    assert tab.page.get_attribute(".head-toggle[data-layer='0'][data-head='0']", "aria-pressed") == "true"
    message = 'forward: ablation="mean" needs the heads\' means, which this page does not carry; use "zero"'
    assert _thrown(tab, "lab.forward([1, 2, 3], {ablation: 'mean'})") == message
    assert _thrown(tab, "lab.setHeads([[0, 0]], 'mean')") == message.replace(
        "forward: ablation", "setHeads: method"
    )
    assert tab.errors == []


def test_many_bad_fields_are_summed_up(tab, pages):
    fragment = "&".join(f"f{i}=1" for i in range(12)) + "&query=-1"
    tab.open(pages["decoder"], fragment)
    lines = tab.page.eval_on_selector_all("#fragment-notice p", "ps => ps.map(p => p.innerText)")
    assert len(lines) == 9 and lines[-1] == "URL fragment: 5 more fields are ignored."
    assert tab.errors == []


def test_a_layer_the_page_does_not_store_waits_for_the_model(tab, tmp_path, monkeypatch):
    """A live page whose maps did not fit stores the last layer only: layer=0 is shown once the model
    has run; a layer the model does not have is named."""
    monkeypatch.setattr("transformer_lab.explorer.page.ATTENTION_BUDGET", 300)
    path = tmp_path / "partial.html"
    explore(encoder_decoder(), [[5, 6, 7, 8, 9, 4, 5]], ablation=False).save(path)
    assert all(k["first"] == 1 for k in page_data(path.read_text())["kinds"])
    tab.open(path, "layer=0")
    assert tab.notices() == {} and tab.page.input_value("#layer-select") == "0"
    tab.open(path, "layer=2")
    assert tab.notices() == {"layer": "URL fragment: layer=2 is ignored; use an integer from 0 to 1."}
    assert tab.page.input_value("#layer-select") == "1"
    assert tab.errors == []


# ------------------------------------------------------------------------------------------ the API
THROWN = """(args) => {
  const lab = window.transformerLab;
  try { %s; } catch (error) {
    return error instanceof Error ? error.message : 'not an Error: ' + String(error);
  }
  return 'nothing thrown';
}"""


def _thrown(tab: Tab, expression: str, *args: object) -> str:
    """The message of the Error `expression` throws at the call (`lab`: the API; `args`: the args)."""
    return tab.page.evaluate(THROWN % expression, list(args))


def _run(tab: Tab, expression: str, *args: object) -> object:
    return tab.page.evaluate(
        f"async (args) => {{ const lab = window.transformerLab; return {expression}; }}", list(args)
    )


@pytest.fixture(scope="module")
def api_tabs(browser, pages):
    """A tab per live page, opened once, for the API tests."""
    tabs = {name: Tab(browser).open(pages[name]) for name in ("decoder", "encoder", "encoder_decoder")}
    yield tabs
    for opened in tabs.values():
        opened.page.close()


IDS = "use integers from 0 to 11"
PAIRS = "use [layer, head] pairs with layer 0 to 1 and head 0 to 1"
CAP = "is out of range (the page writes at most 256 tokens per call); use an integer from 0 to 256"
ANSWER = "{position: 2, cleanAnswer: 1, corruptedAnswer: 2}"
DECODER_API = [  # (call, message): the decoder page (vocabulary 0-11, max_len 16, 2 x 2 heads, 2 steps)
    ("lab.forward([1.5, 2, 3])", f"forward: input[0]=1.5 is not a token id; {IDS}"),
    ("lab.forward(['3', 2, 1])", f'forward: input[0]="3" is not a token id; {IDS}'),
    ("lab.forward([1, 2, 12])", f"forward: input[2]=12 is not a token id; {IDS}"),
    ("lab.forward([1, -1])", f"forward: input[1]=-1 is not a token id; {IDS}"),
    ("lab.forward([1, NaN])", f"forward: input[1]=NaN is not a token id; {IDS}"),
    ("lab.forward([1, , 3])", f"forward: input[1]=undefined is not a token id; {IDS}"),
    ("lab.forward([[1, 2.5]])", f"forward: input[0][1]=2.5 is not a token id; {IDS}"),
    ("lab.forward([])", "forward: input is empty; use an array of 1 to 16 integers from 0 to 11"),
    (
        "lab.forward(new Array(17).fill(1))",
        "forward: input has 17 tokens, more than the model's max_len=16; use at most 16",
    ),
    (
        "lab.forward(new Array(1e9))",
        "forward: input has 1000000000 tokens, more than the model's max_len=16; use at most 16",
    ),
    (
        "lab.forward('1 2 3')",
        'forward: input="1 2 3" is not a list of token ids; use an array of 1 to 16 integers from 0 to 11',
    ),
    (
        "lab.forward()",
        "forward: input=undefined is not a list of token ids; use an array of 1 to 16 integers from 0 to 11",
    ),
    (
        "lab.forward({source: [1], target: [2]})",
        "forward: input={source: [1], target: [2]} is not a list of token ids; use an array of 1 to 16 "
        "integers from 0 to 11",
    ),
    (
        "lab.forward([1, 2], {ablation: 'bogus'})",
        'forward: ablation="bogus" is not an ablation method; use "zero" or "mean"',
    ),
    (
        "lab.forward([1, 2], {ablation: 'constructor'})",
        'forward: ablation="constructor" is not an ablation method; use "zero" or "mean"',
    ),
    ("lab.forward([1, 2], {ablate: [[2, 0]]})", f"forward: ablate[0]=[2,0] is out of range; {PAIRS}"),
    ("lab.forward([1, 2], {ablate: [[0, -1]]})", f"forward: ablate[0]=[0,-1] is out of range; {PAIRS}"),
    (
        "lab.forward([1, 2], {ablate: [[0, 0.5]]})",
        f"forward: ablate[0]=[0,0.5] is not a [layer, head] pair of integers; {PAIRS}",
    ),
    (
        "lab.forward([1, 2], {ablate: [0, 1]})",
        f"forward: ablate[0]=0 is not a [layer, head] pair of integers; {PAIRS}",
    ),
    (
        "lab.forward([1, 2], {ablate: [[0, 1], , [1, 1]]})",
        f"forward: ablate[1]=undefined is not a [layer, head] pair of integers; {PAIRS}",
    ),
    (
        "lab.forward([1, 2], {ablate: 'L0H1'})",
        f'forward: ablate="L0H1" is not a list of [layer, head] pairs; use a list of {PAIRS[4:]}',
    ),
    (
        "lab.forward([1, 2], {ablate: new Array(5)})",
        f"forward: ablate has 5 pairs, more than the model's 4 heads; use at most 4 {PAIRS[4:]}",
    ),
    ("lab.forward([1, 2], {ablat: [[0, 1]]})", "forward: opts.ablat is not known; use ablate, ablation"),
    (
        "lab.forward([1, 2], JSON.parse('{\"__proto__\": 1}'))",
        "forward: opts.__proto__ is not known; use ablate, ablation",
    ),
    ("lab.forward([1, 2], 5)", "forward: opts=5 is not an object; use {ablate, ablation} or nothing"),
    ("lab.generate([1, 2, 3], {maxNewTokens: 1e9})", f"generate: maxNewTokens=1000000000 {CAP}"),
    ("lab.generate([1, 2, 3], {maxNewTokens: 257})", f"generate: maxNewTokens=257 {CAP}"),
    ("lab.generate([1, 2, 3], {maxNewTokens: -1})", f"generate: maxNewTokens=-1 {CAP}"),
    (
        "lab.generate([1, 2, 3], {maxNewTokens: Infinity})",
        "generate: maxNewTokens=Infinity is not an integer; use an integer from 0 to 256",
    ),
    (
        "lab.generate([1, 2, 3], {maxNewTokens: 2.5})",
        "generate: maxNewTokens=2.5 is not an integer; use an integer from 0 to 256",
    ),
    (
        "lab.generate([1, 2, 3], {maxNewTokens: '5'})",
        'generate: maxNewTokens="5" is not an integer; use an integer from 0 to 256',
    ),
    (
        "lab.generate([1, 2, 3], {temperature: -1})",
        "generate: temperature=-1 is not allowed; use a finite number >= 0 (0: greedy)",
    ),
    (
        "lab.generate([1, 2, 3], {temperature: NaN})",
        "generate: temperature=NaN is not allowed; use a finite number >= 0 (0: greedy)",
    ),
    (
        "lab.generate([1, 2, 3], {temperature: Infinity})",
        "generate: temperature=Infinity is not allowed; use a finite number >= 0 (0: greedy)",
    ),
    (
        "lab.generate([1, 2, 3], {temperature: '0'})",
        'generate: temperature="0" is not allowed; use a finite number >= 0 (0: greedy)',
    ),
    ("lab.generate([1, 2, 3], {topK: 0})", "generate: topK=0 is out of range; use an integer from 1 up"),
    (
        "lab.generate([1, 2, 3], {topK: 1.5})",
        "generate: topK=1.5 is not an integer; use an integer from 1 up",
    ),
    (
        "lab.generate([1, 2, 3], {topP: 0})",
        "generate: topP=0 is not allowed; use null or a number above 0, at most 1",
    ),
    (
        "lab.generate([1, 2, 3], {topP: 1.5})",
        "generate: topP=1.5 is not allowed; use null or a number above 0, at most 1",
    ),
    (
        "lab.generate([1, 2, 3], {seed: 1.5})",
        "generate: seed=1.5 is not an integer; use an integer from 0 to 4294967295",
    ),
    (
        "lab.generate([1, 2, 3], {seed: 2 ** 32})",
        "generate: seed=4294967296 is out of range; use an integer from 0 to 4294967295",
    ),
    (
        "lab.generate([1, 2, 3], {maxNewToken: 5})",
        "generate: opts.maxNewToken is not known; use maxNewTokens, temperature, topK, topP, seed, ablate, "
        "ablation",
    ),
    ("lab.generate([1.5])", f"generate: input[0]=1.5 is not a token id; {IDS}"),
    (
        "lab.generate({source: [1, 2]})",
        "generate: input={source: [1,2]} is not a list of token ids; use an array of 1 to 16 integers from "
        "0 to 11",
    ),
    ("lab.answer([1, 2.5])", f"answer: prompt[1]=2.5 is not a token id; {IDS}"),
    ("lab.answer([1, 2], {maxNew: 1e9})", f"answer: maxNew=1000000000 {CAP}"),
    (
        "lab.answer([1, 2], {ablation: 'bogus'})",
        'answer: ablation="bogus" is not an ablation method; use "zero" or "mean"',
    ),
    ("lab.answer([1, 2], {record: {}})", "answer: opts.record is not known; use maxNew, ablate, ablation"),
    ("lab.ablationTable([1.5])", f"ablationTable: input[0]=1.5 is not a token id; {IDS}"),
    (
        "lab.ablationTable([1, 2, 3], {positions: [true]})",
        "ablationTable: positions has 1 entries; use an array of 3 booleans (one per output position)",
    ),
    (
        "lab.ablationTable([1, 2, 3], {positions: [1, 0, 1]})",
        "ablationTable: positions[0]=1 is not a boolean; use true or false",
    ),
    (
        "lab.ablationTable([1, 2, 3], {positions: [true, , true]})",
        "ablationTable: positions[1]=undefined is not a boolean; use true or false",
    ),
    (
        "lab.ablationTable([1, 2, 3], {ablation: 'bogus'})",
        'ablationTable: ablation="bogus" is not an ablation method; use "zero" or "mean"',
    ),
    (f"lab.patching([1.5, 2, 3], [1, 4, 3], {ANSWER})", f"patching: clean[0]=1.5 is not a token id; {IDS}"),
    (
        f"lab.patching([1, 2, 3], [1, 4], {ANSWER})",
        "patching: corrupted has lengths [2] where clean has [3]; use inputs as long as clean's",
    ),
    (
        "lab.patching([1, 2, 3], [1, 4, 3], 5)",
        "patching: answer=5 is not an object; use {position, cleanAnswer, corruptedAnswer}",
    ),
    (
        "lab.patching([1, 2, 3], [1, 4, 3], {position: 3, cleanAnswer: 1, corruptedAnswer: 2})",
        "patching: answer.position=3 is out of range; use an integer from 0 to 2",
    ),
    (
        "lab.patching([1, 2, 3], [1, 4, 3], {position: 2, cleanAnswer: 12, corruptedAnswer: 2})",
        "patching: answer.cleanAnswer=12 is out of range; use an integer from 0 to 11",
    ),
    (
        "lab.patching([1, 2, 3], [1, 4, 3], {position: 2, cleanAnswer: 1})",
        "patching: answer.corruptedAnswer=undefined is not an integer; use an integer from 0 to 11",
    ),
    (
        f"lab.patching([1, 2, 3], [1, 4, 3], {ANSWER}, {{yieldEvery: 0}})",
        "patching: yieldEvery=0 is out of range; use an integer from 1 up",
    ),
    (
        f"lab.patching([1, 2, 3], [1, 4, 3], {ANSWER}, {{onProgress: 5}})",
        "patching: onProgress=5 is not a function; use a function or nothing",
    ),
    ("lab.setStep(99999)", "setStep: index=99999 is out of range; use an integer from 0 to 1"),
    ("lab.setStep(-1)", "setStep: index=-1 is out of range; use an integer from 0 to 1"),
    ("lab.setStep(2.5)", "setStep: index=2.5 is not an integer; use an integer from 0 to 1"),
    ("lab.setStep('1')", 'setStep: index="1" is not an integer; use an integer from 0 to 1'),
    ("lab.setStep()", "setStep: index=undefined is not an integer; use an integer from 0 to 1"),
    ("lab.setInput(5)", "setInput: text=5 is not a string; use a string of at most 100000 characters"),
    ("lab.setInput(null)", "setInput: text=null is not a string; use a string of at most 100000 characters"),
    (
        "lab.setInput('1 '.repeat(50001))",
        "setInput: text has 100002 characters, more than 100000; use at most 100000",
    ),
    ("lab.setHeads([[9, 0]])", f"setHeads: pairs[0]=[9,0] is out of range; {PAIRS}"),
    (
        "lab.setHeads('L0H1')",
        f'setHeads: pairs="L0H1" is not a list of [layer, head] pairs; use a list of {PAIRS[4:]}',
    ),
    (
        "lab.setHeads()",
        f"setHeads: pairs=undefined is not a list of [layer, head] pairs; use a list of {PAIRS[4:]}",
    ),
    (
        "lab.setHeads([[0, 1]], 'bogus')",
        'setHeads: method="bogus" is not an ablation method; use "zero" or "mean"',
    ),
    ("lab.patchToken(-1)", "patchToken: position=-1 is out of range; use an integer from 0 to 5"),
    ("lab.patchToken(6)", "patchToken: position=6 is out of range; use an integer from 0 to 5"),
    ("lab.patchToken(1.5)", "patchToken: position=1.5 is not an integer; use an integer from 0 to 5"),
    ("lab.model(2)", "model: index=2 is out of range; use an integer from 0 to 1"),
    ("lab.model('0')", 'model: index="0" is not an integer; use an integer from 0 to 1'),
]


def test_decoder_api_refuses_bad_arguments(api_tabs):
    tab = api_tabs["decoder"]
    wrong = {call: got for call, message in DECODER_API if (got := _thrown(tab, call)) != message}
    assert wrong == {}
    # nothing of it reached the page: still the first input, nothing removed, the last step
    assert tab.page.input_value("#input-box") == DECODER_TEXT and tab.js("window.transformerLab.step") == 1
    assert tab.page.locator(".head-toggle[aria-pressed='true']").count() == 0
    assert tab.errors == []


def test_decoder_api_good_arguments_still_work(api_tabs):
    tab = api_tabs["decoder"]
    out = _run(tab, "lab.forward([1, 2, 3], {ablate: [[1, 1], [1, 1]], ablation: 'mean'})")
    assert len(out["logits"]) == 3 and len(out["logits"][0]) == 12 and len(out["patterns"]) == 2
    assert _run(tab, "lab.forward([[1, 2, 3]]).logits") == _run(tab, "lab.forward([1, 2, 3], null).logits")
    assert len(_run(tab, "lab.generate([1, 2, 3], {maxNewTokens: 256})")) == 259  # the cap, past max_len
    assert _run(tab, "lab.generate([1, 2, 3], {maxNewTokens: 0})") == [1, 2, 3]
    sampled = "lab.generate([1, 2, 3], {maxNewTokens: 8, temperature: 0.8, topK: 3, topP: 0.9, seed: 7})"
    assert _run(tab, sampled) == _run(tab, sampled)
    assert len(_run(tab, "lab.answer([1, 2, 3], {maxNew: 4})")) == 4
    table = _run(tab, "lab.ablationTable([1, 2, 3], {positions: [true, false, true], ablation: 'mean'})")
    assert table["positions"] == 2 and len(table["drops"]) == 2
    patched = _run(tab, f"lab.patching([1, 2, 3], [1, 4, 3], {ANSWER}, {{heads: false}})")
    assert set(patched) >= {"clean", "corrupted", "resid", "heads"}
    # a copy of the config: changing it changes no check
    assert _run(tab, "(lab.config.max_len = 1e9, lab.config.max_len)") == 16
    assert "max_len=16" in _thrown(tab, "lab.forward(new Array(17).fill(1))")
    # a polluted Object.prototype is no option
    polluted = """(Object.prototype.ablate = [[0, 0]], (() => {
      try { return lab.forward([1, 2, 3]).logits; } finally { delete Object.prototype.ablate; }
    })())"""
    assert _run(tab, polluted) == _run(tab, "lab.forward([1, 2, 3]).logits")
    assert tab.errors == []


def test_decoder_api_good_arguments_drive_the_page(api_tabs):
    tab = api_tabs["decoder"]
    assert _run(tab, "lab.setStep(0).then(() => lab.step)") == 0
    assert _run(tab, "lab.model(0) === lab.model() && lab.model(1) !== lab.model(0)") is True
    assert _run(tab, "lab.setStep(1).then(() => lab.step)") == 1
    assert _run(tab, "lab.setInput('1 2 3')") is None
    assert "not in the model's vocabulary" in _run(tab, "lab.setInput('1 x')")
    assert _run(tab, "lab.setInput('')") == "the input is empty: type a few tokens"
    assert "use an integer from 0 up" in _thrown(tab, "lab.patchToken(-1)")  # any position: fix the box first
    assert _run(tab, f"lab.setInput({DECODER_TEXT!r})") is None
    _run(tab, "lab.setHeads([[0, 1]], 'mean')")
    assert tab.page.get_attribute(".head-toggle[data-layer='0'][data-head='1']", "aria-pressed") == "true"
    assert tab.page.input_value("#ablation-method") == "mean"
    _run(tab, "lab.setHeads([])")
    assert tab.page.locator(".head-toggle[aria-pressed='true']").count() == 0
    assert tab.page.input_value("#ablation-method") == "mean"  # kept: no method given
    _run(tab, "lab.setHeads([], 'zero')")
    _run(tab, "lab.patchToken(1)")
    assert _run(tab, "lab.patch && lab.patch.position") == 1
    assert tab.errors == []


ENCODER_API = [  # the encoder page: vocabulary 0-9, max_len 12, one step, writes no text
    ("lab.forward([1, 2, 10])", "forward: input[2]=10 is not a token id; use integers from 0 to 9"),
    (
        "lab.forward(new Array(13).fill(1))",
        "forward: input has 13 tokens, more than the model's max_len=12; use at most 12",
    ),
    (
        "lab.forward({source: [1], target: [2]})",
        "forward: input={source: [1], target: [2]} is not a list of token ids; use an array of 1 to 12 "
        "integers from 0 to 9",
    ),
    (
        "lab.forward([1, 2], {ablate: [[1, 0]]})",
        "forward: ablate[0]=[1,0] is out of range; use [layer, head] pairs with layer 0 to 0 and head 0 to 1",
    ),
    (
        "lab.generate([1, 2, 3])",
        "generate: this model writes no text (it classifies each position); use forward or answer",
    ),
    ("lab.answer([1, 2], {maxNew: 3})", "answer: opts.maxNew is not known; use ablate, ablation"),
    ("lab.setStep(1)", "setStep: index=1 is out of range; use 0"),
    ("lab.model(1)", "model: index=1 is out of range; use 0"),
    ("lab.patchToken(5)", "patchToken: position=5 is out of range; use an integer from 0 to 4"),
]


def test_encoder_api(api_tabs):
    tab = api_tabs["encoder"]
    wrong = {call: got for call, message in ENCODER_API if (got := _thrown(tab, call)) != message}
    assert wrong == {}
    assert len(_run(tab, "lab.forward([1, 2, 3], {ablate: [[0, 1]], ablation: 'mean'}).logits")) == 3
    assert len(_run(tab, "lab.answer([1, 2, 3, 4])")) == 4
    assert _run(tab, "lab.setStep(0).then(() => lab.step)") == 0  # a page without snapshots has step 0
    assert tab.errors == []


S = "{source: [5, 6, 7], target: [1, 7]}"
ENCODER_DECODER_API = [  # an encoder-decoder: {source, target} (or [source, target]); max_len 10
    (
        "lab.forward([5, 6, 7])",
        "forward: input=[5,6,7] is not {source, target}; use {source: [token ids], target: [token ids]} (an "
        "encoder-decoder reads a source and a target)",
    ),
    (
        "lab.forward({source: [5, 6, 7]})",
        "forward: input.target=undefined is not a list of token ids; use an array of 1 to 10 integers from "
        "0 to 11",
    ),
    (
        "lab.forward({source: [5, 1.5], target: [1]})",
        "forward: input.source[1]=1.5 is not a token id; use integers from 0 to 11",
    ),
    (
        "lab.forward({source: [5], target: []})",
        "forward: input.target is empty; use an array of 1 to 10 integers from 0 to 11",
    ),
    (
        "lab.forward({source: new Array(11).fill(5), target: [1]})",
        "forward: input.source has 11 tokens, more than the model's max_len=10; use at most 10",
    ),
    (
        "lab.forward({source: [5], target: [1], extra: 1})",
        "forward: input.extra is not known; use source, target",
    ),
    (
        "lab.forward([[5, 6], [1, 12]])",
        "forward: input[1][1]=12 is not a token id; use integers from 0 to 11",
    ),
    (
        "lab.generate([5, 6, 7])",
        "generate: input=[5,6,7] is not {source}; use {source: [token ids]} (an encoder-decoder writes from "
        "a source)",
    ),
    ("lab.generate({source: [5, 6, 7], target: [1]})", "generate: input.target is not known; use source"),
    (
        "lab.generate({source: [5, 6, 7]}, {maxNewTokens: 11})",
        "generate: maxNewTokens=11 is out of range (the decoder reads at most max_len=10 positions); use an "
        "integer from 0 to 10",
    ),
    (
        "lab.generate({source: [5, 6, 7]}, {temperature: 0.8})",
        "generate: opts.temperature is not known; use maxNewTokens, ablate, ablation",
    ),
    (
        "lab.answer({source: [5]})",
        "answer: prompt={source: [5]} is not a list of token ids; use an array of 1 to 10 integers from 0 "
        "to 11",
    ),
    (
        f"lab.ablationTable({S}, {{positions: [true]}})",
        "ablationTable: positions has 1 entries; use an array of 2 booleans (one per output position)",
    ),
    (
        f"lab.patching({S}, {{source: [5, 6], target: [1, 7]}}, "
        f"{{position: 1, cleanAnswer: 1, corruptedAnswer: 2}})",
        "patching: corrupted has lengths [2, 2] where clean has [3, 2]; use inputs as long as clean's",
    ),
    (
        f"lab.patching({S}, {S}, {{position: 2, cleanAnswer: 1, corruptedAnswer: 2}})",
        "patching: answer.position=2 is out of range; use an integer from 0 to 1",
    ),
    (
        "lab.setHeads([[6, 0]])",
        "setHeads: pairs[0]=[6,0] is out of range; use [layer, head] pairs with layer 0 to 5 and head 0 to 1",
    ),
]


def test_encoder_decoder_api(api_tabs):
    tab = api_tabs["encoder_decoder"]
    wrong = {call: got for call, message in ENCODER_DECODER_API if (got := _thrown(tab, call)) != message}
    assert wrong == {}
    logits = _run(tab, f"lab.forward({S}).logits")
    assert len(logits) == 2 and _run(tab, "lab.forward([[5, 6, 7], [1, 7]]).logits") == logits
    written = _run(tab, "lab.generate({source: [5, 6, 7]})")
    assert _run(tab, "lab.answer([5, 6, 7])") == written
    assert len(_run(tab, "lab.generate({source: [5, 6, 7]}, {maxNewTokens: 10})")) <= 10
    assert len(_run(tab, f"lab.ablationTable({S}, {{positions: [true, true]}}).drops")) == 6
    assert tab.errors == []


def test_every_message_the_troubleshooting_page_shows_is_asserted_here():
    """docs/troubleshooting.md's rows for the page are cases this file tries: each row's message names a
    `name=value` (up to its " is ...") that a test here asserts."""
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    section = page.split("## The page's URL and API")[1].split("\n## ")[0]
    shown = [re.sub(r"^(URL fragment: )", "", m) for m in re.findall(r"\| `([^`]+)` \|\n", section)]
    source = Path(__file__).read_text()
    assert len(shown) >= 15
    for message in shown:
        assert message.split(" is ")[0].split(" has ")[0] in source, message
