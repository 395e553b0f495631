"""Records every Triton kernel launch while active, by patching Triton's launch entry points.

Where a launch of a `@triton.jit` function goes (the same in triton 3.6 and 3.9):

    kernel[grid](*args)        KernelInterface.__getitem__ -> self.run(..., grid=grid, warmup=False)
    JITFunction.run            compiled mode: binds, compiles if needed, then CompiledKernel.run(...)
    InterpretedFunction.run    TRITON_INTERPRET=1: @triton.jit returns one of these
    Heuristics.run             fills meta-parameters, then self.fn.run(...)
    Autotuner.run              benchmarks configs through Autotuner._bench -> self.fn.run(...) on a new
                               key, then self.fn.run(...) with the best config
    CompiledKernel[grid](...)  a compiled kernel launched by hand (e.g. the value JITFunction.run returns)

so every launch ends in JITFunction.run, InterpretedFunction.run or CompiledKernel.__getitem__, which
are patched at class level (kernels defined after entering are caught too). Autotuner.run is patched
so that a disabled candidate kernel is not autotuned on no-op launches, and Autotuner._bench so that
benchmark launches are marked `tuning`. Only `warmup=False` calls are launches.

Nesting is safe in any order: the patches are installed by the first active KernelLaunches and
removed by the last one, each launch is recorded by every active one.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import asdict, dataclass

import torch


@dataclass
class Launch:
    index: int                   # order among the launches this KernelLaunches recorded
    name: str                    # the Python function's __name__
    count: int                   # nth launch of this kernel (tuning and skipped ones included)
    candidate: bool              # defined in the watched file (always True without a file filter)
    grid: tuple | None           # None when not known (e.g. a callable grid of a skipped launch)
    stream: int | None           # the stream it was launched on (None on CPU / interpreter)
    current_stream: int | None   # torch's current stream at that moment
    on_entry_stream: bool        # launched on the stream that was current when recording began
    on_entry_thread: bool        # launched from the thread that began recording
    tuning: bool = False         # an autotuner benchmark launch
    skipped: bool = False        # disabled: not launched at all
    via: str = "jit"             # jit | interpreter | autotuner | compiled_kernel


@dataclass
class _Patch:
    cls: type
    attr: str
    had_own: bool
    original: object
    wrapper: object


_state_lock = threading.Lock()
_sessions: tuple = ()           # active KernelLaunches, replaced whole (readers take no lock)
_patches: list[_Patch] = []
_local = threading.local()      # .tuning: depth of Autotuner._bench calls on this thread


def _stream_now() -> int | None:
    if not torch.cuda.is_initialized():
        return None
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(torch.cuda.current_device())
    return torch.cuda.current_stream().cuda_stream


def _python_function(kernel):
    """The innermost plain function of a JITFunction / InterpretedFunction / Autotuner / Heuristics."""
    fn = getattr(kernel, "base_fn", None) or kernel
    for _ in range(8):
        if hasattr(fn, "__code__"):
            return fn
        fn = getattr(fn, "fn", None)
        if fn is None:
            return None
    return None


def _grid_tuple(grid) -> tuple | None:
    try:
        return tuple(int(g) for g in grid)
    except (TypeError, ValueError):
        return None


class KernelLaunches:
    """Context manager: `with KernelLaunches(only_file="candidate.py") as kl: model(*x)`, then
    `kl.counts()`. With `disabled=True` (or `kl.disabled = True` at any time) launches of the
    watched kernels are skipped entirely and return None; other kernels run as usual."""

    def __init__(self, only_file: str | None = None, disabled: bool = False, keep: int = 100_000):
        self.only_file = os.path.abspath(only_file) if only_file else None
        self.disabled = disabled
        self.keep = keep                    # records kept; counters go on past it
        self.launches: list[Launch] = []
        self.total: dict[str, int] = {}     # name -> launches, tuning and skipped included
        self.tampered: list[str] = []       # patched entry points found replaced by someone else
        self._is_candidate_file: dict[str, bool] = {}
        self._lock = threading.Lock()
        self._active = False
        self.entry_stream: int | None = None
        self.entry_thread: int | None = None

    # -- queries --------------------------------------------------------------------------
    def counts(self, candidate_only: bool = True, include_tuning: bool = False) -> dict[str, int]:
        out: dict[str, int] = {}
        for rec in self.launches:
            if (candidate_only and not rec.candidate) or (rec.tuning and not include_tuning):
                continue
            out[rec.name] = out.get(rec.name, 0) + 1
        return out

    def names(self, candidate_only: bool = True) -> set[str]:
        return {rec.name for rec in self.launches if rec.candidate or not candidate_only}

    def candidate_launches(self) -> list[Launch]:
        return [rec for rec in self.launches if rec.candidate and not rec.tuning]

    def off_stream(self) -> list[Launch]:
        """Launches on a stream other than the one current when recording began (side streams)."""
        return [rec for rec in self.launches if not rec.on_entry_stream]

    def other_threads(self) -> list[Launch]:
        return [rec for rec in self.launches if not rec.on_entry_thread]

    def clear(self) -> None:
        with self._lock:
            self.launches, self.total = [], {}

    def summary(self) -> dict:
        """JSON-ready digest for a result."""
        return {
            "counts": self.counts(),
            "other_counts": {k: v for k, v in self.counts(candidate_only=False).items()
                             if k not in self.names()},
            "launches": len(self.launches),
            "skipped": sum(r.skipped for r in self.launches),
            "tuning": sum(r.tuning for r in self.launches),
            "off_stream": sorted({r.name for r in self.off_stream()}),
            "other_threads": sorted({r.name for r in self.other_threads()}),
            "tampered": list(self.tampered),
        }

    def records(self) -> list[dict]:
        return [asdict(r) for r in self.launches]

    # -- recording ------------------------------------------------------------------------
    def is_candidate(self, fn) -> bool:
        """Whether a kernel's Python function (None when unknown) was defined in the watched file."""
        if self.only_file is None:
            return True
        code = getattr(fn, "__code__", None)
        if code is None:
            return False
        filename = code.co_filename
        known = self._is_candidate_file.get(filename)
        if known is None:
            known = self._is_candidate_file[filename] = os.path.abspath(filename) == self.only_file
        return known

    def _record(self, name: str, candidate: bool, grid, stream, current, via: str, skipped: bool) -> Launch:
        with self._lock:
            n = self.total.get(name, 0) + 1
            self.total[name] = n
            rec = Launch(index=len(self.launches), name=name, count=n, candidate=candidate, grid=grid,
                         stream=stream, current_stream=current, on_entry_stream=stream == self.entry_stream,
                         on_entry_thread=threading.get_ident() == self.entry_thread,
                         tuning=getattr(_local, "tuning", 0) > 0, skipped=skipped, via=via)
            if len(self.launches) < self.keep:
                self.launches.append(rec)
        return rec

    def __enter__(self) -> "KernelLaunches":
        global _sessions
        with _state_lock:
            if self._active:
                raise RuntimeError("this KernelLaunches is already active")
            self.entry_stream, self.entry_thread = _stream_now(), threading.get_ident()
            if not _sessions:
                _install()
            _sessions = _sessions + (self,)
            self._active = True
        return self

    def __exit__(self, *exc) -> None:
        global _sessions
        with _state_lock:
            self.tampered = [f"{p.cls.__name__}.{p.attr}" for p in _patches
                             if p.cls.__dict__.get(p.attr) is not p.wrapper]
            _sessions = tuple(s for s in _sessions if s is not self)
            self._active = False
            if not _sessions:
                _uninstall()


