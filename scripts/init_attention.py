"""Attention at initialisation: why the scores are divided by sqrt(d_k).

The same as `python -m transformer_lab.init_attention` (the tool lives in the package; this file runs it
from a checkout): `python scripts/init_attention.py --help`.
"""

from transformer_lab.cli import run
from transformer_lab.init_attention import main

if __name__ == "__main__":
    run(main)
