"""One module per task (dataset + datamodule), the task base class and the tokenizers; for text, also the
corpus reader (corpus.py), the token files and their cache (tokens.py) and the window sampler (windows.py);
for sparse autoencoders, the tasks of activation vectors (activation_task.py): a model's at a hook
(activations.py) and the answer keys' (synthetic_features.py, superposition.py)."""

from transformer_lab.data.activation_task import ActivationTask
from transformer_lab.data.activations import ActivationsDataModule
from transformer_lab.data.induction import InductionDataModule
from transformer_lab.data.modular_addition import ModularAdditionDataModule
from transformer_lab.data.reverse import ReverseDataModule
from transformer_lab.data.seq2seq import Seq2SeqDataModule
from transformer_lab.data.shakespeare import ShakespeareDataModule
from transformer_lab.data.sort import SortDataModule
from transformer_lab.data.superposition import SuperpositionDataModule
from transformer_lab.data.synthetic_features import SyntheticFeaturesDataModule
from transformer_lab.data.task import IGNORE_INDEX, TaskDataModule
from transformer_lab.data.text import TextDataModule
from transformer_lab.data.tokenizer import BPETokenizer, Tokenizer

__all__ = [
    "IGNORE_INDEX",
    "ActivationTask",
    "ActivationsDataModule",
    "BPETokenizer",
    "InductionDataModule",
    "ModularAdditionDataModule",
    "ReverseDataModule",
    "Seq2SeqDataModule",
    "ShakespeareDataModule",
    "SortDataModule",
    "SuperpositionDataModule",
    "SyntheticFeaturesDataModule",
    "TaskDataModule",
    "TextDataModule",
    "Tokenizer",
]
