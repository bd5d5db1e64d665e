"""The Hydra configs, installed as the package `transformer_lab.configs` (see pyproject.toml), so that
`python -m transformer_lab.train` finds them from any directory."""
