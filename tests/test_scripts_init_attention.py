"""scripts/init_attention.py: attention statistics of the model train.py would start from."""

import math

import pytest

from tests.conftest import load_script
from transformer_lab.errors import ConfigError

init_attention = load_script("init_attention")


def test_without_scaling_the_scores_grow_by_sqrt_dk_and_the_softmax_saturates(tmp_path, capsys):
    import torch

    from transformer_lab.nn import build_model

    inputs = (torch.randint(0, 10, (32, 16), generator=torch.Generator().manual_seed(0)),)
    stats = {}
    for scaled in (True, False):
        torch.manual_seed(0)  # the same weights: only the scaling differs
        model = build_model(
            dict(arch="encoder", vocab_size=10, model_dim=64, num_heads=2, max_len=16, scale_attention=scaled)
        )
        stats[scaled] = init_attention.attention_statistics(model, inputs)[0]
    d_k = stats[True]["d_k"]
    assert d_k == 32
    for head in range(2):
        ratio = stats[False]["score"][head] / stats[True]["score"][head]
        assert ratio == pytest.approx(math.sqrt(d_k), rel=1e-4)
        assert stats[False]["entropy"][head] < stats[True]["entropy"][head] <= math.log(16) + 1e-6
        assert stats[False]["max_weight"][head] > stats[True]["max_weight"][head]


def test_command_prints_every_head_and_writes_the_maps(tmp_path, capsys):
    init_attention.main(["model.num_heads=2", "num_examples=8", f"out_dir={tmp_path}"])
    out = capsys.readouterr().out
    assert "scale_attention=True" in out and "8 test examples" in out
    assert len([line for line in out.splitlines() if line.startswith("blocks.0.attn")]) == 2
    assert (tmp_path / "attention_grid.png").stat().st_size > 1000


@pytest.mark.parametrize(
    ("argument", "message"), [("num_examples=0", "num_examples=0"), ("model.scale_attention=maybe", "scale")]
)
def test_bad_arguments_are_one_line_errors(argument, message):
    with pytest.raises(ConfigError, match=message):
        init_attention.main([argument])
