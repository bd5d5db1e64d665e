"""explorer/tokenizer.js in headless Chromium (as tests/test_explorer_browser.py launches it) against
Python: a byte-level BPE trained by task=text on a multilingual corpus encodes, decodes and shows tokens
in the page exactly as `BPETokenizer` does, on text at the edges of pre-tokenization and UTF-8 and on
random Unicode. Also `page_tokenizer`, the page's payload: what it holds, and what it refuses."""

import json
import random

import pytest

from tests.text_corpus import EDGE_TEXTS, write_corpus
from transformer_lab.data.corpus import Corpus
from transformer_lab.data.tokenizer import BPETokenizer, Tokenizer, page_tokenizer, train_bpe
from transformer_lab.errors import ConfigError

SCRIPT = (
    __import__("pathlib").Path(__file__).resolve().parents[1] / "src/transformer_lab/explorer/tokenizer.js"
)


@pytest.fixture(scope="module")
def bpe(tmp_path_factory) -> BPETokenizer:
    corpus = Corpus(write_corpus(tmp_path_factory.mktemp("corpus"), txt_files=2, chars=150_000))
    return train_bpe(corpus.texts(), 700)


def random_texts(count: int, seed: int = 0) -> list[str]:
    """Strings of characters from many blocks: ASCII, Latin-1, Greek, Cyrillic, CJK, emoji, spaces of
    every kind, combining marks, unassigned and private-use code points."""
    r = random.Random(seed)
    blocks = [
        (0x20, 0x7E),
        (0x0, 0x20),
        (0x80, 0xFF),
        (0x370, 0x3FF),
        (0x400, 0x4FF),
        (0x3040, 0x30FF),
        (0x4E00, 0x4E80),
        (0x1F300, 0x1F64F),
        (0x2000, 0x206F),
        (0x300, 0x36F),
        (0xE000, 0xE010),
        (0x10FFF0, 0x10FFFF),
        (0xFE00, 0xFEFF),
    ]
    texts = []
    for _ in range(count):
        chars = []
        for _ in range(r.randint(1, 40)):
            low, high = r.choice(blocks)
            point = r.randint(low, high)
            if 0xD800 <= point <= 0xDFFF:
                continue
            chars.append(chr(point) if r.random() < 0.7 else r.choice([" ", "  ", "\n", "'s", "a", "7"]))
        texts.append("".join(chars))
    return texts


def in_page(browser, script: str, arguments: list) -> dict:
    """`script` (a JavaScript function of `arguments`) evaluated in a blank page holding tokenizer.js;
    any error the page raises fails the test."""
    page = browser.new_page()
    try:
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.set_content("<!doctype html><meta charset='utf-8'><title>tokenizer.js</title>")
        page.add_script_tag(content=SCRIPT.read_text())
        got = page.evaluate(script, arguments)
    finally:
        page.close()
    assert not errors, errors
    return got


def test_the_payload_holds_the_vocabulary_and_merges_in_order(bpe):
    payload = page_tokenizer(bpe)
    spec = json.loads(bpe.json)["model"]
    assert payload["kind"] == "byte_bpe" and payload["vocab"] == bpe.vocab and len(payload["vocab"]) == 700
    assert payload["merges"] == [m if isinstance(m, str) else " ".join(m) for m in spec["merges"]]
    assert payload["chars"] == len(
        json.dumps({k: payload[k] for k in ("kind", "vocab", "merges")}, ensure_ascii=False)
    )
    assert page_tokenizer(Tokenizer(list("abc"))) is None  # characters: the page splits the text itself


def test_a_vocabulary_too_large_for_the_page_is_refused_with_its_size_and_the_fix(bpe):
    with pytest.raises(ConfigError) as info:
        page_tokenizer(bpe, budget=1000)
    message = str(info.value)
    assert "700 tokens" in message and "MB in the page" in message and "\n" not in message
    assert "smaller data.vocab_size" in message and "live=false" in message


def test_a_tokenizer_of_another_kind_is_refused_for_the_page():
    word_level = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1, "b": 2}, "unk_token": "[UNK]"},
    }
    with pytest.raises(ConfigError, match="WordLevel of another kind: write the page with live=false"):
        page_tokenizer(BPETokenizer(json.dumps(word_level)))


@pytest.mark.browser
def test_tokenizer_js_encodes_decodes_and_shows_tokens_as_python_does(bpe, browser):
    texts = EDGE_TEXTS + random_texts(300) + [" ".join(EDGE_TEXTS) * 3]
    expected = [bpe.encode(t).tolist() for t in texts]
    ids = list(range(len(bpe)))
    got = in_page(
        browser,
        """([payload, texts, ids, pieces]) => {
            const bpe = new TransformerLab.tokenizer.ByteLevelBPE(payload);
            const encoded = texts.map((t) => bpe.encode(t));
            return {
                encoded,
                decoded: encoded.map((e) => bpe.decode(e)),
                pieces: pieces.map((p) => bpe.decode(p)),
                shown: ids.map((i) => bpe.tokenText(i)),
            };
        }""",
        [page_tokenizer(bpe), texts, ids, [e[1:4] for e in expected if len(e) > 3]],
    )
    mismatches = [(t, e, g) for t, e, g in zip(texts, expected, got["encoded"], strict=True) if e != g]
    assert not mismatches, mismatches[:3]
    assert got["decoded"] == [bpe.decode(e) for e in expected] == texts  # a byte-level BPE loses nothing
    assert got["pieces"] == [bpe.decode(e[1:4]) for e in expected if len(e) > 3]  # cut characters: U+FFFD
    assert got["shown"] == bpe.display(ids)
    assert sum(len(e) for e in expected) < sum(len(t.encode()) for t in texts)  # the merges did merge


