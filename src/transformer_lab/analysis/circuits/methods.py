"""The registry of circuit methods: a method is one function and one registration, and the command line
(`method=`, its help and its refusal), `discover`, the answer keys' grading and the docs' table of
methods read it here, when they run. No torch: `interpret` checks `method=` before torch loads.

    import torch
    from transformer_lab.analysis import circuits

    @circuits.register("random", "random scores: what chance ranks (a baseline)")
    def random_scores(setup: circuits.Setup, options: circuits.Options) -> circuits.Scores:
        generator = torch.Generator().manual_seed(0)
        return circuits.Scores(torch.randn(setup.graph.units, generator=generator))

A method gets the `Setup` (the graph, the clean batch, the metric M, and a patcher that runs the model with
any set of units patched: `setup.evaluate(mask)`) and the `Options` (steps, threshold, max_seconds), and
returns `Scores`: one per unit (edge, or node at node level), the (estimated) change of M when that unit
alone is patched. `discover` keeps the top units by |score| and evaluates those circuits; with an answer
key it grades the ranking (ROC AUC against the key's circuit).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from transformer_lab.errors import require

if TYPE_CHECKING:
    from transformer_lab.analysis.circuits.options import Options, Scores
    from transformer_lab.analysis.circuits.patcher import Setup

BUILT_IN = ("eap", "eap_ig", "patching", "acdc")  # the package's own methods: a module each, of that name
Function = TypeVar("Function", bound=Callable)


@dataclass(frozen=True)
class Method:
    """A registered method: its name, a one-line description (how it scores, and what that costs), whether
    its scores are exact (the change of M when the unit alone is patched) or an estimate of it, and the
    function `(setup, options) -> Scores`."""

    name: str
    description: str
    exact: bool
    function: Callable[[Setup, Options], Scores]


class Registry(MutableMapping[str, Method]):
    """name -> Method. The package's own methods register themselves when their modules are imported,
    which happens the first time an entry is read; `names()` lists every method without importing one."""

    def __init__(self) -> None:
        self._methods: dict[str, Method] = {}
        self._loaded = False

    def load(self) -> None:
        """Import the built-in methods' modules (once): each registers itself."""
        if not self._loaded:
            self._loaded = True
            for name in BUILT_IN:
                importlib.import_module(f"{__package__}.{name}")

    def names(self) -> list[str]:
        """The built-in methods, then the others in the order they were registered (no import)."""
        built_in = [name for name in BUILT_IN if not self._loaded or name in self._methods]
        return built_in + [name for name in self._methods if name not in BUILT_IN]

    def __getitem__(self, name: str) -> Method:
        self.load()
        return self._methods[name]

    def __setitem__(self, name: str, method: Method) -> None:
        self._methods[name] = method

    def __delitem__(self, name: str) -> None:
        del self._methods[name]

    def __iter__(self) -> Iterator[str]:
        self.load()
        return iter(self.names())

    def __len__(self) -> int:
        self.load()
        return len(self._methods)


METHODS = Registry()


def register(name: str, description: str, exact: bool = False) -> Callable[[Function], Function]:
    """Register `function(setup, options) -> Scores` as the method `name` (see the module docstring);
    `exact`: its scores are the true change of M, not an estimate. Registering a name again replaces it."""

    def add(function: Function) -> Function:
        METHODS.load()  # the built-in ones first, so that none of them replaces one registered from outside
        METHODS[name] = Method(name, description, exact, function)
        return function

    return add


def require_method(name: str, where: str = "") -> None:
    """Refuse, in one line, a method nobody registered (`where`: e.g. " for analysis=circuit")."""
    known = METHODS.names()
    require(name in known, f"method={name} is unknown{where}; use method={' | '.join(known)}")
