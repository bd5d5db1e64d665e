/* The attention explorer: reads the JSON data in the page and draws its views; on a live page it also
 * runs the model (model.js) for whatever input the student types.
 *
 * Data (written by transformer_lab/explorer/page.py): kinds of attention, each with its maps packed as
 * one byte per weight (q / levels * row maximum), deflated and base64-encoded; overlays (rollout,
 * relevance) packed the same way; per-position predictions; the head-ablation table. These are the
 * precomputed first view (drawn at once, from Python's numbers). A live page adds `live`: the model's
 * structure, config and weights (live.py), the mean of every head's z over the task's examples (mean
 * ablation), the first input, and the snapshots of a run for the step slider.
 * Views: head view (SVG: tokens in two columns, lines drawn on hover), model view (a <canvas> heatmap
 * per layer x head, drawn from ImageData), looks-vs-uses (labelled canvas heatmaps), head ablation
 * (a table), activation patching (live pages), predictions (a table). A view is drawn when it is shown
 * and redrawn when the numbers change.
 * Live: the input box (checked against the vocabulary), heads removed by a click (zero or mean
 * ablation), generation, the step slider; the state (input, view, layer, removed heads, step) is kept in
 * the URL fragment. `window.transformerLab` is the page's model as an API (see DESIGN.md):
 * forward(input, {ablate, ablation}) -> {logits, patterns}, vocab, lastUpdateMs, ...
 * For tests: document.body.dataset.ready = "true" once the first view is drawn (window.explorerRenderMs:
 * milliseconds from the start of this script; explorerLoadMs: from the start of navigation), and
 * document.body.dataset.live = "true" once the model is decoded ("none": a precomputed page).
 */
