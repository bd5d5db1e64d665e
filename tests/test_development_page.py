"""docs/development.md draws the layout: every module, folder and file it names exists, and every module
and folder of the package is named there (a newcomer finds every part from the page); the extension
points it names exist with the signatures it shows."""

import inspect
import re

from tests.conftest import ROOT
from transformer_lab.analysis import circuits, dynamics, measures

PAGE = ROOT / "docs" / "development.md"
PACKAGE = ROOT / "src" / "transformer_lab"


def _layout() -> str:
    return PAGE.read_text().split("## Layout", 1)[1].split("## Extending", 1)[0]


def test_every_part_of_the_package_is_on_the_page_and_every_name_on_it_exists():
    text = _layout()
    parts = [p for p in PACKAGE.iterdir() if not p.name.startswith(("_", ".")) and p.name != "configs"]
    parts = [p for p in parts if p.suffix == ".py" or (p.is_dir() and p.name != "__pycache__")]
    missing = [p.name for p in parts if not re.search(rf"(?<![\w/]){re.escape(p.name)}", text)]
    assert not missing, f"docs/development.md does not name {missing}"
    for folder in ("nn", "data", "analysis", "training", "figures", "explorer"):
        named = re.findall(r"\b(\w+\.py)\b", text.split(f"  {folder}/", 1)[1].split("\n  ", 1)[0])
        for name in named:
            assert (PACKAGE / folder / name).exists() or (PACKAGE / name).exists(), f"{folder}/{name}"


def test_the_extension_points_are_the_ones_the_page_names():
    text = PAGE.read_text().split("## Extending", 1)[1]
    assert "measures.register(name" in text and "circuits.register(name" in text
    assert list(inspect.signature(measures.register).parameters)[:3] == ["name", "direction", "description"]
    assert list(inspect.signature(circuits.register).parameters)[:2] == ["name", "description"]
    assert callable(dynamics.register_task_scores)
    for example in re.findall(r"`(tests/extensions/\w+\.py)`", text):
        assert (ROOT / example).is_file(), example
