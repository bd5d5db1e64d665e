/* weights.js: the page's packed buffers (weights, means for mean ablation) as tensors: an inflated
 * little-endian buffer of float32 (or float16, the opt-in half-size weights) and a manifest [name,
 * offset in values, shape] per tensor, written by explorer/live.py. No DOM.
 */
(function (TL) {
  "use strict";
  /** IEEE half -> float32 (the opt-in float16 weights). */
  function halfToFloat(bits) {
    const out = new Float32Array(bits.length);
    for (let i = 0; i < bits.length; i++) {
      const h = bits[i];
      const sign = h & 0x8000 ? -1 : 1;
      const exponent = (h >> 10) & 0x1f;
      const fraction = h & 0x3ff;
      out[i] = exponent === 0 ? sign * 2 ** -14 * (fraction / 1024)
        : exponent === 31 ? (fraction ? NaN : sign * Infinity)
        : sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
    }
    return out;
  }

  /** The tensors of an inflated weight buffer: {name: Float32Array view}, from the manifest's
   *  [name, offset (in values), shape] entries. `dtype`: float32 | float16 (as stored). */
  function tensors(bytes, manifest, dtype) {
    let values;
    if (dtype === "float16") {
      values = halfToFloat(new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.length / 2));
    } else {
      const copy = bytes.byteOffset % 4 === 0 ? bytes : bytes.slice(); // Float32Array needs alignment
      values = new Float32Array(copy.buffer, copy.byteOffset, copy.length / 4);
    }
    const out = {};
    for (const [name, offset, shape] of manifest) {
      const size = shape.reduce((a, b) => a * b, 1);
      if (offset + size > values.length) throw new Error(`weight ${name} lies outside the weight data`);
      out[name] = values.subarray(offset, offset + size);
    }
    return out;
  }

  TL.weights = { tensors, halfToFloat };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
