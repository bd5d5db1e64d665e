/* tokenizer.js: the BPE tokenizers of the models in plain JavaScript, so that the live page can tokenize
 * the text a student types exactly as the model's tokenizer does (Hugging Face tokenizers' models, as
 * `transformer_lab.data.tokenizer.page_tokenizer` describes them). No DOM and no dependency: it runs in
 * the page, its Web Worker and Node. It adds `TransformerLab.tokenizer`.
 *
 *   const bpe = TransformerLab.tokenizer.fromPayload(payload);   // payload: data.tokenizer.page_tokenizer
 *   bpe.encode("naïve café")  -> [ids]         bpe.decode(ids) -> text        bpe.tokenText(id) -> "␣café"
 *   bpe.tokenize(text) -> {ids, spans: [[start, end] of each token in the text]}
 *
 * Two kinds, one merge rule. A byte-level BPE (GPT-2, Pythia, SmolLM, Qwen2 and task=text's own):
 * 1. Pre-tokenize: cut the text into words with GPT-2's pattern (a word keeps its leading space; runs of
 *    letters, of digits, of other symbols, and of spaces are words of their own; "'s", "'ll", ... too).
 *    No merge crosses a word boundary.
 * 2. Bytes: each word as UTF-8 bytes, each byte written as one printable character (GPT-2's map: a space
 *    is "Ġ", a newline "Ċ"); these 256 characters are the first tokens.
 * 3. Merges: the payload lists merges "a b" in the order they were learned. Repeatedly merge the adjacent
 *    pair whose merge was learned first (every occurrence, left to right), until no pair has a merge.
 *    Each remaining piece is a token of the vocabulary.
 * A SentencePiece-style BPE (Llama 2, Mistral, TinyLlama: kind "metaspace_bpe"):
 * 1. Spaces become "▁" and a "▁" is put before the text (the Metaspace pre-tokenizer's `prepend_scheme`, or
 *    the Prepend normalizer of older conversions); the text is one word, or, with `split`, a word at each
 *    "▁".
 * 2. Characters, not bytes, are the first symbols; a character the vocabulary lacks becomes its UTF-8
 *    bytes as the tokens "<0xE6>", ... (byte fallback), or the unknown token.
 * 3. The same merges.
 * Text is always text: "<|endoftext|>" typed in is encoded as its characters, as Python does.
 */
