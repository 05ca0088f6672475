"""What /proc says about a process: CPU used and resident memory; and stopping one (for
the benches)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess

TICK = os.sysconf("SC_CLK_TCK")


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU of a process so far, in seconds (0, 0 when it is gone)."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (0 when it is gone)."""
    return sum(cpu_times(pid))


def machine_busy_seconds() -> float:
    """CPU time the whole machine has spent busy so far, all cores (/proc/stat: user,
    nice, system, irq, softirq, steal): counts kernel workers too, which a process's own
    times do not (e.g. a sync the kernel runs for it in a worker thread)."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = _machine_ticks()
    return (user + nice + system + irq + softirq + steal) / TICK


def machine_steal_seconds() -> float:
    """CPU time the hypervisor has taken from this machine's cores so far, all cores
    (/proc/stat's steal: a virtual CPU that wanted to run and was not let to). A round
    with much of it ran on a contended host: its milliseconds are the neighbours' too."""
    return _machine_ticks()[7] / TICK


def _machine_ticks() -> list[int]:
    """/proc/stat's first line (all cores): user, nice, system, idle, iowait, irq,
    softirq, steal, in clock ticks."""
    fields = pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    return [int(field) for field in fields[:8]]


def rss_kb(pid: int) -> int | None:
    """Resident set size in KiB (None when the process is gone)."""
    try:
        lines = pathlib.Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    return next((int(x.split()[1]) for x in lines if x.startswith("VmRSS:")), None)


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM (a daemon's clean stop), then SIGKILL if it has not ended in `timeout`."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
