"""Write text with a trained language model, or map a source to its output with a sequence-to-sequence one.

The same as `python -m transformer_lab.sample` (the tool lives in the package; this file runs it from a
checkout): `python scripts/sample.py --help`.
"""

from transformer_lab.cli import run
from transformer_lab.sample import main

if __name__ == "__main__":
    run(main)
