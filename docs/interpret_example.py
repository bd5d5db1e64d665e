"""The analysis example of docs/interpret.md: ablation, patching, logit lens and faithfulness from Python.
Run it: `python docs/interpret_example.py` (tests/test_docs.py does). Any 2-layer reverse checkpoint works
in place of the ready-made one.
"""

import transformer_lab
from transformer_lab.analysis import faithfulness, interventions, lens

ckpt = transformer_lab.load("pretrained:reverse_2l4h")  # or a run: saved_models/reverse/<run>
model = ckpt.model
inputs, labels = ckpt.examples(256)  # (model inputs, labels) of the first 256 test examples
print(interventions.ablate_heads(model, inputs, labels, method="mean").table())
print("without L1H0 and L1H2:", interventions.ablate_head_set(model, inputs, labels, heads=[(1, 0), (1, 2)]))

clean, corrupted = ckpt.corrupted_pairs(64, position=0)  # source token 0 changed: (inputs, labels) each
result = interventions.activation_patching(model, clean, corrupted)
print("restored by patching layer 1's input:", [round(v, 2) for v in result.resid["blocks.1.hook_resid_pre"]])
print("restored by patching each head:", [[round(v, 2) for v in layer] for layer in result.heads])

print("accuracy read after the embedding and each block:", lens.lens_accuracy(model, inputs, labels).layers)
few = tuple(x[:32] for x in inputs)
print(faithfulness.deletion_curves(model, few, labels[:32]).table())
