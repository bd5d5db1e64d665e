"""What `python train.py` checks before Hydra runs: nothing a config, a shared experiment file or a
command line says may run code or write outside the run.

Hydra instantiates `hydra.callbacks` and configures logging (calling whatever a `()` or `class` key of
its logging configs names, importing whatever an `ext://` value names) before any code of the task runs,
and a sweep composes each job's config later. So the entry point first composes the config itself, with
the same overrides and search path, once per job of a sweep (`-m`), and refuses:

* any `_target_` outside the allowlists, anywhere in the config, Hydra's callbacks, launcher and sweeper
  included, after resolving interpolations (`${oc.decode:...}` can make an instantiable node);
* a `()` or `class` in Hydra's logging configs outside the allowlist, and `ext://` values other than
  `ext://sys.stdout` and `ext://sys.stderr`;
* a non-empty `hydra.job.env_set`, and a search path other than `file://` folders;
* a task module found other than as `transformer_lab.data.find` allows;
* a file the run writes (checkpoints, TensorBoard events, the default root, a profiler's report, the log,
  the Optuna study) outside the run's directory, unless the command line itself names it;
* Hydra's options that read code or configs from elsewhere (`--experimental-rerun` unpickles a file).

`train()` checks the job's fully resolved config again before it builds anything.
"""

import itertools
from collections.abc import Iterator
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, ValueType
from hydra.errors import HydraException
from omegaconf import DictConfig

from transformer_lab.errors import ConfigError, require
from transformer_lab.training.config_checks import check_instantiable, resolved

# Hydra's flags: those that take a value, and those that only print something (no config runs).
VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--info", "-i"}
PRINT_ONLY = {"--help", "-h", "--hydra-help", "--version", "--shell-completion", "-sc"}
SHOW_ONLY = {"--cfg", "-c", "--info", "-i"}  # they compose the config (checked) but run no job
REFUSED_FLAGS = {
    "--experimental-rerun": "it unpickles a file, which can run code",
    "--config-path": "this program has one config; add your configs with hydra.searchpath=[file://DIR]",
    "-cp": "this program has one config; add your configs with hydra.searchpath=[file://DIR]",
    "--config-name": "this program has one config; pick presets with experiment=NAME",
    "-cn": "this program has one config; pick presets with experiment=NAME",
    "--config-dir": "add your configs with hydra.searchpath=[file://DIR] instead",
    "-cd": "add your configs with hydra.searchpath=[file://DIR] instead",
}
MAX_JOBS = 1024  # a sweep larger than this is surely a mistake (and each job's config is checked)


def split_argv(argv: list[str]) -> tuple[list[str], list[str], bool, bool]:
    """Hydra's command line as (flags, overrides, multirun, print_only)."""
    flags, overrides, multirun, print_only = [], [], False, False
    words = iter(argv)
    for word in words:
        name = word.split("=", 1)[0]
        if word.startswith("-"):
            if name in REFUSED_FLAGS:
                raise ConfigError(f"{name} is not accepted here: {REFUSED_FLAGS[name]}")
            flags.append(word)
            multirun |= name in ("-m", "--multirun")
            print_only |= name in PRINT_ONLY
            if name in VALUE_FLAGS and "=" not in word:
                value = next(words, None)
                if value is not None and (name not in ("--info", "-i") or not value.count("=")):
                    flags.append(value)
                elif value is not None:
                    overrides.append(value)
        else:
            overrides.append(word)
    return flags, overrides, multirun, print_only


def parse_overrides(overrides: list[str]) -> list[Override]:
    try:
        return OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        raise ConfigError(" ".join(str(exc).split())) from None


def _sweep_values(override: Override, group_options) -> list[str]:
    if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
        return list(override.sweep_string_iterator(group_options(override.key_or_group)))
    if override.value_type == ValueType.INTERVAL_SWEEP:
        raise ConfigError(
            f"{override.input_line}: interval() sweeps go with hparams_search= (an Optuna search), not "
            "with -m alone"
        )
    return list(override.sweep_string_iterator())


def jobs(overrides: list[str], multirun: bool, group_options) -> Iterator[list[str]]:
    """The overrides of every job the command line runs: one list, or each combination of a sweep."""
    parsed = parse_overrides(overrides)
    sweeps = [o for o in parsed if o.is_sweep_override()] if multirun else []
    if not sweeps:
        yield list(overrides)
        return
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    choices = [
        [f"{o.get_key_element()}={value}" for value in _sweep_values(o, group_options)] for o in sweeps
    ]
    count = 1
    for values in choices:
        count *= len(values)
    require(
        count <= MAX_JOBS, f"the sweep has {count} jobs, more than {MAX_JOBS}; sweep fewer values at once"
    )
    for combination in itertools.product(*choices):
        yield [*fixed, *combination]


