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

import fnmatch
import importlib.resources
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, ValueType
from hydra.errors import HydraException
from omegaconf import DictConfig

from transformer_lab.errors import ConfigError, require
from transformer_lab.files import read_yaml
from transformer_lab.training.config_checks import check_instantiable, check_top_level, resolved

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
KNOWN_FLAGS = {
    *VALUE_FLAGS, *PRINT_ONLY, *REFUSED_FLAGS, "--resolve", "--run", "-r", "--multirun", "-m"
}  # fmt: skip
CFG_VALUES = ("job", "hydra", "all")
MAX_JOBS = 1024  # a sweep larger than this is surely a mistake (and each job's config is checked)


def split_argv(argv: list[str]) -> tuple[list[str], list[str], bool, bool]:
    """Hydra's command line as (flags, overrides, multirun, print_only)."""
    flags, overrides, multirun, print_only = [], [], False, False
    words = iter(argv)
    for word in words:
        name = word.split("=", 1)[0]
        if word.startswith("-"):
            require(
                name in KNOWN_FLAGS,
                f"{name} is not an option; python train.py --help lists them (settings are key=value)",
            )
            if name in REFUSED_FLAGS:
                raise ConfigError(f"{name} is not accepted here: {REFUSED_FLAGS[name]}")
            flags.append(word)
            multirun |= name in ("-m", "--multirun")
            print_only |= name in PRINT_ONLY
            if name in VALUE_FLAGS and "=" not in word:
                value = next(words, None)
                require(
                    name not in ("--cfg", "-c") or value in CFG_VALUES,
                    f"{name} {value or ''} must be one of {', '.join(CFG_VALUES)}, e.g. --cfg job",
                )
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


def run_writes(resolved: dict, run_dir: Path, multirun: bool = False) -> dict[str, tuple[Path, Path]]:
    """Every place the run writes that a config can set, by the key that sets it: (the path, the folder it
    must lie in). A name given relative to another folder (a logger's name and version under its
    save_dir, the profiler's file under its dirpath, Hydra's output_subdir under the job's directory, a
    sweep job's subdir under the sweep's) must stay inside that folder; a text task's token cache
    (`data.cache_dir`, shared by runs) inside the project's data/cache; any other path inside the run's
    directory (`run_dir`: the sweep's, for a sweep)."""
    writes: dict[str, tuple[Path, Path]] = {}

    def add(key: str, path: object, folder: Path | None = None) -> None:
        """`path` as the config gives it; `folder`: the one a relative name is joined to."""
        if isinstance(path, str) and path != "":
            writes[key] = (folder / path, folder) if folder is not None else (Path(path), run_dir)

    for section, keys in (("callbacks", ("dirpath", "path")), ("logger", ("save_dir",))):
        for name, node in (resolved.get(section) or {}).items():
            for key in keys if isinstance(node, dict) else ():
                add(f"{section}.{name}.{key}", node.get(key))
            if section == "logger" and isinstance(node, dict) and isinstance(node.get("save_dir"), str):
                save_dir = Path(node["save_dir"])
                add(f"logger.{name}.name", node.get("name"), save_dir)
                named = save_dir / str(node["name"]) if node.get("name") not in (None, "") else save_dir
                add(f"logger.{name}.version", node.get("version"), named)
    trainer = resolved.get("trainer") or {}
    add("trainer.default_root_dir", trainer.get("default_root_dir"))
    profiler = trainer.get("profiler")
    if isinstance(profiler, dict):
        add("trainer.profiler.dirpath", profiler.get("dirpath"))
        if isinstance(profiler.get("dirpath"), str):
            add("trainer.profiler.filename", profiler.get("filename"), Path(profiler["dirpath"]))
    hydra = resolved.get("hydra") or {}
    add("hydra.output_subdir", hydra.get("output_subdir"), run_dir / "0" if multirun else run_dir)
    for logging_config in ("job_logging", "hydra_logging"):
        for name, handler in ((hydra.get(logging_config) or {}).get("handlers") or {}).items():
            if isinstance(handler, dict):
                add(f"hydra.{logging_config}.handlers.{name}.filename", handler.get("filename"))
    if multirun:
        add("hydra.sweep.subdir", (hydra.get("sweep") or {}).get("subdir"), run_dir)
    storage = (hydra.get("sweeper") or {}).get("storage")
    if isinstance(storage, str) and storage.startswith("sqlite:///"):
        add("hydra.sweeper.storage", storage.removeprefix("sqlite:///"))
    cache, root = (resolved.get("data") or {}).get("cache_dir"), (resolved.get("paths") or {}).get("root_dir")
    if isinstance(cache, str) and cache != "" and isinstance(root, str):  # the token files: shared by runs
        writes["data.cache_dir"] = (Path(cache), Path(root) / "data" / "cache")
    return writes


