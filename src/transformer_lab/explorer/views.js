/* views.js: the header, the registry of views (DRAW: each view drawn when shown, redrawn when the
 * numbers change), the tabs and the kind selector, the heads removed as the views name them.
 */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { DATA, LIVE } = state;
  const { kind, firstLayer, lastLayer } = TL.read;
  const { $, el, message, shown } = TL.util;
  const { bindHeadView, drawHeadControls, drawHeadView } = TL.view_head;
  const { bindModelView, drawModelView } = TL.view_model;
  const { drawOverlaysView } = TL.view_overlays;
  const { bindAblationView, drawAblationView } = TL.view_ablation;
  const { drawPredictionsView } = TL.view_predictions;
  const { drawPatchingView } = TL.view_patching;
  const { drawFeaturesView } = TL.view_features;
  const { savePng, saveSvg } = TL.export;

  // ------------------------------------------------------------------------------- header
  const joinTokens = (tokens) => tokens.map((t) => (DATA.summary.join === "" && t !== " " ? shown(t) : t)).join(DATA.summary.join);

  function drawHeader() {
    const s = DATA.summary;
    $("title").textContent = DATA.title;
    const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
    const levels = state.kinds[0] && state.kinds[0].stack.levels;
    $("summary").textContent =
      `${s.architecture} model · ${s.shape} · ` +
      `${s.parameters.toLocaleString("en")} parameters · ${plural(state.current.input.length, "input token")}. ` + DATA.notes.join(" ") +
      (levels && levels < 255 ? ` Attention weights are stored to 1/${levels} of each row's largest (thinned to keep the file small).` : "") +
      (state.kinds[0] && firstLayer(state.kinds[0]) > 0 ? " The page stores the last layer's attention; it computes every layer when its model runs." : "");
    const io = $("io");
    // characters as the text they are (newlines and tabs made visible), other tokens apart
    const parts = [el("b", { text: "input  " }), joinTokens(state.current.input), el("br"), el("b", { text: "output " }), joinTokens(state.current.output)];
    // what the model wrote, where it is not already the output line (greedy: the same tokens)
    const wrote = state.live && state.live.generated ? joinTokens(state.live.generated) : null;
    if (wrote && wrote !== joinTokens(state.current.output.filter((t) => t !== ""))) parts.push(el("br"), el("b", { text: "writes " }), wrote);
    io.replaceChildren(...parts);
  }

  /** The text that names a figure: the model, then the input (saved images carry both). */
  function figureTitle() {
    const s = DATA.summary;
    const text = joinTokens(state.current.input);
    const input = text.length > 110 ? text.slice(0, 107) + "..." : text;
    const step = state.live && state.live.series ? `, ${state.live.series.labels[state.live.step]}` : "";
    const removed = state.live && state.live.removed.size ? `; heads removed (${state.live.method}): ${removedLabels().join(", ")}` : "";
    return [`${DATA.title} (${s.architecture}, ${s.shape}${step})`, `input: ${input}${removed}`];
  }

  // -------------------------------------------------------------------------- views, kinds
  const DRAW = Object.freeze({
    head: () => {
      drawHeadControls();
      drawHeadView();
    },
    model: drawModelView,
    overlays: drawOverlaysView,
    ablation: drawAblationView,
    patching: drawPatchingView,
    predictions: drawPredictionsView,
    ...(DATA.features ? { features: drawFeaturesView } : {}), // a page with an SAE (explore sae=)
  });
  const KIND_VIEWS = Object.freeze(["head", "model"]); // the views that show one kind of attention

  function show(view) {
    if (!Object.hasOwn(DRAW, view) || (view === "patching" && !state.live)) view = "head";
    state.view = view;
    for (const tab of document.querySelectorAll(".tab")) tab.setAttribute("aria-selected", tab.dataset.view === view);
    for (const section of document.querySelectorAll(".view")) section.hidden = section.dataset.view !== view;
    $("kind-control").hidden = state.kinds.length < 2 || !KIND_VIEWS.includes(view);
    if (!state.drawn[view]) {
      DRAW[view]();
      state.drawn[view] = true;
    }
    TL.fragment.saveFragment();
  }

  function setKind(index) {
    state.kind = index;
    $("kind-select").value = index;
    state.selected = null;
    for (const view of KIND_VIEWS) state.drawn[view] = false;
    state.enlarged = { layer: lastLayer(kind()), head: 0 };
    DRAW.head();
    state.drawn.head = true;
    if (state.view === "model") show("model");
    TL.fragment.saveFragment();
  }

  /** The numbers changed (a new input, heads removed, another step): redraw what is shown, the rest
   *  when it is next shown. */
  function redraw() {
    for (const view of Object.keys(DRAW)) state.drawn[view] = false;
    drawHeader();
    show(state.view);
  }

  function bind() {
    $("features-tab").hidden = !DATA.features;
    for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => show(tab.dataset.view));
    const select = $("kind-select");
    select.replaceChildren(...state.kinds.map((k, i) => el("option", { value: i, text: k.title })));
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

  // ------------------------------------------------------------------- heads removed (a live page)
  /** Removed heads as "layer:head" keys of the attention layers in `interventions` order. */
  const removedPairs = () => [...state.live.removed].map((key) => key.split(":").map(Number));
  const removedLabels = () => removedPairs().map(([l, h]) => `${LIVE.spec.layers[l].label}H${h}`);

  /** The removed heads of one kind, as "layer-within-kind:head" keys (the model view marks them). */
  function removedInKind(k) {
    const out = new Set();
    if (!state.live) return out;
    const layers = LIVE.spec.layers.map((layer, i) => ({ ...layer, i })).filter((layer) => layer.group === k.name);
    for (const [l, h] of removedPairs()) {
      const within = layers.findIndex((layer) => layer.i === l);
      if (within >= 0) out.add(`${within}:${h}`);
    }
    return out;
  }

  TL.views = { joinTokens, drawHeader, figureTitle, DRAW, KIND_VIEWS, show, setKind, redraw, bind, fail, removedPairs, removedLabels, removedInKind };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
