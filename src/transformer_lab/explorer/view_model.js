/* view_model.js: the model view: every layer x head as a small heatmap, one enlarged with labels. */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { HEADS } = state;
  const { kind, mapIndex, firstLayer, lastLayer, mapOf } = TL.read;
  const { $, CMAPS, el, headColour, shown } = TL.util;
  const { drawMatrix, hoverCells } = TL.heatmap;

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
    const removed = TL.views.removedInKind(k);
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
    state.timings.model = performance.now() - t0;
  }

  /** The colour-scale modes: a weight's shade is value / top, top = its row's or its map's largest
   *  weight, or 1. */
  const COLOUR_LEGEND = Object.freeze({ row: "weight / its row's largest", map: "attention weight", absolute: "attention weight" });
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

  TL.view_model = { drawModelView, COLOUR_LEGEND, colourTop, paintThumb, drawEnlarged, bindModelView };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
