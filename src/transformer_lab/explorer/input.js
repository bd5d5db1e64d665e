/* input.js: the input box: its text as tokens, checked against the vocabulary and the context, marked
 * where it is wrong; and the task's label rule (named in the payload) for an edited input's ✓/✗.
 */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { LIVE } = state;
  const { $, el } = TL.util;

  // ------------------------------------------------------------------------------- the input box
  /** The box's text as tokens, as the task writes text: characters (separator ""), or tokens apart.
   *  Returns {ids, bad: [{start, end, token}], spans: [[start, end]] per token}. */
  function tokenize(text) {
    const index = state.live.index;
    const ids = [];
    const bad = [];
    const spans = [];
    if (state.live.bpe) {
      // a BPE encodes any text (tokenizer.js, as Python's tokenizer does), each token a span of the box
      const tokenized = state.live.bpe.tokenize(text);
      ids.push(...tokenized.ids);
      spans.push(...tokenized.spans);
    } else if (LIVE.input.separator === "") {
      for (let i = 0; i < text.length; ) {
        const ch = String.fromCodePoint(text.codePointAt(i));
        const id = index.get(ch);
        if (id === undefined) bad.push({ start: i, end: i + ch.length, token: ch });
        else ids.push(id);
        spans.push([i, i + ch.length]);
        i += ch.length;
      }
    } else {
      const re = /\S+/g;
      let match;
      while ((match = re.exec(text)) !== null) {
        const id = index.get(match[0]);
        if (id === undefined) bad.push({ start: match.index, end: match.index + match[0].length, token: match[0] });
        else ids.push(id);
        spans.push([match.index, match.index + match[0].length]);
      }
    }
    return { ids, bad, spans };
  }

  /** The box's problems, in one message naming the value and what to do; marks in the box. */
  function checkInput(text) {
    const parsed = tokenize(text);
    const marks = [...parsed.bad];
    const input = LIVE.input;
    const what = input.separator === "" ? "character" : "token";
    let problem = null;
    if (parsed.bad.length) {
      const names = [...new Set(parsed.bad.map((b) => JSON.stringify(b.token)))];
      problem = `${names.length === 1 ? `the ${what} ${names[0]} is` : `the ${what}s ${names.slice(0, 8).join(", ")}${names.length > 8 ? ", ..." : ""} are`} not in the model's vocabulary: ` +
        `remove ${names.length === 1 ? "it" : "them"} (the model knows ${vocabulary()})`;
    } else if (input.mode === "source") {
      const specials = parsed.ids.map((id, i) => [id, i]).filter(([id]) => input.specials.includes(id));
      if (specials.length) {
        for (const [, i] of specials) marks.push({ start: parsed.spans[i][0], end: parsed.spans[i][1] });
        problem = `the source holds ${[...new Set(specials.map(([id]) => LIVE.spec.vocab[id]))].join(", ")}: write only the task's symbols`;
      }
    }
    if (!problem && parsed.ids.length === 0) problem = "the input is empty: type a few tokens";
    const limit = positionsFor();
    if (!problem && parsed.ids.length > limit) {
      problem = `the input has ${parsed.ids.length} tokens, more than the ${limit} the model reads ` +
        `(its context, max_len=${LIVE.spec.config.max_len}${input.mode === "source" && LIVE.spec.decoderOnly ? ", with <sep> and the output" : ""}): shorten it; nothing is cut`;
      const start = parsed.spans[limit] ? parsed.spans[limit][0] : text.length;
      marks.push({ start, end: text.length });
    }
    return { ...parsed, marks, problem };
  }

  const vocabulary = () => {
    const tokens = LIVE.spec.vocab.filter((_, i) => LIVE.input.mode !== "source" || !LIVE.input.specials.includes(i));
    const text = LIVE.input.separator === "" ? JSON.stringify(tokens.join("")) : tokens.join(" ");
    return text.length > 120 ? text.slice(0, 117) + "..." : text;
  };

  /** How many tokens the box may hold: the context; a decoder-only model's source leaves room for
   *  <sep> and at least one output token. */
  function positionsFor() {
    const c = LIVE.spec.config;
    if (LIVE.input.mode === "source" && LIVE.spec.decoderOnly) return c.max_len - 2;
    return c.max_len;
  }

  function markInput(text, marks) {
    const backdrop = $("input-backdrop");
    const parts = [];
    let at = 0;
    for (const m of [...marks].sort((a, b) => a.start - b.start)) {
      if (m.start < at) continue;
      parts.push(text.slice(at, m.start), el("mark", { text: text.slice(m.start, m.end) }));
      at = m.end;
    }
    parts.push(text.slice(at) + " ");
    backdrop.replaceChildren(...parts);
    const box = $("input-box");
    box.rows = Math.min(6, Math.max(1, text.split("\n").length, Math.ceil(text.length / 110)));
    backdrop.scrollTop = box.scrollTop;
    box.setAttribute("aria-invalid", marks.length ? "true" : "false");
  }

  function say(text, bad = false) {
    const box = $("input-message");
    box.textContent = text;
    box.classList.toggle("bad", bad);
  }

  // ------------------------------------------------------------------------------ expected outputs
  // The label rules a task's record may name (its `label_rule`, which the payload carries as
  // LIVE.input.label_rule): the mirror of explorer/layout.py's LABEL_RULES, by name, never by task. A
  // rule of every position (`labels`: the expected output at each position of the ids), or of a
  // sequence-to-sequence task (`output`: the task's answer for a source, in token ids).
  const LABEL_RULES = Object.freeze({
    next: { labels: (ids) => ids.map((_, t) => (t + 1 < ids.length ? ids[t + 1] : -100)) },
    induction: {
      labels: (ids) =>
        ids.map((id, t) => {
          if (t < 1 || t >= ids.length - 1) return -100;
          const earlier = ids.slice(0, t).lastIndexOf(id);
          return earlier >= 0 ? ids[earlier + 1] : -100;
        }),
    },
    reverse: { output: (source) => source.slice().reverse() },
    sort_unique: { output: (source) => [...new Set(source)].sort((a, b) => a - b) },
  });

  /** The expected output at each position of the last model input (-100: none), by the task's rule
   *  for an edited input (the first input keeps the labels it was made with). `tokens`: the box's. */
  function labelsFor(tokens, inputs) {
    const T = inputs[inputs.length - 1].length;
    const none = new Array(T).fill(-100);
    const name = LIVE.input.label_rule;
    const rule = typeof name === "string" && Object.hasOwn(LABEL_RULES, name) ? LABEL_RULES[name] : null;
    if (!rule) return none;
    if (rule.labels) return rule.labels(inputs[0]);
    const expected = rule.output(tokens);
    // an encoder labels each source position; a model that writes its output, where it writes it
    if (!LIVE.spec.generates) return none.map((_, t) => (t < expected.length ? expected[t] : -100));
    const c = LIVE.spec.config;
    const outputs = expected.concat(c.eos_id === null ? [] : [c.eos_id]);
    const first = LIVE.spec.readsSource ? 0 : tokens.length; // the row that predicts output 0
    return none.map((_, t) => (t >= first && t - first < outputs.length ? outputs[t - first] : -100));
  }

  TL.input = { tokenize, checkInput, vocabulary, positionsFor, markInput, say, LABEL_RULES, labelsFor };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
