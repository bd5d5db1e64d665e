/* view_patching.js: activation patching (live pages): click a token to corrupt it; the share of the
 * clean logit difference each residual position and head restores.
 */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { LIVE, HEADS } = state;
  const { $, CMAPS, el, message, shown } = TL.util;
  const { drawMatrix, hoverCells } = TL.heatmap;

  // ------------------------------------------------------------------------------- patching view
  function drawPatchingView() {
    const strip = $("patch-tokens");
    const tokens = state.live ? TL.input.tokenize($("input-box").value).ids : [];
    strip.replaceChildren(
      ...tokens.map((id, i) => el("button", { class: "patch-token", "data-index": i, "aria-pressed": state.live.patch && state.live.patch.position === i, text: shown(state.live.names[id]) }))
    );
    const panels = $("patch-panels");
    panels.replaceChildren();
    if (!state.live.patch) {
      $("patch-info").textContent = "Click a token above to corrupt it.";
      return;
    }
    const p = state.live.patch;
    if (p.error) {
      $("patch-info").textContent = p.error;
      return;
    }
    if (p.progress) {
      $("patch-info").textContent = `Patching: ${p.progress}`;
      return;
    }
    const r = p.result;
    $("patch-info").textContent =
      `Token ${p.position} ${shown(p.from)} → ${shown(p.to)}: at output position ${p.answer.position} the model predicts ${shown(p.cleanName)} ` +
      `(clean) and ${shown(p.badName)} (corrupted); logit difference clean ${r.clean.toFixed(2)}, corrupted ${r.corrupted.toFixed(2)}.`;
    const byStack = {};
    for (const [name, row] of Object.entries(r.resid)) {
      const stack = name.startsWith("decoder.") ? "decoder." : name.startsWith("encoder.") ? "encoder." : "";
      (byStack[stack] = byStack[stack] || []).push([name, row]);
    }
    LIVE.spec.stacks.forEach((stack, s) => {
      const entries = byStack[stack.prefix] || [];
      const rows = entries.map(([name]) => name.replace(stack.prefix, "").replace("blocks.", "L").replace(".hook_resid_pre", " in").replace(".hook_resid_post", " out"));
      const values = entries.map(([, row]) => row);
      const cols = p.corrupted[stack.input].map((id) => state.live.names[id]);
      const vmax = Math.max(1, ...values.flat().map(Math.abs));
      const canvas = el("canvas", { class: "patching", "data-stack": s });
      panels.append(canvas);
      const geometry = drawMatrix(canvas, { R: rows.length, C: cols.length, get: (i, j) => values[i][j] }, {
        rows, cols, title: `Residual stream${stack.prefix ? ` (${stack.prefix.replace(".", "")})` : ""}: share of the logit difference restored`,
        xlabel: "position (corrupted input)", ylabel: "stream", cmap: CMAPS.ablation, vmax, vmin: -vmax, maxSide: 480, legend: "restored", annotate: (v) => v.toFixed(2),
      });
      hoverCells(canvas, geometry, (i, j) => `${entries[i][0]}, position ${j} ${shown(cols[j])}: ${values[i][j].toFixed(3)} restored`);
    });
    const heads = r.heads;
    const vmax = Math.max(1, ...heads.flat().map(Math.abs));
    const canvas = el("canvas", { class: "patching", "data-stack": "heads" });
    panels.append(canvas);
    drawMatrix(canvas, { R: heads.length, C: HEADS, get: (i, j) => heads[i][j] }, {
      rows: LIVE.spec.layers.map((l) => l.label), cols: Array.from({ length: HEADS }, (_, h) => `H${h}`), title: "Each head's z: share restored",
      xlabel: "head", ylabel: "attention layer", cmap: CMAPS.ablation, vmax, vmin: -vmax, maxSide: 300, cellMax: 48, legend: "restored", annotate: (v) => v.toFixed(2),
    });
  }

  /** Corrupt token `position` of the box's input (the next symbol of the vocabulary, cyclically, as
   *  the tasks' corrupted_pairs do) and patch every residual position and head from the clean run. */
  async function runPatching(position) {
    if (state.live.problem) {
      state.live.patch = { error: `Fix the input first: ${state.live.problem}` };
      drawPatchingView();
      return;
    }
    const model = await state.live.engine.model(state.live.step);
    const tokens = TL.input.tokenize($("input-box").value).ids;
    const symbols = LIVE.spec.vocab.map((_, i) => i).filter((i) => !LIVE.input.specials.includes(i));
    const from = tokens[position];
    const to = symbols[(symbols.indexOf(from) + 1) % symbols.length];
    const bad = tokens.slice();
    bad[position] = to;
    const vocab = state.live.names;
    const clean = state.live.inputs;
    // the corrupted input read with the clean output forced (positions up to the answer are what the
    // task's own corrupted example holds there)
    const corrupted = clean.map((ids, i) => (i === 0 ? bad.concat(ids.slice(bad.length)) : ids.slice()));
    const cleanLogits = model.run(clean).logits;
    const badLogits = model.run(corrupted).logits;
    const C = model.classes;
    const T = clean[clean.length - 1].length;
    // a decoder-only model: its outputs start after the source (and <sep>), and a position before the
    // corrupted one cannot see it
    const outputsFrom = LIVE.input.mode === "source" && LIVE.spec.decoderOnly ? tokens.length : 0;
    const start = Math.max(outputsFrom, LIVE.spec.decoderOnly ? position : 0);
    let answer = null;
    for (let t = start; t < T; t++) {
      const a = TL.model.argmax(cleanLogits, t * C, C);
      const b = TL.model.argmax(badLogits, t * C, C);
      if (a !== b) {
        answer = { position: t, cleanAnswer: a, corruptedAnswer: b };
        break;
      }
    }
    const names = LIVE.input.names;
    state.live.patch = { position, from: vocab[from], to: vocab[to], corrupted };
    if (!answer) {
      state.live.patch.error = `Token ${position} ${shown(vocab[from])} → ${shown(vocab[to])} changes none of the model's predictions: nothing to restore. Try another token.`;
      drawPatchingView();
      return;
    }
    state.live.patch.answer = answer;
    state.live.patch.cleanName = names[answer.cleanAnswer];
    state.live.patch.badName = names[answer.corruptedAnswer];
    state.live.patch.progress = "starting";
    drawPatchingView();
    const seq = ++state.live.patchSeq;
    const t0 = performance.now();
    try {
      state.live.patch.result = await TL.analyses.patching(model, clean, corrupted, answer, {
        yieldEvery: 16,
        onProgress: (done, total) => {
          if (seq !== state.live.patchSeq) return;
          state.live.patch.progress = `${done} of ${total} runs`;
          $("patch-info").textContent = `Patching: ${done} of ${total} runs`;
        },
        cancelled: () => seq !== state.live.patchSeq,
      });
    } catch (error) {
      if (seq !== state.live.patchSeq) return;
      state.live.patch.error = `Patching failed: ${message(error)}`;
    }
    if (seq !== state.live.patchSeq) return;
    state.live.patch.progress = null;
    state.api.patchingMs = performance.now() - t0;
    drawPatchingView();
  }

  TL.view_patching = { drawPatchingView, runPatching };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
