/* erf.js: erf and the exact GELU for the page's forward pass (model.js). JavaScript has no Math.erf:
 * erfExact sums its series (continued fraction in the tails), and erf interpolates a table of it, good to
 * 7e-10, at a tenth of the series' cost. No DOM: it runs in the page, its Web Worker and Node.
 */
(function (TL) {
  "use strict";
  /** erf(x) to ~1e-14 absolute (JavaScript has no Math.erf): the Maclaurin series
   *  erf(x) = 2/sqrt(pi) sum_n (-1)^n x^(2n+1) / (n! (2n+1)) for |x| < 3 (at most ~60 terms; the
   *  largest term is < e^9, so float64 keeps ~12 digits after cancellation), and the continued fraction
   *  erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))) for |x| >= 3, evaluated
   *  from the back (erfc(3) = 2.2e-5, so its relative error hardly matters). */
  function erfExact(x) {
    const a = Math.abs(x);
    let result;
    if (a < 3) {
      const x2 = a * a;
      let term = a;
      let sum = a;
      for (let n = 1; n < 80; n++) {
        term *= -x2 / n;
        const add = term / (2 * n + 1);
        sum += add;
        if (Math.abs(add) < 1e-17 * Math.abs(sum)) break;
      }
      result = (2 / Math.sqrt(Math.PI)) * sum;
    } else if (a < 6.5) {
      let fraction = a; // x + (k/2) / (x + ((k+1)/2) / ...), from k = 60 down to 1
      for (let k = 60; k >= 1; k--) fraction = a + (k / 2) / fraction;
      result = 1 - Math.exp(-a * a) / Math.sqrt(Math.PI) / fraction;
    } else {
      result = 1; // erfc(6.5) < 4e-20
    }
    return x < 0 ? -result : result;
  }

  /** erf from a table: cubic Hermite interpolation between nodes 1/64 apart on [0, 6.5], each node
   *  holding erf and its derivative 2/sqrt(pi) exp(-x^2) (from `erfExact`). The interpolation error is
   *  at most h^4 / 384 * max |erf^(4)| < 7e-10 (h = 1/64), far below the 1e-7 GELU needs, at a tenth
   *  of the series' cost. */
  const ERF_STEP = 1 / 64;
  const ERF_NODES = Math.ceil(6.5 / ERF_STEP) + 2;
  const ERF_VALUE = new Float64Array(ERF_NODES);
  const ERF_SLOPE = new Float64Array(ERF_NODES); // derivative times the step
  for (let i = 0; i < ERF_NODES; i++) {
    const x = i * ERF_STEP;
    ERF_VALUE[i] = erfExact(x);
    ERF_SLOPE[i] = (2 / Math.sqrt(Math.PI)) * Math.exp(-x * x) * ERF_STEP;
  }
  function erf(x) {
    const a = Math.abs(x);
    if (!(a < 6.5)) return x !== x ? NaN : x < 0 ? -1 : 1;
    const u = a / ERF_STEP;
    const i = Math.floor(u);
    const t = u - i;
    const t2 = t * t;
    const t3 = t2 * t;
    const value = (2 * t3 - 3 * t2 + 1) * ERF_VALUE[i] + (t3 - 2 * t2 + t) * ERF_SLOPE[i] +
      (-2 * t3 + 3 * t2) * ERF_VALUE[i + 1] + (t3 - t2) * ERF_SLOPE[i + 1];
    return x < 0 ? -value : value;
  }

  /** GELU, exact form (nn.GELU's default): x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))). */
  const gelu = (x) => 0.5 * x * (1 + erf(x * Math.SQRT1_2));

  TL.erf = { erf, erfExact, gelu };
})((globalThis.TransformerLab = globalThis.TransformerLab || {}));
