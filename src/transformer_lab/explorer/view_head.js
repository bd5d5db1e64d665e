/* view_head.js: the head view: the tokens in two columns, a line from the hovered token to every token
 * it attends to (one colour per head, thicker for more attention), keys shaded by rollout or relevance;
 * the first view opens on the sharpest query.
 */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { HEADS } = state;
  const { kind, firstLayer, lastLayer, mapOf, predictionsAlign, overlaysAlign } = TL.read;
  const { $, CMAPS, el, headColour, pct, rgb, shown, svg } = TL.util;
  const { legendBar, textWidth } = TL.heatmap;

  // ---------------------------------------------------------------------------- head view
  const ROW_H = 18;
  const TOKEN_FONT = '13px ui-monospace, "DejaVu Sans Mono", Menlo, monospace';
  const SMALL_FONT = "10px system-ui, sans-serif";

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
    const causal = k.causal; // said by Python for each kind of attention (collect.AttentionKind)
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
    if (state.head && state.head.kind === k.name && state.head.tokenW === tokenW && state.head.rows === rows.length && state.head.cols === cols.length && root.contains(state.head.lines)) {
      state.head.groups.query.forEach((g, i) => (g.querySelector(".hv-label").textContent = rows[i]));
      state.head.groups.key.forEach((g, i) => (g.querySelector(".hv-label").textContent = cols[i]));
      drawLines();
      state.timings.head = performance.now() - t0;
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
    state.head = { lines, groups, xL, xR, top, kind: k.name, tokenW, rows: rows.length, cols: cols.length };
    const sel = state.selected;
    state.selected = sel && Number.isInteger(sel.index) && sel.index >= 0 && sel.index < (sel.side === "query" ? rows.length : cols.length) ? sel : null;
    drawLines();
    state.timings.head = performance.now() - t0;
  }

  const rowY = (i) => state.head.top + i * ROW_H + (ROW_H - 2) / 2;

  /** The lines of the selected token in the current layer, one per (active head, token) whose attention
   *  weight is above the threshold; key tokens shaded by an overlay when one is chosen. */
  function drawLines() {
    const k = kind();
    state.head.lines.replaceChildren();
    for (const side of ["query", "key"]) {
      for (const g of state.head.groups[side]) {
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
    state.head.groups[sel.side][sel.index].firstChild.setAttribute("fill", "#fff3b0");
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
            x1: state.head.xL + 4,
            y1: rowY(q) + dy,
            x2: state.head.xR - 4,
            y2: rowY(key) + dy,
            stroke: headColour(h),
            "stroke-width": (0.8 + 5 * w).toFixed(2),
            "stroke-opacity": (0.3 + 0.7 * w).toFixed(2),
            "stroke-linecap": "round",
          })
        );
      }
    });
    state.head.lines.append(fragment);
    state.head.lines.dataset.count = count;
    if (sel.side === "query" && state.shade && overlaysAlign()) {
      const o = state.overlays.find((item) => item.name === state.shade);
      if (o && o.stack && sel.index < o.stack.R) {
        const max = o.stack.rowMax(0, sel.index) || 1;
        state.head.groups.key.forEach((g, c) => {
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
      const p = state.current.predictions.rows[sel.index];
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
      TL.fragment.saveFragment();
    });
    $("layer-select").addEventListener("change", (event) => {
      state.layer = Number(event.target.value);
      drawLines();
      TL.fragment.saveFragment();
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

  TL.view_head = { drawHeadControls, sharpestQuery, drawHeadView, rowY, drawLines, describeSelection, drawShadeLegend, bindHeadView };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