def write_paths(resolved: dict) -> dict[str, str]:
    """Every path the run writes that a config can set, by its key."""
    paths = {}
    for section, keys in (("callbacks", ("dirpath", "path")), ("logger", ("save_dir",))):
        for name, node in (resolved.get(section) or {}).items():
            for key in keys:
                if isinstance(node, dict) and isinstance(node.get(key), str):
                    paths[f"{section}.{name}.{key}"] = node[key]
    trainer = resolved.get("trainer") or {}
    if isinstance(trainer.get("default_root_dir"), str):
        paths["trainer.default_root_dir"] = trainer["default_root_dir"]
    profiler = trainer.get("profiler")
    if isinstance(profiler, dict) and isinstance(profiler.get("dirpath"), str):
        paths["trainer.profiler.dirpath"] = profiler["dirpath"]
    hydra = resolved.get("hydra") or {}
    for name, handler in ((hydra.get("job_logging") or {}).get("handlers") or {}).items():
        if isinstance(handler, dict) and isinstance(handler.get("filename"), str):
            paths[f"hydra.job_logging.handlers.{name}.filename"] = handler["filename"]
    storage = (hydra.get("sweeper") or {}).get("storage")
    if isinstance(storage, str) and storage.startswith("sqlite:///"):
        paths["hydra.sweeper.storage"] = storage.removeprefix("sqlite:///")
    return paths


def _inside(path: str, folder: Path) -> bool:
    resolved = Path(path).expanduser().resolve()
    return resolved == folder or folder in resolved.parents


def check_writes(resolved: dict, run_dir: Path, given: set[str]) -> None:
    """Every path the run writes is inside its directory, or set by the command line itself."""
    for key, path in write_paths(resolved).items():
        require(
            key in given or _inside(path, run_dir),
            f"{key}={path} is outside the run directory {run_dir}; a config may only write there (set it "
            f"on the command line, {key}=..., to write elsewhere)",
        )


def check_hydra(cfg: DictConfig) -> None:
    """Hydra settings that run things or change the environment."""
    env = cfg.hydra.job.get("env_set") or {}
    require(
        not env,
        f"hydra.job.env_set={dict(env)} is not allowed: a config may not set environment variables",
    )
    for entry in cfg.hydra.get("searchpath") or []:
        require(
            str(entry).startswith("file://"),
            f"hydra.searchpath entry {entry} is not allowed: add config folders as file://DIR (a pkg:// "
            "entry imports a package)",
        )


def check_search_path_overrides(parsed: list[Override]) -> None:
    """`hydra.searchpath=[pkg://...]` imports a package while the config is composed: refuse it first."""
    for override in parsed:
        if override.key_or_group == "hydra.searchpath":
            text = override.input_line.partition("=")[2]
            for entry in text.strip("[]").split(","):
                entry = entry.strip().strip("'\"")
                require(
                    entry == "" or entry.startswith("file://"),
                    f"hydra.searchpath entry {entry} is not allowed: add config folders as file://DIR (a "
                    "pkg:// entry imports a package)",
                )


def run_directory(cfg: DictConfig, multirun: bool) -> Path:
    """The run's (or the sweep's) directory, as Hydra will create it."""
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().set_config(cfg)
    node = cfg.hydra.sweep.dir if multirun else cfg.hydra.run.dir
    return Path(str(node)).expanduser().resolve()


def check_command_line(argv: list[str]) -> tuple[Path | None, bool]:
    """Refuse anything the command line (with every config it composes) must not do; return the run's
    directory (None for a command that only prints) and whether it is a sweep."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from transformer_lab.training.compose import CONFIG_MODULE, compose_config

    _, overrides, multirun, print_only = split_argv(argv)
    if print_only:
        return None, multirun
    parsed = parse_overrides(overrides)
    check_search_path_overrides(parsed)
    given = {o.key_or_group for o in parsed}

    def group_options(group: str) -> list[str]:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            return GlobalHydra.instance().config_loader().get_group_options(group)

    run_dir = None
    for job in jobs(overrides, multirun, group_options):
        cfg = compose_config(job, return_hydra_config=True)
        check_hydra(cfg)
        directory = run_directory(cfg, multirun)
        run_dir = run_dir or directory
        job_dir = directory / "0" if multirun else directory
        plain = resolved(cfg, job_dir)
        check_instantiable(plain)
        check_writes(plain, directory, given)
        check_sweeper_params(cfg)
    return run_dir, multirun


def check_sweeper_params(cfg: DictConfig) -> None:
    """An Optuna search's parameters may only be plain settings, not targets or Hydra's own."""
    params = cfg.hydra.sweeper.get("params") or {}
    for key in params:
        key = str(key)
        require(
            not key.startswith("hydra") and not key.endswith(("_target_", "()", "class")),
            f"hydra.sweeper.params.{key} is not allowed: a search may only vary plain settings",
        )
