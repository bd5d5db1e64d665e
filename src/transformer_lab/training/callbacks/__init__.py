"""Lightning callbacks, one file each (and one config each, in configs/callbacks/):

best_checkpoint.py   best.ckpt: the weights with the best validation score
last_checkpoint.py   last.ckpt: the newest state, to resume from (also on Ctrl-C)
finite_loss.py       stop a run whose loss became NaN or infinite
attention_maps.py    the attention grid of a validation example, in TensorBoard
text_samples.py      what the model writes, in TensorBoard's Text tab
head_metrics.py      per-head entropy and task alignment, the ablation table at the end
fit_timer.py         where a run's time goes (the end-to-end benchmark)
snapshots.py         the model at log-spaced steps, for analyses over time (checkpoints/snapshots/)
phase_change.py      the step at which a validation metric changed fastest, printed at the end
tensorboard.py       when the figure callbacks write
ctrl_c.py            Ctrl-C stops the run at the end of a batch (always on: build_trainer adds it)
"""

from transformer_lab.training.callbacks.attention_maps import AttentionMapCallback
from transformer_lab.training.callbacks.best_checkpoint import BestCheckpoint
from transformer_lab.training.callbacks.finite_loss import FiniteLossCheck
from transformer_lab.training.callbacks.fit_timer import FitTimer, HookTimes
from transformer_lab.training.callbacks.head_metrics import HeadMetricsCallback
from transformer_lab.training.callbacks.last_checkpoint import LastCheckpoint
from transformer_lab.training.callbacks.phase_change import PhaseChange
from transformer_lab.training.callbacks.snapshots import Snapshots
from transformer_lab.training.callbacks.text_samples import TextSampleCallback

__all__ = [
    "AttentionMapCallback",
    "BestCheckpoint",
    "FiniteLossCheck",
    "FitTimer",
    "HeadMetricsCallback",
    "HookTimes",
    "LastCheckpoint",
    "PhaseChange",
    "Snapshots",
    "TextSampleCallback",
]
