"""SplitsDataModule: a task that serves its train, val and test splits through one loader."""

from torch.utils.data import DataLoader

from transformer_lab.data.task import TaskDataModule


class SplitsDataModule(TaskDataModule):
    """A task whose splits are served by `_loader(split, shuffle)` (the subclass's): the train split
    shuffled, the val and test splits in order."""

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        raise NotImplementedError(f"{type(self).__name__} must define _loader")

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
