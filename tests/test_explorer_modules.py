"""The page in modules (src/transformer_lab/explorer/*.js): no file over 800 lines, each listed once in
the order page.py inlines them, one state object for the page, the forward pass alone in model.js; what
the page can run said once in Python (the settings it refuses before any HTML is made, the weights'
layout it ships, the label rules), the model's predicates read from the payload and never worked out in
JavaScript; and the per-head measures of the registry, one registered outside the package among them,
shown in the page (headless Chromium) with Python's values."""

import ast
import importlib
import json
import re
from pathlib import Path

import pytest
import torch

from tests.conftest import encoder_classifier, gpt_decoder, load_script
from tests.test_explorer import encoder_decoder, page_data
from transformer_lab import load
from transformer_lab.analysis import measures
from transformer_lab.cli import run
from transformer_lab.errors import ConfigError
from transformer_lab.explorer import collect, explore, layout, page
from transformer_lab.explorer.live import model_spec

FOLDER = Path(page.__file__).parent
SCRIPTS = page.MODEL_SCRIPTS + page.PAGE_SCRIPTS
LINE_LIMIT = 800


def _code(text: str, strings: bool = False) -> str:
    """JavaScript without its comments and (unless `strings`) the text of its strings and template
    literals (the code of `${...}` kept): what the checks below search."""
    out, i, n, stack, depth = [], 0, len(text), [], 0
    while i < n:
        c, two = text[i], text[i : i + 2]
        if two in ("//", "/*"):
            end = text.find("\n" if two == "//" else "*/", i + 2)
            i = n if end < 0 else end + (0 if two == "//" else 2)
        elif c in "'\"":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1] if strings else '""')
            i = j + 1
        elif c == "`" or (c == "}" and stack and stack[-1] == depth):
            if c == "}":
                stack.pop()
            j = i + 1
            while j < n and text[j] != "`" and text[j : j + 2] != "${":
                j += 2 if text[j] == "\\" else 1
            if strings:
                out.append(text[i:j])
            if text[j : j + 2] == "${":
                stack.append(depth)
                out.append("`${")
                i = j + 2
            else:
                out.append("`")
                i = j + 1
        else:
            depth += (c == "{") - (c == "}")
            out.append(c)
            i += 1
    return "".join(out)


def _template_spans_lines(text: str) -> bool:
    """Whether a template literal's text runs over a line break (page.without_comment_lines would then
    misread a line of it that starts like a comment)."""
    i, n, stack, depth = 0, len(text), [], 0
    while i < n:
        c, two = text[i], text[i : i + 2]
        if two in ("//", "/*"):
            end = text.find("\n" if two == "//" else "*/", i + 2)
            i = n if end < 0 else end + (0 if two == "//" else 2)
        elif c in "'\"":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif c == "`" or (c == "}" and stack and stack[-1] == depth):
            if c == "}":
                stack.pop()
            j = i + 1
            while j < n and text[j] != "`" and text[j : j + 2] != "${":
                if text[j] == "\n":
                    return True
                j += 2 if text[j] == "\\" else 1
            if text[j : j + 2] == "${":
                stack.append(depth)
                i = j + 2
            else:
                i = j + 1
        else:
            depth += (c == "{") - (c == "}")
            i += 1
    return False


# ------------------------------------------------------------------------------------------ the files
def test_every_script_is_a_module_of_at_most_800_lines_inlined_once_in_a_stated_order():
    for path in FOLDER.glob("*.js"):  # every JavaScript file of the explorer, inlined or not
        text = path.read_text()
        assert len(text.splitlines()) <= LINE_LIMIT, f"{path.name} has {len(text.splitlines())} lines"
        assert "</script" not in text.lower(), path.name
    assert len(set(SCRIPTS)) == len(SCRIPTS) and all((FOLDER / name).is_file() for name in SCRIPTS)
    for name in SCRIPTS:
        text = (FOLDER / name).read_text()
        assert not _template_spans_lines(text), f"{name}: a template literal spans lines"
        # the module pattern: one namespace, nothing else global (runner.js adds the old global name)
        assert "(globalThis.TransformerLab = globalThis.TransformerLab || {})" in text, name
        assert re.search(r"^\(function \(TL\) \{\n  \"use strict\";", text, re.M), name
    assert "document" not in "".join(_code((FOLDER / n).read_text()) for n in page.MODEL_SCRIPTS)


