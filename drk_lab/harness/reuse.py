"""Whether a warm worker may take another evaluation: everything a candidate could have left behind
in the process must be exactly as it was before the worker's first job, or the worker retires.

WorldState is taken once, after warm-up and before any candidate code runs. After each job the
worker forgets the job (its modules, folder, environment, Triton hooks) and compares:
every attribute of the torch / triton / drk_lab / numpy modules and the classes they define
(identity), numerics flags, grad and autocast modes, torch function and dispatch modes, tracing
and profiling hooks, signal handlers, environment, threads, child processes, open files, mapped
native libraries (only Triton's own cache may add some), CUDA memory, the current stream, and a
kernel that must still run and give the right answer. Any difference, or any doubt, retires it.
Only the checks for leftover work (threads, child processes) and the CUDA part (caches freed,
memory, stream, test kernel) need the GPU lock; worker.check_self holds it for those alone.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import tempfile
import threading

import torch

from drk_lab.hacks import runtime_checks

WATCHED_PREFIXES = ("torch", "triton", "drk_lab", "numpy")
WATCHED_STDLIB = {"builtins", "time", "os", "sys", "math", "random", "gc", "threading", "signal", "socket",
                  "subprocess", "select", "json", "importlib", "functools", "operator", "ctypes", "io",
                  "pickle", "copy", "contextlib", "traceback", "types", "weakref", "tempfile", "shutil"}
# module globals that honest runs change on their own (counters, lazily filled caches)
CHANGING = {("sys", "last_exc"), ("sys", "last_type"), ("sys", "last_value"), ("sys", "last_traceback")}
# Triton's CPU interpreter patches triton.language for every @triton.jit helper a kernel calls and never
# puts it back (triton 3.x); on the CPU those modules are its business, and CPU runs time nothing
INTERPRETER = os.environ.get("TRITON_INTERPRET") == "1"


def watched(name: str) -> bool:
    return name in WATCHED_STDLIB or name.partition(".")[0] in WATCHED_PREFIXES


def attribute_values() -> dict[tuple, object]:
    """(module, name) and (module, class, name) -> the object bound there, held so ids stay unique."""
    values: dict[tuple, object] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not watched(name):
            continue
        try:
            namespace = vars(module)
        except TypeError:
            continue
        for attr, value in list(namespace.items()):
            values[(name, attr)] = value
            if issubclass(type(value), type) and vars(value).get("__module__") == name:  # no __class__ lookups
                for cls_attr, cls_value in list(vars(value).items()):
                    values[(name, attr, cls_attr)] = cls_value
    return values


def process_settings() -> dict:
    """Plain values compared for equality."""
    settings = dict(runtime_checks.numerics_flags())
    settings.update({
        "grad enabled": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(),
        "autocast": torch.is_autocast_enabled(),
        "torch threads": torch.get_num_threads(),
        "anomaly mode": torch.is_anomaly_enabled(),
        "torch modes": runtime_checks.active_modes(),
        "trace": sys.gettrace(),
        "profile": sys.getprofile(),
        "recursion limit": sys.getrecursionlimit(),
        "switch interval": sys.getswitchinterval(),
        "gc": (gc.isenabled(), gc.get_threshold()),
        "signals": {s.name: signal.getsignal(s) for s in signal.valid_signals() if isinstance(s, signal.Signals)},
        "environment": dict(os.environ),
        "sys.path": list(sys.path),
        "umask": _umask(),
        "stdio": (id(sys.stdout), id(sys.stderr), id(sys.stdin)),
        "python threads": sorted(t.ident for t in threading.enumerate()),
        "open files": open_files(),
        "native libraries": mapped_libraries(),
    })
    if hasattr(torch, "get_default_device"):
        settings["default device"] = str(torch.get_default_device())
    return settings


def open_files() -> dict[str, str]:
    """fd -> what it points to, leaving out the GPU lock (a worker holds it while it checks
    itself) and the NVIDIA driver's device files (CUDA opens more of them as it goes)."""
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the descriptor listdir itself used
        if not (target.startswith("/dev/nvidia") or "drk_gpu_locks" in target):
            found[fd] = target
    return found


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def mapped_libraries() -> frozenset[str]:
    """Shared objects mapped into this process from anywhere but the Python installation, the
    system's library folders and Triton's cache (its compiled kernels and launchers). Honest
    code loads libraries lazily from the first two; a library from anywhere else could hook
    anything in the process."""
    import site
    import sysconfig

    trusted = {sys.prefix, sys.base_prefix, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
               *site.getsitepackages(), "/usr/", "/lib", "/opt/",
               os.environ.get("TRITON_CACHE_DIR") or os.path.expanduser("~/.triton/cache")}
    trusted = tuple(os.path.realpath(p) for p in trusted if p)
    found = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if ".so" in os.path.basename(path) and not os.path.realpath(path).startswith(trusted):
                    found.add(path)
    except OSError:
        pass
    return frozenset(found)


