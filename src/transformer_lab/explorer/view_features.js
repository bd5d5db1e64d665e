/* view_features.js: an SAE's features (explore sae=<run>): the features active at each token of the
 * input, largest first; hover one for its density and its top-activating examples. A live page runs the
 * SAE itself (sae.js) on its model's activation at the SAE's hook, so the features follow the input and
 * the heads removed; before the model runs (or for a hook the page does not record) it shows the
 * features Python computed for the first input.
 */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { DATA } = state;
  const { $, el, inflate, pct, shown } = TL.util;
  const FEATURES = DATA.features || null;

  /** Decode the SAE's weights once (state.sae), then draw the view again with the page's own numbers. */
  function decode() {
    state.sae = state.sae || { decoding: true };
    return inflate(FEATURES.weights.data).then((bytes) => {
      state.sae = { ...FEATURES, tensors: TL.weights.tensors(bytes, FEATURES.weights.manifest, "float32") };
      state.drawn.features = false;
      if (state.view === "features") TL.views.show("features");
    });
  }

  /** The features of the page's current input, computed in the page (null where it cannot yet). */
  function liveFeatures() {
    const sae = state.sae;
    if (!FEATURES || !FEATURES.where || !sae || !sae.tensors || !state.live || !state.live.inputs) return null;
    const model = state.live.engine.models[state.live.step];
    if (!model) return null;
    const opts = { ablate: TL.views.removedPairs(), ablation: state.live.method };
    const x = TL.sae.hookActivation(model, state.live.inputs, FEATURES.where, opts);
    const T = x.length / sae.d_in;
    return TL.sae.activeFeatures(TL.sae.encode(sae, x, T), T, sae.width, FEATURES.shown);
  }

  function tooltip(index) {
    const examples = FEATURES.examples[index] || [];
    const density = FEATURES.density[index];
    const lines = [`F${index}: fires at ${pct(density)} of ${FEATURES.examples_of}`];
    if (examples.length) lines.push("top examples ([the token it fires at]):", ...examples.map((e) => `  ${e}`));
    return lines.join("\n");
  }

  function drawFeaturesView() {
    if (!FEATURES) return;
    if (!state.sae) decode();
    const computed = liveFeatures();
    const rows = computed || FEATURES.current;
    const input = state.live && state.live.inputs ? state.live.inputs[FEATURES.where ? FEATURES.where.stack : 0] : null;
    const tokens = input ? input.map((id) => state.live.names[id]) : state.current.input;
    $("features-summary").textContent =
      `${FEATURES.kind} SAE at ${FEATURES.hook}: ${FEATURES.width} features of ${FEATURES.d_in}-dim activations. ` +
      (computed ? "Computed in the page for this input." : FEATURES.where ? "The first input's features (the page computes them once its model runs)." : "The first input's features (the page does not record this hook's activation).");
    const body = rows.map((row, t) =>
      el(
        "tr",
        { "data-position": t },
        el("td", { text: t }),
        el("td", {}, el("span", { class: "tok", text: shown(tokens[t] === undefined ? "" : tokens[t]) })),
        el("td", {}, el("span", { class: "chips" }, ...row.map(([index, value]) => el("span", { class: "feature", "data-feature": index, title: tooltip(index), text: `F${index} ${value.toFixed(2)}` }))))
      )
    );
    const header = el("tr", {}, ...["pos", "token", "active features (largest first; hover one)"].map((t) => el("th", { text: t })));
    $("features-table").replaceChildren(el("table", {}, el("thead", {}, header), el("tbody", {}, ...body)));
  }

  TL.view_features = { drawFeaturesView, liveFeatures, available: Boolean(FEATURES) };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
