"""The worker's audit hooks, installed before any job runs (Python cannot remove an audit hook once added).

- `protect_folders(paths)`: from then on the process may read but never write, create, rename,
  remove or re-permission anything inside `paths` (the harness's cache: baselines, copy bandwidth,
  Triton's shared store). Only the caller's side writes there. Python's file functions, `os`, `shutil`
  and `pathlib` all raise the audit events seen here; a path is judged after resolving links, so
  `/proc/<pid>/root/...` and symlinks lead nowhere else. Native code (ctypes, a child process) raises no
  such event: the read-only mount of processes.isolate covers it where the OS gives a mount namespace.
- `count_audit_hooks()`: counts the audit hooks added after the harness's own, which no API lists
  (reuse.py retires a worker that gained one).
"""

from __future__ import annotations

import os
import sys

audit_hooks_added = [0]

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# audit events whose first argument is a path being changed, and those whose second is too (rename's target)
_CHANGES_FIRST = frozenset({"os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate", "os.utime",
                            "os.chflags", "os.lchflags", "os.mkfifo", "os.mknod", "os.setxattr", "os.removexattr",
                            "os.rename", "shutil.rmtree", "shutil.move", "shutil.copytree"})
_CHANGES_SECOND = frozenset({"os.rename", "os.link", "os.symlink", "shutil.copyfile", "shutil.copymode",
                             "shutil.copystat", "shutil.move", "shutil.copytree"})


def count_audit_hooks() -> None:
    def hook(event, args):
        if event == "sys.addaudithook":
            audit_hooks_added[0] += 1

    sys.addaudithook(hook)


def _writes(event: str, args: tuple) -> list:
    """The paths an audit event would write to ([] for a read or an unrelated event)."""
    if event == "open":
        path, mode, flags = args
        if path is None or isinstance(path, int):
            return []
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & _WRITE_FLAGS)
        return [path] if writes else []
    if event == "sqlite3.connect":  # the library opens the file itself
        return [args[0]] if args and isinstance(args[0], (str, bytes, os.PathLike)) else []
    found = []
    if event in _CHANGES_FIRST and args:
        found.append(args[0])
    if event in _CHANGES_SECOND and len(args) > 1:
        found.append(args[1])
    return found


def protect_folders(paths: list[str]) -> None:
    """Folders, and files: a file's siblings that extend its name (SQLite's -journal, -wal) count as it."""
    resolved_paths = [os.path.realpath(p) for p in paths]
    prefixes = tuple(p + os.sep if os.path.isdir(p) else p for p in resolved_paths)
    exact = frozenset(resolved_paths)
    realpath, fsdecode = os.path.realpath, os.fsdecode
    watched = frozenset({"open", "sqlite3.connect"}) | _CHANGES_FIRST | _CHANGES_SECOND

    def hook(event, args):
        if event not in watched:
            return
        for path in _writes(event, args):
            try:
                resolved = realpath(fsdecode(path))
            except (TypeError, ValueError):
                continue
            if resolved in exact or resolved.startswith(prefixes):
                raise PermissionError(f"drk_lab: {event} on {path!r} refused: the harness's cache is read-only "
                                      "to evaluated code")

    sys.addaudithook(hook)
