"""scripts/bench.py (quick mode: every figure produced and positive, not the targets) and the speed
changes it measures: fused AdamW, training metrics logged only when written, eager-safe generation."""

import importlib
import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from tests.conftest import COMMON, compose_train_config, gpt_decoder, load_script, predictor_like, run_cli
from transformer_lab import TransformerPredictor
from transformer_lab.train import train

FIGURES = (
    "bare_tokens_per_s",
    "lightning_tokens_per_s",
    "lightning_over_bare",
    "bare_no_hooks_tokens_per_s",
    "hooks_over_no_hooks",
    "peak_gflops",
    "mfu",
    "gen_tokens_per_s_nocache",
    "gen_tokens_per_s_cache",
    "kv_speedup",
    "kv_speedup_block256",
    "reverse_seconds_to_100",
    "peak_rss_mb",
    "encdec_tokens_per_s_nocache",
    "encdec_tokens_per_s_cache",
    "encdec_cache_speedup",
    "sort_seconds",
    "end_to_end_over_loop",
    "end_to_end_fit_tokens_per_s",
    "end_to_end_step_tokens_per_s",
    "end_to_end_fit_seconds",
    "end_to_end_step_seconds",
    "end_to_end_validation_seconds",
    "end_to_end_startup_seconds",
    "end_to_end_after_fit_seconds",
    "end_to_end_snapshot_share",  # the snapshots callback, on by default: its hooks' share of the fit
    "end_to_end_snapshots",
    "circuit_eap_reverse_2l4h_s",
    "circuit_acdc_reverse_2l4h_s",
    "circuit_eap_shakespeare_s",
    "circuit_eap_ig_over_eap",
    "circuit_patching_shakespeare_mb",
    "circuit_checked_over_plain_shakespeare",  # verify= and ci= of the circuit analysis
    "text_small_peak_rss_mb",
    "text_fetch_share",
    "text_unspaced_peak_rss_mb",  # one line of letters without whitespace
    "ci_heads_ratio",
    "ci_patching_ratio",
    "ci_lens_ratio",
    "ci_faithfulness_ratio",
    *(
        f"family_{name}_{what}_ratio"
        for name in ("pythia70m", "smollm135m")
        for what in ("forward", "train_step", "generate", "hooks")
    ),
    "sae_on_the_fly_activations_per_s",
    "sae_cached_activations_per_s",
    "sae_large_cache_peak_rss_mb",
)

DECODER = dict(max_iters=10, weight_decay=0.1)  # the decoder config's weight decay; a 10-step schedule


@pytest.fixture(scope="module")
def bench():
    return load_script("bench")


@pytest.fixture(scope="module")
def phase(bench):
    """A phase's module of scripts/bench_phases/ by name (bench.py's import put scripts/ on the path)."""
    return lambda name: importlib.import_module(f"bench_phases.{name}")


@pytest.mark.reproduce
def test_quick_benchmark_produces_every_figure(tmp_path, bench):
    """Every phase but threads, whose busy-machine runs take half a minute even quick (its table is
    test_the_threads_table_says_where_a_second_thread_pays), the explorer, measured in-process by
    test_explorer_phase_measures_the_page, and real_sizes, two minutes of the tools' own commands on an
    hf: folder, each run by tests/test_families.py::test_the_tools_take_it_apart."""
    out = tmp_path / "bench.json"
    left_out = ("threads", "explorer", "real_sizes")
    phases = [phase for phase in bench.PHASES if phase not in left_out]
    # a minute a phase (each takes 5-40 s quick): a hang fails, a busy or slower machine does not
    args = ("scripts/bench.py", "--quick", "--phases", ",".join(phases), "--json", str(out))
    result = run_cli(*args, timeout=60 * len(phases))
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(out.read_text())
    for key in FIGURES:
        assert figures[key] > 0, key
    assert figures["reference_tokens_per_s"] > 0 and 0 <= figures["reverse_test_acc"] <= 1
    assert 0 <= figures["sort_test_seq_acc"] <= 1
    medians = ("lightning_over_bare", "lightning_over_reference", "mfu", "kv_speedup", "kv_speedup_block256")
    for key in medians:
        first, third = figures[f"{key}_quartiles"]  # the middle half of the rounds brackets the median
        assert 0 < first <= figures[key] <= third, key
    assert "| Lightning / bare loop |" in result.stdout
    for phase in ("training", "generation", "reverse", "encoder_decoder", "end_to_end"):
        assert f"[bench] {phase}" in result.stderr
    # the whole run: 20 steps of 12 x 64 tokens, validating every 10; the fit holds its training steps
    assert 0 < figures["end_to_end_over_loop"] <= 1 and figures["end_to_end_train_tokens"] == 20 * 12 * 64
    assert figures["end_to_end_validations"] == 2
    assert (
        figures["end_to_end_step_seconds"] + figures["end_to_end_validation_seconds"]
        <= (figures["end_to_end_fit_seconds"])
    )
    assert "AttentionMapCallback.on_validation_epoch_end" in figures["end_to_end_callback_seconds"]
    assert "| whole run: fit tokens/s over training-step tokens/s |" in result.stdout
    # the families against transformers compute one function (random weights through the mapping)
    assert (
        figures["family_pythia70m_logit_difference"] < 1e-4
        and figures["family_smollm135m_logit_difference"] < 1e-4
    )


