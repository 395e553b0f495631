"""Process helpers for the isolation: the /proc walks, killing a whole process tree, memory use, and
the kernel settings a worker or supervisor process gives itself (Linux only)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def parents() -> dict[int, int]:
    """pid -> parent pid for every process we can see."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    found[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    return found


def child_processes(pid: int | None = None) -> list[int]:
    pid = os.getpid() if pid is None else pid
    return [child for child, parent in parents().items() if parent == pid]


def kill_tree(pgid: int, reaper: bool) -> None:
    """Kill the worker's process group, every process descended from it and, when we are a
    subreaper, every orphan it left us. The worker itself (pid == pgid) is left for the caller
    to wait for."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    me = os.getpid()
    for _ in range(50):
        parent_of = parents()
        doomed, frontier = set(), {pgid} | ({p for p, pp in parent_of.items() if pp == me} if reaper else set())
        while frontier:
            doomed |= frontier
            frontier = {p for p, pp in parent_of.items() if pp in frontier} - doomed
        doomed.discard(pgid)
        if not doomed:
            break
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
                if parent_of.get(pid) == me:
                    os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError, PermissionError):
                pass


def leftover_processes(pid: int, reaper: bool) -> bool:
    """Whether the worker left processes: descendants of its own, or orphans adopted by us."""
    parent_of, me = parents(), os.getpid()
    return any(parent == pid or (reaper and parent == me and child != pid) for child, parent in parent_of.items())


def set_subreaper() -> bool:
    """Orphans of our descendants become our children (so a worker's grandchildren can be found and killed)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def set_parent_death_signal() -> None:
    """Die with the parent: no worker or supervisor outlives the process that started it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def enter_worker(out_w: int | None) -> None:
    """In a new worker process: own session, output to the pipe, first in line for the OOM killer, no
    core dumps. With out_w=None the spawner has already made the session and redirected the output."""
    if out_w is not None:
        os.setsid()
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.close(out_w)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # if the host runs out of memory, the kernel kills this process first
    except OSError:
        pass
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
