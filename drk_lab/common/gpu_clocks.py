"""The GPU's SM clock and why the driver is holding it down, and how busy the GPU is, read from NVML
through ctypes (no extra package). Compute-bound kernels run slower when power or heat pulls the clock
down, which makes their speedup against a cached baseline drift; timing results record it so such
drift is visible."""

from __future__ import annotations

import ctypes

NVML_CLOCK_SM = 1
# nvmlClocksEventReasons bits that mean the clock was pulled down (idle and application settings are not)
SLOWDOWN_REASONS = {0x4: "power cap", 0x8: "hardware slowdown", 0x20: "software thermal slowdown",
                    0x40: "hardware thermal slowdown", 0x80: "power brake"}

_nvml = None
_handles: dict[int, ctypes.c_void_p] = {}


def _library():
    global _nvml
    if _nvml is None:
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            _nvml = lib if lib.nvmlInit_v2() == 0 else False
        except (OSError, AttributeError):
            _nvml = False
    return _nvml


def _handle(cuda_index: int):
    lib = _library()
    if not lib:
        return None
    if cuda_index not in _handles:
        try:
            import torch

            index = torch.cuda._get_nvml_device_index(cuda_index)  # honours CUDA_VISIBLE_DEVICES
        except Exception:
            index = cuda_index
        handle = ctypes.c_void_p()
        if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)) != 0:
            return None
        _handles[cuda_index] = handle
    return _handles[cuda_index]


def clock_state(cuda_index: int = 0) -> dict | None:
    """{"sm_clock_mhz", "slowdown": [reasons]} now, or None without NVML."""
    handle = _handle(cuda_index)
    if handle is None:
        return None
    lib, clock, reasons = _library(), ctypes.c_uint(), ctypes.c_ulonglong()
    if lib.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM, ctypes.byref(clock)) != 0:
        return None
    get_reasons = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        getattr(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None)  # the older driver's name
    slowdown = []
    if get_reasons and get_reasons(handle, ctypes.byref(reasons)) == 0:
        slowdown = [name for bit, name in SLOWDOWN_REASONS.items() if reasons.value & bit]
    return {"sm_clock_mhz": clock.value, "slowdown": slowdown}


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


def busy_percent(cuda_index: int = 0) -> int | None:
    """The share of NVML's last sample period (1/6 s to 1 s, by GPU) in which a kernel was running, in
    percent, or None without NVML. Near 100 while evaluations wait for one another: the GPU sets the rate."""
    handle = _handle(cuda_index)
    if handle is None:
        return None
    rates = _Utilization()
    return rates.gpu if _library().nvmlDeviceGetUtilizationRates(handle, ctypes.byref(rates)) == 0 else None
