"""Take a trained checkpoint apart causally: head ablation, activation patching, logit lens, faithfulness.

The same as `python -m transformer_lab.interpret` (the tool lives in the package; this file runs it from a
checkout): `python scripts/interpret.py --help`.
"""

from transformer_lab.cli import run
from transformer_lab.interpret import main

if __name__ == "__main__":
    run(main)
