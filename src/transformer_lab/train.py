"""Train a model: `python train.py [overrides]` in a checkout, `python -m transformer_lab.train [overrides]`
anywhere once installed. The entry point; the run itself is `transformer_lab.training.run.train`.

Before Hydra runs, the command line is checked (`training.preflight`: nothing it composes may run code or
write outside the run), a resumed run's own settings are read back (`training.resume`), and the run's
directory is claimed and locked (`training.run_dir`). Torch and Lightning are imported after Hydra has
parsed the command line: `python train.py --help` answers without loading them, and Lightning, imported
once Hydra has set up logging, sends its messages to train.log (see training/console.py).
"""

import logging
import sys
from pathlib import Path

import hydra
import hydra.errors
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from transformer_lab import signals
from transformer_lab.cli import path_refused
from transformer_lab.errors import ConfigError, Terminated, TrainingFailed
from transformer_lab.training import console
from transformer_lab.training.compose import CONFIG_MODULE, user_error
from transformer_lab.training.run_dir import remove_unused_run_dir

log = logging.getLogger("transformer_lab.train")


def train(cfg: DictConfig) -> dict:
    """Fit, test and write metrics.json: `transformer_lab.training.run.train`."""
    from transformer_lab.training.run import train as run

    return run(cfg)


class SweepJobError(hydra.errors.CompactHydraException):
    """A user mistake in one job of a sweep: Hydra records the job as failed (Optuna: a failed trial), the
    sweep goes on, and the message is printed as one line."""


def run_job(cfg: DictConfig) -> float | None:
    """One job, as Hydra runs it. Returns the task's metric (for Hydra sweepers); a user mistake prints one
    line and exits 2, a failure during training one line and exits 1 (in a sweep: fails that job only)."""
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    console.lightning_logs_to_root()
    logging.captureWarnings(True)  # library warnings go to train.log as well as to the console
    try:
        metrics = train(cfg)
    except Terminated as stop:  # the whole process was asked to stop: a sweep stops too
        log.info(f"error: {stop}", extra={"console": False})
        print(f"error: {stop}", file=sys.stderr)
        sys.exit(stop.exit_status)
    except TrainingFailed as failure:  # the run could not go on: one line, saying what was kept
        log.info(f"error: {failure}", extra={"console": False})
        if multirun:
            raise SweepJobError(f"error: {failure}") from None
        print(f"error: {failure}", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:
        error = user_error(exc)
        if error is None:
            # the traceback in train.log too (Hydra prints it on the console)
            log.exception("training failed", extra={"console": False})
            raise
        log.info(f"error: {error}", extra={"console": False})  # printed below, once
        if multirun:
            raise SweepJobError(f"error: {error}") from None
        remove_unused_run_dir(Path(HydraConfig.get().runtime.output_dir))
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    return metrics.get(cfg.metric)


hydra_main = hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name="train")(
    run_job
)


def prepare(argv: list[str]) -> list[str]:
    """The command line Hydra gets: checked, a resumed run's own settings read back, and the run's (or
    sweep's) directory claimed and named explicitly (a default name that is taken gets a suffix)."""
    from transformer_lab.training import preflight, resume, run_dir

    flags, overrides, multirun, print_only = preflight.split_argv(argv)
    if print_only:
        return argv
    joining = run_dir.joining_ddp_run(overrides)
    parsed = {o.key_or_group: o for o in preflight.parse_overrides(overrides)}
    value = {key: o.input_line.partition("=")[2] for key, o in parsed.items()}
    continued = None
    if not joining and not multirun and ("resume" in value or "ckpt_path" in value):
        continued = resume.continued_run(value, [o for o in overrides if not o.startswith("hydra.")])
    if continued is not None:
        run, kept = continued
        require_same_dir(value, run)
        run_dir.require_no_symlinks(run)  # before its files' paths are judged: a link points elsewhere
        hydra = [o for o in overrides if o.startswith("hydra.") and not o.startswith("hydra.run.dir=")]
        overrides = [*kept, f"resume={run}", *hydra, f"hydra.run.dir={run}"]
        value["hydra.run.dir"] = str(run)

    directory, multirun = preflight.check_command_line([*flags, *overrides])
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    shows_only = any(flag.split("=")[0] in preflight.SHOW_ONLY for flag in flags)
    if directory is None or joining or shows_only:
        return [*flags, *overrides]
    claimed = run_dir.claim(directory, explicit=key in value, resuming=continued is not None)
    if continued is not None:
        run_dir.record_resume(claimed, [o for o in argv if not o.startswith("-")])
        overrides.append("hydra.output_subdir=null")  # the run's .hydra/ keeps its first config
    return [*flags, *(o for o in overrides if not o.startswith(f"{key}=")), f"{key}={claimed}"]


def require_same_dir(value: dict[str, str], run: Path) -> None:
    """`resume=` continues a run in its own directory: another explicit hydra.run.dir is a mistake."""
    given = value.get("hydra.run.dir")
    if given is not None and Path(given.strip("'\"")).expanduser().resolve() != run:
        raise ConfigError(
            f"hydra.run.dir={given} with resume: a resumed run continues in its own directory {run}; "
            "leave hydra.run.dir out"
        )


def main() -> None:
    """`python train.py` / `python -m transformer_lab.train`: check, then hand over to Hydra. Ctrl-C and
    SIGTERM outside Lightning's fit and test (which stop at a batch's end: callbacks/ctrl_c.py) end here."""
    signals.install()
    try:
        argv = prepare(sys.argv[1:])
    except KeyboardInterrupt:
        print(f"error: {interrupted([], 'Ctrl-C')}", file=sys.stderr)
        sys.exit(130)
    except signals.Stop as stop:
        print(f"error: {interrupted([], stop.signal_name)}", file=sys.stderr)
        sys.exit(stop.exit_status)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except OSError as error:  # a path on the command line the system refuses: too long, no permission
        where = f"{error.filename}: " if error.filename else ""
        print(f"error: {where}{path_refused(error)}", file=sys.stderr)
        sys.exit(2)
    sys.argv = [sys.argv[0], *argv]
    for key, what in (("hydra.run.dir=", "run"), ("hydra.sweep.dir=", "sweep")):
        given = [a.removeprefix(key) for a in argv if a.startswith(key)]
        if given and sys.stdout.isatty():  # a person waits: say so before Hydra, PyTorch and Lightning load
            print(f"Starting the {what} in {given[-1]}", flush=True)
    try:
        hydra_main()
    except KeyboardInterrupt:  # before fit or test began (reading the data, say)
        print(f"error: {interrupted(argv, 'Ctrl-C')}", file=sys.stderr)
        sys.exit(130)
    except signals.Stop as stop:
        print(f"error: {interrupted(argv, stop.signal_name)}", file=sys.stderr)
        sys.exit(stop.exit_status)


def interrupted(argv: list[str], cause: str) -> str:
    """The line for Ctrl-C or SIGTERM (`cause`) outside Lightning's fit and test: a run directory that
    holds nothing of the run yet is removed, as after a config error."""
    given = [
        a.split("=", 1)[1].strip("'\"") for a in argv if a.startswith(("hydra.run.dir=", "hydra.sweep.dir="))
    ]
    if given:
        remove_unused_run_dir(Path(given[-1]))
        if Path(given[-1]).exists():
            return f"stopped by {cause}; what the run wrote is in {given[-1]}"
    return f"stopped by {cause} before training began; nothing was kept"


if __name__ == "__main__":
    main()
