"""`real_sizes`: every tool with its defaults at the size of the models people study.

A Pythia-70M-shaped and a SmolLM-135M-shaped model (the shapes of `families.SHAPES`: random weights,
float32, saved by `transformers` with a byte-level BPE of 2,000 tokens trained on Tiny Shakespeare, so the
vocabulary rows past it are padding, as a hub folder's are; no download), then each command as a user
types it, in a fresh process, on `hf:<folder>`: `interpret analysis=heads|lens|patching|faithfulness|circuit`
with their defaults, `train.py experiment=sae` at `blocks.3.hook_resid_post` for 200 steps and
`interpret analysis=features` on it, `train.py init_from=` for 50 steps of Tiny Shakespeare (batches of
8 windows of 128 tokens, a laptop's fine-tuning batch: the text task's 64 take 20 s a step here), and
`explore` with its defaults: each one's wall time and peak memory (its own RSS). For scale, in one
process per model: `transformers`' `from_pretrained` and this project's `hf:` load, each one's forward
pass of 4 x 128 tokens, and the tokens/s of this project's forward up to layer 3 (`run_with_cache(...,
stop_at_last=True)`, what an SAE reads), against which the SAE run's activations/s are set (target: within
2x). Targets on a quiet 2-core machine (issue 49): every analysis within 2 minutes and 2 GB on
Pythia-70M, within 4 minutes and 3 GB on SmolLM-135M. `analysis=dynamics` and `controls` read a run's
snapshots, which a folder of one set of weights has not. (--quick: Pythia-70M's vocabulary, 4 layers of
128, 20 SAE steps, 5 training steps.)
"""

import json
import subprocess
import sys
import time
from pathlib import Path

from bench_phases import Context, register
from bench_phases.common import QUICK, QUIET, ROOT, peak_rss_of, progress
from bench_phases.families import SHAPES

HOOK = "blocks.3.hook_resid_post"
SAE_BATCH = 1024  # data.batch_size of experiment=sae: activations per step
TUNE_BATCH = 8  # windows per step of the init_from= run
ANALYSES = ("heads", "lens", "patching", "faithfulness", "circuit")
LIMITS = {"pythia70m": (120.0, 2048.0), "smollm135m": (240.0, 3072.0)}  # seconds, MB: issue 49's targets
TOOLS = (*ANALYSES, "sae", "features", "init_from", "explore")

ROWS = [
    (f"real sizes: {n}, {tool} with its defaults (seconds, peak MB)", "{:.1f} s, {:.0f} MB",
     [f"real_{n}_{tool}_s", f"real_{n}_{tool}_mb"])
    for n in SHAPES for tool in TOOLS
] + [
    (f"real sizes: {n}, SAE activations/s at layer 3 / forward tokens/s to it", "{:.2f} ({:.0f} / {:.0f})",
     [f"real_{n}_sae_over_forward", f"real_{n}_sae_activations_per_s", f"real_{n}_forward_to_3_tokens_per_s"])
    for n in SHAPES
] + [
    (f"real sizes: {n}, load: hf: / from_pretrained (seconds)", "{:.2f} ({:.2f} s / {:.2f} s)",
     [f"real_{n}_load_ratio", f"real_{n}_load_s", f"real_{n}_load_theirs_s"])
    for n in SHAPES
]  # fmt: skip
TARGETS = {
    **{f"real_{name}_{tool}_s": ("<", LIMITS[name][0]) for name in SHAPES for tool in ANALYSES},
    **{f"real_{name}_{tool}_mb": ("<", LIMITS[name][1]) for name in SHAPES for tool in ANALYSES},
    **{f"real_{name}_sae_over_forward": (">=", 0.5) for name in SHAPES},
}

MAKE = """
import json, sys, torch, transformers
from pathlib import Path
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
folder, kind, arguments = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
tokenizer.train([sys.argv[4]], trainers.BpeTrainer(
    vocab_size=2000, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
torch.manual_seed(0)
config = getattr(transformers, kind)(**arguments, bos_token_id=0, eos_token_id=0)
transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
transformers.PreTrainedTokenizerFast(
    tokenizer_object=tokenizer, eos_token="<|endoftext|>", bos_token="<|endoftext|>").save_pretrained(folder)
"""

SCALE = """
import json, sys, time, torch, transformers
import transformer_lab
folder, hook = sys.argv[1], sys.argv[2]
ids = torch.randint(0, 2000, (4, 128), generator=torch.Generator().manual_seed(0))
def seconds(work):
    started = time.perf_counter(); work(); return time.perf_counter() - started
out = {}
with torch.no_grad():
    theirs, auto = [], transformers.AutoModelForCausalLM
    out["load_theirs_s"] = seconds(lambda: theirs.append(auto.from_pretrained(folder)))
    theirs[0](ids); out["forward_theirs_s"] = seconds(lambda: theirs[0](ids)); del theirs
    ours = []
    out["load_s"] = seconds(lambda: ours.append(transformer_lab.load("hf:" + folder).model))
    model = ours[0]; model(ids); out["forward_s"] = seconds(lambda: model(ids))
    up_to = lambda: model.run_with_cache(ids, names_filter=hook, stop_at_last=True)
    up_to(); out["forward_to_3_tokens_per_s"] = ids.numel() / min(seconds(up_to) for _ in range(3))
print(json.dumps(out))
"""


