/* export.js: Save PNG and Save SVG: the view shown, under a title naming the model and the input. */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { HEADS } = state;
  const { kind, firstLayer } = TL.read;
  const { SVG_NS, $, CMAPS, el, headColour, pct, shown } = TL.util;
  const { drawMatrix, textWidth } = TL.heatmap;
  const { ablationMatrix } = TL.view_ablation;

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
    const a = state.current.ablation;
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
    const rows = state.current.predictions.rows;
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
    const lines = TL.views.figureTitle();
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
    window.explorerLastPng = { bytes: blob.size, width: canvas.width, height: canvas.height, title: TL.views.figureTitle() };
  }

  const escapeXml = (text) => String(text).replace(/[<>&"]/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;" })[c]);

  /** The current view as an SVG figure: the title as text; the head view as the vector drawing it is
   *  (lines, tokens, head legend); the other views as their image inside the SVG, as a plotting
   *  library embeds a heatmap. */
  async function saveSvg() {
    const lines = TL.views.figureTitle();
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
    const heading = [
      `<rect x="0" y="0" width="${width}" height="${height}" fill="#ffffff"/>`,
      `<title>${escapeXml(lines.join(" — "))}</title>`,
      text(10, 22, lines[0], 'font-family="system-ui, sans-serif" font-size="15" font-weight="bold" fill="#1f2328"'),
      text(10, 40, lines[1], 'font-family="system-ui, sans-serif" font-size="12" fill="#59636e"'),
    ];
    const doc = `<?xml version="1.0" encoding="UTF-8"?>\n<svg xmlns="${SVG_NS}" width="${Math.ceil(width)}" height="${Math.ceil(height)}" viewBox="0 0 ${Math.ceil(width)} ${Math.ceil(height)}">${heading.join("")}${parts.join("")}</svg>\n`;
    const blob = new Blob([doc], { type: "image/svg+xml" });
    download(blob, `attention-${state.view}-view.svg`);
    window.explorerLastSvg = { bytes: blob.size, width, height, title: lines };
  }

  TL.export = { canvasOf, titleLines, headViewCaption, headViewImage, modelViewImage, stackImages, ablationImage, predictionsImage, viewImage, TITLE_H, titled, download, savePng, escapeXml, saveSvg };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
