"""The SFT cold start with the tiny transformer on CPU: reading Dr. Kernel's layout from JSONL and parquet,
row checks, assistant-only labels in the batch TRL trains on, one full and one LoRA step, and the
conversion of this project's trajectories."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

import drk_lab as drk  # noqa: E402
from drk_lab.agent.trajectory import (  # noqa: E402
    Trajectory,
    Turn,
    read_jsonl,  # noqa: E402
    write_jsonl,
)
from drk_lab.data.cold_start import (  # noqa: E402
    ColdStartError,
    load_cold_start,
    trajectories_to_cold_start,
    write_cold_start,
)
from drk_lab.harness.result import EvalResult  # noqa: E402
from drk_lab.rl.sft import run_sft  # noqa: E402
from drk_lab.rl.tiny_model import IM_END, load_tiny, make_tiny_model  # noqa: E402

SYSTEM = "You are an expert in writing fast, correct Triton kernels."


def cold_start_rows() -> list[dict]:
    """Four 2-turn trajectories built from built-in tasks and their solutions (one with a system turn)."""
    rows = []
    for uuid, (task, speedup) in enumerate(zip(drk.builtin_tasks(level=1)[:4], [0.0, 1.3, 2.1, 0.9])):
        solution = drk.builtin_solution(task)
        messages = [
            {"role": "user", "content": f"Write ModelNew with Triton kernels for:\n```python\n{task.source}```"},
            {"role": "assistant", "content": f"First try:\n```python\n{solution[: len(solution) // 2]}```"},
            {"role": "user", "content": "The code does not parse. Fix the kernel and return the full code."},
            {"role": "assistant", "content": f"Fixed.\n```python\n{solution}```"},
        ]
        if uuid == 1:
            messages.insert(0, {"role": "system", "content": SYSTEM})
        rows.append({"messages": messages, "uuid": uuid, "entry_point": "Model", "final_speedup": speedup,
                     "best_round": 2, "original_python_code": task.source})
    return rows


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def cold_start(tmp_path_factory):
    """The four rows split over a JSONL file and a parquet file in one folder, and loaded back."""
    folder = tmp_path_factory.mktemp("cold")
    rows = cold_start_rows()
    write_cold_start(rows[:2], folder / "a.jsonl")
    write_cold_start(rows[2:], folder / "b.parquet")
    return folder, rows, load_cold_start([folder / "a.jsonl", folder / "b.parquet"])


def test_load_cold_start_from_jsonl_and_parquet(cold_start, tmp_path):
    folder, rows, data = cold_start
    assert len(data) == 4 and list(data) == rows  # messages and metadata columns as written, in order
    assert list(load_cold_start(folder)) == rows  # a folder: its files in name order
    assert list(load_cold_start(folder / "b.parquet")) == rows[2:]
    assert [r["uuid"] for r in load_cold_start(folder, min_speedup=1.0)] == [1, 2]
    assert [r["uuid"] for r in load_cold_start(folder, min_speedup=0.9, max_rows=2)] == [1, 2]
    assert len(load_cold_start(folder, max_rows=10)) == 4
    array = tmp_path / "rows.json"  # a JSON array of rows
    array.write_text(json.dumps(rows[1:3]))
    assert list(load_cold_start(array)) == rows[1:3]


def test_malformed_rows_are_named(tmp_path):
    rows = cold_start_rows()[:3]
    good = [json.dumps(r) for r in rows]
    cases = {
        "ends_with_user": ({**rows[2], "messages": rows[2]["messages"][:-1]}, "must end with an assistant turn"),
        "bad_role": ({**rows[2], "messages": [{"role": "tool", "content": "x"}, *rows[2]["messages"]]},
                     "message 0 has role 'tool'"),
        "no_content": ({**rows[2], "messages": [{"role": "user"}, *rows[2]["messages"]]}, r"message 0 \(user\) has no content"),
        "late_system": ({**rows[2], "messages": [*rows[2]["messages"][:2], {"role": "system", "content": "s"},
                                                  *rows[2]["messages"][2:]]}, "message 2 is a system message"),
        "empty": ({**rows[2], "messages": []}, "non-empty list"),
        "not_a_list": ({**rows[2], "messages": "user: hi"}, "non-empty list"),
    }
    for name, (bad, message) in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join([good[0], "", good[1], json.dumps(bad)]) + "\n")  # line 2 blank
        with pytest.raises(ColdStartError, match=rf"{name}\.jsonl: line 4: .*{message}"):
            load_cold_start(path)
    import pyarrow as pa
    import pyarrow.parquet as pq

    bad = [dict(r) for r in rows]
    bad[1]["messages"] = [*bad[1]["messages"], {"role": "user", "content": "more?"}]
    pq.write_table(pa.Table.from_pylist(bad), tmp_path / "bad.parquet")
    with pytest.raises(ColdStartError, match=r"bad\.parquet: row 1: the last message is a user message"):
        load_cold_start(tmp_path / "bad.parquet")
    (tmp_path / "nomsg.jsonl").write_text(json.dumps({"uuid": 1}) + "\n")
    with pytest.raises(ColdStartError, match=r"nomsg\.jsonl: line 1: no 'messages'"):
        load_cold_start(tmp_path / "nomsg.jsonl")
    pq.write_table(pa.table({"uuid": [1]}), tmp_path / "nomsg.parquet")
    with pytest.raises(ColdStartError, match=r"nomsg\.parquet: no 'messages' column"):
        load_cold_start(tmp_path / "nomsg.parquet")
    (tmp_path / "notjson.jsonl").write_text(good[0] + "\n{oops\n")
    with pytest.raises(ColdStartError, match=r"notjson\.jsonl: line 2: not JSON"):
        load_cold_start(tmp_path / "notjson.jsonl")
    (tmp_path / "rows.csv").write_text("messages\n")
    with pytest.raises(ColdStartError, match="unknown format"):
        load_cold_start(tmp_path / "rows.csv")


def expected_labels(tokenizer, messages, input_ids):
    """Labels computed apart from the template's markers: the tokens of each assistant turn's content and
    its closing <|im_end|>, found in the rendered text, keep their ids; every other token gets -100."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    assert encoding["input_ids"] == input_ids
    spans, cursor = [], 0
    for m in messages:
        header = f"<|im_start|>{m['role']}\n"
        start = text.index(header + m["content"] + IM_END, cursor) + len(header)
        cursor = start + len(m["content"]) + len(IM_END)
        if m["role"] == "assistant":
            spans.append((start, cursor))
    return [tid if any(a <= s and e <= b for a, b in spans) else -100
            for tid, (s, e) in zip(input_ids, encoding["offset_mapping"])]


