"""`python -m transformer_lab.interpret analysis=circuit`: find a checkpoint's circuit, check it, evaluate it,
draw it.

    python -m transformer_lab.interpret ckpt_path=pretrained:key_reverse analysis=circuit method=eap
    python -m transformer_lab.interpret ckpt_path=pretrained:shakespeare analysis=circuit position=1
    python -m transformer_lab.interpret ckpt_path=<run> analysis=circuit method=acdc threshold=0.02
    python -m transformer_lab.interpret sae=<SAE run> analysis=circuit units=features

On the first `num_examples` test examples and their corruption (the task's `corrupted_pairs`; `position=`
picks what it changes), `transformer_lab.analysis.circuits` scores every edge (pre-norm models) or node
(post-norm ones) with `method=` (a method of the registry, `analysis.circuits.METHODS`: the built-in ones
and any a module of your own registers), checks an estimate's top `verify=` units by exact patching,
evaluates the top-k circuits and finds the smallest reaching 0.9 faithfulness, with intervals over the
examples (`ci=`). Writes circuit.json (method, metric, level, num_examples, seconds, nodes, edges,
node_scores, faithfulness, circuit, verified, warnings, node_totals, ci, and answer_key_auc for a
hand-built answer key), circuit.png and circuit.svg (the layered graph and the faithfulness curve), and
prints a summary. The defaults (method=eap, or eap_ig with metric=kl; metric=logit_diff where the task
has a corruption, logprob where it has none) are said when used; what was asked for is done, or refused.
With `units=features` and `sae=<SAE run>`, the units are the SAE's features active on the examples (clean
or corrupted) and its error term, in the model with the SAE spliced in (`circuits.feature_graph`: node
level).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from transformer_lab.analysis.circuits import methods, options  # no torch: the registry and the choices
from transformer_lab.cli import ci_level, prompts, to_number, within_budget
from transformer_lab.errors import ConfigError, as_config_error
from transformer_lab.files import write_figure, write_text

if TYPE_CHECKING:
    from transformer_lab.analysis.circuits.evaluation import Circuit
    from transformer_lab.checkpoint import Checkpoint
    from transformer_lab.nn import TokenModel
    from transformer_lab.sae_checkpoint import SAECheckpoint

SHOWN = 8  # strongest edges (nodes) printed, and nodes in the per-node totals
SHOWN_VERIFIED = 20  # at most this many verified edges printed (every one is in circuit.json)
UNITS = ("heads", "features")  # the model's components (embeddings, heads, MLPs), or an SAE's features
SECONDS = 60.0  # a default circuit analysis's time budget on a laptop CPU (analysis.budget)
SCORING_PASSES = (
    30  # forward passes per example besides verify= (measured: scripts/bench.py --phases real_sizes)
)


def check_args(args: dict[str, str]) -> None:
    """The circuit's own arguments, before anything is loaded: the method against the registry (as it is
    when this runs: a method registered by a module of your own counts), the metric, the ablation and the
    options."""
    methods.require_method(args.get("method", "eap"), " for analysis=circuit")
    options.require_metric(args.get("metric", "logit_diff"))
    options.require_ablation(args.get("ablation", "corrupted"))
    options.require_threshold(to_number(args, "threshold", float, 0.01))
    options.require_steps(to_number(args, "steps", int, 5))
    options.require_verify(to_number(args, "verify", int, options.VERIFY))
    units = args.get("units", "heads")
    if units not in UNITS:
        raise ConfigError(f"units={units} is unknown; use units=heads or units=features (with sae=)")
    if (units == "features") != ("sae" in args):
        raise ConfigError(
            "units=features reads an SAE's features: pass sae=<SAE run>"
            if units == "features"
            else "sae= with analysis=circuit finds a circuit of its features: add units=features"
        )


def sized(model: TokenModel, checkpoint: Checkpoint, count: int, args: dict[str, str]) -> tuple[int, int]:
    """(examples, verify=) of a circuit analysis: what was asked for, or defaults that fit `SECONDS` at the
    cost `analysis.budget` estimates from the model's size, each pass of `SCORING_PASSES` (scoring, the
    faithfulness curve and the search on it) and one per verified unit: first fewer examples (down to
    `budget.FEWEST`), then fewer units verified. Each choice said in a line."""
    from transformer_lab.analysis.budget import FEWEST, seconds_per_example

    verify = to_number(args, "verify", int, options.VERIFY)
    if "num_examples" in args or prompts(args) is not None:
        return count, verify
    if methods.METHODS[args.get("method", "eap")].exact:  # checks nothing; a pass per unit, refused if long
        verify = 0
    probe, _ = checkpoint.examples(min(FEWEST, count))
    sets = "num_examples= and verify= set them"
    count = within_budget(model, probe, count, SCORING_PASSES + verify, "analysis=circuit", SECONDS, sets)
    passes = int(SECONDS / (seconds_per_example(model, probe) * count))  # what the budget holds
    if "verify" not in args and verify and passes < SCORING_PASSES + verify:
        fewer = max(0, passes - SCORING_PASSES)
        print(f"analysis=circuit: verify={fewer}, not {verify} (one pass of the {count} examples per unit "
              f"checked by exact patching; {sets})")  # fmt: skip
        verify = fewer
    return count, verify


def _pairs(checkpoint: Checkpoint, count: int, args: dict[str, str]) -> tuple:
    """(clean batch, corrupted batch or None): the corruption where the ablation or the metric needs it,
    or where no metric is given (logit_diff, the default with a corruption; logprob without one)."""
    ablation, metric = args.get("ablation", "corrupted"), args.get("metric")
    needs = ablation == "corrupted" or metric == "logit_diff"
    if not needs and metric is not None:
        return checkpoint.examples(count, exact="num_examples" in args), None
    position = to_number(args, "position", int, 0)
    try:
        return checkpoint.patching_pairs(count, position, prompts(args))
    except ConfigError as exc:
        if "defines no corruption" not in str(exc):
            raise
        if not needs:
            return checkpoint.examples(count, exact="num_examples" in args), None
        raise ConfigError(
            f"the task {checkpoint.task_name} defines no corruption (inputs that differ in one token), which "
            "ablation=corrupted and metric=logit_diff need; use ablation=zero (or mean) with metric=logprob "
            "or metric=kl, or define corrupted_pairs in the task (docs/own_task.md)"
        ) from None


def _short(name: str) -> str:
    return name.replace("blocks.", "b").replace(".attn.head.", ".h").replace(".cross_attn.head.", ".xh")


def _interval(bounds: Sequence[float]) -> str:
    """` [lo, hi]`, and `~` when 0 is in it (a difference within noise)."""
    low, high = bounds
    return f" [{low:+.4f}, {high:+.4f}]{'~' if low <= 0 <= high else ''}"


def _defaults(result: Circuit) -> list[str]:
    chosen = {"method": result.method, "metric": result.metric}
    given = [f"{name}={chosen[name]}" for name in result.defaults]
    if not given:
        return []
    keys = " and ".join(f"{name}=" for name in result.defaults)
    verb = "are the defaults" if len(given) > 1 else "is the default"
    return [f"{' and '.join(given)} {verb} here ({keys} choose{'s' if len(given) == 1 else ''} otherwise)"]


def _corrupted_answers(result: Circuit, names: Sequence[str] | None) -> list[str]:
    """The one line naming the corrupted answers the corrupted run chose (logit_diff, answers kept)."""
    if result.corrupted_answers is None:
        return []
    answers = result.corrupted_answers.tolist()
    common = Counter(answers).most_common(3)
    shown = ", ".join(f"{(names[t] if names else str(t))!r} {n}x" for t, n in common)
    return [
        f"metric=logit_diff: the corruption leaves the answer of {len(answers)} of {result.num_examples} "
        "examples as it was; their corrupted answer is the corrupted run's most likely token other than "
        f"the clean answer (most often {shown})"
    ]


def _table(result: Circuit, label: Callable[[str], str], names: list[str]) -> list[str]:
    """The strongest units by the method's score, with the exact effect beside the verified ones, and
    each number's interval."""
    what = "edges" if result.graph.level == "edge" else "nodes"
    check, bounds = result.check, result.intervals
    verified = [] if check is None else check.units
    order = result.scores.abs().argsort(descending=True, stable=True).tolist()
    shown = order[: max(SHOWN, min(len(verified), SHOWN_VERIFIED))]
    said = f"Scored {result.graph.units} {what} in {result.seconds:.2f} s"
    if check is not None:
        said += f"; verified the top {len(verified)} by exact patching in {check.seconds:.2f} s"
    ci = f"; [its {bounds.level:.0%} interval over the examples], ~ where 0 is in it" if bounds else ""
    lines = [f"{said}; the strongest (change of the metric{ci}):"]
    rows = []
    for u in shown:
        cell = f"{float(result.scores[u]):+.4f}"
        if bounds is not None and bounds.scores is not None:
            cell += _interval(bounds.scores[u].tolist())
        row = [label(names[u]), cell]
        if u in verified:
            k = verified.index(u)
            exact = f"{float(check.exact[k]):+.4f}"
            row.append(exact + (_interval(bounds.exact[k].tolist()) if bounds is not None else ""))
        rows.append(row)
    if check is not None:
        rows.insert(0, [what[:-1], result.method, "exact"])
    widths = [max(len(row[i]) for row in rows if len(row) > i) for i in range(3 if check else 2)]
    lines += [
        "  " + "  ".join(f"{c:<{w}}" for c, w in zip(row, widths, strict=False)).rstrip() for row in rows
    ]
    if len(verified) > len(shown):
        lines.append(f"  ... and {len(verified) - len(shown)} more verified {what} in circuit.json")
    return lines


