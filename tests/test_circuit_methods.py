"""The registry of circuit methods (transformer_lab.analysis.circuits.METHODS): each built-in method lives
in its own module and registers itself; a method registered outside the package
(tests/extensions/random_scores.py, a random baseline) runs through `interpret analysis=circuit`, is
listed and checked by its command line, and is graded on the answer keys like the built-in ones, with no
file of the package edited; docs/circuits.md's table of methods is the registry's."""

import importlib
import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, load_script
from transformer_lab import load
from transformer_lab.analysis import circuits
from transformer_lab.cli import run
from transformer_lab.pretrained import answer_keys

BUILT_IN = ["eap", "eap_ig", "patching", "acdc"]


@pytest.fixture
def random_method():
    """The method of tests/extensions/random_scores.py, registered for the test and removed after it."""
    importlib.reload(importlib.import_module("tests.extensions.random_scores"))
    yield "random"
    circuits.METHODS.pop("random", None)


def test_each_built_in_method_registers_itself_from_its_module():
    assert list(circuits.METHODS) == list(circuits.BUILT_IN) == BUILT_IN
    for name, method in circuits.METHODS.items():
        assert method.name == name
        assert method.function.__module__ == f"transformer_lab.analysis.circuits.{name}"
        assert method.description and "\n" not in method.description
    assert [name for name, method in circuits.METHODS.items() if method.exact] == ["patching"]


def test_the_command_line_reads_the_registry_without_torch():
    """`interpret` lists the methods in its help and refuses an unknown one before torch is imported."""
    code = (
        "import sys\n"
        "from transformer_lab.cli import run\n"
        "from transformer_lab import interpret\n"
        "for argv in (['--help'], ['ckpt_path=x', 'analysis=circuit', 'method=nope']):\n"
        "    try:\n"
        "        run(interpret.main, argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env=os.environ
    )
    assert "circuit: eap | eap_ig | patching | acdc (default eap" in result.stdout
    assert result.stdout.rstrip().endswith("False"), result.stdout[-500:]
    assert result.stderr == (
        "error: method=nope is unknown for analysis=circuit; use method=eap | eap_ig | patching | acdc\n"
    )


def test_an_outside_method_is_listed_and_refused_by_the_registry_as_it_is_now(random_method, capsys):
    script = load_script("interpret")
    with pytest.raises(SystemExit):
        script.main(["--help"])
    assert "circuit: eap | eap_ig | patching | acdc | random (default eap" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        run(script.main, ["ckpt_path=x", "analysis=circuit", "method=nope"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.endswith("use method=eap | eap_ig | patching | acdc | random\n")


def test_an_outside_method_runs_through_interpret_and_is_graded_on_the_answer_key(
    random_method, tmp_path, capsys
):
    load_script("interpret").main(
        ["ckpt_path=pretrained:key_reverse", "analysis=circuit", f"method={random_method}",
         "num_examples=32", f"out_dir={tmp_path}"]
    )  # fmt: skip
    out = capsys.readouterr().out
    numbers = json.loads((tmp_path / "circuit.json").read_text())
    assert numbers["method"] == "random" and numbers["level"] == "edge" and len(numbers["edges"]) == 106
    assert 0.2 < numbers["answer_key_auc"] < 0.8  # chance: 0.5
    assert "method=random metric=logit_diff" in out and "Against the answer key's circuit: ROC AUC 0." in out
    assert (tmp_path / "circuit.png").is_file()


def test_an_outside_method_is_graded_like_the_built_in_ones(random_method):
    """On every answer key eap ranks the recorded circuit first (ROC AUC 1); random scores near 0.5."""
    for name, key in answer_keys.KEYS.items():
        checkpoint = load(f"pretrained:{name}")
        clean, corrupted = checkpoint.corrupted_pairs(48)
        grades = {
            method: circuits.discover(
                checkpoint.model, *clean, corrupted, method=method, truth=key.circuit
            ).answer_key_auc
            for method in ("eap", random_method)
        }
        assert grades["eap"] == 1.0 and 0.2 < grades[random_method] < 0.8, (name, grades)


def test_the_docs_table_of_methods_is_the_registry():
    """docs/circuits.md's table of methods: the built-in methods, in the registry's order, each with
    whether it is exact and its description."""
    lines = (ROOT / "docs" / "circuits.md").read_text().splitlines()
    start = lines.index("| method | exact or estimate | how, and what it costs |")
    expected = []
    for name in circuits.BUILT_IN:
        method = circuits.METHODS[name]
        how = method.description.replace("|", r"\|")  # a | inside a cell of a Markdown table
        expected.append(f"| `{name}` | {'exact' if method.exact else 'estimate'} | {how} |")
    assert lines[start + 2 : start + 2 + len(expected) + 1] == [*expected, ""]


def test_the_docs_method_of_your_own_is_the_one_the_tests_register():
    page = (ROOT / "docs" / "circuits.md").read_text()
    section = page[page.index("## A method of your own") :]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert (ROOT / "tests" / "extensions" / "random_scores.py").read_text().endswith(f'"""\n\n{block}')
