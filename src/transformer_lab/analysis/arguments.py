"""What every analysis function accepts: a model or a loaded checkpoint, and its inputs as a tensor or a
tuple of tensors (an encoder-decoder's source and target), so the natural call works:

    interventions.ablate_heads(model, tokens, labels)              # a tensor
    interventions.ablate_heads(checkpoint, (source, target), labels)   # transformer_lab.load(...)
"""

from collections.abc import Sequence

from torch import Tensor

from transformer_lab.nn import TokenModel


def as_model(model: object) -> TokenModel:
    """The model itself, or the `.model` of a `transformer_lab.checkpoint.Checkpoint`."""
    model = getattr(model, "model", model)
    if not isinstance(model, TokenModel):
        raise TypeError(
            f"expected a model of transformer_lab.nn or a loaded checkpoint (transformer_lab.load(path)), "
            f"got {type(model).__name__}"
        )
    return model


def as_inputs(inputs: Tensor | Sequence[Tensor], model: TokenModel | None = None) -> tuple[Tensor, ...]:
    """The model inputs as a tuple: `tokens` -> `(tokens,)`; a tuple or list of tensors as it is. With
    `model`, their number is checked against what it takes (an encoder-decoder: source and target)."""
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    if not inputs or not all(isinstance(x, Tensor) for x in inputs):
        raise TypeError("inputs must be a tensor of token ids, or a tuple of them (source, target)")
    if model is not None and len(inputs) != model.num_inputs:
        what = "source and target" if model.reads_source else "one tensor of token ids"
        raise TypeError(f"this model takes {what} as inputs, got {len(inputs)} tensor(s)")
    return inputs
