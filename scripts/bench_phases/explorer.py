"""Phase 8 (`explorer`).

The attention explorer: the page of `scripts/explore.py` for an untrained encoder
of 8 layers x 8 heads over 256 tokens (the issue's large case; bidirectional maps compress least):
its size in MB (target < 5), the time to gather its data in Python, and in headless Chromium (when
`chromium` and playwright are installed) the time from the start of navigation to the first full
render (target < 1000 ms) and to draw the model view's 64 heatmaps, medians of 3 loads. (--quick: 2 x 2
over 32 tokens.) That page stores every map (`live=false`); a live page holds the model too, its
precomputed part under 5 MB and its weights under 20 MB. Then the live page of every ready-made
model: its size (precomputed part and weights), the time from navigation to the first drawn view and
to the model decoded and checked, and per update (an input edited in the box, the views redrawn:
`lastUpdateMs`; the forward pass alone: `forwardMs`) the median over 9 edits that change the first
token (a causal model recomputes every position; targets: reverse and sort < 50 ms, shakespeare over
its 64-character context < 100 ms) and over 9 that change the last (a causal model recomputes only
that position); the long input (512 tokens x 6 layers x 8 heads at model_dim 128: its precomputed
part, target < 5 MB, and weights, target < 20 MB; its first view, target < 2000 ms; its first live
update, in a Web Worker); and the parity sweep: 20 test inputs per ready-made model, the page's
logits and patterns against PyTorch's (largest difference, targets 1e-4 of the logits' scale and
1e-5) and its greedy outputs (share identical). (--quick: the first two ready-made models, 2 inputs
each, 64 tokens.)
"""

import statistics
import time
from pathlib import Path

import torch

from bench_phases import Context, Row, register
from bench_phases.common import Mode, progress
from transformer_lab import pretrained
from transformer_lab.nn import build_model


def _live_page_rows(name: str) -> list[Row]:
    """The rows of the live page of pretrained:<name>: its size, its first view, and an update after an
    edit of its first and of its last token."""
    return [
        (
            f"live page of pretrained:{name}: page / weights",
            "{:.2f} / {:.2f} MB",
            [f"explorer_page_mb_{name}", f"explorer_weights_mb_{name}"],
        ),
        (
            f"  {name}: first view / model decoded and checked, from navigation",
            "{:.0f} / {:.0f} ms",
            [f"explorer_first_view_ms_{name}", f"explorer_live_ms_{name}"],
        ),
        *[
            (
                f"  {name}: per update, {token} token edited (views / forward pass)",
                "{:.1f} / {:.1f} ms",
                [f"explorer_update_ms_{name}{suffix}", f"explorer_forward_ms_{name}{suffix}"],
            )
            for token, suffix in (("first", ""), ("last", "_last"))
        ],
    ]


ROWS = [
    (
        "explorer page (8 x 8 heads, 256 tokens; --quick: 2 x 2, 32), every map stored",
        "{:.2f} MB",
        ["explorer_mb"],
    ),
    ("explorer: data from the model (python)", "{:.1f} s", ["explorer_collect_seconds"]),
    ("explorer: first full render in Chromium, from navigation", "{:.0f} ms", ["explorer_render_ms"]),
    ("explorer: model view, all layer x head heatmaps", "{:.0f} ms", ["explorer_model_view_ms"]),
    *[row for name in pretrained.names() for row in _live_page_rows(name)],
    ("explorer parity sweep: logits, largest difference / their scale", "{:.1e}", ["explorer_parity_logits"]),
    ("explorer parity sweep: attention patterns, largest difference", "{:.1e}", ["explorer_parity_patterns"]),
    (
        "explorer parity sweep: greedy outputs identical (or parting at a tie)",
        "{:.0%}",
        ["explorer_parity_generation"],
    ),
    (
        "explorer long input (512 tokens x 6 x 8, d 128; --quick: 64): precomputed part, python",
        "{:.2f} MB, {:.1f} s",
        ["explorer_long_mb", "explorer_long_collect_seconds"],
    ),
    ("  long input: the model's weights and means in the page", "{:.2f} MB", ["explorer_weights_mb"]),
    ("  long input: first view, from navigation", "{:.0f} ms", ["explorer_long_first_view_ms"]),
    (
        "  long input: model decoded / first live update (worker = 1)",
        "{:.0f} / {:.0f} ms ({:.0f})",
        ["explorer_long_live_ms", "explorer_long_update_ms", "explorer_long_worker"],
    ),
]

