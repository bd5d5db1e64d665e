"""A negative control: modular addition whose training labels are shuffled among its training pairs
(Zhang et al., 2017, "Understanding deep learning requires rethinking generalization"), so that nothing in
the inputs predicts them. A model can memorise them, never generalise: the held-out splits keep their true
labels, and no phase change of the held-out measures should appear (docs/dynamics.md, the controls).

    python train.py experiment=grokking data=shuffled_modular_addition

The permutation is drawn from the data seed alone (the same seed, the same labels) and is fixed for the
run: each training pair keeps the label it was dealt, as a memorised random labelling must.
"""

import torch
from torch import Tensor

from transformer_lab.data.modular_addition import ModularAdditionDataModule

SHUFFLE_SEED = 1_000_003  # added to the data seed: the permutation differs from the split's own draw


class ShuffledModularAddition(ModularAdditionDataModule):
    """(a + b) mod p with the training pairs' answers shuffled among them: a random answer per pair (each
    answer as often as before); the held-out pairs keep their true sums. `all_pairs` says so, so that
    the training loss of the progress measures (`analysis.grokking`) is the one the model trained on."""

    def all_pairs(self) -> tuple[Tensor, Tensor]:
        tokens, labels = super().all_pairs()
        train, _ = self.split_indices()
        generator = torch.Generator().manual_seed(self.seed + SHUFFLE_SEED)
        labels[train] = labels[train[torch.randperm(train.numel(), generator=generator)]]
        return tokens, labels
