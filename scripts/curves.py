"""Training curves of several runs in one figure, from their TensorBoard logs.

The same as `python -m transformer_lab.curves` (the tool lives in the package; this file runs it from a
checkout): `python scripts/curves.py --help`.
"""

from transformer_lab.cli import run
from transformer_lab.curves import main

if __name__ == "__main__":
    run(main)
