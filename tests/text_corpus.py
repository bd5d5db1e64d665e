"""A corpus made up in the tests (nothing downloaded): sentences of words in several scripts and with
emoji, written as .txt files, a .jsonl file and a .parquet file; and texts that test a tokenizer's edges."""

import json
import random
from pathlib import Path

WORDS = (  # noqa: SIM905 (words are easier to read and edit as a sentence)
    "the a of and to in is was he she it that for on with as his her they at be this from by had not are "
    "but what all were when we there can an which their said if do will each about how up out them then "
    "many some so these would other into has more two like him see time could no make than first been its "
    "who now people my made over did down only way find use may water long little very after words called "
    "just where most know naïve café über déjà-vu Ωμέγα λόγος дом слово 日本語 テキスト 中文 😀 🙂👍🏽 señor "
    "façade Zürich 42 3.14 1,000 don't it's we'll I'm they've you'd"
).split()

# Texts at the edges of pre-tokenization and UTF-8: every kind of space, combining marks, emoji with
# modifiers, contractions, digits, control characters, the end-of-text marker typed as text.
EDGE_TEXTS = [
    "Hello world",
    " leading space",
    "trailing space ",
    "two  spaces\tand\ttabs\n\nnew paragraph\r\n",
    "naïve café über Zürich déjà-vu",
    "Ωμέγα λόγος — дом слово",
    "日本語のテキスト、中文。",
    "😀 🙂👍🏽 👨‍👩‍👧",
    "e\u0301 a\u0308 combining marks",
    "non\u00a0breaking\u2009thin\u3000ideographic\u202fnarrow",
    "next\u0085line and\u2028line\u2029para",
    "bom\ufeffhere",
    "zero\u200bwidth",
    "ctrl \x00\x01\x18\x7f",
    "don't it's we'll I'm they've you'd O'NEIL'S",
    "3.14159 1,000,000 x²",
    "<|endoftext|> as text",
    "'s'll're",
    "   \n   ",
    "🏳️‍🌈 flags 🇩🇪",
    "\U0001d54f\U0001d550 math",
    "tab\t\tend\t",
    # where GPT-2's \s (Oniguruma's) and JavaScript's differ: U+FEFF is no space there, U+0085 is one
    "a \ufeffb",
    "x \x85y",
    "x \x85 y",
    "a \u00a0b",
    "a \u3000b",
    "a \u2028b",
    "a \x1cb",
]


def sentence(r: random.Random) -> str:
    words = " ".join(r.choice(WORDS) for _ in range(r.randint(4, 16)))
    return words[0].upper() + words[1:] + r.choice([".", "!", "?", "…", ","])


def paragraphs(r: random.Random, chars: int) -> list[str]:
    out, size = [], 0
    while size < chars:
        paragraph = " ".join(sentence(r) for _ in range(r.randint(1, 6)))
        out.append(paragraph)
        size += len(paragraph) + 2
    return out


def write_corpus(folder: Path, txt_files: int = 8, chars: int = 150_000, seed: int = 0) -> Path:
    """`txt_files` stories of about `chars` characters, a .jsonl file of 21 short documents (one of them
    the edge texts, many times; and a line without text, skipped) and a .parquet file of 10 more: about
    1.3 MB and 39 documents by default."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    r = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(txt_files):
        (folder / f"story_{i:02d}.txt").write_text("\n\n".join(paragraphs(r, chars)) + "\n", encoding="utf-8")
    lines = [
        json.dumps({"id": i, "text": "\n".join(paragraphs(r, 3000))}, ensure_ascii=False) for i in range(20)
    ]
    lines.insert(5, json.dumps({"id": -1, "text": ""}))
    edges = "\n".join(EDGE_TEXTS * 40)  # often enough that the tokenizer learns merges at these edges
    lines.insert(9, json.dumps({"id": -2, "text": edges}, ensure_ascii=False))
    (folder / "notes.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    table = pa.table({"text": ["\n".join(paragraphs(r, 3000)) for _ in range(10)], "n": list(range(10))})
    pq.write_table(table, folder / "papers.parquet")
    return folder