def test_the_page_inlines_the_scripts_in_order_without_their_comment_lines():
    html = str(explore(encoder_classifier(10), [1, 2, 3], ablation=False))
    model_part = html.split('<script id="model-js">', 1)[1].split("</script>", 1)[0]
    assert model_part.strip() == page.scripts(page.MODEL_SCRIPTS).strip()
    positions = [html.index(page.without_comment_lines((FOLDER / n).read_text())) for n in SCRIPTS]
    assert positions == sorted(positions)
    assert "the forward pass alone" not in html  # model.js's header comment stays in the file
    text = "a();\n  // gone\n/* gone\n * too */\nb(); // stays\n/* x */ c();\n/** gone */\n"
    assert page.without_comment_lines(text) == "a();\nb(); // stays\n/* x */ c();"
    with pytest.raises(ValueError, match="code after a block comment"):
        page.without_comment_lines("/* a\n b */ c();")


def test_the_page_has_one_state_object():
    """No page module but state.js keeps state of its own: no module-level let or var, and no module-level
    object, array, Map or Set that is not frozen."""
    for name in page.PAGE_SCRIPTS:
        code = _code((FOLDER / name).read_text())
        top = [line for line in code.splitlines() if re.match(r"^  \S", line)]  # the module's own level
        assert not [line for line in top if re.match(r"^  (let|var) ", line)], name
        if name != "state.js":
            mutable = r"^  const [\w$]+ = (\[|\{|new (Map|Set|Array|Float32Array|Uint8Array)\b)"
            assert not [line for line in top if re.match(mutable, line)], name
    state = (FOLDER / "state.js").read_text()
    assert "TL.state = state;" in state


def test_model_js_is_the_forward_pass_alone():
    model = _code((FOLDER / "model.js").read_text())
    for name in ("ablationTable", "patching", "rollout", "checks", "Runner", "viewRun", "serveWorker"):
        assert not re.search(rf"function {name}\b|class {name}\b|const {name}\b", model), name
    for part in ("embed", "pos_embed", "attn.qkv.weight", "mlp.in.weight", "final_norm", "unembed.weight"):
        assert f'"{part}' in (FOLDER / "model.js").read_text() or part in model
    assert "generate(tokens, maxNew" in model and "class StackCache" in model


# ------------------------------------------------------------------- what the page runs, said in Python
def test_no_script_names_a_weight_or_works_out_a_predicate():
    """model.js finds weights by the roles layout.py ships; the model's kind is read from the payload's
    predicates (decoderOnly, languageModel, readsSource, crossAttention), never re-derived."""
    code = "\n".join(_code((FOLDER / n).read_text()) for n in SCRIPTS)
    text = "\n".join((FOLDER / n).read_text() for n in SCRIPTS)
    for name in ("qkv_proj", "o_proj", "fc_in", "fc_out", "norm1", "norm2", "norm3", "ln_final", "unembed.0",
                 "unembed.1", "unembed.4", "pos_embed.embedding"):  # fmt: skip
        assert name not in text, name
    for pattern in (r"numInputs", r"num_inputs", r"stacks\.length\s*===?\s*1", r"generates\s*&&",
                    r"\.arch\b", r"=== \"decoder\"", r"k\.name === \"self\""):  # fmt: skip
        assert not re.search(pattern, code), pattern
    for predicate in ("decoderOnly", "readsSource"):
        assert f"spec.{predicate}" in code


@pytest.mark.parametrize(
    "model",
    [
        lambda: encoder_classifier(10, num_layers=2, num_heads=2),  # post-norm, output MLP
        lambda: gpt_decoder(12, bias=False, mlp=False, tie_embeddings=True),  # pre-norm, tied, no MLP
        lambda: encoder_decoder(norm_first=True, tie_embeddings=True, positional_encoding="learned"),
    ],
    ids=["encoder", "decoder", "encoder_decoder"],
)
def test_the_weights_layout_names_every_tensor_once_with_its_shape_and_role(model):
    net = model()
    weights, refusal = layout.weight_layout(net)
    state = net.state_dict()
    assert refusal is None and [w.name for w in weights] == list(state)
    assert all(w.shape == tuple(state[w.name].shape) for w in weights)
    places = [(w.stack, w.block, w.role) for w in weights]
    assert len(set(places)) == len(places)
    shipped = model_spec(net)["layout"]
    assert shipped["columns"] == ["name", "role", "stack", "block", "shape"]
    assert [row[0] for row in shipped["rows"]] == list(state)
    roles = {w.role for w in weights}
    assert "unembed.weight" in roles and "embed" in roles and "attn.qkv.weight" in roles


