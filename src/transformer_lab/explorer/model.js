/* model.js: transformer-lab's models in plain JavaScript, the forward pass alone: token and positional
 * embeddings (or rotary positions), multi-head attention with its masks (grouped-query, local windows),
 * pre- and post-norm and parallel blocks (with cross-attention), the MLP (plain or gated), the norms
 * (LayerNorm or RMSNorm), the output layer, and generation with a KV cache; its building blocks (the
 * Linear layer, the norms, rotary positions, softmax) are layers.js's. Float32 typed arrays; no DOM and no
 * dependency, so it runs in a page, in the page's Web Worker and in Node. analyses.js (ablation table,
 * patching, rollout), checks.js (the API's argument checks) and runner.js (the views' runs, the worker)
 * sit beside it, each adding its part to the one namespace `TransformerLab` (see page.py for the order).
 *
 * The weights come from the page's data (explorer/live.py): one float32 (or float16) buffer and a
 * manifest [name, offset, shape] per tensor; tied weights share an offset. What each tensor is comes from
 * the layout Python ships with the structure (`spec.layout`, from explorer/layout.py: name, role, stack,
 * block, shape): the forward pass asks for "attn.qkv.weight of stack 0, block 1", never for a name or an
 * index of its own. The structure (stacks, blocks, attention layers in `interventions.attention_layers`
 * order) comes from the model's own interface, so nothing here asks which of the three models it runs.
 *
 * Every activation is a Float32Array [positions x features], row-major; sums are accumulated in float64
 * (JavaScript numbers) and rounded to float32 when stored, so results stay within a few float32 ulps
 * of PyTorch's.
 */
