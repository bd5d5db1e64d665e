/* engine.js: where the page runs its model for the views: on the page's thread, or in a Web Worker
 * started from the model's own scripts (a Blob of the #model-js element).
 */
(function (TL) {
  "use strict";
  const state = TL.state;
  const { LIVE } = state;
  const { $, inflate } = TL.util;

  /** Where the page runs the model for its views: on the page's thread (small models: a few ms), or
   *  in a Web Worker (large ones), so that typing never freezes the page. Either way `view(request)`
   *  returns a Promise of the run. The API's forward() always runs here, synchronously. */
  class Engine {
    constructor(useWorker) {
      this.models = []; // decoded models per step (the page's thread)
      this.runners = [];
      this.worker = null;
      this.pending = new Map();
      this.nextId = 1;
      this.sent = new Set();
      if (useWorker) {
        try {
          const source = $("model-js").textContent;
          const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
          this.worker = new Worker(url);
          this.worker.onmessage = (event) => {
            const { id, result, error } = event.data;
            const waiting = this.pending.get(id);
            if (!waiting) return;
            this.pending.delete(id);
            if (error) waiting.reject(new Error(error));
            else waiting.resolve(result);
          };
          this.worker.onerror = (event) => {
            console.warn("the explorer's worker failed; running on the page instead", event.message);
            this.worker = null;
            for (const waiting of this.pending.values()) waiting.reject(new Error("worker failed"));
            this.pending.clear();
          };
        } catch (error) {
          this.worker = null; // a browser that refuses workers from a file: the page's thread it is
        }
      }
    }

    /** The model of step `index` (decoded once): its weights, and its means for mean ablation. */
    async model(index) {
      if (this.models[index]) return this.models[index];
      const series = LIVE.series;
      const weights = (series && series.weights[index]) || LIVE.weights;
      const meansPacked = series ? (series.weights[index] ? series.means[index] : LIVE.means) : LIVE.means;
      const bytes = await inflate(weights.data);
      const meanBytes = meansPacked ? await inflate(meansPacked.data) : null;
      const tensors = TL.weights.tensors(bytes, weights.manifest, weights.dtype);
      const means = meanBytes ? TL.weights.tensors(meanBytes, meansPacked.manifest, "float32") : {};
      const model = new TL.model.Model(LIVE.spec, tensors, means);
      this.models[index] = model;
      this.runners[index] = new TL.runs.Runner(model);
      if (this.worker) {
        this.worker.postMessage({
          type: "model", index, spec: LIVE.spec, weights: bytes.slice().buffer, manifest: weights.manifest, dtype: weights.dtype,
          means: meanBytes ? meanBytes.slice().buffer : null, meansManifest: meansPacked ? meansPacked.manifest : null,
        });
      }
      return model;
    }

    async view(index, request) {
      await this.model(index);
      if (!this.worker) return TL.runs.viewRun(this.models[index], this.runners[index], request);
      const id = this.nextId++;
      return new Promise((resolve, reject) => {
        this.pending.set(id, { resolve, reject });
        this.worker.postMessage({ type: "view", id, index, request });
      }).catch((error) => {
        if (this.worker) throw error;
        return TL.runs.viewRun(this.models[index], this.runners[index], request); // the worker died: run here
      });
    }
  }

  /** Multiply-adds of one forward pass over T positions (to choose between the page and a worker). */
  function cost(T) {
    const c = LIVE.spec.config;
    const D = c.model_dim;
    const perLayer = T * (4 * D * D + 2 * D * c.dim_feedforward) + 2 * T * T * D;
    return LIVE.spec.stacks.length * c.num_layers * perLayer + T * D * c.output_classes;
  }
  const WORKER_COST = 1e8; // ~0.1 s of JavaScript: above it, the views' runs go to a worker

  TL.engine = { Engine, cost, WORKER_COST };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
