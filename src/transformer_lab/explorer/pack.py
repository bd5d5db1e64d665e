"""Matrices made small for the page: one byte per value, deflate-compressed, as base64 text.

Every row of a matrix of non-negative values (an attention row, a relevance row) is stored as
    q = round(levels * value / row_max)    (uint8, levels <= 255)    and    row_max    (float32),
so a value is q / levels * row_max again, to within half a level of its row's largest value. The bytes
are compressed with zlib (the browser reads them with `DecompressionStream("deflate")`) and base64-encoded
into the page's JSON. An 8-layer, 8-head map of 256 tokens (4.2 million weights) takes 1 byte per weight
before compression, against 8 as JSON text; fewer levels compress further (`pack_within`).
"""

import base64
import zlib

import numpy as np


def _encode(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data, 6)).decode("ascii")


def _decode(text: str) -> bytes:
    return zlib.decompress(base64.b64decode(text))


LEVELS = (255, 127, 63, 31, 15)  # the precisions `pack_within` tries, finest first


def pack(values: np.ndarray, levels: int = 255) -> dict:
    """An array [..., rows, cols] of values >= 0 as {"shape", "levels", "q", "scale"}: q the uint8
    codes (0 to `levels`), scale the float32 row maxima (little-endian), each deflated and base64-encoded."""
    if not 1 <= levels <= 255:
        raise ValueError(f"levels={levels} must be between 1 and 255 (one byte per value)")
    values = np.clip(np.nan_to_num(np.asarray(values, dtype=np.float32)), 0.0, None)
    if values.ndim < 2:
        raise ValueError(f"pack needs a matrix or a stack of them, got shape {values.shape}")
    scale = values.max(axis=-1)
    safe = np.where(scale > 0, scale, 1.0)[..., None]
    codes = np.rint(values / safe * levels).astype(np.uint8)
    return {
        "shape": list(values.shape),
        "levels": levels,
        "q": _encode(codes.tobytes()),
        "scale": _encode(scale.astype("<f4").tobytes()),
    }


def packed_size(packed: dict) -> int:
    """Characters the packed array takes in the page."""
    return len(packed["q"]) + len(packed["scale"])


def pack_within(arrays: list[np.ndarray], budget: int) -> list[dict]:
    """`pack` every array with the finest of `LEVELS` that keeps them together within `budget`
    characters (the coarsest if none does): the data is thinned only where it would not fit."""
    for levels in LEVELS:
        packed = [pack(a, levels) for a in arrays]
        if sum(packed_size(p) for p in packed) <= budget:
            break
    return packed


def unpack(packed: dict) -> np.ndarray:
    """The values a packed array holds, as the page computes them: q / levels * row_max (float64)."""
    shape = tuple(packed["shape"])
    codes = np.frombuffer(_decode(packed["q"]), dtype=np.uint8).reshape(shape)
    scale = np.frombuffer(_decode(packed["scale"]), dtype="<f4").reshape(shape[:-1])
    return codes.astype(np.float64) / packed["levels"] * scale.astype(np.float64)[..., None]