def test_a_weight_of_another_shape_or_a_norm_of_another_eps_keeps_the_precomputed_page():
    net = encoder_classifier(10)
    net.blocks[0].norm1.eps = 1e-6
    note = explore(net, [1, 2, 3], ablation=False).live_note
    assert "norm blocks.0.norm1 has eps=1e-06; the page's forward pass uses 1e-05" in note
    net = encoder_classifier(10)
    net.blocks[0].mlp.fc_in.bias = torch.nn.Parameter(torch.zeros(5))
    assert layout.weight_layout(net)[1] == (
        "the weight blocks.0.mlp.fc_in.bias (mlp.in.bias) has shape [5]; the page's forward pass expects [64]"
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("positional_encoding", "alibi", "positional_encoding='alibi' cannot run in the page (it runs "
         "sinusoidal, learned, none, rotary); explore with live=false for the precomputed views"),
        ("activation", "reglu", "activation='reglu' cannot run in the page (it runs relu, gelu, gelu_new, "
         "swiglu, geglu)"),
        ("norm_first", "sandwich", "norm_first='sandwich' cannot run in the page (it runs false, true)"),
    ],
)  # fmt: skip
def test_a_setting_the_page_cannot_run_is_refused_before_any_html(key, value, message, tmp_path, monkeypatch):
    model = encoder_classifier(10, num_layers=1)
    setattr(model.config, key, value)
    calls = []
    monkeypatch.setattr(collect, "explain", None)  # nothing may be computed before the refusal
    monkeypatch.setattr("transformer_lab.explorer.render", lambda *args, **kwargs: calls.append(args))
    with pytest.raises(ConfigError) as refused:
        explore(model, [1, 2, 3])
    assert message in str(refused.value) and "\n" not in str(refused.value) and not calls
    monkeypatch.undo()
    assert page_data(explore(model, [1, 2, 3], live=False))["live"] is None  # the precomputed page


def test_a_setting_the_page_does_not_know_is_refused_unless_at_its_default(monkeypatch):
    model = encoder_classifier(10)
    plain = model.config.to_dict
    monkeypatch.setattr(type(model.config), "to_dict", lambda self: plain() | {"rotary_dim": 8})
    with pytest.raises(ConfigError, match="rotary_dim=8 cannot run in the page"):
        layout.check_runnable(model.config)


def test_the_command_line_refuses_before_writing(tmp_path, capsys, monkeypatch):
    """What the page runs is CAPABILITIES; a checkpoint outside it is one line, exit 2, and no file."""
    script = load_script("explore")
    monkeypatch.setitem(layout.CAPABILITIES, "positional_encoding", ("learned", "none"))
    out = tmp_path / "page.html"
    with pytest.raises(SystemExit) as exit_info:
        run(script.main, ["ckpt_path=pretrained:reverse", f"out={out}"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "\n" not in err
    assert err == (
        "error: positional_encoding='sinusoidal' cannot run in the page (it runs learned, none); "
        "explore with live=false for the precomputed views"
    )
    assert list(tmp_path.iterdir()) == []
    run(script.main, ["ckpt_path=pretrained:reverse", f"out={out}", "live=false"])
    assert out.is_file()


def test_the_label_rule_comes_from_the_task_record(monkeypatch):
    checkpoint = load("pretrained:reverse_2l4h")
    live = page_data(explore(checkpoint, [4, 5, 6, 7], ablation=False))["live"]
    assert live["input"]["label_rule"] == checkpoint.contents["task"].get("label_rule", "reverse")
    record = dict(checkpoint.contents["task"], label_rule="sort_unique")
    monkeypatch.setitem(checkpoint.contents, "task", record)
    assert page_data(explore(checkpoint, [4, 5, 6, 7], ablation=False))["live"]["input"]["label_rule"] == (
        "sort_unique"
    )
    monkeypatch.setitem(checkpoint.contents, "task", dict(record, label_rule="my_rule"))
    live = page_data(explore(checkpoint, [4, 5, 6, 7], ablation=False))["live"]
    assert live["input"]["label_rule"] is None
    assert any("no label rule 'my_rule'" in note for note in live["notes"])
    # no table of task classes anywhere in the page's code: no task's class in a string or a name
    classes = r"DataModule|Reverse|Shakespeare|Induction|\bSort\b"
    for name in SCRIPTS:
        assert not re.search(classes, _code((FOLDER / name).read_text(), strings=True)), name
    for name in ["live.py", "layout.py", "page.py", "collect.py", "__init__.py"]:
        tree = ast.parse((FOLDER / name).read_text())
        documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        docs = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, documented) and ast.get_docstring(node, clean=False) is not None
        }
        texts = [
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
        ]
        names = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name)]
        assert not [t for t in texts + names if re.search(classes, t)], name


