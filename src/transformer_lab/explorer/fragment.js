/* fragment.js: the URL fragment keeps the state (input, view, kind, layer, query, removed heads,
 * ablation, step); a link made by someone else is read field by field, and a field the page cannot
 * use is ignored and named in one sentence saying what to use.
 */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { LIVE, HEADS } = state;
  const { kind, firstLayer, lastLayer } = TL.read;
  const { $, el } = TL.util;
  const { DRAW, redraw, removedLabels } = TL.views;
  const { drawHeadsPanel } = TL.live;

  // ================================================================================ URL fragment
  /** The view a student reached, in the URL (bookmark it, send it): input, view, kind, layer, query,
   *  removed heads and their ablation, step. */
  function saveFragment() {
    if (!state.ready) return;
    const params = new URLSearchParams();
    params.set("view", state.view);
    if (state.kinds.length > 1) params.set("kind", kind().name);
    params.set("layer", state.layer);
    if (state.selected && state.selected.side === "query") params.set("query", state.selected.index);
    if (state.live) {
      const text = $("input-box").value;
      if (text !== LIVE.input.text) params.set("input", text);
      if (state.live.removed.size) params.set("off", removedLabels().join(","));
      if (state.live.method !== "zero") params.set("ablation", state.live.method);
      if (state.live.series && state.live.step !== state.live.firstStep) params.set("step", state.live.series.steps[state.live.step]);
    }
    try {
      history.replaceState(null, "", "#" + params.toString());
    } catch (error) {
      // an inline page (Jupyter's srcdoc iframe) may have no URL to write to
    }
  }

  // Reading a fragment: every field is checked against its own type and range; a value the page
  // cannot use is ignored (the default stays) and named in a notice under the input/output lines.
  const INPUT_LIMIT = 100000; // characters the input box takes from the URL or from setInput
  const inputFits = (text) => text.length <= INPUT_LIMIT;
  const FIELDS = Object.freeze(["view", "kind", "layer", "query", "input", "off", "ablation", "step"]);
  const LIVE_FIELDS = Object.freeze(["input", "off", "ablation", "step"]);
  const NOTICES_SHOWN = 8;

  /** The fragment's fields, read once (the first of a repeated field), as a Map of strings. */
  function readFragment() {
    const fields = new Map();
    let hash = "";
    try {
      hash = window.location.hash.slice(1);
    } catch (error) {
      return fields; // an inline page (Jupyter's srcdoc iframe) may have no URL
    }
    const seen = new Set();
    for (const [key, value] of new URLSearchParams(hash)) {
      if (seen.has(key)) continue;
      seen.add(key);
      if (FIELDS.includes(key)) fields.set(key, value);
      else ignore(key, value, `the fragment's fields are ${FIELDS.join(", ")}`);
    }
    return fields;
  }

  const clip = (text, n = 40) => (text.length > n ? text.slice(0, n - 3) + "..." : text);

  /** Say, in one sentence, that field=value is ignored and why (what is allowed). */
  function ignore(field, value, why) {
    const v = value === "" || /\s/.test(value) ? JSON.stringify(clip(value)) : clip(value);
    state.notices.push({ field: clip(field, 24), text: `URL fragment: ${clip(field, 24)}=${v} is ignored; ${why}.` });
    let box = $("fragment-notice");
    if (!box) {
      box = el("div", { id: "fragment-notice", class: "fragment-notice", role: "status" });
      $("io").after(box);
    }
    const line = (attrs) => el("p", { class: "live-status note", style: { margin: "4px 0 0" }, ...attrs });
    const lines = state.notices.slice(0, NOTICES_SHOWN).map((n) => line({ "data-field": n.field, text: n.text }));
    if (state.notices.length > NOTICES_SHOWN) lines.push(line({ text: `URL fragment: ${state.notices.length - NOTICES_SHOWN} more fields are ignored.` }));
    box.replaceChildren(...lines);
  }

  /** A field's text as an integer from low to high (decimal digits, nothing else), or null. */
  function integerField(text, low, high) {
    if (!/^-?\d{1,15}$/.test(text)) return null;
    const value = Number(text);
    return value >= low && value <= high ? value : null;
  }
  const integers = (low, high) => (low === high ? `use ${low}` : `use an integer from ${low} to ${high}`);
  const listed = (values) => (values.length > 8 ? [...values.slice(0, 5), "...", ...values.slice(-2)] : values).join(", ");

  /** The fragment's view part: view, kind, layer, query (precomputed pages too). Returns the view to
   *  show; a layer the page stores only once its model runs, and a query of an input the URL brings,
   *  wait in `wanted` for the first run (applyFragmentAfterRun). */
  function applyFragmentView(fields, wanted) {
    let view = null;
    if (fields.has("view")) {
      const name = fields.get("view");
      const views = Object.keys(DRAW).filter((v) => v !== "patching" || LIVE);
      if (Object.hasOwn(DRAW, name) && views.includes(name)) view = name;
      else ignore("view", name, `use ${views.join(", ")}`);
    }
    if (fields.has("kind")) {
      const name = fields.get("kind");
      const index = state.kinds.findIndex((k) => k.name === name);
      if (index >= 0) {
        state.kind = index;
        state.layer = lastLayer(kind());
        state.enlarged = { layer: state.layer, head: 0 };
      } else {
        ignore("kind", name, `use ${state.kinds.map((k) => k.name).join(", ")}`);
      }
    }
    if (fields.has("layer")) {
      const k = kind();
      const layer = integerField(fields.get("layer"), 0, lastLayer(k));
      if (layer === null) ignore("layer", fields.get("layer"), integers(0, lastLayer(k)));
      else if (layer < firstLayer(k)) wanted.layer = layer; // not stored: computed once the model runs
      else state.layer = layer;
    }
    if (fields.has("query")) {
      const newInput = LIVE && fields.has("input") && inputFits(fields.get("input"));
      if (newInput) wanted.query = fields.get("query"); // the query positions are the new input's
      else applyQuery(fields.get("query"));
    }
    return view;
  }

  /** Select query `text` of the kind shown, if it is one of its query positions. */
  function applyQuery(text) {
    const n = kind().rows.length;
    const index = integerField(text, 0, n - 1);
    if (index === null) ignore("query", text, `${integers(0, n - 1)} (a query position)`);
    else state.selected = { side: "query", index };
    return index !== null;
  }

  /** The fragment's live part: input, removed heads, ablation, step (before the first update). */
  function applyFragmentLive(fields) {
    if (fields.has("input")) {
      const text = fields.get("input");
      if (inputFits(text)) $("input-box").value = text;
      else ignore("input", text, `it has ${text.length} characters; use at most ${INPUT_LIMIT}`);
    }
    if (fields.has("ablation")) {
      const name = fields.get("ablation");
      if (name === "zero" || (name === "mean" && LIVE.means)) state.live.method = name;
      else ignore("ablation", name, LIVE.means ? "use zero or mean" : "use zero (this page carries no means for mean ablation)");
    }
    if (fields.has("off")) {
      const labels = LIVE.spec.layers.map((l) => l.label);
      const keys = new Map(); // "L0H1" -> "0:1", for the heads the model has
      labels.forEach((label, l) => {
        for (let h = 0; h < HEADS; h++) keys.set(`${label}H${h}`, `${l}:${h}`);
      });
      const unknown = [];
      for (const part of fields.get("off").split(",")) {
        const name = part.trim();
        if (keys.has(name)) state.live.removed.add(keys.get(name));
        else if (name) unknown.push(name);
      }
      if (unknown.length) ignore("off", unknown.join(","), `use head labels such as ${labels[0]}H0 (layers ${listed(labels)}; heads H0 to H${HEADS - 1})`);
      drawHeadsPanel();
    }
    if (fields.has("step")) {
      const text = fields.get("step");
      const steps = state.live.series ? state.live.series.steps : null;
      const index = steps && /^-?\d{1,15}$/.test(text) ? steps.indexOf(Number(text)) : -1;
      if (index >= 0) {
        state.live.step = index;
        $("step-slider").value = index;
        $("step-value").textContent = state.live.series.labels[index];
      } else {
        ignore("step", text, steps ? `use one of the steps ${listed(steps)}` : "this page has no step slider");
      }
    }
  }

  /** What waited for the first run: a layer the page did not store, a query of the URL's input. */
  function applyFragmentAfterRun(wanted) {
    let changed = false;
    if (wanted.layer !== undefined) {
      const k = kind();
      if (wanted.layer >= firstLayer(k)) {
        state.layer = wanted.layer;
        changed = true;
      } else {
        ignore("layer", String(wanted.layer), `${integers(firstLayer(k), lastLayer(k))} (the model has not run on a valid input)`);
      }
    }
    if (wanted.query !== undefined) changed = applyQuery(wanted.query) || changed;
    if (changed) {
      redraw();
      TL.main.scrollToQuery();
    }
  }

  TL.fragment = { saveFragment, INPUT_LIMIT, inputFits, FIELDS, LIVE_FIELDS, NOTICES_SHOWN, readFragment, clip, ignore, integerField, integers, listed, applyFragmentView, applyQuery, applyFragmentLive, applyFragmentAfterRun };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