(function (TL) {
  "use strict";
  const FLOAT32_MIN = -3.4028234663852886e38; // torch.finfo(torch.float32).min: masked attention scores
  // The settings this forward pass implements: the mirror of explorer/layout.py's CAPABILITIES (a test
  // holds them equal; Python refuses any other value before a page is made).
  const CAPABILITIES = {
    arch: ["encoder", "decoder", "encoder_decoder"],
    positional_encoding: ["sinusoidal", "learned", "none", "rotary"],
    activation: ["relu", "gelu", "gelu_new", "swiglu", "geglu"],
    norm: ["layer", "rms"],
    parallel_residual: [false, true],
    norm_first: [false, true],
    bias: [false, true],
    output_mlp: [false, true],
    tie_embeddings: [false, true],
    scale_attention: [false, true],
    mlp: [false, true],
  };
  // the building blocks (layers.js); LN_EPS: nn.LayerNorm's default, the output MLP's (the blocks': norm_eps)
  const { linear, layerNorm, rmsNorm, rotate, add, softmaxRows, ACTIVATIONS, GATES, LN_EPS } = TL.layers;

  // ------------------------------------------------------------------------------- the cache
  /** One attention layer's keys and values for the positions seen so far ([capacity, width] each: width
   *  = key-value heads x d_head). */
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
  /** The key of a weight in the layout: its role in a stack's block (null: the stack's own, or the
   *  model's output layer). */
  const partKey = (stack, block, role) => `${stack ?? "-"}/${block ?? "-"}/${role}`;

  class Model {
    /** spec: {config, stacks: [{prefix, causal, cross, blocks, input}], layers: [{name, kind, group,
     *  label, queries, keys, stack, block, module}], numInputs, generates, decoderOnly, languageModel,
     *  readsSource, crossAttention (the model's predicates, said once in Python), sinusoid (the float32
     *  div_term of the sinusoidal encoding), layout ({columns, rows}: what each weight is)}; weights:
     *  {name: Float32Array}; means: {layer index: Float32Array [T_ref, H, d_head]} (mean ablation). */
    constructor(spec, weights, means) {
      this.spec = spec;
      this.config = spec.config;
      this.weights = weights;
      this.means = means || {};
      const c = spec.config;
      for (const [key, values] of Object.entries(CAPABILITIES)) {
        if (!values.includes(c[key])) throw new Error(`${key}=${JSON.stringify(c[key])} is not one the page runs (${values.join(", ")})`);
      }
      this.D = c.model_dim;
      this.H = c.num_heads;
      this.dh = this.D / this.H;
      this.KV = c.num_kv_heads || c.num_heads; // key-value heads (grouped-query attention)
      this.kvWidth = this.KV * this.dh; // a key's (and a value's) width: what the KV cache holds per position
      this.invFreq = spec.rotary || null; // rotary positions: theta_i in float32, as PyTorch has them
      this.classes = c.output_classes;
      this.act = ACTIVATIONS[c.activation] || null;
      this.gate = GATES[c.activation] || null;
      // every weight by its role (explorer/layout.py says which tensor is which)
      this.parts = new Map();
      const column = Object.fromEntries(spec.layout.columns.map((name, i) => [name, i]));
      for (const row of spec.layout.rows) {
        const name = row[column.name];
        if (weights[name] === undefined) throw new Error(`the page has no weight ${name}`);
        this.parts.set(partKey(row[column.stack], row[column.block], row[column.role]), weights[name]);
      }
      this.layerIndex = {}; // "stack.block.module" -> index in attention_layers order
      spec.layers.forEach((layer, i) => (this.layerIndex[`${layer.stack}.${layer.block}.${layer.module}`] = i));
      this.numLayers = spec.layers.length;
      // sinusoidal PE(pos, 2i) = sin(pos * w_i), PE(pos, 2i + 1) = cos(pos * w_i), w_i = 10000^(-2i/d):
      // w_i as PyTorch computed it in float32, the product rounded to float32 as in torch, then sin/cos
      this.peCache = new Map();
    }

    /** The weight of `role` in stack `stack`, block `block` (null: none there, as a bias-free model's
     *  biases or a post-norm stack's final norm). */
    part(stack, block, role) {
      return this.parts.get(partKey(stack, block, role)) || null;
    }

    /** The same, where the model must have it. */
    need(stack, block, role) {
      const t = this.part(stack, block, role);
      if (!t) throw new Error(`the page has no weight ${role} (stack ${stack}, block ${block})`);
      return t;
    }

    /** P[position] added to the token embedding of stack `s`: sinusoidal, learned or none. */
    positional(s, pos, out, o) {
      const c = this.config;
      const D = this.D;
      if (pos >= c.max_len) throw new Error(`position ${pos} is beyond the model's max_len=${c.max_len}`);
      if (c.positional_encoding === "learned") {
        const P = this.need(s, null, "pos_embed");
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

    /** Multi-head attention of one layer (module `module`, "attn" or "cross_attn", of block i of stack
     *  s): MultiHead(X) = Concat(head_1..head_H) W^O, head_h = softmax(Q_h K_h^T / sqrt(d_head) + mask)
     *  V_h, Q = X W^Q, K = Y W^K, V = Y W^V (Y = X, or the encoder's output for cross-attention).
     *  Returns the output [T, D]; records the pattern and z. */
    attention(x, T, where, layer, ctx) {
      const { D, H, dh, KV, kvWidth } = this;
      const group = H / KV; // query heads per key-value head: head h reads key-value head floor(h / group)
      const [stack, block, module] = where; // the weights: `${module}.qkv.weight` of that block, ...
      const W = this.need(stack, block, `${module}.qkv.weight`);
      const b = this.part(stack, block, `${module}.qkv.bias`);
      const Wo = this.need(stack, block, `${module}.out.weight`);
      const bo = this.part(stack, block, `${module}.out.bias`);
      let q, keys, values, Tk, keyVisible;
      const cache = ctx.kv; // KV of this layer (self-attention) or null
      const offset = ctx.offset;
      if (!ctx.cross) {
        const width = D + 2 * kvWidth;
        const qkv = linear(x, T, D, W, b, width); // [T, D + 2 KV dh] laid out [q | k | v]
        q = new Float32Array(T * D);
        const k = new Float32Array(T * kvWidth);
        const v = new Float32Array(T * kvWidth);
        for (let t = 0; t < T; t++) {
          q.set(qkv.subarray(t * width, t * width + D), t * D);
          k.set(qkv.subarray(t * width + D, t * width + D + kvWidth), t * kvWidth);
          v.set(qkv.subarray(t * width + D + kvWidth, (t + 1) * width), t * kvWidth);
        }
        if (this.invFreq) {
          rotate(q, T, H, dh, ctx.positions, this.invFreq);
          rotate(k, T, KV, dh, ctx.positions, this.invFreq);
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
          const k = linear(M.x, M.T, D, W, b, kvWidth, D); // the next KV dh rows: W^K
          const v = linear(M.x, M.T, D, W, b, kvWidth, D + kvWidth); // then W^V
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
      const window = ctx.cross ? null : ctx.window; // local attention: keys fewer than `window` away
      for (let h = 0; h < H; h++) {
        const hd = h * dh;
        const kd = Math.floor(h / group) * dh; // this head's key-value head
        const scores = pattern.subarray(h * T * Tk, (h + 1) * T * Tk);
        for (let i = 0; i < T; i++) {
          const qo = i * D + hd;
          // a causal query at absolute position offset + i sees keys 0 .. offset + i
          const lastKey = ctx.causal ? offset + i : Tk - 1;
          const firstKey = window === null ? 0 : offset + i - window + 1;
          const farthest = window === null ? lastKey : Math.min(lastKey, offset + i + window - 1);
          for (let j = 0; j < Tk; j++) {
            let s = FLOAT32_MIN;
            if (j >= firstKey && j <= farthest && (!keyVisible || keyVisible[j])) {
              const ko = j * kvWidth + kd;
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
            const vo = j * kvWidth + kd;
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
      return linear(z, T, D, Wo, bo, D);
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

    /** FFN(x) = W_2 act(W_1 x + b_1) + b_2, each position on its own (block i of stack s). */
    mlp(x, T, s, i) {
      const { D } = this;
      const F = this.config.dim_feedforward;
      const hidden = linear(x, T, D, this.need(s, i, "mlp.in.weight"), this.part(s, i, "mlp.in.bias"), F);
      if (this.gate) {
        // a gated MLP: W_down (act(W_gate x) * W_up x); `mlp.in` is the up projection
        const gate = linear(x, T, D, this.need(s, i, "mlp.gate.weight"), this.part(s, i, "mlp.gate.bias"), F);
        const act = this.gate;
        for (let k = 0; k < hidden.length; k++) hidden[k] = Math.fround(act(gate[k])) * hidden[k];
      } else {
        const act = this.act;
        for (let k = 0; k < hidden.length; k++) hidden[k] = act(hidden[k]);
      }
      return linear(hidden, T, F, this.need(s, i, "mlp.out.weight"), this.part(s, i, "mlp.out.bias"), D);
    }

    /** The norm with the weights of `role` ("attn.norm", "final_norm", ...): LayerNorm (role.weight,
     *  role.bias) or RMSNorm (role.weight), with the model's norm_eps. */
    norm(x, T, s, i, role) {
      const c = this.config;
      const eps = c.norm_eps ?? LN_EPS;
      if (c.norm === "rms") return rmsNorm(x, T, this.D, this.need(s, i, `${role}.weight`), eps);
      return layerNorm(x, T, this.D, this.need(s, i, `${role}.weight`), this.part(s, i, `${role}.bias`), eps);
    }

    /** Whether block i's self-attention has a local window: its size, or null. */
    windowOf(i) {
      const c = this.config;
      if (c.attention_window === null || c.attention_window === undefined) return null;
      return !c.window_layers || c.window_layers.includes(i) ? c.attention_window : null;
    }

    /** One block. Post-norm: x = LN(x + Attn(x)) ... ; pre-norm: x = x + Attn(LN(x)) ...; parallel:
     *  x + Attn(LN1(x)) + MLP(LN2(x)); a decoder block has cross-attention between self-attention and
     *  the MLP; `mlp=false` blocks have no MLP.
     *  Each sub-layer's LayerNorm is the one the layout names for it (`attn.norm`, `mlp.norm`, ...). */
    block(x, T, s, i, ctx) {
      const stack = this.spec.stacks[s];
      const preNorm = this.config.norm_first;
      const hasMlp = this.part(s, i, "mlp.in.weight") !== null;
      const selfLayer = this.layerIndex[`${s}.${i}.attn`];
      const selfCtx = { ...ctx, cross: false, kv: ctx.cache ? ctx.cache.blocks[i] : null, window: this.windowOf(i) };
      const sub = [];
      sub.push(["attn", (y) => this.attention(y, T, [s, i, "attn"], selfLayer, selfCtx)]);
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
        sub.push(["cross_attn", (y) => this.attention(y, T, [s, i, "cross_attn"], crossLayer, crossCtx)]);
      }
      if (hasMlp) sub.push(["mlp", (y) => this.mlp(y, T, s, i)]);
      if (this.config.parallel_residual) {
        // GPT-NeoX: x + (Attn(LN1(x)) + MLP(LN2(x))), both sub-layers reading the block's input
        let sum = null;
        for (const [name, f] of sub) {
          const out = f(this.norm(x, T, s, i, `${name}.norm`));
          sum = sum === null ? out : add(sum, out);
        }
        return add(x, sum);
      }
      for (const [name, f] of sub) {
        const role = `${name}.norm`;
        const out = f(preNorm ? this.norm(x, T, s, i, role) : x); // hook_attn_out, hook_mlp_out, ...
        if (ctx.record && ctx.record.outputs) ctx.record.outputs[`${s}.${i}.${name}`] = out;
        x = preNorm ? add(x, out) : this.norm(add(x, out), T, s, i, role);
      }
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
        positions, // each query's position (rotary positions rotate by it)
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
        const E = this.need(s, null, "embed");
        x = new Float32Array(T * D);
        for (let t = 0; t < T; t++) {
          const tok = tokens[t];
          if (!(tok >= 0 && tok < c.vocab_size)) throw new Error(`token id ${tok} is not in the vocabulary`);
          x.set(E.subarray(tok * D, (tok + 1) * D), t * D);
          this.positional(s, positions[t], x, t * D);
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
      return this.part(s, null, "final_norm.weight") ? this.norm(x, T, s, null, "final_norm") : x;
    }
/** The output layer: one Linear, or the tutorial's Linear-LayerNorm-ReLU-Linear (the layout's
     *  unembed.hidden and unembed.norm, then unembed). [T, classes]. */
    unembed(x, T) {
      const { D } = this;
      let h = x;
      if (this.part(null, null, "unembed.hidden.weight")) {
        h = linear(x, T, D, this.need(null, null, "unembed.hidden.weight"), this.part(null, null, "unembed.hidden.bias"), D);
        h = layerNorm(h, T, D, this.need(null, null, "unembed.norm.weight"), this.part(null, null, "unembed.norm.bias"));
        for (let i = 0; i < h.length; i++) h[i] = ACTIVATIONS.relu(h[i]);
      }
      return linear(h, T, D, this.need(null, null, "unembed.weight"), this.part(null, null, "unembed.bias"), this.classes);
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
          cache = new StackCache(this.spec.stacks[0].blocks, block, this.kvWidth, false);
          logits = run(out.slice(Math.max(0, length - window), length));
        } else {
          logits = run(out.slice(length - 1, length));
        }
        const usable = logits.subarray(0, c.vocab_size - (c.unused_rows || 0)); // never an unused row
        const next = sampleNext(usable, opts.temperature ?? 0, opts.topK ?? null, opts.topP ?? null, opts.random || Math.random);
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
      const cache = new StackCache(this.spec.stacks[1].blocks, c.max_len, this.kvWidth, true);
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
      if (this.spec.readsSource) return this.generateSeq2seq(prompt, undefined, opts);
      const maxNew = opts.maxNew ?? this.config.max_len - prompt.length;
      return this.generate(prompt, maxNew, { ...opts, temperature: 0 }).slice(prompt.length);
    }

    /** The inputs under which the model reads the prompt and writes `output` (teacher forcing), as
     *  `forced_inputs`: the prompt and the output but its last token; or source and <bos> output[:-1]. */
    forcedInputs(prompt, output) {
      if (!this.spec.generates) return [prompt];
      if (this.spec.readsSource) return [prompt, [this.config.bos_id, ...output.slice(0, -1)]];
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

  TL.model = {
    CAPABILITIES,
    Model,
    StackCache,
    linear,
    layerNorm,
    rmsNorm,
    argmax,
    logSoftmax,
    sampleNext,
    seeded,
    toAblationMap,
  };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
