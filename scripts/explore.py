"""Write an interactive attention explorer for one input of a checkpoint: ONE self-contained HTML file.

The same as `python -m transformer_lab.explore` (the tool lives in the package; this file runs it from a
checkout): `python scripts/explore.py --help`.
"""

from transformer_lab.cli import run
from transformer_lab.explore import main

if __name__ == "__main__":
    run(main)