# ------------------------------------------------------------------------------- in a real browser


def _open(browser, path: Path):
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: errors.append(str(e)))
    tab.goto(path.resolve().as_uri())
    tab.wait_for_selector("body[data-live]", timeout=30_000)
    return tab, errors


@pytest.mark.browser
def test_the_scripts_mirror_what_python_says_the_page_runs(browser, tmp_path):
    path = tmp_path / "page.html"
    explore(gpt_decoder(12), [1, 2, 3], ablation=False).save(path)
    tab, errors = _open(browser, path)
    capabilities = tab.evaluate("TransformerLab.model.CAPABILITIES")
    assert capabilities == {key: list(values) for key, values in layout.CAPABILITIES.items()}
    assert tab.evaluate("Object.keys(TransformerLab.input.LABEL_RULES)") == list(layout.LABEL_RULES)
    assert tab.evaluate("typeof TransformerLabModel.erf") == "function" and not errors
    tab.close()


@pytest.fixture
def first_token():
    """The measure of tests/extensions/first_token.py, registered for the test and removed after it."""
    module = importlib.reload(importlib.import_module("tests.extensions.first_token"))
    yield module
    measures.MEASURES.pop("first_token", None)


@pytest.mark.browser
def test_the_page_shows_every_registered_measure_with_python_values(first_token, browser, tmp_path):
    checkpoint = load("pretrained:reverse_2l4h")
    inputs, labels = checkpoint.examples(collect.MEASURE_EXAMPLES, exact=False)
    expected = collect.head_measures(checkpoint.model, inputs, labels, checkpoint.task)
    path = tmp_path / "page.html"
    explore(checkpoint, [4, 5, 6, 7]).save(path)
    tab, errors = _open(browser, path)
    tab.click(".tab[data-view='ablation']")
    tab.wait_for_selector("#measures-table td.measure-cell")
    shown = tab.evaluate(
        """() => {
        const all = (selector) => [...document.querySelectorAll(selector)];
        return {
          names: all('#measures-table th[data-measure]').map((th) => th.dataset.measure),
          about: all('#measures-legend [data-measure]').map((p) => p.textContent),
          cells: all('#measures-table td.measure-cell').map((td) => [td.dataset.measure, td.dataset.head,
            td.dataset.value === "" ? null : Number(td.dataset.value), td.textContent]),
        };
      }"""
    )
    items = expected["items"]
    assert [item["name"] for item in items][-1] == "first_token"
    assert shown["names"] == [item["name"] for item in items]
    for item, about in zip(items, shown["about"], strict=True):
        assert item["name"] in about and item["direction"] in about and item["description"] in about
    cells = {(m, head): (value, text) for m, head, value, text in shown["cells"]}
    for item in items:
        for label, row in zip(expected["layers"], item["values"], strict=True):
            for h, value in enumerate(row):
                got, text = cells[(item["name"], f"{label}H{h}")]
                if value is None:
                    assert got is None and text == "-"
                else:
                    assert got == pytest.approx(value, abs=1e-6)  # the exact value, and shown to 3 places
                    assert len(text.split(".")[1]) == 3 and float(text) == pytest.approx(value, abs=5.001e-4)
    assert json.dumps(shown).count("first_token") >= 1 + 8 and not errors
    tab.close()
