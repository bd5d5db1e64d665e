"""The names of earlier versions keep working for a while (transformer_lab.deprecated), each use with a
DeprecationWarning that names the new home; the package's own code and the docs use only the new ones."""

import importlib
import re
import warnings

import pytest

import transformer_lab
from tests.conftest import ROOT
from transformer_lab import deprecated

OLD_NAMES = [  # (module of an earlier version, a name read from it, the new home the warning names)
    (
        "transformer_lab.callbacks",
        "HeadMetricsCallback",
        "transformer_lab.training.callbacks.HeadMetricsCallback",
    ),
    ("transformer_lab.interventions", "ablate_heads", "transformer_lab.analysis.interventions.ablate_heads"),
    ("transformer_lab.lens", "logit_lens", "transformer_lab.analysis.lens.logit_lens"),
    (
        "transformer_lab.faithfulness",
        "deletion_curves",
        "transformer_lab.analysis.faithfulness.deletion_curves",
    ),
    ("transformer_lab.training.schedulers", "CosineWarmupScheduler", "transformer_lab.nn.schedules"),
    ("transformer_lab.checkpoints", "read_checkpoint", "transformer_lab.load(path).contents"),
    ("transformer_lab.checkpoints", "task_from_checkpoint", "transformer_lab.load(path).task"),
    ("transformer_lab.pretrained", "evaluate", "transformer_lab.training.evaluate.evaluate"),
]


@pytest.mark.parametrize(("module", "name", "new"), OLD_NAMES, ids=[f"{m}.{n}" for m, n, _ in OLD_NAMES])
def test_an_old_name_works_and_says_where_it_went(module, name, new):
    with pytest.warns(DeprecationWarning, match=re.escape(f"{module}.{name} is deprecated; use {new}")):
        found = getattr(importlib.import_module(module), name)
    assert callable(found)


def test_the_old_checkpoint_functions_give_what_the_new_names_give():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from transformer_lab.checkpoints import read_checkpoint, task_from_checkpoint

        contents = read_checkpoint("pretrained:reverse")
        task = task_from_checkpoint(contents, "pretrained:reverse")
    checkpoint = transformer_lab.load("pretrained:reverse")
    assert contents.keys() == checkpoint.contents.keys() and task.vocab == checkpoint.task.vocab


def test_nothing_of_the_package_the_tests_or_the_docs_uses_an_old_name():
    """Code imports no old module (it may name one where it handles earlier runs' configs); the docs do
    not mention them at all."""
    code = [*(ROOT / "src").rglob("*.py"), *(ROOT / "tests").glob("*.py"), *(ROOT / "scripts").glob("*.py")]
    code += list((ROOT / "examples").glob("*.py"))
    docs = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    used = []
    for name in deprecated.MOVED:
        imports = re.compile(rf"(from|import) transformer_lab\.{re.escape(name)}\b")
        mention = re.compile(rf"transformer_lab\.{re.escape(name)}\b")
        used += [f"{path.relative_to(ROOT)}: {name}" for path in code if imports.search(path.read_text())]
        used += [f"{path.relative_to(ROOT)}: {name}" for path in docs if mention.search(path.read_text())]
    used += [f"{p.relative_to(ROOT)}" for p in [*code, *docs] if "pretrained.evaluate(" in p.read_text()]
    assert not [u for u in used if "deprecated" not in u], used


def test_an_sae_run_config_of_an_earlier_version_trains_the_same(tmp_path):
    """model.l1 (now the kind's l1_coefficient or l0_coefficient) and model.l1_warmup (now
    model.sparsity_warmup), as an earlier run's saved config has them: the same SAE module, a warning
    naming the new setting; a value under both names is refused."""
    from transformer_lab.data import SyntheticFeaturesDataModule
    from transformer_lab.training.sae_module import build_sae_module

    task = SyntheticFeaturesDataModule()
    for kind, name in (("relu", "l1_coefficient"), ("jumprelu", "l0_coefficient")):
        with pytest.warns(DeprecationWarning, match=rf"model\.l1 is deprecated; use model\.{name}"):
            old = build_sae_module({"kind": kind, "l1": 0.7, "l1_warmup": 5}, task)
        new = build_sae_module({"kind": kind, name: 0.7, "sparsity_warmup": 5}, task)
        assert dict(old.hparams) == dict(new.hparams) and old.coefficient == 0.7
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match=r"set only model\.l1_coefficient"):
        build_sae_module({"kind": "relu", "l1": 0.7, "l1_coefficient": 0.2}, task)
