"""to=onnx: any of the three models as one ONNX graph of its forward pass, for ONNX Runtime (apps, browsers).

    out/model.onnx   inputs `tokens` [batch, positions] (an encoder-decoder: `source` [batch, source
                     positions] and `target` [batch, target positions]), int64 token ids; output `logits`
                     [batch, positions, classes]. Batch and positions are dynamic axes (up to max_len).
    out/vocab.json   the token strings, by id

The graph is the model's `forward` (the padding mask and positions the model derives from the ids
included) on the hand-written attention path, traced by `torch.onnx.export` at opset 18 with the batch
and sequence axes left symbolic (TorchScript's tracer, in a second; torch.export's exporter where that
fails); generation (greedy, sampling, beam search) is a loop around it. The export is checked before it
is kept: ONNX Runtime's logits on inputs of other batch sizes and lengths than the traced ones must equal
PyTorch's to 1e-4 (`check`).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
from torch import Tensor

from transformer_lab.errors import ConfigError
from transformer_lab.interop import require_package
from transformer_lab.nn import TokenModel, evaluating

OPSET = 18
TOLERANCE = 1e-4


def input_names(model: TokenModel) -> list[str]:
    return ["source", "target"] if model.num_inputs == 2 else ["tokens"]


def sample_inputs(model: TokenModel, batch: int, length: int, seed: int = 0) -> tuple[Tensor, ...]:
    """Random token ids for each model input, [batch, length] (at most max_len; no padding token, and an
    encoder-decoder's target starting with <bos>), to trace and to check the graph with."""
    config = model.config
    length = min(length, config.max_len)
    generator = torch.Generator().manual_seed(seed)
    special = {i for i in (config.pad_id, config.bos_id, config.eos_id, config.sep_id) if i is not None}
    ordinary = torch.tensor([i for i in range(config.vocab_size) if i not in special] or [0])
    inputs = []
    for _ in range(model.num_inputs):
        ids = ordinary[torch.randint(len(ordinary), (batch, length), generator=generator)]
        inputs.append(ids)
    if model.num_inputs == 2:
        inputs[1][:, 0] = config.bos_id
    return tuple(inputs)


def session(path: Path) -> object:
    """An ONNX Runtime inference session of the file (CPU)."""
    ort = require_package("onnxruntime", "to=onnx")
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def run(path_or_session: Path | object, model: TokenModel, inputs: tuple[Tensor, ...]) -> Tensor:
    """The graph's logits for `inputs`."""
    runner = session(path_or_session) if isinstance(path_or_session, Path) else path_or_session
    feeds = {name: x.numpy() for name, x in zip(input_names(model), inputs, strict=True)}
    return torch.from_numpy(runner.run(["logits"], feeds)[0])


def export(model: TokenModel, out: Path) -> list[str]:
    """Write model.onnx and vocab.json to `out`, checked against PyTorch (the module docstring); the
    lines to print."""
    require_package("onnx", "to=onnx")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "model.onnx"
    names = input_names(model)
    traced = sample_inputs(model, batch=2, length=min(8, model.config.max_len))
    model = model.cpu()
    # every layer on the hand-written attention path (a pattern hook that changes nothing): the fused
    # kernel's `is_causal` is a Python bool of the sequence length, which a symbolic length cannot give
    explicit = [(lambda name: name.endswith("hook_pattern"), lambda pattern, hook: None)]
    with evaluating(model), torch.no_grad(), model.hooks(explicit), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporters' notes on shapes they specialise
        try:
            _trace(model, traced, names, path)
        except Exception:  # the tracer gone or failing: torch.export's exporter instead
            _dynamo(model, traced, names, path)
    difference = check(model, path)
    (out / "vocab.json").write_text(json.dumps(model.vocab, ensure_ascii=False) + "\n")
    shapes = ", ".join(f"{n} [batch, positions]" for n in names)
    return [
        f"Wrote {path} (opset {OPSET}; inputs {shapes}, output logits [batch, positions, "
        f"{model.config.output_classes}]) and vocab.json",
        "Checked with ONNX Runtime on other batch sizes and lengths than traced: logits equal PyTorch's "
        f"to {difference:.0e} (largest difference)",
        f"It reads at most {model.config.max_len} positions, the model's context: give it no more (the last "
        f"{model.config.max_len} tokens of a longer text)",
    ]


def _cumsum(g: object, x: object, dim: object, dtype: object = None) -> object:
    """aten::cumsum for ONNX, with a bool input counted as int64 (the padding-aware positions count the
    real tokens of a bool mask; ONNX's CumSum takes numbers only)."""
    from torch.onnx import symbolic_helper, symbolic_opset11

    if symbolic_helper._is_bool(x):
        x = g.op("Cast", x, to_i=7)  # TensorProto.INT64
    return symbolic_opset11.cumsum(g, x, dim, dtype)


def _trace(model: TokenModel, traced: tuple[Tensor, ...], names: list[str], path: Path) -> None:
    """TorchScript's tracing exporter (a second for these models), the batch and sequence axes dynamic."""
    axes = {name: {0: "batch", 1: f"{name}_positions"} for name in names}
    axes["logits"] = {0: "batch", 1: f"{names[-1]}_positions"}
    torch.onnx.register_custom_op_symbolic("aten::cumsum", _cumsum, OPSET)
    try:
        torch.onnx.export(
            model,
            traced,
            str(path),
            input_names=names,
            output_names=["logits"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    finally:
        torch.onnx.unregister_custom_op_symbolic("aten::cumsum", OPSET)


def _dynamo(model: TokenModel, traced: tuple[Tensor, ...], names: list[str], path: Path) -> None:
    """torch.export's exporter (tens of seconds; needs onnxscript), the axes as `torch.export.Dim`s."""
    require_package("onnxscript", "to=onnx")
    batch = torch.export.Dim("batch", min=1, max=1 << 16)
    shapes = tuple(
        {0: batch, 1: torch.export.Dim(f"{name}_positions", min=1, max=model.config.max_len)}
        for name in names
    )
    program = torch.onnx.export(
        model,
        traced,
        input_names=names,
        output_names=["logits"],
        dynamic_shapes=shapes,
        opset_version=OPSET,
        dynamo=True,
        optimize=False,
        verbose=False,
    )
    program.save(str(path))


def check(model: TokenModel, path: Path) -> float:
    """The largest difference between ONNX Runtime's and PyTorch's logits over a few batch sizes and
    lengths other than the traced ones; a ConfigError (the file removed) above `TOLERANCE`."""
    runner = session(path)
    worst = 0.0
    max_len = model.config.max_len
    for batch, length in ((1, max(1, min(3, max_len))), (3, max_len), (5, max(1, max_len // 2))):
        inputs = sample_inputs(model, batch, length, seed=batch)
        with evaluating(model), torch.no_grad():
            expected = model(*inputs)
        worst = max(worst, float((run(runner, model, inputs) - expected).abs().max()))
    if not worst <= TOLERANCE:
        path.unlink(missing_ok=True)
        raise ConfigError(
            f"to=onnx: ONNX Runtime's logits differ from PyTorch's by {worst:.2g} (more than {TOLERANCE}), "
            "so no model.onnx was kept; report it with the checkpoint's settings"
        )
    return worst
