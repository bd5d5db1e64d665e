"""The activations an SAE trains on (data/activations.py): a model's activations at a hook, real positions
only, on the fly (mixed) or from the memory-mapped cache (equal to them, keyed by source and hook, rebuilt
when damaged), DDP ranks' shares, and the one-line refusals of bad sources and hooks."""

import pytest
import torch

import transformer_lab
from tests.conftest import COMMON, compose_train_config
from transformer_lab import ConfigError
from transformer_lab.data import ActivationsDataModule
from transformer_lab.data.activations import cached_activations
from transformer_lab.nn.sae import activations_at
from transformer_lab.train import train

SOURCE, HOOK = "pretrained:induction_heads", "blocks.0.hook_attn_out"


def task(tmp_path, **settings) -> ActivationsDataModule:
    settings = {
        "source": SOURCE,
        "hook": HOOK,
        "cache_dir": str(tmp_path / "cache"),
        "verbose": False,
    } | settings
    return ActivationsDataModule(**settings)


def test_the_activations_are_the_models_at_the_hook(tmp_path):
    data = task(tmp_path, source_batch_size=8)
    batch = next(data.source_batches())
    model = transformer_lab.load(SOURCE).model
    with torch.no_grad():
        expected = activations_at(model, HOOK, batch[0]).reshape(-1, 48)
    torch.testing.assert_close(data.activations(batch), expected)
    assert data.d_in == 48 and data.record()["source"]["hook"] == HOOK


def test_padding_positions_are_left_out(tmp_path):
    """An encoder-decoder's decoder hook reads the target: its padding gives no activation."""
    data = task(
        tmp_path, source="pretrained:sort", hook="decoder.blocks.0.hook_resid_post", source_batch_size=4
    )
    *inputs, labels = next(data.source_batches())
    pad = data.checkpoint.config.pad_id
    assert bool((inputs[1] == pad).any())  # some targets are padded
    assert len(data.activations((*inputs, labels))) == int((inputs[1] != pad).sum())


def test_mixed_batches_and_ranks(tmp_path):
    data = task(tmp_path, batch_size=64, buffer=512, source_batch_size=4)
    batches = iter(data.train_dataloader())
    first = next(batches)
    assert first.shape == (64, 48) and first.dtype == torch.float32
    zero, one = (next(data.source_batches(rank, 2))[0] for rank in (0, 1))
    assert not torch.equal(zero, one)  # the two ranks read different examples


def test_the_cache_holds_the_activations_and_is_keyed(tmp_path, caplog):
    data = task(tmp_path, cache=True, cache_tokens=1000, source_batch_size=8)
    file = cached_activations(data)
    streamed = torch.cat([part for part, _ in zip(data.stream(), range(4), strict=False)])[:1000]
    torch.testing.assert_close(file.rows(torch.arange(1000).numpy()), streamed[:1000])
    again = cached_activations(task(tmp_path, cache=True, cache_tokens=1000, source_batch_size=8))
    assert again.folder == file.folder
    other = cached_activations(task(tmp_path, cache=True, cache_tokens=1000, hook="blocks.1.hook_resid_post"))
    assert other.folder != file.folder  # another hook, another entry
    # a damaged file (truncated: its size is not the one meta.json records) is rebuilt, saying so
    (file.folder / "activations.bin").write_bytes(b"\0" * 100)
    rebuilt = cached_activations(task(tmp_path, cache=True, cache_tokens=1000, source_batch_size=8))
    torch.testing.assert_close(rebuilt.rows(torch.arange(1000).numpy()), streamed[:1000])
    assert "rebuilding" in caplog.text


def test_a_run_from_the_cache(tmp_path):
    overrides = [
        "experiment=sae", f"source={SOURCE}", f"hook={HOOK}", "threads=1", *COMMON, "trainer.max_steps=20",
        "trainer.val_check_interval=20", "data.val_examples=8", "data.test_examples=8", "data.cache=true",
        "data.cache_tokens=4096", "data.batch_size=256", f"data.cache_dir={tmp_path / 'cache'}",
    ]  # fmt: skip
    metrics = train(compose_train_config(tmp_path / "run", base=overrides))
    assert metrics["global_step"] == 20 and list((tmp_path / "cache").glob("activations-*/activations.bin"))


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"hook": "blocks.0.hook_atn_out"}, r"hook=blocks.0.hook_atn_out is not a hook point of .* nearest"),
        ({"hook": "blocks.0.attn.hook_pattern"}, "attention maps"),
        ({"source": None}, "experiment=sae needs source="),
        ({"hook": None}, "experiment=sae needs hook="),
        ({"source": "pretrained:nothing"}, "unknown pretrained model 'nothing'"),
        ({"path": "README.md"}, "reads no text; data.path= is for a model of text"),
        ({"batch_size": 0}, "data.batch_size=0 must be a positive integer"),
        ({"buffer": 10}, "data.buffer=10 must be between data.batch_size=1024"),
    ],
)
def test_bad_sources_and_hooks_are_one_line(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message):
        task(tmp_path, **settings)


def test_a_missing_hook_through_train_py(tmp_path):
    base = ["experiment=sae", f"source={SOURCE}", "hook=blocks.7.hook_resid_post", *COMMON]
    with pytest.raises(ConfigError, match=r"hook=blocks.7.hook_resid_post is not a hook point"):
        train(compose_train_config(tmp_path, base=base))
