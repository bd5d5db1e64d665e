"""Count a model's parameters, part by part: where the weights of a Transformer are.

The same as `python -m transformer_lab.params` (the tool lives in the package; this file runs it from a
checkout): `python scripts/params.py --help`.
"""

from transformer_lab.cli import run
from transformer_lab.params import main

if __name__ == "__main__":
    run(main)
