"""Tutorial figures as PNGs.

The same as `python -m transformer_lab.plots` (the tool lives in the package; this file runs it from a
checkout): `python scripts/plots.py --help`.
"""

from transformer_lab.cli import run
from transformer_lab.plots import main

if __name__ == "__main__":
    run(main)
