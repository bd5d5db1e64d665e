/* util.js: the page's small tools: DOM and SVG elements, token and number formats, colour maps, and
 * the packed matrices decoded (inflate; Stack: one byte per weight; FloatStack: exact numbers).
 */
(function (TL) {
  "use strict";
  const SVG_NS = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);

  const SHOWN_AS = Object.freeze({ "\n": "⏎", " ": "␣", "\t": "⇥", "": "∅" });
  const shown = (token) => (Object.hasOwn(SHOWN_AS, token) ? SHOWN_AS[token] : token);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key === "style") for (const [name, v] of Object.entries(value)) node.style.setProperty(name, v);
      else node.setAttribute(key, value);
    }
    for (const child of children) node.append(child);
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    return node;
  }

  const pct = (p) => (p >= 0.995 ? "100%" : p < 0.001 ? "<0.1%" : (100 * p).toFixed(p < 0.1 ? 1 : 0) + "%");
  const fmt = (v) => (v === 0 ? "0" : Math.abs(v) >= 0.01 ? v.toFixed(3) : v.toExponential(1));
  const message = (error) => (error && error.message ? error.message : String(error));

  // Colour maps: 256 RGB entries interpolated between a few stops (ColorBrewer's sequential scales).
  function lut(stops) {
    const out = new Uint8ClampedArray(256 * 3);
    for (let i = 0; i < 256; i++) {
      const x = (i / 255) * (stops.length - 1);
      const j = Math.min(Math.floor(x), stops.length - 2);
      const t = x - j;
      for (let c = 0; c < 3; c++) out[i * 3 + c] = Math.round(stops[j][c] * (1 - t) + stops[j + 1][c] * t);
    }
    return out;
  }
  const CMAPS = Object.freeze({
    attention: lut([[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]]),
    rollout: lut([[252, 251, 253], [218, 218, 235], [158, 154, 200], [106, 81, 163], [63, 0, 125]]),
    relevance: lut([[247, 252, 245], [199, 233, 192], [116, 196, 118], [35, 139, 69], [0, 68, 27]]),
    // diverging: index 0 = most negative (blue), 128 = zero (white), 255 = most positive (red)
    ablation: lut([[33, 102, 172], [146, 197, 222], [247, 247, 247], [244, 165, 130], [178, 24, 43]]),
  });
  const rgb = (map, t) => {
    const i = 3 * Math.max(0, Math.min(255, Math.round(t * 255)));
    return `rgb(${map[i]},${map[i + 1]},${map[i + 2]})`;
  };
  const BASE_COLOURS = Object.freeze(["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
    "#17becf", "#bcbd22", "#7f7f7f"]);
  const headColour = (h) => (h < BASE_COLOURS.length ? BASE_COLOURS[h] : `hsl(${(h * 137.5) % 360}, 65%, 45%)`);

  // ------------------------------------------------------------------------------------ decoding
  async function inflate(base64) {
    const text = atob(base64);
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  /** What both stacks of matrices [..., R, C] share: matrix m's largest value and its matrix view, from
   * the subclass's value(m, r, c) and rowMax(m, r). */
  class MatrixStack {
    max(m) {
      let best = 0;
      for (let r = 0; r < this.R; r++) best = Math.max(best, this.rowMax(m, r));
      return best;
    }
    matrix(m) {
      return { R: this.R, C: this.C, get: (r, c) => this.value(m, r, c), max: this.max(m) };
    }
  }

  /** A packed stack of matrices [..., R, C]: value(m, r, c) of matrix m = q / levels * row maximum. */
  class Stack extends MatrixStack {
    constructor(shape, levels, q, scale) {
      super();
      this.shape = shape;
      this.levels = levels;
      this.R = shape[shape.length - 2];
      this.C = shape[shape.length - 1];
      this.q = q;
      this.scale = scale;
      this.count = q.length / (this.R * this.C);
    }
    value(m, r, c) {
      return (this.q[(m * this.R + r) * this.C + c] / this.levels) * this.scale[m * this.R + r];
    }
    rowMax(m, r) {
      return this.scale[m * this.R + r];
    }
  }

  /** The same interface over exact numbers (what the page's own forward pass computes). */
  class FloatStack extends MatrixStack {
    constructor(shape, data) {
      super();
      this.shape = shape;
      this.R = shape[shape.length - 2];
      this.C = shape[shape.length - 1];
      this.data = data;
      this.count = data.length / (this.R * this.C);
      this.rowMaxes = new Float32Array(this.count * this.R);
      for (let i = 0; i < this.rowMaxes.length; i++) {
        let best = 0;
        for (let c = 0; c < this.C; c++) best = Math.max(best, data[i * this.C + c]);
        this.rowMaxes[i] = best;
      }
    }
    value(m, r, c) {
      return this.data[(m * this.R + r) * this.C + c];
    }
    rowMax(m, r) {
      return this.rowMaxes[m * this.R + r];
    }
  }

  async function unpack(packed) {
    const [q, scaleBytes] = await Promise.all([inflate(packed.q), inflate(packed.scale)]);
    return new Stack(packed.shape, packed.levels, q, new Float32Array(scaleBytes.buffer, scaleBytes.byteOffset, scaleBytes.length / 4));
  }

  TL.util = { SVG_NS, $, shown, el, svg, pct, fmt, message, lut, CMAPS, rgb, BASE_COLOURS, headColour, inflate, Stack, FloatStack, unpack };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