def test_labels_cover_assistant_turns_only(tiny_path, cold_start, tmp_path):
    _, rows, data = cold_start
    run = run_sft(tiny_path, data, tmp_path / "out", max_length=4096, train=False)
    trainer, tokenizer = run.trainer, run.trainer.processing_class
    assert trainer.args.assistant_only_loss and len(trainer.train_dataset) == 4
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])  # what a training step sees
    pad = tokenizer.pad_token_id
    for row, ids, labels, attention in zip(rows, batch["input_ids"], batch["labels"], batch["attention_mask"]):
        n = int(attention.sum())
        ids, labels = ids.tolist(), labels.tolist()
        assert ids[n:] == [pad] * (len(ids) - n) and labels[n:] == [-100] * (len(ids) - n)
        assert labels[:n] == expected_labels(tokenizer, row["messages"], ids[:n])
        trained = [tokenizer.decode([t for t in labels[:n] if t != -100])]
        assistant = [m["content"] + IM_END for m in row["messages"] if m["role"] == "assistant"]
        assert trained == ["".join(assistant)]
        assert sum(t == tokenizer.eos_token_id for t in labels) == len(assistant)  # each turn learns to stop
        prompt_tokens = len(tokenizer(row["messages"][0]["content"])["input_ids"])
        assert prompt_tokens < n - sum(label != -100 for label in labels)  # the first prompt alone is masked


def assistant_nll(model, tokenizer, rows) -> float:
    """Mean negative log-likelihood over the assistant tokens of all rows, computed directly."""
    total, count = 0.0, 0
    with torch.no_grad():
        for row in rows:
            ids = tokenizer.apply_chat_template(row["messages"], tokenize=True, return_dict=True)["input_ids"]
            labels = torch.tensor(expected_labels(tokenizer, row["messages"], ids))
            logits = model(torch.tensor([ids])).logits[0, :-1].float()
            targets = labels[1:]
            keep = targets != -100
            total += torch.nn.functional.cross_entropy(logits[keep], targets[keep], reduction="sum").item()
            count += int(keep.sum())
    return total / count


@pytest.mark.slow
def test_one_full_sft_step_trains_on_assistant_tokens(tiny_path, cold_start, tmp_path):
    _, rows, data = cold_start
    before, tokenizer = load_tiny(tiny_path)
    run = run_sft(tiny_path, data, tmp_path / "full", lr=1e-3, max_steps=1, batch_size=4, max_length=4096)
    (first,) = [log for log in run.trainer.state.log_history if "loss" in log]
    assert torch.isfinite(torch.tensor(run.metrics["train_loss"])) and run.trainer.state.global_step == 1
    assert first["loss"] == pytest.approx(assistant_nll(before, tokenizer, rows), rel=1e-3)  # assistant-only loss
    after = dict(run.trainer.model.named_parameters())
    for name, p in before.named_parameters():
        assert not torch.equal(p, after[name].detach().cpu()), f"{name} did not change"
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "full")
    assert all(torch.equal(p, after[n].detach().cpu()) for n, p in saved.named_parameters())


