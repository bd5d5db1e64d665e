"""Hook points: named places in the forward pass where activations can be read or replaced.

Every model of this package has identity modules (`HookPoint`) at the places an interpretability
researcher looks: the embeddings, each block's residual stream, the attention's queries, keys, values,
pattern and per-head outputs, the MLP's hidden activation, the final norm. With nothing attached they
return their input unchanged. `HookedModule` gives a model the TransformerLens-style way in:

    logits, cache = model.run_with_cache(tokens)               # every activation, by name
    cache["blocks.0.attn.hook_pattern"]                        # [B, H, T_query, T_key]
    logits = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_z", fn)])
    model.hook_names()                                         # every name, in forward order

A hook function is `fn(activation, hook) -> Tensor | None`: returning a tensor replaces the activation
for the rest of the pass, returning None leaves it as it was. `hook.name` is the hook point's name.
Hooks are removed when the call returns, also when it raises.
"""

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

import torch
from torch import Tensor, nn

HookFn = Callable[[Tensor, "HookPoint"], Tensor | None]
NameFilter = str | Callable[[str], bool]


class HookName(NamedTuple):
    """A hook point's name taken apart: `decoder.blocks.1.cross_attn.hook_z` is stack `decoder`, block 1,
    module `cross_attn`, hook `hook_z`; `hook_embed` is stack "", block None, module "", hook `hook_embed`."""

    stack: str  # "", or `encoder` / `decoder` in an encoder-decoder
    block: int | None  # the block's index in its stack; None outside the blocks
    module: str  # the module inside the block (`attn`, `cross_attn`, `mlp`, ...), "" for the block's own
    hook: str  # the hook point itself, `hook_...`


def parse_hook_name(name: str) -> HookName:
    """The one parser of hook names (and of module names such as `blocks.0.attn`, whose hook is "")."""
    parts = name.split(".")
    stack = parts.pop(0) if parts[0] in ("encoder", "decoder") else ""
    block = None
    if parts[:1] == ["blocks"] and len(parts) > 1 and parts[1].isdigit():
        block = int(parts[1])
        parts = parts[2:]
    hook = parts.pop() if parts and parts[-1].startswith("hook_") else ""
    return HookName(stack, block, ".".join(parts), hook)


AUTOGRAD = {
    "off": torch.no_grad,  # what the analyses use: no graph is kept
    "inference": torch.inference_mode,  # faster still (generation); what it makes stays out of autograd
    "keep": contextlib.nullcontext,  # as the caller has it
}


@contextmanager
def evaluating(model: nn.Module, autograd: str = "off") -> Iterator[None]:
    """Eval mode for the duration of a `with` block, the model's mode restored afterwards: the one way
    every analysis and generation runs a model. `autograd`: "off" (no graph), "inference"
    (torch.inference_mode), "keep" (as the caller has it), or "on" (gradients with respect to
    activations, also inside Lightning's validation, which runs under inference mode)."""
    was_training = model.training
    model.eval()
    try:
        if autograd == "on":
            with torch.inference_mode(False), torch.enable_grad():
                yield
        else:
            with AUTOGRAD[autograd]():
                yield
    finally:
        model.train(was_training)


class StopForward(Exception):
    """Raised by a hook to end the forward pass there, when the activations so far are all that is needed."""


class HookPoint(nn.Module):
    """The identity, at a named place of the forward pass. Attach functions with `HookedModule` methods."""

    def __init__(self) -> None:
        super().__init__()
        self.name = ""  # set by the HookedModule whose hooks are in use (names are relative to it)

    @property
    def is_hooked(self) -> bool:
        """Whether a hook is attached: lets a layer skip work whose result nobody reads (the fused
        attention kernel never materialises the pattern unless `hook_pattern` is hooked)."""
        return bool(self._forward_hooks)

    def forward(self, x: Tensor) -> Tensor:
        return x

    def __call__(self, x: Tensor) -> Tensor:
        # With nothing attached, return at once: nn.Module's call machinery costs 0.5 us per hook point
        # (50 of them in a 4-layer forward pass), measured in scripts/bench.py.
        return super().__call__(x) if self._forward_hooks else x


