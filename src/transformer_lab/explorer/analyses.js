/* analyses.js: what the page computes with its model (model.js), beside the forward pass: the
 * head-ablation table, activation patching (as interventions.activation_patching) and attention rollout
 * (one stack, or an encoder-decoder's, as explain.encoder_decoder_rollout). No DOM.
 */
(function (TL) {
  "use strict";
  const { StackCache, argmax, logSoftmax } = TL.model;

  // ------------------------------------------------------------------------- interventions
  /** The head-ablation table for one input (as the explorer's Python table): per attention layer and
   *  head, the drop of the mean log-probability of the model's own predictions (over `positions`,
   *  a boolean per output position; default all) when that head is removed. */
  function ablationTable(model, inputs, opts = {}) {
    const base = model.run(inputs);
    const { T, C } = base;
    const predicted = Array.from({ length: T }, (_, t) => argmax(base.logits, t * C, C));
    const positions = opts.positions || new Array(T).fill(true);
    const count = positions.filter(Boolean).length || 1;
    const score = (logits) => {
      let sum = 0;
      for (let t = 0; t < T; t++) if (positions[t]) sum += logSoftmax(logits, t * C, C)[predicted[t]];
      return sum / count;
    };
    const baseline = score(base.logits);
    const drops = [];
    for (let layer = 0; layer < model.numLayers; layer++) {
      const row = [];
      for (let h = 0; h < model.H; h++) {
        const ablated = model.run(inputs, { ablate: [[layer, h]], ablation: opts.ablation || "zero" });
        row.push(baseline - score(ablated.logits));
      }
      drops.push(row);
    }
    return { baseline, drops, positions: count };
  }

  /** Activation patching, as interventions.activation_patching computes it for one clean/corrupted
   *  pair: run the corrupted input with one activation pasted from the clean run, and report
   *      restored = (LD_patched - LD_corrupted) / (LD_clean - LD_corrupted),
   *      LD = logit(clean answer) - logit(corrupted answer) at output position `position`,
   *  for every residual-stream hook (each block's resid_pre, then the last block's resid_post, per
   *  stack) x position, and for every head's z. `onProgress(done, total)` may be called; returns a
   *  Promise when `yieldEvery` is set (so a page stays responsive), else the result. */
  function patching(model, clean, corrupted, answer, opts = {}) {
    const { position, cleanAnswer, corruptedAnswer } = answer;
    const stacks = model.spec.stacks;
    const C = model.classes;
    const difference = (logits) => logits[position * C + cleanAnswer] - logits[position * C + corruptedAnswer];
    const cleanRun = model.run(clean, { record: { patterns: [], resid: [], z: [] } });
    // the corrupted run, with every stack's residual stream and K/V kept, so a patch at (hook, p)
    // resumes from there instead of starting over
    const caches = stacks.map((st) => new StackCache(st.blocks, model.config.max_len, model.kvWidth, st.cross));
    const badRun = model.run(corrupted, { record: { patterns: [], resid: [] }, stackCaches: caches });
    const cleanDiff = difference(cleanRun.logits);
    const badDiff = difference(badRun.logits);
    const scale = cleanDiff - badDiff;
    if (Math.abs(scale) < 1e-6) throw new Error("the clean and corrupted inputs give the same logit difference: nothing to restore");
    const restored = (logits) => (difference(logits) - badDiff) / scale;
    const jobs = [];
    const resid = {};
    stacks.forEach((st, s) => {
      const T = corrupted[st.input].length;
      for (let hook = 0; hook <= st.blocks; hook++) {
        const name = hook < st.blocks ? `${st.prefix}blocks.${hook}.hook_resid_pre` : `${st.prefix}blocks.${st.blocks - 1}.hook_resid_post`;
        resid[name] = new Array(T).fill(0);
        for (let p = 0; p < T; p++) jobs.push({ kind: "resid", s, hook, p, name });
      }
    });
    const heads = Array.from({ length: model.numLayers }, () => new Array(model.H).fill(0));
    if (opts.heads !== false) {
      for (let layer = 0; layer < model.numLayers; layer++) for (let h = 0; h < model.H; h++) jobs.push({ kind: "head", layer, h });
    }
    const last = stacks.length - 1;
    const runJob = (job) => {
      if (job.kind === "head") {
        const logits = model.run(corrupted, { patchZ: { layer: job.layer, head: job.h, z: cleanRun.record.z[job.layer] } }).logits;
        heads[job.layer][job.h] = restored(logits);
        return;
      }
      const st = stacks[job.s];
      const D = model.D;
      const T = corrupted[st.input].length;
      // a causal stack: rows before p are unchanged; resume at block `hook` for rows p.. with the
      // corrupted run's keys and values of rows < p
      if (st.causal && job.s === last) {
        const cache = caches[job.s].copy();
        cache.truncate(job.p);
        const x = badRun.record.resid[job.s][job.hook].slice(job.p * D, T * D);
        x.set(cleanRun.record.resid[job.s][job.hook].subarray(job.p * D, (job.p + 1) * D), 0);
        if (position < job.p) {
          resid[job.name][job.p] = 0; // the answer's position cannot see the patched one
          return;
        }
        const out = model.runStack(job.s, corrupted[st.input].slice(job.p), {
          cache,
          memory: st.cross ? badRun.memory : null,
          start: { hook: job.hook, x },
        });
        const logits = model.unembed(out.subarray((position - job.p) * D, (position - job.p + 1) * D), 1);
        resid[job.name][job.p] = (logits[cleanAnswer] - logits[corruptedAnswer] - badDiff) / scale;
        return;
      }
      const x = badRun.record.resid[job.s][job.hook].slice();
      x.set(cleanRun.record.resid[job.s][job.hook].subarray(job.p * D, (job.p + 1) * D), job.p * D);
      const logits = model.run(corrupted, {
        start: { stack: job.s, hook: job.hook, x },
        skipStacks: stacks.map((_, i) => i).filter((i) => i < job.s),
        memory: job.s > 0 ? badRun.memory : null,
      }).logits;
      resid[job.name][job.p] = restored(logits);
    };
    const result = () => ({ clean: cleanDiff, corrupted: badDiff, resid, layers: model.spec.layers.map((l) => l.name), heads });
    if (!opts.yieldEvery) {
      jobs.forEach(runJob);
      return result();
    }
    return (async () => {
      for (let i = 0; i < jobs.length; i++) {
        runJob(jobs[i]);
        if ((i + 1) % opts.yieldEvery === 0) {
          if (opts.onProgress) opts.onProgress(i + 1, jobs.length);
          if (opts.cancelled && opts.cancelled()) throw new Error("cancelled");
          await new Promise((resolve) => setTimeout(resolve, 0));
        }
      }
      return result();
    })();
  }

  // ------------------------------------------------------------------------------ rollout
  /** Attention rollout (Abnar & Zuidema, 2020) over one stack's layers: A_l = 0.5 mean_h A + 0.5 I,
   *  rows renormalised, rollout = A_L ... A_1. layers: [{data, H, Tq, Tk}] (square). [T, T] float64. */
  function rollout(layers) {
    let result = null;
    for (const p of layers) {
      const a = headMean(p);
      const n = p.Tq;
      for (let i = 0; i < n; i++) {
        let sum = 0;
        for (let j = 0; j < n; j++) {
          a[i * n + j] = 0.5 * a[i * n + j] + (i === j ? 0.5 : 0);
          sum += a[i * n + j];
        }
        for (let j = 0; j < n; j++) a[i * n + j] /= sum;
      }
      result = result ? matmul(a, result, n, n, n) : a;
    }
    return result;
  }

  function headMean(p) {
    const out = new Float64Array(p.Tq * p.Tk);
    for (let h = 0; h < p.H; h++) {
      const o = h * p.Tq * p.Tk;
      for (let i = 0; i < p.Tq * p.Tk; i++) out[i] += p.data[o + i] / p.H;
    }
    return out;
  }

  function matmul(a, b, n, k, m) {
    const out = new Float64Array(n * m);
    for (let i = 0; i < n; i++) for (let l = 0; l < k; l++) {
      const v = a[i * k + l];
      if (v === 0) continue;
      for (let j = 0; j < m; j++) out[i * m + j] += v * b[l * m + j];
    }
    return out;
  }

  /** explain.encoder_decoder_rollout, rows as shares: the source relevance of each target position
   *  propagated with plain head means (encoder: R_ss += A R_ss; decoder self: R_tt += A R_tt,
   *  R_ts += A R_ts; cross: R_ts += norm(R_tt) A norm(R_ss)). [T, S] float64. */
  function encoderDecoderRollout(encoder, decoder, cross) {
    const S = encoder[0].Tq;
    const T = decoder[0].Tq;
    const eye = (n) => {
      const m = new Float64Array(n * n);
      for (let i = 0; i < n; i++) m[i * n + i] = 1;
      return m;
    };
    const plus = (a, b) => a.map((v, i) => v + b[i]);
    const normalised = (r, n) => {
      const out = new Float64Array(n * n);
      for (let i = 0; i < n; i++) {
        let sum = 0;
        for (let j = 0; j < n; j++) sum += r[i * n + j] - (i === j ? 1 : 0);
        sum = Math.max(sum, 1e-12);
        for (let j = 0; j < n; j++) out[i * n + j] = (r[i * n + j] - (i === j ? 1 : 0)) / sum + (i === j ? 1 : 0);
      }
      return out;
    };
    let rss = eye(S);
    for (const p of encoder) rss = plus(rss, matmul(headMean(p), rss, S, S, S));
    let rtt = eye(T);
    let rts = new Float64Array(T * S);
    decoder.forEach((p, l) => {
      const a = headMean(p);
      rtt = plus(rtt, matmul(a, rtt, T, T, T));
      rts = plus(rts, matmul(a, rts, T, T, S));
      const c = headMean(cross[l]);
      rts = plus(rts, matmul(matmul(normalised(rtt, T), c, T, T, S), normalised(rss, S), T, S, S));
    });
    for (let i = 0; i < T; i++) {
      let sum = 0;
      for (let j = 0; j < S; j++) sum += rts[i * S + j];
      sum = Math.max(sum, 1e-12);
      for (let j = 0; j < S; j++) rts[i * S + j] /= sum;
    }
    return rts;
  }

  TL.analyses = { ablationTable, patching, rollout, encoderDecoderRollout, headMean };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
