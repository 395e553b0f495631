"""A training state in files of at most 16 MiB, to commit after each GPU call and resume from bit for bit.

    save_state(trainer, "data/runs/<run>/state", sampler={...})   # adapter, optimizer, scheduler, RNG, step
    load_state(trainer, "data/runs/<run>/state")                  # into a trainer built with the same settings

Why not accelerate's save_state (RLTrainer.save_checkpoint): it writes the whole model, base weights
included (about 110 MB for the mini model in float32), and files come back from a GPU machine at most
16 MiB each. Only what training changes is kept: the trainable parameters (a LoRA adapter), the
optimizer's and scheduler's state, the step, the RNG states (python, numpy, torch, CUDA) and the prompt
sampler's state; the frozen base is the shipped SFT model (rl/packed_model.py). Everything is one
`torch.save` stream cut into parts (state.pt.000, .001, ...) beside manifest.json, which lists the parts
with their SHA-256, so a part lost or changed on the way is an error, not a silently different run.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
from pathlib import Path

import torch

MAX_PART_BYTES = 16 * 2**20
FORMAT = "drk_lab.rl.checkpoint/1"
MANIFEST = "manifest.json"


def rng_state() -> dict:
    """The python, numpy, torch and (where there is one) CUDA generators' states, as tensors and lists."""
    import numpy as np

    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype("int64")), "pos": int(pos),
                       "has_gauss": int(has_gauss), "gauss": float(gauss)}}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import numpy as np

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype("uint32"), n["pos"], n["has_gauss"], n["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def trainable_state(model) -> dict[str, torch.Tensor]:
    """The parameters that train (a LoRA adapter's), by name, copied to the CPU."""
    return {name: p.detach().cpu().clone() for name, p in model.named_parameters() if p.requires_grad}


def load_trainable(model, tensors: dict[str, torch.Tensor]) -> None:
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    if set(params) != set(tensors):
        missing, extra = sorted(set(params) - set(tensors)), sorted(set(tensors) - set(params))
        raise ValueError(f"the saved trainable parameters do not fit the model (missing {missing[:3]}, extra {extra[:3]})")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(tensors[name].to(p.device, p.dtype))


def write_parts(data: bytes, folder: Path, name: str = "state.pt", max_bytes: int = MAX_PART_BYTES) -> list[dict]:
    """`data` as folder/name.000, .001, ... of at most max_bytes each; [{file, bytes, sha256}]."""
    parts = []
    for i, start in enumerate(range(0, max(len(data), 1), max_bytes)):
        chunk = data[start:start + max_bytes]
        path = folder / f"{name}.{i:03d}"
        path.write_bytes(chunk)
        parts.append({"file": path.name, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
    return parts


def read_parts(folder: Path, parts: list[dict]) -> bytes:
    chunks = []
    for part in parts:
        chunk = (folder / part["file"]).read_bytes()
        if hashlib.sha256(chunk).hexdigest() != part["sha256"]:
            raise ValueError(f"{folder / part['file']}: its SHA-256 is not the manifest's (a changed or cut file)")
        chunks.append(chunk)
    return b"".join(chunks)


def save_state(trainer, folder, sampler: dict | None = None, extra: dict | None = None,
               max_part_bytes: int = MAX_PART_BYTES) -> Path:
    """The trainer's state (module docstring) into `folder`, replacing what was there. `sampler`: what
    decides the next prompts (JSON), checked again on load; `extra`: anything else the run keeps (JSON)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    trainer._ensure_scheduler(None)
    model = trainer.accelerator.unwrap_model(trainer.model)
    state = {"trainable": trainable_state(model), "optimizer": trainer.optimizer.state_dict(),
             "scheduler": trainer.scheduler.state_dict(), "step": trainer.state.step, "rng": rng_state()}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    for old in folder.glob("state.pt.*"):
        old.unlink()
    parts = write_parts(buffer.getvalue(), folder, max_bytes=max_part_bytes)
    manifest = {"format": FORMAT, "step": trainer.state.step, "schedule_total": trainer.schedule_total,
                "sampler": sampler or {}, "extra": extra or {}, "parts": parts,
                "settings": trainer.settings.to_dict()}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, default=str) + "\n")
    return folder


def read_manifest(folder) -> dict | None:
    path = Path(folder) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


def load_state(trainer, folder, sampler: dict | None = None) -> dict:
    """Put the state saved in `folder` into `trainer` (built with the same settings and model); returns the
    manifest. With `sampler`, a saved sampler state that differs raises ValueError: the run would go on
    with other prompts than the ones it stopped before."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None or manifest.get("format") != FORMAT:
        raise FileNotFoundError(f"{folder}: no saved state ({MANIFEST} of format {FORMAT})")
    if sampler is not None and manifest["sampler"] != json.loads(json.dumps(sampler)):
        raise ValueError(f"{folder}: saved with sampler {manifest['sampler']}, resumed with {sampler}")
    # on the CPU first: a state saved on a GPU also loads on a machine without one (the optimizer moves it back)
    state = torch.load(io.BytesIO(read_parts(folder, manifest["parts"])), weights_only=True, map_location="cpu")
    trainer._ensure_scheduler(None, manifest["schedule_total"])
    load_trainable(trainer.accelerator.unwrap_model(trainer.model), state["trainable"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.scheduler.load_state_dict(state["scheduler"])
    trainer.state.step = int(state["step"])
    set_rng_state(state["rng"])
    return manifest