(function (TL) {
  "use strict";

  /** GPT-2's map from bytes to printable characters (byte -> char) and its inverse (char -> byte). */
  function byteMaps() {
    const printable = [];
    for (let b = 33; b <= 126; b++) printable.push(b); // "!" .. "~"
    for (let b = 161; b <= 172; b++) printable.push(b); // "¡" .. "¬"
    for (let b = 174; b <= 255; b++) printable.push(b); // "®" .. "ÿ"
    const codes = printable.slice();
    let extra = 0;
    for (let b = 0; b < 256; b++) {
      if (!printable.includes(b)) {
        printable.push(b);
        codes.push(256 + extra);
        extra += 1;
      }
    }
    const charOf = new Array(256);
    const byteOf = new Map();
    printable.forEach((b, i) => {
      const c = String.fromCharCode(codes[i]);
      charOf[b] = c;
      byteOf.set(c, b);
    });
    return { charOf, byteOf };
  }

  // GPT-2's pre-tokenizer pattern, as tokenizers' Oniguruma reads it. Its \s is Unicode's white space
  // without U+FEFF and with U+0085 (JavaScript's \s differs in both), so it is spelled out here.
  const WS = "\\t-\\r\\x85\\p{Zs}\\u2028\\u2029";
  const PATTERN = new RegExp(
    `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^${WS}\\p{L}\\p{N}]+|[${WS}]+(?![^${WS}])|[${WS}]+`,
    "gu"
  );
  /** "a b" -> the order the merge was learned in (the first of repeated merges counts). */
  function ranks(merges) {
    const rank = new Map();
    merges.forEach((merge, i) => {
      if (!rank.has(merge)) rank.set(merge, i);
    });
    return rank;
  }

  /** A word's symbols after the merges: repeatedly merge the adjacent pair learned first (every
   *  occurrence, left to right) until no pair has a merge. `widths` (how much text each symbol stands
   *  for), if given, are merged alike, in place. */
  function merged(symbols, rank, widths = null) {
    while (symbols.length > 1) {
      let best = -1;
      let bestRank = Infinity;
      for (let i = 0; i < symbols.length - 1; i++) {
        const r = rank.get(symbols[i] + " " + symbols[i + 1]);
        if (r !== undefined && r < bestRank) {
          bestRank = r;
          best = i;
        }
      }
      if (best < 0) break;
      const a = symbols[best];
      const b = symbols[best + 1];
      const next = [];
      const nextWidths = [];
      for (let i = 0; i < symbols.length; ) {
        const pair = i < symbols.length - 1 && symbols[i] === a && symbols[i + 1] === b;
        next.push(pair ? a + b : symbols[i]);
        if (widths) nextWidths.push(pair ? widths[i] + widths[i + 1] : widths[i]);
        i += pair ? 2 : 1;
      }
      symbols = next;
      if (widths) widths.splice(0, widths.length, ...nextWidths);
    }
    return symbols;
  }

  /** [start, end] in `text` (UTF-16 indices) of tokens of `sizes[i]` bytes each: a character belongs
   *  to the token holding its first byte, so one split between tokens goes to the first. */
  function spansOf(text, sizes) {
    const starts = []; // each character's first byte and its UTF-16 index
    let offset = 0;
    let index = 0;
    for (const c of text) {
      starts.push([offset, index]);
      offset += UTF8_ENCODER.encode(c).length;
      index += c.length;
    }
    starts.push([Infinity, index]);
    const spans = [];
    let at = 0;
    let k = 0;
    for (const size of sizes) {
      const begin = k;
      at += size;
      while (starts[k][0] < at) k += 1;
      spans.push([starts[begin][1], starts[k][1]]);
    }
    return spans;
  }

  const UTF8_ENCODER = new TextEncoder();
  const VISIBLE = { " ": "␣", "\n": "⏎", "\t": "⇥", "\r": "␍" };
  const CACHE_LIMIT = 10000; // words remembered with their tokens (most text repeats its words)

  class ByteLevelBPE {
    /** payload: {kind: "byte_bpe", vocab: [token string by id], merges: ["a b", ...] in the order learned}. */
    constructor(payload) {
      if (!payload || payload.kind !== "byte_bpe" || !Array.isArray(payload.vocab) || !Array.isArray(payload.merges)) {
        throw new Error("tokenizer.js reads a byte-level BPE: {kind: 'byte_bpe', vocab: [...], merges: [...]}");
      }
      const { charOf, byteOf } = byteMaps();
      this.charOf = charOf;
      this.byteOf = byteOf;
      this.vocab = payload.vocab.slice();
      this.idOf = new Map(this.vocab.map((token, id) => [token, id]));
      this.rank = ranks(payload.merges);
      this.cache = new Map();
      this.encoder = new TextEncoder();
      // not fatal: a byte that is part of no character reads U+FFFD; a leading U+FEFF is text, not a mark
      this.decoder = new TextDecoder("utf-8", { ignoreBOM: true });
    }

    /** The tokens of one pre-tokenized word (a string of GPT-2's byte characters), by the merges. */
    wordTokens(word) {
      return merged(Array.from(word), this.rank);
    }

    /** The text's token ids, as Python's `BPETokenizer.encode` gives them. */
    encode(text) {
      const ids = [];
      for (const match of String(text).matchAll(PATTERN)) {
        const piece = match[0];
        let found = this.cache.get(piece);
        if (found === undefined) {
          let word = "";
          for (const byte of this.encoder.encode(piece)) word += this.charOf[byte];
          found = this.wordTokens(word).map((token) => {
            const id = this.idOf.get(token);
            if (id === undefined) throw new Error(`the vocabulary has no token ${JSON.stringify(token)}`);
            return id;
          });
          if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
          this.cache.set(piece, found);
        }
        for (const id of found) ids.push(id);
      }
      return ids;
    }

    /** The bytes of the tokens `ids` stand for. */
    bytes(ids) {
      const out = [];
      for (const id of ids) {
        const token = this.vocab[id];
        if (token === undefined) throw new Error(`token id ${id} is not in the vocabulary of ${this.vocab.length}`);
        for (const c of token) {
          const b = this.byteOf.get(c);
          if (b !== undefined) out.push(b);
          else for (const x of this.encoder.encode(c)) out.push(x); // a special token's own characters
        }
      }
      return Uint8Array.from(out);
    }

    /** The text of token ids (a character whose bytes are cut off reads U+FFFD, as in Python). */
    decode(ids) {
      return this.decoder.decode(this.bytes(ids));
    }

    /** The text's ids and where each token lies in it ([start, end], UTF-16 indices as a text box
     *  counts): a character belongs to the token holding its first byte. */
    tokenize(text) {
      const ids = this.encode(text);
      return { ids, spans: spansOf(String(text), ids.map((id) => this.bytes([id]).length)) };
    }

    /** One token's text as the Python tools show it (`Tokenizer.display`): spaces, newlines, tabs and
     *  carriage returns as marks ("Ġthe" -> "␣the"), a byte that is part of no whole character as \xNN,
     *  any other character that prints nothing as its escape. */
    tokenText(id) {
      return Array.from(lenientText(this.bytes([id])), shown).join("");
    }
  }

  const METASPACE = "\u2581"; // "▁": a space, in a SentencePiece-style BPE's tokens
  const BYTE_TOKEN = /^<0x([0-9A-F]{2})>$/;

  class MetaspaceBPE {
    /** payload: {kind: "metaspace_bpe", vocab, merges, prepend: "always" | "if_missing" | "never",
     *  split, byte_fallback, unk: id or null, fuse_unk} (`page_tokenizer`). */
    constructor(payload) {
      if (!payload || payload.kind !== "metaspace_bpe" || !Array.isArray(payload.vocab) || !Array.isArray(payload.merges)) {
        throw new Error("tokenizer.js reads a SentencePiece-style BPE: {kind: 'metaspace_bpe', vocab: [...], merges: [...]}");
      }
      Object.assign(this, { prepend: payload.prepend, split: payload.split, unk: payload.unk });
      this.byteFallback = payload.byte_fallback;
      this.fuseUnk = payload.fuse_unk;
      this.vocab = payload.vocab.slice();
      this.idOf = new Map(this.vocab.map((token, id) => [token, id]));
      this.rank = ranks(payload.merges);
      this.byteToken = []; // byte -> its fallback token "<0xE6>", where the vocabulary has it
      for (let b = 0; b < 256; b++) {
        const token = "<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">";
        if (this.idOf.has(token)) this.byteToken[b] = token;
      }
      this.cache = new Map();
      this.encoder = new TextEncoder();
      this.decoder = new TextDecoder("utf-8", { ignoreBOM: true });
    }

    /** Whether a "▁" goes before the text (the normaliser's Prepend, or Metaspace's prepend_scheme). */
    prepends(text) {
      if (text.length === 0 || this.prepend === "never") return false;
      return this.prepend === "always" || !(text.startsWith(" ") || text.startsWith(METASPACE));
    }

    /** The text's words as the model reads them: spaces as "▁", one "▁" before (`prepends`); the whole
     *  text one word, or with `split` a word at each "▁". */
    words(text) {
      const written = (this.prepends(text) ? METASPACE : "") + text.replaceAll(" ", METASPACE);
      if (!this.split) return written ? [written] : [];
      return written.split(new RegExp(`(?=${METASPACE})`, "u")).filter((w) => w.length > 0);
    }

    /** The tokens of one word and the UTF-16 units of the word each stands for: its characters, a
     *  character the vocabulary lacks as its bytes' fallback tokens (the character counted in the first)
     *  or the unknown token (a run of them one with `fuse_unk`), then the merges. */
    wordTokens(word) {
      const symbols = [];
      const widths = [];
      const unk = this.unk === null || this.unk === undefined ? undefined : this.vocab[this.unk];
      for (const c of word) {
        const bytes = this.idOf.has(c) ? null : Array.from(this.encoder.encode(c), (b) => this.byteToken[b]);
        if (bytes === null) {
          symbols.push(c);
          widths.push(c.length);
        } else if (this.byteFallback && bytes.every((t) => t !== undefined)) {
          bytes.forEach((t, i) => {
            symbols.push(t);
            widths.push(i === 0 ? c.length : 0);
          });
        } else if (unk === undefined) {
          throw new Error(`the vocabulary has no token ${JSON.stringify(c)} and no unknown token`);
        } else if (this.fuseUnk && symbols.length > 0 && symbols[symbols.length - 1] === unk) {
          widths[widths.length - 1] += c.length;
        } else {
          symbols.push(unk);
          widths.push(c.length);
        }
      }
      return { tokens: merged(symbols, this.rank, widths), widths };
    }

    /** The text's ids and where each token lies in it ([start, end], UTF-16 indices as a text box
     *  counts; the "▁" put before the text lies in none). */
    tokenize(text) {
      text = String(text);
      const ids = [];
      const spans = [];
      let at = this.prepends(text) ? -1 : 0;
      for (const word of this.words(text)) {
        let found = this.cache.get(word);
        if (found === undefined) {
          const { tokens, widths } = this.wordTokens(word);
          found = { ids: tokens.map((token) => this.idOf.get(token)), widths };
          if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
          this.cache.set(word, found);
        }
        found.ids.forEach((id, i) => {
          ids.push(id);
          spans.push([Math.max(at, 0), at + found.widths[i]]);
          at += found.widths[i];
        });
      }
      return { ids, spans };
    }

    /** The text's token ids, as Python's `BPETokenizer.encode` gives them. */
    encode(text) {
      return this.tokenize(text).ids;
    }

    /** The bytes of the tokens `ids` stand for: "▁" a space, "<0xE6>" its byte. */
    bytes(ids) {
      const out = [];
      for (const id of ids) {
        const token = this.vocab[id];
        if (token === undefined) throw new Error(`token id ${id} is not in the vocabulary of ${this.vocab.length}`);
        const byte = BYTE_TOKEN.exec(token);
        if (byte) out.push(parseInt(byte[1], 16));
        else for (const x of this.encoder.encode(token.replaceAll(METASPACE, " "))) out.push(x);
      }
      return Uint8Array.from(out);
    }

    /** The text the tokens `ids` add after others (a leading "▁" is a space; Python's decode drops the
     *  first token's, as text's start). */
    decode(ids) {
      return this.decoder.decode(this.bytes(ids));
    }

    /** One token's text as the Python tools show it ("▁the" -> "␣the"). */
    tokenText(id) {
      return Array.from(lenientText(this.bytes([id])), shown).join("");
    }
  }

  /** The page's tokenizer of a payload (`page_tokenizer`). */
  function fromPayload(payload) {
    return payload && payload.kind === "metaspace_bpe" ? new MetaspaceBPE(payload) : new ByteLevelBPE(payload);
  }

  // The second byte a UTF-8 lead byte allows (Unicode's table: no overlong forms, no surrogates).
  function secondRange(lead) {
    if (lead === 0xe0) return [0xa0, 0xbf];
    if (lead === 0xed) return [0x80, 0x9f];
    if (lead === 0xf0) return [0x90, 0xbf];
    if (lead === 0xf4) return [0x80, 0x8f];
    return [0x80, 0xbf];
  }

  /** UTF-8 bytes as text, each byte of an invalid or cut-off sequence written \xNN (Python's
   *  errors="backslashreplace": the longest valid start of a sequence is one error). */
  function lenientText(data) {
    let text = "";
    let i = 0;
    while (i < data.length) {
      const lead = data[i];
      const length = lead < 0x80 ? 1 : lead >= 0xc2 && lead <= 0xdf ? 2 : lead >= 0xe0 && lead <= 0xef ? 3 : lead >= 0xf0 && lead <= 0xf4 ? 4 : 0;
      let valid = length > 0 ? 1 : 0;
      while (valid > 0 && valid < length && i + valid < data.length) {
        const [low, high] = valid === 1 ? secondRange(lead) : [0x80, 0xbf];
        if (data[i + valid] < low || data[i + valid] > high) break;
        valid += 1;
      }
      if (length > 0 && valid === length) {
        text += UTF8.decode(data.subarray(i, i + length));
        i += length;
      } else {
        for (let k = 0; k < Math.max(valid, 1); k++) text += "\\x" + data[i + k].toString(16).padStart(2, "0");
        i += Math.max(valid, 1);
      }
    }
    return text;
  }

  const UTF8 = new TextDecoder("utf-8", { ignoreBOM: true });
  const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u; // Python's not isprintable()

  /** One character as a tool shows it: a mark for whitespace, an escape (as Python's repr) for a
   *  character that prints nothing. */
  function shown(c) {
    if (VISIBLE[c]) return VISIBLE[c];
    if (c === " " || !UNPRINTABLE.test(c)) return c;
    const code = c.codePointAt(0);
    if (code < 0x100) return "\\x" + code.toString(16).padStart(2, "0");
    if (code < 0x10000) return "\\u" + code.toString(16).padStart(4, "0");
    return "\\U" + code.toString(16).padStart(8, "0");
  }

  TL.tokenizer = { ByteLevelBPE, MetaspaceBPE, fromPayload, PATTERN, byteMaps };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
