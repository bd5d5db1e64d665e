/* heatmap.js: a labelled heatmap on a <canvas> (tokens on both axes, a title, a colour bar), its
 * tooltips, legend bars, and text measured once per font and text.
 */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { $, el, fmt, rgb, shown } = TL.util;

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
    const key = `${font}\u0000${text}`;
    let width = state.widths.get(key);
    if (width === undefined) {
      measurer.font = font;
      width = measurer.measureText(text).width;
      if (state.widths.size < 20000) state.widths.set(key, width);
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

  TL.heatmap = { tooltip, showTip, hideTip, textWidth, drawMatrix, drawColourBar, hoverCells, legendBar };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
