"""Take a trained checkpoint apart causally: ablation, patching, logit lens, faithfulness, circuits.

    python -m transformer_lab.interpret ckpt_path=pretrained:reverse_2l4h analysis=heads
    python -m transformer_lab.interpret ckpt_path=<run> analysis=heads method=mean heads=0.1,1.2
    python -m transformer_lab.interpret ckpt_path=<run> analysis=patching position=0
    python -m transformer_lab.interpret ckpt_path=pretrained:shakespeare analysis=lens text="ROMEO: I"
    python -m transformer_lab.interpret ckpt_path=<run> analysis=faithfulness num_examples=32
    python -m transformer_lab.interpret ckpt_path=pretrained:key_reverse analysis=circuit method=eap
    python -m transformer_lab.interpret ckpt_path=<run> analysis=dynamics     # every measure over time
    python -m transformer_lab.interpret ckpt_path=<run> analysis=heads step=1000   # the snapshot nearest
    python -m transformer_lab.interpret ckpt_path=<folder of runs> analysis=controls   # their margins
    python -m transformer_lab.interpret sae=<SAE run> analysis=features              # an SAE's features

(`python scripts/interpret.py ...` in a checkout is the same.) Each analysis runs on the first
`num_examples` test examples of the checkpoint's task (or your own `text=`), prints its table, and writes
a figure and the numbers to `out_dir`:

    heads         heads.png, heads.json         accuracy with each attention head removed ([layers, heads])
    patching      patching.png, patching.json   share of the clean logit difference each patch restores
    lens          lens.png, lens.json           accuracy read at every layer (+ direct logit attribution)
    faithfulness  faithfulness.png, .json       deletion curves and their areas per explanation method
    circuit       circuit.png, .svg, .json      the edges (nodes) that carry the task, scored by a registered
                                                method (method=), faithfulness of the top-k (docs/circuits.md)
    dynamics      dynamics.png, dynamics.json   the measures of every snapshot of a run, and its phase changes
    controls      controls.json                 runs in which no phase change can appear (analysis.controls):
                                                their events and how near each came to one
    features      features.png, features.json   an SAE's features (sae=): density, top examples, the tokens
                                                each promotes, the loss when it is ablated (docs/features.md)

`step=N` runs an analysis on the snapshot of the run (ckpt_path=<run dir>) nearest step N.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from transformer_lab.cli import (
    ci_level,
    output_dir,
    parse_key_values,
    pick_device,
    prompts,
    run,
    starting,
    to_number,
    within_budget,
)
from transformer_lab.errors import as_config_error, require
from transformer_lab.files import write_figure, write_text

if TYPE_CHECKING:  # torch, matplotlib and the analyses load after the arguments are parsed (fast --help)
    from transformer_lab.checkpoint import Checkpoint

ANALYSES = ("heads", "patching", "lens", "faithfulness", "dynamics", "circuit", "controls", "features")
METHODS = ("zero", "mean")  # analysis.interventions.ABLATIONS, without importing torch to check it
ONLY_FOR = {  # the keys that apply to some analyses only
    "method": ("heads", "circuit"),
    "heads": ("heads",),
    **dict.fromkeys(("position", "clean", "corrupted", "answer", "wrong", "pairs"), ("patching", "circuit")),
    **dict.fromkeys(("metric", "ablation", "threshold", "steps", "verify"), ("circuit",)),
    "ci": ("heads", "patching", "lens", "faithfulness", "circuit"),
    "sae": ("features", "circuit"),
    "features": ("features",),
    "units": ("circuit",),
}
DEFAULT_EXAMPLES = {
    "heads": 512,
    "patching": 64,
    "lens": 512,
    "faithfulness": 16,
    "dynamics": 256,
    "circuit": 64,
    "controls": 256,
    "features": 256,
}


def _deletion_passes(model, inputs, labels) -> int:
    from transformer_lab.analysis.faithfulness import passes

    return passes(model, inputs, labels)


PASSES = {  # forward passes per example (model, inputs, labels) of the analyses fitting a time budget
    "heads": lambda model, *_: len(model.attention_layers()) * model.config.num_heads + 4,  # each head off
    "lens": lambda *_: 2,
    "faithfulness": _deletion_passes,  # each input deleted alone, each step of each method's curve
}
KEYS = {
    "ckpt_path": "checkpoint to analyse (required, but with sae=), e.g. <run>/checkpoints/best.ckpt",
    "analysis": "heads | patching | lens | faithfulness | dynamics | circuit | controls | features "
    "(required)",
    "out_dir": "where to write the figure and the JSON file (default interpret_out)",
    "num_examples": "how many test examples (default: heads 512, lens 512, features 256, patching 64 and "
    "faithfulness 16, or as many as fit 15 s on a laptop CPU; circuit 64, or as many as fit 60 s; dynamics "
    "256)",
    "method": "heads: zero | mean ablation (default zero); circuit: {circuit_methods} (default eap, or "
    "eap_ig with metric=kl)",  # the registry's methods when the help is shown: keys()
    "metric": "circuit: logit_diff | logprob | kl (default: logit_diff where the task has a corruption, "
    "logprob where it has none)",
    "ablation": "circuit: what an edge outside the circuit carries: corrupted | zero | mean (default "
    "corrupted)",
    "threshold": "circuit, method=acdc: a share of the metric's clean-corrupted gap (default 0.01)",
    "steps": "circuit, method=eap_ig: integrated-gradient steps (default 5)",
    "verify": "circuit: an estimate's top edges checked by exact patching (default 20; 0: none)",
    "heads": "heads: also ablate this set at once, layer.head pairs, e.g. heads=0.1,1.3",
    "position": "patching, circuit: the source position the corruption changes (default 0)",
    "clean": 'patching, circuit: a language model\'s clean prompt, e.g. clean="QUEEN:" (with corrupted=)',
    "corrupted": 'patching, circuit: the corrupted prompt, of as many tokens, e.g. corrupted="ROMEO:"',
    "answer": "patching, circuit: the next token the metric favours (default: the model's after clean=)",
    "wrong": "patching, circuit: the next token it disfavours (default: the model's after corrupted=)",
    "pairs": 'patching, circuit: a file of prompt pairs, a JSON object a line: {"clean", "corrupted", '
    '"answer", "wrong"}',
    "text": 'your own input instead of test examples, e.g. text="ROMEO: I" (its output as the task says)',
    "data_path": "the task's data file, if it reads one the package does not ship (your own text)",
    "device": "auto | cpu | cuda | mps (default auto)",
    "step": "run the analysis on the snapshot of the run (ckpt_path=<run dir>) nearest this step",
    "ci": "heads, patching, lens, faithfulness, circuit: the level of the intervals over examples "
    "(bootstrap; default 0.95; 0: none)",
    "sae": "features, circuit: an SAE run (python train.py experiment=sae ...), spliced into its model "
    "(ckpt_path= may name that model; default: the one the run records)",
    "features": "features: the features to show, e.g. features=3,17 (default: the 10 most active)",
    "units": "circuit: heads (the model's embeddings, heads and MLPs; default) | features (an SAE's "
    "features and its error term, with sae=)",
}


def keys() -> dict[str, str]:
    """KEYS with the circuit methods registered now (`analysis.circuits.METHODS`, read without torch)."""
    from transformer_lab.analysis.circuits import METHODS

    return KEYS | {"method": KEYS["method"].format(circuit_methods=" | ".join(METHODS.names()))}


def parse_args(argv: list[str] | None) -> dict[str, str]:
    args = parse_key_values(argv, keys(), __doc__)
    require(
        "ckpt_path" in args or "sae" in args,
        "missing ckpt_path=...; pass e.g. ckpt_path=<run>/checkpoints/best.ckpt (or sae=<SAE run>)",
    )
    analysis = args.get("analysis")
    require(analysis is not None, f"missing analysis=...; use analysis={' | '.join(ANALYSES)}")
    require(analysis in ANALYSES, f"analysis={analysis} is unknown; use analysis={' | '.join(ANALYSES)}")
    require(
        analysis != "features" or "sae" in args,
        "analysis=features reads an SAE's features: pass sae=<SAE run> (python train.py experiment=sae ...)",
    )
    require("sae" not in args or "step" not in args, "step= picks a snapshot of a model; an SAE run has none")
    if analysis == "circuit":
        from transformer_lab.interpret_circuit import check_args

        check_args(args)
    else:
        require(
            args.get("method", "zero") in METHODS,
            f"method={args.get('method')} is unknown; use zero or mean",
        )
    require(
        not ("step" in args and analysis in ("dynamics", "controls")),
        f"step= picks one snapshot; analysis={analysis} reads them all: leave step= out",
    )
    for key, only in ONLY_FOR.items():
        require(
            key not in args or analysis in only,
            f"{key}= is for analysis={' or '.join(only)}, not analysis={analysis}",
        )
    return args


def parse_heads(text: str) -> list[tuple[int, int]]:
    """`0.1,1.3` -> [(0, 1), (1, 3)]."""
    heads = []
    for pair in text.split(","):
        layer, dot, head = pair.strip().partition(".")
        require(
            bool(dot) and layer.isdigit() and head.isdigit(),
            f"heads={text} is not a list of layer.head pairs; write e.g. heads=0.1,1.3",
        )
        heads.append((int(layer), int(head)))
    return heads


def write(out_dir: Path, name: str, numbers: dict, figure) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(out_dir / f"{name}.json", json.dumps(numbers, indent=1) + "\n")
    write_figure(out_dir / f"{name}.png", figure)
    print(f"Wrote {name}.png and {name}.json to {out_dir}")


def analyse_heads(model, inputs, labels, task, args, out_dir: Path) -> None:
    """The ablation table (zero or mean), a set of heads removed at once, then every per-head measure of
    the registry (`analysis.measures`): heads.png (the ablation), measures.png, heads.json (both)."""
    from transformer_lab import figures
    from transformer_lab.analysis import interventions, measures

    method = args.get("method", "zero")
    heads = parse_heads(args["heads"]) if "heads" in args else []
    with as_config_error():
        interventions.check_heads(model, heads)
    result = interventions.ablate_heads(
        model, inputs, labels, method=method, level=ci_level(args, labels.size(0))
    )
    print(result.table())
    if model.language_model and result.losses:  # what ablation tables of language models report
        print(result.loss_table())
    for line in result.findings():
        print(line)
    numbers = result.to_dict()
    if heads:
        together = interventions.ablate_head_set(model, inputs, labels, heads, method=method)
        names = [interventions.head_label(result.layers[layer], head) for layer, head in heads]
        print(f"acc with {', '.join(names)} ablated together: {together:.3f}")
        numbers["set"] = {"heads": [list(pair) for pair in heads], "names": names, "acc": together}
    measured = measures.Heads(model, inputs, labels, task)
    if method == "zero":
        measured.cache["ablation"] = result  # the registry's ablation is this table: computed once
    chosen = measures.applicable(task)
    tables = measured.measure(chosen)
    for line in measures_table(tables, chosen, model):
        print(line)
    numbers["measures"] = tables
    numbers["measure_info"] = {
        m.name: {"direction": m.direction, "description": m.description} for m in chosen if m.name in tables
    }
    write(out_dir, "heads", numbers, figures.head_ablation(result))
    layers = [layer.label for layer in model.attention_layers()]
    title = f"Per-head measures on {inputs[0].size(0)} example(s)"
    write_figure(out_dir / "measures.png", figures.head_measures(tables, layers, title))
    print(f"Wrote measures.png to {out_dir}")


def measures_table(tables: dict, chosen: list, model) -> list[str]:
    """The per-head measures as text: what each is (and which way it moves as a head forms), then one row
    per head, one column per measure."""
    from transformer_lab.analysis import measures

    shown = [m for m in chosen if m.name in tables]
    width = max(len(m.name) for m in shown)
    lines = ["Per-head measures (rise/fall: which way each moves as a head forms):"]
    lines += [f"  {m.name:<{width}}  {m.direction:<4}  {m.description}" for m in shown]
    columns = [max(len(m.name), 7) for m in shown]
    lines.append("head   " + "  ".join(f"{m.name:>{w}}" for m, w in zip(shown, columns, strict=True)))
    rows: dict[str, list[str]] = {}
    for m, w in zip(shown, columns, strict=True):
        values = dict(measures.entries(tables[m.name], model))
        for layer in model.attention_layers():
            for head in range(model.config.num_heads):
                value = values.get(layer.head(head))
                cell = "-" if value is None else f"{value:.3f}"
                rows.setdefault(layer.head(head), []).append(f"{cell:>{w}}")
    lines += [f"{name:<6} " + "  ".join(cells) for name, cells in rows.items()]
    return lines


def analyse_patching(checkpoint: Checkpoint, count: int, args, out_dir: Path) -> None:
    from transformer_lab import figures
    from transformer_lab.analysis import interventions

    position = to_number(args, "position", int, 0)
    given = prompts(args)
    if given is None and "num_examples" not in args:  # as many pairs as their passes fit the time budget
        from transformer_lab.analysis.budget import FEWEST

        model = checkpoint.model
        (probe, _), (other, _) = checkpoint.patching_pairs(min(FEWEST, count), position, None)
        patched = probe[0].size(1) - interventions.unchanged_before(model, probe, other)  # positions
        blocks = sum(len(stack.blocks) for stack in model.stacks().values())
        streams = len(interventions.residual_hooks(model)) + blocks  # each residual stream, each MLP
        passes = 3 + len(interventions.attention_layers(model)) * model.config.num_heads + streams * patched
        count = within_budget(model, probe, count, passes, "analysis=patching")
    clean, corrupted = checkpoint.patching_pairs(count, position, given)
    with as_config_error():
        result = interventions.activation_patching(
            checkpoint.model, clean, corrupted, ci_level(args, clean[1].size(0))
        )
    if given is None:
        what = f"{count} pairs, source token {position} changed"
    else:
        ids, wrong = clean[1][:, -1].tolist(), corrupted[1][:, -1].tolist()
        tokens = checkpoint.task.display_tokens
        pair = (
            f"{tokens(ids[:1])[0]!r} over {tokens(wrong[:1])[0]!r}" if len(ids) == 1 else "answer over wrong"
        )
        what = f"{len(ids)} prompt pair{'s' * (len(ids) != 1)}, metric logit({pair}) at the last position"
    print(f"{what}: logit difference clean {result.clean:.2f}, corrupted {result.corrupted:.2f}")
    if result.chosen:
        print(
            f"(the corruption leaves the answer of {result.chosen} of {len(clean[1])} pairs as it was; their "
            "wrong answer is the corrupted run's most likely token other than the clean answer)"
        )
    print(
        "Share of it restored by patching (residual stream and MLP outputs: best position per layer; "
        "heads: per head):"
    )
    for name, row in (result.resid | result.mlp).items():
        best = max(range(len(row)), key=row.__getitem__)
        print(f"  {name:<36} position {best:>2}: {row[best]:6.2f}")
    bounds = result.head_intervals or [[None] * len(row) for row in result.heads]
    for layer, row, bound in zip(result.layers, result.heads, bounds, strict=True):
        cells = []
        for value, interval in zip(row, bound, strict=True):
            if interval is None:
                cells.append(f"{value:6.2f} ")
            else:
                low, high = interval
                cells.append(f"{value:6.2f} [{low:5.2f}, {high:5.2f}]{'~' if low <= 0 <= high else ' '}")
        print(f"  {layer:<36} " + " ".join(cells).rstrip())
    if result.head_intervals is not None:
        print(f"  ([its {result.level:.0%} interval over the pairs]; ~: 0 is in it, within noise)")
    title = f"Activation patching: {what}"
    write(
        out_dir,
        "patching",
        result.to_dict(),
        figures.activation_patching(result.resid, result.layers, result.heads, title, result.mlp),
    )


def analyse_lens(model, inputs, labels, names: list[str], args: dict, out_dir: Path, display=None) -> None:
    import torch

    from transformer_lab import figures
    from transformer_lab.analysis import lens
    from transformer_lab.nn import IGNORE_INDEX

    result = lens.lens_accuracy(model, inputs, labels, ci_level(args, labels.size(0)))
    readings_at = ["embedding"] + [f"after block {i}" for i in range(len(result.layers) - 1)]
    level = f" ({result.level:.0%} interval over examples)" if result.intervals else ""
    print(f"Accuracy and loss of the prediction read from the residual stream (logit lens){level}:")
    width = 22 if result.intervals else 9
    print(f"  {'':<15} {'accuracy':<{width}} loss")
    for i, (name, value, loss) in enumerate(zip(readings_at, result.layers, result.losses, strict=True)):
        cell = f"{value:.3f}"
        if result.intervals:
            cell += f" [{result.intervals[i][0]:.3f}, {result.intervals[i][1]:.3f}]"
        print(f"  {name:<15} {cell:<{width}} {loss:.3f}")
    numbers = result.to_dict()
    try:
        attribution = lens.direct_logit_attribution(model, inputs, labels)
    except ValueError as exc:
        print(f"(no direct logit attribution: {str(exc).split(';')[0]})")
    else:
        numbers["direct_logit_attribution"] = attribution
        top = sorted(attribution.items(), key=lambda item: -abs(item[1]))[:8]
        print("Direct contribution to the correct logit (largest first):")
        for name, value in top:
            print(f"  {name:<20} {value:+.3f}")
    # the figure: the first example, every layer's top token and the right token's probability
    labelled = (labels[0] != IGNORE_INDEX).nonzero()[:, 0][-48:]  # the last 48 labelled positions
    readings = lens.logit_lens(model, tuple(x[:1] for x in inputs), positions=labelled)
    right = labels[0, labelled]
    probability = torch.stack([r[0].softmax(-1)[torch.arange(len(right)), right] for r in readings])
    predicted = [[names[i] for i in r[0].argmax(-1).tolist()] for r in readings]
    ids = inputs[-1][0, labelled].tolist()
    tokens = display(ids) if display else [model.vocab[i] for i in ids]  # the task's display of its tokens
    title = f"Logit lens (accuracy by layer: {', '.join(f'{v:.2f}' for v in result.layers)})"
    write(out_dir, "lens", numbers, figures.logit_lens(probability, predicted, tokens, title))


def analyse_faithfulness(model, inputs, labels, args: dict, out_dir: Path) -> None:
    from transformer_lab import figures
    from transformer_lab.analysis import faithfulness

    with as_config_error():
        result = faithfulness.deletion_curves(model, inputs, labels, level=ci_level(args, labels.size(0)))
    print(result.table())
    title = f"Deletion curves ({result.outputs} outputs)"
    write(
        out_dir,
        "faithfulness",
        result.to_dict(),
        figures.deletion_curves(result.fractions, result.curves, result.auc, title),
    )


def analyse_dynamics(args: dict[str, str], count: int, out_dir: Path) -> None:
    """Every measure over a run's snapshots; over a folder of runs that differ by their seed (a sweep),
    each run's and its events over the seeds (`analysis.seeds`)."""
    from transformer_lab import snapshots
    from transformer_lab.analysis.dynamics import over_snapshots, spike_line
    from transformer_lab.analysis.seeds import over_seeds
    from transformer_lab.figures.dynamics import dynamics_figure, seeds_figure

    started = time.perf_counter()
    device, location = pick_device(args.get("device", "auto")), args["ckpt_path"]
    runs = snapshots.runs(location)
    if len(runs) < 2:
        result = over_snapshots(location, count, device, args.get("data_path"), progress=print)
        for line in result.summary():
            print(line)
        title = f"{location}: {len(result.steps)} snapshots"
        write(out_dir, "dynamics", result.to_dict(), dynamics_figure(result, title))
    else:
        require_one_setting(location, runs)
        results, seeds = {}, {run.name: seed for run in runs if (seed := run_seed(run)) is not None}
        for run in runs:
            print(f"run {run.name} (seed {seeds.get(run.name, 'unknown')}):")
            result = over_snapshots(str(run), count, device, args.get("data_path"), progress=print)
            last = ", ".join(f"{name} {values[-1]:.3g}" for name, (values, _) in result.curves().items())
            print(f"  at step {result.steps[-1]}: {last}")
            said = [*result.notes, *(f"step {e['halfway']:>8}: {e['what']}" for e in result.events)]
            if result.spikes:
                said.insert(0, spike_line(result.spikes))
            for line in said:
                print(f"  {line}")
            results[run.name] = result
        seeds_found = over_seeds(results, seeds)
        for line in seeds_found.summary():
            print(line)
        write(out_dir, "dynamics", seeds_found.to_dict(), seeds_figure(seeds_found, location))
    print(f"(dynamics took {time.perf_counter() - started:.1f} s)")