# ------------------------------------------------------------------ SentencePiece-style BPEs (Llama 2's)
def sentencepiece_style(corpus_texts: list[str], variant: str) -> BPETokenizer:
    """A BPE as transformers converts SentencePiece models (Llama 2, Mistral, TinyLlama), trained on the
    corpus, in one of the ways their tokenizer.json writes spaces: `legacy` (the Prepend and Replace
    normalisers: "▁" before any text), `first` and `split` (the Metaspace pre-tokenizer: "▁" before a
    text that lacks one; `split`: a word at each "▁"), `never` (no "▁" put before), each with the 256
    byte tokens "<0x00>".. as plain tokens, and `unknown` (no byte tokens: the unknown token, fused)."""
    from tokenizers import Tokenizer as HF
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

    fallback = variant != "unknown"
    hf = HF(models.BPE(byte_fallback=fallback, unk_token="<unk>", fuse_unk=True))
    if variant == "legacy":
        hf.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    else:
        scheme = {"never": "never", "split": "always"}.get(variant, "first")
        hf.pre_tokenizer = pre_tokenizers.Metaspace("▁", prepend_scheme=scheme, split=variant == "split")
    strip = [decoders.Strip(" ", 1, 0)] if variant != "never" else []
    hf.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), *strip]
    )
    hf.train_from_iterator(corpus_texts, trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>", "<s>"]))
    spec = json.loads(hf.to_str())
    if fallback:
        vocab = spec["model"]["vocab"]
        vocab |= {f"<0x{b:02X}>": len(vocab) + b for b in range(256)}
    return BPETokenizer(json.dumps(spec), f"a {variant} SentencePiece-style BPE")


SENTENCEPIECE_VARIANTS = ["legacy", "first", "split", "never", "unknown"]


@pytest.fixture(scope="module")
def sentencepiece(tmp_path_factory) -> dict[str, BPETokenizer]:
    corpus = Corpus(write_corpus(tmp_path_factory.mktemp("corpus_sp"), txt_files=2, chars=100_000))
    texts = list(corpus.texts())
    return {variant: sentencepiece_style(texts, variant) for variant in SENTENCEPIECE_VARIANTS}


def test_a_sentencepiece_style_bpe_is_recognised_shown_and_given_to_the_page(sentencepiece):
    legacy = sentencepiece["legacy"]
    assert legacy.metaspace == {"prepend": "always", "split": False}
    assert sentencepiece["split"].metaspace == {"prepend": "if_missing", "split": True}
    assert sentencepiece["never"].metaspace == {"prepend": "never", "split": False}
    ids = legacy.encode(" naïve 東").tolist()
    shown = legacy.display(ids)
    assert shown[0].startswith("␣") and "".join(shown).replace("␣", " ").startswith("  na")
    assert any(s.startswith("\\x") for s in shown)  # a byte of 東 the vocabulary lacks: \xe6 ...
    payload = page_tokenizer(legacy)
    assert payload["kind"] == "metaspace_bpe" and payload["prepend"] == "always" and payload["byte_fallback"]
    assert payload["vocab"] == legacy.vocab and payload["unk"] == 0 and payload["fuse_unk"]
    assert page_tokenizer(sentencepiece["unknown"])["byte_fallback"] is False


@pytest.mark.browser
@pytest.mark.parametrize("variant", SENTENCEPIECE_VARIANTS)
def test_tokenizer_js_reads_a_sentencepiece_style_bpe_as_python_does(sentencepiece, variant, browser):
    """Encoding equals Python's on edge and random Unicode text; decoding the ids gives Python's text
    (with the space of the "▁" put before it, which Python's decoder strips); tokens show as the tools
    show them; and each token's span in the typed text is the text it stands for."""
    tokenizer = sentencepiece[variant]
    texts = EDGE_TEXTS + random_texts(200, seed=1) + ["", " ", "  lead", "▁x", "a  b", "end ", "x\u3000y"]
    expected = [tokenizer.encode_array(t, check=False).tolist() for t in texts]
    got = in_page(
        browser,
        """([payload, texts, n]) => {
            const bpe = TransformerLab.tokenizer.fromPayload(payload);
            const tokenized = texts.map((t) => bpe.tokenize(t));
            return {
                encoded: tokenized.map((t) => t.ids),
                spans: tokenized.map((t) => t.spans),
                decoded: tokenized.map((t) => bpe.decode(t.ids)),
                shown: [...Array(n).keys()].map((i) => bpe.tokenText(i)),
            };
        }""",
        [page_tokenizer(tokenizer), texts, len(tokenizer)],
    )
    mismatches = [(t, e, g) for t, e, g in zip(texts, expected, got["encoded"], strict=True) if e != g]
    assert not mismatches, mismatches[:3]
    for text, ids, decoded in zip(texts, expected, got["decoded"], strict=True):
        assert tokenizer.decode(ids) in (decoded, decoded[1:]), (text, decoded)
    assert got["shown"] == tokenizer.display(list(range(len(tokenizer))))
    unk, byte_ids = 0, {i for i, t in enumerate(tokenizer.vocab) if t.startswith("<0x")}
    for text, ids, spans in zip(texts, expected, got["spans"], strict=True):
        units = text.encode("utf-16-le")  # the text box counts UTF-16 units
        assert [s[0] for s in spans[1:]] == [s[1] for s in spans[:-1]]  # they tile the text
        assert not spans or (spans[0][0] == 0 and spans[-1][1] == len(units) // 2)
        for id_, (start, end) in zip(ids, spans, strict=True):
            if id_ != unk and id_ not in byte_ids:
                piece = units[2 * start : 2 * end].decode("utf-16-le").replace("▁", " ")
                assert tokenizer.vocab[id_].replace("▁", " ") in (piece, " " + piece), (text, id_)
