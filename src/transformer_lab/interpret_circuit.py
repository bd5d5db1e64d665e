"""`python -m transformer_lab.interpret analysis=circuit`: find a checkpoint's circuit, evaluate it, draw it.

    python -m transformer_lab.interpret ckpt_path=pretrained:key_reverse analysis=circuit method=eap
    python -m transformer_lab.interpret ckpt_path=pretrained:shakespeare analysis=circuit position=1
    python -m transformer_lab.interpret ckpt_path=<run> analysis=circuit method=acdc threshold=0.02

On the first `num_examples` test examples and their corruption (the task's `corrupted_pairs`; `position=`
picks what it changes), `transformer_lab.analysis.circuits` scores every edge (pre-norm models) or node
(post-norm ones) with `method=` (a method of the registry, `analysis.circuits.METHODS`: the built-in ones
and any a module of your own registers), evaluates the top-k circuits and finds the smallest reaching 0.9
faithfulness. Writes circuit.json (method, metric, level, num_examples, seconds, nodes, edges,
node_scores, faithfulness, circuit, and answer_key_auc for a hand-built answer key), circuit.png and
circuit.svg (the layered graph and the faithfulness curve), and prints a summary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from transformer_lab.analysis.circuits import methods, options  # no torch: the registry and the choices
from transformer_lab.cli import to_number
from transformer_lab.errors import ConfigError, as_config_error

if TYPE_CHECKING:
    from transformer_lab.analysis.circuits.evaluation import Circuit
    from transformer_lab.checkpoint import Checkpoint

SHOWN = 8  # strongest edges (nodes) printed


def check_args(args: dict[str, str]) -> None:
    """The circuit's own arguments, before anything is loaded: the method against the registry (as it is
    when this runs: a method registered by a module of your own counts), the metric, the ablation and the
    options."""
    methods.require_method(args.get("method", "eap"), " for analysis=circuit")
    options.require_metric(args.get("metric", "logit_diff"))
    options.require_ablation(args.get("ablation", "corrupted"))
    options.require_threshold(to_number(args, "threshold", float, 0.01))
    options.require_steps(to_number(args, "steps", int, 5))


def _pairs(checkpoint: Checkpoint, count: int, args: dict[str, str], needs_corruption: bool) -> tuple:
    """(clean batch, corrupted batch or None)."""
    if not needs_corruption:
        return checkpoint.examples(count, exact="num_examples" in args), None
    position = to_number(args, "position", int, 0)
    try:
        return checkpoint.corrupted_pairs(count, position=position)
    except ConfigError as exc:
        if "defines no corruption" not in str(exc):
            raise
        raise ConfigError(
            f"the task {checkpoint.task_name} defines no corruption (inputs that differ in one token), which "
            "ablation=corrupted and metric=logit_diff need; use ablation=zero (or mean) metric=kl, or define "
            "corrupted_pairs in the task (docs/own_task.md)"
        ) from None


def _short(name: str) -> str:
    return name.replace("blocks.", "b").replace(".attn.head.", ".h").replace(".cross_attn.head.", ".xh")


def summary(result: Circuit, location: str) -> str:
    """What the analysis prints: what was measured, the strongest edges, the faithfulness, the circuit."""
    g = result.graph
    nodes = {n.name: n.label for n in g.nodes}
    what = "edges" if g.level == "edge" else "nodes"

    def label(name: str) -> str:  # `blocks.1.attn.head.0 -> blocks.2.attn.head.3.k` as `L1H0 -> L2H3.k`
        if " -> " in name:
            src, dst = name.split(" -> ")
            part = dst.rsplit(".", 1)[-1] if ".head." in dst else ""
            dst = dst.removesuffix(f".{part}") if part else dst
            return f"{nodes[src]} -> {nodes[dst]}{'.' + part if part else ''}"
        return nodes[name]

    lines = [
        f"{location}: method={result.method} metric={result.metric} ablation={result.ablation}, "
        f"{result.num_examples} examples; metric clean {result.clean_metric:.4g}, every {what[:-1]} patched "
        f"{result.ablated_metric:.4g}",
    ]
    if g.level == "node":
        lines.append(
            "node level: this model is post-norm (each block computes LN(x + f(x))), so its residual stream "
            "is not a sum of the components' outputs and edges are not defined; its circuit is a set of "
            "nodes (the embeddings, heads and MLPs)"
        )
    lines.append(f"Scored {g.units} {what} in {result.seconds:.2f} s; the strongest (change of the metric):")
    names = g.unit_names()
    order = result.scores.abs().argsort(descending=True, stable=True).tolist()
    width = max(len(label(names[i])) for i in order[:SHOWN])
    for i in order[:SHOWN]:
        lines.append(f"  {label(names[i]):<{width}}  {float(result.scores[i]):+.4f}")
    curve = ", ".join(f"{k}: {f:.2f}" for k, f in zip(result.sizes, result.curve, strict=True))
    lines.append(f"Faithfulness of the top-k {what} (k: faithfulness): {curve}; area {result.area:.3f}")
    if result.circuit is None:
        lines.append("No circuit of these reaches 0.9 faithfulness")
    else:
        units = result.circuit if g.level == "edge" else [g.scored.index(n) for n in result.circuit]
        members = [label(names[u]) for u in sorted(units, key=lambda u: -abs(float(result.scores[u])))]
        shown = ", ".join(members[:12]) + (", ..." if len(members) > 12 else "")
        lines.append(
            f"Smallest circuit reaching 0.9 faithfulness: {len(members)} {what}, strongest first ({shown})"
        )
    if result.kept is not None:
        lines.append(
            f"ACDC kept {int(result.kept.sum())} {what} (each other one moved the metric by less than "
            "the threshold)"
        )
    if result.answer_key_auc is not None:
        lines.append(f"Against the answer key's circuit: ROC AUC {result.answer_key_auc:.4f}")
    return "\n".join(lines)


def analyse_circuit(checkpoint: Checkpoint, count: int, args: dict[str, str], out_dir: Path) -> Circuit:
    """Score, evaluate, print and write (see the module docstring)."""
    from transformer_lab.analysis import circuits
    from transformer_lab.figures.circuits import circuit_graph
    from transformer_lab.pretrained import answer_keys

    check_args(args)
    method, ablation = args.get("method"), args.get("ablation", "corrupted")  # method: see discover
    metric = args.get("metric")
    clean, corrupted = _pairs(checkpoint, count, args, ablation == "corrupted" or metric == "logit_diff")
    key = answer_keys.key_for(args["ckpt_path"])
    with as_config_error():
        result = circuits.discover(
            checkpoint.model,
            *clean,
            corrupted,
            method=method,
            metric=metric,
            ablation=ablation,
            steps=to_number(args, "steps", int, 5),
            threshold=to_number(args, "threshold", float, 0.01),
            truth=key.circuit if key is not None and ablation == "corrupted" else None,  # its corruption's
        )
    print(summary(result, args["ckpt_path"]))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "circuit.json").write_text(json.dumps(result.to_dict(), indent=1) + "\n")
    title = f"{args['ckpt_path']}: {result.method} ({result.num_examples} examples, {result.metric})"
    figure = circuit_graph(result, title)
    for suffix in ("png", "svg"):
        figure.savefig(out_dir / f"circuit.{suffix}", dpi=100)
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
    path.write_text(json.dumps(numbers, indent=1) + "\n")
