"""Look inside a trained checkpoint: attention maps, rollout and gradient-weighted attention as PNGs.

The same as `python -m transformer_lab.explain` (the tool lives in the package; this file runs it from a
checkout): `python scripts/explain.py --help`.
"""

from transformer_lab.cli import run
from transformer_lab.explain import main

if __name__ == "__main__":
    run(main)
