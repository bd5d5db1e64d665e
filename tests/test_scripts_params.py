"""scripts/params.py: the parameter count of every part of the model train.py would build."""

import pytest

from tests.conftest import gpt_decoder, load_script, run_cli
from transformer_lab.errors import ConfigError

params = load_script("params")


def test_parts_add_up_to_the_model_and_follow_the_formulas():
    from transformer_lab.nn import build_model

    model = build_model(dict(arch="encoder", vocab_size=14, model_dim=100, num_heads=4, max_len=16))
    rows = {(where, part): count for where, part, _, count, _ in params.parameter_table(model)}
    assert sum(rows.values()) == sum(p.numel() for p in model.parameters())
    d, d_ff = 100, 200
    assert rows["blocks.0", "attn.qkv_proj"] == 3 * (d * d + d)
    assert rows["blocks.0", "attn.o_proj"] == d * d + d
    assert rows["blocks.0", "mlp.fc_in"] == d * d_ff + d_ff
    assert rows["blocks.0", "norm1"] == 2 * d
    assert rows["", "embed"] == 14 * d


def test_tied_weights_count_once():
    model = gpt_decoder(vocab_size=65)
    rows = {(where, part): count for where, part, _, count, _ in params.parameter_table(model)}
    assert rows["", "embed"] == 65 * 32
    assert rows["", "unembed"] == 65  # its bias only: the weight is the token embedding's
    assert sum(rows.values()) == sum(p.numel() for p in model.parameters())


def test_command_line_builds_what_train_py_builds():
    result = run_cli("scripts/params.py", "model.model_dim=100", "model.num_layers=2")
    assert result.returncode == 0, result.stderr
    assert "d=100" in result.stdout and "layers=2" in result.stdout
    assert "= blocks.1" in result.stdout
    assert "30,300" in result.stdout  # 3 (d^2 + d) for W_Q, W_K, W_V at d = 100


@pytest.mark.parametrize(
    ("argument", "message"),
    [("model.model_dim=abc", "model.model_dim"), ("task=nope", "task/nope"), ("oops", "key=value")],
)
def test_bad_arguments_are_one_line_errors(argument, message):
    with pytest.raises(ConfigError, match=message) as error:
        params.main([argument])
    assert "\n" not in str(error.value)
