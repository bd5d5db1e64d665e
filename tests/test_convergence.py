"""The headline claim: the default reverse config (`python train.py`) reaches test accuracy 1.0 on a CPU
(its time is measured by `scripts/bench.py --phases reverse`, not here)."""

import pytest
from hydra import compose, initialize_config_module
from hydra.core.hydra_config import HydraConfig

from transformer_lab.train import CONFIG_MODULE, train


@pytest.mark.reproduce  # the whole default run: make reproduce (CI runs it after the suite)
def test_default_reverse_config_reaches_full_test_accuracy(tmp_path):
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                f"paths.output_dir={tmp_path}",
                "trainer.accelerator=cpu",
                "callbacks.progress_bar.refresh_rate=0",
            ],
            return_hydra_config=True,
        )
    HydraConfig().set_config(cfg)
    metrics = train(cfg)
    assert metrics["test/acc"] == 1.0
    assert metrics["test/seq_acc"] == 1.0
