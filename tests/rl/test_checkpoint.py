"""rl/checkpoint.py on the tiny transformer with a LoRA adapter: the state in parts of a size limit, read back
into a fresh trainer exactly (adapter, AdamW's moments, scheduler, step, RNG states), and a changed part or a
changed prompt sampler refused."""

from __future__ import annotations

import random

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("trl")

import torch  # noqa: E402

from drk_lab.rl.checkpoint import load_state, read_manifest, save_state, trainable_state  # noqa: E402
from drk_lab.rl.trainer import RLTrainer  # noqa: E402

LORA = {"r": 4, "lora_alpha": 32, "target_modules": "all-linear"}


def trainer(tiny_path, relu_small):
    return RLTrainer(str(tiny_path), [relu_small], lora=LORA, lr=1e-2, betas=(0.9, 0.95), warmup_steps=3,
                     eval_kwargs={"device": "cpu"})


def take_an_update(t: RLTrainer) -> None:
    """One AdamW update on a real loss (the adapter's output on a few tokens), so the moments are not empty."""
    t._ensure_scheduler(None)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    t.model(input_ids=ids, labels=ids).loss.backward()
    t.optimizer.step()
    t.scheduler.step()
    t.optimizer.zero_grad()
    t.state.step += 1


@pytest.mark.slow
def test_state_round_trips_exactly_in_parts(tiny_path, relu_small, tmp_path):
    a = trainer(tiny_path, relu_small)
    take_an_update(a)
    take_an_update(a)
    random.seed(5), np.random.seed(6), torch.manual_seed(7)
    folder = save_state(a, tmp_path / "state", sampler={"seed": 0, "items": 1}, max_part_bytes=20_000)
    parts = sorted(folder.glob("state.pt.*"))
    assert len(parts) > 1 and all(p.stat().st_size <= 20_000 for p in parts)
    draws = (random.random(), np.random.rand(), torch.rand(1))
    saved = trainable_state(a.accelerator.unwrap_model(a.model))
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in saved} >= {"q_proj", "gate_proj", "down_proj"}

    b = trainer(tiny_path, relu_small)
    manifest = load_state(b, folder, sampler={"seed": 0, "items": 1})
    assert manifest["step"] == b.state.step == 2 and read_manifest(folder)["parts"][0]["file"] == "state.pt.000"
    loaded = trainable_state(b.accelerator.unwrap_model(b.model))
    assert all(torch.equal(saved[k], loaded[k]) for k in saved)
    sa, sb = a.optimizer.state_dict(), b.optimizer.state_dict()
    assert all(torch.equal(sa["state"][i][k], sb["state"][i][k]) for i in sa["state"] for k in sa["state"][i])
    assert a.scheduler.state_dict() == b.scheduler.state_dict() and b.scheduler.get_last_lr() == a.scheduler.get_last_lr()
    # the RNG states too: the draws after a load repeat those after the save
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == (draws[0], float(draws[1]),
                                                                                 float(draws[2]))
    # the next update is the same in both
    take_an_update(a)
    take_an_update(b)
    after_a, after_b = (trainable_state(t.accelerator.unwrap_model(t.model)) for t in (a, b))
    assert all(torch.equal(after_a[k], after_b[k]) for k in after_a)


def test_a_changed_part_or_sampler_is_refused(tiny_path, relu_small, tmp_path):
    a = trainer(tiny_path, relu_small)
    folder = save_state(a, tmp_path / "state", sampler={"seed": 0, "items": 1})
    with pytest.raises(ValueError, match="sampler"):
        load_state(trainer(tiny_path, relu_small), folder, sampler={"seed": 1, "items": 1})
    part = folder / "state.pt.000"
    data = bytearray(part.read_bytes())
    data[-1] ^= 1
    part.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="SHA-256"):
        load_state(trainer(tiny_path, relu_small), folder)
    with pytest.raises(FileNotFoundError):
        load_state(a, tmp_path / "nothing")