class WorldState:
    """The worker's process as it was before its first job."""

    def __init__(self, device: torch.device):
        self.device = device
        tempfile.gettempdir()  # sets tempfile's lazily initialised globals now, not during a job
        tempfile._get_candidate_names()
        if device.type == "cuda":
            release_cuda_caches(device)
        self.modules = set(sys.modules)
        self.cwd = os.getcwd()
        self.environment = dict(os.environ)
        self.settings = process_settings()
        self.children = set(runtime_checks.child_processes())
        self.values = attribute_values()
        self.compared = [(key, value) for key, value in self.values.items() if not _not_compared(key)]
        self.cuda_allocated = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0

    def forget_job(self, workdir: str) -> None:
        """Undo what every job does on purpose: its modules, folder, environment and Triton hooks."""
        os.chdir(self.cwd)  # the job's folder is gone already
        for name in set(sys.modules) - self.modules:
            file = getattr(sys.modules[name], "__file__", None)
            if file is None or file.startswith(workdir + os.sep):
                del sys.modules[name]
        sys.path[:] = [p for p in sys.path if p != workdir]
        os.environ.clear()
        os.environ.update(self.environment)
        try:
            from triton import knobs

            knobs.runtime.jit_cache_hook = knobs.runtime.jit_post_compile_hook = None
        except ImportError:
            pass
        for name in ("last_exc", "last_type", "last_value", "last_traceback"):
            if hasattr(sys, name):
                delattr(sys, name)
        gc.collect()  # frees the job's tensors to the caching allocator, launches nothing (only what jobs made:
        # the zygote froze everything from before, 0.1 s of walking in a process that has imported torch)

    def differences(self) -> list[str]:
        """What is not as it was; empty when the worker may take another job."""
        return self.leftover_work() + self.gpu_differences() + self.process_differences()

    def leftover_work(self) -> list[str]:
        """Anything of the job still running (threads, child processes): checked before the worker
        lets go of the GPU."""
        found = []
        if {t.ident for t in threading.enumerate()} != set(self.settings["python threads"]):
            found.append("python threads changed")
        if set(runtime_checks.child_processes()) - self.children:
            found.append("child processes are running")
        return found

    def gpu_differences(self) -> list[str]:
        """CUDA as it was (after freeing the caches): GPU work, so under a shared GPU lock."""
        if self.device.type != "cuda":
            return []
        release_cuda_caches(self.device)
        return self.cuda_differences()

    def process_differences(self) -> list[str]:
        """Everything else: modules, flags, modes, hooks, signals, environment, files, libraries."""
        found = []
        settings = process_settings()
        found += [f"{key} changed" for key, value in self.settings.items()
                  if key not in ("open files", "python threads") and settings.get(key) != value]
        files = sorted(set(settings["open files"].items()) ^ set(self.settings["open files"].items()))
        if files:
            found.append("open files changed: " + ", ".join(f"fd {fd} {target}" for fd, target in files[:3]))
        values = attribute_values()
        for key, value in self.compared:  # filtered once, in __init__: this loop runs after every job
            now = values.get(key, _MISSING)
            if now is not value:
                found.append(f"{'.'.join(key)} was {'removed' if now is _MISSING else 'replaced'}")
        found += [f"{'.'.join(key)} was added" for key in values.keys() - self.values.keys()
                  if key[:2] in self.values and (len(key) == 3 or key[1].startswith("__"))
                  and not (INTERPRETER and key[0].startswith("triton.language"))]
        new_modules = [m for m in set(sys.modules) - self.modules
                       if m.partition(".")[0] == "drk_lab" and not _is_harness_file(sys.modules[m])]
        found += [f"module {m} is not the harness's" for m in new_modules]
        return found

    def cuda_differences(self) -> list[str]:
        found = []
        try:
            if torch.cuda.current_stream(self.device) != torch.cuda.default_stream(self.device):
                found.append("the current stream is not the default stream")
            if torch.cuda.memory_allocated(self.device) > self.cuda_allocated:
                found.append(f"{torch.cuda.memory_allocated(self.device) - self.cuda_allocated} bytes of CUDA memory "
                             "are still allocated")
            x = torch.arange(1024, device=self.device, dtype=torch.float32)
            if float((x * 2).sum()) != 1023.0 * 1024:
                found.append("a test kernel gave a wrong answer")
            torch.cuda.synchronize(self.device)
        except Exception as e:  # a sticky CUDA error, or anything else: retire
            found.append(f"CUDA check failed: {type(e).__name__}: {e}")
        return found


_MISSING = object()


def _not_compared(key: tuple) -> bool:
    return key[:2] in CHANGING or (INTERPRETER and key[0].startswith("triton.language"))


def release_cuda_caches(device: torch.device) -> None:
    """cuBLAS keeps a workspace per handle and stream from the caching allocator: freed here, so
    that memory still allocated after a job is the job's."""
    torch.cuda.synchronize(device)
    if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
        torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()


PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # drk_lab/, not only harness/


def _is_harness_file(module) -> bool:
    file = getattr(module, "__file__", None)
    return file is not None and os.path.realpath(file).startswith(PACKAGE_DIR + os.sep)