def summary(result: Circuit, location: str, names: Sequence[str] | None = None) -> str:
    """What the analysis prints: what was measured, the strongest edges (their exact effects and
    intervals), the disagreements, the per-node totals, the faithfulness, the circuit. `names`: the
    model's output names (to name the corrupted answers it chose)."""
    g = result.graph
    nodes = {n.name: n.label for n in g.nodes}
    what = "edges" if g.level == "edge" else "nodes"

    readers = {reader.name: reader for reader in g.readers}

    def label(name: str) -> str:  # `blocks.1.attn.head.0 -> blocks.2.attn.head.3.k` as `L1H0 -> L2H3.k`
        if " -> " in name:
            src, dst = name.split(" -> ")
            reader = readers[dst]
            if reader.group:  # a key-value head's input (grouped-query attention): `L2KV1.k`
                layer = g.nodes[reader.node].label.rsplit("H", 1)[0]
                return f"{nodes[src]} -> {layer}KV{reader.head}.{dst.rsplit('.', 1)[-1]}"
            part = dst.rsplit(".", 1)[-1] if ".head." in dst else ""
            dst = dst.removesuffix(f".{part}") if part else dst
            return f"{nodes[src]} -> {nodes[dst]}{'.' + part if part else ''}"
        return nodes[name]

    lines = [
        f"{location}: method={result.method} metric={result.metric} ablation={result.ablation}, "
        f"{result.num_examples} examples; metric clean {result.clean_metric:.4g}, every {what[:-1]} patched "
        f"{result.ablated_metric:.4g}",
        *_defaults(result),
        *_corrupted_answers(result, names),
    ]
    if g.features:
        lines.append(
            "units=features: each node is a feature of the SAE (patched: its activation replaced) or its "
            "error term, in the model with the SAE spliced in; a circuit of them is a set of nodes"
        )
    elif g.level == "node":
        lines.append(
            "node level: this model is post-norm (each block computes LN(x + f(x))), so its residual stream "
            "is not a sum of the components' outputs and edges are not defined; its circuit is a set of "
            "nodes (the embeddings, heads and MLPs)"
        )
    unit_names = g.unit_names()
    lines += _table(result, label, unit_names)
    lines += [f"warning: {d.text(label(unit_names[d.unit]), result.method)}" for d in result.disagreements]
    if g.level == "edge":
        totals = [t for t in result.node_totals() if t[1] or t[2]]
        totals = sorted(totals, key=lambda t: -max(abs(t[1]), abs(t[2])))[:SHOWN]
        shown = ", ".join(f"{g.nodes[n].label} {into:+.4f} / {out:+.4f}" for n, into, out in totals)
        by = "effects" if result.check is not None else "scores"
        lines.append(f"Per node, the {by} of its edges summed (into it / out of it): {shown}")
    ranked = "|effect| (the exact one where verified; " if result.check is not None else "|score| ("
    ranked = (
        ranked.replace("(", "(each circuit pruned of its dangling edges; ", 1)
        if g.level == "edge"
        else ranked
    )
    curve = ", ".join(f"{k}: {f:.2f}" for k, f in zip(result.sizes, result.curve, strict=True))
    lines.append(
        f"Faithfulness of the top-k {what} by {ranked}k: faithfulness): {curve}; area {result.area:.3f}"
    )
    if result.circuit is None:
        lines.append("No circuit of these reaches 0.9 faithfulness")
    else:
        lines.append(_circuit_line(result, label, unit_names, what))
    lines += _alone_line(result, label, unit_names, what)
    if result.kept is not None:
        lines.append(
            f"ACDC kept {int(result.kept.sum())} {what} (each other one moved the metric by less than "
            "the threshold)"
        )
    if result.intervals is not None:
        lines.append(
            f"Intervals: {result.intervals.resamples} bootstrap resamples of the examples, in "
            f"{result.intervals.seconds:.2f} s"
        )
    if result.answer_key_auc is not None:
        lines.append(f"Against the answer key's circuit: ROC AUC {result.answer_key_auc:.4f}")
    return "\n".join(lines)


