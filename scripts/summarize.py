"""Compare runs: one table, one row per run, best first.

The same as `python -m transformer_lab.summarize` (the tool lives in the package; this file runs it from a
checkout): `python scripts/summarize.py --help`.
"""

from transformer_lab.cli import run
from transformer_lab.summarize import main

if __name__ == "__main__":
    run(main)