def analyse_controls(args: dict[str, str], count: int, out_dir: Path) -> None:
    """Every run under a folder (each a negative control, `analysis.controls`): its events and margins."""
    from transformer_lab import snapshots
    from transformer_lab.analysis import controls
    from transformer_lab.analysis.dynamics import over_snapshots

    started = time.perf_counter()
    device, location = pick_device(args.get("device", "auto")), args["ckpt_path"]
    runs = snapshots.runs(location)
    require(
        bool(runs),
        f"{location} holds no runs with snapshots; analysis=controls reads a folder of runs, one per control "
        "(docs/dynamics.md, the controls)",
    )
    order = {name: i for i, name in enumerate(controls.BY_NAME)}  # the library's order, then the others
    runs = sorted(runs, key=lambda run: (order.get(run.name, len(order)), run.name))
    results = {}
    for folder in runs:
        result = over_snapshots(str(folder), count, device, args.get("data_path"))
        known = controls.BY_NAME.get(folder.name)
        said = f" ({known.overrides}: {known.why})" if known else ""
        steps = f"{len(result.steps)} snapshots, steps {result.steps[0]} to {result.steps[-1]}"
        print(f"{folder.name}{said}: {steps}")
        results[folder.name] = result
    for line in controls.table(results):
        print(line)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "controls.json").write_text(json.dumps(controls.to_dict(results), indent=1) + "\n")
    print(f"Wrote controls.json to {out_dir}")
    print(f"(controls took {time.perf_counter() - started:.1f} s)")


