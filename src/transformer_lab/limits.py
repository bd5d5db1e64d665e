"""What this machine can hold, asked before anything large is allocated: a config, a checkpoint or a
command line made by someone else must not be able to exhaust the memory (or hang on a special file)
before a one-line error says why.

    require_memory(bytes, "a batch of 64 windows of 100000 characters", "lower data.block_size")

The available memory is the smallest of the kernel's MemAvailable, the cgroup's memory.max (less what the
cgroup uses) and the address-space limit (RLIMIT_AS), each where it exists.
"""

import os
import re
import resource
import time
from pathlib import Path

from transformer_lab.errors import require


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_available() -> int | None:
    """memory.max - memory.current of this process's cgroup (v2), None where there is no limit."""
    try:
        relative = Path("/proc/self/cgroup").read_text().strip().split("::")[-1].lstrip("/")
        folder = Path("/sys/fs/cgroup") / relative
        limit = (folder / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((folder / "memory.current").read_text().strip())
    except (OSError, ValueError, IndexError):
        return None


def _address_space_available() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def available_memory() -> int:
    """Bytes this process can still allocate, as far as the system says (see the module docstring)."""
    known = [m for m in (_meminfo_available(), _cgroup_available(), _address_space_available()) if m]
    if not known:
        pages = os.sysconf("SC_AVPHYS_PAGES") if hasattr(os, "sysconf") else 0
        known = [pages * os.sysconf("SC_PAGE_SIZE")] if pages else [1 << 40]
    return max(0, min(known))


def size_text(num_bytes: float) -> str:
    """2.5e9 -> '2.5 GB'."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if num_bytes >= size:
            return f"{num_bytes / size:.1f} {unit}"
    return f"{int(num_bytes)} bytes"


SIZE_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def parse_size(value: object, key: str) -> int | None:
    """A size written `4MB`, `1.5 GB`, `500kB` or a number of bytes, as bytes (None stays None); a
    one-line ConfigError naming `key` for anything else."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return int(value)
    match = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?B)\s*", str(value), flags=re.IGNORECASE)
    require(
        match is not None and match.group(1).count(".") <= 1,
        f"{key}={value!r} is not a size; write it as 500KB, 64MB or 2GB (or null: no limit)",
    )
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2).upper()])


def require_memory(num_bytes: float, what: str, fix: str) -> None:
    """A one-line ConfigError when `what` needs more memory than is available: it names the estimate."""
    available = available_memory()
    require(
        num_bytes <= available,
        f"{what} needs about {size_text(num_bytes)}, more than the {size_text(available)} of memory this "
        f"machine has free; {fix}",
    )


def free_cores(sample_seconds: float = 0.2) -> tuple[float, int]:
    """How many of this process's cores are idle right now (from /proc/stat, over `sample_seconds`),
    and how many it may run on."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

    def busy_idle() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields) - idle, idle

    try:
        busy0, idle0 = busy_idle()
        time.sleep(sample_seconds)
        busy1, idle1 = busy_idle()
    except (OSError, ValueError, IndexError):
        return float(cores), cores
    total = (busy1 - busy0) + (idle1 - idle0)
    machine_cores = os.cpu_count() or cores
    idle = machine_cores * (idle1 - idle0) / total if total > 0 else float(cores)
    return min(float(cores), idle), cores


def choose_threads(
    requested: object = "auto", processes: int = 1, deterministic: bool = False
) -> tuple[int, str]:
    """The torch threads to use, and why: an explicit number (`threads=N`), else `OMP_NUM_THREADS` if set,
    else `auto`: the cores that are idle now, shared by `processes` (DDP ranks). A busy machine (a
    browser, another run) then gets one thread per free core instead of torch's one per core, which
    collapses when the cores are taken (10-50x slower); on an idle machine a second thread pays even
    for the smallest models here (scripts/bench.py --phases threads). A `deterministic` run's `auto` is
    one thread on any machine: the thread count splits sums differently, so the last digits of every
    result would follow the machine's load."""
    if requested not in (None, "auto"):
        require(
            isinstance(requested, int) and not isinstance(requested, bool) and requested >= 1,
            f"threads={requested!r} must be auto or a positive integer",
        )
        most = 4 * (os.cpu_count() or 1)  # more threads than cores only wait on each other
        require(
            requested <= most,
            f"threads={requested} is more than 4 per core of this machine's {os.cpu_count()}; "
            f"use auto or at most {most}",
        )
        return int(requested), f"threads={requested}"
    if os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]) > 0:
        return int(os.environ["OMP_NUM_THREADS"]), f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
    if deterministic:
        return 1, "auto, 1 for trainer.deterministic=true (threads=N for more)"
    idle, cores = free_cores()
    share = max(1, processes)
    threads = max(1, min(cores // share, int(idle / share + 0.5)))
    return threads, f"auto, {idle:.1f} of {cores} cores free"
