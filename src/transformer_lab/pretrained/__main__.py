"""List the ready-made models shipped with transformer-lab: what each is, the test metrics it reaches and
the command that trained it.

    python -m transformer_lab.pretrained            # the table
    python -m transformer_lab.pretrained reverse    # one model's whole record

Use one wherever a checkpoint path goes, as ckpt_path=pretrained:<name>:
    python -m transformer_lab.sample ckpt_path=pretrained:sort source="3 1 3 9 1 7 0"
    python -m transformer_lab.explain ckpt_path=pretrained:reverse_2l4h index=5
    python -m transformer_lab.interpret ckpt_path=pretrained:shakespeare analysis=lens text="ROMEO:"
    model = transformer_lab.load_model("pretrained:reverse")
Retrain them all: python scripts/pretrain.py
"""

import argparse
import json

from transformer_lab import pretrained
from transformer_lab.cli import ArgumentParser, run

COLUMNS = ("name", "architecture", "shape", "parameters", "test metrics", "trained by")


def count(parameters: int | None) -> str:
    """10574 -> `10.6 K`, 1_234_567 -> `1.23 M`."""
    if parameters is None:
        return "?"
    return f"{parameters / 1e6:.2f} M" if parameters >= 1e6 else f"{parameters / 1e3:.1f} K"


def rows() -> list[tuple[str, ...]]:
    """One row per shipped model, in models.json's order."""
    table = []
    for name, entry in pretrained.records().items():
        shipped = (pretrained.DIRECTORY / entry["file"]).is_file()
        table.append(
            (
                name,
                entry.get("architecture", "?"),
                entry.get("shape", "?"),
                count(entry.get("parameters")),
                pretrained.headline(name) if shipped else f"(not built: {pretrained.RETRAIN_COMMAND} {name})",
                pretrained.command(name),
            )
        )
    return table


def table() -> str:
    """The list as aligned plain-text columns."""
    lines = [COLUMNS, *rows()]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(
        prog="python -m transformer_lab.pretrained",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", nargs="?", help="show this model's whole record (models.json)")
    args = parser.parse_args(argv)
    if args.name is not None:
        name = args.name.removeprefix(pretrained.PREFIX)
        print(json.dumps({name: pretrained.record(name)}, indent=2))
        return
    print(table())
    print()
    print(
        "Use: ckpt_path=pretrained:<name> wherever a checkpoint goes (python -m transformer_lab.sample, "
        '.explain, .interpret, .explore, ...), or transformer_lab.load("pretrained:<name>") in Python.'
    )
    print(
        f"Test metrics: measured on the shipped file over the task's test split ({pretrained.LIST_COMMAND} "
        f"<name> for its record). Retrain: {pretrained.RETRAIN_COMMAND} [names]"
    )


if __name__ == "__main__":
    run(main)
