"""The one self-contained HTML page: page.html with explorer.css, the JavaScript modules and the data inlined.

Nothing on the page comes from the network: the styles, the scripts and the numbers (as JSON, with the
matrices packed by `pack.py` and, on a live page, the model's weights packed by `live.py`) are all in the
file, so it opens from disk, offline, in any current browser, and can be mailed. `ExplorerPage` is that
HTML as a `str` that Jupyter shows inline.
"""

import html
import json
import re
from dataclasses import asdict
from importlib import resources
from pathlib import Path

from transformer_lab.explorer.collect import ExplorerData
from transformer_lab.explorer.pack import LEVELS, pack, pack_within
from transformer_lab.files import write_atomically

MARKER = re.compile(r"<!--explorer:(title|css|model|js|data)-->")
# The page's JavaScript, in the order it is inlined: each file adds one part to the namespace
# `TransformerLab` and may use what the files before it define (see state.js). MODEL_SCRIPTS are the
# model (no DOM): the page's `<script id="model-js">`, whose text is also the source of the Web Worker
# that runs large models; PAGE_SCRIPTS are the page: its state, views, input box, fragment and API.
MODEL_SCRIPTS = [
    "erf.js",
    "layers.js",
    "weights.js",
    "model.js",
    "analyses.js",
    "checks.js",
    "tokenizer.js",
    "sae.js",
    "runner.js",
]
PAGE_SCRIPTS = [
    "state.js",
    "util.js",
    "heatmap.js",
    "view_head.js",
    "view_model.js",
    "view_overlays.js",
    "view_ablation.js",
    "view_predictions.js",
    "view_patching.js",
    "view_features.js",
    "export.js",
    "views.js",
    "engine.js",
    "input.js",
    "live.js",
    "fragment.js",
    "api.js",
    "main.js",
]
FORMAT_VERSION = 2
# Characters for the attention maps: with the rest of the page (about 0.3 MB for 256 tokens) the file
# stays under 5 MB; maps that do not fit at 255 levels per row are stored with fewer (pack.pack_within).
ATTENTION_BUDGET = 4_200_000


class ExplorerPage(str):
    """The explorer's HTML. In Jupyter (or VS Code, JupyterLab) it displays inline, in an iframe whose
    `srcdoc` is the page, so the page's own CSS and JavaScript run isolated from the notebook's (several
    explorers in one notebook each have their own). `live_note`: why a page asked to be live is not."""

    live_note: str | None = None
    steps: int = 0  # the checkpoints of the step slider (0: none)
    weight_chars: int = 0  # what the model's weights (and means) take in a live page

    def _repr_html_(self) -> str:
        return (
            f'<iframe srcdoc="{html.escape(str(self), quote=True)}" '
            'style="width: 100%; height: 760px; border: 1px solid #ddd; border-radius: 4px" '
            'title="attention explorer"></iframe>'
        )

    def save(self, path: str | Path) -> Path:
        """Write the page to `path` (see `write_page`)."""
        return write_page(self, path)


def payload(
    data: ExplorerData,
    title: str,
    budget: int | None = None,
    live: dict | None = None,
    live_note: str | None = None,
    features: dict | None = None,
) -> dict:
    """The page's JSON: everything the page's scripts read (state.js describes it). The attention maps
    take at most `budget` characters (default ATTENTION_BUDGET; see `pack.pack_within`). `live`: the
    model for the page to run (`live.live_payload`); `live_note`: why a page asked to be live is not.

    `features`: an SAE's, for the features view (`features.features_payload`). A live page whose maps
    do not fit at full precision stores only each kind's last layer (the first
    view: `first` names it), as precise as fits: the page computes every layer itself once its model
    runs. A precomputed page stores every layer, as coarse as it must."""
    budget = budget or ATTENTION_BUDGET
    arrays = [kind.maps for kind in data.kinds]
    first = [0] * len(arrays)
    maps = pack_within(arrays, budget)
    if live is not None and maps[0]["levels"] < LEVELS[0]:
        first = [len(a) - 1 for a in arrays]
        maps = pack_within([a[-1:] for a in arrays], budget)
    kinds = [
        {key: value for key, value in asdict(kind).items() if key != "maps"}
        | {"maps": packed, "first": start}
        for kind, packed, start in zip(data.kinds, maps, first, strict=True)
    ]
    overlays = [
        {"name": o.name, "title": o.title, "vmax": o.vmax, "matrix": pack(o.matrix)} for o in data.overlays
    ]
    return {
        "version": FORMAT_VERSION,
        "title": title,
        "arch": data.arch,
        "summary": data.summary,
        "notes": data.notes,
        "kinds": kinds,
        "overlays": {
            "kind": data.overlay_kind,
            "rows": data.overlay_rows,
            "cols": data.overlay_cols,
            "xlabel": "source token (input)" if data.overlay_kind == "cross" else "input token",
            "items": overlays,
        },
        "predictions": {
            "kinds": data.prediction_kinds,
            "reads_title": "reads" if "self" in data.prediction_kinds else "reads (output so far)",
            "rows": [asdict(p) for p in data.predictions],
        },
        "ablation": asdict(data.ablation) if data.ablation is not None else None,
        "measures": data.measures,
        "live": live,
        "live_note": live_note,
        "features": features,
    }


