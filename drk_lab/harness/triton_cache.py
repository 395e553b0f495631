"""Triton's compile cache for evaluated code: a job writes only its own, and reads its own, then a shared
store that no process which ran evaluated code has written.

The shared store (`<cache_dir>/triton`) is written by the workers' warm-ups, before their first job, and
by supervisors (below); jobs see it read-only (worker.protect). A job's compiled kernels go to a folder
of its own, deleted with the job: a kernel that another job compiled is compiled again, since its binary
came from a process that ran a candidate, which could have written anything under that kernel's key.

Triton versions that build a C launcher per kernel signature (3.6 among them) build it with gcc from
source that Triton writes: the worker records that source in the job's folder (`record_launchers`),
and after the job the supervisor builds each new one into the shared store itself (`build_launchers`),
where the next job with the same signature finds it under the hash of that source. Whatever source a
candidate wrote into the record is built as it is and filed under its own hash, which only an identical
source, hence an identical launcher, ever looks up.
"""

from __future__ import annotations

import json
import os

from triton.runtime.cache import FileCacheManager

from drk_lab.harness.supervisor import JOB_TRITON_CACHE, LAUNCHERS, TRITON_MANAGER, shared_store


class JobCache(FileCacheManager):
    """Writes go to the job's folder (TRITON_CACHE_DIR); a file it does not have is looked for in the shared
    store (DRK_TRITON_SHARED)."""

    def __init__(self, key, override=False, dump=False):
        super().__init__(key, override, dump)
        shared = os.environ.get("DRK_TRITON_SHARED")
        self.shared_dir = os.path.join(shared, key) if shared and not (override or dump) else None

    def get_file(self, filename):
        found = super().get_file(filename)
        if found is None and self.shared_dir:
            path = os.path.join(self.shared_dir, filename)
            found = path if os.path.exists(path) else None
        return found


def record_launchers() -> None:
    """In a worker before its first job: every launcher source Triton builds is also written to the job's
    cache folder, for the supervisor to build into the shared store. Nothing to do for Triton versions
    with one generic launcher."""
    try:
        from triton.backends.nvidia import driver
    except ImportError:
        return
    build = getattr(driver, "compile_module_from_src", None)
    if build is None or getattr(build, "records_launchers", False):
        return

    def compile_module_from_src(src, name, *args, **kwargs):
        folder = os.environ.get("TRITON_CACHE_DIR", "")
        if name == "__triton_launcher" and os.environ.get("TRITON_CACHE_MANAGER") == TRITON_MANAGER:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, LAUNCHERS), "a") as f:
                f.write(json.dumps({"src": src}) + "\n")
        return build(src, name, *args, **kwargs)

    compile_module_from_src.records_launchers = True
    driver.compile_module_from_src = compile_module_from_src


def recorded_launchers(workdir: str, most: int = 64) -> list[str]:
    """The launcher sources a finished job asked for (read before its folder is removed)."""
    try:
        with open(os.path.join(workdir, JOB_TRITON_CACHE, LAUNCHERS)) as f:
            lines = f.read(1 << 22).splitlines()[:most]
    except OSError:
        return []
    sources = []
    for line in lines:
        try:
            src = json.loads(line)["src"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(src, str) and src not in sources:
            sources.append(src)
    return sources


def build_launchers(sources: list[str]) -> None:
    """In a supervisor (which never runs evaluated code): build each launcher into the shared store, with
    Triton's own compiler flags. Ones already there cost a file check."""
    if not sources:
        return
    from triton.backends.nvidia import driver

    build = driver.compile_module_from_src  # the supervisor's own: record_launchers runs in workers alone
    old = {name: os.environ.get(name) for name in ("TRITON_CACHE_DIR", "TRITON_CACHE_MANAGER")}
    os.environ["TRITON_CACHE_DIR"] = shared_store()
    os.environ.pop("TRITON_CACHE_MANAGER", None)
    try:
        for src in sources:
            try:
                build(src=src, name="__triton_launcher", library_dirs=driver.library_dirs(),
                      include_dirs=driver.include_dirs, libraries=driver.libraries)
            except Exception:  # a source that does not build was not Triton's: nothing to share
                pass
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