def _circuit_line(result: Circuit, label: Callable[[str], str], names: list[str], what: str) -> str:
    """The smallest circuit: its size (the top units it was chosen from and the dangling ones pruned),
    its faithfulness and interval (and whether that interval holds 0.9), its members held across their
    interval strongest first, and apart the uncertain units (see `_members`)."""
    g, bounds = result.graph, result.intervals
    units = result.circuit if g.level == "edge" else [g.scored.index(n) for n in result.circuit]
    size = f"{len(units)} {what}"
    if result.pruned:
        dangling = ", ".join(label(names[u]) for u in result.pruned)
        size += (
            f" (the top {result.smallest} by |effect|, {len(result.pruned)} of them pruned: on no path from "
            f"the inputs to the logits within the circuit: {dangling})"
        )
    elif g.level == "edge":
        size += f" (the top {result.smallest} by |effect|, every one on a path from the inputs to the logits)"
    faithful = f"faithfulness {result.circuit_faithfulness():.3f}"
    if bounds is not None:
        low, high = bounds.faithfulness[result.smallest]
        faithful += f" [{low:.3f}, {high:.3f}]"
        if low < FAITHFUL_SHOWN:
            faithful += f" (its interval holds {FAITHFUL_SHOWN}: whether it reaches it is uncertain)"
    return f"Smallest circuit reaching {FAITHFUL_SHOWN} faithfulness: {size}, {faithful}; " + _members(
        result, units, label, names
    )


