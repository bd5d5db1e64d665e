"""One module per task: its dataset and LightningDataModule (and tokenizer for text)."""

from transformer_lab.data.reverse import ReverseDataModule, ReverseDataset
from transformer_lab.data.shakespeare import CharTokenizer, ShakespeareDataModule

__all__ = ["CharTokenizer", "ReverseDataModule", "ReverseDataset", "ShakespeareDataModule"]
