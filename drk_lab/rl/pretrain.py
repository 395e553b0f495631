"""Next-token pretraining of a small causal LM on whole texts packed into rows, resumable across calls.

    rows = packed_rows(texts, tokenizer, length=4096, seed=0)
    result = pretrain("out/init", rows, "out/pretrain", steps=1000, batch=8, lr=1e-3, time_limit_s=500)
    if not result["finished"]:   # stopped before a step that would pass 500 s; out/pretrain.ckpt.pt holds
        ...                      # its state: the same call again resumes there and ends as one call would

Every token of a text is a target (SFT, rl/sft.py, trains on the assistant's tokens only). The model
is saved to out_dir only once every step is done, so a folder with a config.json is always a finished
model; the checkpoint is one file written whole (a temporary name, then renamed) and is removed then.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

import torch

from drk_lab.rl.call_limit import StepTimer


def packed_rows(texts: list[str], tokenizer, length: int, seed: int = 0) -> torch.Tensor:
    """Rows of `length` + 1 tokens holding whole texts (each followed by <|endoftext|>), packed first-fit in
    a seeded random order and padded with -100 (no loss). A text starts at the start of a row or right
    after another text, never in the middle, so a reply is always trained together with the prompt it
    answers; cutting a stream at fixed offsets instead left most replies without their task, and the
    model learned the teacher's code but not which code a task asks for. A text longer than a row (a long
    multi-turn conversation) fills rows of its own."""
    size = length + 1
    pieces = []
    for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:  # one call: the fast tokenizer's threads
        ids = ids + [tokenizer.pad_token_id]
        pieces += [ids[i: i + size] for i in range(0, len(ids), size)]
    random.Random(seed).shuffle(pieces)
    rows: list[list[int]] = []
    for piece in pieces:
        row = next((r for r in rows[-64:] if len(r) + len(piece) <= size), None)  # first fit among recent rows
        if row is None:
            rows.append(row := [])
        row += piece
    return torch.tensor([row + [-100] * (size - len(row)) for row in rows], dtype=torch.long)


def checkpoint_path(out_dir: str | Path) -> Path:
    """Where an unfinished pretraining keeps its state: beside out_dir, never inside it."""
    out_dir = Path(out_dir)
    return out_dir.with_name(out_dir.name + ".ckpt.pt")


def pretrain(model_dir: str | Path, rows: torch.Tensor, out_dir: str | Path, *, steps: int, batch: int, lr: float,
             seed: int = 0, time_limit_s: float | None = None, progress: bool = True) -> dict:
    """`steps` steps of next-token training on batches of `rows` (packed_rows) drawn at random, AdamW with
    a linear warmup over a tenth of the steps and a cosine decay; bf16 autocast on a GPU.

    time_limit_s: stop before a step that would end after this many seconds of this call (judged by the
    longest step so far), saving the state; every call does at least one step. A later call with the same
    arguments resumes from that state: the model, the optimizer, the schedule and the batch sampler's
    generator, so on a CPU the result is the same to the bit as one uninterrupted call. Returns the loss
    of every step so far, `finished`, `resumed` and the seconds of training summed over calls
    (`train_seconds`)."""
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started, timer = time.perf_counter(), StepTimer(time_limit_s)  # loading counts against the limit too
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(steps // 10, 1))
                                                 * 0.5 * (1 + math.cos(math.pi * s / max(steps, 1))))
    generator = torch.Generator().manual_seed(seed)
    losses, earlier_s = [], 0.0
    ckpt = checkpoint_path(out_dir)
    resumed = ckpt.exists()
    if resumed:
        state = torch.load(ckpt, map_location="cpu", weights_only=False)  # the generator's state stays a CPU tensor
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        generator.set_state(state["generator"])
        losses, earlier_s = state["losses"], state["seconds"]
    finished = True
    bar = tqdm(total=steps, initial=len(losses), desc="pretrain", disable=not progress)
    for _ in range(len(losses), steps):
        if not timer.next_fits():
            finished = False
            break
        picked = rows[torch.randint(len(rows), (batch,), generator=generator)].to(device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(input_ids=picked[:, :-1].clamp(min=0)).logits  # padding is -100: any id will do
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), picked[:, 1:].flatten(), ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))  # also waits for the GPU, so the timer sees the step's real time
        timer.step_done()
        bar.update(1)
    bar.close()
    seconds = earlier_s + time.perf_counter() - started  # with loading the model: a resumed call's cost too
    if finished:
        model.save_pretrained(out_dir)
        AutoTokenizer.from_pretrained(model_dir).save_pretrained(out_dir)
        ckpt.unlink(missing_ok=True)
    else:
        partial = ckpt.with_name(ckpt.name + ".tmp")  # a call killed while saving leaves the last state whole
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(),
                    "generator": generator.get_state(), "losses": losses, "seconds": seconds}, partial)
        partial.replace(ckpt)
    return {"loss": losses, "finished": finished, "resumed": resumed, "steps_done": len(losses), "rows": len(rows),
            "row_fill": float((rows != -100).float().mean()), "tokens_per_step": batch * rows.shape[1],
            "train_seconds": seconds}