class HookedModule(nn.Module):
    """An `nn.Module` whose `HookPoint`s can be hooked by name (base class of the models)."""

    def hook_points(self) -> dict[str, HookPoint]:
        """Every hook point by its name relative to this module, in forward order (the order the modules
        are built in, which every model here keeps equal to the order they run in)."""
        points = {name: m for name, m in self.named_modules() if isinstance(m, HookPoint)}
        for name, point in points.items():
            point.name = name
        return points

    def hook_names(self) -> list[str]:
        """Every hook point's name, in forward order."""
        return list(self.hook_points())

    @contextmanager
    def hooks(self, fwd_hooks: Sequence[tuple[NameFilter, HookFn]]) -> Iterator["HookedModule"]:
        """Attach `(name or name filter, fn)` pairs for the duration of a `with` block."""
        points = self.hook_points()
        handles = []
        try:
            for name_filter, fn in fwd_hooks:
                if callable(name_filter):
                    chosen = [p for name, p in points.items() if name_filter(name)]
                else:
                    if name_filter not in points:
                        raise ValueError(
                            f"{name_filter!r} is not a hook point of this {type(self).__name__}; "
                            "model.hook_names() lists them"
                        )
                    chosen = [points[name_filter]]
                for point in chosen:
                    handles.append(point.register_forward_hook(_call_with_hook(fn)))
            yield self
        finally:
            for handle in handles:
                handle.remove()

    @contextmanager
    def per_head_hooks(self) -> Iterator["HookedModule"]:
        """Attach the per-head hook points for the duration of a `with` block (TransformerLens's
        `use_split_qkv_input` and `use_attn_result`): `blocks.{i}.hook_q_input` / `hook_k_input` /
        `hook_v_input` [B, T, H, D] (the stream each head reads, before the block's norm),
        `blocks.{i}.hook_mlp_in`, `blocks.{i}.attn.hook_result` [B, T, H, D] (each head's output in the
        residual stream) and, in a decoder block, `hook_cross_q_input` / `hook_cross_k_input` /
        `hook_cross_v_input` and `cross_attn.hook_result`. Outside such a block they do not exist and cost
        nothing; inside, each is computed only while it is hooked. Nested blocks attach them once."""
        owners = [m for m in self.modules() if hasattr(m, "per_head_hook_points") and not m.per_head]
        try:
            for module in owners:
                for name, after in module.per_head_hook_points():
                    _insert_after(module, name, HookPoint(), after)
                module.per_head = True
            yield self
        finally:
            for module in owners:
                for name, _ in module.per_head_hook_points():
                    module._modules.pop(name, None)
                module.per_head = False

    def run_with_hooks(
        self, *inputs: Tensor, fwd_hooks: Sequence[tuple[NameFilter, HookFn]] = (), **kwargs: object
    ) -> Tensor:
        """The model's forward pass on `inputs` (and keyword arguments) with `fwd_hooks` attached; they
        are removed afterwards."""
        with self.hooks(fwd_hooks):
            return self(*inputs, **kwargs)

    def run_with_cache(
        self,
        *inputs: Tensor,
        names_filter: NameFilter | None = None,
        stop_at_last: bool = False,
        **kwargs: object,
    ) -> tuple[Tensor | None, dict[str, Tensor]]:
        """The model's output and the activation at every hook point (or those `names_filter` picks),
        detached from the autograd graph, in forward order. With `stop_at_last`, the forward pass ends at
        the last hook point picked (nothing after it is computed, e.g. a large vocabulary's logits) and the
        output is None. For gradients with respect to an activation, keep it yourself with
        `run_with_hooks`."""
        cache: dict[str, Tensor] = {}
        picks = names_filter or _every_name  # a name is checked by `hooks`, which names a wrong one
        picked = picks if callable(picks) else picks.__eq__
        last = [name for name in self.hook_names() if picked(name)][-1:] if stop_at_last else []

        def save(activation: Tensor, hook: HookPoint) -> None:
            cache[hook.name] = activation.detach()
            if [hook.name] == last:
                raise StopForward

        try:
            output = self.run_with_hooks(*inputs, fwd_hooks=[(picks, save)], **kwargs)
        except StopForward:
            output = None
        return output, cache

    def get_attention_maps(self, *inputs: Tensor, **kwargs: object) -> list[Tensor]:
        """The attention pattern of every attention layer, [B, H, T_query, T_key] each, in forward order,
        from one pass. Still in the autograd graph (not detached), as in the course tutorial."""
        maps: list[Tensor] = []

        def keep(pattern: Tensor, hook: HookPoint) -> None:
            maps.append(pattern)

        self.run_with_hooks(*inputs, fwd_hooks=[(_is_pattern, keep)], **kwargs)
        return maps


def _insert_after(module: nn.Module, name: str, child: nn.Module, after: str) -> None:
    """Register `child` as `module.<name>` right after the child `after`, so that `hook_names` (the order
    modules are registered in) stays the forward order."""
    children = list(module._modules.items())
    index = next(i for i, (key, _) in enumerate(children) if key == after) + 1
    children.insert(index, (name, child))
    module._modules.clear()
    module._modules.update(children)


def _every_name(name: str) -> bool:
    return True


def _is_pattern(name: str) -> bool:
    return name.endswith("hook_pattern")


def _call_with_hook(fn: HookFn) -> Callable:
    """Adapt `fn(activation, hook)` to `nn.Module.register_forward_hook`'s (module, inputs, output)."""

    def forward_hook(module: HookPoint, inputs: tuple, output: Tensor) -> Tensor | None:
        return fn(output, module)

    return forward_hook
