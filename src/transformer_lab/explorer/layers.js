/* layers.js: the building blocks of model.js's forward pass, each a plain function on Float32Arrays
 * [positions x features] (row-major): the Linear layer, LayerNorm and RMSNorm, rotary positions, the
 * residual sum, the row softmax, the activations (and the gated MLPs' activation of their gate). Sums
 * are accumulated in float64 and rounded to float32 when stored, as in model.js.
 */
(function (TL) {
  "use strict";
  const LN_EPS = 1e-5; // nn.LayerNorm's default eps (layout.LAYER_NORM_EPS)
  const { gelu } = TL.erf; // exact GELU through a tabulated erf (erf.js)
  const relu = (x) => (x > 0 ? x : 0);
  // GPT-2's gelu_new, GELU's tanh approximation: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
  const geluNew = (x) => 0.5 * x * (1 + Math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  const silu = (x) => x / (1 + Math.exp(-x));
  const ACTIVATIONS = { relu, gelu, gelu_new: geluNew };
  const GATES = { swiglu: silu, geglu: gelu }; // a gated MLP's activation of its gate

  // ------------------------------------------------------------------------- the building blocks
  /** y = x W^T + b (nn.Linear): x [T, nIn], W [nOut, nIn] starting at row `row0` of `W`, b [nOut]
   *  (or null; its entries from row0 on). Two positions x four outputs per inner loop, so each value
   *  loaded from x and W is used several times (about 2.5x faster in V8 than one dot product at a
   *  time); sums in float64. */
  function linear(x, T, nIn, W, b, nOut, row0 = 0) {
    const y = new Float32Array(T * nOut);
    const bias = (o) => (b ? b[row0 + o] : 0);
    let t = 0;
    for (; t + 1 < T; t += 2) {
      const x0 = t * nIn;
      const x1 = x0 + nIn;
      const y0 = t * nOut;
      const y1 = y0 + nOut;
      let o = 0;
      for (; o + 3 < nOut; o += 4) {
        const w0 = (row0 + o) * nIn;
        const w1 = w0 + nIn;
        const w2 = w1 + nIn;
        const w3 = w2 + nIn;
        let a0 = 0, a1 = 0, a2 = 0, a3 = 0, c0 = 0, c1 = 0, c2 = 0, c3 = 0;
        for (let i = 0; i < nIn; i++) {
          const u = x[x0 + i];
          const v = x[x1 + i];
          const p = W[w0 + i];
          const q = W[w1 + i];
          const r = W[w2 + i];
          const s = W[w3 + i];
          a0 += u * p; a1 += u * q; a2 += u * r; a3 += u * s;
          c0 += v * p; c1 += v * q; c2 += v * r; c3 += v * s;
        }
        y[y0 + o] = a0 + bias(o); y[y0 + o + 1] = a1 + bias(o + 1); y[y0 + o + 2] = a2 + bias(o + 2); y[y0 + o + 3] = a3 + bias(o + 3);
        y[y1 + o] = c0 + bias(o); y[y1 + o + 1] = c1 + bias(o + 1); y[y1 + o + 2] = c2 + bias(o + 2); y[y1 + o + 3] = c3 + bias(o + 3);
      }
      for (; o < nOut; o++) {
        const w = (row0 + o) * nIn;
        let a = 0, c = 0;
        for (let i = 0; i < nIn; i++) {
          a += x[x0 + i] * W[w + i];
          c += x[x1 + i] * W[w + i];
        }
        y[y0 + o] = a + bias(o);
        y[y1 + o] = c + bias(o);
      }
    }
    for (; t < T; t++) {
      const x0 = t * nIn;
      for (let o = 0; o < nOut; o++) {
        const w = (row0 + o) * nIn;
        let a = 0;
        for (let i = 0; i < nIn; i++) a += x[x0 + i] * W[w + i];
        y[t * nOut + o] = a + bias(o);
      }
    }
    return y;
  }

  /** RMSNorm over the last dimension: x / sqrt(mean(x^2) + eps) * w (no centring, no bias). */
  function rmsNorm(x, T, D, w, eps) {
    const y = new Float32Array(T * D);
    for (let t = 0; t < T; t++) {
      const o = t * D;
      let square = 0;
      for (let i = 0; i < D; i++) square += x[o + i] * x[o + i];
      const inv = Math.fround(1 / Math.sqrt(Math.fround(square / D) + eps));
      for (let i = 0; i < D; i++) y[o + i] = w[i] * Math.fround(x[o + i] * inv);
    }
    return y;
  }

  /** Rotary positions on rows [T, n x dh] (n heads; query or key rows at `positions`), in place: the
   *  first rotary_dim dimensions of each head in two halves, pair (i, i + half) turned by the angle
   *  pos x invFreq[i] (float32 as in PyTorch), the rest unchanged. */
  function rotate(rows, T, n, dh, positions, invFreq) {
    const half = invFreq.length;
    const width = n * dh;
    for (let t = 0; t < T; t++) {
      for (let i = 0; i < half; i++) {
        const angle = Math.fround(positions[t] * invFreq[i]);
        const c = Math.fround(Math.cos(angle));
        const s = Math.fround(Math.sin(angle));
        for (let h = 0; h < n; h++) {
          const o = t * width + h * dh;
          const a = rows[o + i];
          const b = rows[o + i + half];
          rows[o + i] = a * c - b * s;
          rows[o + i + half] = b * c + a * s;
        }
      }
    }
  }

  /** LayerNorm over the last dimension: (x - mean) / sqrt(var + eps) * w + b (biased variance). */
  function layerNorm(x, T, D, w, b, eps = LN_EPS) {
    const y = new Float32Array(T * D);
    for (let t = 0; t < T; t++) {
      const o = t * D;
      let mean = 0;
      for (let i = 0; i < D; i++) mean += x[o + i];
      mean /= D;
      let variance = 0;
      for (let i = 0; i < D; i++) variance += (x[o + i] - mean) ** 2;
      const inv = 1 / Math.sqrt(variance / D + eps);
      for (let i = 0; i < D; i++) y[o + i] = (x[o + i] - mean) * inv * w[i] + (b ? b[i] : 0);
    }
    return y;
  }

  function add(a, b) {
    const y = new Float32Array(a.length);
    for (let i = 0; i < a.length; i++) y[i] = a[i] + b[i];
    return y;
  }

  /** softmax over each row of scores [rows, n], in place. A row whose every key is masked (all at
   *  float32's min, as masked_fill leaves it) becomes uniform, as torch.softmax makes it. */
  function softmaxRows(scores, rows, n) {
    for (let r = 0; r < rows; r++) {
      const o = r * n;
      let max = -Infinity;
      for (let j = 0; j < n; j++) if (scores[o + j] > max) max = scores[o + j];
      let sum = 0;
      for (let j = 0; j < n; j++) {
        const e = Math.exp(scores[o + j] - max);
        scores[o + j] = e;
        sum += e;
      }
      for (let j = 0; j < n; j++) scores[o + j] /= sum;
    }
  }

  TL.layers = { linear, layerNorm, rmsNorm, rotate, add, softmaxRows, ACTIVATIONS, GATES, LN_EPS };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
