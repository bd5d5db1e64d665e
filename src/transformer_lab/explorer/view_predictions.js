/* view_predictions.js: the predictions: top-3 per position, the expected output, right or wrong. */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { $, el, pct, shown } = TL.util;

  // -------------------------------------------------------------------------- predictions
  function drawPredictionsView() {
    const rows = state.current.predictions.rows;
    const labelled = rows.filter((p) => p.label !== null);
    const right = labelled.filter((p) => p.correct).length;
    $("prediction-summary").textContent = labelled.length
      ? `${right} of ${labelled.length} predictions with a known label are right (${pct(right / labelled.length)}).`
      : "No expected output is known for this input: the predictions are shown without right or wrong.";
    const readsTitle = state.current.predictions.reads_title;
    const header = el("tr", {}, ...["pos", readsTitle, "1st", "2nd", "3rd", "expected", ""].map((t) => el("th", { text: t })));
    const prob = (entry) =>
      entry
        ? el("span", { class: "prob" }, el("span", { class: "tok", text: shown(entry[0]) }), el("span", { class: "bar", style: { width: `${Math.max(1, Math.round(50 * entry[1]))}px` } }), el("span", { class: "p", text: pct(entry[1]) }))
        : "";
    const body = rows.map((p) =>
      el(
        "tr",
        { class: `prediction ${p.correct === true ? "right" : p.correct === false ? "wrong" : ""}`, "data-position": p.position },
        el("td", { text: p.position }),
        el("td", {}, el("span", { class: "tok", text: shown(p.reads) })),
        el("td", {}, prob(p.top[0])),
        el("td", {}, prob(p.top[1])),
        el("td", {}, prob(p.top[2])),
        el("td", {}, p.label === null ? "–" : el("span", { class: "tok", text: shown(p.label) })),
        el("td", { class: p.correct === true ? "mark-right" : p.correct === false ? "mark-wrong" : "", text: p.correct === true ? "✓" : p.correct === false ? "✗" : "" })
      )
    );
    $("prediction-table").replaceChildren(el("table", {}, el("thead", {}, header), el("tbody", {}, ...body)));
  }

  TL.view_predictions = { drawPredictionsView };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
