"""Write text with a trained language model, or map a source to its output with a sequence-to-sequence one.

    python -m transformer_lab.sample ckpt_path=pretrained:shakespeare prompt="ROMEO:" temperature=0.8 top_k=40
    python -m transformer_lab.sample ckpt_path=pretrained:sort source="3 1 3 9" beam_size=4
    python -m transformer_lab.sample ckpt_path=saved_models/shakespeare/<run>/checkpoints/best.ckpt seed=7

(`python scripts/sample.py ...` in a checkout is the same.) The tokenizer is stored in the checkpoint (its
vocabulary, or a text task's BPE as tokenizer.json text), so no data file is needed. The prompt is text,
encoded as the model's tokenizer does; the output is text. Same seed, same text; one sample is printed as
it is written (a character whose bytes span several BPE tokens once its last byte is written). `prompt=`
goes to a model that continues text; `source=` to any checkpoint of a sequence-to-sequence task (reverse,
sort): an encoder-decoder generates its output (greedy, or beam search with `beam_size=`), a decoder-only
model continues `source <sep>`, an encoder labels each source position.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from transformer_lab.cli import parse_key_values, pick_device, run, starting, to_number
from transformer_lab.errors import as_config_error, require

if TYPE_CHECKING:  # torch and the model load after the arguments are parsed (fast --help)
    from transformer_lab.checkpoint import Checkpoint

MAX_NEW_TOKENS = 100_000  # one sample of a small model: minutes of CPU; more is surely a typo
MAX_SAMPLES = 1_000
MAX_BEAMS = 64
MAX_PENDING = 8  # tokens held back while they end in part of a character (UTF-8: at most 4 bytes)
KEYS = {
    "ckpt_path": "checkpoint (required): <run>/checkpoints/best.ckpt, a run directory, or pretrained:<name>",
    "prompt": 'text to continue (default "\\n"); characters the tokenizer cannot encode are named',
    "source": 'a sequence-to-sequence task\'s input, e.g. source="3 1 3 9" (sort, reverse)',
    "beam_size": f"encoder-decoder: beams of the beam search (default 1 = greedy; at most {MAX_BEAMS})",
    "max_new_tokens": f"tokens to generate (default 500; at most {MAX_NEW_TOKENS})",
    "temperature": "softmax temperature; 0 = greedy (default 0.8)",
    "top_k": "sample among the k most likely tokens (default 40; null = all)",
    "top_p": "nucleus sampling: smallest set with this much probability (default null)",
    "seed": "random seed (default 7; null: a random one)",
    "num_samples": f"how many independent samples (default 1; at most {MAX_SAMPLES})",
    "use_cache": "true | false: KV cache (default true)",
    "device": "auto | cpu | cuda | mps (default auto)",
}


def main(argv: list[str] | None = None) -> None:
    args = parse_key_values(argv, KEYS, __doc__)
    require("ckpt_path" in args, "missing ckpt_path=...; pass e.g. ckpt_path=<run>/checkpoints/best.ckpt")
    require("prompt" not in args or "source" not in args, "pass either source= or prompt=, not both")
    require("beam_size" not in args or "source" in args, "beam_size= goes with source= (a task's input)")
    starting(f"Loading {args['ckpt_path']}")
    from transformer_lab.checkpoint import load

    checkpoint = load(args["ckpt_path"], device=pick_device(args.get("device", "auto")))
    if "source" in args:
        translate(checkpoint, args)
    else:
        continue_text(checkpoint, args)


def continue_text(checkpoint: Checkpoint, args: dict[str, str]) -> None:
    """Sample `num_samples` continuations of `prompt=` and print them (one sample as it is written)."""
    import torch

    from transformer_lab.training.config_checks import check_seed

    model = checkpoint.model
    require(
        model.decoder_only,
        f"{checkpoint.location} (an {model.config.arch.replace('_', '-')} model of {checkpoint.task_name}) "
        'does not continue text; give it source=, an input of its task, e.g. source="3 1 3 9"',
    )
    prompt = args.get("prompt", "\n").replace("\\n", "\n")
    require(len(prompt) > 0, 'prompt= is empty; pass at least one character, e.g. prompt="ROMEO:"')
    max_new_tokens = to_number(args, "max_new_tokens", int, 500)
    require(
        max_new_tokens is not None and 0 <= max_new_tokens <= MAX_NEW_TOKENS,
        f"max_new_tokens={args.get('max_new_tokens')} must be an integer from 0 to {MAX_NEW_TOKENS}",
    )
    num_samples = to_number(args, "num_samples", int, 1)
    require(
        num_samples is not None and 1 <= num_samples <= MAX_SAMPLES,
        f"num_samples={args.get('num_samples')} must be an integer from 1 to {MAX_SAMPLES}",
    )
    use_cache = args.get("use_cache", "true").lower()
    require(use_cache in ("true", "false"), f"use_cache={use_cache} must be true or false")

    device = checkpoint.device
    seed = to_number(args, "seed", int, 7)
    check_seed(seed)
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    ids = checkpoint.tokenizer.encode(prompt).to(device).unsqueeze(0).repeat(num_samples, 1)
    streaming = num_samples == 1

    pending: list[int] = []  # tokens not printed yet: the first bytes of a character still being written

    def show(token: torch.Tensor) -> None:  # one sample: each token as it is written ("3 1": apart)
        pending.append(int(token[0]))
        text = checkpoint.decode(pending)
        if text.endswith("\ufffd") and len(pending) < MAX_PENDING:
            return  # a character's bytes so far (a byte-level BPE): print it when it is whole
        sys.stdout.write(checkpoint.tokenizer.separator + text if text else "")
        sys.stdout.flush()
        pending.clear()

    if streaming:
        sys.stdout.write(prompt)
    with as_config_error():
        out = model.generate(
            ids,
            max_new_tokens,
            temperature=to_number(args, "temperature", float, 0.8),
            top_k=to_number(args, "top_k", int, 40),
            top_p=to_number(args, "top_p", float, None),
            use_cache=use_cache == "true",
            generator=generator,
            on_token=show if streaming else None,
        )
    if streaming:
        if pending:  # bytes that never made a character
            sys.stdout.write(checkpoint.decode(pending))
        print()
        return
    for i, row in enumerate(out):
        print(f"---------- sample {i} ----------")
        print(checkpoint.decode(row.cpu()))


def translate(checkpoint: Checkpoint, args: dict[str, str]) -> None:
    """Print `source -> output` for a sequence-to-sequence checkpoint: generated by an encoder-decoder
    (greedy or beam search) or a decoder-only model (greedy, after `source <sep>`), labelled position by
    position by an encoder."""
    task, model = checkpoint.task, checkpoint.model
    require(
        hasattr(task, "source_ids"),
        f"source= needs a sequence-to-sequence task (reverse, sort); {checkpoint.location} was trained on "
        f"{checkpoint.task_name}, which continues text: use prompt= instead",
    )
    beam_size = to_number(args, "beam_size", int, 1)
    require(
        beam_size is not None and 1 <= beam_size <= MAX_BEAMS,
        f"beam_size={args.get('beam_size')} must be an integer from 1 to {MAX_BEAMS} (1: greedy)",
    )
    source = task.source_ids(checkpoint.encode(args["source"], "source"))
    with as_config_error():
        output = model.answer(model.prompt(source.to(checkpoint.device)), beam_size=beam_size)[0].tolist()
    note = task.length_note(len(source))
    if note:
        print(note, file=sys.stderr)
    if model.generates and model.eos_id in output:
        output = output[: output.index(model.eos_id)]  # the output ends at <eos>; padding follows it
    print(f"{checkpoint.decode(source)} -> {checkpoint.decode(output)}")


if __name__ == "__main__":
    run(main)