TARGETS = {
    "explorer_mb": ("<", 5.0),
    "explorer_render_ms": ("<", 1000.0),
    "explorer_long_mb": ("<", 5.0),
    "explorer_weights_mb": ("<", 20.0),
    "explorer_update_ms_reverse": ("<", 50.0),
    "explorer_update_ms_sort": ("<", 50.0),
    "explorer_update_ms_shakespeare": ("<", 100.0),
    "explorer_long_first_view_ms": ("<", 2000.0),
    "explorer_parity_logits": ("<", 1e-4),
    "explorer_parity_patterns": ("<", 1e-5),
}


@register("explorer", rows=ROWS, targets=TARGETS)
def bench_explorer(context: Context) -> dict:
    """Phase 8: the explorer page's size for an untrained encoder of `mode.explorer_shape`, and its render
    times in headless Chromium (skipped, with a note, where chromium or playwright is missing); then the
    live pages of the ready-made models, the long input and the parity sweep (`bench_live_pages`)."""
    import shutil

    from transformer_lab.explorer import explore
    from transformer_lab.nn import ModelConfig

    mode, workdir = context.mode, context.workdir
    layers, heads, tokens = mode.explorer_shape
    progress(f"explorer: {layers} layers x {heads} heads x {tokens} tokens")
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=65, num_layers=layers, num_heads=heads, model_dim=128, max_len=tokens)
    model = build_model(config).eval()
    start = time.perf_counter()
    page = explore(model, torch.randint(0, 65, (tokens,)), title="bench", live=False)  # every map stored
    results = {
        "explorer_collect_seconds": time.perf_counter() - start,
        "explorer_mb": len(page.encode()) / 1e6,
    }
    path = page.save(workdir / "explorer.html")
    chromium = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        chromium = None
    if chromium is None:
        progress(
            "explorer: no chromium or playwright; render time not measured (apt-get install -y chromium)"
        )
        return results
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
    loads, model_views = [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=args)
        for _ in range(3):
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            tab.goto(path.resolve().as_uri())
            tab.wait_for_selector("body[data-ready='true']", timeout=60_000)
            loads.append(tab.evaluate("window.explorerLoadMs"))
            tab.click(".tab[data-view='model']")
            model_views.append(tab.evaluate("window.explorerTimings.model"))
            tab.close()
        results |= {
            "explorer_render_ms": statistics.median(loads),
            "explorer_model_view_ms": statistics.median(model_views),
        }
        results |= bench_live_pages(mode, workdir, browser)
        browser.close()
    return results


def _open_live(browser, path: Path):
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    tab.goto(path.resolve().as_uri())
    tab.wait_for_selector("body[data-live='true']", timeout=120_000)
    return tab


def _edit_timings(tab, tokens: list[str], separator: str, symbols: list[str], position: int) -> tuple:
    """Median lastUpdateMs and forwardMs over 9 edits of the token at `position` (after one warm-up)."""
    updates, forwards = [], []
    for k in range(10):
        edited = list(tokens)
        edited[position] = (
            symbols[k % len(symbols)] if symbols[k % len(symbols)] != tokens[position] else symbols[-1]
        )
        tab.evaluate("(text) => window.transformerLab.setInput(text)", separator.join(edited))
        if k:
            updates.append(tab.evaluate("window.transformerLab.lastUpdateMs"))
            forwards.append(tab.evaluate("window.transformerLab.forwardMs"))
    return statistics.median(updates), statistics.median(forwards)


