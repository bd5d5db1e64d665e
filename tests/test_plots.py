"""transformer_lab.figures, and the callback that logs the attention grid to TensorBoard."""

import math

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from hydra.utils import instantiate
from matplotlib.figure import Figure
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import fit_with_callback, load_script
from transformer_lab import CosineWarmupScheduler
from transformer_lab import figures as plots
from transformer_lab.data import ReverseDataModule
from transformer_lab.data.seq2seq import PAD
from transformer_lab.errors import ConfigError
from transformer_lab.figures.raster import _viridis
from transformer_lab.nn import PositionalEncoding
from transformer_lab.training.callbacks import AttentionMapCallback
from transformer_lab.training.compose import CONFIG_MODULE


def _tick_labels(ax, axis: str) -> list[str]:
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_text() for t in ticks]


def _png_size(fig: Figure, path) -> int:
    fig.savefig(path, dpi=100)
    return path.stat().st_size


def test_token_labels_show_whitespace():
    assert plots.token_labels(["a", "\n", " ", "7"]) == ["a", "⏎", "␣", "7"]


def test_attention_grid_layers_by_heads_with_position_and_token_ticks(tmp_path):
    torch.manual_seed(0)
    maps = [torch.rand(2, 3, 5, 5).mul(8).softmax(-1) for _ in range(2)]  # 2 layers, 3 heads
    maps[0] = maps[0] * 0.3  # a diffuse layer: its own colour scale keeps its structure
    tokens = ["a", "\n", " ", "b", "c"]
    fig = plots.attention_grid(maps, tokens, index=1, title="grid")
    panels, colorbars = fig.axes[:6], fig.axes[6:]
    assert len(panels) == 6 and len(colorbars) == 2  # one colour bar per layer
    assert panels[0].get_title() == "L0H0" and panels[5].get_title() == "L1H2"  # counted from 0
    assert _tick_labels(panels[3], "x") == ["a\n0", "⏎\n1", "␣\n2", "b\n3", "c\n4"]  # bottom row
    assert _tick_labels(panels[3], "y") == ["0 a", "1 ⏎", "2 ␣", "3 b", "4 c"]  # first column
    assert _tick_labels(panels[4], "y") == [""] * 5
    torch.testing.assert_close(torch.as_tensor(panels[5].images[0].get_array()), maps[1][1, 2])
    for layer, panel in ((0, panels[0]), (1, panels[3])):  # each layer: 0 to its 99th percentile
        assert panel.images[0].get_clim() == pytest.approx((0, float(maps[layer][1].quantile(0.99))))
    assert plots.layer_scales([maps[0][1]])[0] < 0.3 < plots.layer_scales([maps[1][1]])[0]
    causal = torch.ones(8, 8).tril() / torch.arange(1, 9)[:, None]  # row 0: weight 1 on key 0
    assert plots.layer_scales([causal])[0] < 1  # the forced first rows saturate, not set the scale
    assert "L0" in colorbars[0].get_ylabel() and "L1" in colorbars[1].get_ylabel()
    assert _png_size(fig, tmp_path / "grid.png") > 5_000
    one_example = plots.attention_grid([m[0] for m in maps], tokens)  # [H, T, T] per layer works too
    assert len(one_example.axes) == 8


def test_many_tokens_thin_the_ticks_and_long_tokens_stand_upright():
    maps = [torch.rand(1, 1, 100, 100).softmax(-1)]
    fig = plots.attention_grid(maps, [chr(97 + i % 26) for i in range(100)])
    ticks = _tick_labels(fig.axes[0], "y")
    assert plots.tick_step(100) == 3 and ticks[:3] == ["0 a", "3 d", "6 g"] and len(ticks) == 34
    long = plots.attention_grid([torch.rand(1, 16, 16)], ["<bos>"] + [str(i % 10) for i in range(15)])
    assert _tick_labels(long.axes[0], "x")[:2] == ["0 <bos>", "1 0"]  # too wide to stack under a column
    short = plots.attention_grid([torch.rand(1, 3, 3)], ["<bos>", "1", "2"])
    assert _tick_labels(short.axes[0], "x") == ["<bos>\n0", "1\n1", "2\n2"]  # wide columns: stacked


