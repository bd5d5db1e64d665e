"""SIGTERM and Ctrl-C end every phase of a run and of every tool the same way: one line, exit 143 or 130, and
either a run that resume= continues or no run folder at all; no temporary file or folder left behind."""

import signal
import sys

import pytest
import torch

from tests.conftest import TINY_REVERSE, compose_train_config, load_script
from tests.test_faults import ctrl_c_as_in_a_terminal  # noqa: F401 (a fixture)
from transformer_lab import TransformerPredictor, signals
from transformer_lab.cli import run
from transformer_lab.data import tokens as tokens_module
from transformer_lab.errors import Terminated
from transformer_lab.train import train

CAUSES = {"SIGTERM": (signal.SIGTERM, 143), "Ctrl-C": (signal.SIGINT, 130)}


@pytest.fixture
def signals_as_in_a_shell(ctrl_c_as_in_a_terminal):  # noqa: F811
    """SIGTERM raises `signals.Stop` (as every entry point makes it) and SIGINT KeyboardInterrupt;
    both restored afterwards."""
    previous = signal.getsignal(signal.SIGTERM)
    signals.install()
    yield
    signal.signal(signal.SIGTERM, previous)


def train_main(monkeypatch, *argv: str) -> int:
    """`python train.py <argv>` in this process: its exit status."""
    from transformer_lab import train as train_tool

    monkeypatch.setattr(sys, "argv", ["train.py", *argv])
    try:
        train_tool.main()
    except SystemExit as stopped:
        return stopped.code
    return 0


@pytest.mark.parametrize("cause", CAUSES)
def test_a_signal_while_tokenizing_ends_in_one_line_and_leaves_no_run(
    cause, tmp_path, monkeypatch, capsys, signals_as_in_a_shell
):
    number, status = CAUSES[cause]
    original = tokens_module.write_tokens

    def signalled_half_way(folder, corpus, tokenizer, dtype):
        (folder / "tokens.bin").write_bytes(b"\0" * 100)  # a half-written entry
        signal.raise_signal(number)
        return original(folder, corpus, tokenizer, dtype)

    monkeypatch.setattr(tokens_module, "write_tokens", signalled_half_way)
    (tmp_path / "c.txt").write_text("ROMEO: But soft, what light through yonder window breaks?\n" * 40)
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    argv = ["task=text", f"data.path={tmp_path / 'c.txt'}", "data.tokenizer=char", "data.block_size=8"]
    stopped = train_main(monkeypatch, *argv, f"data.cache_dir={cache}", f"hydra.run.dir={run_dir}")
    assert stopped == status
    assert capsys.readouterr().err == f"error: stopped by {cause} before training began; nothing was kept\n"
    assert not run_dir.exists()
    assert not [p.name for p in cache.iterdir() if p.name.startswith("tokens-") or p.name.endswith(".tmp")]
    # the same command again: a fresh run, not "holds another run" and then "nothing to resume"
    monkeypatch.setattr(tokens_module, "write_tokens", original)
    again = [*argv, *TINY_REVERSE[4:], f"data.cache_dir={cache}", f"hydra.run.dir={run_dir}"]
    assert train_main(monkeypatch, *again, "trainer.max_steps=2") == 0
    assert (run_dir / "metrics.json").exists()


def test_sigterm_before_hydra_is_one_line_and_exit_143(tmp_path, monkeypatch, capsys, signals_as_in_a_shell):
    def terminated(*args):
        signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr("transformer_lab.train.prepare", terminated)
    assert train_main(monkeypatch, *TINY_REVERSE, f"hydra.run.dir={tmp_path / 'run'}") == 143
    assert capsys.readouterr().err == "error: stopped by SIGTERM before training began; nothing was kept\n"
    assert list(tmp_path.iterdir()) == []


def test_sigterm_while_training_stops_at_the_batch_end_with_the_handler_installed(
    tmp_path, monkeypatch, signals_as_in_a_shell
):
    """Lightning's handler takes SIGTERM during the fit and calls this one too, which then raises
    nothing: the step finishes, last.ckpt holds it, and the run says how to resume."""
    original = TransformerPredictor.training_step

    def terminated_during_step_3(self, batch, batch_idx):
        if self.global_step == 3:
            signal.raise_signal(signal.SIGTERM)
        return original(self, batch, batch_idx)

    monkeypatch.setattr(TransformerPredictor, "training_step", terminated_during_step_3)
    with pytest.raises(Terminated) as stopped:
        train(compose_train_config(tmp_path, "callbacks.last_checkpoint.every_n_train_steps=2"))
    assert stopped.value.exit_status == 143
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4
    assert str(stopped.value).startswith("stopped by SIGTERM at step 4 (last.ckpt holds step 4)")
    assert signal.getsignal(signal.SIGTERM) is signals._raise  # given back after the fit