def bench_live_pages(mode: Mode, workdir: Path, browser) -> dict:
    """The live page of every ready-made model (sizes, first view, decode, per-update times), the long
    input, and the parity sweep of the page's forward pass against PyTorch."""
    from transformer_lab.checkpoint import load
    from transformer_lab.explorer import explore
    from transformer_lab.explorer.live import same_or_tied
    from transformer_lab.nn import ModelConfig, evaluating

    results: dict = {}
    worst_logits, worst_patterns, same, generated = 0.0, 0.0, 0, 0
    for name in pretrained.names()[: mode.explorer_models]:
        progress(f"explorer: live page of pretrained:{name}")
        checkpoint = load(f"pretrained:{name}")
        model = checkpoint.model
        inputs, labels = checkpoint.without_padding(*checkpoint.example(0))
        page = explore(checkpoint, inputs, labels, title=name)
        results[f"explorer_page_mb_{name}"] = len(page.encode()) / 1e6
        results[f"explorer_weights_mb_{name}"] = page.weight_chars / 1e6
        tab = _open_live(browser, page.save(workdir / f"{name}.html"))
        results[f"explorer_first_view_ms_{name}"] = tab.evaluate("window.explorerLoadMs")
        results[f"explorer_live_ms_{name}"] = tab.evaluate("window.transformerLab.readyMs")
        box = tab.evaluate("document.getElementById('input-box').value")
        separator = checkpoint.tokenizer.separator
        tokens = checkpoint.tokenizer.split(box)
        specials = {model.config.pad_id, model.config.bos_id, model.config.eos_id, model.config.sep_id}
        symbols = [t for i, t in enumerate(model.vocab) if i not in specials and t not in ("\n", " ")]
        for where, position in (("", 0), ("_last", len(tokens) - 1)):
            update, forward = _edit_timings(tab, tokens, separator, symbols, position)
            results[f"explorer_update_ms_{name}{where}"] = update
            results[f"explorer_forward_ms_{name}{where}"] = forward
        # the parity sweep: test inputs, the page's forward pass against PyTorch's
        for index in range(mode.explorer_sweep):
            x, _ = checkpoint.without_padding(*checkpoint.example(index))
            given = (
                x[0][0].tolist() if len(x) == 1 else {"source": x[0][0].tolist(), "target": x[1][0].tolist()}
            )
            got = tab.evaluate("(x) => window.transformerLab.forward(x)", given)
            with evaluating(model):
                logits, cache = model.run_with_cache(*x, names_filter=lambda n: n.endswith("hook_pattern"))
            scale = float(logits.abs().max())
            worst_logits = max(
                worst_logits, float((torch.tensor(got["logits"]) - logits[0]).abs().max()) / scale
            )
            for layer, page_pattern in zip(model.attention_layers(), got["patterns"], strict=True):
                pattern = cache[f"{layer.name}.hook_pattern"][0]
                worst_patterns = max(
                    worst_patterns, float((torch.tensor(page_pattern) - pattern).abs().max())
                )
            if model.generates:
                if model.num_inputs == 2:
                    expected = model.answer(x[0])[0].tolist()
                    page_out = tab.evaluate("(s) => window.transformerLab.answer(s)", x[0][0].tolist())
                else:
                    prompt = x[0][:, :8]
                    expected = model.generate(prompt, 32, temperature=0)[0].tolist()
                    page_out = tab.evaluate(
                        "(p) => window.transformerLab.generate(p, {maxNewTokens: 32})", prompt[0].tolist()
                    )
                source = x[0] if model.num_inputs == 2 else None
                same += same_or_tied(model, expected, page_out, source)
                generated += 1
        tab.close()
    results["explorer_parity_logits"] = worst_logits
    results["explorer_parity_patterns"] = worst_patterns
    if generated:
        results["explorer_parity_generation"] = same / generated
    # the long input: 512 tokens x 6 layers x 8 heads at model_dim 128
    length = mode.explorer_long
    progress(f"explorer: the long input, {length} tokens x 6 layers x 8 heads")
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=65, num_layers=6, num_heads=8, model_dim=128, max_len=length)
    long_model = build_model(config).eval()
    start = time.perf_counter()
    page = explore(long_model, torch.randint(0, 65, (length,)), title="long input")
    results["explorer_long_collect_seconds"] = time.perf_counter() - start
    results["explorer_long_mb"] = (len(page.encode()) - page.weight_chars) / 1e6  # the precomputed part
    results["explorer_weights_mb"] = page.weight_chars / 1e6
    path = page.save(workdir / "long.html")
    views, ready, updates = [], [], []
    for _ in range(3):
        tab = _open_live(browser, path)
        views.append(tab.evaluate("window.explorerLoadMs"))
        ready.append(tab.evaluate("window.transformerLab.readyMs"))
        text = tab.evaluate("document.getElementById('input-box').value").split()
        text[0] = "1" if text[0] != "1" else "2"
        tab.evaluate("(t) => window.transformerLab.setInput(t)", " ".join(text))
        updates.append(tab.evaluate("window.transformerLab.lastUpdateMs"))
        results["explorer_long_worker"] = float(tab.evaluate("window.transformerLab.worker"))
        tab.close()
    results["explorer_long_first_view_ms"] = statistics.median(views)
    results["explorer_long_live_ms"] = statistics.median(ready)
    results["explorer_long_update_ms"] = statistics.median(updates)
    return results
