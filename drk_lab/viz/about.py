"""What a figure is of: a run folder's header (question, command, commit, card), its model in a few words,
and a warning a curve alone does not give (an entropy near the uniform distribution's: an untrained model).

    header = run_header("data/runs/2026-12-04_mini_h200_long_trloo")   # {"run", "commit", "date", "card", ...}
    plots.describe(fig, plots.about_line(run=header["run"], card=header["card"], ...))
    near_uniform_entropy(rows, vocab_size=1024)                          # [] or one flag row
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

HEADER_FIELDS = ("question", "command", "commit", "verdict")


def run_header(run_dir: str | Path) -> dict:
    """The four-line README header of a run folder (data/runs/<date>_<slug>/README.md) as a dict: run (the
    folder's name), question, command, verdict, commit, date and card (the commit line's "sha, date,
    machine"; results.json's "machine" when the README has none)."""
    folder = Path(run_dir)
    out = {"run": folder.name}
    readme = folder / "README.md"
    text = readme.read_text() if readme.is_file() else ""
    for field in HEADER_FIELDS:
        match = re.search(rf"^- \*\*{field.capitalize()}\.\*\* (.+)$", text, re.MULTILINE)
        if match:
            out[field] = match.group(1).strip()
    sha, _, rest = out.get("commit", "").partition(", ")
    date, _, card = rest.partition(", ")
    out.update(commit=sha or None, date=date or None, card=card or None)
    results = folder / "results.json"
    if not out["card"] and results.is_file():
        out["card"] = json.loads(results.read_text()).get("machine")
    return out


def mini_model(settings: dict) -> str:
    """The mini run's model in a few words, from its settings.json ("settings" or the settings themselves)."""
    s = settings.get("settings", settings)
    if "hidden_size" not in s:
        return "unknown"
    return (f"Qwen3-style {s.get('num_layers')} layers x {s.get('hidden_size')} wide, vocab {s.get('vocab_size')}, "
            "trained here from scratch (pretraining, SFT)")


def near_uniform_entropy(rows: list[dict], vocab_size: int, share: float = 0.8) -> list[dict]:
    """A flag row when the run's mean entropy per token is above `share` of log(vocab_size), the entropy of
    the uniform distribution over the vocabulary: the model samples nearly at random (random weights, or a
    policy that came apart), so its curves show the machinery, not learning. [] otherwise."""
    values = [r["entropy"] for r in rows if isinstance(r.get("entropy"), (int, float))]
    if not values or vocab_size < 2:
        return []
    mean, uniform = sum(values) / len(values), math.log(vocab_size)
    if mean < share * uniform:
        return []
    return [{"kind": "entropy_near_uniform", "step": min(r["step"] for r in rows if "entropy" in r),
             "message": f"mean entropy {mean:.3g} nats is {mean / uniform:.0%} of the uniform distribution's "
                        f"log({vocab_size}) = {uniform:.3g}: the model samples almost at random (an untrained or "
                        "randomly initialised model?); its curves show the machinery, not learning"}]


def run_folder(path: str | Path) -> Path | None:
    """The run folder (data/runs/<date>_<slug>/) that holds `path` (a run log folder inside it, or itself)."""
    path = Path(path).resolve()
    return next((p for p in (path, *path.parents) if p.parent.name == "runs" and (p / "README.md").is_file()), None)


def log_about(path: str | Path) -> dict:
    """about_line's run, model and card for a run log folder: from its run folder's README header and
    settings.json (the mini runs) or the README's "- Model:" line; the path itself where it is in no run folder."""
    folder = run_folder(path)
    if folder is None:
        return {"run": str(path)}
    header = run_header(folder)
    rest = Path(path).resolve().relative_to(folder.resolve()).as_posix()
    run = header["run"] + ("/" + rest.removesuffix("/log") if rest not in ("", ".") else "")
    settings = folder / "settings.json"
    if settings.is_file():
        model = mini_model(json.loads(settings.read_text()))
    else:
        text = re.sub(r"\n +", " ", (folder / "README.md").read_text())  # a list item's wrapped lines as one
        match = re.search(r"^- Model: (.+?)(?::|\.\s|$)", text, re.MULTILINE)
        model = match.group(1) if match else None
    return {"run": run, "model": model, "card": header["card"]}


def card_name(device: str) -> str:
    """The card a notebook ran on, in words: the GPU's name, or the CPU's note (the interpreter, small sizes)."""
    if device == "cpu":
        return "CPU (Triton interpreter, small sizes, no timings)"
    import torch

    return torch.cuda.get_device_name()
