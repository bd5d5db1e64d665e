"""transformer-lab: learn, train and take apart Transformers.

    import transformer_lab
    ckpt = transformer_lab.load("pretrained:reverse_2l4h")  # model, task, tokenizer, examples: checkpoint.py
    model = transformer_lab.load_model(path)                # just the plain nn.Module (no Lightning needed)
    run = transformer_lab.load_sae("saved_models/sae/<run>")  # an SAE and its model: sae_checkpoint.py
    from transformer_lab import TransformerPredictor, CosineWarmupScheduler

The package, by what each part does (one direction of imports, from the bottom up):
    nn/          the models in pure PyTorch; imports nothing else of the package
    data/        the tasks: datasets, datamodules, the tokenizer
    training/    the LightningModule, callbacks, checkpoint writing, the train entry's pieces
    checkpoint   a checkpoint file, checked, with its model, task and examples
    sae_checkpoint  an SAE run, checked, with the model it was trained on (sae= in the tools)
    analysis/    explanations, interventions, lens, faithfulness (no Lightning, no matplotlib)
    figures/     every matplotlib figure
    explorer/    the attention explorer: one self-contained HTML page
    pretrained/  the ready-made models and their registry
    train, sample, explain, interpret, explore, ...: the tools, `python -m transformer_lab.<tool>`

Names are imported on first use, so `import transformer_lab.nn` (pure PyTorch) and the tools' `--help`
do not pay for Lightning.
"""

import importlib

from transformer_lab import deprecated

deprecated.install()  # the module names of earlier versions (deprecated.MOVED), with a warning on use
_NAMES = {
    "Checkpoint": "transformer_lab.checkpoint",
    "ConfigError": "transformer_lab.errors",
    "CosineWarmupScheduler": "transformer_lab.nn.schedules",
    "TransformerPredictor": "transformer_lab.training.predictor",
    "load": "transformer_lab.checkpoint",
    "load_model": "transformer_lab.checkpoint",
    "load_sae": "transformer_lab.sae_checkpoint",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> object:
    if name in deprecated.MOVED:  # `transformer_lab.callbacks` as an attribute (Hydra's _target_ lookup)
        import sys

        return sys.modules[f"transformer_lab.{name}"]
    if name not in _NAMES:
        raise AttributeError(f"module 'transformer_lab' has no attribute {name!r}")
    return getattr(importlib.import_module(_NAMES[name]), name)
