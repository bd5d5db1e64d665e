/* sae.js: a sparse autoencoder in plain JavaScript (transformer_lab.nn.sae): the activation at its hook
 * point from a run of the model (model.js's record of the block inputs and sub-layer outputs), and its
 * features, f = act((s x - b_dec) W_enc + b_enc) per position, for the page's features view. The SAE
 * comes from the page's data (explorer/features.py): its encoder's tensors in one float32 buffer with a
 * manifest (W_enc transposed, [width, d_in]), its activation in use (relu, topk with k, or a threshold
 * per feature: nn.sae_kinds's `in_use`). No DOM.
 */
(function (TL) {
  "use strict";

  /** The activation [T, d_in] the SAE reads, from a run of `model` on `inputs` (opts: ablate, ablation,
   *  as Model.run): `where` = {stack, block, at}: the block's input stream (`resid_pre`; block = L: the
   *  last block's output) or the output of its `attn`, `cross_attn` or `mlp` sub-layer. */
  function hookActivation(model, inputs, where, opts = {}) {
    const record = { patterns: [], resid: [], outputs: {} };
    model.run(inputs, { ...opts, record });
    const found = where.at === "resid_pre" ? record.resid[where.stack][where.block] : record.outputs[`${where.stack}.${where.block}.${where.at}`];
    if (!found) throw new Error(`the run recorded no activation at ${JSON.stringify(where)}`);
    return found;
  }

  /** The features f [T, width] of activations x [T, d_in] (sums in float64, as model.js's). */
  function encode(sae, x, T) {
    const { d_in: D, width: W, activation, k } = sae;
    const { W_enc_t: Wt, b_enc: bEnc, b_dec: bDec, input_scale: scale, threshold } = sae.tensors;
    const s = scale[0];
    const f = new Float32Array(T * W);
    const xin = new Float64Array(D);
    for (let t = 0; t < T; t++) {
      for (let i = 0; i < D; i++) xin[i] = Math.fround(x[t * D + i] * s) - bDec[i];
      const pre = new Float64Array(W);
      for (let j = 0; j < W; j++) {
        let a = 0;
        const row = j * D;
        for (let i = 0; i < D; i++) a += xin[i] * Wt[row + i];
        pre[j] = a + bEnc[j];
      }
      const out = t * W;
      if (activation === "relu") {
        for (let j = 0; j < W; j++) f[out + j] = pre[j] > 0 ? pre[j] : 0;
      } else if (activation === "topk") {
        const order = Array.from(pre.keys()).sort((a, b) => pre[b] - pre[a]).slice(0, k);
        for (const j of order) f[out + j] = pre[j] > 0 ? pre[j] : 0;
      } else { // "threshold": jumprelu, and batchtopk in use
        for (let j = 0; j < W; j++) f[out + j] = pre[j] > threshold[j] ? pre[j] : 0;
      }
    }
    return f;
  }

  /** The features active at each position, [[index, activation], ...] largest first (at most `shown`). */
  function activeFeatures(f, T, W, shown) {
    const rows = [];
    for (let t = 0; t < T; t++) {
      const on = [];
      for (let j = 0; j < W; j++) if (f[t * W + j] > 0) on.push([j, f[t * W + j]]);
      on.sort((a, b) => b[1] - a[1]);
      rows.push(on.slice(0, shown));
    }
    return rows;
  }

  TL.sae = { hookActivation, encode, activeFeatures };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
