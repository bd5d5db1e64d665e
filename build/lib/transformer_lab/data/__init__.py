"""One module per task (dataset + datamodule), the task base class and the tokenizer."""

from transformer_lab.data.reverse import ReverseDataModule, ReverseDataset
from transformer_lab.data.shakespeare import ShakespeareDataModule
from transformer_lab.data.task import IGNORE_INDEX, TaskDataModule
from transformer_lab.data.tokenizer import Tokenizer

__all__ = [
    "IGNORE_INDEX",
    "ReverseDataModule",
    "ReverseDataset",
    "ShakespeareDataModule",
    "TaskDataModule",
    "Tokenizer",
]
