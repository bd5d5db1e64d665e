"""The measures SAEs are compared by, under the names SAELens writes in its metrics (its `evals.py`),
each meaning what it means there (checked against SAELens's evals on the same SAE and tokens:
tests/test_sae_interop.py), and two of this project's own (the shares of dead and dense features):

    l0                     mean over positions of the number of active features, sum_i [f_i > 0]
    l1                     mean over positions of sum_i f_i
    mse                    mean over positions of the squared error summed over the activation's
                           dimensions, (1 / N) sum_n ||x_n - x_hat_n||^2 (SAELens's, as its training's)
    explained_variance     1 - sum_n ||x_n - x_hat_n||^2 / sum_n ||x_n - mean(x)||^2
    cossim                 mean over positions of cos(x_n, x_hat_n)
    ce_loss_without_sae    the model's loss on its task's labels (cross-entropy, mean over labelled outputs)
    ce_loss_with_sae       ... with the activation at the hook replaced by the SAE's reconstruction
    ce_loss_with_ablation  ... with the activation at the hook replaced by zeros
    ce_loss_score          (ablation - with_sae) / (ablation - without_sae): 1 when the reconstruction
                           loses nothing the model uses, 0 when it is as bad as removing the activation
    kl_div_with_sae        KL(clean || with the reconstruction) of the output distributions, mean over the
                           labelled outputs;  kl_div_with_ablation: the same with zeros
    kl_div_score           (kl_div_with_ablation - kl_div_with_sae) / kl_div_with_ablation
    dead_feature_share     the share of features that never fire on the examples (density 0)
    dense_feature_share    the share of features firing on more than DENSE of the positions
    feature_density        each feature's share of positions it fires on (a histogram of log10 of it:
                           `density_histogram`)

Positions are the real ones (padding left out). Every measure is a ratio of sums over positions, so
batches are summed (`Sums`, which DDP ranks can add up) and the measures computed once at the end
(`measures`). The model-level ones need the model the activations come from: `model_sums` runs it three
times (clean, with the reconstruction spliced in, with zeros at the hook).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_lab.nn import IGNORE_INDEX, TokenModel, evaluating
from transformer_lab.nn.sae import SparseAutoencoder, real_positions, spliced

DENSE = 0.1  # a feature on at more than this share of positions is dense
HISTOGRAM_EDGES = [float(e) for e in range(-8, 1)]  # log10(density) bins: [-8, -7), ..., [-1, 0]
MAX_PREVIOUS_VOCAB = 4096  # previous-token counts keep [width, vocab] numbers: only for small vocabularies
SAELENS_NAMES = (
    "l0",
    "l1",
    "mse",
    "explained_variance",
    "cossim",
    "ce_loss_score",
    "ce_loss_with_sae",
    "ce_loss_without_sae",
    "ce_loss_with_ablation",
    "kl_div_score",
    "kl_div_with_sae",
    "kl_div_with_ablation",
)


def empty_sums(width: int, d_in: int, vocab: int = 0) -> dict[str, Tensor]:
    """Zeroed sums for an SAE of `width` features on `d_in` activations (and previous-token counts over a
    vocabulary of `vocab` tokens, if > 0): float64, so that millions of positions add up exactly."""
    zero = torch.zeros((), dtype=torch.float64)
    sums = {
        name: zero.clone()
        for name in (
            "positions", "squared_error", "squared_norm", "cossim", "l0", "l1", "outputs", "ce_without",
            "ce_with", "ce_ablation", "kl_with", "kl_ablation",
        )
    }  # fmt: skip
    sums["sum_x"] = torch.zeros(d_in, dtype=torch.float64)
    sums["fired"] = torch.zeros(width, dtype=torch.float64)
    if vocab:
        sums["previous"] = torch.zeros(width, vocab, dtype=torch.float64)  # fired with token v just before
        sums["previous_count"] = torch.zeros(vocab, dtype=torch.float64)  # positions after token v
    return sums


def add(sums: dict[str, Tensor], more: dict[str, Tensor]) -> None:
    """sums += more, key by key (on the sums' device)."""
    for key, value in more.items():
        sums[key] += value.to(sums[key].device, torch.float64)


def activation_sums(x: Tensor, x_hat: Tensor, f: Tensor) -> dict[str, Tensor]:
    """The sums over positions of activations x [N, d], their reconstructions [N, d] and features [N, W]."""
    x, x_hat, f = x.double(), x_hat.double(), f.double()
    cos = F.cosine_similarity(x, x_hat, dim=-1, eps=1e-12)
    return {
        "positions": torch.tensor(float(len(x)), dtype=torch.float64, device=x.device),
        "squared_error": (x - x_hat).pow(2).sum(),
        "squared_norm": x.pow(2).sum(),
        "sum_x": x.sum(0),
        "cossim": cos.sum(),
        "l0": (f > 0).sum(),
        "l1": f.sum(),
        "fired": (f > 0).sum(0),
    }


def model_sums(
    model: TokenModel,
    sae: SparseAutoencoder,
    inputs: tuple[Tensor, ...],
    labels: Tensor,
    previous: bool = False,
) -> dict[str, Tensor]:
    """The sums of `activation_sums` at the SAE's hook and the model-level ones over a batch of the
    model's task (inputs, labels): the loss and the output distribution clean, with the activation
    replaced by the SAE's reconstruction (spliced in, its error term zeroed), and with zeros. A transcoder
    (`nn.transcoder`) is measured where it writes (`output_hook`, the MLP's output): replaced by what it
    writes from the MLP's input of the same pass, and zeros there. With `previous` (a model reading one
    stream of tokens), the previous-token counts too."""
    hook = sae.config.hook
    writes = getattr(sae.config, "output_hook", "") or hook
    captured: dict[str, Tensor] = {}

    def keep(name: str):
        def hook_fn(activation: Tensor, point: object) -> None:
            captured[name] = activation

        return hook_fn

    def zero(activation: Tensor, point: object) -> Tensor:
        return torch.zeros_like(activation)

    def transcoded(activation: Tensor, point: object) -> Tensor:
        return sae(captured["read"].flatten(2)).view_as(activation)

    with evaluating(model), evaluating(sae):
        clean = model.run_with_hooks(*inputs, fwd_hooks=[(writes, keep("x"))])
        ablated = model.run_with_hooks(*inputs, fwd_hooks=[(writes, zero)])
        if writes != hook:
            with sae.hooks([("hook_sae_acts_post", keep("f")), ("hook_sae_output", keep("x_hat"))]):
                reconstructed = model.run_with_hooks(
                    *inputs, fwd_hooks=[(hook, keep("read")), (writes, transcoded)]
                )
        else:
            with spliced(model, sae):
                reconstructed = model.run_with_hooks(
                    *inputs,
                    fwd_hooks=[
                        (f"{hook}.sae.hook_sae_error", zero),
                        (f"{hook}.sae.hook_sae_acts_post", keep("f")),
                        (f"{hook}.sae.hook_sae_output", keep("x_hat")),
                    ],
                )
    real = real_positions(model, writes, inputs)
    x, x_hat, f = (captured[name].flatten(2)[real] for name in ("x", "x_hat", "f"))
    sums = activation_sums(x, x_hat, f)
    labelled = labels != IGNORE_INDEX
    sums["outputs"] = labelled.sum().double()
    for name, logits in (("without", clean), ("with", reconstructed), ("ablation", ablated)):
        sums[f"ce_{name}"] = F.cross_entropy(
            logits.flatten(0, 1).double(), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
        )
    log_clean = clean[labelled].double().log_softmax(-1)
    for name, logits in (("with", reconstructed), ("ablation", ablated)):
        log_other = logits[labelled].double().log_softmax(-1)
        sums[f"kl_{name}"] = (log_clean.exp() * (log_clean - log_other)).sum()
    if previous:
        tokens = inputs[0]
        after = real.clone()
        after[:, 0] = False  # the first position has no previous token
        prev = torch.zeros_like(tokens)
        prev[:, 1:] = tokens[:, :-1]
        fired = (captured["f"].flatten(2) > 0)[after].double()  # [N, W]
        onehot = F.one_hot(prev[after], len(model.vocab)).double()  # [N, V]
        sums["previous"] = fired.t() @ onehot
        sums["previous_count"] = onehot.sum(0)
    return sums


SHARE_LEVEL = 0.9  # precision and recall a previous-token feature must reach


def measures(sums: dict[str, Tensor]) -> dict[str, float]:
    """The measures (the module docstring) of summed batches; the model-level ones where the sums have
    outputs. The answer keys' grades are `previous_token_grades`'."""
    n = float(sums["positions"])
    if n == 0:
        return {}
    total = float(sums["squared_norm"] - sums["sum_x"].pow(2).sum() / n)
    density = sums["fired"] / n
    out = {
        "l0": float(sums["l0"]) / n,
        "l1": float(sums["l1"]) / n,
        "mse": float(sums["squared_error"]) / n,
        "explained_variance": 1 - float(sums["squared_error"]) / total if total > 0 else float("nan"),
        "cossim": float(sums["cossim"]) / n,
        "dead_feature_share": float((density == 0).double().mean()),
        "dense_feature_share": float((density > DENSE).double().mean()),
    }
    outputs = float(sums["outputs"])
    if outputs > 0:
        without, with_sae, ablation = (
            float(sums[f"ce_{k}"]) / outputs for k in ("without", "with", "ablation")
        )
        kl_with, kl_ablation = (float(sums[f"kl_{k}"]) / outputs for k in ("with", "ablation"))
        gap = ablation - without
        out |= {
            "ce_loss_score": (ablation - with_sae) / gap if gap != 0 else float("nan"),
            "ce_loss_with_sae": with_sae,
            "ce_loss_without_sae": without,
            "ce_loss_with_ablation": ablation,
            "kl_div_score": (kl_ablation - kl_with) / kl_ablation if kl_ablation > 0 else float("nan"),
            "kl_div_with_sae": kl_with,
            "kl_div_with_ablation": kl_ablation,
        }
    return out


def previous_token_grades(sums: dict[str, Tensor]) -> dict[str, float]:
    """The induction key's grades where the sums have previous-token counts (else none):
    `previous_token_share` and `previous_token_score`, each token's best feature's min(precision,
    recall) averaged (how near the share's 0.9 they come)."""
    if "previous" not in sums or float(sums["previous_count"].sum()) == 0:
        return {}
    scores = previous_token_scores(sums)
    return {
        "previous_token_share": float((scores >= SHARE_LEVEL).double().mean()),
        "previous_token_score": float(scores.mean()),
    }


def previous_token_scores(sums: dict[str, Tensor]) -> Tensor:
    """For each token v that occurs, the best feature's min(precision, recall) as a detector of "v is the
    token just before": precision P(previous = v | the feature fires), recall P(it fires | previous = v)."""
    joint, count = sums["previous"], sums["previous_count"]
    precision = joint / joint.sum(1, keepdim=True).clamp(min=1)  # among the positions it fires at
    recall = joint / count.clamp(min=1)[None, :]
    return torch.minimum(precision, recall).max(dim=0).values[count > 0]


def density_histogram(sums: dict[str, Tensor]) -> dict[str, list]:
    """Each feature's density as a histogram of log10(density) over HISTOGRAM_EDGES, and the dead ones
    (density 0) counted apart: {"log10_edges", "counts", "dead"}."""
    n = float(sums["positions"])
    density = sums["fired"] / max(n, 1.0)
    alive = density[density > 0]
    logs = alive.log10().clamp(min=HISTOGRAM_EDGES[0], max=-1e-12)
    counts = torch.histc(logs, bins=len(HISTOGRAM_EDGES) - 1, min=HISTOGRAM_EDGES[0], max=HISTOGRAM_EDGES[-1])
    return {
        "log10_edges": HISTOGRAM_EDGES,
        "counts": [int(c) for c in counts.tolist()],
        "dead": int((density == 0).sum()),
    }


def log10_density(sums: dict[str, Tensor], floor: float = 1e-10) -> Tensor:
    """log10(density + floor) per feature [width] (SAELens's `log_feature_sparsity`)."""
    n = float(sums["positions"])
    return (sums["fired"] / max(n, 1.0) + floor).log10()
