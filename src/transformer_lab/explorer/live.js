/* live.js: the live page: a run of the model for the box's input (heads removed, step) turned into
 * what the views draw; the heads panel, generation, the step slider; startLive sets it all up.
 */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { DATA, LIVE, HEADS } = state;
  const { $, FloatStack, el, inflate, message } = TL.util;
  const { runPatching } = TL.view_patching;
  const { fail, redraw, removedPairs } = TL.views;
  const { Engine, WORKER_COST, cost } = TL.engine;
  const { checkInput, labelsFor, markInput, say, tokenize } = TL.input;

  // ------------------------------------------------------------------------------ a live update
  /** Run the model on the box's input (and the removed heads, and the step) and rebuild the views.
   *  Sets window.transformerLab.lastUpdateMs (from the call to the views drawn) and forwardMs (the
   *  model's runs alone, generation included). */
  async function update() {
    const t0 = performance.now();
    const seq = ++state.live.seq;
    const text = $("input-box").value;
    const checked = checkInput(text);
    markInput(text, checked.marks);
    if (checked.problem) {
      say(checked.problem, true);
      state.live.problem = checked.problem;
      return;
    }
    state.live.problem = null;
    const lengths = LIVE.input.trained_lengths;
    const request = { mode: LIVE.input.mode, tokens: checked.ids, ablate: removedPairs(), ablation: state.live.method };
    // the first input, as the model read it in Python (a generated output included): what the
    // precomputed views show; edited (or with heads removed), the model writes its own output again
    if (text === LIVE.input.text && (state.live.removed.size === 0 || LIVE.input.mode === "tokens")) request.inputs = LIVE.input.inputs;
    let result;
    try {
      result = await state.live.engine.view(state.live.step, request);
    } catch (error) {
      say(`the page could not run the model on this input: ${message(error)}`, true);
      return;
    }
    if (seq !== state.live.seq) return; // a newer input is on its way
    state.live.last = { inputs: result.inputs, logits: result.logits };
    const t1 = performance.now();
    const first = JSON.stringify(result.inputs) === JSON.stringify(LIVE.input.inputs);
    const labels = first && LIVE.input.labels ? LIVE.input.labels : labelsFor(checked.ids, result.inputs);
    apply(result, labels, first);
    const t2 = performance.now();
    const note = lengths && (checked.ids.length < lengths[0] || checked.ids.length > lengths[1])
      ? ` Note: this model was trained on sources of ${lengths[0] === lengths[1] ? lengths[0] : `${lengths[0]} to ${lengths[1]}`} tokens, never on ${checked.ids.length}: expect an output that means nothing.`
      : "";
    say(`${checked.ids.length} tokens${result.reused ? ` (positions 0-${result.reused - 1} reused from the last run)` : ""}; ` +
      `the model ran in ${result.forwardMs.toFixed(1)} ms.${note}`, Boolean(note));
    redraw();
    state.api.forwardMs = result.forwardMs;
    state.api.lastUpdateMs = performance.now() - t0;
    // where the time went: the run (the forward pass, and its transfer from a worker), the numbers for
    // the views (maps, predictions, rollout), drawing the view shown
    state.api.updateParts = { run: t1 - t0, numbers: t2 - t1, draw: performance.now() - t2 };
    state.api.updates = (state.api.updates || 0) + 1;
    TL.fragment.saveFragment();
  }

  /** What the views draw, from a run: the attention maps by kind, predictions, rollout, the header. */
  function apply(result, labels, first) {
    const spec = LIVE.spec;
    const vocab = state.live.names; // the tokens as the tools show them (a BPE's: "␣the")
    const names = LIVE.input.names;
    const tokens = result.inputs.map((ids) => ids.map((id) => vocab[id]));
    state.live.inputs = result.inputs;
    state.live.generated = result.output ? result.output.map((id) => vocab[id]) : null;
    // attention maps, grouped as the precomputed page groups them
    state.kinds = DATA.kinds.map((k) => {
      const layers = spec.layers.map((layer, i) => ({ ...layer, i })).filter((layer) => layer.group === k.name);
      const parts = layers.map((layer) => result.patterns[layer.i]);
      const { Tq, Tk } = parts[0];
      const data = new Float32Array(parts.length * HEADS * Tq * Tk);
      parts.forEach((p, l) => data.set(p.data, l * HEADS * Tq * Tk));
      return { ...k, first: 0, rows: tokens[layers[0].queries], cols: tokens[layers[0].keys], stack: new FloatStack([parts.length, HEADS, Tq, Tk], data) };
    });
    // predictions: top-3 per position of the last input
    const { T, C } = result;
    const promptEnd = LIVE.input.mode === "source" && spec.decoderOnly ? result.inputs[0].indexOf(spec.config.sep_id) : 0;
    const rows = [];
    const predicted = [];
    for (let t = 0; t < T; t++) {
      const logp = TL.model.logSoftmax(result.logits, t * C, C);
      const order = topThree(logp);
      const label = labels[t] === undefined ? -100 : labels[t];
      predicted.push(order[0]);
      rows.push({
        position: t,
        reads: tokens[tokens.length - 1][t],
        top: order.map((i) => [names[i], Math.round(Math.exp(logp[i]) * 1e4) / 1e4]),
        label: label === -100 ? null : names[label],
        correct: label === -100 ? null : order[0] === label,
      });
    }
    state.current.predictions = { ...DATA.predictions, rows };
    state.live.predicted = predicted;
    state.live.labels = labels;
    const firstLabel = labels.findIndex((l) => l !== -100);
    const blank = Math.max(promptEnd, firstLabel > 0 ? firstLabel : 0);
    const outputRows = predicted.map((id, t) => (t < blank ? "" : names[id]));
    state.current.input = tokens[0];
    state.current.output = outputRows;
    state.current.overlayRows = outputRows;
    state.current.overlayCols = tokens[0];
    // rollout from the page's own maps (computed when a view first asks for it); relevance (gradients)
    // only where it is still the first view's
    const isFirst = first && state.live.removed.size === 0 && state.live.step === state.live.firstStep;
    const S = tokens[0].length;
    state.overlays = state.overlays.map((o) => {
      if (o.name !== "rollout") return { ...o, stack: isFirst ? o.original : o.stack, stale: !isFirst };
      const rolled = { name: o.name, title: o.title, original: o.original, stale: false, vmax: null };
      let stack = null;
      Object.defineProperty(rolled, "stack", {
        enumerable: true,
        get: () => {
          if (stack) return stack;
          let values;
          if (spec.crossAttention) { // explain.encoder_decoder_rollout, through all three kinds of attention
            const group = (name) => spec.layers.map((layer, i) => (layer.group === name ? result.patterns[i] : null)).filter(Boolean);
            values = TL.analyses.encoderDecoderRollout(group("encoder"), group("decoder"), group("cross"));
          } else {
            values = TL.analyses.rollout(result.patterns);
            rolled.vmax = 0; // the colour's top: the largest value off the diagonal
            for (let r = 0; r < T; r++) for (let c = 0; c < T; c++) if (r !== c) rolled.vmax = Math.max(rolled.vmax, values[r * T + c]);
          }
          stack = new FloatStack([1, T, S], Float32Array.from(values));
          return stack;
        },
      });
      return rolled;
    });
    // the ablation table: still the first input's unless recomputed
    if (isFirst && !state.live.tableRecomputed) {
      state.current.ablation = DATA.ablation;
      state.current.ablationNote = "";
    } else if (!state.live.tableFor || state.live.tableFor !== tableKey()) {
      state.current.ablationNote = state.current.ablation
        ? "This table is for another input, step or set of removed heads than the views show: recompute it for this one."
        : "";
    }
    state.live.patch = null;
  }

  const tableKey = () => JSON.stringify([state.live.inputs, state.live.step, state.live.method]);

  /** The indices of the three largest values (in order), by one scan. */
  function topThree(values) {
    const best = [];
    for (let i = 0; i < values.length; i++) {
      if (best.length < 3 || values[i] > values[best[best.length - 1]]) {
        best.push(i);
        best.sort((a, b) => values[b] - values[a] || a - b);
        if (best.length > 3) best.pop();
      }
    }
    return best;
  }

  // ------------------------------------------------------------------------------ removed heads
  function drawHeadsPanel() {
    const buttons = $("heads-buttons");
    const byLayer = LIVE.spec.layers.map((layer, l) =>
      el("span", { class: "heads-layer" }, ...Array.from({ length: HEADS }, (_, h) =>
        el("button", { class: "head-toggle", "data-layer": l, "data-head": h, "aria-pressed": state.live.removed.has(`${l}:${h}`), title: `${layer.name}, head ${h}`, text: `${layer.label}H${h}` })))
    );
    buttons.replaceChildren(...byLayer);
    $("ablation-method").value = state.live.method;
  }

  function toggleHead(layer, h) {
    const key = `${layer}:${h}`;
    if (state.live.removed.has(key)) state.live.removed.delete(key);
    else state.live.removed.add(key);
    drawHeadsPanel();
    update().catch(fail);
  }

  // -------------------------------------------------------------------------------- generation
  /** Continue the text with the model (temperature and top-k as sample.py; 0: greedy), as far as the
   *  context allows, then show the longer input. */
  async function generate() {
    const model = await state.live.engine.model(state.live.step);
    const tokens = tokenize($("input-box").value).ids;
    const room = LIVE.spec.config.max_len - tokens.length;
    if (room <= 0) {
      say(`the input already fills the model's context (${LIVE.spec.config.max_len} tokens): shorten it to generate more`, true);
      return;
    }
    const count = Math.min(room, Math.max(1, Number($("gen-count").value) || 1));
    const typed = Number($("gen-temperature").value);
    const temperature = Number.isFinite(typed) && typed > 0 ? typed : 0;
    const k = Math.floor(Number($("gen-top-k").value));
    const topK = k > 0 ? k : null;
    const t0 = performance.now();
    const out = model.generate(tokens, count, { temperature, topK, ablate: removedPairs(), ablation: state.live.method });
    state.api.generateMs = performance.now() - t0;
    const newIds = out.slice(tokens.length);
    const added = newIds.map((id) => LIVE.spec.vocab[id]);
    const box = $("input-box");
    if (state.live.bpe) box.value = box.value + state.live.bpe.decode(newIds);
    else box.value = box.value + (LIVE.input.separator === "" ? added.join("") : (box.value.trim() ? " " : "") + added.join(" "));
    await update();
  }

  // ------------------------------------------------------------------------------ the step slider
  async function setStep(index) {
    state.live.step = index;
    if (state.live.series) {
      $("step-slider").value = index;
      $("step-value").textContent = state.live.series.labels[index];
    }
    state.live.tableRecomputed = false;
    await update();
  }

  /** fields: the URL fragment's (read once, by main, before the page rewrites it); wanted: what of it
   *  waits for the first run. */
  async function startLive(fields, wanted) {
    const t0 = performance.now();
    if (!TL.model || !TL.runs) throw new Error("the page's model script is missing");
    const series = LIVE.series;
    const first = series ? series.current : 0;
    const T = LIVE.input.inputs.reduce((n, ids) => Math.max(n, ids.length), 0);
    // window.transformerLabOptions = {worker: true | false} (set before the page loads) overrides the choice
    const options = window.transformerLabOptions || {};
    const useWorker = typeof Worker !== "undefined" && (options.worker ?? cost(T) > WORKER_COST);
    state.live = {
      engine: new Engine(useWorker),
      index: new Map(LIVE.spec.vocab.map((t, i) => [t, i])),
      bpe: LIVE.input.tokenizer ? TL.tokenizer.fromPayload(LIVE.input.tokenizer) : null,
      names: LIVE.input.token_names || LIVE.spec.vocab,
      removed: new Set(),
      method: "zero",
      step: first,
      firstStep: first,
      series,
      seq: 0,
      patchSeq: 0,
      patch: null,
      inputs: LIVE.input.inputs,
      labels: LIVE.input.labels,
      generated: null,
      problem: null,
      tableRecomputed: false,
    };
    const model = await state.live.engine.model(first);
    state.timings.decodeWeights = performance.now() - t0;
    // the input box, the heads panel, generation, the slider, the patching tab
    $("live-input").hidden = false;
    const box = $("input-box");
    box.value = LIVE.input.text;
    box.addEventListener("input", () => update().catch(fail));
    box.addEventListener("scroll", () => ($("input-backdrop").scrollTop = box.scrollTop));
    if (LIVE.spec.decoderOnly && LIVE.input.mode === "tokens") {
      $("generate-controls").hidden = false;
      $("gen-count").max = LIVE.spec.config.max_len;
      $("generate").addEventListener("click", () => generate().catch(fail));
    }
    $("heads-panel").hidden = false;
    drawHeadsPanel();
    $("heads-buttons").addEventListener("click", (event) => {
      const button = event.target.closest(".head-toggle");
      if (button) toggleHead(Number(button.dataset.layer), Number(button.dataset.head));
    });
    $("heads-restore").addEventListener("click", () => {
      state.live.removed.clear();
      drawHeadsPanel();
      update().catch(fail);
    });
    $("ablation-method").disabled = !LIVE.means;
    $("ablation-method").title = LIVE.means ? "" : "this page carries no means: zero ablation only";
    $("ablation-method").addEventListener("change", (event) => {
      state.live.method = event.target.value;
      if (state.live.removed.size) update().catch(fail);
      else TL.fragment.saveFragment();
    });
    $("patching-tab").hidden = false;
    $("patch-tokens").addEventListener("click", (event) => {
      const button = event.target.closest(".patch-token");
      if (button) runPatching(Number(button.dataset.index)).catch(fail);
    });
    if (series && series.steps.length > 1) {
      $("step-control").hidden = false;
      const slider = $("step-slider");
      slider.max = series.steps.length - 1;
      slider.value = first;
      $("step-value").textContent = series.labels[first];
      slider.addEventListener("input", () => setStep(Number(slider.value)).catch(fail));
    }
    TL.api.buildApi(model);
    // the first run: the page's forward pass on the precomputed input, checked against PyTorch's logits
    const check = await inflate(LIVE.check.data);
    const expected = new Float32Array(check.buffer, check.byteOffset, check.length / 4);
    TL.fragment.applyFragmentLive(fields);
    await update();
    TL.fragment.applyFragmentAfterRun(wanted);
    // the check: the first run's logits, where it ran the first input with nothing removed (else a run
    // of its own, where that is cheap)
    const plain = state.live.removed.size === 0 && state.live.step === state.live.firstStep;
    const ran = state.live.last && plain && JSON.stringify(state.live.last.inputs) === JSON.stringify(LIVE.input.inputs)
      ? state.live.last.logits
      : !state.live.engine.worker ? state.live.engine.models[state.live.firstStep].run(LIVE.input.inputs).logits : null;
    if (ran) {
      let diff = 0;
      let scale = 0;
      for (let i = 0; i < expected.length; i++) {
        diff = Math.max(diff, Math.abs(ran[i] - expected[i]));
        scale = Math.max(scale, Math.abs(expected[i]));
      }
      state.api.check = { maxDiff: diff, scale, relative: diff / Math.max(scale, 1e-12) };
    }
    const status = $("live-status");
    const worker = state.live.engine.worker ? " (in a Web Worker)" : "";
    status.textContent = `Live: the model runs in this page${worker}; its weights take ${(LIVE.chars / 1e6).toFixed(2)} MB of the file` +
      (LIVE.weights.dtype === "float16" ? " as float16 (rounded: the logits move by about 1e-3 of their scale from the float32 model's)" : "") +
      (state.api.check ? `; on the first input its logits agree with PyTorch's to ${state.api.check.relative.toExponential(1)} of their scale.` : ".") +
      (LIVE.notes.length ? ` ${LIVE.notes.join("; ")}.` : "");
    state.api.loadMs = performance.now() - t0; // decoding, checking and the first run, after the first view
    state.api.readyMs = performance.now(); // from the start of navigation
    state.api.worker = Boolean(state.live.engine.worker);
    document.body.dataset.live = "true";
  }

  TL.live = { update, apply, tableKey, topThree, drawHeadsPanel, toggleHead, generate, setStep, startLive };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
