"""Train a Transformer: `python train.py task=reverse model.num_heads=4`. See README.md and configs/."""

from transformer_lab.train import main

if __name__ == "__main__":
    main()
