"""Circuits: which paths through the model carry a task, found automatically and then checked.

A circuit is a small subgraph of the model's computational graph: the edges (or, in a post-norm model,
the nodes) that carry the task from a clean input to its answer, against a corruption that changes the
answer. One concept per file:

    graph.py        the graph: nodes (embeddings, heads, MLPs, logits), the inputs they read, the edges;
                    or an SAE's features and its error term (feature_graph: node level)
    metrics.py      the metric M a circuit is scored and evaluated by (logit_diff, logprob, kl), per example
    patcher.py      running the model with any sets of units patched at once; `prepare` makes the Setup
    options.py      what an analysis is asked for (metric, ablation, a method's Options), `Scores`
    methods.py      the registry: a method is one function and one registration (`register`, METHODS)
    eap.py          edge attribution patching: a first-order estimate, every edge from one backward pass
    eap_ig.py       the same with the gradient integrated from the corrupted input to the clean one
    patching.py     exact: one patched pass per edge, the reference the estimates are compared to
    acdc.py         greedy pruning from the logits backwards
    attribution.py  what eap and eap_ig share: the gradients and the first-order change
    evidence.py     every answer with its evidence: an estimate's top units checked by exact patching
                    (verify=), the disagreements warned of, intervals over the examples and stability (ci=)
    evaluation.py   `discover`: the scores, their check, the faithfulness curve, the smallest circuit, the
                    intervals, the answer key's ROC AUC

    from transformer_lab.analysis import circuits
    result = circuits.discover(model, inputs, labels, (corrupted_inputs, corrupted_labels), method="eap")

A new method is one function `(setup, options) -> Scores` and `@circuits.register(name, description)`,
in this package or in a module of your own (methods.py shows one): `interpret analysis=circuit method=`,
`discover` and the answer keys' grading read the registry when they run. Everything runs in eval mode,
leaves no hook behind and never changes a weight.

Names are imported on first use: `import transformer_lab.analysis.circuits` loads no torch, so the
command line reads the registry (`METHODS.names()`) before it loads a model.
"""

import importlib

from transformer_lab.analysis.circuits.graph import (
    LEVELS,
    Graph,
    Node,
    Reader,
    feature_graph,
    graph,
    is_pre_norm,
)
from transformer_lab.analysis.circuits.methods import BUILT_IN, METHODS, Method, register, require_method
from transformer_lab.analysis.circuits.options import (
    ABLATIONS,
    MAX_STEPS,
    METRICS,
    VERIFY,
    Options,
    Scores,
    require_ablation,
    require_metric,
    require_steps,
    require_threshold,
    require_verify,
)

_LAZY = {  # the modules that load torch, and the names they give the package
    "metrics": ("Metric", "make_metric"),
    "patcher": (
        "MAX_REPLICAS", "Batch", "Patcher", "Setup", "node_outputs", "prepare", "replicas_for",
        "require_time",
    ),
    "evidence": ("Check", "Disagreement", "Intervals", "disagreements", "ranks", "resample", "verify"),
    "evaluation": (
        "FAITHFUL", "Circuit", "area", "circuit_faithfulness", "discover", "faithfulness", "ranking",
        "roc_auc", "run_method", "score", "score_acdc", "score_eap", "score_eap_ig", "score_patching",
        "sizes_for", "smallest_circuit", "truth_mask",
    ),
}  # fmt: skip
_HOMES = {name: module for module, names in _LAZY.items() for name in names}

__all__ = [
    "ABLATIONS", "BUILT_IN", "LEVELS", "MAX_STEPS", "METHODS", "METRICS", "VERIFY", "Graph", "Method",
    "Node", "Options", "Reader", "Scores", "feature_graph", "graph", "is_pre_norm", "register",
    "require_ablation", "require_method", "require_metric", "require_steps", "require_threshold",
    "require_verify", *_HOMES,
]  # fmt: skip


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
