"""The analysis example of docs/interpret.md: ablation, patching, logit lens and faithfulness from Python.
Run it: `python docs/interpret_example.py` (tests/test_docs.py does). Any 2-layer reverse checkpoint works
in place of the ready-made one.
"""

from transformer_lab import faithfulness, interventions, lens, load_model
from transformer_lab.checkpoints import read_checkpoint, task_from_checkpoint

path = "pretrained:reverse_2l4h"  # or e.g. saved_models/reverse/<run>/checkpoints/best.ckpt
model, task = load_model(path), task_from_checkpoint(read_checkpoint(path))
inputs, labels = task.examples(256)  # (model inputs, labels) of the first 256 test examples
print(interventions.ablate_heads(model, inputs, labels, method="mean").table())
print("without L1H0 and L1H2:", interventions.ablate_head_set(model, inputs, labels, heads=[(1, 0), (1, 2)]))

clean, corrupted = task.corrupted_pairs(64, position=0)  # source token 0 changed, batches (*inputs, labels)
result = interventions.activation_patching(model, (clean[:-1], clean[-1]), (corrupted[:-1], corrupted[-1]))
print("restored by patching layer 1's input:", [round(v, 2) for v in result.resid["blocks.1.hook_resid_pre"]])
print("restored by patching each head:", [[round(v, 2) for v in layer] for layer in result.heads])

print("accuracy read after the embedding and each block:", lens.lens_accuracy(model, inputs, labels).layers)
few = tuple(x[:32] for x in inputs)
print(faithfulness.deletion_curves(model, few, labels[:32]).table())