def run_seed(run: Path) -> str | None:
    """The seed a run of a sweep was trained with (its `.hydra/config.yaml`), as text; None where it
    does not say (a folder of runs not made by train.py). Runs of a sweep are numbered by job, not by
    seed: `seed=1,0` makes run 0 the seed-1 run."""
    from transformer_lab import run_files

    if not (run / ".hydra" / "config.yaml").is_file():
        return None
    seed = run_files.config(run).get("seed")
    return None if seed is None else str(seed)


def require_one_setting(location: str, runs: list[Path]) -> None:
    """Runs summed up over seeds must differ by their seed alone (their command lines, `.hydra/
    overrides.yaml`, without `seed=`): a sweep over another setting is refused in one line."""
    from transformer_lab import run_files

    settings = {
        run.name: frozenset(o for o in run_files.overrides(run) if not o.startswith("seed="))
        for run in runs
        if (run / ".hydra" / "overrides.yaml").exists()
    }
    first, *others = settings.items() if settings else [("", frozenset())]
    other = next(((name, s) for name, s in others if s != first[1]), None)
    if other is not None:
        has = [
            ", ".join(sorted(a - b)) or "nothing else"
            for a, b in ((first[1], other[1]), (other[1], first[1]))
        ]
        require(
            False,
            f"the runs under {location} differ by more than their seed: run {first[0]} has {has[0]}, run "
            f"{other[0]} {has[1]}; analysis=dynamics over a folder sums up the seeds of one setting: point "
            "ckpt_path at a folder of such runs, or at one run",
        )


