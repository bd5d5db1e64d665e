/* checks.js: the checks of the page's API arguments (window.transformerLab, api.js), said once. No DOM.
 */
(function (TL) {
  "use strict";
  // ------------------------------------------------------------------------- argument checks
  /** The checks of an API's arguments (the page's window.transformerLab), said once: each returns the
   *  value to use (lists copied, so a caller cannot change them after the check) or throws an Error
   *  "fn: name=value <problem>; use <what is allowed>". `model` gives the ranges: vocabulary, max_len,
   *  attention layers and heads, the means it carries. Own properties only are read. */
  TL.checks = (() => {
    /** A short, safe rendering of any value for a message (a hostile value cannot make it throw). */
    function shown(value, depth = 0) {
      try {
        if (typeof value === "string") return JSON.stringify(value.length > 40 ? value.slice(0, 37) + "..." : value);
        if (typeof value === "number") return Object.is(value, -0) ? "-0" : String(value);
        if (typeof value === "bigint") return `${value}n`;
        if (typeof value === "symbol") return value.toString();
        if (typeof value === "function") return "a function";
        if (value === undefined || value === null || typeof value === "boolean") return String(value);
        if (depth > 1) return Array.isArray(value) ? "[...]" : "{...}";
        if (Array.isArray(value)) {
          const items = [];
          for (let i = 0; i < Math.min(value.length, 6); i++) items.push(shown(value[i], depth + 1));
          return `[${items.join(",")}${value.length > 6 ? `,... (${value.length} items)` : ""}]`;
        }
        const keys = Object.keys(value);
        const items = keys.slice(0, 4).map((key) => `${key.slice(0, 20)}: ${shown(value[key], depth + 1)}`);
        return `{${items.join(", ")}${keys.length > 4 ? ", ..." : ""}}`;
      } catch (error) {
        return "(a value that cannot be shown)";
      }
    }

    /** Throw "fn: what problem; use allowed" (`what`: "name=value", or a name alone). */
    function fail(fn, what, problem, allowed) {
      throw new Error(`${fn}: ${what} ${problem}; use ${allowed}`);
    }
    const bad = (fn, name, value, problem, allowed) => fail(fn, `${name}=${shown(value)}`, problem, allowed);
    const own = (object, key) => (Object.hasOwn(object, key) ? object[key] : undefined);
    const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);
    /** A dense copy of an array (a hole becomes undefined, so that every entry is checked). */
    const copy = (array) => Array.from({ length: array.length }, (_, i) => array[i]);

    /** An integer from low to high (high may be Infinity); `why` explains the bound. */
    function integer(fn, name, value, low, high, why = "") {
      const allowed = low === high ? `${low}` : high === Infinity ? `an integer from ${low} up` : `an integer from ${low} to ${high}`;
      if (!Number.isInteger(value)) bad(fn, name, value, "is not an integer", allowed);
      if (value < low || value > high) bad(fn, name, value, `is out of range${why}`, allowed);
      return value;
    }

    /** A number that passes `ok` (finite numbers only); `allowed` says which. */
    function number(fn, name, value, ok, allowed) {
      if (typeof value !== "number" || !Number.isFinite(value) || !ok(value)) bad(fn, name, value, "is not allowed", allowed);
      return value;
    }

    /** An options object: nothing (undefined or null), or a plain object whose keys are among `keys`.
     *  Returns an object with exactly `keys` as own properties (undefined where not given). */
    function fields(fn, name, value, keys) {
      const out = {};
      for (const key of keys) out[key] = undefined;
      if (value === undefined || value === null) return out;
      if (!isObject(value)) bad(fn, name, value, "is not an object", `{${keys.join(", ")}} or nothing`);
      for (const key of Object.keys(value)) {
        if (!keys.includes(key)) fail(fn, `${name}.${shown(key).slice(1, -1)}`, "is not known", keys.join(", "));
        out[key] = value[key];
      }
      return out;
    }

    /** A list of token ids: a non-empty array of at most max_len integers in [0, vocab_size). */
    function tokens(fn, name, value, model) {
      const V = model.config.vocab_size;
      const L = model.config.max_len;
      const allowed = `an array of 1 to ${L} integers from 0 to ${V - 1}`;
      if (!Array.isArray(value)) bad(fn, name, value, "is not a list of token ids", allowed);
      if (value.length === 0) fail(fn, name, "is empty", allowed);
      if (value.length > L) fail(fn, name, `has ${value.length} tokens, more than the model's max_len=${L}`, `at most ${L}`);
      const ids = copy(value);
      ids.forEach((id, i) => {
        if (!(Number.isInteger(id) && id >= 0 && id < V)) bad(fn, `${name}[${i}]`, id, "is not a token id", `integers from 0 to ${V - 1}`);
      });
      return ids;
    }

    /** The model's inputs, one token list per input: a list of token ids (or [ids]) for a model of one
     *  input; {source, target} (or [source, target]) for an encoder-decoder. */
    function inputs(fn, name, value, model) {
      if (!model.spec.readsSource) {
        if (Array.isArray(value) && value.length === 1 && Array.isArray(value[0])) return [tokens(fn, `${name}[0]`, value[0], model)];
        return [tokens(fn, name, value, model)];
      }
      if (Array.isArray(value) && value.length === 2 && value.every(Array.isArray)) {
        return [tokens(fn, `${name}[0]`, value[0], model), tokens(fn, `${name}[1]`, value[1], model)];
      }
      const allowed = "{source: [token ids], target: [token ids]} (an encoder-decoder reads a source and a target)";
      if (!isObject(value)) bad(fn, name, value, "is not {source, target}", allowed);
      const parts = fields(fn, name, value, ["source", "target"]);
      return [tokens(fn, `${name}.source`, parts.source, model), tokens(fn, `${name}.target`, parts.target, model)];
    }

    /** Heads to remove: a list of [layer, head] integer pairs (layers in attention_layers order), at most
     *  one per head of the model; nothing (undefined or null) is none unless `required`. */
    function heads(fn, name, value, model, required = false) {
      const L = model.numLayers;
      const H = model.H;
      const allowed = `[layer, head] pairs with layer 0 to ${L - 1} and head 0 to ${H - 1}`;
      if ((value === undefined || value === null) && !required) return [];
      if (!Array.isArray(value)) bad(fn, name, value, "is not a list of [layer, head] pairs", `a list of ${allowed}`);
      if (value.length > L * H) fail(fn, name, `has ${value.length} pairs, more than the model's ${L * H} heads`, `at most ${L * H} ${allowed}`);
      return copy(value).map((pair, i) => {
        const ok = Array.isArray(pair) && pair.length === 2 && Number.isInteger(pair[0]) && Number.isInteger(pair[1]);
        if (!ok) bad(fn, `${name}[${i}]`, pair, "is not a [layer, head] pair of integers", allowed);
        if (pair[0] < 0 || pair[0] >= L || pair[1] < 0 || pair[1] >= H) bad(fn, `${name}[${i}]`, pair, "is out of range", allowed);
        return [pair[0], pair[1]];
      });
    }

    /** An ablation method: "zero" (also for nothing), or "mean" where the model carries its means. */
    function method(fn, name, value, model) {
      const means = Object.keys(model.means).length > 0;
      if (value === undefined || value === null || value === "zero") return "zero";
      if (value === "mean" && means) return "mean";
      if (value === "mean") bad(fn, name, value, "needs the heads' means, which this page does not carry", '"zero"');
      bad(fn, name, value, "is not an ablation method", means ? '"zero" or "mean"' : '"zero" (this page carries no means)');
    }

    /** A string of at most `limit` characters. */
    function text(fn, name, value, limit) {
      if (typeof value !== "string") bad(fn, name, value, "is not a string", `a string of at most ${limit} characters`);
      if (value.length > limit) fail(fn, name, `has ${value.length} characters, more than ${limit}`, `at most ${limit}`);
      return value;
    }

    /** One boolean per position: an array of exactly `count` true/false. */
    function flags(fn, name, value, count) {
      const allowed = `an array of ${count} booleans (one per output position)`;
      if (!Array.isArray(value)) bad(fn, name, value, "is not a list of booleans", allowed);
      if (value.length !== count) fail(fn, name, `has ${value.length} entries`, allowed);
      const out = copy(value);
      out.forEach((flag, i) => {
        if (typeof flag !== "boolean") bad(fn, `${name}[${i}]`, flag, "is not a boolean", "true or false");
      });
      return out;
    }

    /** undefined, or a value of type `type` ("function", "boolean"). */
    function optional(fn, name, value, type) {
      if (value !== undefined && typeof value !== type) bad(fn, name, value, `is not a ${type}`, `a ${type} or nothing`);
      return value;
    }

    return { shown, fail, bad, own, isObject, integer, number, fields, tokens, inputs, heads, method, text, flags, optional };
  })();

})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
