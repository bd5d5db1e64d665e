"""The hook-point example of docs/hooks.md, runnable:

    python docs/hooks_example.py saved_models/reverse/<run>/checkpoints/best.ckpt

for a reverse-task checkpoint with 2 layers, e.g. from
`python train.py trainer.max_epochs=3 model.num_layers=2 model.num_heads=4`. tests/test_docs.py runs it.
"""

import sys

import torch

from transformer_lab import load_model

checkpoint = sys.argv[1]

model = load_model(checkpoint)  # an EncoderClassifier, in eval mode
tokens = torch.tensor([[4, 0, 1, 0, 3, 0, 2, 0, 0, 8, 4, 6, 8, 2, 6, 1]])

logits, cache = model.run_with_cache(tokens)  # every hook point's activation, by name
print(type(model).__name__, len(model.hook_names()), "hook points:", model.hook_names()[:3], "...")
print("pattern", tuple(cache["blocks.1.attn.hook_pattern"].shape))  # [batch, heads, query, key]
print("predicted", logits.argmax(-1)[0].tolist())

for head in range(model.config.num_heads):  # remove one head of layer 2 at a time: which are needed?

    def zero_head(z, hook, head=head):  # z: [batch, position, head, d_head]
        return z.index_fill(2, torch.tensor([head]), 0)

    ablated = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_z", zero_head)])
    right = (ablated.argmax(-1) == tokens.flip(-1)).float().mean().item()
    print(f"layer 2 without head {head + 1}: {right:.0%} of positions right")