@pytest.mark.parametrize("cause", CAUSES)
@pytest.mark.parametrize("tool", ["export", "explore"])
def test_a_signal_while_a_tool_writes_leaves_nothing_half_written(
    tool, cause, tmp_path, monkeypatch, capsys, signals_as_in_a_shell
):
    number, status = CAUSES[cause]
    out = tmp_path / ("out" if tool == "export" else "page.html")

    if tool == "export":  # as model.onnx appears, before it is checked and before vocab.json

        def trace_half(model, traced, names, path):
            path.write_bytes(b"half a graph")
            signal.raise_signal(number)

        monkeypatch.setattr("transformer_lab.interop.onnx._trace", trace_half)
        argv = ["ckpt_path=pretrained:reverse_2l4h", "to=onnx", f"out={out}"]
    else:  # half way through writing the page
        from transformer_lab.explorer import page

        write = page.write_atomically

        def write_half(path, writer):
            def half(f):
                f.write(b"<html>half a page")
                signal.raise_signal(number)

            return write(path, half)

        monkeypatch.setattr(page, "write_atomically", write_half)
        argv = ["ckpt_path=pretrained:reverse_2l4h", f"out={out}"]
    with pytest.raises(SystemExit) as stopped:
        run(load_script(tool).main, argv)
    assert stopped.value.code == status
    assert capsys.readouterr().err == f"error: stopped by {cause}\n"
    assert list(tmp_path.iterdir()) == []  # no out=, no temporary folder beside it


def test_a_run_folder_without_a_checkpoint_is_no_dead_end(tmp_path, monkeypatch, capsys):
    """A run killed before its first checkpoint (SIGKILL: nothing cleaned up) holds .hydra/ and its log:
    the same command says what to do instead of "holds another run ... resume=", which resume refuses."""
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / "train.log").write_text("[...] Tokenizing\n")
    assert train_main(monkeypatch, *TINY_REVERSE, f"hydra.run.dir={run_dir}") == 2
    assert capsys.readouterr().err == (
        f"error: {run_dir} holds a run that stopped before saving any checkpoint (its train.log says how), "
        "so there is nothing to resume; remove the folder, or choose another hydra.run.dir\n"
    )


@pytest.mark.parametrize("cause", CAUSES)
def test_a_signal_while_an_sae_caches_activations_leaves_no_run(
    cause, tmp_path, monkeypatch, capsys, signals_as_in_a_shell
):
    """Ctrl-C and SIGTERM half way through the activation cache of an SAE run: the same line and exit
    status, no run folder, no half-written cache; the same command then trains."""
    from transformer_lab.data import activations

    number, status = CAUSES[cause]
    original = activations.write_activations

    def signalled_half_way(task, path):
        path.write_bytes(b"\0" * 1000)  # half written
        signal.raise_signal(number)
        return original(task, path)

    monkeypatch.setattr(activations, "write_activations", signalled_half_way)
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    argv = ["experiment=sae", "source=pretrained:induction_heads", "hook=blocks.0.hook_attn_out", "threads=1"]
    argv += [
        "data.cache=true",
        f"data.cache_dir={cache}",
        "data.cache_tokens=4096",
        f"hydra.run.dir={run_dir}",
    ]
    assert train_main(monkeypatch, *argv) == status
    err = capsys.readouterr().err
    assert err.startswith(f"error: stopped by {cause}") and err.count("\n") == 1 and "nothing was kept" in err
    assert not run_dir.exists()
    assert not [p for p in cache.rglob("*") if p.is_file() and p.suffix != ".lock"]  # no entry, no .tmp
    monkeypatch.setattr(activations, "write_activations", original)
    short = ["trainer.max_steps=2", "trainer.val_check_interval=2", "trainer.limit_val_batches=1"]
    short += ["trainer.limit_test_batches=1", "data.batch_size=64"]
    assert train_main(monkeypatch, *argv, *short) == 0
    assert (run_dir / "metrics.json").exists()


def test_a_signal_during_a_weights_read_ends_as_the_signal(tmp_path, monkeypatch, signals_as_in_a_shell):
    """SIGTERM while pytorch_model.bin is unpickled: torch turns the exception raised inside its
    unpickler into an error of its own ("could not determine the shape ..."), which read as the file's
    fault (exit 2); it ends as the signal (signals.raise_pending)."""
    import transformers

    from tests.test_families import bpe
    from tests.test_hub_folders import hub_folder
    from transformer_lab import load

    folder = tmp_path / "pythia"
    hub_folder(transformers, folder, "pythia-70m", bpe())
    assert (folder / "pytorch_model.bin").exists()
    real_load = torch.load

    def interrupted(*args, **kwargs):
        try:
            signal.raise_signal(signal.SIGTERM)
        except signals.Stop:  # as torch's unpickler reports it
            raise RuntimeError("could not determine the shape of object type 'UntypedStorage'") from None
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", interrupted)
    with pytest.raises(signals.Stop, match="stopped by SIGTERM"):
        load(f"hf:{folder}")
