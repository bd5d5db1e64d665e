/* view_overlays.js: looks vs uses: the last layer's attention next to rollout and relevance. */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { DATA, HEADS } = state;
  const { mapIndex, firstLayer } = TL.read;
  const { $, CMAPS, el, shown } = TL.util;
  const { drawMatrix, hoverCells } = TL.heatmap;

  // ----------------------------------------------------------------------- looks vs uses
  function lastLayerMean() {
    const k = state.kinds.find((item) => item.name === DATA.overlays.kind);
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
    const rows = state.current.overlayRows;
    const cols = state.current.overlayCols;
    const reads = state.current.predictions.rows.map((p) => p.reads);
    const mean = lastLayerMean();
    const panels = [
      { name: "attention", title: `Looks: ${mean.title}, layer ${mean.layer}, mean of heads`, matrix: mean, vmax: mean.max, legend: "attention weight" },
      ...state.overlays.map((o) => ({
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
    state.timings.overlays = performance.now() - t0;
  }

  const blankMatrix = (R, C) => ({ R, C, get: () => 0, max: 0 });

  TL.view_overlays = { lastLayerMean, drawOverlaysView, blankMatrix };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
