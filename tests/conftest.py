"""Shared helpers: compose the real Hydra config with tiny sizes, build a tiny GPT-style decoder, and run
the CLI in a subprocess."""

import importlib
import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from omegaconf import DictConfig

from transformer_lab.data.task import TaskDataModule
from transformer_lab.nn import DecoderLM, EncoderClassifier, ModelConfig, TransformerStack
from transformer_lab.training.compose import run_config
from transformer_lab.training.datamodule import LightningTask
from transformer_lab.training.predictor import TransformerPredictor

pytest_plugins = ["tests.dynamics_runs"]  # its `trained` fixture: docs/dynamics.md's runs, for three files

ROOT = Path(__file__).resolve().parents[1]
# The suite runs one process per core (pytest-xdist's -n auto), each with one torch thread, and so does
# every script a test starts: processes x threads never exceed the cores (two threads each on two busy
# cores run several times slower). Run alone (-n 0), a test and its scripts use two threads.
THREADS = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2
os.environ["OMP_NUM_THREADS"] = str(THREADS)
torch.set_num_threads(THREADS)

# Any task: CPU, a TensorBoard point per step, no progress bar in test logs.
COMMON = ["trainer.accelerator=cpu", "trainer.log_every_n_steps=1", "callbacks.progress_bar.refresh_rate=0"]
# Seconds, not minutes: 8 training steps of batch 32 per epoch.
TINY_REVERSE = [
    "data.train_size=256",
    "data.val_size=64",
    "data.test_size=64",
    "data.batch_size=32",
    "trainer.max_epochs=1",
    *COMMON,
]


@pytest.fixture(autouse=True)
def root_logging_restored():
    """The root logger's handlers and level as before each test: a test that runs an entry point's
    main() in-process lets Hydra configure logging, whose console handler writes to the stream pytest
    captured for that test (closed after it)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    torch.set_num_threads(THREADS)  # a run in-process sets its own
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)


def gpt_decoder(vocab_size: int, block_size: int = 16, **overrides: object) -> DecoderLM:
    """A tiny DecoderLM with `configs/model/decoder.yaml`'s architecture (pre-norm, GELU MLP of 4 d,
    learned positions, tied embeddings); sizes and anything else by keyword."""
    settings = dict(
        arch="decoder",
        vocab_size=vocab_size,
        model_dim=32,
        num_heads=2,
        num_layers=2,
        mlp_ratio=4,
        norm_first=True,
        activation="gelu",
        positional_encoding="learned",
        max_len=block_size,
        output_mlp=False,
        tie_embeddings=True,
    )
    return DecoderLM(ModelConfig(**(settings | overrides)))


def encoder_classifier(vocab_size: int = 10, **overrides: object) -> EncoderClassifier:
    """A tiny EncoderClassifier with `configs/model/encoder.yaml`'s architecture (the course tutorial's:
    post-norm, ReLU MLP of 2 d, sinusoidal positions, an MLP head); anything else by keyword."""
    settings = dict(
        arch="encoder", vocab_size=vocab_size, model_dim=32, num_heads=1, num_layers=1, max_len=64
    )
    return EncoderClassifier(ModelConfig(**(settings | overrides)))


def predictor_like(model: TransformerStack, **training: object) -> TransformerPredictor:
    """A TransformerPredictor whose `.net` has `model`'s architecture (freshly initialised)."""
    return TransformerPredictor(net=model.config.to_dict(), **training)


def compose_train_config(run_dir: Path, *overrides: str, base: list[str] = TINY_REVERSE) -> DictConfig:
    """The config `python train.py <base> <overrides>` would run, writing into `run_dir`."""
    return run_config(run_dir, [*base, *overrides])