def analyse_features(run, count: int, args: dict[str, str], out_dir: Path) -> None:
    """An SAE's features on the first `count` test examples of its model's task: printed, features.json,
    features.png (`analysis.features`)."""
    from transformer_lab.analysis import features
    from transformer_lab.figures.features import feature_density

    chosen = None
    if "features" in args:
        parts = [p.strip() for p in args["features"].split(",")]
        require(
            all(p.isdigit() for p in parts),
            f"features={args['features']} is not a list of feature numbers; write e.g. features=3,17",
        )
        chosen = [int(p) for p in parts]
    if "text" in args:
        inputs, labels = run.source.text_example(args["text"])
    else:
        if "num_examples" not in args:  # a pass for the features, then one per feature ablated
            shown = len(chosen) if chosen else features.SHOWN
            from transformer_lab.analysis.budget import FEWEST

            probe, _ = run.source.examples(min(FEWEST, count))
            count = within_budget(run.model, probe, count, 1 + shown, "analysis=features")
        inputs, labels = run.source.examples(count, exact="num_examples" in args)
    with as_config_error():
        result = features.analyse_features(
            run.model,
            run.sae,
            inputs,
            labels,
            run.source.task.display_tokens,
            run.source.output_names,
            separator=run.source.tokenizer.separator,
            chosen=chosen,
        )
    print(f"sae={args['sae']} ({run.config.kind}) on {args['ckpt_path']}:")
    for line in result.table():
        print(line)
    ablations = {r.index: r.ablation for r in result.reports if r.ablation is not None}
    title = f"{args['sae']}: {run.config.width} features at {run.hook}"
    write(out_dir, "features", result.to_dict(), feature_density(result.density, title, ablations))