def _inside(path: Path, folder: Path) -> bool:
    resolved, folder = path.expanduser().resolve(), folder.expanduser().resolve()
    return resolved == folder or folder in resolved.parents


def check_writes(resolved: dict, run_dir: Path, given: set[str], multirun: bool = False) -> None:
    """The one check of where a run writes: every path of `run_writes` lies in its folder, unless the
    command line itself sets its key (a path given on the command line is the user's to choose)."""
    for key, (path, folder) in run_writes(resolved, run_dir, multirun).items():
        where = "the run directory" if folder == run_dir else "its folder"
        require(
            key in given or _inside(path, folder),
            f"{key}={path} is outside {where} {folder}; a config may only write there (set it on the "
            f"command line, {key}=..., to write elsewhere)",
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


def search_path_folders(parsed: list[Override]) -> list[Path]:
    """The folders `hydra.searchpath=[file://DIR, ...]` adds; a one-line error for a `pkg://` entry (it
    imports a package while the config is composed) or a folder that is not one."""
    folders = []
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
                if entry:
                    folder = Path(entry.removeprefix("file://")).expanduser()
                    require(folder.is_dir(), f"hydra.searchpath entry {entry} is not a folder")
                    folders.append(folder)
    return folders


MAX_CONFIG_FILES = 10_000  # a folder of configs with more entries than this is not a folder of configs


def check_search_path_files(folders: list[Path]) -> None:
    """Every YAML file of the search path's folders read as `files.read_yaml` reads a run's files, before
    Hydra reads any: a FIFO would hang the composition, aliases would expand it to billions of nodes."""
    for folder in folders:
        count = 0
        for parent, dirs, names in os.walk(folder):  # symlinked folders are not followed
            count += len(dirs) + len(names)
            require(
                count <= MAX_CONFIG_FILES,
                f"hydra.searchpath folder {folder} holds more than {MAX_CONFIG_FILES} entries; point it at "
                "the folder of your configs",
            )
            for name in names:
                if name.endswith((".yaml", ".yml")):
                    read_yaml(Path(os.path.realpath(Path(parent) / name)))


# What a config file from outside this package (a folder on hydra.searchpath: a shared experiment) may
# set of Hydra's own settings: an Optuna search's space and size, and how much loggers say. Where the run
# goes and what it writes (hydra.run, hydra.sweep, hydra.mode, output_subdir, logging handlers, the
# launcher, `paths.*`) come only from this package's configs and the command line (docs/troubleshooting.md).
FILE_HYDRA_KEYS = (
    "hydra.sweeper.params.*",
    "hydra.sweeper.n_trials",
    "hydra.sweeper.direction",
    "hydra.sweeper.study_name",
    "hydra.sweeper.n_jobs",
    "hydra.sweeper.max_failure_rate",
    "hydra.sweeper.sampler.seed",
    "hydra.job_logging.loggers.*.level",
    "hydra.hydra_logging.loggers.*.level",
)
FILE_HYDRA_CHOICES = {  # the config groups of Hydra's a shared file may choose (defaults: override ...)
    "hydra/sweeper": {"basic", "optuna"},
    "hydra/sweeper/sampler": {"cmaes", "grid", "motpe", "nsgaii", "random", "tpe"},
}
RUN_PLACES = ("hydra", "paths")  # the top-level sections that say where a run goes


def _settings(node: object, prefix: str) -> Iterator[str]:
    """The dotted key of every value a (plain) config node sets."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _settings(value, f"{prefix}.{key}")
    else:
        yield prefix


def _run_places_set(data: object, package: str) -> Iterator[str]:
    """Every key under `hydra.` or `paths.` that a config file's contents set, placed at `package`."""
    if not isinstance(data, dict):
        return
    body = {k: v for k, v in data.items() if k != "defaults"}
    if package.split(".")[0] in RUN_PLACES:
        yield from _settings(body, package)
    elif package == "":
        for key, value in body.items():
            if str(key).split(".")[0] in RUN_PLACES:
                yield from _settings(value, str(key))


def check_files_from_elsewhere(job: list[str], folders: list[Path], multirun: bool) -> None:
    """A config file found on the search path (not in this package, not the command line) may set only
    `FILE_HYDRA_KEYS` of Hydra's settings and choose only `FILE_HYDRA_CHOICES` of its groups; no `paths.*`.
    One rule for every key, found from the files Hydra composes (their defaults list), not key by key."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from transformer_lab.training.compose import CONFIG_MODULE

    if not folders:
        return
    trusted = [importlib.resources.files(p) for p in ("hydra.conf", CONFIG_MODULE)]

    def from_elsewhere(config_path: str | None) -> Path | None:
        """The file of a search-path folder that Hydra loads for `config_path` (the package's own and
        Hydra's come first on the search path), or None."""
        if config_path is None or any((t / f"{config_path}.yaml").is_file() for t in trusted):
            return None
        return next(
            (f / f"{config_path}.yaml" for f in folders if (f / f"{config_path}.yaml").is_file()), None
        )

    mode = RunMode.MULTIRUN if multirun else RunMode.RUN
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            defaults = GlobalHydra.instance().config_loader().compute_defaults_list("train", job, mode)
    except HydraException:
        return  # a mistake in the command line: composing the config says what it is, in one line
    refuse = (
        "a config from outside this package (a folder on hydra.searchpath) may not say where the run goes "
        "or what Hydra runs; set it on the command line if you mean it (docs/troubleshooting.md lists what "
        "a shared file may set of Hydra's)"
    )
    for result in defaults.defaults:
        file = from_elsewhere(result.config_path)
        for key in _run_places_set(read_yaml(file) if file else None, result.package or ""):
            require(any(fnmatch.fnmatchcase(key, k) for k in FILE_HYDRA_KEYS), f"{file} sets {key}: {refuse}")
        chooser = from_elsewhere(result.parent)
        group = (result.config_path or "").rpartition("/")[0]
        if chooser is not None and (result.package or "").split(".")[0] in RUN_PLACES:
            choice = (result.config_path or "").rpartition("/")[2]
            require(
                choice in FILE_HYDRA_CHOICES.get(group, ()), f"{chooser} chooses {group}={choice}: {refuse}"
            )
    for group, meta in defaults.overrides.override_metadata.items():
        chooser = None if meta.external_override else from_elsewhere(meta.containing_config_path)
        if chooser is not None and group.split("/")[0] in RUN_PLACES:
            choice = defaults.overrides.override_choices.get(group)
            require(
                choice in FILE_HYDRA_CHOICES.get(group, ()), f"{chooser} chooses {group}={choice}: {refuse}"
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
    folders = search_path_folders(parsed)
    check_search_path_files(folders)
    given = {o.key_or_group for o in parsed}
    require(
        "hydra.mode" not in given,
        "hydra.mode is not set by hand: a sweep is -m (--multirun) on the command line, a single run is "
        "without it",
    )

    def group_options(group: str) -> list[str]:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            return GlobalHydra.instance().config_loader().get_group_options(group)

    run_dir = None
    for job in jobs(overrides, multirun, group_options):
        check_files_from_elsewhere(job, folders, multirun)
        cfg = compose_config(job, return_hydra_config=True)
        check_hydra(cfg)
        directory = run_directory(cfg, multirun)
        run_dir = run_dir or directory
        job_dir = directory / "0" if multirun else directory
        plain = resolved(cfg, job_dir)
        check_instantiable(plain)
        check_top_level(plain)
        check_run_directory(plain, directory, given, multirun)
        check_writes(plain, directory, given, multirun)
        check_sweeper_params(cfg)
    return run_dir, multirun


def check_run_directory(resolved: dict, directory: Path, given: set[str], multirun: bool) -> None:
    """A run's (or sweep's) default directory lies under `paths.log_dir`: a task's `task_name` of
    `../../elsewhere` does not move it out."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    log_dir = (resolved.get("paths") or {}).get("log_dir")
    require(
        key in given or not isinstance(log_dir, str) or _inside(directory, Path(log_dir)),
        f"the run directory {directory} is outside paths.log_dir={log_dir}: task_name="
        f"{resolved.get('task_name')!r} must be a plain name (or name the directory with {key}=)",
    )


def check_sweeper_params(cfg: DictConfig) -> None:
    """An Optuna search's parameters may only be plain settings, not targets or Hydra's own."""
    params = cfg.hydra.sweeper.get("params") or {}
    for key in params:
        key = str(key)
        require(
            not key.startswith("hydra") and not key.endswith(("_target_", "()", "class")),
            f"hydra.sweeper.params.{key} is not allowed: a search may only vary plain settings",
        )
