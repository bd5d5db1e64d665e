/* transformer-lab's models in plain JavaScript: the forward pass of every architecture and option of
 * `transformer_lab.nn`, in float32 typed arrays, for the live explorer page (and a Web Worker).
 *
 * No DOM and no dependency: `TransformerLabModel` is a plain object of functions, usable in a page, a
 * worker or Node. The weights come from the page's data (written by explorer/live.py): one float32 (or
 * float16) buffer and a manifest [name, offset, shape] per tensor, named as the PyTorch state_dict names
 * them (`blocks.0.attn.qkv_proj.weight`, `decoder.blocks.1.cross_attn.o_proj.bias`, ...). Tied weights
 * share an offset. The structure (stacks, blocks, attention layers in `interventions.attention_layers`
 * order) comes from the model's own interface (`stacks()`, `attention_layers()`), so nothing here asks
 * which of the three models it runs: it runs stacks of blocks.
 *
 * Every activation is a Float32Array [positions x features], row-major; sums are accumulated in float64
 * (JavaScript numbers) and rounded to float32 when stored, so results stay within a few float32 ulps
 * of PyTorch's.
 */
"use strict";
// eslint-disable-next-line no-unused-vars
const TransformerLabModel = (function () {
  const FLOAT32_MIN = -3.4028234663852886e38; // torch.finfo(torch.float32).min: masked attention scores
  const LN_EPS = 1e-5; // nn.LayerNorm's default eps

  // ------------------------------------------------------------------------------------ erf, GELU
  /** erf(x) to ~1e-14 absolute (JavaScript has no Math.erf): the Maclaurin series
   *  erf(x) = 2/sqrt(pi) sum_n (-1)^n x^(2n+1) / (n! (2n+1)) for |x| < 3 (at most ~60 terms; the
   *  largest term is < e^9, so float64 keeps ~12 digits after cancellation), and the continued fraction
   *  erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))) for |x| >= 3, evaluated
   *  from the back (erfc(3) = 2.2e-5, so its relative error hardly matters). */
  function erfExact(x) {
    const a = Math.abs(x);
    let result;
    if (a < 3) {
      const x2 = a * a;
      let term = a;
      let sum = a;
      for (let n = 1; n < 80; n++) {
        term *= -x2 / n;
        const add = term / (2 * n + 1);
        sum += add;
        if (Math.abs(add) < 1e-17 * Math.abs(sum)) break;
      }
      result = (2 / Math.sqrt(Math.PI)) * sum;
    } else if (a < 6.5) {
      let fraction = a; // x + (k/2) / (x + ((k+1)/2) / ...), from k = 60 down to 1
      for (let k = 60; k >= 1; k--) fraction = a + (k / 2) / fraction;
      result = 1 - Math.exp(-a * a) / Math.sqrt(Math.PI) / fraction;
    } else {
      result = 1; // erfc(6.5) < 4e-20
    }
    return x < 0 ? -result : result;
  }

  /** erf from a table: cubic Hermite interpolation between nodes 1/64 apart on [0, 6.5], each node
   *  holding erf and its derivative 2/sqrt(pi) exp(-x^2) (from `erfExact`). The interpolation error is
   *  at most h^4 / 384 * max |erf^(4)| < 7e-10 (h = 1/64), far below the 1e-7 GELU needs, at a tenth
   *  of the series' cost. */
  const ERF_STEP = 1 / 64;
  const ERF_NODES = Math.ceil(6.5 / ERF_STEP) + 2;
  const ERF_VALUE = new Float64Array(ERF_NODES);
  const ERF_SLOPE = new Float64Array(ERF_NODES); // derivative times the step
  for (let i = 0; i < ERF_NODES; i++) {
    const x = i * ERF_STEP;
    ERF_VALUE[i] = erfExact(x);
    ERF_SLOPE[i] = (2 / Math.sqrt(Math.PI)) * Math.exp(-x * x) * ERF_STEP;
  }
  function erf(x) {
    const a = Math.abs(x);
    if (!(a < 6.5)) return x !== x ? NaN : x < 0 ? -1 : 1;
    const u = a / ERF_STEP;
    const i = Math.floor(u);
    const t = u - i;
    const t2 = t * t;
    const t3 = t2 * t;
    const value = (2 * t3 - 3 * t2 + 1) * ERF_VALUE[i] + (t3 - 2 * t2 + t) * ERF_SLOPE[i] +
      (-2 * t3 + 3 * t2) * ERF_VALUE[i + 1] + (t3 - t2) * ERF_SLOPE[i + 1];
    return x < 0 ? -value : value;
  }

  /** GELU, exact form (nn.GELU's default): x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))). */
  const gelu = (x) => 0.5 * x * (1 + erf(x * Math.SQRT1_2));
  const relu = (x) => (x > 0 ? x : 0);
  const ACTIVATIONS = { relu, gelu };

  // ---------------------------------------------------------------------------------- weights
  /** IEEE half -> float32 (the opt-in float16 weights). */
  function halfToFloat(bits) {
    const out = new Float32Array(bits.length);
    for (let i = 0; i < bits.length; i++) {
      const h = bits[i];
      const sign = h & 0x8000 ? -1 : 1;
      const exponent = (h >> 10) & 0x1f;
      const fraction = h & 0x3ff;
      out[i] = exponent === 0 ? sign * 2 ** -14 * (fraction / 1024)
        : exponent === 31 ? (fraction ? NaN : sign * Infinity)
        : sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
    }
    return out;
  }

  /** The tensors of an inflated weight buffer: {name: Float32Array view}, from the manifest's
   *  [name, offset (in values), shape] entries. `dtype`: float32 | float16 (as stored). */
  function tensors(bytes, manifest, dtype) {
    let values;
    if (dtype === "float16") {
      values = halfToFloat(new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.length / 2));
    } else {
      const copy = bytes.byteOffset % 4 === 0 ? bytes : bytes.slice(); // Float32Array needs alignment
      values = new Float32Array(copy.buffer, copy.byteOffset, copy.length / 4);
    }
    const out = {};
    for (const [name, offset, shape] of manifest) {
      const size = shape.reduce((a, b) => a * b, 1);
      if (offset + size > values.length) throw new Error(`weight ${name} lies outside the weight data`);
      out[name] = values.subarray(offset, offset + size);
    }
    return out;
  }

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

  /** LayerNorm over the last dimension: (x - mean) / sqrt(var + eps) * w + b (biased variance). */
  function layerNorm(x, T, D, w, b) {
    const y = new Float32Array(T * D);
    for (let t = 0; t < T; t++) {
      const o = t * D;
      let mean = 0;
      for (let i = 0; i < D; i++) mean += x[o + i];
      mean /= D;
      let variance = 0;
      for (let i = 0; i < D; i++) variance += (x[o + i] - mean) ** 2;
      const inv = 1 / Math.sqrt(variance / D + LN_EPS);
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

  // ------------------------------------------------------------------------------- the cache
  /** One attention layer's keys and values for the positions seen so far ([capacity, D] each). */
  class KV {
    constructor(capacity, D) {
      this.k = new Float32Array(capacity * D);
      this.v = new Float32Array(capacity * D);
      this.length = 0;
      this.D = D;
    }
    append(k, v, T) {
      if ((this.length + T) * this.D > this.k.length) throw new Error("KV cache overflow");
      this.k.set(k.subarray(0, T * this.D), this.length * this.D);
      this.v.set(v.subarray(0, T * this.D), this.length * this.D);
      this.length += T;
    }
    truncate(length) {
      this.length = Math.min(this.length, length);
    }
    copy() {
      const out = new KV(this.k.length / this.D, this.D);
      out.k.set(this.k);
      out.v.set(this.v);
      out.length = this.length;
      return out;
    }
  }

  /** What a stack remembers between calls (Python's `Cache`): each block's self-attention K/V, the
   *  cross-attention's K/V (computed once from the encoder output), which cached positions are real
   *  tokens (padding is hidden), and how many real tokens were read (the next position). */
  class StackCache {
    constructor(blocks, capacity, D, cross) {
      this.blocks = Array.from({ length: blocks }, () => new KV(capacity, D));
      this.memory = cross ? Array.from({ length: blocks }, () => null) : null;
      this.real = [];
      this.count = 0;
    }
    get length() {
      return this.blocks[0].length;
    }
    /** Forget every position from `length` on (a causal model re-reads only what changed). */
    truncate(length) {
      for (const kv of this.blocks) kv.truncate(length);
      this.real.length = Math.min(this.real.length, length);
      this.count = this.real.filter(Boolean).length;
    }
    copy() {
      const out = Object.create(StackCache.prototype);
      out.blocks = this.blocks.map((kv) => kv.copy());
      out.memory = this.memory ? this.memory.slice() : null;
      out.real = this.real.slice();
      out.count = this.count;
      return out;
    }
  }

  // -------------------------------------------------------------------------------- the model
  class Model {
    /** spec: {config, stacks: [{prefix, causal, cross, blocks, input}], layers: [{name, kind, group,
     *  label, queries, keys, stack, block, module}], numInputs, generates, sinusoid (the float32 div_term
     *  of the sinusoidal encoding)}; weights: {name: Float32Array}; means: {layer index: Float32Array
     *  [T_ref, H, d_head]} (mean ablation), optional. */
    constructor(spec, weights, means) {
      this.spec = spec;
      this.config = spec.config;
      this.weights = weights;
      this.means = means || {};
      const c = spec.config;
      this.D = c.model_dim;
      this.H = c.num_heads;
      this.dh = this.D / this.H;
      this.classes = c.output_classes;
      this.act = Object.hasOwn(ACTIVATIONS, c.activation) ? ACTIVATIONS[c.activation] : null;
      if (!this.act) throw new Error(`activation ${c.activation} is not known to the page`);
      this.layerIndex = {}; // "stack.block.module" -> index in attention_layers order
      spec.layers.forEach((layer, i) => (this.layerIndex[`${layer.stack}.${layer.block}.${layer.module}`] = i));
      this.numLayers = spec.layers.length;
      // sinusoidal PE(pos, 2i) = sin(pos * w_i), PE(pos, 2i + 1) = cos(pos * w_i), w_i = 10000^(-2i/d):
      // w_i as PyTorch computed it in float32, the product rounded to float32 as in torch, then sin/cos
      this.peCache = new Map();
    }

    w(name) {
      const t = this.weights[name];
      if (t === undefined) throw new Error(`the page has no weight ${name}`);
      return t;
    }

    has(name) {
      return this.weights[name] !== undefined;
    }

    /** P[position] added to the token embedding: sinusoidal, learned or none. */
    positional(pos, out, o) {
      const c = this.config;
      const D = this.D;
      if (pos >= c.max_len) throw new Error(`position ${pos} is beyond the model's max_len=${c.max_len}`);
      if (c.positional_encoding === "learned") {
        const P = this.w(`${this._prefix}pos_embed.embedding.weight`);
        for (let i = 0; i < D; i++) out[o + i] += P[pos * D + i];
      } else if (c.positional_encoding === "sinusoidal") {
        let row = this.peCache.get(pos);
        if (!row) {
          row = new Float32Array(D);
          const w = this.spec.sinusoid;
          for (let i = 0; i < D; i += 2) {
            const angle = Math.fround(pos * w[i / 2]);
            row[i] = Math.sin(angle);
            if (i + 1 < D) row[i + 1] = Math.cos(angle);
          }
          this.peCache.set(pos, row);
        }
        for (let i = 0; i < D; i++) out[o + i] += row[i];
      }
    }

    /** Multi-head attention of one layer: MultiHead(X) = Concat(head_1..head_H) W^O, head_h =
     *  softmax(Q_h K_h^T / sqrt(d_head) + mask) V_h, Q = X W^Q, K = Y W^K, V = Y W^V (Y = X, or the
     *  encoder's output for cross-attention). Returns the output [T, D]; records the pattern and z. */
    attention(x, T, name, layer, ctx) {
      const { D, H, dh } = this;
      const W = this.w(`${name}.qkv_proj.weight`);
      const b = this.has(`${name}.qkv_proj.bias`) ? this.w(`${name}.qkv_proj.bias`) : null;
      let q, keys, values, Tk, keyVisible;
      const cache = ctx.kv; // KV of this layer (self-attention) or null
      const offset = ctx.offset;
      if (!ctx.cross) {
        const qkv = linear(x, T, D, W, b, 3 * D); // [T, 3D] laid out [q | k | v]
        q = new Float32Array(T * D);
        const k = new Float32Array(T * D);
        const v = new Float32Array(T * D);
        for (let t = 0; t < T; t++) {
          q.set(qkv.subarray(t * 3 * D, t * 3 * D + D), t * D);
          k.set(qkv.subarray(t * 3 * D + D, t * 3 * D + 2 * D), t * D);
          v.set(qkv.subarray(t * 3 * D + 2 * D, t * 3 * D + 3 * D), t * D);
        }
        if (cache) {
          cache.append(k, v, T);
          keys = cache.k;
          values = cache.v;
          Tk = cache.length;
        } else {
          keys = k;
          values = v;
          Tk = T;
        }
        keyVisible = ctx.keyReal; // padding keys are hidden (null: no padding)
      } else {
        q = linear(x, T, D, W, b, D, 0); // rows 0..D-1 of W: W^Q
        let kv = ctx.memoryKV;
        if (!kv) {
          const M = ctx.memory;
          const k = linear(M.x, M.T, D, W, b, D, D); // rows D..2D-1: W^K
          const v = linear(M.x, M.T, D, W, b, D, 2 * D); // rows 2D..3D-1: W^V
          kv = { k, v, T: M.T };
          if (ctx.storeMemoryKV) ctx.storeMemoryKV(kv);
        }
        keys = kv.k;
        values = kv.v;
        Tk = kv.T;
        keyVisible = ctx.memory.real;
      }
      const scale = this.config.scale_attention ? Math.sqrt(dh) : 1;
      const pattern = new Float32Array(H * T * Tk);
      const z = new Float32Array(T * D);
      for (let h = 0; h < H; h++) {
        const hd = h * dh;
        const scores = pattern.subarray(h * T * Tk, (h + 1) * T * Tk);
        for (let i = 0; i < T; i++) {
          const qo = i * D + hd;
          // a causal query at absolute position offset + i sees keys 0 .. offset + i
          const lastKey = ctx.causal ? offset + i : Tk - 1;
          for (let j = 0; j < Tk; j++) {
            let s = FLOAT32_MIN;
            if (j <= lastKey && (!keyVisible || keyVisible[j])) {
              const ko = j * D + hd;
              s = 0;
              for (let d = 0; d < dh; d++) s += q[qo + d] * keys[ko + d];
              s /= scale;
            }
            scores[i * Tk + j] = s;
          }
        }
        softmaxRows(scores, T, Tk);
        // z_h = A_h V_h: the head's output before W^O (hook_z)
        for (let i = 0; i < T; i++) {
          const zo = i * D + hd;
          for (let j = 0; j < Tk; j++) {
            const a = scores[i * Tk + j];
            if (a === 0) continue;
            const vo = j * D + hd;
            for (let d = 0; d < dh; d++) z[zo + d] += a * values[vo + d];
          }
        }
      }
      // interventions: a head removed (its z set to 0, or to its mean over the reference batch), or a
      // head's z pasted from another run (activation patching of hook_z)
      const removed = ctx.ablate && ctx.ablate.get(layer);
      if (removed) {
        const mean = ctx.method === "mean" ? this.meanZ(layer) : null;
        for (const h of removed) {
          for (let i = 0; i < T; i++) {
            const zo = i * D + h * dh;
            for (let d = 0; d < dh; d++) z[zo + d] = mean ? mean(offset + i, h, d) : 0;
          }
        }
      }
      if (ctx.patchZ && ctx.patchZ.layer === layer) {
        const { head: h, z: source } = ctx.patchZ;
        for (let i = 0; i < T; i++) {
          const zo = i * D + h * dh;
          for (let d = 0; d < dh; d++) z[zo + d] = source[(offset + i) * D + h * dh + d];
        }
      }
      if (ctx.record) {
        ctx.record.patterns[layer] = { data: pattern, H, Tq: T, Tk };
        if (ctx.record.z) ctx.record.z[layer] = z;
      }
      const bo = this.has(`${name}.o_proj.bias`) ? this.w(`${name}.o_proj.bias`) : null;
      return linear(z, T, D, this.w(`${name}.o_proj.weight`), bo, D);
    }

    /** z's mean over the reference batch at (position, head, dim); positions past the reference's
     *  length take the mean over all its positions. */
    meanZ(layer) {
      const means = this.means[layer];
      if (!means) throw new Error("this page carries no means for mean ablation; use zero ablation");
      const { H, dh } = this;
      const width = H * dh;
      const rows = means.length / width;
      let overall = null;
      return (pos, h, d) => {
        if (pos < rows) return means[pos * width + h * dh + d];
        if (!overall) {
          overall = new Float32Array(width);
          for (let r = 0; r < rows; r++) for (let i = 0; i < width; i++) overall[i] += means[r * width + i] / rows;
        }
        return overall[h * dh + d];
      };
    }

    /** FFN(x) = W_2 act(W_1 x + b_1) + b_2, each position on its own. */
    mlp(x, T, name) {
      const { D } = this;
      const F = this.config.feedforward_dim;
      const opt = (n) => (this.has(n) ? this.w(n) : null);
      const hidden = linear(x, T, D, this.w(`${name}.fc_in.weight`), opt(`${name}.fc_in.bias`), F);
      const act = this.act;
      for (let i = 0; i < hidden.length; i++) hidden[i] = act(hidden[i]);
      return linear(hidden, T, F, this.w(`${name}.fc_out.weight`), opt(`${name}.fc_out.bias`), D);
    }

    norm(x, T, name) {
      return layerNorm(x, T, this.D, this.w(`${name}.weight`), this.has(`${name}.bias`) ? this.w(`${name}.bias`) : null);
    }

    /** One block. Post-norm: x = LN(x + Attn(x)) ... ; pre-norm: x = x + Attn(LN(x)) ...; a decoder
     *  block has cross-attention between self-attention and the MLP; `mlp=false` blocks have no MLP. */
    block(x, T, s, i, ctx) {
      const stack = this.spec.stacks[s];
      const p = `${stack.prefix}blocks.${i}`;
      const preNorm = this.config.norm_first;
      const hasMlp = this.has(`${p}.mlp.fc_in.weight`);
      const selfLayer = this.layerIndex[`${s}.${i}.attn`];
      const selfCtx = { ...ctx, cross: false, kv: ctx.cache ? ctx.cache.blocks[i] : null };
      const sub = [];
      sub.push((y) => this.attention(y, T, `${p}.attn`, selfLayer, selfCtx));
      if (stack.cross) {
        const crossLayer = this.layerIndex[`${s}.${i}.cross_attn`];
        const memoryKV = ctx.cache && ctx.cache.memory ? ctx.cache.memory[i] : null;
        const crossCtx = {
          ...ctx,
          cross: true,
          causal: false,
          memoryKV,
          storeMemoryKV: ctx.cache && ctx.cache.memory ? (kv) => (ctx.cache.memory[i] = kv) : null,
        };
        sub.push((y) => this.attention(y, T, `${p}.cross_attn`, crossLayer, crossCtx));
      }
      if (hasMlp) sub.push((y) => this.mlp(y, T, `${p}.mlp`));
      sub.forEach((f, k) => {
        const normName = `${p}.norm${k + 1}`;
        x = preNorm ? add(x, f(this.norm(x, T, normName))) : this.norm(add(x, f(x)), T, normName);
      });
      return x;
    }

    /** Token ids -> the stack's normalised residual stream [T, D]:
     *  resid_0 = E[token] + P[position]; resid_l = Block_l(resid_{l-1}); out = LN_final(resid_L).
     *  opts: cache (StackCache), memory ({x, T, real}), ablate (Map layer -> heads), method, record,
     *  patch ({hook, position, vector}: replace resid_pre of block `hook` (hook = L: resid_post of the
     *  last block) at one position), start ({hook, x}: begin at block `hook` with this stream). */
    runStack(s, tokens, opts = {}) {
      const stack = this.spec.stacks[s];
      const c = this.config;
      const { D } = this;
      const T = tokens.length;
      const cache = opts.cache || null;
      const offset = cache ? cache.length : 0;
      if (offset + T > c.max_len) {
        throw new Error(`${offset + T} positions are more than the model's max_len=${c.max_len}; shorten the input`);
      }
      this._prefix = stack.prefix;
      // position = real tokens before this one where the model has padding (padding-aware positions)
      let keyReal = null;
      const positions = new Array(T);
      if (c.pad_id === null || c.pad_id === undefined) {
        for (let t = 0; t < T; t++) positions[t] = offset + t;
      } else {
        const real = tokens.map((tok) => tok !== c.pad_id);
        let count = cache ? cache.count : 0;
        for (let t = 0; t < T; t++) {
          if (real[t]) count++;
          positions[t] = Math.max(count - 1, 0);
        }
        keyReal = cache ? cache.real.concat(real) : real;
        if (cache) {
          cache.real = keyReal;
          cache.count = count;
        }
      }
      const ctx = {
        causal: stack.causal,
        offset,
        keyReal,
        memory: opts.memory || null,
        cache,
        ablate: opts.ablate,
        method: opts.method || "zero",
        record: opts.record,
        patchZ: opts.patchZ,
      };
      const L = stack.blocks;
      let x;
      let first = 0;
      if (opts.start) {
        first = opts.start.hook;
        x = opts.start.x;
      } else {
        const E = this.w(`${stack.prefix}embed.weight`);
        x = new Float32Array(T * D);
        for (let t = 0; t < T; t++) {
          const tok = tokens[t];
          if (!(tok >= 0 && tok < c.vocab_size)) throw new Error(`token id ${tok} is not in the vocabulary`);
          x.set(E.subarray(tok * D, (tok + 1) * D), t * D);
          this.positional(positions[t], x, t * D);
        }
      }
      const resid = opts.record && opts.record.resid ? (opts.record.resid[s] = []) : null;
      for (let i = first; i <= L; i++) {
        if (opts.patch && opts.patch.hook === i) {
          x = x.slice();
          x.set(opts.patch.vector, (opts.patch.position - offset) * D);
        }
        if (resid) resid[i] = x;
        if (i < L) x = this.block(x, T, s, i, ctx);
      }
      const finalNorm = `${stack.prefix}ln_final.norm`;
      return this.has(`${finalNorm}.weight`) ? this.norm(x, T, finalNorm) : x;
    }

    /** The output layer: one Linear, or the tutorial's Linear-LayerNorm-ReLU-Linear. [T, classes]. */
    unembed(x, T) {
      const { D } = this;
      const opt = (n) => (this.has(n) ? this.w(n) : null);
      if (this.has("unembed.weight")) return linear(x, T, D, this.w("unembed.weight"), opt("unembed.bias"), this.classes);
      let h = linear(x, T, D, this.w("unembed.0.weight"), opt("unembed.0.bias"), D);
      h = layerNorm(h, T, D, this.w("unembed.1.weight"), opt("unembed.1.bias"));
      for (let i = 0; i < h.length; i++) h[i] = relu(h[i]);
      return linear(h, T, D, this.w("unembed.4.weight"), opt("unembed.4.bias"), this.classes);
    }

    /** The memory a cross-attention stack reads: the first stack's output and which positions are real. */
    memoryOf(x, tokens) {
      const pad = this.config.pad_id;
      return { x, T: tokens.length, real: pad === null || pad === undefined ? null : tokens.map((t) => t !== pad) };
    }

    /** A full forward pass: inputs = one array of token ids per model input (tokens; or source and
     *  target). opts: ablate ([[layer, head], ...]), ablation ("zero" | "mean"), record ({patterns,
     *  resid, z}: what to keep), patch / patchZ / start (activation patching), stackCaches.
     *  Returns {logits: Float32Array [T, C], T, C, record}. */
    run(inputs, opts = {}) {
      const stacks = this.spec.stacks;
      if (inputs.length !== stacks.length) throw new Error(`the model reads ${stacks.length} input(s), got ${inputs.length}`);
      const ablate = toAblationMap(opts.ablate, this.numLayers, this.H);
      const record = opts.record || { patterns: [] };
      if (!record.patterns) record.patterns = [];
      let memory = opts.memory || null;
      let out = null;
      for (let s = 0; s < stacks.length; s++) {
        if (opts.skipStacks && opts.skipStacks.includes(s)) continue;
        const tokens = inputs[stacks[s].input];
        const stackOpts = {
          cache: opts.stackCaches ? opts.stackCaches[s] : null,
          memory: stacks[s].cross ? memory : null,
          ablate,
          method: opts.ablation,
          record,
          patch: opts.patch && opts.patch.stack === s ? opts.patch : null,
          start: opts.start && opts.start.stack === s ? opts.start : null,
          patchZ: opts.patchZ,
        };
        out = this.runStack(s, tokens, stackOpts);
        if (s === 0 && stacks.length > 1) memory = this.memoryOf(out, tokens);
      }
      const T = inputs[stacks[stacks.length - 1].input].length;
      return { logits: this.unembed(out, T), T, C: this.classes, record, memory };
    }

    /** The API's form: {logits: number[][], patterns: number[][][][]} (patterns per attention layer in
     *  `attention_layers` order, per head, query x key). */
    forward(input, opts = {}) {
      const inputs = this.inputsOf(input);
      const result = this.run(inputs, { ablate: opts.ablate, ablation: opts.ablation });
      return { logits: rows(result.logits, result.T, result.C), patterns: result.record.patterns.map(patternArrays) };
    }

    /** The model inputs from the API's input: a list of token ids, or {source, target}. */
    inputsOf(input) {
      if (Array.isArray(input) && (input.length === 0 || typeof input[0] === "number")) return [input];
      if (Array.isArray(input)) return input;
      if (input && input.source) return [input.source, input.target || []];
      throw new Error("input must be a list of token ids, or {source: [...], target: [...]}");
    }

    // ------------------------------------------------------------------------------ generation
    /** DecoderLM.generate: extend `tokens` by up to maxNew tokens with a KV cache (temperature 0:
     *  greedy; else softmax(logits / temperature) within top_k / top_p). Without padding the context is
     *  cropped to the last max_len tokens, and a full cache re-encodes the last half window from
     *  position 0, as in Python. onToken(token) after each. Returns every token, prompt included. */
    generate(tokens, maxNew, opts = {}) {
      const c = this.config;
      const block = c.max_len;
      const pad = c.pad_id ?? null;
      const eos = c.eos_id ?? null;
      if (pad !== null && tokens.length > block) throw new Error(`the prompt has ${tokens.length} positions, more than max_len=${block}`);
      const out = tokens.slice();
      let cache = null;
      const ablate = toAblationMap(opts.ablate, this.numLayers, this.H);
      const run = (ids) => {
        const x = this.runStack(0, ids, { cache, ablate, method: opts.ablation });
        return this.unembed(x.subarray((ids.length - 1) * this.D), 1);
      };
      for (let n = 0; n < maxNew; n++) {
        const length = out.length;
        if (pad !== null && length > block) break;
        let logits;
        if (opts.useCache === false) {
          cache = null;
          logits = run(out.slice(Math.max(0, length - block), length));
        } else if (cache === null || cache.length === block) {
          const window = cache === null ? block : Math.max(1, Math.floor(block / 2));
          cache = new StackCache(this.spec.stacks[0].blocks, block, this.D, false);
          logits = run(out.slice(Math.max(0, length - window), length));
        } else {
          logits = run(out.slice(length - 1, length));
        }
        const next = sampleNext(logits, opts.temperature ?? 0, opts.topK ?? null, opts.topP ?? null, opts.random || Math.random);
        out.push(next);
        if (opts.onToken) opts.onToken(next);
        if (eos !== null && next === eos) break;
      }
      return out;
    }

    /** EncoderDecoder greedy decoding (beam size 1): the tokens after <bos>, up to and including <eos>
     *  (at most maxNew, default max_len), with the decoder's KV cache and the cross-attention's keys and
     *  values computed once. */
    generateSeq2seq(source, maxNew, opts = {}) {
      const c = this.config;
      const steps = maxNew ?? c.max_len;
      const ablate = toAblationMap(opts.ablate, this.numLayers, this.H);
      const encoded = this.runStack(0, source, { ablate, method: opts.ablation });
      const memory = this.memoryOf(encoded, source);
      const cache = new StackCache(this.spec.stacks[1].blocks, c.max_len, this.D, true);
      const tokens = [c.bos_id];
      for (let n = 0; n < steps; n++) {
        const x = this.runStack(1, [tokens[tokens.length - 1]], { cache, memory, ablate, method: opts.ablation });
        const next = argmax(this.unembed(x, 1), 0, this.classes);
        tokens.push(next);
        if (next === c.eos_id) break;
      }
      return tokens.slice(1);
    }

    /** The greedy output for a prompt, as `TokenModel.answer` gives it: an encoder's class per
     *  position; a decoder's new tokens (up to <eos>, or the context's end); an encoder-decoder's
     *  output after <bos>. */
    answer(prompt, opts = {}) {
      if (!this.spec.generates) {
        const result = this.run([prompt], opts);
        return Array.from({ length: result.T }, (_, t) => argmax(result.logits, t * result.C, result.C));
      }
      if (this.spec.numInputs === 2) return this.generateSeq2seq(prompt, undefined, opts);
      const maxNew = opts.maxNew ?? this.config.max_len - prompt.length;
      return this.generate(prompt, maxNew, { ...opts, temperature: 0 }).slice(prompt.length);
    }

    /** The inputs under which the model reads the prompt and writes `output` (teacher forcing), as
     *  `forced_inputs`: the prompt and the output but its last token; or source and <bos> output[:-1]. */
    forcedInputs(prompt, output) {
      if (!this.spec.generates) return [prompt];
      if (this.spec.numInputs === 2) return [prompt, [this.config.bos_id, ...output.slice(0, -1)]];
      return [prompt.concat(output.slice(0, -1))];
    }
  }

  // ------------------------------------------------------------------------------- helpers
  function toAblationMap(pairs, numLayers, H) {
    if (!pairs || pairs.length === 0) return null;
    const map = new Map();
    for (const [layer, head] of pairs) {
      if (!(layer >= 0 && layer < numLayers)) throw new Error(`layer ${layer} is out of range: the model has attention layers 0 to ${numLayers - 1}`);
      if (!(head >= 0 && head < H)) throw new Error(`head ${head} is out of range: each layer has heads 0 to ${H - 1}`);
      if (!map.has(layer)) map.set(layer, []);
      if (!map.get(layer).includes(head)) map.get(layer).push(head);
    }
    return map;
  }

  function argmax(values, offset, n) {
    let best = 0;
    for (let i = 1; i < n; i++) if (values[offset + i] > values[offset + best]) best = i;
    return best;
  }

  function rows(flat, T, C) {
    return Array.from({ length: T }, (_, t) => Array.from(flat.subarray(t * C, (t + 1) * C)));
  }

  function patternArrays(p) {
    return Array.from({ length: p.H }, (_, h) =>
      Array.from({ length: p.Tq }, (_, i) => Array.from(p.data.subarray((h * p.Tq + i) * p.Tk, (h * p.Tq + i + 1) * p.Tk))));
  }

  /** log softmax of one row. */
  function logSoftmax(values, offset, n) {
    let max = -Infinity;
    for (let i = 0; i < n; i++) max = Math.max(max, values[offset + i]);
    let sum = 0;
    for (let i = 0; i < n; i++) sum += Math.exp(values[offset + i] - max);
    const lse = max + Math.log(sum);
    const out = new Float64Array(n);
    for (let i = 0; i < n; i++) out[i] = values[offset + i] - lse;
    return out;
  }

  /** The next token from one row of logits, as nn.sampling.sample_next_token: argmax at temperature
   *  0; else softmax(logits / T), keeping the top_k most likely and/or the smallest set whose mass
   *  reaches top_p. `random()` in [0, 1). */
  function sampleNext(logits, temperature, topK, topP, random) {
    const n = logits.length;
    if (temperature === 0) return argmax(logits, 0, n);
    const scaled = Array.from(logits, (v) => v / temperature);
    const order = scaled.map((_, i) => i).sort((a, b) => scaled[b] - scaled[a]);
    const keep = new Array(n).fill(true);
    if (topK !== null) {
      const kth = scaled[order[Math.min(topK, n) - 1]];
      for (let i = 0; i < n; i++) if (scaled[i] < kth) keep[i] = false;
    }
    const max = scaled[order[0]];
    let weights = scaled.map((v, i) => (keep[i] ? Math.exp(v - max) : 0));
    if (topP !== null && topP < 1) {
      const total = weights.reduce((a, b) => a + b, 0);
      let before = 0;
      for (const i of order) {
        const p = weights[i] / total;
        if (before >= topP) weights[i] = 0;
        before += p;
      }
    }
    const total = weights.reduce((a, b) => a + b, 0);
    let r = random() * total;
    for (const i of order) {
      r -= weights[i];
      if (r < 0 && weights[i] > 0) return i;
    }
    return order.find((i) => weights[i] > 0);
  }

  /** A small seeded generator (mulberry32), for reproducible sampling. */
  function seeded(seed) {
    let a = seed >>> 0;
    return () => {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

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
    const caches = stacks.map((st) => new StackCache(st.blocks, model.config.max_len, model.D, st.cross));
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

  // ------------------------------------------------------------------------- argument checks
  /** The checks of an API's arguments (the page's window.transformerLab), said once: each returns the
   *  value to use (lists copied, so a caller cannot change them after the check) or throws an Error
   *  "fn: name=value <problem>; use <what is allowed>". `model` gives the ranges: vocabulary, max_len,
   *  attention layers and heads, the means it carries. Own properties only are read. */
  const checks = (() => {
    /** A short, safe rendering of any value for a message (a hostile value cannot make it throw). */
    function shown(value, depth = 0) {
      try {
        if (typeof value === "string") return JSON.stringify(value.length > 40 ? value.slice(0, 37) + "..." : value);
        if (typeof value === "number") return Object.is(value, -0) ? "-0" : String(value);
        if (typeof value === "bigint") return `${value}n`;
        if (typeof value === "symbol") return value.toString();
        if (typeof value === "function") return "a function";
        if (value === undefined || value === null || typeof value === "boolean") return String(value);
        if (depth > 1) return Array.isArray(value) ? "[...]" : "{...}";
        if (Array.isArray(value)) {
          const items = [];
          for (let i = 0; i < Math.min(value.length, 6); i++) items.push(shown(value[i], depth + 1));
          return `[${items.join(",")}${value.length > 6 ? `,... (${value.length} items)` : ""}]`;
        }
        const keys = Object.keys(value);
        const items = keys.slice(0, 4).map((key) => `${key.slice(0, 20)}: ${shown(value[key], depth + 1)}`);
        return `{${items.join(", ")}${keys.length > 4 ? ", ..." : ""}}`;
      } catch (error) {
        return "(a value that cannot be shown)";
      }
    }

    /** Throw "fn: what problem; use allowed" (`what`: "name=value", or a name alone). */
    function fail(fn, what, problem, allowed) {
      throw new Error(`${fn}: ${what} ${problem}; use ${allowed}`);
    }
    const bad = (fn, name, value, problem, allowed) => fail(fn, `${name}=${shown(value)}`, problem, allowed);
    const own = (object, key) => (Object.hasOwn(object, key) ? object[key] : undefined);
    const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);
    /** A dense copy of an array (a hole becomes undefined, so that every entry is checked). */
    const copy = (array) => Array.from({ length: array.length }, (_, i) => array[i]);

    /** An integer from low to high (high may be Infinity); `why` explains the bound. */
    function integer(fn, name, value, low, high, why = "") {
      const allowed = low === high ? `${low}` : high === Infinity ? `an integer from ${low} up` : `an integer from ${low} to ${high}`;
      if (!Number.isInteger(value)) bad(fn, name, value, "is not an integer", allowed);
      if (value < low || value > high) bad(fn, name, value, `is out of range${why}`, allowed);
      return value;
    }

    /** A number that passes `ok` (finite numbers only); `allowed` says which. */
    function number(fn, name, value, ok, allowed) {
      if (typeof value !== "number" || !Number.isFinite(value) || !ok(value)) bad(fn, name, value, "is not allowed", allowed);
      return value;
    }

    /** An options object: nothing (undefined or null), or a plain object whose keys are among `keys`.
     *  Returns an object with exactly `keys` as own properties (undefined where not given). */
    function fields(fn, name, value, keys) {
      const out = {};
      for (const key of keys) out[key] = undefined;
      if (value === undefined || value === null) return out;
      if (!isObject(value)) bad(fn, name, value, "is not an object", `{${keys.join(", ")}} or nothing`);
      for (const key of Object.keys(value)) {
        if (!keys.includes(key)) fail(fn, `${name}.${shown(key).slice(1, -1)}`, "is not known", keys.join(", "));
        out[key] = value[key];
      }
      return out;
    }

    /** A list of token ids: a non-empty array of at most max_len integers in [0, vocab_size). */
    function tokens(fn, name, value, model) {
      const V = model.config.vocab_size;
      const L = model.config.max_len;
      const allowed = `an array of 1 to ${L} integers from 0 to ${V - 1}`;
      if (!Array.isArray(value)) bad(fn, name, value, "is not a list of token ids", allowed);
      if (value.length === 0) fail(fn, name, "is empty", allowed);
      if (value.length > L) fail(fn, name, `has ${value.length} tokens, more than the model's max_len=${L}`, `at most ${L}`);
      const ids = copy(value);
      ids.forEach((id, i) => {
        if (!(Number.isInteger(id) && id >= 0 && id < V)) bad(fn, `${name}[${i}]`, id, "is not a token id", `integers from 0 to ${V - 1}`);
      });
      return ids;
    }

    /** The model's inputs, one token list per input: a list of token ids (or [ids]) for a model of one
     *  input; {source, target} (or [source, target]) for an encoder-decoder. */
    function inputs(fn, name, value, model) {
      if (model.spec.stacks.length === 1) {
        if (Array.isArray(value) && value.length === 1 && Array.isArray(value[0])) return [tokens(fn, `${name}[0]`, value[0], model)];
        return [tokens(fn, name, value, model)];
      }
      if (Array.isArray(value) && value.length === 2 && value.every(Array.isArray)) {
        return [tokens(fn, `${name}[0]`, value[0], model), tokens(fn, `${name}[1]`, value[1], model)];
      }
      const allowed = "{source: [token ids], target: [token ids]} (an encoder-decoder reads a source and a target)";
      if (!isObject(value)) bad(fn, name, value, "is not {source, target}", allowed);
      const parts = fields(fn, name, value, ["source", "target"]);
      return [tokens(fn, `${name}.source`, parts.source, model), tokens(fn, `${name}.target`, parts.target, model)];
    }

    /** Heads to remove: a list of [layer, head] integer pairs (layers in attention_layers order), at most
     *  one per head of the model; nothing (undefined or null) is none unless `required`. */
    function heads(fn, name, value, model, required = false) {
      const L = model.numLayers;
      const H = model.H;
      const allowed = `[layer, head] pairs with layer 0 to ${L - 1} and head 0 to ${H - 1}`;
      if ((value === undefined || value === null) && !required) return [];
      if (!Array.isArray(value)) bad(fn, name, value, "is not a list of [layer, head] pairs", `a list of ${allowed}`);
      if (value.length > L * H) fail(fn, name, `has ${value.length} pairs, more than the model's ${L * H} heads`, `at most ${L * H} ${allowed}`);
      return copy(value).map((pair, i) => {
        const ok = Array.isArray(pair) && pair.length === 2 && Number.isInteger(pair[0]) && Number.isInteger(pair[1]);
        if (!ok) bad(fn, `${name}[${i}]`, pair, "is not a [layer, head] pair of integers", allowed);
        if (pair[0] < 0 || pair[0] >= L || pair[1] < 0 || pair[1] >= H) bad(fn, `${name}[${i}]`, pair, "is out of range", allowed);
        return [pair[0], pair[1]];
      });
    }

    /** An ablation method: "zero" (also for nothing), or "mean" where the model carries its means. */
    function method(fn, name, value, model) {
      const means = Object.keys(model.means).length > 0;
      if (value === undefined || value === null || value === "zero") return "zero";
      if (value === "mean" && means) return "mean";
      if (value === "mean") bad(fn, name, value, "needs the heads' means, which this page does not carry", '"zero"');
      bad(fn, name, value, "is not an ablation method", means ? '"zero" or "mean"' : '"zero" (this page carries no means)');
    }

    /** A string of at most `limit` characters. */
    function text(fn, name, value, limit) {
      if (typeof value !== "string") bad(fn, name, value, "is not a string", `a string of at most ${limit} characters`);
      if (value.length > limit) fail(fn, name, `has ${value.length} characters, more than ${limit}`, `at most ${limit}`);
      return value;
    }

    /** One boolean per position: an array of exactly `count` true/false. */
    function flags(fn, name, value, count) {
      const allowed = `an array of ${count} booleans (one per output position)`;
      if (!Array.isArray(value)) bad(fn, name, value, "is not a list of booleans", allowed);
      if (value.length !== count) fail(fn, name, `has ${value.length} entries`, allowed);
      const out = copy(value);
      out.forEach((flag, i) => {
        if (typeof flag !== "boolean") bad(fn, `${name}[${i}]`, flag, "is not a boolean", "true or false");
      });
      return out;
    }

    /** undefined, or a value of type `type` ("function", "boolean"). */
    function optional(fn, name, value, type) {
      if (value !== undefined && typeof value !== type) bad(fn, name, value, `is not a ${type}`, `a ${type} or nothing`);
      return value;
    }

    return { shown, fail, bad, own, isObject, integer, number, fields, tokens, inputs, heads, method, text, flags, optional };
  })();

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

  // ------------------------------------------------------------------------------ the page's runs
  /** Runs the model for the page's views, remembering the last run: a causal single-stack model (a
   *  decoder-only model) recomputes only from the first position that changed, reading the earlier
   *  positions' keys and values from its KV cache (their logits and attention rows cannot change).
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
      if (stacks.length !== 1 || !stacks[0].causal) {
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
      const cache = p > 0 ? last.cache : new StackCache(stacks[0].blocks, m.config.max_len, m.D, false);
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
        const prompt = model.spec.numInputs === 2 ? tokens : tokens.concat([model.config.sep_id]);
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

  return {
    Model,
    Runner,
    viewRun,
    serveWorker,
    StackCache,
    erf,
    erfExact,
    gelu,
    tensors,
    halfToFloat,
    linear,
    layerNorm,
    argmax,
    logSoftmax,
    sampleNext,
    seeded,
    ablationTable,
    patching,
    rollout,
    encoderDecoderRollout,
    headMean,
    checks,
  };
})();
if (typeof module !== "undefined") module.exports = TransformerLabModel;
// started as a Web Worker (from this script's text): serve the page's runs
if (typeof WorkerGlobalScope !== "undefined" && typeof self !== "undefined" && self instanceof WorkerGlobalScope) {
  TransformerLabModel.serveWorker(self);
}
