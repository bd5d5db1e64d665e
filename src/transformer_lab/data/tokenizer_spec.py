"""What a tokenizer.json from elsewhere may hold before `tokenizers` runs it.

A tokenizer.json is data, but two of its steps run a regular expression over every text it encodes: the
`Split` pre-tokenizer and the `Replace` normalizer. A pattern such as `(a+)+$` backtracks exponentially on
a run of `a`s; the regex engine under `tokenizers` gives up at its retry limit and the library *panics*
(a Rust panic, raised in Python as a BaseException, with a page of backtrace), in the middle of a corpus.
So a tokenizer is checked when it is read (`check`), in one line naming what it holds:

* each normalizer and pre-tokenizer is of a known kind (`NORMALIZERS`, `PRE_TOKENIZERS`: the byte-level,
  whitespace, Unicode and literal steps of GPT-2, Llama, Qwen, Pythia, BERT and T5 tokenizers);
* each regular expression in them is one that cannot backtrack exponentially (`risky_regex`): no group
  that repeats and holds a repetition or an alternative (`(a+)+`, `(a|ab)*`), no backreference, at most
  `MAX_PATTERN` characters. GPT-2's, Llama 3's and Qwen2's patterns pass.

What passes can still fail on some text in ways not foreseen here; `BPETokenizer` runs the library inside
`files.reading`, so that too ends in one line.
"""

from __future__ import annotations

from transformer_lab.errors import require

NORMALIZERS = {
    "NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "StripAccents", "Prepend", "Replace",
    "BertNormalizer", "ByteLevel", "Nmt", "Precompiled", "Sequence",
}  # fmt: skip
PRE_TOKENIZERS = {
    "ByteLevel", "Whitespace", "WhitespaceSplit", "Metaspace", "Digits", "Punctuation", "Split",
    "BertPreTokenizer", "CharDelimiterSplit", "UnicodeScripts", "Sequence",
}  # fmt: skip
MAX_PATTERN = 2000  # characters: GPT-2's pattern is 94, Llama 3's 170
MAX_STEPS = 64  # steps in a Sequence (GPT-2's tokenizer has 1, Llama 3's 2)


def check(spec: dict, where: str) -> None:
    """A one-line ConfigError (naming `where`) for a normalizer or pre-tokenizer that is not of a known
    kind, or whose regular expression could backtrack without end (the module docstring)."""
    for part, known in (("normalizer", NORMALIZERS), ("pre_tokenizer", PRE_TOKENIZERS)):
        steps = _steps(spec.get(part), part, where)
        for step in steps:
            kind = step.get("type")
            require(
                kind in known,
                f"{where}: its {part} {kind!r} is not one this reads (it reads {', '.join(sorted(known))}); "
                "use a tokenizer of a known family, or train one here (data.tokenizer=bpe)",
            )
            pattern = step.get("pattern")
            if pattern is None:
                continue
            forms = list(pattern) if isinstance(pattern, dict) else []
            require(
                forms in (["Regex"], ["String"]),
                f"{where}: its {part} {kind} has a pattern that is neither a Regex nor a String",
            )
            ((form, text),) = pattern.items()
            require(isinstance(text, str), f"{where}: its {part} {kind}'s pattern is not text")
            risk = risky_regex(text) if form == "Regex" else None
            require(
                risk is None,
                f"{where}: its {part} {kind} splits with the regular expression {text[:60]!r}, which holds "
                f"{risk}: on some text it would run without end; this reads only patterns that cannot",
            )


def _steps(step: object, part: str, where: str) -> list[dict]:
    """The steps of a normalizer or pre-tokenizer, a Sequence flattened (none: an empty list)."""
    if step is None:
        return []
    require(isinstance(step, dict), f"{where}: its {part} is not a JSON object")
    if step.get("type") != "Sequence":
        return [step]
    inner = step.get("normalizers" if part == "normalizer" else "pretokenizers")  # tokenizers' own keys
    require(
        isinstance(inner, list) and len(inner) <= MAX_STEPS,
        f"{where}: its {part} Sequence lists no steps or more than {MAX_STEPS}",
    )
    return [s for item in inner for s in _steps(item, part, where)]


def risky_regex(pattern: str) -> str | None:
    """What makes `pattern` able to backtrack exponentially, or None: a repeated group that holds a
    repetition or an alternative (the same text then splits between the repetitions in exponentially many
    ways), a backreference (matching one is NP-hard), or a pattern over `MAX_PATTERN` characters. Read by
    a small scanner of the pattern's groups, escapes and character classes."""
    if len(pattern) > MAX_PATTERN:
        return f"more than {MAX_PATTERN} characters"
    groups: list[dict[str, bool]] = [{"varies": False, "branches": False}]  # the pattern, then each group
    last: dict[str, bool] | None = None  # the group just closed, if the atom before a quantifier is one
    i = 0
    while i < len(pattern):
        c = pattern[i]
        atom = None
        if c == "\\":
            following = pattern[i + 1 : i + 2]
            if (following.isdigit() and following != "0") or following == "k":
                return "a backreference"
            if following in ("p", "P") and pattern[i + 2 : i + 3] == "{":
                i = pattern.find("}", i) + 1 or len(pattern)
            else:
                i += 2
        elif c == "[":
            i = _class_end(pattern, i)
        elif c == "(":
            groups.append({"varies": False, "branches": False})
            i += 1
        elif c == ")":
            if len(groups) > 1:
                atom = groups.pop()
                groups[-1]["varies"] |= atom["varies"]
            i += 1
        elif c == "|":
            groups[-1]["branches"] = True
            i += 1
        elif c in "*+?{":
            end, varies, repeats = _quantifier(pattern, i)
            if end > i:
                if repeats and last is not None and (last["varies"] or last["branches"]):
                    return "a repeated group that holds a repetition or alternatives"
                groups[-1]["varies"] |= varies
                i = end
                last = None
                continue
            i += 1
        else:
            i += 1
        last = atom
    return None


def _class_end(pattern: str, start: int) -> int:
    """The index after the character class `[...]` that starts at `start` (escapes and `[^]` read)."""
    i = start + 1
    if pattern[i : i + 1] == "^":
        i += 1
    if pattern[i : i + 1] == "]":
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i + 1


def _quantifier(pattern: str, start: int) -> tuple[int, bool, bool]:
    """(the index after the quantifier at `start`, whether its count varies (`*`, `+`, `?`, `{2,5}`),
    whether it may repeat more than once (`*`, `+`, `{2}`)); (start, False, False) where `{` starts no
    quantifier. A lazy or possessive mark (`+?`, `*+`) belongs to it."""
    c = pattern[start]
    if c == "{":
        close = pattern.find("}", start)
        body = pattern[start + 1 : close] if close > 0 else ""
        low, comma, high = body.partition(",")
        if not low.isdigit() or (high and not high.isdigit()):
            return start, False, False
        end, most = close + 1, (int(high) if high else None) if comma else int(low)
        varies, repeats = most != int(low), most is None or most > 1
    else:
        end, varies, repeats = start + 1, True, c in "*+"
    if pattern[end : end + 1] in ("?", "+"):
        end += 1
    return end, varies, repeats
