"""The hook-point example of docs/hooks.md, runnable: `python docs/hooks_example.py` (tests/test_docs.py
runs it). Any 2-layer reverse checkpoint works in place of the ready-made one, e.g. one from
`python train.py trainer.max_epochs=3 model.num_layers=2 model.num_heads=4`.
"""

import torch

from transformer_lab import load_model

model = load_model("pretrained:reverse_2l4h")  # an EncoderClassifier, in eval mode
digits = ["4", "0", "1", "0", "3", "0", "2", "0", "0", "8", "4", "6", "8", "2", "6", "1"]
tokens = torch.tensor([[model.vocab.index(d) for d in digits]])  # token ids: vocab[i] is token i

logits, cache = model.run_with_cache(tokens)  # every hook point's activation, by name
print(type(model).__name__, len(model.hook_names()), "hook points:", model.hook_names()[:3], "...")
print("pattern", tuple(cache["blocks.1.attn.hook_pattern"].shape))  # [batch, heads, query, key]
print("predicted", " ".join(model.vocab[i] for i in logits.argmax(-1)[0].tolist()))

for head in range(model.config.num_heads):  # remove one head of layer 1 (L1) at a time: which matter?

    def zero_head(z, hook, head=head):  # z: [batch, position, head, d_head]
        return z.index_fill(2, torch.tensor([head]), 0)

    ablated = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_z", zero_head)])
    right = (ablated.argmax(-1) == tokens.flip(-1)).float().mean().item()
    print(f"without L1H{head}: {right:.0%} of positions right")
