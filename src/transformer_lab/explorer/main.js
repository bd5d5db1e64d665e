/* main.js: the first view (decoded, drawn, the fragment applied), then the live page. Runs last. */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { DATA, LIVE, HEADS, START } = state;
  const { kind, lastLayer } = TL.read;
  const { $, unpack } = TL.util;
  const { rowY, sharpestQuery } = TL.view_head;
  const { bind, drawHeader, fail, show } = TL.views;
  const { startLive } = TL.live;
  const { LIVE_FIELDS, applyFragmentView, ignore, readFragment, saveFragment } = TL.fragment;

  // ===================================================================================== main

  /** The chosen query in sight (the head view scrolls to it). */
  function scrollToQuery() {
    const scroller = document.querySelector(".head-scroll");
    if (state.view === "head" && state.selected && state.head) scroller.scrollTop = Math.max(0, rowY(state.selected.index) - scroller.clientHeight / 2);
  }

  async function main() {
    if (typeof DecompressionStream === "undefined") {
      throw new Error("this browser has no DecompressionStream; open the page in a current Chrome, Edge, Firefox or Safari");
    }
    const t0 = performance.now();
    state.kinds = await Promise.all(DATA.kinds.map(async (k) => ({ ...k, stack: await unpack(k.maps) })));
    state.overlays = await Promise.all(DATA.overlays.items.map(async (o) => {
      const stack = await unpack(o.matrix);
      return { ...o, stack, original: stack, stale: false };
    }));
    state.timings.decode = performance.now() - t0;
    state.heads = Array.from({ length: HEADS }, () => true);
    // the first view: an encoder-decoder opens on cross-attention (how each output reads the source);
    // every page on its last layer and the query whose attention there is sharpest
    state.kind = Math.max(0, state.kinds.findIndex((k) => k.name === DATA.overlays.kind));
    const fields = readFragment();
    const wanted = {};
    state.layer = lastLayer(kind());
    state.enlarged = { layer: state.layer, head: 0 };
    state.selected = null;
    const view = applyFragmentView(fields, wanted);
    if (!state.selected) state.selected = { side: "query", index: sharpestQuery(kind(), state.layer) };
    drawHeader();
    bind();
    $("kind-select").value = state.kind;
    show(view && view !== "patching" ? view : "head");
    scrollToQuery();
    window.explorerRenderMs = performance.now() - START;
    window.explorerLoadMs = performance.now(); // from the start of navigation: the HTML's parsing included
    document.body.dataset.ready = "true";
    state.ready = true;
    saveFragment();
    const status = $("live-status");
    if (LIVE) {
      await startLive(fields, wanted);
      if (view === "patching") show("patching");
    } else {
      for (const field of LIVE_FIELDS) if (fields.has(field)) ignore(field, fields.get(field), "this page does not run its model");
      document.body.dataset.live = "none";
      if (DATA.live_note) {
        status.classList.add("note");
        status.textContent = `This page shows the views computed in Python for one input; the model is not in the page, because ${DATA.live_note}.`;
      }
    }
  }

  TL.main = { scrollToQuery, main };
  main().catch(fail);
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