def _asset(name: str) -> str:
    return resources.files("transformer_lab.explorer").joinpath(name).read_text(encoding="utf-8")


def scripts(names: list[str]) -> str:
    """The JavaScript files `names`, in that order, as the text of one inline <script>, without their
    whole-line comments (`without_comment_lines`: the files explain the code, the page carries it).
    None may hold `</script` (it would end the element early)."""
    texts = []
    for name in names:
        text = _asset(name)
        if "</script" in text.lower():
            raise ValueError(f"{name} must not contain '</script' (it would end the inline script)")
        texts.append(without_comment_lines(text, name))
    return "\n".join(texts)


def without_comment_lines(text: str, name: str = "script") -> str:
    """`text` without blank lines and whole-line comments: a line that starts with `//`, and a `/* ... */`
    block that starts a line and ends one. A comment that shares a line with code stays, and so does that
    line. (The page's scripts have no template literal spanning lines, which this would misread; a test
    holds them to it.)"""
    kept, inside = [], False
    for line in text.split("\n"):
        stripped = line.strip()
        if inside:
            if "*/" in stripped:
                if not stripped.endswith("*/") or stripped.count("*/") > 1:
                    raise ValueError(f"{name}: code after a block comment on its last line: {line.strip()!r}")
                inside = False
        elif stripped.startswith("/*") and not (stripped.endswith("*/") and stripped.count("*/") == 1):
            if "*/" in stripped:
                kept.append(line)  # `/* ... */ code`: the line stays
            else:
                inside = True
        elif stripped and not stripped.startswith(("//", "/*")):
            kept.append(line)
    return "\n".join(kept)


def _script_safe_json(value: dict) -> str:
    """JSON that cannot end the <script> element it sits in: <, > and & only ever occur inside JSON
    strings, where \\u escapes mean the same characters."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render(
    data: ExplorerData,
    title: str,
    live: dict | None = None,
    live_note: str | None = None,
    features: dict | None = None,
) -> ExplorerPage:
    """page.html with its five markers replaced in one pass: the title, the CSS, the model's and the
    page's JavaScript (MODEL_SCRIPTS, PAGE_SCRIPTS) and the data. Each marker must occur exactly once in
    the template."""
    template = _asset("page.html")
    parts = {
        "title": html.escape(title),
        "css": _asset("explorer.css"),
        "model": scripts(MODEL_SCRIPTS),
        "js": scripts(PAGE_SCRIPTS),
        "data": _script_safe_json(payload(data, title, live=live, live_note=live_note, features=features)),
    }
    found = MARKER.findall(template)
    if sorted(found) != sorted(parts):
        raise ValueError(f"page.html must hold each explorer marker once, found {found}")
    return ExplorerPage(MARKER.sub(lambda m: parts[m.group(1)], template))


def write_page(page: str, path: str | Path) -> Path:
    """Write the page to `path` all at once (`files.write_atomically`): an interrupted or failed write
    never leaves a partial page behind."""
    return write_atomically(path, lambda f: f.write(page.encode("utf-8")))