def interpret(args: dict[str, str]) -> None:
    out_dir = output_dir(args.get("out_dir", "interpret_out"), "out_dir")
    from transformer_lab.checkpoint import load

    analysis = args["analysis"]
    count = to_number(args, "num_examples", int, DEFAULT_EXAMPLES[analysis])
    require(
        count is not None and count > 0, f"num_examples={args.get('num_examples')} must be a positive integer"
    )
    if analysis == "dynamics":
        analyse_dynamics(args, count, out_dir)
        return
    if analysis == "controls":
        analyse_controls(args, count, out_dir)
        return
    if "step" in args:
        from transformer_lab import snapshots

        args["ckpt_path"] = snapshots.at_step(args["ckpt_path"], to_number(args, "step", int, None))
    device = pick_device(args.get("device", "auto"))
    run = None
    if "sae" in args:
        from transformer_lab.sae_checkpoint import load_sae

        run = load_sae(
            args["sae"], device=device, data_path=args.get("data_path"), source=args.get("ckpt_path")
        )
        checkpoint = run.source
        args.setdefault("ckpt_path", run.source.location)
    else:
        checkpoint = load(args["ckpt_path"], device=device, data_path=args.get("data_path"))
    model = checkpoint.model
    started = time.perf_counter()
    if analysis == "features":
        analyse_features(run, count, args, out_dir)
        print(f"({analysis} took {time.perf_counter() - started:.1f} s)")
        return
    if analysis == "patching":
        require(
            "text" not in args, "text= does not apply to patching, which needs the task's corrupted pairs"
        )
        analyse_patching(checkpoint, count, args, out_dir)
    elif analysis == "circuit":
        from transformer_lab.interpret_circuit import analyse_circuit

        require(
            "text" not in args, "text= does not apply to analysis=circuit, which needs the task's examples"
        )
        analyse_circuit(checkpoint, count, args, out_dir, run)
    else:
        if "text" in args:
            inputs, labels = checkpoint.text_example(args["text"])
            require(
                bool((labels != -100).any()),
                f"the task {checkpoint.task_name} cannot say what the output of text= should be, which "
                f"analysis={analysis} measures; use its test examples (num_examples=)",
            )
        else:
            if analysis in PASSES and "num_examples" not in args:  # as many as fit the time budget
                from transformer_lab.analysis.budget import FEWEST

                probe = checkpoint.examples(min(FEWEST, count))
                passes = PASSES[analysis](model, *probe)
                count = within_budget(model, probe[0], count, passes, f"analysis={analysis}")
            inputs, labels = checkpoint.examples(count, exact="num_examples" in args)
        if analysis == "heads":
            analyse_heads(model, inputs, labels, checkpoint.task, args, out_dir)
        elif analysis == "lens":
            analyse_lens(
                model, inputs, labels, checkpoint.output_names, args, out_dir, checkpoint.task.display_tokens
            )
        else:
            from transformer_lab.interpret_circuit import grade_explanations

            analyse_faithfulness(model, inputs, labels, args, out_dir)
            grade_explanations(checkpoint, args, inputs, labels, out_dir)  # an answer key's rows
    print(f"({analysis} took {time.perf_counter() - started:.1f} s)")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    starting(f"Loading {args.get('ckpt_path') or args.get('sae')} for analysis={args['analysis']}")
    interpret(args)


if __name__ == "__main__":
    run(main)
