"""Triton's compile cache for evaluated code: a job writes only its own, and reads its own, then a shared
store that no process which ran evaluated code has written.

The shared store (`<cache_dir>/triton`) is written by the workers' warm-ups, before their first job, and
by supervisors (below); jobs see it read-only (worker.protect). A job's compiled kernels go to a folder
of its own, deleted with the job: a kernel that another job compiled is compiled again, since its binary
came from a process that ran a candidate, which could have written anything under that kernel's key.

Triton versions that build a C launcher per kernel signature (3.6 among them) build it with gcc from
source that Triton writes from the signature alone. In a worker, `share_launchers` hands the signature to
the supervisor (`build_launcher`), which builds Triton's own source for it into the shared store and
answers with the path, and the worker loads the launcher from there: no launcher a candidate's process
built is ever loaded by another job, and a worker that only loaded such launchers may serve again. Where
the supervisor cannot build one, the worker builds it itself as Triton would (and then retires: a native
library from its job's folder is mapped, reuse.py).
"""

from __future__ import annotations

import ast
import json
import os

from triton.runtime.cache import FileCacheManager

from drk_lab.harness.settings import triton_store

# (status_fd, reply_fd) of the job being run: how the worker asks its supervisor; None between jobs. A
# request is an unsigned line of its own (protocol.LAUNCHER): it can only ever make the supervisor build
# Triton's code, so the job's signing key stays out of this module
channel: list = [None]


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


def share_launchers() -> None:
    """In a worker before its first job (see the module docstring). Nothing to do for Triton versions with
    one generic launcher."""
    try:
        from triton.backends.nvidia import driver
        from triton.runtime.build import _load_module_from_path
    except ImportError:
        return
    make, build = getattr(driver, "make_launcher", None), getattr(driver, "compile_module_from_src", None)
    if make is None or build is None or getattr(build, "shares_launchers", False):
        return
    signatures: dict[str, str] = {}  # a launcher's source -> the signature it was made from, until it is built

    def make_launcher(constants, signature, tensordesc_meta):
        src = make(constants, signature, tensordesc_meta)
        signatures[src] = repr((signature, tensordesc_meta))
        return src

    def compile_module_from_src(src, name, *args, **kwargs):
        signature = signatures.pop(src, None) if name == "__triton_launcher" else None
        path = ask_supervisor(signature) if signature is not None else None
        if path:
            return _load_module_from_path(name, path)
        return build(src, name, *args, **kwargs)

    compile_module_from_src.shares_launchers = True
    driver.make_launcher, driver.compile_module_from_src = make_launcher, compile_module_from_src


def ask_supervisor(signature: str) -> str | None:
    """The shared store's launcher for a signature, built by the supervisor (None: it could not)."""
    if channel[0] is None:
        return None
    status_fd, reply_fd = channel[0]
    from drk_lab.harness.protocol import LAUNCHER, read_line

    os.write(status_fd, LAUNCHER + signature.encode() + b"\n")
    try:
        path = json.loads(read_line(reply_fd) or b"{}").get("launcher")
    except ValueError:
        return None
    shared = os.path.realpath(triton_store()) + os.sep
    return path if isinstance(path, str) and os.path.realpath(path).startswith(shared) and os.path.isfile(path) \
        else None


def build_launcher(signature_text) -> str | None:
    """In a supervisor (which never runs evaluated code): Triton's launcher for a signature, built into the
    shared store from the source Triton writes for it; its path, or None. Whatever a candidate sent as the
    signature, what is built is Triton's own code for some signature, filed under the hash of that code."""
    try:
        signature, tensordesc_meta = ast.literal_eval(signature_text)
        from triton.backends.nvidia import driver

        src = driver.make_launcher({}, signature, tensordesc_meta)  # 3.6 makes the source from these alone
    except Exception:
        return None
    old = {name: os.environ.get(name) for name in ("TRITON_CACHE_DIR", "TRITON_CACHE_MANAGER")}
    os.environ["TRITON_CACHE_DIR"] = triton_store()
    os.environ.pop("TRITON_CACHE_MANAGER", None)
    try:
        module = driver.compile_module_from_src(src=src, name="__triton_launcher", library_dirs=driver.library_dirs(),
                                                include_dirs=driver.include_dirs, libraries=driver.libraries)
        return getattr(module, "__file__", None)
    except Exception:
        return None
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
