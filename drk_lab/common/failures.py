"""How an evaluation fails inside the worker: EvaluationFailure carries its error kind, and classify()
names the kind of an exception a candidate raised (compile, oom, CUDA errors, exit, runtime)."""

from __future__ import annotations

import os
import traceback

import torch


class EvaluationFailure(Exception):
    """A classified failure that ends the evaluation: `kind` is an error kind of hacks/catalogue.py."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def classify(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    if isinstance(e, SystemExit):
        return "exit"
    if isinstance(e, (torch.cuda.OutOfMemoryError, MemoryError)) or "out of memory" in text.lower():
        return "oom"
    if any(s in text for s in ("illegal memory access", "misaligned address", "illegal instruction",
                               "unspecified launch failure", "cudaErrorIllegalAddress")):
        return "cuda_illegal_access"
    module = type(e).__module__ or ""
    if module.startswith("triton.compiler") or type(e).__name__ in ("CompilationError", "OutOfResources"):
        return "compile"
    if "CUDA error" in text or "CUDA driver error" in text or type(e).__name__ == "AcceleratorError":
        return "cuda_error"
    return "runtime"


def short_traceback(e: BaseException, limit: int = 4000) -> str:
    """The exception and the frames in the candidate's or task's own files, bounded."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if os.path.basename(f.filename) in ("candidate.py", "reference.py")]
    for f in frames:
        f.filename = os.path.basename(f.filename)
    where = "".join(traceback.format_list(frames[-3:]))
    text = (where + "".join(traceback.format_exception_only(type(e), e))).strip()
    return text if len(text) <= limit else text[: limit // 2] + "\n...\n" + text[-limit // 2:]