def run_cli(
    *args: str, cwd: Path = ROOT, timeout: int = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run a project script as a user would (`python train.py ...`), with the suite's torch threads."""
    env = {**(env or os.environ), "OMP_NUM_THREADS": str(THREADS), "HYDRA_FULL_ERROR": "0"}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def load_script(name: str) -> ModuleType:
    """The tool `name` as a module, to call its main() in-process (fast) from a test: the package's
    `transformer_lab.<name>` (which scripts/<name>.py runs), or a developer script of scripts/."""
    if importlib.util.find_spec(f"transformer_lab.{name}") is not None:
        return importlib.import_module(f"transformer_lab.{name}")
    if str(ROOT / "scripts") not in sys.path:  # as `python scripts/<name>.py` has it: its sibling modules
        sys.path.insert(0, str(ROOT / "scripts"))  # (bench.py's bench_phases/) import by their names
    spec = importlib.util.spec_from_file_location(f"{name}_script", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def toy_task(name: str) -> ModuleType:
    """A module of tests/toy_task/ (the tasks kept outside the package), imported from its file."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "toy_task" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def save_task_checkpoint(path: Path, task: TaskDataModule, **net: object) -> Path:
    """What train.py saves, minus the optimizer: a freshly initialised model for `task` (its vocabulary,
    positions and architecture, sizes by keyword) with the task's record, written to `path`."""
    config = ModelConfig(**(task.model_settings() | dict(model_dim=32, num_heads=2, num_layers=2) | net))
    model = TransformerPredictor(net=config.to_dict())
    cls = type(task)
    record = {"class": f"{cls.__module__}.{cls.__qualname__}", "separator": task.separator}
    checkpoint = {
        "state_dict": model.state_dict(),
        "hyper_parameters": dict(model.hparams),
        "datamodule_hyper_parameters": dict(task.hparams),
        "task": record,
    }
    torch.save(checkpoint, path)
    return path


@pytest.fixture
def train_config(tmp_path):
    return lambda *overrides: compose_train_config(tmp_path, *overrides)


def fit_with_callback(
    tmp_path: Path,
    task: TaskDataModule,
    callback: L.Callback,
    epochs: int,
    arch: str = "encoder",
    logger: bool = True,
) -> TransformerPredictor:
    """Train a 2-layer, 2-head model of `arch` on `task` for `epochs` with one callback, logging to
    TensorBoard in `tmp_path` (or not at all); no checkpoints, no progress bar."""
    torch.manual_seed(0)
    net = ModelConfig(arch=arch, num_layers=2, num_heads=2, **task.model_settings())
    model = TransformerPredictor(net=net.to_dict(), max_iters=10)
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=TensorBoardLogger(tmp_path, name="", version="") if logger else False,
        callbacks=[callback],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    trainer.fit(model, datamodule=LightningTask(task))
    return model


# -------------------------------------------------------------------- the browser of the page tests
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium (Debian's `chromium`, driven by Playwright) for every page test: launching
    it is the slow part. Skips where either is missing: `apt-get install -y chromium` (CI does) and
    `pip install -e ".[dev]"`."""
    import shutil

    sync_api = pytest.importorskip(
        "playwright.sync_api",
        reason="playwright is not installed: pip install -e '.[dev]' (make install does)",
    )
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed: apt-get install -y chromium")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No network for the Hugging Face libraries, and the interop cache in the test's own directory."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMER_LAB_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="session")
def transformers():
    """Hugging Face `transformers` (the dev extra installs it); the test skips without it."""
    return pytest.importorskip("transformers")


# The files whose tests take longest, longest first (measured: make reproduce's sweeps, the docs pages'
# runs, then make test's slowest), handed out first: with --dist loadfile a file runs on one process, and
# a long file started last keeps the run waiting on it while the other process is idle
# (--no-loadscope-reorder keeps this order; xdist would otherwise put the files with most tests first).
LONGEST_FIRST = (
    "test_dynamics_page.py",
    "test_dynamics_controls.py",
    "test_dynamics_grokking.py",
    "test_docs_features.py",
    "test_docs.py",
    "test_text_page.py",
    "test_bench.py",
    "test_labs.py",
    "test_faults.py",
    "test_sweeps.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the tests of LONGEST_FIRST's files before the others (each file's own order kept)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
