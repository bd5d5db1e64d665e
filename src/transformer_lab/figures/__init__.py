"""Every figure of the package (matplotlib, or RGB arrays drawn with Pillow for TensorBoard):

attention.py   attention grids and single maps (attention, rollout, relevance), `position token` ticks
raster.py      the attention grid and the head-ablation table as RGB arrays, in milliseconds
interpret.py   activation patching, the logit lens, deletion curves, head ablation
tutorial.py    the sinusoidal positional encoding, the learning-rate schedule
circuits.py    a circuit as a layered graph, with its faithfulness curve
features.py    an SAE's features: their densities, the effect of ablating each
"""

from transformer_lab.figures.attention import (
    GRID_NOTES,
    MAX_TICKS,
    attention_grid,
    colour_cap,
    layer_scales,
    position_labels,
    tick_step,
    token_labels,
    token_map,
)
from transformer_lab.figures.interpret import (
    activation_patching,
    deletion_curves,
    head_ablation,
    head_measures,
    logit_lens,
)
from transformer_lab.figures.raster import attention_grid_image, head_ablation_image
from transformer_lab.figures.tutorial import (
    learning_rates,
    lr_schedule,
    positional_encoding_curves,
    positional_encoding_heatmap,
)

__all__ = [
    "GRID_NOTES",
    "MAX_TICKS",
    "activation_patching",
    "attention_grid",
    "attention_grid_image",
    "colour_cap",
    "deletion_curves",
    "head_ablation",
    "head_ablation_image",
    "head_measures",
    "layer_scales",
    "learning_rates",
    "logit_lens",
    "lr_schedule",
    "position_labels",
    "positional_encoding_curves",
    "positional_encoding_heatmap",
    "tick_step",
    "token_labels",
    "token_map",
]