def _note(kernel, via: str, grid, stream, current, skippable: bool):
    """Record one launch in every active KernelLaunches; returns (skip, records)."""
    fn = _python_function(kernel)
    name = getattr(fn, "__name__", None) or getattr(kernel, "name", None) or type(kernel).__name__
    skip, recs = False, []
    for s in _sessions:
        candidate = s.is_candidate(fn)
        skip = skip or (skippable and s.disabled and candidate)
        recs.append((s, candidate))
    records = [s._record(name, c, grid, stream, current, via, skip) for s, c in recs]
    return skip, records


def _wrap_kernel_run(original, via: str):
    def run(self, *args, **kwargs):
        if not _sessions or kwargs.get("warmup"):
            return original(self, *args, **kwargs)
        grid = kwargs.get("grid")
        stream = _stream_now()
        skip, records = _note(self, via, None if callable(grid) else _grid_tuple(grid), stream, stream, True)
        if skip:
            return None
        if callable(grid):
            def grid_seen(meta, _grid=grid):
                value = _grid(meta)
                resolved = _grid_tuple(value)
                for rec in records:
                    rec.grid = resolved
                return value
            kwargs["grid"] = grid_seen
        return original(self, *args, **kwargs)
    run.__wrapped__ = original
    return run


def _wrap_autotuner_run(original):
    def run(self, *args, **kwargs):
        if not _sessions or kwargs.get("warmup"):
            return original(self, *args, **kwargs)
        fn = _python_function(self)
        if any(s.disabled and s.is_candidate(fn) for s in _sessions):
            # skip before tuning: benchmarking no-op launches would cache a meaningless config
            stream = _stream_now()
            _note(self, "autotuner", None, stream, stream, True)
            return None
        return original(self, *args, **kwargs)
    run.__wrapped__ = original
    return run


