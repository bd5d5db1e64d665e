"""Write text with a trained character-level decoder.

    python scripts/sample.py ckpt_path=saved_models/shakespeare/<run>/checkpoints/best.ckpt \
        prompt="ROMEO:" max_new_tokens=500 temperature=0.8 top_k=40 seed=7

The vocabulary is stored in the checkpoint, so no data file is needed. Same seed, same text.
"""

import torch

from transformer_lab.checkpoints import model_from_checkpoint, read_checkpoint, tokenizer_from_checkpoint
from transformer_lab.cli import parse_key_values, pick_device, run, to_number
from transformer_lab.errors import as_config_error, require

KEYS = {
    "ckpt_path": "decoder checkpoint (required), e.g. <run>/checkpoints/best.ckpt",
    "prompt": 'text to continue (default "\\n"); every character must be in the vocabulary',
    "max_new_tokens": "characters to generate (default 500)",
    "temperature": "softmax temperature; 0 = greedy (default 0.8)",
    "top_k": "sample among the k most likely characters (default 40; null = all)",
    "top_p": "nucleus sampling: smallest set with this much probability (default null)",
    "seed": "random seed (default 7)",
    "num_samples": "how many independent samples (default 1)",
    "use_cache": "true | false: KV cache (default true)",
    "device": "auto | cpu | cuda | mps (default auto)",
}


def main(argv: list[str] | None = None) -> None:
    args = parse_key_values(argv, KEYS, __doc__)
    require("ckpt_path" in args, "missing ckpt_path=...; pass e.g. ckpt_path=<run>/checkpoints/best.ckpt")
    device = pick_device(args.get("device", "auto"))
    checkpoint = read_checkpoint(args["ckpt_path"])
    model = model_from_checkpoint(checkpoint, args["ckpt_path"], device)
    require(
        hasattr(model, "generate"),
        f"{args['ckpt_path']} is an encoder checkpoint (e.g. the reverse task); sample.py needs a decoder "
        "checkpoint, e.g. from python train.py task=shakespeare",
    )
    tokenizer = tokenizer_from_checkpoint(checkpoint, args["ckpt_path"])
    prompt = args.get("prompt", "\n").replace("\\n", "\n")
    require(len(prompt) > 0, 'prompt= is empty; pass at least one character, e.g. prompt="ROMEO:"')
    max_new_tokens = to_number(args, "max_new_tokens", int, 500)
    require(max_new_tokens is not None and max_new_tokens >= 0, "max_new_tokens must be an integer >= 0")
    num_samples = to_number(args, "num_samples", int, 1)
    require(num_samples is not None and num_samples >= 1, "num_samples must be an integer >= 1")
    use_cache = args.get("use_cache", "true").lower()
    require(use_cache in ("true", "false"), f"use_cache={use_cache} must be true or false")

    generator = torch.Generator(device=device).manual_seed(to_number(args, "seed", int, 7) or 0)
    idx = tokenizer.encode(prompt).to(device).unsqueeze(0).repeat(num_samples, 1)
    with as_config_error():
        out = model.generate(
            idx,
            max_new_tokens,
            temperature=to_number(args, "temperature", float, 0.8),
            top_k=to_number(args, "top_k", int, 40),
            top_p=to_number(args, "top_p", float, None),
            use_cache=use_cache == "true",
            generator=generator,
        )
    for i, row in enumerate(out):
        if num_samples > 1:
            print(f"---------- sample {i} ----------")
        print(tokenizer.decode(row.cpu()))


if __name__ == "__main__":
    run(main)