def test_attention_grid_image_draws_every_cell_in_its_layers_scale():
    maps = [torch.rand(1, 4, 32, 32).softmax(-1).tril() for _ in range(4)]
    maps[1] = maps[1] * 0.2
    tokens = list("First Citizen:\nBefore we procee.")
    image = plots.attention_grid_image(maps, tokens, title="epoch 3")
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert 800 < image.shape[0] < 3000 and 800 < image.shape[1] < 3000
    # every layer's largest weight gets the top colour of its own scale, the diffuse layer's too
    top, cell = _viridis()[255], 384 // 32
    assert (image == top).all(-1).sum() >= 4 * cell * cell
    diffuse = plots.attention_grid_image([maps[1]], tokens)
    assert (diffuse == top).all(-1).sum() >= cell * cell and diffuse.shape[0] < image.shape[0]


def test_colour_cap_ignores_the_diagonal_and_outliers():
    matrix = torch.eye(16) * 0.9 + torch.eye(16).flip(1) * 0.3 + 0.01
    matrix[3, 0] = 0.8  # one outlying cell
    cap = plots.colour_cap(matrix)
    assert 0.3 <= cap < 0.8  # the anti-diagonal reaches the top of the scale, the outlier saturates
    assert plots.colour_cap(torch.zeros(3, 3)) > 0


def test_token_map_rows_columns_and_capped_colour_scale(tmp_path):
    matrix = torch.eye(4) + 0.1
    fig = plots.token_map(matrix, ["1", "2", "3", "4"], "rollout", row_tokens=["4", "3", "2", "1"], vmax=0.5)
    ax, colorbar = fig.axes
    assert _tick_labels(ax, "x") == ["1\n0", "2\n1", "3\n2", "4\n3"]
    assert _tick_labels(ax, "y") == ["0 4", "1 3", "2 2", "3 1"]
    assert ax.get_title() == "rollout" and ax.images[0].get_clim() == (0, 0.5)
    label = " ".join(colorbar.get_ylabel().split())  # wrapped to the bar's length
    assert label.startswith("weight") and "capped at 0.5: the top 25% of cells" in label
    assert fig.axes[0].images[0].colorbar.extend == "max"  # the diagonal saturates, and the bar says so
    assert plots.token_map(matrix, list("abcd"), "m").axes[0].images[0].colorbar.extend == "neither"
    assert _png_size(fig, tmp_path / "map.png") > 5_000


def test_a_small_maps_title_and_colour_bar_label_stay_inside_the_figure():
    """The rollout of a 4-token input: a long title and a capped colour bar's label are wrapped to the
    figure's size, not cut off at its edges (they were, on a six-token prompt)."""
    title = "Attention rollout (Abnar & Zuidema; Chefer et al. through cross-attention), a long title"
    label = "share of the output's relevance"
    fig = plots.token_map(torch.eye(4) + 0.1, list("abcd"), title, colorbar_label=label, vmax=0.5)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    inside = fig.bbox.padded(1)
    ax, colorbar = fig.axes
    for text in (ax.title, colorbar.yaxis.label):
        box = text.get_window_extent(renderer)
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1


def test_positional_encoding_figures_show_the_real_encoding(tmp_path):
    pe = PositionalEncoding(16, max_len=20).pe[0]
    heatmap = plots.positional_encoding_heatmap(model_dim=16, positions=20)
    torch.testing.assert_close(torch.as_tensor(heatmap.axes[0].images[0].get_array()), pe)
    curves = plots.positional_encoding_curves(model_dim=16, positions=20, dims=3)
    assert len(curves.axes) == 3
    for d, ax in enumerate(curves.axes):
        torch.testing.assert_close(torch.as_tensor(ax.lines[0].get_ydata()), pe[:, d])
    assert _png_size(curves, tmp_path / "curves.png") > 5_000


def test_learning_rates_come_from_the_scheduler():
    rates = plots.learning_rates(lr=1e-3, warmup=10, max_iters=100)
    assert len(rates) == 100 and rates[0] == 0
    reference = CosineWarmupScheduler(torch.optim.SGD([torch.zeros(1)], lr=1.0), warmup=10, max_iters=100)
    for step in (1, 5, 10, 50, 99):
        assert math.isclose(rates[step], 1e-3 * reference.get_lr_factor(step), rel_tol=1e-9)
    assert max(rates) == rates[10]  # the peak is the end of warmup


def test_lr_schedule_adds_a_close_up_of_a_short_warmup(tmp_path):
    fig = plots.lr_schedule(5e-4, warmup=50, max_iters=3900)
    assert len(fig.axes) == 2 and len(fig.axes[1].lines[0].get_xdata()) == 150
    assert len(plots.lr_schedule(5e-4, warmup=0, max_iters=100).axes) == 1
    assert _png_size(fig, tmp_path / "lr.png") > 5_000


