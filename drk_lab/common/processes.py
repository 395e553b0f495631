"""Process helpers for the isolation: the /proc walks, killing a whole process tree, memory use, and
the kernel settings a worker or supervisor process gives itself (Linux only)."""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys

CLONE_NEWNET, CLONE_NEWUSER, CLONE_NEWNS = 0x40000000, 0x10000000, 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
# set by enter_worker when the worker could not get a network namespace: the reason, for EvalResult.notes
network_note: str | None = None
# set by enter_worker when it could not mount the harness's cache read-only (guard.py still refuses writes
# from Python, but not from native code or a child process)
cache_note: str | None = None
NO_MOUNTS = "the harness's cache is read-only to the candidate's Python code only: "


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def folder_bytes(folder: str) -> int:
    """Bytes in the files under `folder` (allocated blocks, so sparse files count what they use)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


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


def enter_worker(out_w: int | None, file_bytes: int | None = None, cache_folders: tuple[str, ...] = ()) -> None:
    """In a new worker process: own session, output to the pipe, first in line for the OOM killer, no
    core dumps, no file larger than `file_bytes` (settings.scratch_bytes), its own network namespace
    and its own mount namespace, where `cache_folders` are bound onto themselves so that
    make_read_only() can close them once the worker has warmed up (isolate). With out_w=None the
    spawner has already made the session and redirected the output."""
    global network_note, cache_note
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
    if file_bytes:  # a write past the limit fails with EFBIG (an exception the candidate sees), not SIGXFSZ
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    network_note, cache_note = isolate(cache_folders)


def isolate(cache_folders: tuple[str, ...] = ()) -> tuple[str | None, str | None]:
    """Move this process into a network namespace of its own, where only its own loopback exists: no other
    host, and none of this machine's services (not even those on 127.0.0.1) can be reached; and into a
    mount namespace of its own, where each of `cache_folders` is bound onto itself (still writable, until
    make_read_only). As root (or with CAP_SYS_ADMIN) a plain unshare; otherwise inside a new user
    namespace that maps our uid and gid to themselves, where the kernel allows unprivileged ones. Must
    run while the process has one thread. Returns (network note, cache note): None when done, else one
    line saying why not (it goes into EvalResult.notes)."""
    libc = ctypes.CDLL(None, use_errno=True)
    own_mounts = libc.unshare(CLONE_NEWNET | CLONE_NEWNS) == 0
    if not own_mounts and libc.unshare(CLONE_NEWNET) != 0:
        first = os.strerror(ctypes.get_errno())
        uid, gid = os.getuid(), os.getgid()
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS) != 0:
            return (f"no network isolation: the OS refused a network namespace ({first}; as an unprivileged "
                    f"user: {os.strerror(ctypes.get_errno())}); the candidate ran with the host's network",
                    NO_MOUNTS + "the OS refused a mount namespace")
        own_mounts = True
        try:
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        except OSError:
            pass  # unmapped ids show as nobody inside; file access still uses the real ones
    try:  # loopback up, so that tools that talk to themselves over 127.0.0.1 (Nsight Compute) still work
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", 0x1 | 0x8 | 0x40))  # SIOCSIFFLAGS: UP|LOOPBACK|RUNNING
    except OSError:
        pass  # loopback stays down: still no network
    return None, _bind_in_place(libc, cache_folders) if own_mounts else NO_MOUNTS + "no mount namespace"


def _bind_in_place(libc, folders: tuple[str, ...]) -> str | None:
    """In our own mount namespace: nothing we mount reaches the host's, and each folder is a bind mount of
    itself, so that make_read_only can remount it read-only for this process (and its children) alone."""
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return NO_MOUNTS + os.strerror(ctypes.get_errno())
    for folder in folders:
        if not os.path.exists(folder):
            continue  # nothing there to write over (a file made later is still refused by guard.py)
        path = os.fsencode(folder)
        if libc.mount(path, path, None, MS_BIND | MS_REC, None) != 0:
            return NO_MOUNTS + f"binding {folder}: {os.strerror(ctypes.get_errno())}"
    return None


def make_read_only(folders: tuple[str, ...]) -> str | None:
    """Remount the folders that isolate() bound, read-only: after this no write reaches them from this
    process or its children, native code included (short of remounting them, which needs the
    CAP_SYS_ADMIN a root worker still has). None when done, else why not."""
    libc = ctypes.CDLL(None, use_errno=True)
    for folder in filter(os.path.exists, folders):
        kept = 0
        flags = os.statvfs(folder).f_flag  # a remount inside a user namespace must keep the mount's locks
        for st, ms in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC)):
            kept |= ms if flags & st else 0
        if libc.mount(None, os.fsencode(folder), None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept, None) != 0:
            return NO_MOUNTS + f"remounting {folder}: {os.strerror(ctypes.get_errno())}"
    return None
