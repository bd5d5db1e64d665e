"""Activation patching and circuits on a language model's own prompts: `clean=` and `corrupted=` (with
`answer=` and `wrong=`, or the model's own next tokens), or `pairs=<file.jsonl>`, as TransformerLens users
patch (tests/test_export.py compares the numbers with TransformerLens's). A task with a corruption of its
own keeps it; bad prompts are one line each."""

import json

import pytest

from tests.conftest import load_script
from transformer_lab.cli import run

SHAKESPEARE = "ckpt_path=pretrained:shakespeare"


def interpret(*args: str) -> None:
    load_script("interpret").main(list(args))


def refused(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as stopped:
        run(load_script("interpret").main, list(args))
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_patching_two_prompts_of_a_language_model(tmp_path, capsys):
    interpret(SHAKESPEARE, "analysis=patching", "clean=JULIE", "corrupted=ROMEO", f"out_dir={tmp_path}")
    out = capsys.readouterr().out
    assert "1 prompt pair, metric logit('T' over ':') at the last position" in out
    numbers = json.loads((tmp_path / "patching.json").read_text())
    last = numbers["resid"]["blocks.3.hook_resid_post"]
    assert len(last) == 5 and last[-1] == pytest.approx(1.0)  # the whole last stream: all of it restored
    assert max(numbers["resid"]["blocks.0.hook_resid_pre"]) < 1  # no single token carries all of it
    assert set(numbers["mlp"]) == {f"blocks.{i}.hook_mlp_out" for i in range(4)}
    assert len(numbers["heads"]) == 4 and len(numbers["heads"][0]) == 4
    assert (tmp_path / "patching.png").exists()


def test_named_tokens_a_file_of_pairs_and_circuits_take_the_same_prompts(tmp_path, capsys):
    interpret(SHAKESPEARE, "analysis=patching", 'clean=JULIE', 'corrupted=ROMEO', 'answer=T',
              'wrong=!', f"out_dir={tmp_path / 'named'}")  # fmt: skip
    assert "metric logit('T' over '!')" in capsys.readouterr().out
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"clean": "JULIE", "corrupted": "ROMEO"}, {"clean": "ROMEO", "corrupted": "JULIE", "wrong": "T"}]
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    err = refused(
        capsys, SHAKESPEARE, "analysis=patching", f"pairs={pairs}", "ci=0.9", f"out_dir={tmp_path}/2"
    )
    assert "ci=0.9 needs at least 8 examples for an interval, and this analysis reads 2 examples" in err
    interpret(SHAKESPEARE, "analysis=patching", f"pairs={pairs}", f"out_dir={tmp_path / 'two'}")
    printed = capsys.readouterr().out  # two pairs: no interval by default, and a line says why
    assert "2 prompt pairs, metric logit(answer over wrong)" in printed
    assert "(no intervals: 2 examples are too few for one; 8 or more give them)" in printed
    assert "ci" not in json.loads((tmp_path / "two" / "patching.json").read_text())
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows * 4))
    interpret(SHAKESPEARE, "analysis=patching", f"pairs={pairs}", "ci=0.9", f"out_dir={tmp_path / 'file'}")
    numbers = json.loads((tmp_path / "file" / "patching.json").read_text())
    assert numbers["ci"]["level"] == 0.9 and len(numbers["ci"]["mlp"]["blocks.0.hook_mlp_out"]) == 5
    interpret(SHAKESPEARE, "analysis=circuit", f"pairs={pairs}", "verify=2", f"out_dir={tmp_path / 'c'}")
    circuit = json.loads((tmp_path / "c" / "circuit.json").read_text())
    assert circuit["metric"] == "logit_diff" and circuit["edges"] and circuit["verified"] == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["clean=JULIE"], 'give both prompts: clean="..." corrupted="..."'),
        (["clean=JULIET", "corrupted=ROMEO"], "clean='JULIET' has 6 tokens and its corrupted prompt 5"),
        (["clean=QUEEN:", "corrupted=ROMEO:"], "the model predicts the same next token ('\\n')"),
        (["clean=JULIE", "corrupted=ROMEO", "answer=TT"], "answer='TT' is 2 tokens; name one token"),
        (["clean=JULIE", "corrupted=ROMEO", "pairs=x.jsonl"], "pairs= holds the prompts"),
    ],
)
def test_bad_prompts_are_one_line(args, message, capsys, tmp_path):
    assert message in refused(capsys, SHAKESPEARE, "analysis=patching", *args, f"out_dir={tmp_path}")


def test_without_prompts_a_language_model_is_patched_on_its_task_s_corruption(capsys, tmp_path):
    """The text task's corruption (a token replaced, position= places before the last) leaves the next
    token as it was: the wrong answer is the corrupted run's most likely other token, said in one line;
    the replaced token's own stream restores it all."""
    interpret(SHAKESPEARE, "analysis=patching", "num_examples=8", f"out_dir={tmp_path}")
    out = capsys.readouterr().out
    assert "8 pairs, source token 0 changed" in out
    assert "the corruption leaves the answer of 8 of 8 pairs as it was; their wrong answer is" in out
    numbers = json.loads((tmp_path / "patching.json").read_text())
    first = numbers["resid"]["blocks.0.hook_resid_pre"]
    assert first[-1] == pytest.approx(1.0) and first[:-1] == pytest.approx([0.0] * (len(first) - 1), abs=1e-6)


def test_prompts_are_for_a_language_model_and_a_task_keeps_its_own_corruption(capsys, tmp_path):
    err = refused(capsys, "ckpt_path=pretrained:reverse", "analysis=patching", "clean=1 2", "corrupted=2 1")
    assert "clean= and corrupted= are prompts of a language model" in err
    interpret(
        "ckpt_path=pretrained:induction_heads", "analysis=patching", "num_examples=8", f"out_dir={tmp_path}"
    )
    assert "8 pairs, source token 0 changed" in capsys.readouterr().out


def test_a_bad_pairs_file_is_one_line(capsys, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"clean": "JULIE"}\n')
    assert "line 1 must be" in refused(capsys, SHAKESPEARE, "analysis=patching", f"pairs={pairs}")
    pairs.write_text("[" * 100_000 + "\n")
    assert "line 1 is not a JSON object" in refused(
        capsys, SHAKESPEARE, "analysis=patching", f"pairs={pairs}"
    )
