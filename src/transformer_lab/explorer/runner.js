/* runner.js: the runs of the page's views and its Web Worker. A Runner keeps the last run, so that a
 * decoder-only model re-reads only the positions from the first one that changed (its KV cache holds the
 * rest); viewRun turns the input box's request into model inputs (a source: the output written greedily
 * from it) and runs them; serveWorker answers the page's requests in a worker. This file is the last of
 * the model's scripts (page.MODEL_SCRIPTS): started as a Web Worker from their text, it serves the page.
 * No DOM.
 */
(function (TL) {
  "use strict";
  const { StackCache, toAblationMap, tensors, Model } = { ...TL.model, ...TL.weights };

  // ------------------------------------------------------------------------------ the page's runs
  /** Runs the model for the page's views, remembering the last run: a decoder-only model (the shipped
   *  spec.decoderOnly: one causal stack) recomputes only from the first position that changed, reading
   *  the earlier positions' keys and values from its KV cache (their logits and attention rows cannot
   *  change).
   *  run(inputs, {ablate, ablation}) -> {logits [T, C], T, C, patterns: [{data [H, Tq, Tk], H, Tq, Tk}]
   *  per attention layer, reused: positions reused from the last run}. */
  class Runner {
    constructor(model) {
      this.model = model;
      this.last = null;
    }

    run(inputs, opts = {}) {
      const m = this.model;
      const stacks = m.spec.stacks;
      const key = JSON.stringify([opts.ablate || [], opts.ablation || "zero"]);
      if (!m.spec.decoderOnly) {
        const result = m.run(inputs, { ablate: opts.ablate, ablation: opts.ablation });
        return { logits: result.logits, T: result.T, C: result.C, patterns: result.record.patterns, reused: 0 };
      }
      const tokens = inputs[0];
      const T = tokens.length;
      if (T > m.config.max_len) throw new Error(`${T} positions are more than the model's max_len=${m.config.max_len}; shorten the input`);
      let p = 0;
      const last = this.last && this.last.key === key ? this.last : null;
      if (last) while (p < last.tokens.length && p < T && last.tokens[p] === tokens[p]) p++;
      if (p === T && T > 0) p = T - 1; // the last position is re-read (cheap), so that a run always runs
      this.last = null; // until this run succeeds
      const cache = p > 0 ? last.cache : new StackCache(stacks[0].blocks, m.config.max_len, m.kvWidth, false);
      cache.truncate(p);
      const record = { patterns: [] };
      const x = m.runStack(0, tokens.slice(p), { cache, ablate: toAblationMap(opts.ablate, m.numLayers, m.H), method: opts.ablation, record });
      const fresh = m.unembed(x, T - p);
      const C = m.classes;
      const logits = new Float32Array(T * C);
      if (p > 0) logits.set(last.logits.subarray(0, p * C));
      logits.set(fresh, p * C);
      const patterns = record.patterns.map((part, layer) => {
        const { H } = part;
        const data = new Float32Array(H * T * T);
        for (let h = 0; h < H; h++) {
          if (p > 0) {
            const old = last.patterns[layer];
            for (let i = 0; i < p; i++) data.set(old.data.subarray((h * old.Tq + i) * old.Tk, (h * old.Tq + i) * old.Tk + Math.min(old.Tk, T)), (h * T + i) * T);
          }
          for (let i = 0; i < T - p; i++) data.set(part.data.subarray((h * part.Tq + i) * T, (h * part.Tq + i + 1) * T), (h * T + p + i) * T);
        }
        return { data, H, Tq: T, Tk: T };
      });
      this.last = { key, tokens: tokens.slice(), cache, logits, patterns };
      return { logits, T, C, patterns, reused: p };
    }
  }

  /** What the page's input box means as model inputs: `tokens` mode, the tokens themselves; `source`
   *  mode (a sequence-to-sequence model), the source, and the output the model writes from it greedily
   *  (decoder-only: source <sep> output; encoder-decoder: source and <bos> output), as the explorer's
   *  Python side explains a source. Then the runner's run. */
  function viewRun(model, runner, request) {
    const t0 = performance.now();
    let inputs = request.inputs;
    let output = null;
    if (!inputs) {
      const tokens = request.tokens;
      if (request.mode === "source") {
        const prompt = model.spec.readsSource ? tokens : tokens.concat([model.config.sep_id]);
        output = model.answer(prompt, { ablate: request.ablate, ablation: request.ablation });
        inputs = model.forcedInputs(prompt, output);
      } else {
        inputs = [tokens];
      }
    }
    const result = runner.run(inputs, { ablate: request.ablate, ablation: request.ablation });
    return { ...result, inputs, output, forwardMs: performance.now() - t0 };
  }

  /** In a Web Worker (the page's large models): hold the models, answer `view` requests. */
  function serveWorker(scope) {
    const models = [];
    let runner = null;
    scope.onmessage = (event) => {
      const message = event.data;
      try {
        if (message.type === "model") {
          const w = tensors(new Uint8Array(message.weights), message.manifest, message.dtype);
          const means = message.means ? tensors(new Uint8Array(message.means), message.meansManifest, "float32") : {};
          models[message.index] = new Model(message.spec, w, means);
          return;
        }
        if (message.type === "view") {
          const model = models[message.index];
          if (!runner || runner.model !== model) runner = new Runner(model);
          const result = viewRun(model, runner, message.request);
          // the runner keeps what it reuses: send copies, moved (not cloned) to the page
          const logits = result.logits.slice();
          const patterns = result.patterns.map((p) => ({ ...p, data: p.data.slice() }));
          const moved = [logits.buffer, ...patterns.map((p) => p.data.buffer)];
          scope.postMessage({ id: message.id, result: { ...result, logits, patterns } }, moved);
        }
      } catch (error) {
        scope.postMessage({ id: message.id, error: String(error && error.message ? error.message : error) });
      }
    };
  }

  TL.runs = { Runner, viewRun, serveWorker };
  // the model's functions as one object, under the name the page's first version gave them (tests and
  // Node read TransformerLabModel.erf, .Model, ...)
  globalThis.TransformerLabModel = { ...TL.erf, ...TL.weights, ...TL.model, ...TL.analyses, ...TL.runs, checks: TL.checks };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
if (typeof module !== "undefined") module.exports = globalThis.TransformerLabModel;
// started as a Web Worker (from the model scripts' text): serve the page's runs
if (typeof WorkerGlobalScope !== "undefined" && typeof self !== "undefined" && self instanceof WorkerGlobalScope) {
  globalThis.TransformerLab.runs.serveWorker(self);
}
