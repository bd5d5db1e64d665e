/* state.js: the page's one state object, TransformerLab.state, which every module of the page reads and
 * writes (no module keeps mutable state of its own), and TransformerLab.read, what follows from it.
 *
 * The page's scripts (page.py inlines them in the order of page.PAGE_SCRIPTS, after page.MODEL_SCRIPTS)
 * each add one part to the namespace `TransformerLab`: state, util, heatmap, view_head, view_model,
 * view_overlays, view_ablation, view_predictions, view_patching, export, views, engine, input, live,
 * fragment, api, main. A module takes what an earlier one defines when it loads, and calls a later one
 * through the namespace (`TL.live.update()`), when the page runs.
 *
 * Data (written by transformer_lab/explorer/page.py): kinds of attention, each with its maps packed as
 * one byte per weight, deflated and base64-encoded; overlays (rollout, relevance); per-position
 * predictions; the head-ablation table; the per-head measures. These are the precomputed first view. A
 * live page adds `live` (live.py): the model's structure, config, weight layout and weights, the means
 * of every head's z (mean ablation), the first input, and the snapshots of a run for the step slider.
 * For tests: document.body.dataset.ready = "true" once the first view is drawn (window.explorerRenderMs:
 * milliseconds from the start of the scripts; explorerLoadMs: from the start of navigation), and
 * document.body.dataset.live = "true" once the model is decoded ("none": a precomputed page).
 */
(function (TL) {
  "use strict";
  const DATA = JSON.parse(document.getElementById("explorer-data").textContent);

  const state = {
    // read only: the page's data, its live part, heads per layer, when the scripts started
    DATA,
    LIVE: DATA.live || null,
    HEADS: DATA.summary.heads,
    START: performance.now(),
    // what the student chose
    view: "head",
    kind: 0, // index into kinds
    layer: 0,
    heads: [], // shown / hidden per head (head view)
    threshold: 0.05,
    shade: "",
    selected: null, // {side: "query" | "key", index}
    enlarged: { layer: 0, head: 0 },
    colour: "row", // model view colour scale: row | map | absolute
    // what the views draw: the precomputed numbers first, the page's own once the input or the model
    // changes. kinds: DATA.kinds with .stack (the maps); overlays: rollout and relevance with .stack.
    kinds: [],
    overlays: [],
    current: {
      predictions: DATA.predictions, // {kinds, reads_title, rows}
      ablation: DATA.ablation, // the head-ablation table, and what it was computed for
      ablationNote: "",
      overlayRows: DATA.overlays.rows,
      overlayCols: DATA.overlays.cols,
      input: DATA.summary.input,
      output: DATA.summary.output,
      relevanceStale: false,
    },
    drawn: {}, // view -> whether it is drawn for the current numbers
    head: null, // the geometry of the drawn head view
    ready: false, // the first view is drawn (the URL fragment is written from then on)
    notices: [], // the URL fragment's fields that were ignored, and why
    timings: {}, // ms per view drawn, decoding (window.explorerTimings)
    widths: new Map(), // font + text -> width: the same tokens are measured at every update
    // the live page's own: engine, removed heads, method, step, the last run, ... (live.startLive)
    live: null,
    sae: null, // the features view's SAE, once decoded ({d_in, width, kind, k, tensors}; explore sae=)
    api: {}, // window.transformerLab (api.js), once the model is decoded
  };
  window.explorerTimings = state.timings;

  const kind = () => state.kinds[state.kind];
  const mapIndex = (layer, head) => layer * state.HEADS + head;
  // A live page whose maps did not fit stores only each kind's last layer (`first` is its number) until
  // its model has run; layers are numbered as the model numbers them, maps indexed from `first`.
  const firstLayer = (k) => k.first || 0;
  const lastLayer = (k) => firstLayer(k) + k.stack.shape[0] - 1;
  const mapOf = (k, layer, head) => mapIndex(layer - firstLayer(k), head);
  const predictionsAlign = () => state.current.predictions.kinds.includes(kind().name);
  const overlaysAlign = () => DATA.overlays.kind === kind().name;

  TL.state = state;
  TL.read = { kind, mapIndex, firstLayer, lastLayer, mapOf, predictionsAlign, overlaysAlign };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
