"""Explaining an encoder-decoder: its three kinds of attention, relevance propagated through encoder,
decoder and cross-attention on hand-made maps whose answer is known, and on a trained sort model."""

import torch

from transformer_lab import explain, load_model
from transformer_lab.data import SortDataModule
from transformer_lab.data.seq2seq import BOS, EOS, PAD
from transformer_lab.nn import EncoderDecoder, ModelConfig


def _model() -> EncoderDecoder:
    torch.manual_seed(0)
    config = ModelConfig(
        arch="encoder_decoder",
        vocab_size=12,
        pad_id=PAD,
        bos_id=BOS,
        eos_id=EOS,
        num_heads=2,
        num_layers=2,
        max_len=10,
    )
    return EncoderDecoder(config).eval()


def test_maps_by_kind_have_their_shapes():
    source, target = torch.tensor([[5, 6, 7, PAD], [8, 9, 10, 11]]), torch.tensor([[BOS, 5, 6], [BOS, 8, 8]])
    maps = explain.encoder_decoder_maps(_model(), source, target)
    assert [len(maps[k]) for k in ("encoder", "decoder", "cross")] == [2, 2, 2]
    assert maps["encoder"][0].shape == (2, 2, 4, 4) and maps["decoder"][1].shape == (2, 2, 3, 3)
    assert maps["cross"][0].shape == (2, 2, 3, 4) and (maps["cross"][1][0, ..., 3] == 0).all()


def _one_hot_rows(columns: list[int], width: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(columns), width).float()[None]


def test_propagation_on_maps_whose_answer_is_known():
    """Encoder and decoder attend to themselves; the one cross-attention layer reads source 2, 0, 1 for
    targets 0, 1, 2: the relevance of target t is on exactly that source position."""
    eye3, eye4 = torch.eye(3)[None], torch.eye(4)[None]
    cross = _one_hot_rows([2, 0, 1], 4)
    relevance = explain._propagate([eye4], [eye3], [cross])
    assert relevance.argmax(-1).tolist() == [[2, 0, 1]]
    # An encoder layer that copies source 3 into position 2 moves target 0's relevance on to source 3 too.
    copy = eye4.clone()
    copy[0, 2] = torch.tensor([0.0, 0.0, 0.0, 1.0])
    moved = explain._propagate([copy], [eye3], [cross])
    assert moved[0, 0, 3] > 0 and moved[0, 1, 3] == 0
    # A causal decoder: target 2 read target 0, so target 2 also gets target 0's source; target 0 gets
    # nothing of target 2's (the decoder does not look ahead).
    decoder = torch.tensor([[[1.0, 0, 0], [0, 1, 0], [1, 0, 0]]])
    mixed = explain._propagate([eye4], [decoder], [cross])
    assert mixed[0, 2, 2] > 0 and mixed[0, 0, 1] == 0


def test_relevance_is_nonnegative_and_leaves_the_model_as_it_was():
    model = _model().train()
    source, target = torch.tensor([[5, 6, 7, PAD]]), torch.tensor([[BOS, 5, 6]])
    relevance = explain.source_relevance(model, source, target)
    assert relevance.shape == (1, 3, 4) and (relevance >= 0).all()
    assert model.training and all(p.grad is None for p in model.parameters())
    rollout = explain.encoder_decoder_rollout(explain.encoder_decoder_maps(model, source, target))
    assert rollout.shape == (1, 3, 4) and (rollout[..., 3] == 0).all()  # the padded source position


def test_each_sorted_digit_is_most_relevant_where_the_source_holds_it():
    """On the trained sort model (the ready-made one: task=sort's own settings): for >= 90% of output
    digits, the source position gradient-weighted relevance ranks first holds that digit."""
    model = load_model("pretrained:sort")
    task = SortDataModule(test_size=300)
    task.setup("test")
    source = task.splits["test"].tensors[0]
    output = model.generate(source)
    target = torch.cat([torch.full((len(source), 1), BOS), output[:, :-1]], dim=1)
    relevance = explain.source_relevance(model, source, target).masked_fill((source == PAD)[:, None], -1)
    digits = (output != PAD) & (output != EOS)
    holds = source.gather(1, relevance.argmax(-1)) == output
    assert (holds & digits).sum() / digits.sum() >= 0.9
