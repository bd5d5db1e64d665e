/* view_ablation.js: the head-ablation table (precomputed, or recomputed by the page's model for what
 * the views show) and the per-head measures of the registry (DATA.measures), head x measure.
 */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { DATA, LIVE, HEADS } = state;
  const { $, CMAPS, el, fmt, headColour, pct, rgb } = TL.util;
  const { legendBar } = TL.heatmap;
  const { drawHeadControls, drawLines } = TL.view_head;

  // ----------------------------------------------------------------------------- ablation
  function ablationMatrix() {
    const a = state.current.ablation;
    const vmax = Math.max(1e-6, ...a.drops.flat().map(Math.abs));
    return { R: a.drops.length, C: HEADS, get: (r, c) => a.drops[r][c], vmax };
  }

  function drawAblationView() {
    drawMeasures();
    const a = state.current.ablation;
    const table = $("ablation-table");
    $("ablation-recompute").hidden = !state.live;
    if (!a) {
      $("ablation-caption").textContent = "The head-ablation table was not computed for this page (ablation=False)." +
        (state.live ? " Recompute it for the current input:" : "");
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
      ...(state.current.ablationNote ? [" ", el("span", { class: "stale", text: state.current.ablationNote })] : [])
    );
    const kindTitle = Object.fromEntries(state.kinds.map((k) => [k.name, k.title]));
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
      const a = state.current.ablation;
      const i = Number(cell.dataset.row);
      const k = state.kinds.findIndex((item) => item.name === a.kinds[i]);
      if (k < 0) return;
      state.heads = state.heads.map((_, h) => h === Number(cell.dataset.head));
      TL.views.setKind(k);
      state.layer = a.indices[i];
      drawHeadControls();
      drawLines();
      TL.views.show("head");
    });
    $("ablation-recompute").addEventListener("click", () => recomputeAblation().catch(TL.views.fail));
  }

  /** The head-ablation table for the current input (as the Python side computes it, nothing else
   *  removed): the drop of the mean log p of the model's own predictions, per layer and head. */
  async function recomputeAblation() {
    const button = $("ablation-recompute");
    button.disabled = true;
    $("ablation-caption").textContent = "Computing: one forward pass per head...";
    await new Promise((resolve) => setTimeout(resolve, 20));
    try {
      const model = await state.live.engine.model(state.live.step);
      const labels = state.live.labels || [];
      const labelled = labels.map((l) => l !== -100);
      const positions = labelled.some(Boolean) ? labelled : null;
      const table = TL.analyses.ablationTable(model, state.live.inputs, { ablation: state.live.method, positions });
      const layers = LIVE.spec.layers;
      const groups = layers.map((l) => l.group);
      state.current.ablation = {
        layers: layers.map((l) => l.name),
        labels: layers.map((l) => l.label),
        kinds: groups,
        indices: groups.map((g, i) => groups.slice(0, i).filter((x) => x === g).length),
        baseline: table.baseline,
        drops: table.drops,
        positions: table.positions,
        method: state.live.method,
      };
      state.current.ablationNote = "";
      state.live.tableRecomputed = true;
      state.live.tableFor = TL.live.tableKey();
      state.drawn.ablation = false;
      if (state.view === "ablation") TL.views.show("ablation");
    } finally {
      button.disabled = false;
    }
  }

  // -------------------------------------------------------------------------- per-head measures
  /** Every per-head measure of the registry (transformer_lab.analysis.measures, one registered outside
   *  the package included: DATA.measures, computed in Python on the task's examples), as `interpret
   *  analysis=heads` prints them: what each is and which way it moves as a head forms, then one row per
   *  head, one column per measure (each cell's exact value in data-value). None for a bare model. */
  function drawMeasures() {
    const m = DATA.measures;
    const box = $("measures");
    box.hidden = !m || m.items.length === 0;
    if (box.hidden) return;
    $("measures-title").textContent = `Per-head measures on ${m.examples} of the task's examples ` +
      "(computed in Python, for the model the page opened on; rise/fall: which way each moves as a head forms)";
    $("measures-legend").replaceChildren(
      ...m.items.map((item) => el("p", { "data-measure": item.name }, el("b", { text: item.name }), ` ${item.direction}: ${item.description}`))
    );
    const header = el("tr", {}, el("th", { text: "head" }),
      ...m.items.map((item) => el("th", { "data-measure": item.name, title: item.description, text: item.name })));
    const rows = [];
    m.layers.forEach((label, l) => {
      for (let h = 0; h < HEADS; h++) {
        const head = `${label}H${h}`;
        const cells = m.items.map((item) => {
          const value = item.values[l] ? item.values[l][h] : null;
          const known = typeof value === "number";
          return el("td", {
            class: "measure-cell",
            "data-measure": item.name,
            "data-head": head,
            "data-value": known ? String(value) : "",
            title: `${head} ${item.name}: ${known ? value : "not measured"}`,
            text: known ? value.toFixed(3) : "-",
          });
        });
        rows.push(el("tr", {}, el("th", { text: head }), ...cells));
      }
    });
    $("measures-table").replaceChildren(el("table", {}, el("thead", {}, header), el("tbody", {}, ...rows)));
  }

  TL.view_ablation = { ablationMatrix, drawAblationView, drawMeasures, bindAblationView, recomputeAblation };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
