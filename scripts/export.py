"""Write a checkpoint's model for TransformerLens, Hugging Face transformers or ONNX Runtime.

The same as `python -m transformer_lab.export` (the tool lives in the package; this file runs it from a
checkout): `python scripts/export.py --help`.
"""

from transformer_lab.cli import run
from transformer_lab.export import main

if __name__ == "__main__":
    run(main)
