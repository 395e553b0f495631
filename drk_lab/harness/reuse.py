"""Whether a warm worker may take another evaluation: everything a candidate could have left behind
in the process must be exactly as it was before the worker's first job, or the worker retires.

WorldState is taken once, after warm-up and before any candidate code runs. After each job the
worker forgets the job (its modules, folder, environment, Triton hooks, the caches world.RESTORED
names) and compares: the contents of everything mutable that any module reaches (world.Contents: dicts,
lists, sets, classes, instances, functions' code, defaults and closures, by identity), the modules
themselves, torch's dispatcher, autocast, default dtype and device and allocator settings
(registries.py), numerics flags, grad modes, torch function and dispatch modes, tracing and
profiling hooks, signal handlers, environment, threads, child processes, open files, mapped native
libraries (only Triton's own cache may add some), CUDA memory, the current stream, and a kernel that
must still run and give the right answer. Any difference, or any doubt, retires it.
Only the checks for leftover work (threads, child processes) and the CUDA part (caches freed,
memory, stream, test kernel) need the GPU lock; worker.check_self holds it for those alone.
"""

from __future__ import annotations

import gc
import os
import signal
import site
import sys
import sysconfig
import tempfile
import threading
import time

import torch

from drk_lab.hacks import runtime_checks
from drk_lab.harness.registries import registries, registry_differences
from drk_lab.harness.world import Contents

# Triton (3.6) loads each kernel's C launcher as an extension module under this one name, a new module
# object every time: where it was loaded from is checked among the mapped native libraries
LOADED_PER_KERNEL = {"__triton_launcher"}


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
    trusted = {sys.prefix, sys.base_prefix, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
               *site.getsitepackages(), "/usr/", "/lib", "/opt/",
               os.environ.get("TRITON_CACHE_DIR") or os.path.expanduser("~/.triton/cache")}
    trusted = tuple(os.path.realpath(p) for p in trusted if p)
    found = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if ".so" in os.path.basename(path) and not path.startswith(trusted) and \
                        not os.path.realpath(path).startswith(trusted):
                    found.add(path)
    except OSError:
        pass
    return frozenset(found)


class WorldState:
    """The worker's process as it was before its first job."""

    def __init__(self, device: torch.device, contents: Contents | None = None):
        """`contents`: a walk made before this process was forked from one in the same state (the zygote's,
        for CPU workers, which warm nothing up), recorded afresh here; None: walk here."""
        self.device = device
        self.jobs = 0  # jobs served (EvalResult.worker_job of the latest)
        self.seconds: dict[str, float] = {}  # what the parts of the latest check took
        tempfile.gettempdir()  # sets tempfile's lazily initialised globals now, not during a job
        next(tempfile._get_candidate_names())  # its generator is made on first use in a process
        if device.type == "cuda":
            release_cuda_caches(device)
        self.cwd = os.getcwd()
        self.environment = dict(os.environ)
        self.settings = process_settings()  # first: what the checks themselves import is then imported
        self.registries = registries(device.type)
        self.children = set(runtime_checks.child_processes())
        self.modules = set(sys.modules)
        self.module_ids = {name: id(module) for name, module in sys.modules.items()}
        self.contents = contents.refreshed() if contents else Contents()
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
        self.contents.restore()
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
        """Everything else: modules, flags, modes, hooks, signals, environment, files, libraries. The seconds
        each part took go to self.seconds (the reuse log shows them)."""
        found, clock = [], time.perf_counter()
        settings = process_settings()
        found += [f"{key} changed" for key, value in self.settings.items()
                  if key not in ("open files", "python threads") and settings.get(key) != value]
        files = sorted(set(settings["open files"].items()) ^ set(self.settings["open files"].items()))
        if files:
            found.append("open files changed: " + ", ".join(f"fd {fd} {target}" for fd, target in files[:3]))
        found += self.module_differences()
        self.seconds["settings"], clock = time.perf_counter() - clock, time.perf_counter()
        if found:  # it retires whatever else differs: the rest would cost CPU for nothing
            return found
        found += self.contents.differences()
        self.seconds["contents"], clock = time.perf_counter() - clock, time.perf_counter()
        if found:
            return found
        found += registry_differences(self.registries, registries(self.device.type))
        self.seconds["registries"] = time.perf_counter() - clock
        return found

    def module_differences(self) -> list[str]:
        """Every module is the one imported before the first job, and no job imported another (the job's
        own files are forgotten first): a module imported during a job was never snapshotted, so whatever
        the job did to it would go unseen. The warm-up imports what jobs commonly need."""
        found = [f"module {name} was {'removed' if name not in sys.modules else 'replaced'}"
                 for name, ident in self.module_ids.items()
                 if id(sys.modules.get(name)) != ident and name not in LOADED_PER_KERNEL]
        new_modules = sorted(set(sys.modules) - self.modules)
        if new_modules:
            found.append(f"the job imported {len(new_modules)} new modules ({', '.join(new_modules[:3])})")
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


def release_cuda_caches(device: torch.device) -> None:
    """cuBLAS keeps a workspace per handle and stream from the caching allocator: freed here, so
    that memory still allocated after a job is the job's."""
    torch.cuda.synchronize(device)
    if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
        torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