# -------------------------------------------------------------------------------- TensorBoard callback
def _fit(
    tmp_path, callback: AttentionMapCallback, epochs: int, logger: bool = True, arch: str = "encoder"
) -> None:
    datamodule = ReverseDataModule(
        arch=arch, seq_len=6, min_seq_len=3, train_size=64, val_size=32, test_size=32, batch_size=32
    )
    fit_with_callback(tmp_path, datamodule, callback, epochs, arch, logger)


def _images(tmp_path, tag: str = "attention/val_example") -> list:
    images = []
    for events in sorted(tmp_path.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events), size_guidance={"images": 0})
        accumulator.Reload()
        if tag in accumulator.Tags()["images"]:
            images += accumulator.Images(tag)
    return images


def test_callback_logs_the_attention_grid_as_an_image(tmp_path):
    _fit(tmp_path, AttentionMapCallback(every_n_epochs=2), epochs=3)
    images = _images(tmp_path)
    # Epochs 0 and 2 (not the sanity check, not epoch 1), at the step each validation ended.
    assert [image.step for image in images] == [2, 6]
    assert all(
        image.width > 300 and image.height > 200 and len(image.encoded_image_string) > 5_000
        for image in images
    )


def test_callback_shows_an_encoder_decoder_s_cross_attention_next_to_its_self_attention(
    tmp_path, monkeypatch
):
    drawn = []
    draw = plots.attention_grid_image
    monkeypatch.setattr(
        plots, "attention_grid_image", lambda *a, **k: drawn.append(k["labels"]) or draw(*a, **k)
    )
    callback = AttentionMapCallback()
    _fit(tmp_path, callback, epochs=1, arch="encoder_decoder")
    assert drawn[:3] == [["E0", "E1"], ["D0", "D1"], ["X0", "X1"]]  # panels E0H0 ... X1H3, as the explorer
    source, target = callback._example
    assert (source != PAD).all() and (target != PAD).all()  # the example is shown without its padding
    for kind in ("encoder", "decoder", "cross"):
        (image,) = _images(tmp_path, f"attention/val_example/{kind}")
        assert image.step == 2 and len(image.encoded_image_string) > 5_000
    assert not _images(tmp_path)


def test_callback_without_tensorboard_does_nothing(tmp_path):
    callback = AttentionMapCallback()
    _fit(tmp_path, callback, epochs=1, logger=False)
    assert callback._example is None and not _images(tmp_path)


def test_callback_is_on_by_default_and_can_be_removed():
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        default = compose("train", overrides=["callbacks.attention_maps.every_n_epochs=3"])
        removed = compose("train", overrides=["~callbacks.attention_maps"])
    callback = instantiate(default.callbacks.attention_maps)
    assert isinstance(callback, AttentionMapCallback) and callback.every_n_epochs == 3
    assert "attention_maps" not in removed.callbacks
    with pytest.raises(ConfigError, match="every_n_epochs=0 must be a positive integer"):
        AttentionMapCallback(every_n_epochs=0)


def test_the_old_module_name_gives_the_same_figures():
    from transformer_lab import plots as old

    assert old.attention_grid is plots.attention_grid and old.lr_schedule is plots.lr_schedule


def test_a_schedule_of_a_trillion_steps_is_drawn_at_once_from_at_most_ten_thousand_points():
    fig = plots.lr_schedule(1e-3, warmup=10**9, max_iters=10**12)
    for ax in fig.axes:
        steps = ax.lines[0].get_xdata()
        assert 1000 < len(steps) <= 10_000 and steps[0] == 0
    rates = fig.axes[0].lines[0].get_ydata()
    assert max(rates) == pytest.approx(1e-3, rel=1e-3) and rates[-1] < 1e-6


def test_a_positional_encoding_too_large_to_hold_is_refused_before_it_is_made(tmp_path):
    tool = load_script("plots")
    with pytest.raises(ConfigError, match="model_dim=100000 is more than a model here has"):
        tool.main(["positional_encoding", "positions=100000000", "model_dim=100000"])
    with pytest.raises(ConfigError, match=r"the encoding of 100000 positions x 30000 dimensions needs"):
        tool.main(["positional_encoding", "positions=100000", "model_dim=30000", f"out_dir={tmp_path}"])
    assert not any(tmp_path.iterdir())
