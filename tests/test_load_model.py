"""load_model: a checkpoint's plain nn.Module, without Lightning or Hydra; and the package installed
without the checkout (`pip install .`) trains from any directory with `python -m transformer_lab.train`."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT, compose_train_config
from transformer_lab import TransformerPredictor, load_model
from transformer_lab.nn import EncoderClassifier
from transformer_lab.train import train


@pytest.fixture(scope="module")
def reverse_ckpt(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("reverse")
    train(compose_train_config(run_dir, "model.num_layers=2", "model.num_heads=2"))
    return run_dir / "checkpoints" / "best.ckpt"


def test_load_model_gives_the_trained_network_in_eval_mode(reverse_ckpt):
    model = load_model(reverse_ckpt)
    assert type(model) is EncoderClassifier and not model.training
    assert model.config.num_layers == 2 and model.vocab == ["<pad>", "<bos>", "<eos>", "<sep>", *"0123456789"]
    restored = TransformerPredictor.load_from_checkpoint(reverse_ckpt, weights_only=True).eval()
    x = torch.randint(10, (4, 16))
    with torch.no_grad():
        torch.testing.assert_close(model(x), restored(x))
        torch.testing.assert_close(model(x), restored.net(x))


def test_load_model_needs_neither_lightning_nor_hydra(reverse_ckpt):
    code = (
        "import sys\n"
        "for name in ('lightning', 'pytorch_lightning', 'hydra', 'omegaconf', 'torchmetrics'):\n"
        "    sys.modules[name] = None  # importing any of them now fails\n"
        "import torch\n"
        "from transformer_lab import load_model\n"
        f"model = load_model({str(reverse_ckpt)!r})\n"
        "logits, cache = model.run_with_cache(torch.zeros(1, 16, dtype=torch.long))\n"
        "print(type(model).__name__, model.training, tuple(cache['blocks.1.attn.hook_pattern'].shape))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "EncoderClassifier False (1, 2, 16, 16)"


def test_a_checkpoints_task_and_the_analyses_need_no_lightning():
    """transformer_lab.load(...), its task's examples, the per-head measures (ablation included), the lens
    and the circuit graph, with Lightning, Hydra and torchmetrics made unimportable."""
    code = (
        "import sys\n"
        "for name in ('lightning', 'pytorch_lightning', 'hydra', 'omegaconf', 'torchmetrics'):\n"
        "    sys.modules[name] = None  # importing any of them now fails\n"
        "import transformer_lab\n"
        "from transformer_lab.analysis import circuits, lens, measures\n"
        "checkpoint = transformer_lab.load('pretrained:reverse_2l4h')\n"
        "inputs, labels = checkpoint.examples(16)\n"
        "tables = measures.measure_heads(checkpoint.model, inputs, labels, checkpoint.task)\n"
        "accuracy = lens.lens_accuracy(checkpoint.model, inputs, labels)\n"
        "graph = circuits.graph(checkpoint.model)\n"
        "print(sorted(tables), type(checkpoint.task).__name__, bool(accuracy.to_dict()), graph.units > 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['ablation', 'alignment', 'entropy'] ReverseDataModule True True"


@pytest.mark.reproduce
def test_a_plain_install_trains_from_any_directory(tmp_path):
    """`pip install .` (not editable): the configs ship inside the package. Built from a copy of the
    sources, so the build leaves nothing in the checkout."""
    source, target = tmp_path / "source", tmp_path / "site"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".*", "saved_models", "build", "__pycache__"))
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    assert (target / "transformer_lab" / "configs" / "task" / "reverse.yaml").is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "OMP_NUM_THREADS": "2"}
    run = subprocess.run(
        [sys.executable, "-c", "import transformer_lab; print(transformer_lab.__file__)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.stdout.startswith(str(target)), run.stdout + run.stderr
    run = subprocess.run(
        [sys.executable, "-m", "transformer_lab.train", "trainer.fast_dev_run=true"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert (elsewhere / "saved_models" / "reverse").is_dir()
    # every tool is a command of the installed package, and the ready-made models come with it
    assert (target / "transformer_lab" / "data" / "tinyshakespeare" / "input.txt").is_file()
    commands = {
        "sample": ["ckpt_path=pretrained:shakespeare", "prompt=ROMEO:", "max_new_tokens=20"],
        "explore": ["ckpt_path=pretrained:shakespeare", "index=3"],
        "explain": ["ckpt_path=pretrained:reverse_2l4h", "index=1"],
        "interpret": ["ckpt_path=pretrained:reverse_2l4h", "analysis=heads", "num_examples=16"],
        "params": [],
        "plots": ["positional_encoding"],
        "init_attention": ["num_examples=8"],
        "summarize": [str(elsewhere / "saved_models")],
        "curves": [str(elsewhere / "saved_models"), "metric=train/loss"],
        "pretrained": [],
    }
    # each as `python -m transformer_lab.<tool>` would run it, in one interpreter (not ten imports of torch)
    script = (
        "import json, runpy, sys, traceback\n"
        "codes = {}\n"
        "for tool, args in json.loads(sys.argv[1]).items():\n"
        "    sys.argv = [tool, *args]\n"
        "    try:\n"
        "        runpy.run_module(f'transformer_lab.{tool}', run_name='__main__', alter_sys=True)\n"
        "        codes[tool] = 0\n"
        "    except SystemExit as exc:\n"
        "        codes[tool] = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)\n"
        "    except Exception:\n"
        "        codes[tool] = traceback.format_exc()\n"
        "print('CODES', json.dumps(codes))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(commands)],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    codes = json.loads(done.stdout.rsplit("CODES ", 1)[1]) if "CODES " in done.stdout else done.stderr[-3000:]
    assert isinstance(codes, dict) and set(codes) == set(commands), codes
    # curves finds no TensorBoard scalars in a fast_dev_run (it logs none): its one-line refusal, exit 2
    assert {tool: code for tool, code in codes.items() if code != 0} in ({}, {"curves": 2}), codes
    assert "No module named" not in done.stderr, done.stderr[-2000:]
    assert (elsewhere / "explorer.html").stat().st_size > 10_000
