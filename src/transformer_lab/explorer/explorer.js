/* The attention explorer: reads the JSON data in the page and draws five views of it.
 *
 * Data (written by transformer_lab/explorer/page.py): kinds of attention, each with its maps packed as
 * one byte per weight (q / levels * row maximum), deflated and base64-encoded; overlays (rollout,
 * relevance) packed the same way; per-position predictions; the head-ablation table.
 * Views: head view (SVG: tokens in two columns, lines drawn on hover), model view (a <canvas> heatmap
 * per layer x head, drawn from ImageData), looks-vs-uses (labelled canvas heatmaps), head ablation
 * (a table), predictions (a table). A view is drawn the first time it is shown ("lazy").
 * For tests: document.body.dataset.ready = "true" once the first view is drawn, and
 * window.explorerRenderMs = milliseconds from the start of this script to then.
 */
"use strict";
(function () {
  const START = performance.now();
  const SVG_NS = "http://www.w3.org/2000/svg";
  const DATA = JSON.parse(document.getElementById("explorer-data").textContent);
  const $ = (id) => document.getElementById(id);
  const timings = {};
  window.explorerTimings = timings;

  // ---------------------------------------------------------------------------------------- helpers
  const SHOWN_AS = { "\n": "⏎", " ": "␣", "\t": "⇥", "": "∅" };
  const shown = (token) => (token in SHOWN_AS ? SHOWN_AS[token] : token);

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

  async function unpack(packed) {
    const [q, scaleBytes] = await Promise.all([inflate(packed.q), inflate(packed.scale)]);
    return new Stack(packed.shape, packed.levels, q, new Float32Array(scaleBytes.buffer, scaleBytes.byteOffset, scaleBytes.length / 4));
  }

  // ----------------------------------------------------------------------------------- state
  const state = {
    view: "head",
    kind: 0, // index into DATA.kinds
    layer: 0,
    heads: [], // on / off per head
    threshold: 0.05,
    shade: "",
    selected: null, // {side: "query" | "key", index}
    enlarged: { layer: 0, head: 0 },
    colour: "row", // model view colour scale: row | map | absolute
  };
  const drawn = {}; // view -> whether it is drawn for the current kind
  const HEADS = DATA.summary.heads;
  let kinds = []; // DATA.kinds with .stack (decoded maps)
  let overlays = []; // DATA.overlays.items with .stack
  const kind = () => kinds[state.kind];
  const mapIndex = (layer, head) => layer * HEADS + head;
  const predictionsAlign = () => DATA.predictions.kinds.includes(kind().name);
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
  function textWidth(text, font) {
    measurer.font = font;
    return measurer.measureText(text).width;
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
  function drawHeader() {
    const s = DATA.summary;
    $("title").textContent = DATA.title;
    const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
    $("summary").textContent =
      `${s.architecture} model · ${s.shape} · ` +
      `${s.parameters.toLocaleString("en")} parameters · ${plural(s.input.length, "input token")}. ` + DATA.notes.join(" ") +
      (kinds[0].stack.levels < 255 ? ` Attention weights are stored to 1/${kinds[0].stack.levels} of each row's largest (thinned to keep the file small).` : "");
    const io = $("io");
    // characters as the text they are (newlines and tabs made visible), other tokens apart
    const sep = (tokens) => tokens.map((t) => (s.join === "" && t !== " " ? shown(t) : t)).join(s.join);
    io.replaceChildren(el("b", { text: "input  " }), sep(s.input), el("br"), el("b", { text: "output " }), sep(s.output));
  }

  // ---------------------------------------------------------------------------- head view
  const ROW_H = 18;
  const TOKEN_FONT = '13px ui-monospace, "DejaVu Sans Mono", Menlo, monospace';
  const SMALL_FONT = "10px system-ui, sans-serif";
  let head = null; // geometry of the drawn head view

  function drawHeadControls() {
    const k = kind();
    const layerSelect = $("layer-select");
    layerSelect.replaceChildren(...Array.from({ length: k.stack.shape[0] }, (_, l) => el("option", { value: l, text: `${l}` })));
    state.layer = Math.min(state.layer, k.stack.shape[0] - 1);
    layerSelect.value = state.layer;
    const chips = $("head-chips");
    chips.replaceChildren(
      ...state.heads.map((on, h) =>
        el("button", { class: "head-chip", "data-head": h, "aria-pressed": on, style: { "--chip": headColour(h) }, text: `H${h}` })
      )
    );
    $("shade-control").hidden = !overlaysAlign();
  }

  function drawHeadView() {
    const t0 = performance.now();
    const k = kind();
    const root = $("head-svg");
    root.replaceChildren();
    const rows = k.rows.map(shown);
    const cols = k.cols.map(shown);
    const tokenW = Math.max(...rows.map((t) => textWidth(t, TOKEN_FONT)), ...cols.map((t) => textWidth(t, TOKEN_FONT)), 24) + 10;
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
    head = { lines, groups, xL, xR, top };
    state.selected = state.selected && state.selected.index < (state.selected.side === "query" ? rows.length : cols.length) ? state.selected : null;
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
      const m = mapIndex(state.layer, h);
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
      const max = o.stack.rowMax(0, sel.index) || 1;
      head.groups.key.forEach((g, c) => {
        const t = o.stack.value(0, sel.index, c) / max;
        g.firstChild.setAttribute("fill", rgb(CMAPS[o.name], 0.85 * t));
        g.querySelector(".hv-label").setAttribute("fill", t > 0.6 ? "#ffffff" : "#1f2328");
      });
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
      const p = DATA.predictions.rows[sel.index];
      if (p) {
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
    });
    $("layer-select").addEventListener("change", (event) => {
      state.layer = Number(event.target.value);
      drawLines();
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
    for (let l = 0; l < layers; l++) {
      cells.push(el("span", { class: "axis", text: `layer ${l}` }));
      for (let h = 0; h < HEADS; h++) {
        const canvas = el("canvas", { class: "heatmap", "data-layer": l, "data-head": h, width: C, height: R, title: `layer ${l}, head ${h}` });
        canvas.style.width = `${aspect > 1 ? Math.round(thumb / aspect) : thumb}px`;
        canvas.style.height = `${aspect > 1 ? thumb : Math.round(thumb * aspect)}px`;
        paintThumb(canvas, stack, mapIndex(l, h), state.colour);
        if (l === state.enlarged.layer && h === state.enlarged.head) canvas.classList.add("selected");
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
      // 255 * value / top = q * factor
      const factor = (255 * stack.scale[m * R + r]) / (stack.levels * top(r));
      const base = (m * R + r) * C;
      for (let c = 0; c < C; c++) {
        const i = 3 * Math.round(stack.q[base + c] * factor);
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
    const m = mapIndex(layer, h);
    const matrix = k.stack.matrix(m);
    const top = colourTop(k.stack, m, state.colour);
    const shade = { R: matrix.R, C: matrix.C, get: (r, c) => matrix.get(r, c) / top(r) };
    const geometry = drawMatrix(canvas, shade, {
      rows: k.rows,
      cols: k.cols,
      title: `${k.title}: layer ${layer}, head ${h}`,
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
    return { R: stack.R, C: stack.C, get: (r, c) => values[r * stack.C + c], max, layer, title: k.title };
  }

  function drawOverlaysView() {
    const t0 = performance.now();
    const container = $("overlay-panels");
    container.replaceChildren();
    const rows = DATA.overlays.rows;
    const cols = DATA.overlays.cols;
    const reads = DATA.predictions.rows.map((p) => p.reads);
    const mean = lastLayerMean();
    const panels = [
      { name: "attention", title: `Looks: ${mean.title}, layer ${mean.layer}, mean of heads`, matrix: mean, vmax: mean.max, legend: "attention weight" },
      ...overlays.map((o) => ({
        name: o.name,
        title: `Uses: ${o.title}`,
        matrix: o.stack.matrix(0),
        vmax: o.vmax || o.stack.max(0),
        legend: "share of the output",
        capped: Boolean(o.vmax),
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
        `output ${r} (reads ${shown(reads[r])}, predicts ${shown(rows[r])})\n← input ${c} ${shown(cols[c])}: ${panel.matrix.get(r, c).toFixed(3)}`
      );
    }
    timings.overlays = performance.now() - t0;
  }

  // ----------------------------------------------------------------------------- ablation
  function ablationMatrix() {
    const a = DATA.ablation;
    const vmax = Math.max(1e-6, ...a.drops.flat().map(Math.abs));
    return { R: a.drops.length, C: HEADS, get: (r, c) => a.drops[r][c], vmax };
  }

  function drawAblationView() {
    const a = DATA.ablation;
    const table = $("ablation-table");
    if (!a) {
      $("ablation-caption").textContent = "The head-ablation table was not computed for this page (ablation=False).";
      table.replaceChildren();
      return;
    }
    const m = ablationMatrix();
    $("ablation-caption").textContent =
      `Without ablation the predictions have a mean log-probability of ${a.baseline.toFixed(3)} ` +
      `(geometric mean probability ${pct(Math.exp(a.baseline))}) over ${a.positions} positions. ` +
      `Largest drop: ${fmt(Math.max(...a.drops.flat()))}.`;
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
      const a = DATA.ablation;
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
  }

  // -------------------------------------------------------------------------- predictions
  function drawPredictionsView() {
    const rows = DATA.predictions.rows;
    const labelled = rows.filter((p) => p.label !== null);
    const right = labelled.filter((p) => p.correct).length;
    $("prediction-summary").textContent = labelled.length
      ? `${right} of ${labelled.length} predictions with a known label are right (${pct(right / labelled.length)}).`
      : "No expected output is known for this input: the predictions are shown without right or wrong.";
    const readsTitle = DATA.predictions.reads_title;
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

  // ---------------------------------------------------------------------------- PNG export
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

  async function headViewImage() {
    const root = $("head-svg");
    const xml = new XMLSerializer().serializeToString(root);
    const image = new Image();
    image.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(xml);
    await image.decode();
    const w = Number(root.getAttribute("width"));
    const h = Number(root.getAttribute("height"));
    const k = kind();
    const sel = state.selected;
    const lines = [
      `${DATA.title}: ${k.title}, layer ${state.layer}`,
      sel ? `${sel.side} ${sel.index} ${shown(sel.side === "query" ? k.rows[sel.index] : k.cols[sel.index])}: lines to the tokens with attention above ${state.threshold}; width = weight` : "no token selected",
    ];
    const { canvas, ctx } = canvasOf(Math.max(w, 520) + 20, h + 90);
    let y = titleLines(ctx, lines, 10, 8);
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
    titleLines(ctx, [`${DATA.title}: ${k.title}, every layer × head`, "row = query token, column = key token; darker = more attention (each map to its own max)"], 10, 6);
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
      const y = 70 + l * (h + 6);
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
    const a = DATA.ablation;
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
      title: `${DATA.title}: drop of the predictions' mean log-probability, one head zero-ablated`,
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
    const rows = DATA.predictions.rows;
    const { canvas, ctx } = canvasOf(720, 70 + 18 * (rows.length + 1));
    titleLines(ctx, [`${DATA.title}: predictions`, $("prediction-summary").textContent], 10, 6);
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

  async function viewImage() {
    switch (state.view) {
      case "head":
        return headViewImage();
      case "model":
        return modelViewImage();
      case "overlays":
        return stackImages([...$("overlay-panels").querySelectorAll("canvas")]);
      case "ablation":
        return ablationImage();
      default:
        return predictionsImage();
    }
  }

  async function savePng() {
    const canvas = await viewImage();
    const blob = await new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
    const link = el("a", { href: URL.createObjectURL(blob), download: `attention-${state.view}-view.png` });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 60000);
    window.explorerLastPng = { bytes: blob.size, width: canvas.width, height: canvas.height };
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
    predictions: drawPredictionsView,
  };
  const KIND_VIEWS = ["head", "model"]; // the views that show one kind of attention

  function show(view) {
    state.view = view;
    for (const tab of document.querySelectorAll(".tab")) tab.setAttribute("aria-selected", tab.dataset.view === view);
    for (const section of document.querySelectorAll(".view")) section.hidden = section.dataset.view !== view;
    $("kind-control").hidden = kinds.length < 2 || !KIND_VIEWS.includes(view);
    if (!drawn[view]) {
      DRAW[view]();
      drawn[view] = true;
    }
  }

  function setKind(index) {
    state.kind = index;
    $("kind-select").value = index;
    state.selected = null;
    for (const view of KIND_VIEWS) drawn[view] = false;
    state.enlarged = { layer: 0, head: 0 };
    DRAW.head();
    drawn.head = true;
    if (state.view === "model") show("model");
  }

  function bind() {
    for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => show(tab.dataset.view));
    const select = $("kind-select");
    select.replaceChildren(...kinds.map((k, i) => el("option", { value: i, text: k.title })));
    select.addEventListener("change", () => setKind(Number(select.value)));
    $("save-png").addEventListener("click", () => savePng().catch(fail));
    bindHeadView();
    bindModelView();
    bindAblationView();
  }

  function fail(error) {
    const box = $("error");
    box.hidden = false;
    box.textContent = `The explorer could not draw this page: ${error && error.message ? error.message : error}`;
    console.error(error);
  }

  async function main() {
    if (typeof DecompressionStream === "undefined") {
      throw new Error("this browser has no DecompressionStream; open the page in a current Chrome, Edge, Firefox or Safari");
    }
    const t0 = performance.now();
    kinds = await Promise.all(DATA.kinds.map(async (k) => ({ ...k, stack: await unpack(k.maps) })));
    overlays = await Promise.all(DATA.overlays.items.map(async (o) => ({ ...o, stack: await unpack(o.matrix) })));
    timings.decode = performance.now() - t0;
    state.heads = Array.from({ length: HEADS }, () => true);
    // an encoder-decoder opens on cross-attention: how each output reads the source
    state.kind = Math.max(0, kinds.findIndex((k) => k.name === DATA.overlays.kind));
    state.selected = { side: "query", index: 0 };
    drawHeader();
    bind();
    $("kind-select").value = state.kind;
    show("head");
    window.explorerRenderMs = performance.now() - START;
    window.explorerLoadMs = performance.now(); // from the start of navigation: the HTML's parsing included
    document.body.dataset.ready = "true";
  }

  main().catch(fail);
})();