FAITHFUL_SHOWN = 0.9  # evidence.FAITHFUL, without importing torch here


def _members(result: Circuit, units: list[int], label: Callable[[str], str], names: list[str]) -> str:
    """The circuit's members strongest first; with intervals, only those held by at least the level's
    share of the resamples' circuits (stability), and apart the uncertain: members held by fewer, and
    units outside it held by more than the rest of the resamples."""
    effects, bounds = result.effects, result.intervals
    members = sorted(units, key=lambda u: -abs(float(effects[u])))

    def said(chosen: list[int], limit: int = 12) -> str:
        shown = chosen[:limit]
        text = ", ".join(
            label(names[u])
            + ("" if bounds is None or bounds.stability is None else f" {float(bounds.stability[u]):.2f}")
            for u in shown
        )
        return text + (", ..." if len(chosen) > limit else "")

    if bounds is None or bounds.stability is None:
        return f"strongest first: {said(members)}"
    stability, level = bounds.stability, bounds.level
    held = [u for u in members if float(stability[u]) >= level]
    shaky = [u for u in members if float(stability[u]) < level]
    outside = sorted(
        (u for u in range(len(stability)) if u not in set(units) and float(stability[u]) > 1 - level),
        key=lambda u: -float(stability[u]),
    )
    line = (
        f"held by at least {level:.0%} of the resamples' circuits (each with its stability, the share "
        f"that holds it), strongest first: {said(held) or 'none'}"
    )
    if shaky or outside:
        parts = [f"in it, {said(shaky)}"] if shaky else []
        parts += [f"not in it, {said(outside)}"] if outside else []
        line += f"; uncertain (held by {1 - level:.0%} to {level:.0%} of them): {'; '.join(parts)}"
    return line


def _alone_line(result: Circuit, label: Callable[[str], str], names: list[str], what: str) -> list[str]:
    """With verify=: what the method's own ranking alone would have chosen, beside the circuit built from
    the exact effects of its top units (methods compared by what they alone find)."""
    from transformer_lab.analysis.circuits.evaluation import area

    alone, g = result.alone, result.graph
    if alone is None:
        return []
    if alone.circuit is None:
        return [
            f"{result.method} alone (its own ranking, no exact check): no circuit reaches {FAITHFUL_SHOWN}"
        ]
    units = alone.circuit if g.level == "edge" else [g.scored.index(n) for n in alone.circuit]
    units = sorted(units, key=lambda u: -abs(float(result.scores[u])))
    mine = set(
        result.circuit_units() if g.level == "edge" else [g.scored.index(n) for n in result.circuit or []]
    )
    same = "the same" if set(units) == mine else f"{len(set(units) & mine)} of them in the circuit above"
    shown = ", ".join(label(names[u]) for u in units[:12]) + (", ..." if len(units) > 12 else "")
    return [
        f"{result.method} alone (its own ranking, no exact check) would have chosen {len(units)} {what} "
        f"(the top {alone.smallest}), faithfulness {alone.faithfulness:.3f} ({same}), strongest first: "
        f"{shown}; "
        f"area of its curve {area(alone.sizes, alone.curve, g.units):.3f}"
    ]


