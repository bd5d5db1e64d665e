/* tokenizer.js: the byte-level BPE of task=text in plain JavaScript, so that the live page can tokenize
 * the text a student types exactly as the model's tokenizer does (Hugging Face tokenizers' ByteLevel
 * pre-tokenizer and BPE model, as `transformer_lab.data.tokenizer.train_bpe` makes them). No DOM and no
 * dependency: it runs in the page, its Web Worker and Node. It adds `TransformerLab.tokenizer`.
 *
 *   const bpe = new TransformerLab.tokenizer.ByteLevelBPE(payload);   // payload: data.tokenizer.page_tokenizer
 *   bpe.encode("naïve café")  -> [ids]         bpe.decode(ids) -> text        bpe.tokenText(id) -> "␣café"
 *
 * How a byte-level BPE encodes:
 * 1. Pre-tokenize: cut the text into words with GPT-2's pattern (a word keeps its leading space; runs of
 *    letters, of digits, of other symbols, and of spaces are words of their own; "'s", "'ll", ... too).
 *    No merge crosses a word boundary.
 * 2. Bytes: each word as UTF-8 bytes, each byte written as one printable character (GPT-2's map: a space
 *    is "Ġ", a newline "Ċ"); these 256 characters are the first tokens.
 * 3. Merges: the payload lists merges "a b" in the order they were learned. Repeatedly merge the adjacent
 *    pair whose merge was learned first (every occurrence, left to right), until no pair has a merge.
 *    Each remaining piece is a token of the vocabulary.
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
      this.rank = new Map(); // "a b" -> the order it was learned in
      payload.merges.forEach((merge, i) => {
        if (!this.rank.has(merge)) this.rank.set(merge, i);
      });
      this.cache = new Map();
      this.encoder = new TextEncoder();
      // not fatal: a byte that is part of no character reads U+FFFD; a leading U+FEFF is text, not a mark
      this.decoder = new TextDecoder("utf-8", { ignoreBOM: true });
    }

    /** The tokens of one pre-tokenized word (a string of GPT-2's byte characters), by the merges. */
    wordTokens(word) {
      let symbols = Array.from(word);
      while (symbols.length > 1) {
        let best = -1;
        let bestRank = Infinity;
        for (let i = 0; i < symbols.length - 1; i++) {
          const r = this.rank.get(symbols[i] + " " + symbols[i + 1]);
          if (r !== undefined && r < bestRank) {
            bestRank = r;
            best = i;
          }
        }
        if (best < 0) break;
        const a = symbols[best];
        const b = symbols[best + 1];
        const merged = [];
        for (let i = 0; i < symbols.length; ) {
          if (i < symbols.length - 1 && symbols[i] === a && symbols[i + 1] === b) {
            merged.push(a + b);
            i += 2;
          } else {
            merged.push(symbols[i]);
            i += 1;
          }
        }
        symbols = merged;
      }
      return symbols;
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

    /** One token's text as the Python tools show it (`Tokenizer.display`): spaces, newlines, tabs and
     *  carriage returns as marks ("Ġthe" -> "␣the"), a byte that is part of no whole character as \xNN,
     *  any other character that prints nothing as its escape. */
    tokenText(id) {
      return Array.from(lenientText(this.bytes([id])), shown).join("");
    }
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

  TL.tokenizer = { ByteLevelBPE, PATTERN, byteMaps };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