def run(command: list[str], log: Path, what: str) -> tuple[float, float]:
    """(wall seconds, peak MB) of `command` from the checkout; the phase stops if it fails."""
    started = time.perf_counter()
    status, peak = peak_rss_of(command, log)
    if status != 0:
        sys.exit(f"error: real_sizes: {what} failed (exit {status}): {log.read_text()[-2000:]}")
    return time.perf_counter() - started, peak


def bench_shape(context: Context, name: str, quick: bool) -> dict:
    """Build the folder of one shape, then every command on it (the module docstring)."""
    _, kind, arguments = SHAPES[name]
    small = {"num_hidden_layers": 4, "hidden_size": 128, "intermediate_size": 512, "num_attention_heads": 4}
    arguments = arguments | (small if quick else {})  # quick: layer 3 exists, the vocabulary as it is
    work = context.workdir / "real_sizes" / name
    folder = work / "model"
    progress(f"real_sizes: {name}: building the folder")
    text = ROOT / "data" / "tinyshakespeare" / "input.txt"
    shape = json.dumps(arguments)
    subprocess.run([sys.executable, "-c", MAKE, str(folder), kind, shape, str(text)], check=True)
    threads = [f"threads={context.threads}"] if context.threads else []  # train.py's; the tools take torch's
    out: dict = {}
    scale = subprocess.run(
        [sys.executable, "-c", SCALE, str(folder), HOOK], capture_output=True, text=True, check=True
    )
    for key, value in json.loads(scale.stdout).items():
        out[f"real_{name}_{key}"] = value
    out[f"real_{name}_load_ratio"] = out[f"real_{name}_load_s"] / out[f"real_{name}_load_theirs_s"]
    source = f"hf:{folder}"
    interpret = [sys.executable, "-m", "transformer_lab.interpret", f"ckpt_path={source}"]
    for analysis in ANALYSES:
        progress(f"real_sizes: {name}: interpret analysis={analysis}")
        command = [*interpret, f"analysis={analysis}", f"out_dir={work / analysis}"]
        out[f"real_{name}_{analysis}_s"], out[f"real_{name}_{analysis}_mb"] = run(
            command, work / f"{analysis}.log", analysis
        )
    steps = 20 if quick else 200
    progress(f"real_sizes: {name}: an SAE at {HOOK}, {steps} steps")
    timing = work / "sae_timing.json"
    out[f"real_{name}_sae_s"], out[f"real_{name}_sae_mb"] = run(
        [sys.executable, "train.py", "experiment=sae", f"source={source}", f"hook={HOOK}",
         f"trainer.max_steps={steps}", "trainer.limit_val_batches=0", "test=false",
         f"hydra.run.dir={work / 'sae'}",
         "+callbacks.fit_timer._target_=transformer_lab.training.callbacks.FitTimer",
         f"+callbacks.fit_timer.path={timing}", QUIET, *threads],
        work / "sae.log", "the SAE run",
    )  # fmt: skip
    fit = json.loads(timing.read_text())["fit_seconds"]
    out[f"real_{name}_sae_activations_per_s"] = steps * SAE_BATCH / fit
    out[f"real_{name}_sae_over_forward"] = (
        out[f"real_{name}_sae_activations_per_s"] / out[f"real_{name}_forward_to_3_tokens_per_s"]
    )
    progress(f"real_sizes: {name}: interpret analysis=features on it")
    out[f"real_{name}_features_s"], out[f"real_{name}_features_mb"] = run(
        [sys.executable, "-m", "transformer_lab.interpret", f"sae={work / 'sae'}", "analysis=features",
         f"out_dir={work / 'features'}"],
        work / "features.log", "analysis=features",
    )  # fmt: skip
    steps = 5 if quick else 50
    progress(f"real_sizes: {name}: train.py init_from=, {steps} steps")
    out[f"real_{name}_init_from_s"], out[f"real_{name}_init_from_mb"] = run(
        [sys.executable, "train.py", f"init_from={source}", "task=text", "data.block_size=128",
         f"data.batch_size={TUNE_BATCH}",
         f"trainer.max_steps={steps}", "trainer.limit_val_batches=0", "test=false",
         f"hydra.run.dir={work / 'tuned'}",
         QUIET, *threads],
        work / "init_from.log", "init_from=",
    )  # fmt: skip
    progress(f"real_sizes: {name}: explore")
    out[f"real_{name}_explore_s"], out[f"real_{name}_explore_mb"] = run(
        [sys.executable, "-m", "transformer_lab.explore", f"ckpt_path={source}", f"out={work / 'page.html'}"],
        work / "explore.log", "explore",
    )  # fmt: skip
    return out


@register("real_sizes", rows=ROWS, targets=TARGETS)
def bench_real_sizes(context: Context) -> dict:
    """Both shapes, or a small Pythia-70M-like one when quick (the module docstring)."""
    quick = context.mode is QUICK
    out: dict = {}
    for name in ("pythia70m",) if quick else tuple(SHAPES):
        out |= bench_shape(context, name, quick)
    return out