def test_every_target_of_every_phase_is_one_the_table_can_check(bench):
    """Each phase's targets compare with an operator the report knows (a full run checks them all)."""
    from bench_phases import _PHASES

    for name in bench.PHASES:
        for key, (op, threshold) in _PHASES[name].targets.items():
            assert op in bench.COMPARISONS and isinstance(threshold, int | float), (name, key, op)


def test_the_threads_table_says_where_a_second_thread_pays(phase):
    """The threads phase's sizes, timed for real (a step of the smallest decoder with 1 and 2 threads),
    shown as the table performance.md copies."""
    threads = phase("threads")
    dim, layers, tokens, batch = threads.THREAD_SIZES[0]
    config = dict(model_dim=dim, num_layers=layers, num_heads=4, norm_first=True, output_mlp=False)
    before = torch.get_num_threads()
    one, two = (threads.step_seconds(config, tokens, batch, count, 2) for count in (1, 2))
    torch.set_num_threads(before)
    size = {"decoder": "d=32 L=1 T=16 B=128", "parameters": 12_833, "one_thread_s": one}
    table = threads.threads_table({"thread_sizes": [size | {"2_threads_s": two, "speedup": one / two}]})
    header, rule, row = table.splitlines()
    assert "step, 1 thread | step, 2 threads | speed-up" in header and rule.count("|") == 6
    assert row.startswith("| d=32 L=1 T=16 B=128 | 12,833 | ") and row.endswith(f"{one / two:.2f}x |")
    assert one > 0 and two > 0


def test_fit_timer_measures_the_fit_from_inside(tmp_path):
    path = tmp_path / "timing.json"
    overrides = [
        "+callbacks.fit_timer._target_=transformer_lab.training.callbacks.FitTimer",
        f"+callbacks.fit_timer.path={path}",
        "+trainer.profiler._target_=transformer_lab.training.callbacks.HookTimes",
    ]
    cfg = compose_train_config(tmp_path, *overrides, "trainer.max_epochs=2", "test=false")
    metrics = train(cfg)
    timing = json.loads(path.read_text())
    # 2 epochs of 256 / 32 = 8 batches of 32 sequences; the fit holds the steps and the two validations
    assert timing["train_steps"] == metrics["global_step"] == 16 and timing["validations"] == 2
    assert timing["train_tokens"] == 16 * 32 * cfg.data.seq_len
    assert 0 < timing["train_step_seconds"] < timing["fit_seconds"]
    assert timing["train_step_seconds"] + timing["validation_seconds"] <= timing["fit_seconds"]
    assert timing["fit_start_time"] < timing["fit_end_time"]
    hooks = timing["callback_seconds"]
    assert (
        "AttentionMapCallback.on_validation_epoch_end" in hooks
        and "BestCheckpoint.on_validation_end" in hooks
    )
    assert all(seconds >= 0 for seconds in hooks.values())


