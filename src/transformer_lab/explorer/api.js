/* api.js: window.transformerLab, the page's model as an API (see docs/explorer.md); every argument is
 * checked (checks.js) before anything runs.
 */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { LIVE } = state;
  const { $ } = TL.util;
  const { runPatching } = TL.view_patching;
  const { tokenize } = TL.input;
  const { drawHeadsPanel, setStep, update } = TL.live;
  const { INPUT_LIMIT } = TL.fragment;

  // Every argument is checked (TL.checks) before anything runs: a bad one throws an Error naming the
  // function, the argument, its value and what is allowed. The functions that return a Promise throw
  // at the call, before any Promise. Generation writes at most GENERATE_CAP tokens per call (or the
  // model's context, if larger), so that a call cannot freeze the tab.
  const GENERATE_CAP = 256;

  /** window.transformerLab (state.api): the page's model for tests and other pages (see DESIGN.md).
   *  Exists only once the weights are decoded (startLive calls this). */
  function buildApi(model) {
    const C = TL.checks;
    const shownModel = () => state.live.engine.models[state.live.step] || model;
    const stepCount = state.live.series ? state.live.series.steps.length : 1;
    const cap = (m) => Math.max(GENERATE_CAP, m.config.max_len);
    const capWhy = (m) => ` (the page writes at most ${cap(m)} tokens per call)`;
    /** ablate and ablation, as forward, generate and answer take them. */
    const removal = (fn, m, o) => ({ ablate: C.heads(fn, "ablate", o.ablate, m), ablation: C.method(fn, "ablation", o.ablation, m) });
    /** The positions whose logits a run returns: the last input's. */
    const outputs = (inputs) => inputs[inputs.length - 1].length;

    Object.assign(state.api, {
      vocab: LIVE.spec.vocab.slice(),
      config: Object.freeze({ ...LIVE.spec.config }), // a copy: the page's model keeps its own
      layers: LIVE.spec.layers.map((l) => l.name),
      labels: LIVE.spec.layers.map((l) => l.label),
      /** {logits: number[][], patterns: number[][][][]} for token ids (or {source, target}); opts:
       *  ablate [[layer, head], ...] (layers in interventions.attention_layers order), ablation
       *  "zero" | "mean". Synchronous. */
      forward: (input, opts) => {
        const m = shownModel();
        const inputs = C.inputs("forward", "input", input, m);
        const o = C.fields("forward", "opts", opts, ["ablate", "ablation"]);
        return m.forward(inputs, removal("forward", m, o));
      },
      /** A language model's continuation (every token, prompt included; temperature 0: greedy), or an
       *  encoder-decoder's greedy output for {source}. */
      generate: (input, opts) => {
        const fn = "generate";
        const m = shownModel();
        if (!m.spec.generates) C.fail(fn, "this model", "writes no text (it classifies each position)", "forward or answer");
        if (!m.spec.decoderOnly) {
          if (!C.isObject(input)) C.bad(fn, "input", input, "is not {source}", "{source: [token ids]} (an encoder-decoder writes from a source)");
          const source = C.tokens(fn, "input.source", C.fields(fn, "input", input, ["source"]).source, m);
          const o = C.fields(fn, "opts", opts, ["maxNewTokens", "ablate", "ablation"]);
          const L = m.config.max_len;
          const maxNew = o.maxNewTokens === undefined || o.maxNewTokens === null ? undefined : C.integer(fn, "maxNewTokens", o.maxNewTokens, 0, L, ` (the decoder reads at most max_len=${L} positions)`);
          return m.generateSeq2seq(source, maxNew, removal(fn, m, o));
        }
        const tokens = C.tokens(fn, "input", input, m);
        const o = C.fields(fn, "opts", opts, ["maxNewTokens", "temperature", "topK", "topP", "seed", "ablate", "ablation"]);
        const given = (v) => v !== undefined && v !== null;
        const maxNew = given(o.maxNewTokens) ? C.integer(fn, "maxNewTokens", o.maxNewTokens, 0, cap(m), capWhy(m)) : 20;
        const temperature = given(o.temperature) ? C.number(fn, "temperature", o.temperature, (t) => t >= 0, "a finite number >= 0 (0: greedy)") : 0;
        const topK = given(o.topK) ? C.integer(fn, "topK", o.topK, 1, Infinity) : null;
        const topP = given(o.topP) ? C.number(fn, "topP", o.topP, (p) => p > 0 && p <= 1, "null or a number above 0, at most 1") : null;
        const random = given(o.seed) ? TL.model.seeded(C.integer(fn, "seed", o.seed, 0, 4294967295)) : Math.random;
        return m.generate(tokens, maxNew, { temperature, topK, topP, random, ...removal(fn, m, o) });
      },
      /** The greedy output for a prompt (an encoder's class per position; a decoder's new tokens; an
       *  encoder-decoder's output for a source); opts: ablate, ablation, maxNew (language models). */
      answer: (prompt, opts) => {
        const fn = "answer";
        const m = shownModel();
        const tokens = C.tokens(fn, "prompt", prompt, m);
        const o = C.fields(fn, "opts", opts, m.spec.decoderOnly ? ["maxNew", "ablate", "ablation"] : ["ablate", "ablation"]);
        const run = removal(fn, m, o);
        if (o.maxNew !== undefined && o.maxNew !== null) run.maxNew = C.integer(fn, "maxNew", o.maxNew, 0, cap(m), capWhy(m));
        return m.answer(tokens, run);
      },
      /** {baseline, drops[layer][head], positions}; opts: ablation, positions (a boolean per output). */
      ablationTable: (input, opts) => {
        const fn = "ablationTable";
        const m = shownModel();
        const inputs = C.inputs(fn, "input", input, m);
        const o = C.fields(fn, "opts", opts, ["ablation", "positions"]);
        const positions = o.positions === undefined || o.positions === null ? undefined : C.flags(fn, "positions", o.positions, outputs(inputs));
        return TL.analyses.ablationTable(m, inputs, { ablation: C.method(fn, "ablation", o.ablation, m), positions });
      },
      /** Activation patching of every residual position and head (interventions.activation_patching);
       *  answer: {position, cleanAnswer, corruptedAnswer}; opts: heads, yieldEvery, onProgress, cancelled. */
      patching: (clean, corrupted, answer, opts) => {
        const fn = "patching";
        const m = shownModel();
        const a = C.inputs(fn, "clean", clean, m);
        const b = C.inputs(fn, "corrupted", corrupted, m);
        const lengths = (inputs) => `[${inputs.map((ids) => ids.length).join(", ")}]`;
        if (lengths(a) !== lengths(b)) C.fail(fn, "corrupted", `has lengths ${lengths(b)} where clean has ${lengths(a)}`, "inputs as long as clean's");
        if (!C.isObject(answer)) C.bad(fn, "answer", answer, "is not an object", "{position, cleanAnswer, corruptedAnswer}");
        const given = C.fields(fn, "answer", answer, ["position", "cleanAnswer", "corruptedAnswer"]);
        const T = outputs(a);
        const picked = {
          position: C.integer(fn, "answer.position", given.position, 0, T - 1),
          cleanAnswer: C.integer(fn, "answer.cleanAnswer", given.cleanAnswer, 0, m.classes - 1),
          corruptedAnswer: C.integer(fn, "answer.corruptedAnswer", given.corruptedAnswer, 0, m.classes - 1),
        };
        const o = C.fields(fn, "opts", opts, ["heads", "yieldEvery", "onProgress", "cancelled"]);
        return TL.analyses.patching(m, a, b, picked, {
          heads: C.optional(fn, "heads", o.heads, "boolean"),
          yieldEvery: o.yieldEvery === undefined ? undefined : C.integer(fn, "yieldEvery", o.yieldEvery, 1, Infinity),
          onProgress: C.optional(fn, "onProgress", o.onProgress, "function"),
          cancelled: C.optional(fn, "cancelled", o.cancelled, "function"),
        });
      },
      /** The token ids the input box gives for `text` (a BPE's as Python encodes it). */
      encode: (text) => {
        C.text("encode", "text", text, INPUT_LIMIT);
        return TL.input.tokenize(text).ids;
      },
      /** Type into the box (as a student would) and wait for the views; resolves to the box's problem
       *  (null: none). */
      setInput: (text) => {
        C.text("setInput", "text", text, INPUT_LIMIT);
        $("input-box").value = text;
        return update().then(() => state.live.problem);
      },
      /** Remove these heads ([[layer, head], ...]; [] restores all), by "zero" or "mean" (default: as
       *  the page has it), and wait for the views. */
      setHeads: (pairs, method) => {
        const m = shownModel();
        const heads = C.heads("setHeads", "pairs", pairs, m, true);
        const how = method === undefined || method === null ? state.live.method : C.method("setHeads", "method", method, m);
        state.live.removed = new Set(heads.map(([l, h]) => `${l}:${h}`));
        state.live.method = how;
        drawHeadsPanel();
        return update();
      },
      /** Show the model of step `index` (0 to steps.length - 1) and wait for the views. */
      setStep: (index) => setStep(C.integer("setStep", "index", index, 0, stepCount - 1)),
      steps: state.live.series ? state.live.series.steps.slice() : null,
      /** Corrupt token `position` of the box's input and patch (the patching view's click). */
      patchToken: (position) => {
        const n = tokenize($("input-box").value).ids.length;
        // a box with a problem: the patching view says to fix it first, at any position
        C.integer("patchToken", "position", position, 0, state.live.problem ? Infinity : n - 1);
        return runPatching(position);
      },
      /** The page's model of step `index` (default: the step shown), once decoded. */
      model: (index) => state.live.engine.models[index === undefined ? state.live.step : C.integer("model", "index", index, 0, stepCount - 1)],
    });
    // what changes as the student works: read at the time it is asked for
    const now = { step: () => state.live.step, patch: () => state.live.patch, inputs: () => state.live.inputs, problem: () => state.live.problem };
    for (const [name, get] of Object.entries(now)) Object.defineProperty(state.api, name, { get, enumerable: true });
    window.transformerLab = state.api;
  }

  TL.api = { GENERATE_CAP, buildApi };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