"use strict";
(function () {
  const START = performance.now();
  const SVG_NS = "http://www.w3.org/2000/svg";
  const DATA = JSON.parse(document.getElementById("explorer-data").textContent);
  const LIVE = DATA.live || null;
  const TL = typeof TransformerLabModel !== "undefined" ? TransformerLabModel : null;
  const $ = (id) => document.getElementById(id);
  const timings = {};
  window.explorerTimings = timings;

  // ---------------------------------------------------------------------------------------- helpers
  const SHOWN_AS = { "\n": "⏎", " ": "␣", "\t": "⇥", "": "∅" };
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
  const CMAPS = {
    attention: lut([[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]]),
    rollout: lut([[252, 251, 253], [218, 218, 235], [158, 154, 200], [106, 81, 163], [63, 0, 125]]),
    relevance: lut([[247, 252, 245], [199, 233, 192], [116, 196, 118], [35, 139, 69], [0, 68, 27]]),
    // diverging: index 0 = most negative (blue), 128 = zero (white), 255 = most positive (red)
    ablation: lut([[33, 102, 172], [146, 197, 222], [247, 247, 247], [244, 165, 130], [178, 24, 43]]),
  };
  const rgb = (map, t) => {
    const i = 3 * Math.max(0, Math.min(255, Math.round(t * 255)));
    return `rgb(${map[i]},${map[i + 1]},${map[i + 2]})`;
  };
  const BASE_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#7f7f7f"];
  const headColour = (h) => (h < BASE_COLOURS.length ? BASE_COLOURS[h] : `hsl(${(h * 137.5) % 360}, 65%, 45%)`);

  // ------------------------------------------------------------------------------------ decoding
  async function inflate(base64) {
    const text = atob(base64);
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  /** A packed stack of matrices [..., R, C]: value(m, r, c) of matrix m = q / levels * row maximum. */
  class Stack {
    constructor(shape, levels, q, scale) {
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
    max(m) {
      let best = 0;
      for (let r = 0; r < this.R; r++) best = Math.max(best, this.scale[m * this.R + r]);
      return best;
    }
    rowMax(m, r) {
      return this.scale[m * this.R + r];
    }
    matrix(m) {
      return { R: this.R, C: this.C, get: (r, c) => this.value(m, r, c), max: this.max(m) };
    }
  }

  /** The same interface over exact numbers (what the page's own forward pass computes). */
  class FloatStack {
    constructor(shape, data) {
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
    max(m) {
      let best = 0;
      for (let r = 0; r < this.R; r++) best = Math.max(best, this.rowMaxes[m * this.R + r]);
      return best;
    }
    rowMax(m, r) {
      return this.rowMaxes[m * this.R + r];
    }
    matrix(m) {
      return { R: this.R, C: this.C, get: (r, c) => this.value(m, r, c), max: this.max(m) };
    }
  }

  async function unpack(packed) {
    const [q, scaleBytes] = await Promise.all([inflate(packed.q), inflate(packed.scale)]);
    return new Stack(packed.shape, packed.levels, q, new Float32Array(scaleBytes.buffer, scaleBytes.byteOffset, scaleBytes.length / 4));
  }

  // ----------------------------------------------------------------------------------- state
  const state = {
    view: "head",
    kind: 0, // index into kinds
    layer: 0,
    heads: [], // shown / hidden per head (head view)
    threshold: 0.05,
    shade: "",
    selected: null, // {side: "query" | "key", index}
    enlarged: { layer: 0, head: 0 },
    colour: "row", // model view colour scale: row | map | absolute
  };
  const drawn = {}; // view -> whether it is drawn for the current numbers
  const HEADS = DATA.summary.heads;
  // What the views draw: the precomputed numbers first, the page's own once the input or the model
  // changes. kinds: DATA.kinds with .stack (the maps); overlays: rollout and relevance with .stack.
  let kinds = [];
  let overlays = [];
  const current = {
    predictions: DATA.predictions, // {kinds, reads_title, rows}
    ablation: DATA.ablation, // the head-ablation table, and what it was computed for
    ablationNote: "",
    overlayRows: DATA.overlays.rows,
    overlayCols: DATA.overlays.cols,
    input: DATA.summary.input,
    output: DATA.summary.output,
    relevanceStale: false,
  };
  const kind = () => kinds[state.kind];
  const mapIndex = (layer, head) => layer * HEADS + head;
  // A live page whose maps did not fit stores only each kind's last layer (`first` is its number) until
  // its model has run; layers are numbered as the model numbers them, maps indexed from `first`.
  const firstLayer = (k) => k.first || 0;
  const lastLayer = (k) => firstLayer(k) + k.stack.shape[0] - 1;
  const mapOf = (k, layer, head) => mapIndex(layer - firstLayer(k), head);
  const predictionsAlign = () => current.predictions.kinds.includes(kind().name);
  const overlaysAlign = () => DATA.overlays.kind === kind().name;

  // --------------------------------------------------------------------------- tooltip
  const tooltip = $("tooltip");
  function showTip(event, text) {
    tooltip.textContent = text;
    tooltip.hidden = false;
    const x = Math.min(event.clientX + 14, window.innerWidth - tooltip.offsetWidth - 4);
    tooltip.style.left = `${x}px`;
    tooltip.style.top = `${event.clientY + 14}px`;
  }
  const hideTip = () => (tooltip.hidden = true);

  // ------------------------------------------------------------------- labelled heatmap (canvas)
  const measurer = document.createElement("canvas").getContext("2d");
  const widths = new Map(); // font + text -> width: the same tokens are measured at every update
  function textWidth(text, font) {
    const key = `${font}\u0000${text}`;
    let width = widths.get(key);
    if (width === undefined) {
      measurer.font = font;
      width = measurer.measureText(text).width;
      if (widths.size < 20000) widths.set(key, width);
    }
    return width;
  }

  /** Draw matrix {R, C, get(r, c)} on `canvas` with token labels, a title and a colour bar.
   *  opts: rows, cols (labels), title, xlabel, ylabel, cmap, vmax, vmin (diverging when < 0),
   *  maxSide (px for the cells), legend (colour bar title), annotate (write values in cells).
   *  Returns the cells' geometry, for hovering. */
  function drawMatrix(canvas, matrix, opts) {
    const { R, C } = matrix;
    const cell = Math.max(1, Math.min(opts.cellMax || 22, Math.floor((opts.maxSide || 520) / Math.max(R, C))));
    const size = Math.max(8, Math.min(12, cell - 2));
    const font = `${size}px ui-monospace, "DejaVu Sans Mono", monospace`;
    const step = Math.max(1, Math.ceil((size + 1) / cell));
    const rowLabels = opts.rows.map(shown);
    const colLabels = opts.cols.map(shown);
    const rowW = Math.max(...rowLabels.map((t) => textWidth(t, font)), 8) + 8;
    const colH = Math.max(...colLabels.map((t) => textWidth(t, font)), 8) + 8;
    const titleFont = "bold 13px system-ui, sans-serif";
    const axisFont = "12px system-ui, sans-serif";
    const left = 18 + rowW;
    const top = 22 + 16 + colH;
    const legendW = opts.legend ? 78 : 0;
    const width = Math.max(left + C * cell + legendW + 8, textWidth(opts.title, titleFont) + 16);
    const height = top + R * cell + 12;
    const dpr = Math.max(1, window.devicePixelRatio || 1);
    canvas.width = Math.ceil(width * dpr);
    canvas.height = Math.ceil(height * dpr);
    canvas.style.width = `${Math.ceil(width)}px`;
    canvas.style.height = `${Math.ceil(height)}px`;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, width, height);
    ctx.fillStyle = "#1f2328";
    ctx.font = titleFont;
    ctx.textBaseline = "top";
    ctx.fillText(opts.title, 6, 4);
    ctx.font = axisFont;
    ctx.fillStyle = "#59636e";
    ctx.fillText(opts.xlabel || "", left, 22);
    ctx.save();
    ctx.translate(4, top + (R * cell) / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "center";
    ctx.fillText(opts.ylabel || "", 0, 0);
    ctx.restore();

    // the cells: one pixel per value, scaled up without smoothing
    const vmax = opts.vmax > 0 ? opts.vmax : 1;
    const vmin = opts.vmin || 0;
    const pixels = document.createElement("canvas");
    pixels.width = C;
    pixels.height = R;
    const pctx = pixels.getContext("2d");
    const image = pctx.createImageData(C, R);
    const map = opts.cmap;
    for (let r = 0; r < R; r++) {
      for (let c = 0; c < C; c++) {
        const t = vmin < 0 ? (matrix.get(r, c) / vmax + 1) / 2 : matrix.get(r, c) / vmax;
        const i = 3 * Math.max(0, Math.min(255, Math.round(t * 255)));
        const o = 4 * (r * C + c);
        image.data[o] = map[i];
        image.data[o + 1] = map[i + 1];
        image.data[o + 2] = map[i + 2];
        image.data[o + 3] = 255;
      }
    }
    pctx.putImageData(image, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(pixels, left, top, C * cell, R * cell);

    // labels
    ctx.font = font;
    ctx.fillStyle = "#1f2328";
    ctx.textBaseline = "middle";
    ctx.textAlign = "right";
    for (let r = 0; r < R; r += step) ctx.fillText(rowLabels[r], left - 4, top + (r + 0.5) * cell);
    ctx.textAlign = "left";
    for (let c = 0; c < C; c += step) {
      ctx.save();
      ctx.translate(left + (c + 0.5) * cell, top - 4);
      ctx.rotate(-Math.PI / 2);
      ctx.fillText(colLabels[c], 0, 0);
      ctx.restore();
    }
    if (opts.annotate && cell >= 26) {
      ctx.textAlign = "center";
      ctx.font = "11px ui-monospace, monospace";
      for (let r = 0; r < R; r++) {
        for (let c = 0; c < C; c++) {
          const v = matrix.get(r, c);
          const t = vmin < 0 ? Math.abs(v) / vmax : v / vmax;
          ctx.fillStyle = t > 0.6 ? "#fff" : "#1f2328";
          ctx.fillText(opts.annotate(v), left + (c + 0.5) * cell, top + (r + 0.5) * cell);
        }
      }
    }
    if (opts.legend) drawColourBar(ctx, left + C * cell + 12, top, Math.min(R * cell, 180), opts);
    return { left, top, cell, R, C };
  }

  function drawColourBar(ctx, x, y, h, opts) {
    const vmax = opts.vmax > 0 ? opts.vmax : 1;
    const vmin = opts.vmin || 0;
    for (let i = 0; i < h; i++) {
      ctx.fillStyle = rgb(opts.cmap, 1 - i / Math.max(1, h - 1));
      ctx.fillRect(x, y + i, 12, 1);
    }
    ctx.strokeStyle = "#d1d9e0";
    ctx.strokeRect(x - 0.5, y - 0.5, 13, h + 1);
    ctx.fillStyle = "#59636e";
    ctx.font = "11px system-ui, sans-serif";
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    ctx.fillText((opts.capped ? "≥" : "") + fmt(opts.top || vmax), x + 16, y);
    ctx.textBaseline = "bottom";
    ctx.fillText(fmt(vmin < 0 ? -vmax : 0), x + 16, y + h);
    ctx.save();
    ctx.translate(x + 60, y + h / 2);
    ctx.rotate(Math.PI / 2);
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    ctx.fillText(opts.legend, 0, 0);
    ctx.restore();
  }

  /** Tooltips over a drawMatrix canvas: describe(r, c) gives the text. */
  function hoverCells(canvas, geometry, describe) {
    canvas.onmousemove = (event) => {
      const box = canvas.getBoundingClientRect();
      const scale = canvas.width / Math.max(1, box.width) / Math.max(1, window.devicePixelRatio || 1);
      const x = (event.clientX - box.left) * scale - geometry.left;
      const y = (event.clientY - box.top) * scale - geometry.top;
      const r = Math.floor(y / geometry.cell);
      const c = Math.floor(x / geometry.cell);
      if (x < 0 || y < 0 || r >= geometry.R || c >= geometry.C) return hideTip();
      showTip(event, describe(r, c));
    };
    canvas.onmouseleave = hideTip;
  }

  /** A small colour bar as a legend line: "<text> 0 [bar] max". */
  function legendBar(container, cmap, low, high, text) {
    container.replaceChildren();
    const bar = el("canvas", { width: 120, height: 10 });
    const ctx = bar.getContext("2d");
    for (let i = 0; i < 120; i++) {
      ctx.fillStyle = rgb(cmap, i / 119);
      ctx.fillRect(i, 0, 1, 10);
    }
    container.append(el("span", { text }), el("span", { text: low }), bar, el("span", { text: high }));
  }

  // ------------------------------------------------------------------------------- header
  const joinTokens = (tokens) => tokens.map((t) => (DATA.summary.join === "" && t !== " " ? shown(t) : t)).join(DATA.summary.join);

  function drawHeader() {
    const s = DATA.summary;
    $("title").textContent = DATA.title;
    const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
    const levels = kinds[0] && kinds[0].stack.levels;
    $("summary").textContent =
      `${s.architecture} model · ${s.shape} · ` +
      `${s.parameters.toLocaleString("en")} parameters · ${plural(current.input.length, "input token")}. ` + DATA.notes.join(" ") +
      (levels && levels < 255 ? ` Attention weights are stored to 1/${levels} of each row's largest (thinned to keep the file small).` : "") +
      (kinds[0] && firstLayer(kinds[0]) > 0 ? " The page stores the last layer's attention; it computes every layer when its model runs." : "");
    const io = $("io");
    // characters as the text they are (newlines and tabs made visible), other tokens apart
    const parts = [el("b", { text: "input  " }), joinTokens(current.input), el("br"), el("b", { text: "output " }), joinTokens(current.output)];
    // what the model wrote, where it is not already the output line (greedy: the same tokens)
    const wrote = live && live.generated ? joinTokens(live.generated) : null;
    if (wrote && wrote !== joinTokens(current.output.filter((t) => t !== ""))) parts.push(el("br"), el("b", { text: "writes " }), wrote);
    io.replaceChildren(...parts);
  }

  /** The text that names a figure: the model, then the input (saved images carry both). */
  function figureTitle() {
    const s = DATA.summary;
    const text = joinTokens(current.input);
    const input = text.length > 110 ? text.slice(0, 107) + "..." : text;
    const step = live && live.series ? `, ${live.series.labels[live.step]}` : "";
    const removed = live && live.removed.size ? `; heads removed (${live.method}): ${removedLabels().join(", ")}` : "";
    return [`${DATA.title} (${s.architecture}, ${s.shape}${step})`, `input: ${input}${removed}`];
  }

  // ---------------------------------------------------------------------------- head view
  const ROW_H = 18;
  const TOKEN_FONT = '13px ui-monospace, "DejaVu Sans Mono", Menlo, monospace';
  const SMALL_FONT = "10px system-ui, sans-serif";
  let head = null; // geometry of the drawn head view

  function drawHeadControls() {
    const k = kind();
    const layerSelect = $("layer-select");
    const first = firstLayer(k);
    layerSelect.replaceChildren(...Array.from({ length: k.stack.shape[0] }, (_, i) => el("option", { value: first + i, text: `${first + i}` })));
    state.layer = Math.max(first, Math.min(state.layer, lastLayer(k)));
    layerSelect.value = state.layer;
    const chips = $("head-chips");
    chips.replaceChildren(
      ...state.heads.map((on, h) =>
        el("button", { class: "head-chip", "data-head": h, "aria-pressed": on, style: { "--chip": headColour(h) }, text: `H${h}` })
      )
    );
    $("shade-control").hidden = !overlaysAlign();
  }

  /** The query whose attention in `layer` is sharpest: the largest mean over heads of 1 - H / log n
   *  (H the row's entropy, n the keys it can see; a causal query sees itself and earlier tokens, so
   *  the first, which sees only itself, is never chosen). The first view opens there. */
  function sharpestQuery(k, layer) {
    const stack = k.stack;
    const causal = k.name === "decoder" || (k.name === "self" && DATA.summary.causal);
    let best = 0;
    let bestScore = -Infinity;
    for (let r = 0; r < stack.R; r++) {
      const visible = causal ? Math.min(r + 1, stack.C) : stack.C;
      if (visible < 2) continue;
      let score = 0;
      for (let h = 0; h < HEADS; h++) {
        let entropy = 0;
        for (let c = 0; c < stack.C; c++) {
          const a = stack.value(mapOf(k, layer, h), r, c);
          if (a > 0) entropy -= a * Math.log(a);
        }
        score += 1 - entropy / Math.log(visible);
      }
      if (score > bestScore + 1e-9) {
        bestScore = score;
        best = r;
      }
    }
    return best;
  }

  function drawHeadView() {
    const t0 = performance.now();
    const k = kind();
    const root = $("head-svg");
    const rows = k.rows.map(shown);
    const cols = k.cols.map(shown);
    const tokenW = Math.max(...rows.map((t) => textWidth(t, TOKEN_FONT)), ...cols.map((t) => textWidth(t, TOKEN_FONT)), 24) + 10;
    // the same columns of tokens as drawn (an edited token, heads removed, another step): relabel them
    // and redraw the lines, instead of building the drawing again
    if (head && head.kind === k.name && head.tokenW === tokenW && head.rows === rows.length && head.cols === cols.length && root.contains(head.lines)) {
      head.groups.query.forEach((g, i) => (g.querySelector(".hv-label").textContent = rows[i]));
      head.groups.key.forEach((g, i) => (g.querySelector(".hv-label").textContent = cols[i]));
      drawLines();
      timings.head = performance.now() - t0;
      return;
    }
    root.replaceChildren();
    const indexW = textWidth(String(Math.max(rows.length, cols.length)), SMALL_FONT) + 8;
    const headerFont = "12px system-ui, sans-serif";
    const xL = Math.max(8 + indexW + tokenW, textWidth(k.row_axis, headerFont) + 10);
    // the line area takes the room the page has, so that lines to nearby tokens stay apart
    const room = ($("head-svg").parentElement.clientWidth || 900) - 2 * (tokenW + indexW) - 60;
    const gap = Math.max(240, Math.min(520, room));
    const xR = xL + gap;
    const width = xR + Math.max(tokenW + indexW + 8, textWidth(k.col_axis, headerFont) + 10);
    const top = 30;
    const height = top + Math.max(rows.length, cols.length) * ROW_H + 8;
    root.setAttribute("width", width);
    root.setAttribute("height", height);
    root.setAttribute("viewBox", `0 0 ${width} ${height}`);
    root.append(svg("rect", { x: 0, y: 0, width, height, fill: "#ffffff" }));
    const header = { "font-family": "system-ui, sans-serif", "font-size": 12, fill: "#59636e", y: 18 };
    root.append(svg("text", { ...header, x: xL, "text-anchor": "end", text: k.row_axis }));
    root.append(svg("text", { ...header, x: xR, "text-anchor": "start", text: k.col_axis }));
    const lines = svg("g", { id: "hv-lines", class: "hv-lines" });
    root.append(lines);
    const groups = { query: [], key: [] };
    const column = (side, labels) => {
      labels.forEach((label, i) => {
        const y = top + i * ROW_H;
        const g = svg("g", { class: `hv-token ${side}`, "data-index": i });
        const rectX = side === "query" ? xL - tokenW - indexW - 4 : xR - 4;
        g.append(svg("rect", { class: "hv-box", x: rectX, y, width: tokenW + indexW + 8, height: ROW_H - 2, rx: 3, fill: "#ffffff" }));
        const small = { "font-family": "system-ui, sans-serif", "font-size": 10, fill: "#8c959f", y: y + ROW_H / 2 + 3 };
        const text = { "font-family": 'ui-monospace, "DejaVu Sans Mono", Menlo, monospace', "font-size": 13, fill: "#1f2328", y: y + ROW_H / 2 + 4 };
        if (side === "query") {
          g.append(svg("text", { ...small, x: xL - tokenW - 2, "text-anchor": "end", text: i }));
          g.append(svg("text", { ...text, class: "hv-label", x: xL - 4, "text-anchor": "end", text: label }));
        } else {
          g.append(svg("text", { ...text, class: "hv-label", x: xR + 4, "text-anchor": "start", text: label }));
          g.append(svg("text", { ...small, x: xR + tokenW + 2, "text-anchor": "start", text: i }));
        }
        root.append(g);
        groups[side].push(g);
      });
    };
    column("query", rows);
    column("key", cols);
    head = { lines, groups, xL, xR, top, kind: k.name, tokenW, rows: rows.length, cols: cols.length };
    const sel = state.selected;
    state.selected = sel && Number.isInteger(sel.index) && sel.index >= 0 && sel.index < (sel.side === "query" ? rows.length : cols.length) ? sel : null;
    drawLines();
    timings.head = performance.now() - t0;
  }

  const rowY = (i) => head.top + i * ROW_H + (ROW_H - 2) / 2;

  /** The lines of the selected token in the current layer, one per (active head, token) whose attention
   *  weight is above the threshold; key tokens shaded by an overlay when one is chosen. */
  function drawLines() {
    const k = kind();
    head.lines.replaceChildren();
    for (const side of ["query", "key"]) {
      for (const g of head.groups[side]) {
        g.firstChild.setAttribute("fill", "#ffffff");
        g.querySelector(".hv-label").setAttribute("fill", "#1f2328");
      }
    }
    drawShadeLegend();
    const sel = state.selected;
    $("head-svg").dataset.threshold = state.threshold;
    if (!sel) {
      $("head-info").textContent = "Hover a token on the left to see what it attends to.";
      return;
    }
    head.groups[sel.side][sel.index].firstChild.setAttribute("fill", "#fff3b0");
    const stack = k.stack;
    let count = 0;
    const fragment = document.createDocumentFragment();
    const spread = Math.min(2, (ROW_H - 4) / HEADS); // heads' lines a little apart, so each colour shows
    state.heads.forEach((on, h) => {
      if (!on) return;
      const m = mapOf(k, state.layer, h);
      const dy = (h - (HEADS - 1) / 2) * spread;
      const others = sel.side === "query" ? stack.C : stack.R;
      for (let j = 0; j < others; j++) {
        const [q, key] = sel.side === "query" ? [sel.index, j] : [j, sel.index];
        const w = stack.value(m, q, key);
        if (!(w > state.threshold)) continue;
        count++;
        fragment.append(
          svg("line", {
            class: "attn-line",
            "data-head": h,
            "data-query": q,
            "data-key": key,
            "data-weight": w.toFixed(4),
            x1: head.xL + 4,
            y1: rowY(q) + dy,
            x2: head.xR - 4,
            y2: rowY(key) + dy,
            stroke: headColour(h),
            "stroke-width": (0.8 + 5 * w).toFixed(2),
            "stroke-opacity": (0.3 + 0.7 * w).toFixed(2),
            "stroke-linecap": "round",
          })
        );
      }
    });
    head.lines.append(fragment);
    head.lines.dataset.count = count;
    if (sel.side === "query" && state.shade && overlaysAlign()) {
      const o = overlays.find((item) => item.name === state.shade);
      if (o && o.stack && sel.index < o.stack.R) {
        const max = o.stack.rowMax(0, sel.index) || 1;
        head.groups.key.forEach((g, c) => {
          const t = o.stack.value(0, sel.index, c) / max;
          g.firstChild.setAttribute("fill", rgb(CMAPS[o.name], 0.85 * t));
          g.querySelector(".hv-label").setAttribute("fill", t > 0.6 ? "#ffffff" : "#1f2328");
        });
      }
    }
    describeSelection(count);
  }

  function describeSelection(count) {
    const k = kind();
    const sel = state.selected;
    const info = $("head-info");
    const token = (text) => el("span", { class: "tok", text: shown(text) });
    const on = state.heads.filter(Boolean).length;
    if (sel.side === "key") {
      info.replaceChildren(`Key ${sel.index} `, token(k.cols[sel.index]),
        `: read by ${count} line${count === 1 ? "" : "s"} above ${state.threshold} in layer ${state.layer} (${on} heads on).`);
      return;
    }
    const parts = [`Query ${sel.index} `, token(k.rows[sel.index]), `: ${count} line${count === 1 ? "" : "s"} above ${state.threshold} in layer ${state.layer} (${on} heads on).`];
    if (predictionsAlign()) {
      const p = current.predictions.rows[sel.index];
      if (p && p.top.length) {
        parts.push(" Predicts ", token(p.top[0][0]), ` ${pct(p.top[0][1])}`);
        if (p.label !== null) parts.push(", expected ", token(p.label), p.correct ? " ✓" : " ✗");
        parts.push(".");
      }
    }
    info.replaceChildren(...parts);
  }

  function drawShadeLegend() {
    const legend = $("shade-legend");
    const shading = state.shade && overlaysAlign();
    legend.hidden = !shading;
    if (shading) {
      const what = state.shade === "rollout" ? "rollout" : "gradient-weighted relevance";
      legendBar(legend, CMAPS[state.shade], "0", "row max", `Key shading: ${what} of the hovered output over the inputs`);
    }
  }

  function bindHeadView() {
    const root = $("head-svg");
    root.addEventListener("mouseover", (event) => {
      const g = event.target.closest && event.target.closest(".hv-token");
      if (!g) return;
      const side = g.classList.contains("query") ? "query" : "key";
      const index = Number(g.dataset.index);
      if (state.selected && state.selected.side === side && state.selected.index === index) return;
      state.selected = { side, index };
      drawLines();
      saveFragment();
    });
    $("layer-select").addEventListener("change", (event) => {
      state.layer = Number(event.target.value);
      drawLines();
      saveFragment();
    });
    $("head-chips").addEventListener("click", (event) => {
      const chip = event.target.closest(".head-chip");
      if (!chip) return;
      const h = Number(chip.dataset.head);
      state.heads[h] = !state.heads[h];
      chip.setAttribute("aria-pressed", state.heads[h]);
      drawLines();
    });
    const setAll = (on) => {
      state.heads = state.heads.map(() => on);
      drawHeadControls();
      drawLines();
    };
    $("heads-all").addEventListener("click", () => setAll(true));
    $("heads-none").addEventListener("click", () => setAll(false));
    $("threshold").addEventListener("input", (event) => {
      state.threshold = Number(event.target.value);
      $("threshold-value").textContent = state.threshold.toFixed(2);
      drawLines();
    });
    $("shade-select").addEventListener("change", (event) => {
      state.shade = event.target.value;
      drawLines();
    });
  }

  // --------------------------------------------------------------------------- model view
  function drawModelView() {
    const t0 = performance.now();
    const k = kind();
    const stack = k.stack;
    const layers = stack.shape[0];
    const grid = $("model-grid");
    const thumb = Math.max(44, Math.min(110, Math.floor(620 / Math.max(HEADS, layers))));
    grid.style.gridTemplateColumns = `auto repeat(${HEADS}, ${thumb}px)`;
    const cells = [el("span", { class: "axis", text: "" })];
    for (let h = 0; h < HEADS; h++) cells.push(el("span", { class: "axis", style: { color: headColour(h) }, text: `head ${h}` }));
    const { R, C } = stack;
    const aspect = R / C;
    const removed = removedInKind(k);
    const first = firstLayer(k);
    if (first > 0) cells.push(el("span", { class: "axis stale", style: { "grid-column": "1 / -1" }, text: `layers 0 to ${first - 1}: shown once the page's model has run` }));
    for (let i = 0; i < layers; i++) {
      const l = first + i; // the layer's number in the model
      cells.push(el("span", { class: "axis", text: `layer ${l}` }));
      for (let h = 0; h < HEADS; h++) {
        const canvas = el("canvas", { class: "heatmap", "data-layer": l, "data-head": h, width: C, height: R, title: `layer ${l}, head ${h}` });
        canvas.style.width = `${aspect > 1 ? Math.round(thumb / aspect) : thumb}px`;
        canvas.style.height = `${aspect > 1 ? thumb : Math.round(thumb * aspect)}px`;
        paintThumb(canvas, stack, mapIndex(i, h), state.colour);
        if (l === state.enlarged.layer && h === state.enlarged.head) canvas.classList.add("selected");
        if (removed.has(`${l}:${h}`)) {
          canvas.classList.add("removed");
          canvas.title += " (removed)";
        }
        cells.push(canvas);
      }
    }
    grid.replaceChildren(...cells);
    drawEnlarged();
    timings.model = performance.now() - t0;
  }

  /** The colour-scale modes: a weight's shade is value / top, top = its row's or its map's largest
   *  weight, or 1. */
  const COLOUR_LEGEND = { row: "weight / its row's largest", map: "attention weight", absolute: "attention weight" };
  function colourTop(stack, m, mode) {
    const mapTop = mode === "map" ? stack.max(m) || 1 : 1;
    return (r) => (mode === "row" ? stack.rowMax(m, r) || 1 : mapTop);
  }

  /** One pixel per weight, drawn from the bytes directly (fast: 64 maps of 256 x 256 in ~0.1 s). */
  function paintThumb(canvas, stack, m, mode) {
    const { R, C } = stack;
    const ctx = canvas.getContext("2d");
    const image = ctx.createImageData(C, R);
    const map = CMAPS.attention;
    const data = image.data;
    const top = colourTop(stack, m, mode);
    for (let r = 0; r < R; r++) {
      const base = (m * R + r) * C;
      const t = top(r);
      for (let c = 0; c < C; c++) {
        // packed maps: 255 * value / top = q * factor; exact maps: the value itself
        const v = stack.q ? stack.q[base + c] * ((255 * stack.scale[m * R + r]) / (stack.levels * t)) : (255 * stack.data[base + c]) / t;
        const i = 3 * Math.max(0, Math.min(255, Math.round(v)));
        const o = 4 * (r * C + c);
        data[o] = map[i];
        data[o + 1] = map[i + 1];
        data[o + 2] = map[i + 2];
        data[o + 3] = 255;
      }
    }
    ctx.putImageData(image, 0, 0);
  }

  function drawEnlarged() {
    const k = kind();
    const { layer, head: h } = state.enlarged;
    const canvas = $("enlarged");
    if (layer < firstLayer(k) || layer > lastLayer(k)) state.enlarged = { layer: lastLayer(k), head: 0 };
    const m = mapOf(k, state.enlarged.layer, state.enlarged.head);
    const matrix = k.stack.matrix(m);
    const top = colourTop(k.stack, m, state.colour);
    const shade = { R: matrix.R, C: matrix.C, get: (r, c) => matrix.get(r, c) / top(r) };
    const geometry = drawMatrix(canvas, shade, {
      rows: k.rows,
      cols: k.cols,
      title: `${k.title}: layer ${state.enlarged.layer}, head ${state.enlarged.head}`,
      xlabel: k.col_axis,
      ylabel: k.row_axis,
      cmap: CMAPS.attention,
      vmax: 1, // the shades are value / top, in 0..1
      top: state.colour === "map" ? matrix.max : 1,
      maxSide: 520,
      legend: COLOUR_LEGEND[state.colour],
    });
    hoverCells(canvas, geometry, (r, c) =>
      `query ${r} ${shown(k.rows[r])} → key ${c} ${shown(k.cols[c])}\nlayer ${layer}, head ${h}: ${matrix.get(r, c).toFixed(3)}`
    );
  }

  function bindModelView() {
    $("colour-select").addEventListener("change", (event) => {
      state.colour = event.target.value;
      drawModelView();
    });
    $("model-grid").addEventListener("click", (event) => {
      const canvas = event.target.closest(".heatmap");
      if (!canvas) return;
      state.enlarged = { layer: Number(canvas.dataset.layer), head: Number(canvas.dataset.head) };
      for (const other of $("model-grid").querySelectorAll(".heatmap.selected")) other.classList.remove("selected");
      canvas.classList.add("selected");
      drawEnlarged();
    });
  }

  // ----------------------------------------------------------------------- looks vs uses
  function lastLayerMean() {
    const k = kinds.find((item) => item.name === DATA.overlays.kind);
    const stack = k.stack;
    const layer = stack.shape[0] - 1;
    const values = new Float32Array(stack.R * stack.C);
    let max = 0;
    for (let h = 0; h < HEADS; h++) {
      for (let r = 0; r < stack.R; r++) {
        for (let c = 0; c < stack.C; c++) values[r * stack.C + c] += stack.value(mapIndex(layer, h), r, c) / HEADS;
      }
    }
    for (const v of values) max = Math.max(max, v);
    return { R: stack.R, C: stack.C, get: (r, c) => values[r * stack.C + c], max, layer: firstLayer(k) + layer, title: k.title };
  }

  function drawOverlaysView() {
    const t0 = performance.now();
    const container = $("overlay-panels");
    container.replaceChildren();
    const rows = current.overlayRows;
    const cols = current.overlayCols;
    const reads = current.predictions.rows.map((p) => p.reads);
    const mean = lastLayerMean();
    const panels = [
      { name: "attention", title: `Looks: ${mean.title}, layer ${mean.layer}, mean of heads`, matrix: mean, vmax: mean.max, legend: "attention weight" },
      ...overlays.map((o) => ({
        name: o.name,
        title: `Uses: ${o.title}` + (o.stale ? " (for the page's first input: computed in Python)" : ""),
        matrix: o.stale ? blankMatrix(rows.length, cols.length) : o.stack.matrix(0), // (computes a lazy stack)
        vmax: o.stale ? 1 : o.vmax || o.stack.max(0),
        legend: "share of the output",
        capped: Boolean(o.vmax),
        stale: o.stale,
      })),
    ];
    // three panels side by side on a laptop screen: each is its cells plus ~160 px of labels and legend
    const side = Math.max(200, Math.min(420, Math.floor((Math.min(window.innerWidth, 1280) - 40) / 3) - 170));
    for (const panel of panels) {
      const canvas = el("canvas", { class: `overlay overlay-${panel.name}`, "data-overlay": panel.name });
      container.append(canvas);
      const geometry = drawMatrix(canvas, panel.matrix, {
        rows,
        cols,
        title: panel.title,
        xlabel: DATA.overlays.xlabel,
        ylabel: "output: the predicted token",
        cmap: CMAPS[panel.name],
        vmax: panel.vmax,
        maxSide: side,
        legend: panel.legend,
        capped: panel.capped,
      });
      hoverCells(canvas, geometry, (r, c) =>
        panel.stale
          ? "Gradient-weighted relevance needs gradients: the page shows it for the input it was made with. Rerun explore for this input."
          : `output ${r} (reads ${shown(reads[r] || "")}, predicts ${shown(rows[r])})\n← input ${c} ${shown(cols[c])}: ${panel.matrix.get(r, c).toFixed(3)}`
      );
    }
    timings.overlays = performance.now() - t0;
  }

  const blankMatrix = (R, C) => ({ R, C, get: () => 0, max: 0 });

  // ----------------------------------------------------------------------------- ablation
  function ablationMatrix() {
    const a = current.ablation;
    const vmax = Math.max(1e-6, ...a.drops.flat().map(Math.abs));
    return { R: a.drops.length, C: HEADS, get: (r, c) => a.drops[r][c], vmax };
  }

  function drawAblationView() {
    const a = current.ablation;
    const table = $("ablation-table");
    $("ablation-recompute").hidden = !live;
    if (!a) {
      $("ablation-caption").textContent = "The head-ablation table was not computed for this page (ablation=False)." +
        (live ? " Recompute it for the current input:" : "");
      table.replaceChildren();
      $("ablation-legend").replaceChildren();
      return;
    }
    const m = ablationMatrix();
    const method = a.method === "mean" ? "replaced by its mean over the task's examples" : "set to zero";
    $("ablation-caption").replaceChildren(
      `One head's output z ${method}: without ablation the predictions have a mean log-probability of ${a.baseline.toFixed(3)} ` +
      `(geometric mean probability ${pct(Math.exp(a.baseline))}) over ${a.positions} positions. ` +
      `Largest drop: ${fmt(Math.max(...a.drops.flat()))}.`,
      ...(current.ablationNote ? [" ", el("span", { class: "stale", text: current.ablationNote })] : [])
    );
    const kindTitle = Object.fromEntries(kinds.map((k) => [k.name, k.title]));
    const headRow = el("tr", {}, el("th", { text: "layer" }), ...Array.from({ length: HEADS }, (_, h) => el("th", { style: { color: headColour(h) }, text: `head ${h}` })));
    const body = a.drops.map((row, i) =>
      el(
        "tr",
        {},
        el("th", { title: `${a.layers[i]} (${kindTitle[a.kinds[i]] || a.kinds[i]})`, text: `${a.labels[i]} ${a.layers[i].includes("cross") ? "cross" : a.kinds[i] === "self" ? "" : a.kinds[i]}` }),
        ...row.map((drop, h) => {
          const t = (drop / m.vmax + 1) / 2;
          return el("td", {
            class: "ablation-cell",
            "data-row": i,
            "data-head": h,
            title: `${a.labels[i]}H${h}: mean log p drops by ${drop.toFixed(4)}`,
            style: { background: rgb(CMAPS.ablation, t), color: Math.abs(drop) / m.vmax > 0.6 ? "#fff" : "#1f2328" },
            text: drop.toFixed(3),
          });
        })
      )
    );
    table.replaceChildren(el("table", {}, el("thead", {}, headRow), el("tbody", {}, ...body)));
    legendBar($("ablation-legend"), CMAPS.ablation, fmt(-m.vmax), fmt(m.vmax), "drop of the mean log-probability:");
  }

  function bindAblationView() {
    $("ablation-table").addEventListener("click", (event) => {
      const cell = event.target.closest(".ablation-cell");
      if (!cell) return;
      const a = current.ablation;
      const i = Number(cell.dataset.row);
      const k = kinds.findIndex((item) => item.name === a.kinds[i]);
      if (k < 0) return;
      state.heads = state.heads.map((_, h) => h === Number(cell.dataset.head));
      setKind(k);
      state.layer = a.indices[i];
      drawHeadControls();
      drawLines();
      show("head");
    });
    $("ablation-recompute").addEventListener("click", () => recomputeAblation().catch(fail));
  }

  // -------------------------------------------------------------------------- predictions
  function drawPredictionsView() {
    const rows = current.predictions.rows;
    const labelled = rows.filter((p) => p.label !== null);
    const right = labelled.filter((p) => p.correct).length;
    $("prediction-summary").textContent = labelled.length
      ? `${right} of ${labelled.length} predictions with a known label are right (${pct(right / labelled.length)}).`
      : "No expected output is known for this input: the predictions are shown without right or wrong.";
    const readsTitle = current.predictions.reads_title;
    const header = el("tr", {}, ...["pos", readsTitle, "1st", "2nd", "3rd", "expected", ""].map((t) => el("th", { text: t })));
    const prob = (entry) =>
      entry
        ? el("span", { class: "prob" }, el("span", { class: "tok", text: shown(entry[0]) }), el("span", { class: "bar", style: { width: `${Math.max(1, Math.round(50 * entry[1]))}px` } }), el("span", { class: "p", text: pct(entry[1]) }))
        : "";
    const body = rows.map((p) =>
      el(
        "tr",
        { class: `prediction ${p.correct === true ? "right" : p.correct === false ? "wrong" : ""}`, "data-position": p.position },
        el("td", { text: p.position }),
        el("td", {}, el("span", { class: "tok", text: shown(p.reads) })),
        el("td", {}, prob(p.top[0])),
        el("td", {}, prob(p.top[1])),
        el("td", {}, prob(p.top[2])),
        el("td", {}, p.label === null ? "–" : el("span", { class: "tok", text: shown(p.label) })),
        el("td", { class: p.correct === true ? "mark-right" : p.correct === false ? "mark-wrong" : "", text: p.correct === true ? "✓" : p.correct === false ? "✗" : "" })
      )
    );
    $("prediction-table").replaceChildren(el("table", {}, el("thead", {}, header), el("tbody", {}, ...body)));
  }

  // ------------------------------------------------------------------------ PNG and SVG export
  function canvasOf(width, height) {
    const canvas = document.createElement("canvas");
    canvas.width = Math.ceil(width);
    canvas.height = Math.ceil(height);
    const ctx = canvas.getContext("2d");
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    ctx.fillStyle = "#1f2328";
    ctx.textBaseline = "top";
    return { canvas, ctx };
  }

  function titleLines(ctx, lines, x, y) {
    ctx.font = "bold 15px system-ui, sans-serif";
    ctx.fillText(lines[0], x, y);
    ctx.font = "12px system-ui, sans-serif";
    ctx.fillStyle = "#59636e";
    lines.slice(1).forEach((line, i) => ctx.fillText(line, x, y + 22 + 16 * i));
    ctx.fillStyle = "#1f2328";
    return y + 22 + 16 * (lines.length - 1) + 6;
  }

  /** The head view's own lines: what is selected, at which threshold, and the head legend. */
  function headViewCaption() {
    const k = kind();
    const sel = state.selected;
    return [
      `${k.title}, layer ${state.layer}`,
      sel ? `${sel.side} ${sel.index} ${shown(sel.side === "query" ? k.rows[sel.index] : k.cols[sel.index])}: lines to the tokens with attention above ${state.threshold}; width = weight` : "no token selected",
    ];
  }

  async function headViewImage() {
    const root = $("head-svg");
    const xml = new XMLSerializer().serializeToString(root);
    const image = new Image();
    image.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(xml);
    await image.decode();
    const w = Number(root.getAttribute("width"));
    const h = Number(root.getAttribute("height"));
    const { canvas, ctx } = canvasOf(Math.max(w, 520) + 20, h + 90);
    let y = titleLines(ctx, headViewCaption(), 10, 8);
    ctx.font = "12px ui-monospace, monospace";
    let x = 10;
    state.heads.forEach((on, hd) => {
      ctx.fillStyle = on ? headColour(hd) : "#d1d9e0";
      ctx.fillRect(x, y + 2, 12, 10);
      ctx.fillStyle = "#1f2328";
      ctx.fillText(`H${hd}`, x + 15, y + 1);
      x += 46;
    });
    y += 20;
    ctx.drawImage(image, 10, y, w, h);
    return canvas;
  }

  function modelViewImage() {
    const k = kind();
    const stack = k.stack;
    const layers = stack.shape[0];
    const size = Math.max(48, Math.min(140, Math.floor(900 / Math.max(HEADS, layers))));
    const w = size * (stack.C >= stack.R ? 1 : stack.C / stack.R);
    const h = size * (stack.R >= stack.C ? 1 : stack.R / stack.C);
    const { canvas, ctx } = canvasOf(70 + HEADS * (w + 6) + 10, 70 + layers * (h + 6) + 10);
    titleLines(ctx, [`${k.title}, every layer × head`, "row = query token, column = key token; darker = more attention (each map to its own max)"], 10, 6);
    ctx.imageSmoothingEnabled = false;
    ctx.font = "12px ui-monospace, monospace";
    const thumbs = $("model-grid").querySelectorAll(".heatmap");
    for (let hd = 0; hd < HEADS; hd++) {
      ctx.fillStyle = headColour(hd);
      ctx.fillText(`H${hd}`, 70 + hd * (w + 6) + w / 2 - 8, 52);
    }
    ctx.fillStyle = "#1f2328";
    thumbs.forEach((thumb) => {
      const l = Number(thumb.dataset.layer);
      const hd = Number(thumb.dataset.head);
      const x = 70 + hd * (w + 6);
      const y = 70 + (l - firstLayer(k)) * (h + 6);
      ctx.drawImage(thumb, x, y, w, h);
      ctx.strokeStyle = "#d1d9e0";
      ctx.strokeRect(x - 0.5, y - 0.5, w + 1, h + 1);
      if (hd === 0) ctx.fillText(`L${l}`, 10, y + h / 2 - 6);
    });
    return stackImages([canvas, $("enlarged")]);
  }

  function stackImages(parts, sideBySide = true) {
    const gap = 12;
    const width = sideBySide ? parts.reduce((s, p) => s + p.width + gap, gap) : Math.max(...parts.map((p) => p.width)) + 2 * gap;
    const height = sideBySide ? Math.max(...parts.map((p) => p.height)) + 2 * gap : parts.reduce((s, p) => s + p.height + gap, gap);
    const { canvas, ctx } = canvasOf(width, height);
    let offset = gap;
    for (const part of parts) {
      if (sideBySide) {
        ctx.drawImage(part, offset, gap);
        offset += part.width + gap;
      } else {
        ctx.drawImage(part, gap, offset);
        offset += part.height + gap;
      }
    }
    return canvas;
  }

  function ablationImage() {
    const a = current.ablation;
    const canvas = document.createElement("canvas");
    if (!a) {
      const { canvas: empty, ctx } = canvasOf(420, 40);
      titleLines(ctx, ["No head-ablation table on this page"], 10, 10);
      return empty;
    }
    const m = ablationMatrix();
    drawMatrix(canvas, m, {
      rows: a.labels,
      cols: Array.from({ length: HEADS }, (_, h) => `H${h}`),
      title: `Drop of the predictions' mean log-probability, one head ${a.method === "mean" ? "mean" : "zero"}-ablated`,
      xlabel: "head",
      ylabel: "attention layer",
      cmap: CMAPS.ablation,
      vmax: m.vmax,
      vmin: -m.vmax,
      maxSide: 560,
      cellMax: 56,
      legend: "drop of mean log p",
      annotate: (v) => v.toFixed(2),
    });
    return canvas;
  }

  function predictionsImage() {
    const rows = current.predictions.rows;
    const { canvas, ctx } = canvasOf(720, 70 + 18 * (rows.length + 1));
    titleLines(ctx, ["Predictions", $("prediction-summary").textContent], 10, 6);
    const columns = [10, 60, 150, 330, 500, 640];
    ctx.font = "bold 12px system-ui, sans-serif";
    ["pos", "reads", "1st", "2nd", "3rd", "expected"].forEach((t, i) => ctx.fillText(t, columns[i], 50));
    ctx.font = "12px ui-monospace, monospace";
    rows.forEach((p, i) => {
      const y = 70 + 18 * i;
      ctx.fillStyle = p.correct === false ? "#cf222e" : "#1f2328";
      const cells = [String(p.position), shown(p.reads), ...[0, 1, 2].map((j) => (p.top[j] ? `${shown(p.top[j][0])} ${pct(p.top[j][1])}` : "")),
        p.label === null ? "–" : `${shown(p.label)} ${p.correct ? "✓" : "✗"}`];
      cells.forEach((t, j) => ctx.fillText(t, columns[j], y));
    });
    return canvas;
  }

  /** The current view as a canvas, without the figure's title. */
  async function viewImage() {
    switch (state.view) {
      case "head":
        return headViewImage();
      case "model":
        return modelViewImage();
      case "overlays":
        return stackImages([...$("overlay-panels").querySelectorAll("canvas")]);
      case "patching": {
        const parts = [...$("patch-panels").querySelectorAll("canvas")];
        if (parts.length) return stackImages(parts);
        const { canvas, ctx } = canvasOf(520, 40);
        titleLines(ctx, ["No patching result yet: click a token to corrupt it"], 10, 10);
        return canvas;
      }
      case "ablation":
        return ablationImage();
      default:
        return predictionsImage();
    }
  }

  const TITLE_H = 50; // the figure title's two lines (model, input) above every saved view

  /** The view with its title on top: model (name, architecture, shape, step) and input. */
  function titled(image) {
    const lines = figureTitle();
    const { canvas, ctx } = canvasOf(Math.max(image.width, 10 + Math.max(...lines.map((l) => textWidth(l, "bold 15px system-ui, sans-serif")))), image.height + TITLE_H);
    titleLines(ctx, lines, 10, 8);
    ctx.drawImage(image, 0, TITLE_H);
    return canvas;
  }

  function download(blob, name) {
    const link = el("a", { href: URL.createObjectURL(blob), download: name });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 60000);
  }

  async function savePng() {
    const canvas = titled(await viewImage());
    const blob = await new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
    download(blob, `attention-${state.view}-view.png`);
    window.explorerLastPng = { bytes: blob.size, width: canvas.width, height: canvas.height, title: figureTitle() };
  }

  const escapeXml = (text) => String(text).replace(/[<>&"]/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;" })[c]);

  /** The current view as an SVG figure: the title as text; the head view as the vector drawing it is
   *  (lines, tokens, head legend); the other views as their image inside the SVG, as a plotting
   *  library embeds a heatmap. */
  async function saveSvg() {
    const lines = figureTitle();
    const parts = [];
    let width;
    let height;
    const text = (x, y, value, attrs) => `<text x="${x}" y="${y}" ${attrs}>${escapeXml(value)}</text>`;
    if (state.view === "head") {
      const root = $("head-svg");
      const w = Number(root.getAttribute("width"));
      const h = Number(root.getAttribute("height"));
      const caption = headViewCaption();
      parts.push(text(10, TITLE_H + 14, caption[0], 'font-family="system-ui, sans-serif" font-size="13" font-weight="bold" fill="#1f2328"'));
      parts.push(text(10, TITLE_H + 30, caption[1], 'font-family="system-ui, sans-serif" font-size="12" fill="#59636e"'));
      state.heads.forEach((on, hd) => {
        const x = 10 + 46 * hd;
        parts.push(`<rect x="${x}" y="${TITLE_H + 38}" width="12" height="10" fill="${on ? headColour(hd) : "#d1d9e0"}"/>`);
        parts.push(text(x + 15, TITLE_H + 47, `H${hd}`, 'font-family="ui-monospace, monospace" font-size="12" fill="#1f2328"'));
      });
      const inner = new XMLSerializer().serializeToString(root).replace(/^<svg[^>]*>/, "").replace(/<\/svg>\s*$/, "");
      parts.push(`<g transform="translate(10, ${TITLE_H + 56})">${inner}</g>`);
      width = Math.max(w + 20, 520);
      height = TITLE_H + 56 + h + 10;
    } else {
      const image = await viewImage();
      const url = image.toDataURL("image/png");
      const dpr = Math.max(1, window.devicePixelRatio || 1);
      width = image.width / dpr;
      height = TITLE_H + image.height / dpr;
      parts.push(`<image x="0" y="${TITLE_H}" width="${width}" height="${image.height / dpr}" href="${url}"/>`);
    }
    width = Math.max(width, 10 + Math.max(...lines.map((l) => textWidth(l, "bold 15px system-ui, sans-serif"))));
    const head = [
      `<rect x="0" y="0" width="${width}" height="${height}" fill="#ffffff"/>`,
      `<title>${escapeXml(lines.join(" — "))}</title>`,
      text(10, 22, lines[0], 'font-family="system-ui, sans-serif" font-size="15" font-weight="bold" fill="#1f2328"'),
      text(10, 40, lines[1], 'font-family="system-ui, sans-serif" font-size="12" fill="#59636e"'),
    ];
    const doc = `<?xml version="1.0" encoding="UTF-8"?>\n<svg xmlns="${SVG_NS}" width="${Math.ceil(width)}" height="${Math.ceil(height)}" viewBox="0 0 ${Math.ceil(width)} ${Math.ceil(height)}">${head.join("")}${parts.join("")}</svg>\n`;
    const blob = new Blob([doc], { type: "image/svg+xml" });
    download(blob, `attention-${state.view}-view.svg`);
    window.explorerLastSvg = { bytes: blob.size, width, height, title: lines };
  }

  // -------------------------------------------------------------------------- views, kinds
  const DRAW = {
    head: () => {
      drawHeadControls();
      drawHeadView();
    },
    model: drawModelView,
    overlays: drawOverlaysView,
    ablation: drawAblationView,
    patching: drawPatchingView,
    predictions: drawPredictionsView,
  };
  const KIND_VIEWS = ["head", "model"]; // the views that show one kind of attention

  function show(view) {
    if (!Object.hasOwn(DRAW, view) || (view === "patching" && !live)) view = "head";
    state.view = view;
    for (const tab of document.querySelectorAll(".tab")) tab.setAttribute("aria-selected", tab.dataset.view === view);
    for (const section of document.querySelectorAll(".view")) section.hidden = section.dataset.view !== view;
    $("kind-control").hidden = kinds.length < 2 || !KIND_VIEWS.includes(view);
    if (!drawn[view]) {
      DRAW[view]();
      drawn[view] = true;
    }
    saveFragment();
  }

  function setKind(index) {
    state.kind = index;
    $("kind-select").value = index;
    state.selected = null;
    for (const view of KIND_VIEWS) drawn[view] = false;
    state.enlarged = { layer: lastLayer(kind()), head: 0 };
    DRAW.head();
    drawn.head = true;
    if (state.view === "model") show("model");
    saveFragment();
  }

  /** The numbers changed (a new input, heads removed, another step): redraw what is shown, the rest
   *  when it is next shown. */
  function redraw() {
    for (const view of Object.keys(DRAW)) drawn[view] = false;
    drawHeader();
    show(state.view);
  }

  function bind() {
    for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => show(tab.dataset.view));
    const select = $("kind-select");
    select.replaceChildren(...kinds.map((k, i) => el("option", { value: i, text: k.title })));
    select.addEventListener("change", () => setKind(Number(select.value)));
    $("save-png").addEventListener("click", () => savePng().catch(fail));
    $("save-svg").addEventListener("click", () => saveSvg().catch(fail));
    bindHeadView();
    bindModelView();
    bindAblationView();
  }

  function fail(error) {
    const box = $("error");
    box.hidden = false;
    box.textContent = `The explorer could not draw this page: ${message(error)}`;
    console.error(error);
  }

  // ================================================================================== the live page
  // live: the page's own model. engine runs it (here, or in a Web Worker for large models); update()
  // turns the input box into model inputs, runs them and rebuilds what the views draw.
  let live = null;

  /** Removed heads as "layer:head" keys of the attention layers in `interventions` order. */
  const removedPairs = () => [...live.removed].map((key) => key.split(":").map(Number));
  const removedLabels = () => removedPairs().map(([l, h]) => `${LIVE.spec.layers[l].label}H${h}`);

  /** The removed heads of one kind, as "layer-within-kind:head" keys (the model view marks them). */
  function removedInKind(k) {
    const out = new Set();
    if (!live) return out;
    const layers = LIVE.spec.layers.map((layer, i) => ({ ...layer, i })).filter((layer) => layer.group === k.name);
    for (const [l, h] of removedPairs()) {
      const within = layers.findIndex((layer) => layer.i === l);
      if (within >= 0) out.add(`${within}:${h}`);
    }
    return out;
  }

  /** Where the page runs the model for its views: on the page's thread (small models: a few ms), or
   *  in a Web Worker (large ones), so that typing never freezes the page. Either way `view(request)`
   *  returns a Promise of the run. The API's forward() always runs here, synchronously. */
  class Engine {
    constructor(useWorker) {
      this.models = []; // decoded models per step (the page's thread)
      this.runners = [];
      this.worker = null;
      this.pending = new Map();
      this.nextId = 1;
      this.sent = new Set();
      if (useWorker) {
        try {
          const source = $("model-js").textContent;
          const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
          this.worker = new Worker(url);
          this.worker.onmessage = (event) => {
            const { id, result, error } = event.data;
            const waiting = this.pending.get(id);
            if (!waiting) return;
            this.pending.delete(id);
            if (error) waiting.reject(new Error(error));
            else waiting.resolve(result);
          };
          this.worker.onerror = (event) => {
            console.warn("the explorer's worker failed; running on the page instead", event.message);
            this.worker = null;
            for (const waiting of this.pending.values()) waiting.reject(new Error("worker failed"));
            this.pending.clear();
          };
        } catch (error) {
          this.worker = null; // a browser that refuses workers from a file: the page's thread it is
        }
      }
    }

    /** The model of step `index` (decoded once): its weights, and its means for mean ablation. */
    async model(index) {
      if (this.models[index]) return this.models[index];
      const series = LIVE.series;
      const weights = (series && series.weights[index]) || LIVE.weights;
      const meansPacked = series ? (series.weights[index] ? series.means[index] : LIVE.means) : LIVE.means;
      const bytes = await inflate(weights.data);
      const meanBytes = meansPacked ? await inflate(meansPacked.data) : null;
      const tensors = TL.tensors(bytes, weights.manifest, weights.dtype);
      const means = meanBytes ? TL.tensors(meanBytes, meansPacked.manifest, "float32") : {};
      const model = new TL.Model(LIVE.spec, tensors, means);
      this.models[index] = model;
      this.runners[index] = new TL.Runner(model);
      if (this.worker) {
        this.worker.postMessage({
          type: "model", index, spec: LIVE.spec, weights: bytes.slice().buffer, manifest: weights.manifest, dtype: weights.dtype,
          means: meanBytes ? meanBytes.slice().buffer : null, meansManifest: meansPacked ? meansPacked.manifest : null,
        });
      }
      return model;
    }

    async view(index, request) {
      await this.model(index);
      if (!this.worker) return TL.viewRun(this.models[index], this.runners[index], request);
      const id = this.nextId++;
      return new Promise((resolve, reject) => {
        this.pending.set(id, { resolve, reject });
        this.worker.postMessage({ type: "view", id, index, request });
      }).catch((error) => {
        if (this.worker) throw error;
        return TL.viewRun(this.models[index], this.runners[index], request); // the worker died: run here
      });
    }
  }

  /** Multiply-adds of one forward pass over T positions (to choose between the page and a worker). */
  function cost(T) {
    const c = LIVE.spec.config;
    const D = c.model_dim;
    const perLayer = T * (4 * D * D + 2 * D * c.feedforward_dim) + 2 * T * T * D;
    return LIVE.spec.stacks.length * c.num_layers * perLayer + T * D * c.output_classes;
  }
  const WORKER_COST = 1e8; // ~0.1 s of JavaScript: above it, the views' runs go to a worker

  // ------------------------------------------------------------------------------- the input box
  /** The box's text as tokens, as the task writes text: characters (separator ""), or tokens apart.
   *  Returns {ids, bad: [{start, end, token}], spans: [[start, end]] per token}. */
  function tokenize(text) {
    const index = live.index;
    const ids = [];
    const bad = [];
    const spans = [];
    if (LIVE.input.separator === "") {
      for (let i = 0; i < text.length; ) {
        const ch = String.fromCodePoint(text.codePointAt(i));
        const id = index.get(ch);
        if (id === undefined) bad.push({ start: i, end: i + ch.length, token: ch });
        else ids.push(id);
        spans.push([i, i + ch.length]);
        i += ch.length;
      }
    } else {
      const re = /\S+/g;
      let match;
      while ((match = re.exec(text)) !== null) {
        const id = index.get(match[0]);
        if (id === undefined) bad.push({ start: match.index, end: match.index + match[0].length, token: match[0] });
        else ids.push(id);
        spans.push([match.index, match.index + match[0].length]);
      }
    }
    return { ids, bad, spans };
  }

  /** The box's problems, in one message naming the value and what to do; marks in the box. */
  function checkInput(text) {
    const parsed = tokenize(text);
    const marks = [...parsed.bad];
    const input = LIVE.input;
    const what = input.separator === "" ? "character" : "token";
    let problem = null;
    if (parsed.bad.length) {
      const names = [...new Set(parsed.bad.map((b) => JSON.stringify(b.token)))];
      problem = `${names.length === 1 ? `the ${what} ${names[0]} is` : `the ${what}s ${names.slice(0, 8).join(", ")}${names.length > 8 ? ", ..." : ""} are`} not in the model's vocabulary: ` +
        `remove ${names.length === 1 ? "it" : "them"} (the model knows ${vocabulary()})`;
    } else if (input.mode === "source") {
      const specials = parsed.ids.map((id, i) => [id, i]).filter(([id]) => input.specials.includes(id));
      if (specials.length) {
        for (const [, i] of specials) marks.push({ start: parsed.spans[i][0], end: parsed.spans[i][1] });
        problem = `the source holds ${[...new Set(specials.map(([id]) => LIVE.spec.vocab[id]))].join(", ")}: write only the task's symbols`;
      }
    }
    if (!problem && parsed.ids.length === 0) problem = "the input is empty: type a few tokens";
    const limit = positionsFor();
    if (!problem && parsed.ids.length > limit) {
      problem = `the input has ${parsed.ids.length} tokens, more than the ${limit} the model reads ` +
        `(its context, max_len=${LIVE.spec.config.max_len}${input.mode === "source" && LIVE.spec.numInputs === 1 ? ", with <sep> and the output" : ""}): shorten it; nothing is cut`;
      const start = parsed.spans[limit] ? parsed.spans[limit][0] : text.length;
      marks.push({ start, end: text.length });
    }
    return { ...parsed, marks, problem };
  }

  const vocabulary = () => {
    const tokens = LIVE.spec.vocab.filter((_, i) => LIVE.input.mode !== "source" || !LIVE.input.specials.includes(i));
    const text = LIVE.input.separator === "" ? JSON.stringify(tokens.join("")) : tokens.join(" ");
    return text.length > 120 ? text.slice(0, 117) + "..." : text;
  };

  /** How many tokens the box may hold: the context; a decoder-only model's source leaves room for
   *  <sep> and at least one output token. */
  function positionsFor() {
    const c = LIVE.spec.config;
    if (LIVE.input.mode === "source" && LIVE.spec.numInputs === 1) return c.max_len - 2;
    return c.max_len;
  }

  function markInput(text, marks) {
    const backdrop = $("input-backdrop");
    const parts = [];
    let at = 0;
    for (const m of [...marks].sort((a, b) => a.start - b.start)) {
      if (m.start < at) continue;
      parts.push(text.slice(at, m.start), el("mark", { text: text.slice(m.start, m.end) }));
      at = m.end;
    }
    parts.push(text.slice(at) + " ");
    backdrop.replaceChildren(...parts);
    const box = $("input-box");
    box.rows = Math.min(6, Math.max(1, text.split("\n").length, Math.ceil(text.length / 110)));
    backdrop.scrollTop = box.scrollTop;
    box.setAttribute("aria-invalid", marks.length ? "true" : "false");
  }

  function say(text, bad = false) {
    const box = $("input-message");
    box.textContent = text;
    box.classList.toggle("bad", bad);
  }

  // ------------------------------------------------------------------------------ expected outputs
  /** The expected output at each position of the last model input (-100: none), by the task's rule
   *  for an edited input (the first input keeps the labels it was made with). */
  function labelsFor(tokens, inputs) {
    const input = LIVE.input;
    const T = inputs[inputs.length - 1].length;
    const none = new Array(T).fill(-100);
    const rule = input.label_rule;
    if (!rule) return none;
    if (rule === "next") return inputs[0].map((_, t) => (t + 1 < T ? inputs[0][t + 1] : -100));
    if (rule === "induction") {
      const ids = inputs[0];
      return ids.map((id, t) => {
        if (t < 1 || t >= ids.length - 1) return -100;
        const earlier = ids.slice(0, t).lastIndexOf(id);
        return earlier >= 0 ? ids[earlier + 1] : -100;
      });
    }
    const expected = expectedOutput(rule, tokens);
    if (!expected) return none;
    const c = LIVE.spec.config;
    if (!LIVE.spec.generates) return none.map((_, t) => (t < expected.length ? expected[t] : -100));
    const outputs = expected.concat(c.eos_id === null ? [] : [c.eos_id]);
    const first = LIVE.spec.numInputs === 2 ? 0 : tokens.length; // the row that predicts output 0
    return none.map((_, t) => (t >= first && t - first < outputs.length ? outputs[t - first] : -100));
  }

  /** A sequence-to-sequence task's output for a source (token ids), where the page knows the rule. */
  function expectedOutput(rule, tokens) {
    if (rule === "reverse") return tokens.slice().reverse();
    if (rule === "sort_unique") return [...new Set(tokens)].sort((a, b) => a - b);
    return null;
  }

  // ------------------------------------------------------------------------------ a live update
  /** Run the model on the box's input (and the removed heads, and the step) and rebuild the views.
   *  Sets window.transformerLab.lastUpdateMs (from the call to the views drawn) and forwardMs (the
   *  model's runs alone, generation included). */
  async function update() {
    const t0 = performance.now();
    const seq = ++live.seq;
    const text = $("input-box").value;
    const checked = checkInput(text);
    markInput(text, checked.marks);
    if (checked.problem) {
      say(checked.problem, true);
      live.problem = checked.problem;
      return;
    }
    live.problem = null;
    const lengths = LIVE.input.trained_lengths;
    const request = { mode: LIVE.input.mode, tokens: checked.ids, ablate: removedPairs(), ablation: live.method };
    // the first input, as the model read it in Python (a generated output included): what the
    // precomputed views show; edited (or with heads removed), the model writes its own output again
    if (text === LIVE.input.text && (live.removed.size === 0 || LIVE.input.mode === "tokens")) request.inputs = LIVE.input.inputs;
    let result;
    try {
      result = await live.engine.view(live.step, request);
    } catch (error) {
      say(`the page could not run the model on this input: ${message(error)}`, true);
      return;
    }
    if (seq !== live.seq) return; // a newer input is on its way
    live.last = { inputs: result.inputs, logits: result.logits };
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
    api.forwardMs = result.forwardMs;
    api.lastUpdateMs = performance.now() - t0;
    // where the time went: the run (the forward pass, and its transfer from a worker), the numbers for
    // the views (maps, predictions, rollout), drawing the view shown
    api.updateParts = { run: t1 - t0, numbers: t2 - t1, draw: performance.now() - t2 };
    api.updates = (api.updates || 0) + 1;
    saveFragment();
  }

  /** What the views draw, from a run: the attention maps by kind, predictions, rollout, the header. */
  function apply(result, labels, first) {
    const spec = LIVE.spec;
    const vocab = spec.vocab;
    const names = LIVE.input.names;
    const tokens = result.inputs.map((ids) => ids.map((id) => vocab[id]));
    live.inputs = result.inputs;
    live.generated = result.output ? result.output.map((id) => vocab[id]) : null;
    // attention maps, grouped as the precomputed page groups them
    kinds = DATA.kinds.map((k) => {
      const layers = spec.layers.map((layer, i) => ({ ...layer, i })).filter((layer) => layer.group === k.name);
      const parts = layers.map((layer) => result.patterns[layer.i]);
      const { Tq, Tk } = parts[0];
      const data = new Float32Array(parts.length * HEADS * Tq * Tk);
      parts.forEach((p, l) => data.set(p.data, l * HEADS * Tq * Tk));
      return { ...k, first: 0, rows: tokens[layers[0].queries], cols: tokens[layers[0].keys], stack: new FloatStack([parts.length, HEADS, Tq, Tk], data) };
    });
    // predictions: top-3 per position of the last input
    const { T, C } = result;
    const promptEnd = LIVE.input.mode === "source" && spec.numInputs === 1 ? result.inputs[0].indexOf(spec.config.sep_id) : 0;
    const rows = [];
    const predicted = [];
    for (let t = 0; t < T; t++) {
      const logp = TL.logSoftmax(result.logits, t * C, C);
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
    current.predictions = { ...DATA.predictions, rows };
    live.predicted = predicted;
    live.labels = labels;
    const firstLabel = labels.findIndex((l) => l !== -100);
    const blank = Math.max(promptEnd, firstLabel > 0 ? firstLabel : 0);
    const outputRows = predicted.map((id, t) => (t < blank ? "" : names[id]));
    current.input = tokens[0];
    current.output = outputRows;
    current.overlayRows = outputRows;
    current.overlayCols = tokens[0];
    // rollout from the page's own maps (computed when a view first asks for it); relevance (gradients)
    // only where it is still the first view's
    const isFirst = first && live.removed.size === 0 && live.step === live.firstStep;
    const S = tokens[0].length;
    overlays = overlays.map((o) => {
      if (o.name !== "rollout") return { ...o, stack: isFirst ? o.original : o.stack, stale: !isFirst };
      const rolled = { name: o.name, title: o.title, original: o.original, stale: false, vmax: null };
      let stack = null;
      Object.defineProperty(rolled, "stack", {
        enumerable: true,
        get: () => {
          if (stack) return stack;
          let values;
          if (DATA.overlays.kind === "cross") {
            const group = (name) => spec.layers.map((layer, i) => (layer.group === name ? result.patterns[i] : null)).filter(Boolean);
            values = TL.encoderDecoderRollout(group("encoder"), group("decoder"), group("cross"));
          } else {
            values = TL.rollout(result.patterns);
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
    if (isFirst && !live.tableRecomputed) {
      current.ablation = DATA.ablation;
      current.ablationNote = "";
    } else if (!live.tableFor || live.tableFor !== tableKey()) {
      current.ablationNote = current.ablation
        ? "This table is for another input, step or set of removed heads than the views show: recompute it for this one."
        : "";
    }
    live.patch = null;
  }

  const tableKey = () => JSON.stringify([live.inputs, live.step, live.method]);

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

  /** The head-ablation table for the current input (as the Python side computes it, nothing else
   *  removed): the drop of the mean log p of the model's own predictions, per layer and head. */
  async function recomputeAblation() {
    const button = $("ablation-recompute");
    button.disabled = true;
    $("ablation-caption").textContent = "Computing: one forward pass per head...";
    await new Promise((resolve) => setTimeout(resolve, 20));
    try {
      const model = await live.engine.model(live.step);
      const labels = live.labels || [];
      const labelled = labels.map((l) => l !== -100);
      const positions = labelled.some(Boolean) ? labelled : null;
      const table = TL.ablationTable(model, live.inputs, { ablation: live.method, positions });
      const layers = LIVE.spec.layers;
      const groups = layers.map((l) => l.group);
      current.ablation = {
        layers: layers.map((l) => l.name),
        labels: layers.map((l) => l.label),
        kinds: groups,
        indices: groups.map((g, i) => groups.slice(0, i).filter((x) => x === g).length),
        baseline: table.baseline,
        drops: table.drops,
        positions: table.positions,
        method: live.method,
      };
      current.ablationNote = "";
      live.tableRecomputed = true;
      live.tableFor = tableKey();
      drawn.ablation = false;
      if (state.view === "ablation") show("ablation");
    } finally {
      button.disabled = false;
    }
  }

  // ------------------------------------------------------------------------------- patching view
  function drawPatchingView() {
    const strip = $("patch-tokens");
    const tokens = live ? tokenize($("input-box").value).ids : [];
    strip.replaceChildren(
      ...tokens.map((id, i) => el("button", { class: "patch-token", "data-index": i, "aria-pressed": live.patch && live.patch.position === i, text: shown(LIVE.spec.vocab[id]) }))
    );
    const panels = $("patch-panels");
    panels.replaceChildren();
    if (!live.patch) {
      $("patch-info").textContent = "Click a token above to corrupt it.";
      return;
    }
    const p = live.patch;
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
    const vocab = LIVE.spec.vocab;
    const byStack = {};
    for (const [name, row] of Object.entries(r.resid)) {
      const stack = name.startsWith("decoder.") ? "decoder." : name.startsWith("encoder.") ? "encoder." : "";
      (byStack[stack] = byStack[stack] || []).push([name, row]);
    }
    LIVE.spec.stacks.forEach((stack, s) => {
      const entries = byStack[stack.prefix] || [];
      const rows = entries.map(([name]) => name.replace(stack.prefix, "").replace("blocks.", "L").replace(".hook_resid_pre", " in").replace(".hook_resid_post", " out"));
      const values = entries.map(([, row]) => row);
      const cols = p.corrupted[stack.input].map((id) => vocab[id]);
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
    if (live.problem) {
      live.patch = { error: `Fix the input first: ${live.problem}` };
      drawPatchingView();
      return;
    }
    const model = await live.engine.model(live.step);
    const tokens = tokenize($("input-box").value).ids;
    const symbols = LIVE.spec.vocab.map((_, i) => i).filter((i) => !LIVE.input.specials.includes(i));
    const from = tokens[position];
    const to = symbols[(symbols.indexOf(from) + 1) % symbols.length];
    const bad = tokens.slice();
    bad[position] = to;
    const vocab = LIVE.spec.vocab;
    const clean = live.inputs;
    // the corrupted input read with the clean output forced (positions up to the answer are what the
    // task's own corrupted example holds there)
    const corrupted = clean.map((ids, i) => (i === 0 ? bad.concat(ids.slice(bad.length)) : ids.slice()));
    const cleanLogits = model.run(clean).logits;
    const badLogits = model.run(corrupted).logits;
    const C = model.classes;
    const T = clean[clean.length - 1].length;
    const outputsFrom = LIVE.input.mode === "source" && LIVE.spec.numInputs === 1 ? tokens.length : 0;
    const start = Math.max(outputsFrom, LIVE.spec.stacks[LIVE.spec.stacks.length - 1].causal && LIVE.spec.numInputs === 1 ? position : 0);
    let answer = null;
    for (let t = start; t < T; t++) {
      const a = TL.argmax(cleanLogits, t * C, C);
      const b = TL.argmax(badLogits, t * C, C);
      if (a !== b) {
        answer = { position: t, cleanAnswer: a, corruptedAnswer: b };
        break;
      }
    }
    const names = LIVE.input.names;
    live.patch = { position, from: vocab[from], to: vocab[to], corrupted };
    if (!answer) {
      live.patch.error = `Token ${position} ${shown(vocab[from])} → ${shown(vocab[to])} changes none of the model's predictions: nothing to restore. Try another token.`;
      drawPatchingView();
      return;
    }
    live.patch.answer = answer;
    live.patch.cleanName = names[answer.cleanAnswer];
    live.patch.badName = names[answer.corruptedAnswer];
    live.patch.progress = "starting";
    drawPatchingView();
    const seq = ++live.patchSeq;
    const t0 = performance.now();
    try {
      live.patch.result = await TL.patching(model, clean, corrupted, answer, {
        yieldEvery: 16,
        onProgress: (done, total) => {
          if (seq !== live.patchSeq) return;
          live.patch.progress = `${done} of ${total} runs`;
          $("patch-info").textContent = `Patching: ${done} of ${total} runs`;
        },
        cancelled: () => seq !== live.patchSeq,
      });
    } catch (error) {
      if (seq !== live.patchSeq) return;
      live.patch.error = `Patching failed: ${message(error)}`;
    }
    if (seq !== live.patchSeq) return;
    live.patch.progress = null;
    api.patchingMs = performance.now() - t0;
    drawPatchingView();
  }

  // ------------------------------------------------------------------------------ removed heads
  function drawHeadsPanel() {
    const buttons = $("heads-buttons");
    const byLayer = LIVE.spec.layers.map((layer, l) =>
      el("span", { class: "heads-layer" }, ...Array.from({ length: HEADS }, (_, h) =>
        el("button", { class: "head-toggle", "data-layer": l, "data-head": h, "aria-pressed": live.removed.has(`${l}:${h}`), title: `${layer.name}, head ${h}`, text: `${layer.label}H${h}` })))
    );
    buttons.replaceChildren(...byLayer);
    $("ablation-method").value = live.method;
  }

  function toggleHead(layer, h) {
    const key = `${layer}:${h}`;
    if (live.removed.has(key)) live.removed.delete(key);
    else live.removed.add(key);
    drawHeadsPanel();
    update().catch(fail);
  }

  // -------------------------------------------------------------------------------- generation
  /** Continue the text with the model (temperature and top-k as sample.py; 0: greedy), as far as the
   *  context allows, then show the longer input. */
  async function generate() {
    const model = await live.engine.model(live.step);
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
    const out = model.generate(tokens, count, { temperature, topK, ablate: removedPairs(), ablation: live.method });
    api.generateMs = performance.now() - t0;
    const added = out.slice(tokens.length).map((id) => LIVE.spec.vocab[id]);
    const box = $("input-box");
    box.value = box.value + (LIVE.input.separator === "" ? added.join("") : (box.value.trim() ? " " : "") + added.join(" "));
    await update();
  }

  // ------------------------------------------------------------------------------ the step slider
  async function setStep(index) {
    live.step = index;
    if (live.series) {
      $("step-slider").value = index;
      $("step-value").textContent = live.series.labels[index];
    }
    live.tableRecomputed = false;
    await update();
  }

  // ================================================================================ URL fragment
  /** The view a student reached, in the URL (bookmark it, send it): input, view, kind, layer, query,
   *  removed heads and their ablation, step. */
  function saveFragment() {
    if (!ready) return;
    const params = new URLSearchParams();
    params.set("view", state.view);
    if (kinds.length > 1) params.set("kind", kind().name);
    params.set("layer", state.layer);
    if (state.selected && state.selected.side === "query") params.set("query", state.selected.index);
    if (live) {
      const text = $("input-box").value;
      if (text !== LIVE.input.text) params.set("input", text);
      if (live.removed.size) params.set("off", removedLabels().join(","));
      if (live.method !== "zero") params.set("ablation", live.method);
      if (live.series && live.step !== live.firstStep) params.set("step", live.series.steps[live.step]);
    }
    try {
      history.replaceState(null, "", "#" + params.toString());
    } catch (error) {
      // an inline page (Jupyter's srcdoc iframe) may have no URL to write to
    }
  }

  // Reading a fragment: every field is checked against its own type and range; a value the page
  // cannot use is ignored (the default stays) and named in a notice under the input/output lines.
  const INPUT_LIMIT = 100000; // characters the input box takes from the URL or from setInput
  const inputFits = (text) => text.length <= INPUT_LIMIT;
  const FIELDS = ["view", "kind", "layer", "query", "input", "off", "ablation", "step"];
  const LIVE_FIELDS = ["input", "off", "ablation", "step"];
  const NOTICES_SHOWN = 8;
  const notices = [];

  /** The fragment's fields, read once (the first of a repeated field), as a Map of strings. */
  function readFragment() {
    const fields = new Map();
    let hash = "";
    try {
      hash = window.location.hash.slice(1);
    } catch (error) {
      return fields; // an inline page (Jupyter's srcdoc iframe) may have no URL
    }
    const seen = new Set();
    for (const [key, value] of new URLSearchParams(hash)) {
      if (seen.has(key)) continue;
      seen.add(key);
      if (FIELDS.includes(key)) fields.set(key, value);
      else ignore(key, value, `the fragment's fields are ${FIELDS.join(", ")}`);
    }
    return fields;
  }

  const clip = (text, n = 40) => (text.length > n ? text.slice(0, n - 3) + "..." : text);

  /** Say, in one sentence, that field=value is ignored and why (what is allowed). */
  function ignore(field, value, why) {
    const v = value === "" || /\s/.test(value) ? JSON.stringify(clip(value)) : clip(value);
    notices.push({ field: clip(field, 24), text: `URL fragment: ${clip(field, 24)}=${v} is ignored; ${why}.` });
    let box = $("fragment-notice");
    if (!box) {
      box = el("div", { id: "fragment-notice", class: "fragment-notice", role: "status" });
      $("io").after(box);
    }
    const line = (attrs) => el("p", { class: "live-status note", style: { margin: "4px 0 0" }, ...attrs });
    const lines = notices.slice(0, NOTICES_SHOWN).map((n) => line({ "data-field": n.field, text: n.text }));
    if (notices.length > NOTICES_SHOWN) lines.push(line({ text: `URL fragment: ${notices.length - NOTICES_SHOWN} more fields are ignored.` }));
    box.replaceChildren(...lines);
  }

  /** A field's text as an integer from low to high (decimal digits, nothing else), or null. */
  function integerField(text, low, high) {
    if (!/^-?\d{1,15}$/.test(text)) return null;
    const value = Number(text);
    return value >= low && value <= high ? value : null;
  }
  const integers = (low, high) => (low === high ? `use ${low}` : `use an integer from ${low} to ${high}`);
  const listed = (values) => (values.length > 8 ? [...values.slice(0, 5), "...", ...values.slice(-2)] : values).join(", ");

  /** The fragment's view part: view, kind, layer, query (precomputed pages too). Returns the view to
   *  show; a layer the page stores only once its model runs, and a query of an input the URL brings,
   *  wait in `wanted` for the first run (applyFragmentAfterRun). */
  function applyFragmentView(fields, wanted) {
    let view = null;
    if (fields.has("view")) {
      const name = fields.get("view");
      const views = Object.keys(DRAW).filter((v) => v !== "patching" || LIVE);
      if (Object.hasOwn(DRAW, name) && views.includes(name)) view = name;
      else ignore("view", name, `use ${views.join(", ")}`);
    }
    if (fields.has("kind")) {
      const name = fields.get("kind");
      const index = kinds.findIndex((k) => k.name === name);
      if (index >= 0) {
        state.kind = index;
        state.layer = lastLayer(kind());
        state.enlarged = { layer: state.layer, head: 0 };
      } else {
        ignore("kind", name, `use ${kinds.map((k) => k.name).join(", ")}`);
      }
    }
    if (fields.has("layer")) {
      const k = kind();
      const layer = integerField(fields.get("layer"), 0, lastLayer(k));
      if (layer === null) ignore("layer", fields.get("layer"), integers(0, lastLayer(k)));
      else if (layer < firstLayer(k)) wanted.layer = layer; // not stored: computed once the model runs
      else state.layer = layer;
    }
    if (fields.has("query")) {
      const newInput = LIVE && fields.has("input") && inputFits(fields.get("input"));
      if (newInput) wanted.query = fields.get("query"); // the query positions are the new input's
      else applyQuery(fields.get("query"));
    }
    return view;
  }

  /** Select query `text` of the kind shown, if it is one of its query positions. */
  function applyQuery(text) {
    const n = kind().rows.length;
    const index = integerField(text, 0, n - 1);
    if (index === null) ignore("query", text, `${integers(0, n - 1)} (a query position)`);
    else state.selected = { side: "query", index };
    return index !== null;
  }

  /** The fragment's live part: input, removed heads, ablation, step (before the first update). */
  function applyFragmentLive(fields) {
    if (fields.has("input")) {
      const text = fields.get("input");
      if (inputFits(text)) $("input-box").value = text;
      else ignore("input", text, `it has ${text.length} characters; use at most ${INPUT_LIMIT}`);
    }
    if (fields.has("ablation")) {
      const name = fields.get("ablation");
      if (name === "zero" || (name === "mean" && LIVE.means)) live.method = name;
      else ignore("ablation", name, LIVE.means ? "use zero or mean" : "use zero (this page carries no means for mean ablation)");
    }
    if (fields.has("off")) {
      const labels = LIVE.spec.layers.map((l) => l.label);
      const keys = new Map(); // "L0H1" -> "0:1", for the heads the model has
      labels.forEach((label, l) => {
        for (let h = 0; h < HEADS; h++) keys.set(`${label}H${h}`, `${l}:${h}`);
      });
      const unknown = [];
      for (const part of fields.get("off").split(",")) {
        const name = part.trim();
        if (keys.has(name)) live.removed.add(keys.get(name));
        else if (name) unknown.push(name);
      }
      if (unknown.length) ignore("off", unknown.join(","), `use head labels such as ${labels[0]}H0 (layers ${listed(labels)}; heads H0 to H${HEADS - 1})`);
      drawHeadsPanel();
    }
    if (fields.has("step")) {
      const text = fields.get("step");
      const steps = live.series ? live.series.steps : null;
      const index = steps && /^-?\d{1,15}$/.test(text) ? steps.indexOf(Number(text)) : -1;
      if (index >= 0) {
        live.step = index;
        $("step-slider").value = index;
        $("step-value").textContent = live.series.labels[index];
      } else {
        ignore("step", text, steps ? `use one of the steps ${listed(steps)}` : "this page has no step slider");
      }
    }
  }

  /** What waited for the first run: a layer the page did not store, a query of the URL's input. */
  function applyFragmentAfterRun(wanted) {
    let changed = false;
    if (wanted.layer !== undefined) {
      const k = kind();
      if (wanted.layer >= firstLayer(k)) {
        state.layer = wanted.layer;
        changed = true;
      } else {
        ignore("layer", String(wanted.layer), `${integers(firstLayer(k), lastLayer(k))} (the model has not run on a valid input)`);
      }
    }
    if (wanted.query !== undefined) changed = applyQuery(wanted.query) || changed;
    if (changed) {
      redraw();
      scrollToQuery();
    }
  }

  // =================================================================================== the API
  /** window.transformerLab: the page's model for tests and other pages (see DESIGN.md). Exists only
   *  once the weights are decoded. */
  const api = {};

  // Every argument is checked (TL.checks) before anything runs: a bad one throws an Error naming the
  // function, the argument, its value and what is allowed. The functions that return a Promise throw
  // at the call, before any Promise. Generation writes at most GENERATE_CAP tokens per call (or the
  // model's context, if larger), so that a call cannot freeze the tab.
  const GENERATE_CAP = 256;

  function buildApi(model) {
    const C = TL.checks;
    const current = () => live.engine.models[live.step] || model;
    const stepCount = live.series ? live.series.steps.length : 1;
    const cap = (m) => Math.max(GENERATE_CAP, m.config.max_len);
    const capWhy = (m) => ` (the page writes at most ${cap(m)} tokens per call)`;
    const decoderLM = (m) => m.spec.generates && m.spec.stacks.length === 1;
    /** ablate and ablation, as forward, generate and answer take them. */
    const removal = (fn, m, o) => ({ ablate: C.heads(fn, "ablate", o.ablate, m), ablation: C.method(fn, "ablation", o.ablation, m) });
    /** The positions whose logits a run returns: the last input's. */
    const outputs = (m, inputs) => inputs[m.spec.stacks[m.spec.stacks.length - 1].input].length;

    Object.assign(api, {
      vocab: LIVE.spec.vocab.slice(),
      config: Object.freeze({ ...LIVE.spec.config }), // a copy: the page's model keeps its own
      layers: LIVE.spec.layers.map((l) => l.name),
      labels: LIVE.spec.layers.map((l) => l.label),
      /** {logits: number[][], patterns: number[][][][]} for token ids (or {source, target}); opts:
       *  ablate [[layer, head], ...] (layers in interventions.attention_layers order), ablation
       *  "zero" | "mean". Synchronous. */
      forward: (input, opts) => {
        const m = current();
        const inputs = C.inputs("forward", "input", input, m);
        const o = C.fields("forward", "opts", opts, ["ablate", "ablation"]);
        return m.forward(inputs, removal("forward", m, o));
      },
      /** A language model's continuation (every token, prompt included; temperature 0: greedy), or an
       *  encoder-decoder's greedy output for {source}. */
      generate: (input, opts) => {
        const fn = "generate";
        const m = current();
        if (!m.spec.generates) C.fail(fn, "this model", "writes no text (it classifies each position)", "forward or answer");
        if (!decoderLM(m)) {
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
        const random = given(o.seed) ? TL.seeded(C.integer(fn, "seed", o.seed, 0, 4294967295)) : Math.random;
        return m.generate(tokens, maxNew, { temperature, topK, topP, random, ...removal(fn, m, o) });
      },
      /** The greedy output for a prompt (an encoder's class per position; a decoder's new tokens; an
       *  encoder-decoder's output for a source); opts: ablate, ablation, maxNew (language models). */
      answer: (prompt, opts) => {
        const fn = "answer";
        const m = current();
        const tokens = C.tokens(fn, "prompt", prompt, m);
        const o = C.fields(fn, "opts", opts, decoderLM(m) ? ["maxNew", "ablate", "ablation"] : ["ablate", "ablation"]);
        const run = removal(fn, m, o);
        if (o.maxNew !== undefined && o.maxNew !== null) run.maxNew = C.integer(fn, "maxNew", o.maxNew, 0, cap(m), capWhy(m));
        return m.answer(tokens, run);
      },
      /** {baseline, drops[layer][head], positions}; opts: ablation, positions (a boolean per output). */
      ablationTable: (input, opts) => {
        const fn = "ablationTable";
        const m = current();
        const inputs = C.inputs(fn, "input", input, m);
        const o = C.fields(fn, "opts", opts, ["ablation", "positions"]);
        const positions = o.positions === undefined || o.positions === null ? undefined : C.flags(fn, "positions", o.positions, outputs(m, inputs));
        return TL.ablationTable(m, inputs, { ablation: C.method(fn, "ablation", o.ablation, m), positions });
      },
      /** Activation patching of every residual position and head (interventions.activation_patching);
       *  answer: {position, cleanAnswer, corruptedAnswer}; opts: heads, yieldEvery, onProgress, cancelled. */
      patching: (clean, corrupted, answer, opts) => {
        const fn = "patching";
        const m = current();
        const a = C.inputs(fn, "clean", clean, m);
        const b = C.inputs(fn, "corrupted", corrupted, m);
        const lengths = (inputs) => `[${inputs.map((ids) => ids.length).join(", ")}]`;
        if (lengths(a) !== lengths(b)) C.fail(fn, "corrupted", `has lengths ${lengths(b)} where clean has ${lengths(a)}`, "inputs as long as clean's");
        if (!C.isObject(answer)) C.bad(fn, "answer", answer, "is not an object", "{position, cleanAnswer, corruptedAnswer}");
        const given = C.fields(fn, "answer", answer, ["position", "cleanAnswer", "corruptedAnswer"]);
        const T = outputs(m, a);
        const picked = {
          position: C.integer(fn, "answer.position", given.position, 0, T - 1),
          cleanAnswer: C.integer(fn, "answer.cleanAnswer", given.cleanAnswer, 0, m.classes - 1),
          corruptedAnswer: C.integer(fn, "answer.corruptedAnswer", given.corruptedAnswer, 0, m.classes - 1),
        };
        const o = C.fields(fn, "opts", opts, ["heads", "yieldEvery", "onProgress", "cancelled"]);
        return TL.patching(m, a, b, picked, {
          heads: C.optional(fn, "heads", o.heads, "boolean"),
          yieldEvery: o.yieldEvery === undefined ? undefined : C.integer(fn, "yieldEvery", o.yieldEvery, 1, Infinity),
          onProgress: C.optional(fn, "onProgress", o.onProgress, "function"),
          cancelled: C.optional(fn, "cancelled", o.cancelled, "function"),
        });
      },
      /** Type into the box (as a student would) and wait for the views; resolves to the box's problem
       *  (null: none). */
      setInput: (text) => {
        C.text("setInput", "text", text, INPUT_LIMIT);
        $("input-box").value = text;
        return update().then(() => live.problem);
      },
      /** Remove these heads ([[layer, head], ...]; [] restores all), by "zero" or "mean" (default: as
       *  the page has it), and wait for the views. */
      setHeads: (pairs, method) => {
        const m = current();
        const heads = C.heads("setHeads", "pairs", pairs, m, true);
        const how = method === undefined || method === null ? live.method : C.method("setHeads", "method", method, m);
        live.removed = new Set(heads.map(([l, h]) => `${l}:${h}`));
        live.method = how;
        drawHeadsPanel();
        return update();
      },
      /** Show the model of step `index` (0 to steps.length - 1) and wait for the views. */
      setStep: (index) => setStep(C.integer("setStep", "index", index, 0, stepCount - 1)),
      steps: live.series ? live.series.steps.slice() : null,
      /** Corrupt token `position` of the box's input and patch (the patching view's click). */
      patchToken: (position) => {
        const n = tokenize($("input-box").value).ids.length;
        // a box with a problem: the patching view says to fix it first, at any position
        C.integer("patchToken", "position", position, 0, live.problem ? Infinity : n - 1);
        return runPatching(position);
      },
      /** The page's model of step `index` (default: the step shown), once decoded. */
      model: (index) => live.engine.models[index === undefined ? live.step : C.integer("model", "index", index, 0, stepCount - 1)],
    });
    // what changes as the student works: read at the time it is asked for
    const now = { step: () => live.step, patch: () => live.patch, inputs: () => live.inputs, problem: () => live.problem };
    for (const [name, get] of Object.entries(now)) Object.defineProperty(api, name, { get, enumerable: true });
    window.transformerLab = api;
  }

  /** fields: the URL fragment's (read once, by main, before the page rewrites it); wanted: what of it
   *  waits for the first run. */
  async function startLive(fields, wanted) {
    const t0 = performance.now();
    if (!TL) throw new Error("the page's model script is missing");
    const series = LIVE.series;
    const first = series ? series.current : 0;
    const T = LIVE.input.inputs.reduce((n, ids) => Math.max(n, ids.length), 0);
    // window.transformerLabOptions = {worker: true | false} (set before the page loads) overrides the choice
    const options = window.transformerLabOptions || {};
    const useWorker = typeof Worker !== "undefined" && (options.worker ?? cost(T) > WORKER_COST);
    live = {
      engine: new Engine(useWorker),
      index: new Map(LIVE.spec.vocab.map((t, i) => [t, i])),
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
    const model = await live.engine.model(first);
    timings.decodeWeights = performance.now() - t0;
    // the input box, the heads panel, generation, the slider, the patching tab
    $("live-input").hidden = false;
    const box = $("input-box");
    box.value = LIVE.input.text;
    box.addEventListener("input", () => update().catch(fail));
    box.addEventListener("scroll", () => ($("input-backdrop").scrollTop = box.scrollTop));
    if (LIVE.spec.generates && LIVE.input.mode === "tokens") {
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
      live.removed.clear();
      drawHeadsPanel();
      update().catch(fail);
    });
    $("ablation-method").disabled = !LIVE.means;
    $("ablation-method").title = LIVE.means ? "" : "this page carries no means: zero ablation only";
    $("ablation-method").addEventListener("change", (event) => {
      live.method = event.target.value;
      if (live.removed.size) update().catch(fail);
      else saveFragment();
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
    buildApi(model);
    // the first run: the page's forward pass on the precomputed input, checked against PyTorch's logits
    const check = await inflate(LIVE.check.data);
    const expected = new Float32Array(check.buffer, check.byteOffset, check.length / 4);
    applyFragmentLive(fields);
    await update();
    applyFragmentAfterRun(wanted);
    // the check: the first run's logits, where it ran the first input with nothing removed (else a run
    // of its own, where that is cheap)
    const plain = live.removed.size === 0 && live.step === live.firstStep;
    const ran = live.last && plain && JSON.stringify(live.last.inputs) === JSON.stringify(LIVE.input.inputs)
      ? live.last.logits
      : !live.engine.worker ? live.engine.models[live.firstStep].run(LIVE.input.inputs).logits : null;
    if (ran) {
      let diff = 0;
      let scale = 0;
      for (let i = 0; i < expected.length; i++) {
        diff = Math.max(diff, Math.abs(ran[i] - expected[i]));
        scale = Math.max(scale, Math.abs(expected[i]));
      }
      api.check = { maxDiff: diff, scale, relative: diff / Math.max(scale, 1e-12) };
    }
    const status = $("live-status");
    const worker = live.engine.worker ? " (in a Web Worker)" : "";
    status.textContent = `Live: the model runs in this page${worker}; its weights take ${(LIVE.chars / 1e6).toFixed(2)} MB of the file` +
      (LIVE.weights.dtype === "float16" ? " as float16 (rounded: the logits move by about 1e-3 of their scale from the float32 model's)" : "") +
      (api.check ? `; on the first input its logits agree with PyTorch's to ${api.check.relative.toExponential(1)} of their scale.` : ".") +
      (LIVE.notes.length ? ` ${LIVE.notes.join("; ")}.` : "");
    api.loadMs = performance.now() - t0; // decoding, checking and the first run, after the first view
    api.readyMs = performance.now(); // from the start of navigation
    api.worker = Boolean(live.engine.worker);
    document.body.dataset.live = "true";
  }

  // ===================================================================================== main
  let ready = false;

  /** The chosen query in sight (the head view scrolls to it). */
  function scrollToQuery() {
    const scroller = document.querySelector(".head-scroll");
    if (state.view === "head" && state.selected && head) scroller.scrollTop = Math.max(0, rowY(state.selected.index) - scroller.clientHeight / 2);
  }

  async function main() {
    if (typeof DecompressionStream === "undefined") {
      throw new Error("this browser has no DecompressionStream; open the page in a current Chrome, Edge, Firefox or Safari");
    }
    const t0 = performance.now();
    kinds = await Promise.all(DATA.kinds.map(async (k) => ({ ...k, stack: await unpack(k.maps) })));
    overlays = await Promise.all(DATA.overlays.items.map(async (o) => {
      const stack = await unpack(o.matrix);
      return { ...o, stack, original: stack, stale: false };
    }));
    timings.decode = performance.now() - t0;
    state.heads = Array.from({ length: HEADS }, () => true);
    // the first view: an encoder-decoder opens on cross-attention (how each output reads the source);
    // every page on its last layer and the query whose attention there is sharpest
    state.kind = Math.max(0, kinds.findIndex((k) => k.name === DATA.overlays.kind));
    const fields = readFragment();
    const wanted = {};
    state.layer = lastLayer(kind());
    state.enlarged = { layer: state.layer, head: 0 };
    state.selected = null;
    const view = applyFragmentView(fields, wanted);
    if (!state.selected) state.selected = { side: "query", index: sharpestQuery(kind(), state.layer) };
    drawHeader();
    bind();
    $("kind-select").value = state.kind;
    show(view && view !== "patching" ? view : "head");
    scrollToQuery();
    window.explorerRenderMs = performance.now() - START;
    window.explorerLoadMs = performance.now(); // from the start of navigation: the HTML's parsing included
    document.body.dataset.ready = "true";
    ready = true;
    saveFragment();
    const status = $("live-status");
    if (LIVE) {
      await startLive(fields, wanted);
      if (view === "patching") show("patching");
    } else {
      for (const field of LIVE_FIELDS) if (fields.has(field)) ignore(field, fields.get(field), "this page does not run its model");
      document.body.dataset.live = "none";
      if (DATA.live_note) {
        status.classList.add("note");
        status.textContent = `This page shows the views computed in Python for one input; the model is not in the page, because ${DATA.live_note}.`;
      }
    }
  }

  main().catch(fail);
})();