def test_help_and_bad_phase(bench, capsys):
    with pytest.raises(SystemExit) as info:
        bench.main(["--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0 and "--quick" in out and "--json" in out
    with pytest.raises(SystemExit) as info:
        bench.main(["--phases", "generation"])
    assert info.value.code == 2 and "generation needs training" in capsys.readouterr().err


def test_a_registered_phase_runs_and_reports(bench, capsys, tmp_path):
    """A phase is one function and one registration: --phases runs it with a scratch directory and the
    command line's mode, its rows join the table, its own table follows it, its figures the JSON."""
    from bench_phases import _PHASES, register
    from bench_phases.common import QUICK

    seen = {}

    def own_table(results: dict) -> str:
        return f"probe's own table: {results['probe_seconds']}"

    @register("probe", rows=[("probe: time", "{:.1f} s", ["probe_seconds"])], tables=(own_table,))
    def probe(context):
        seen.update(mode=context.mode, workdir=context.workdir.is_dir(), overrides=context.overrides)
        return {"probe_seconds": 0.5}

    try:
        results = bench.main(["--quick", "--phases", "probe", "--json", str(tmp_path / "b.json"), "a=1"])
    finally:
        del _PHASES["probe"]
    out = capsys.readouterr().out
    assert seen == {"mode": QUICK, "workdir": True, "overrides": ["a=1"]}
    assert "| probe: time | 0.5 s |  |  |" in out and "probe's own table: 0.5" in out
    assert results["probe_seconds"] == json.loads((tmp_path / "b.json").read_text())["probe_seconds"] == 0.5
    assert "| Lightning / bare loop |" not in out  # the phases not asked for do not run


def test_flops_per_token_follows_nanogpt(phase):
    # nanoGPT's shakespeare_cpu sizes: N = 12 L d^2 + vocab x d (tied head) without biases.
    n = 12 * 4 * 128**2 + 65 * 128
    training = phase("training")
    assert training.train_flops_per_token(n, 4, 128, 64) == 6 * n + 12 * 4 * 128 * 64
    model = predictor_like(gpt_decoder(65), **DECODER)
    positions = model.net.pos_embed.embedding.weight.numel()
    assert training.counted_params(model) == sum(p.numel() for p in model.parameters()) - positions


def test_fused_adamw_on_cpu_and_optional():
    assert predictor_like(gpt_decoder(65), **DECODER).configure_optimizers()["optimizer"].defaults["fused"]
    plain = predictor_like(gpt_decoder(65), **DECODER, fused_adamw=False).configure_optimizers()["optimizer"]
    assert not plain.defaults["fused"]


def test_training_metrics_are_computed_only_when_written(tmp_path, monkeypatch):
    calls = []
    original = TransformerPredictor.log_dict

    def counting(self, values, *args, **kwargs):
        calls.append(sorted(values))
        return original(self, values, *args, **kwargs)

    monkeypatch.setattr(TransformerPredictor, "log_dict", counting)
    # 256 / 32 = 8 training steps, written every 4th: 2 training log calls with every metric.
    metrics = train(compose_train_config(tmp_path, "trainer.log_every_n_steps=4", "test=false"))
    train_calls = [c for c in calls if c[0].startswith("train/")]
    assert train_calls == [["train/acc", "train/loss", "train/lr", "train/seq_acc"]] * 2
    assert metrics["global_step"] == 8 and "val/acc" in metrics


def test_generate_returns_an_ordinary_tensor():
    model = gpt_decoder(65)
    start = torch.zeros((1, 1), dtype=torch.long)
    out = model.generate(start, 20, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 21) and not out.is_inference() and model.training
    model(out[:, -16:]).sum().backward()  # usable as training input afterwards


@pytest.mark.slow
def test_compile_trains_like_eager(tmp_path):
    overrides = ["trainer.max_epochs=1", "test=false", *COMMON]
    eager = train(compose_train_config(tmp_path / "eager", *overrides))
    compiled = train(compose_train_config(tmp_path / "compiled", *overrides, "model.compile=true"))
    assert compiled["val/loss"] == pytest.approx(eager["val/loss"], rel=1e-3)


def test_compile_keeps_one_cache_per_kernel_set(monkeypatch, tmp_path):
    """torch.compile's cache is not keyed by ATEN_CPU_CAPABILITY (AVX2 code reloaded under `default` does not
    build): each kernel set gets a subfolder of it, once, however often a model is compiled."""
    from transformer_lab.training.predictor import _inductor_cache_per_kernel_set

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    _inductor_cache_per_kernel_set()
    _inductor_cache_per_kernel_set()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "aten_cpu_capability_default")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    _inductor_cache_per_kernel_set()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path)


def test_explorer_phase_measures_the_page(phase, tmp_path):
    """Phase 8 in its quick size (2 layers x 2 heads x 32 tokens): the page's size, and its render times
    where chromium and playwright are installed."""
    from bench_phases import Context
    from bench_phases.common import QUICK

    # its own thread: the suite's shared browser (conftest's `browser`) may hold this one's event loop
    with ThreadPoolExecutor(1) as thread:
        results = thread.submit(phase("explorer").bench_explorer, Context(QUICK, tmp_path)).result()
    assert 0 < results["explorer_mb"] < 5 and results["explorer_collect_seconds"] > 0
    if "explorer_render_ms" in results:
        assert 0 < results["explorer_render_ms"] < 10_000 and results["explorer_model_view_ms"] > 0