def active_features(run: SAECheckpoint, *batches: tuple) -> list[int]:
    """The features of an SAE run that fire somewhere on the batches (inputs, labels) given."""
    import torch

    point = f"{run.hook}.sae.hook_sae_acts_post"
    fired = torch.zeros(run.sae.width, dtype=torch.bool)
    for inputs, _ in batches:
        _, cache = run.model.run_with_cache(*inputs, names_filter=point)
        fired |= (cache[point].flatten(0, -2) > 0).any(0).cpu()
    return fired.nonzero()[:, 0].tolist()


def analyse_circuit(
    checkpoint: Checkpoint, count: int, args: dict[str, str], out_dir: Path, run: SAECheckpoint | None = None
) -> Circuit:
    """Score, check, evaluate, print and write (see the module docstring); `run`: an SAE run whose
    features are the units (units=features)."""
    from transformer_lab.analysis import circuits
    from transformer_lab.figures.circuits import circuit_graph
    from transformer_lab.pretrained import answer_keys

    check_args(args)
    ablation = args.get("ablation", "corrupted")
    count, verify = sized(checkpoint.model if run is None else run.model, checkpoint, count, args)
    clean, corrupted = _pairs(checkpoint, count, args)
    key = answer_keys.key_for(args["ckpt_path"]) if run is None else None
    model, graph = checkpoint.model, None
    if run is not None:
        model = run.model
        chosen = active_features(run, clean, *([corrupted] if corrupted is not None else []))
        graph = circuits.feature_graph(model, run.hook, chosen)
        print(
            f"units=features: the {len(chosen)} features of {args['sae']} active on these examples, and its "
            "error"
        )
    with as_config_error():
        result = circuits.discover(
            model,
            *clean,
            corrupted,
            method=args.get("method"),  # None: the default, said in the output
            metric=args.get("metric"),
            ablation=ablation,
            steps=to_number(args, "steps", int, 5),
            threshold=to_number(args, "threshold", float, 0.01),
            truth=key.circuit if key is not None and ablation == "corrupted" else None,  # its corruption's
            verify=verify,
            ci=ci_level(args, clean[-1].size(0)),
            graph=graph,
        )
    print(summary(result, args["ckpt_path"], checkpoint.output_names))
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(out_dir / "circuit.json", json.dumps(result.to_dict(), indent=1) + "\n")
    title = f"{args['ckpt_path']}: {result.method} ({result.num_examples} examples, {result.metric})"
    figure = circuit_graph(result, title)
    for suffix in ("png", "svg"):
        write_figure(out_dir / f"circuit.{suffix}", figure)
    print(f"Wrote circuit.png, circuit.svg and circuit.json to {out_dir}")
    return result


def grade_explanations(
    checkpoint: Checkpoint, args: dict[str, str], inputs: tuple, labels, out_dir: Path
) -> None:
    """analysis=faithfulness on a hand-built answer key: also how well each explanation ranks the input
    positions the key is built to read (ROC AUC), printed and added to faithfulness.json."""
    from transformer_lab.analysis import faithfulness
    from transformer_lab.pretrained import answer_keys

    if answer_keys.key_for(args["ckpt_path"]) is None:
        return
    alignment = checkpoint.task.alignment(inputs, labels)
    with as_config_error():
        grades = faithfulness.alignment_auc(checkpoint.model, inputs, labels, alignment)
    print("Against the answer key: ROC AUC of the input positions it reads (1: ranked first, 0.5: chance):")
    for method, value in sorted(grades.items(), key=lambda item: -item[1]):
        print(f"  {method:<10} {value:.3f}")
    path = out_dir / "faithfulness.json"
    numbers = json.loads(path.read_text()) if path.is_file() else {}
    numbers["answer_key_auc"] = grades
    write_text(path, json.dumps(numbers, indent=1) + "\n")