@pytest.mark.slow
def test_sft_stopped_by_a_time_limit_resumes_to_the_same_model(tiny_path, cold_start, tmp_path):
    """A run stopped at its time limit leaves a checkpoint and no model; resumed, it ends where one
    uninterrupted run does, to the bit on a CPU (data position, optimizer, schedule and RNG restored)."""
    _, _, data = cold_start
    kw = dict(lr=1e-3, max_steps=4, batch_size=1, max_length=4096, lr_scheduler_type="cosine")
    whole = run_sft(tiny_path, data, tmp_path / "whole", **kw)
    # the first step of a call always runs; with a limit already passed, the run stops after it
    cut = run_sft(tiny_path, data, tmp_path / "cut", time_limit_s=1e-9, **kw)
    assert not cut.finished and cut.trainer.state.global_step == 1 and not cut.resumed
    assert not (tmp_path / "cut" / "config.json").exists() and (tmp_path / "cut" / "checkpoint-1").is_dir()
    rest = run_sft(tiny_path, data, tmp_path / "cut", resume=True, **kw)
    assert rest.finished and rest.resumed and rest.trainer.state.global_step == 4
    assert not list((tmp_path / "cut").glob("checkpoint-*"))  # the finished folder holds the model alone

    def losses(run):
        return [log["loss"] for log in run.trainer.state.log_history if "loss" in log]

    assert losses(rest) == losses(whole) and len(losses(whole)) == 4
    a, b = (AutoModelForCausalLM.from_pretrained(tmp_path / name) for name in ("whole", "cut"))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.slow
def test_one_lora_step_changes_only_the_adapter(tiny_path, cold_start, tmp_path):
    _, _, data = cold_start
    model, _ = load_tiny(tiny_path)
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    run = run_sft(model, data, tmp_path / "lora", lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
                  lr=1e-2, max_steps=1, batch_size=2, max_length=4096)
    assert torch.isfinite(torch.tensor(run.metrics["train_loss"]))
    params = dict(run.trainer.model.named_parameters())
    adapters = {n: p for n, p in params.items() if "lora_" in n}
    assert len(adapters) == 2 * 2 * 2  # A and B, q and v, two layers
    assert {n for n, p in params.items() if p.requires_grad} == set(adapters)
    for name, p in params.items():
        if "lora_B" in name:  # B starts at zero, so only B moves in the first step
            assert p.abs().sum() > 0, name
        elif "lora_" not in name:
            plain = name.replace("base_model.model.", "").replace(".base_layer", "")
            assert torch.equal(p.detach(), base[plain]), f"{name} changed"
    assert (tmp_path / "lora" / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "lora" / "model.safetensors").exists()


def crafted_trajectory() -> Trajectory:
    def turn(index, response, result, reward, feedback):
        return Turn(task="01_relu", index=index, iteration=0, context=list(range(index)), prompt_tokens=10,
                    prompt_chars=40, response=response, finish_reason="stop", extraction="ok",
                    code=response, result=result, reward=reward, feedback=feedback)

    return Trajectory(task="01_relu", prompt="Write ModelNew for relu", sample=3, system_prompt=SYSTEM, turns=[
        turn(0, "```python\nfirst\n```", EvalResult(compiled=True, error_kind="mismatch"), -0.5, "wrong values"),
        turn(1, "```python\nsecond\n```", EvalResult(compiled=True, correct=True, speedup=1.5), 1.5, "1.5x, improve"),
        turn(2, "```python\nthird\n```", EvalResult(compiled=True, correct=True, speedup=1.2), 1.2, "1.2x, improve"),
    ])


def test_trajectories_to_cold_start_round_trip(tmp_path):
    traj = crafted_trajectory()
    write_jsonl([traj], tmp_path / "runs.jsonl", append=False)
    (row,) = trajectories_to_cold_start(read_jsonl(tmp_path / "runs.jsonl"), start_uuid=7)
    assert row["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Write ModelNew for relu"},
        {"role": "assistant", "content": "```python\nfirst\n```"},
        {"role": "user", "content": "wrong values"},
        {"role": "assistant", "content": "```python\nsecond\n```"},
        {"role": "user", "content": "1.5x, improve"},
        {"role": "assistant", "content": "```python\nthird\n```"},
    ]
    assert (row["uuid"], row["entry_point"], row["task"], row["sample"]) == (7, "Model", "01_relu", 3)
    assert (row["final_speedup"], row["best_speedup"], row["best_round"], row["num_rounds"]) == (1.2, 1.5, 2, 3)
    assert row["rewards"] == [-0.5, 1.5, 1.2]
    (cut,) = trajectories_to_cold_start([traj], end_at_best=True)
    assert cut["messages"] == row["messages"][:5] and cut["uuid"] == 0
    assert (cut["final_speedup"], cut["best_round"], cut["num_rounds"]) == (1.5, 2, 2)
    hacked = crafted_trajectory()
    hacked.turns[2].result.hacked = True
    untimed = crafted_trajectory()
    untimed.turns[2].result.speedup = None
    assert [r["final_speedup"] for r in trajectories_to_cold_start([hacked, untimed, Trajectory("x", "p")])] == [0.0, None]
    for suffix in ("jsonl", "parquet"):
        path = write_cold_start([row, cut], tmp_path / f"ours.{suffix}")
        assert list(load_cold_start(path)) == [row, cut]


def test_a_template_without_generation_markers_is_refused(tiny_path, cold_start, tmp_path):
    _, _, data = cold_start
    plain = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
             "{% endfor %}")
    with pytest.raises(ValueError, match="generation"):
        run_sft(tiny_path, data, tmp_path / "plain", chat_template=plain, train=False)
