"""One module per task: its dataset and LightningDataModule (and tokenizer for text)."""

from transformer_lab.data.reverse import ReverseDataModule, ReverseDataset

__all__ = ["ReverseDataModule", "ReverseDataset"]
