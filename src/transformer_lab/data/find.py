"""Finding a task class by its name (`package.module.Class`) without running code nobody asked for.

A task's name comes from a config or from a checkpoint someone else made. A module of this package's
`data/` is imported as it is. Any other module is first located on the Python path without running it
(`importlib.machinery.PathFinder`, which, unlike `importlib.util.find_spec`, runs no parent package's
`__init__`); it must be found outside the current directory and outside the folders of the files being
read (a shared checkpoint's folder could hold a module of the same name), and its source must define that
class with a task base class. Only then is it imported, and the class checked to be a TaskDataModule.
"""

import ast
import importlib
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from transformer_lab.errors import ConfigError, require

OWN = "transformer_lab.data"
PUT_ON_PATH = "put its folder on PYTHONPATH (see docs/own_task.md)"


def _locate(module_name: str, excluded: list[Path]) -> Path:
    """The source file of `module_name` on sys.path (never the excluded folders), found without running
    anything; a one-line ConfigError naming the module when there is none."""
    parts = module_name.split(".")
    entries = []
    for entry in sys.path:
        folder = Path(entry or os.curdir).resolve()
        if folder.is_dir() and all(folder != other for other in excluded):
            entries.append(str(folder))
    locations: list[str] | None = entries
    spec = None
    for depth, part in enumerate(parts):
        spec = importlib.machinery.PathFinder.find_spec(part, locations)
        if spec is None or (depth < len(parts) - 1 and not spec.submodule_search_locations):
            break
        locations = list(spec.submodule_search_locations or [])
    origin = getattr(spec, "origin", None)
    if spec is None or origin is None or not origin.endswith(".py"):
        where = "outside the current directory" if Path.cwd().resolve() in excluded else "on the Python path"
        raise ConfigError(f"the task module {module_name} is not found {where}; {PUT_ON_PATH}")
    return Path(origin)


def _defines_task(source: Path, class_name: str) -> bool:
    """Whether the module's source defines `class_name` with a base class named like a task's."""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return False
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            names = [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases]
            return any(name.endswith("DataModule") for name in names)
    return False


def task_class(name: str, excluded: Sequence[str | Path] = ()) -> type:
    """The TaskDataModule subclass `name` names (see the module docstring). `excluded`: folders a task
    module may not come from, besides the current directory."""
    from transformer_lab.data.task import TaskDataModule

    module_name, _, class_name = str(name).rpartition(".")
    require(
        bool(module_name) and all(part.isidentifier() for part in str(name).split(".")),
        f"{name!r} is not a task class name; write it as package.module.ClassName",
    )
    own = module_name == OWN or module_name.startswith(OWN + ".")
    skip = [] if own else [Path.cwd().resolve(), *(Path(folder).resolve() for folder in excluded)]
    if not own:
        source = _locate(module_name, skip)
        require(
            _defines_task(source, class_name),
            f"{source} does not define a task class {class_name} (class {class_name}(TaskDataModule)); "
            "refusing to import it",
        )
    saved = sys.path[:]
    sys.path[:] = [entry for entry in saved if Path(entry or os.curdir).resolve() not in skip]
    try:
        module = importlib.import_module(module_name)
        cls = getattr(module, class_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"the task {name} cannot be imported here ({exc}); {PUT_ON_PATH}") from exc
    finally:
        sys.path[:] = saved
    require(
        own or Path(getattr(module, "__file__", "") or "").resolve() == source.resolve(),
        f"the task module {module_name} was already imported from elsewhere; refusing to use it",
    )
    require(
        isinstance(cls, type) and issubclass(cls, TaskDataModule),
        f"{name} is not a task: it must name a TaskDataModule subclass",
    )
    undefined = [p for p in ("vocab", "max_len") if getattr(cls, p) is getattr(TaskDataModule, p)]
    require(
        not undefined,
        f"{name} is not a task: it does not define {' and '.join(undefined)}, which every task states "
        "(docs/own_task.md); name a task class such as transformer_lab.data.ReverseDataModule",
    )
    return cls