def _wrap_bench(original):
    def _bench(self, *args, **kwargs):
        _local.tuning = getattr(_local, "tuning", 0) + 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _local.tuning -= 1
    _bench.__wrapped__ = original
    return _bench


def _wrap_compiled_getitem(original):
    def __getitem__(self, grid):
        runner = original(self, grid)
        if not _sessions:
            return runner

        def launch(*args, stream=None):
            if not _sessions:
                return runner(*args, stream=stream)
            src = getattr(self, "src", None)
            current = _stream_now()
            skip, _ = _note(getattr(src, "fn", None) or self, "compiled_kernel", _grid_tuple(grid),
                            current if stream is None else stream, current, True)
            if skip:
                return None
            return runner(*args, stream=stream)
        return launch
    __getitem__.__wrapped__ = original
    return __getitem__


def _targets() -> list[tuple[type, str, object]]:
    out = []
    from triton.runtime import autotuner, jit
    out.append((jit.JITFunction, "run", lambda o: _wrap_kernel_run(o, "jit")))
    if hasattr(autotuner.Autotuner, "run"):
        out.append((autotuner.Autotuner, "run", _wrap_autotuner_run))
    if hasattr(autotuner.Autotuner, "_bench"):
        out.append((autotuner.Autotuner, "_bench", _wrap_bench))
    interpret = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
    if interpret or "triton.runtime.interpreter" in sys.modules:
        try:
            from triton.runtime.interpreter import InterpretedFunction
            out.append((InterpretedFunction, "run", lambda o: _wrap_kernel_run(o, "interpreter")))
        except ImportError:
            pass
    try:
        from triton.compiler.compiler import CompiledKernel
        out.append((CompiledKernel, "__getitem__", _wrap_compiled_getitem))
    except ImportError:
        pass
    return out


def _install() -> None:
    for cls, attr, make in _targets():
        original = getattr(cls, attr)
        patch = _Patch(cls, attr, attr in cls.__dict__, cls.__dict__.get(attr, original), None)
        patch.wrapper = make(original)
        setattr(cls, attr, patch.wrapper)
        _patches.append(patch)


def _uninstall() -> None:
    while _patches:
        p = _patches.pop()
        if p.had_own:
            setattr(p.cls, p.attr, p.original)
        else:
            delattr(p.cls, p.attr)


def patched() -> bool:
    """Whether the launch hooks are installed now (for tests and sanity checks)."""
    return bool(_patches)

