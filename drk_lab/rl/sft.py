"""The SFT cold start: supervised fine-tuning on multi-turn chat trajectories before RL.

Data layout (Dr. Kernel's cold-start set, hkust-nlp/drkernel-coldstart-8k): one row per trajectory, a
`messages` column (a list of {role, content}: user, assistant, user, assistant, ...; an optional system
message first; the last message is the assistant's) and metadata columns (uuid, entry_point,
final_speedup, best_round, ...), which are kept as they are.

    rows = trajectories_to_cold_start(read_jsonl("runs.jsonl"))     # this project's own episodes
    write_cold_start(rows, "data/sft/ours.parquet")
    data = load_cold_start(["data/sft/drkernel.parquet", "data/sft/ours.parquet"], min_speedup=1.0)
    run = run_sft("Qwen/Qwen3-8B", data, "out/sft", lora={"r": 16, "alpha": 32}, epochs=2)

Loss on assistant tokens only (TRL's assistant_only_loss): the chat template marks each assistant turn
with {% generation %} ... {% endgeneration %}, and only tokens inside those spans are trained. The
convention here (drk_lab.tiny_model's template; TRL's own training templates for Qwen add the newline
after the role header and after the end token as well): an assistant turn's content and the end-of-turn
token that closes it (<|im_end|>), so the model learns to stop; system and user turns, the role headers
and the newline between turns get label -100. A tokenizer whose template has no markers gets TRL's
training variant of it when TRL knows the template (Qwen2.5/3, Llama 3, Gemma, ...); for any other,
pass `chat_template` with markers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

ROLES = ("system", "user", "assistant")
DATA_SUFFIXES = (".jsonl", ".json", ".parquet")


class ColdStartError(ValueError):
    """A cold-start file or row that cannot be used for SFT."""


# -- reading and writing -------------------------------------------------------------------------
def _data_files(path_or_paths) -> list[Path]:
    paths = [path_or_paths] if isinstance(path_or_paths, (str, os.PathLike)) else list(path_or_paths)
    files = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in DATA_SUFFIXES)
            if not found:
                raise ColdStartError(f"{p}: no {', '.join(DATA_SUFFIXES)} files in this folder")
            files.extend(found)
        elif not p.is_file():
            raise ColdStartError(f"{p}: no such file or folder")
        elif p.suffix not in DATA_SUFFIXES:
            raise ColdStartError(f"{p}: unknown format {p.suffix!r}; expected one of {', '.join(DATA_SUFFIXES)}")
        else:
            files.append(p)
    if not files:
        raise ColdStartError("no cold-start files given")
    return files


def _read_rows_json(path: Path) -> tuple[list[dict], list[str]]:
    """The rows of a JSONL file (or a .json file holding one array of rows) and where each came from."""
    if path.suffix == ".json" and path.read_text().lstrip().startswith("["):
        try:
            rows = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ColdStartError(f"{path}: not JSON ({e})") from None
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                raise ColdStartError(f"{path}: row {index}: a row must be a JSON object, got {type(row).__name__}")
        return rows, [f"row {i}" for i in range(len(rows))]
    rows, lines = [], []
    with path.open() as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ColdStartError(f"{path}: line {line_no}: not JSON ({e})") from None
            if not isinstance(row, dict):
                raise ColdStartError(f"{path}: line {line_no}: a row must be a JSON object, got {type(row).__name__}")
            rows.append(row)
            lines.append(f"line {line_no}")
    return rows, lines


def _read_checked_table(path: Path):
    """A file's rows as a pyarrow table, each row's messages checked (an error names "line N" for JSONL,
    from 1, or "row N" for parquet and JSON arrays, from 0)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        table = pq.read_table(path)
        if "messages" not in table.column_names:
            raise ColdStartError(f"{path}: no 'messages' column (columns: {', '.join(table.column_names)})")
        for index, messages in enumerate(table.column("messages").to_pylist()):
            check_messages(messages, f"{path}: row {index}")
        return table
    rows, places = _read_rows_json(path)
    if not rows:
        raise ColdStartError(f"{path}: no rows")
    for row, place in zip(rows, places):
        if "messages" not in row:
            raise ColdStartError(f"{path}: {place}: no 'messages' (keys: {', '.join(row)})")
        check_messages(row["messages"], f"{path}: {place}")
    try:
        return pa.Table.from_pylist(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise ColdStartError(f"{path}: rows do not share one schema ({e})") from None


def check_messages(messages, where: str = "row") -> None:
    """Raise ColdStartError (naming `where`) unless `messages` is a trainable conversation."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ColdStartError(f"{where}: 'messages' must be a non-empty list of {{role, content}}, got {messages!r:.80}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ColdStartError(f"{where}: message {i} must be a dict with 'role' and 'content', got {m!r:.80}")
        if m.get("content") is None:  # a missing key reads as None once rows share an Arrow schema
            raise ColdStartError(f"{where}: message {i} ({m.get('role')}) has no content")
        if m.get("role") not in ROLES:
            raise ColdStartError(f"{where}: message {i} has role {m.get('role')!r}; expected one of {', '.join(ROLES)}")
        if not isinstance(m["content"], str):
            raise ColdStartError(f"{where}: message {i} ({m['role']}) has content of type "
                                 f"{type(m['content']).__name__}, not str")
        if m["role"] == "system" and i != 0:
            raise ColdStartError(f"{where}: message {i} is a system message; only the first message may be one")
    if messages[-1]["role"] != "assistant":
        raise ColdStartError(f"{where}: the last message is a {messages[-1]['role']} message; "
                             "a trajectory must end with an assistant turn")


def load_cold_start(path_or_paths, min_speedup: float | None = None, max_rows: int | None = None):
    """A datasets.Dataset of cold-start rows from JSONL (.jsonl, or .json: one object a line or one array of
    them) or parquet files, or folders of them (all such files below, in name order), concatenated in
    the order given.

    Every row's `messages` is checked (check_messages); the error names the file and row (1-based
    line for JSONL, 0-based row index otherwise). Other columns are kept. min_speedup keeps rows
    whose final_speedup is at least that (rows without one are dropped); max_rows keeps the first rows.
    """
    import pyarrow as pa
    from datasets import Dataset
    from datasets.table import InMemoryTable

    tables = [_read_checked_table(path) for path in _data_files(path_or_paths)]
    try:
        table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise ColdStartError(f"the files' columns do not match ({e})") from None
    data = Dataset(InMemoryTable(table))
    if min_speedup is not None:
        if "final_speedup" not in data.column_names:
            raise ColdStartError("min_speedup needs a 'final_speedup' column")
        data = data.filter(lambda s: s is not None and s >= min_speedup, input_columns="final_speedup")
    if max_rows is not None:
        data = data.select(range(min(max_rows, len(data))))
    return data


def write_cold_start(rows: list[dict], path: str | os.PathLike) -> Path:
    """Write cold-start rows to JSONL (.jsonl/.json) or parquet (.parquet), by suffix; returns the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if path.suffix not in DATA_SUFFIXES:
        raise ColdStartError(f"{path}: unknown format {path.suffix!r}; expected one of {', '.join(DATA_SUFFIXES)}")
    for index, row in enumerate(rows):
        check_messages(row.get("messages"), f"row {index}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        with path.open("w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    return path


# -- this project's trajectories -----------------------------------------------------------------
def _speedup(result) -> float | None:
    if not result.ok:
        return 0.0
    return float(result.speedup) if result.speedup is not None else None


def trajectory_messages(traj, upto: int | None = None) -> list[dict]:
    """The whole conversation of a Trajectory: [system], the first prompt, then each turn's reply and
    (except after the last turn kept) its feedback. upto: keep turns 0..upto only. Every turn sees
    all earlier turns here, even where the episode's own context held fewer (rolling window, STTS)."""
    turns = traj.turns if upto is None else traj.turns[: upto + 1]
    messages = [{"role": "system", "content": traj.system_prompt}] if traj.system_prompt else []
    messages.append({"role": "user", "content": traj.prompt})
    for i, turn in enumerate(turns):
        messages.append({"role": "assistant", "content": turn.response})
        if i < len(turns) - 1:
            messages.append({"role": "user", "content": turn.feedback})
    return messages


def trajectories_to_cold_start(trajs, start_uuid: int = 0, end_at_best: bool = False) -> list[dict]:
    """Cold-start rows (Dr. Kernel's layout) from drk_lab.agent.episodes.Trajectory records.

    Columns: messages (trajectory_messages), uuid (start_uuid, start_uuid + 1, ...), entry_point
    ("Model", the reference class, as in Dr. Kernel's set), task (the task's name), final_speedup
    (speedup of the last kept turn: 0.0 when that turn failed, was wrong or hacked, None when correct
    but untimed), best_speedup (the highest such speedup over the kept turns), best_round (1-based
    index of the highest-reward turn, Trajectory.best), num_rounds, sample, reward_fn, rewards.
    end_at_best: end each conversation at its best turn (the turns after it are dropped).
    Trajectories without turns are skipped.
    """
    rows = []
    for traj in trajs:
        if not traj.turns:
            continue
        best = traj.best.index
        kept = traj.turns[: best + 1] if end_at_best else traj.turns
        speedups = [s for s in (_speedup(t.result) for t in kept) if s is not None]
        rows.append({
            "messages": trajectory_messages(traj, upto=best if end_at_best else None),
            "uuid": start_uuid + len(rows),
            "entry_point": "Model",
            "task": traj.task,
            "final_speedup": _speedup(kept[-1].result),
            "best_speedup": max(speedups) if speedups else None,
            "best_round": best + 1,
            "num_rounds": len(kept),
            "sample": traj.sample,
            "reward_fn": traj.reward_fn,
            "rewards": [float(t.reward) for t in kept],
        })
    return rows


def demonstrations(tasks, plain_dir=None, device: str | None = None, **eval_kwargs) -> list:
    """Two-turn demonstration trajectories, built and evaluated here: turn 1 a plain, slow kernel
    (data/plain), turn 2 the project's solution with the first turn's feedback before it. Tasks
    without both are skipped. A small cold-start set that runs anywhere; tasks may be resized."""
    from drk_lab.agent.episodes import run_episode
    from drk_lab.harness.task import DATA_DIR, TaskError, builtin_solution
    from drk_lab.policies.scripted import ScriptedPolicy

    plain_dir = Path(plain_dir or DATA_DIR / "plain")
    trajectories = []
    for task in tasks:
        plain = plain_dir / f"level{task.level}" / f"{task.name}.py"
        try:
            solution = builtin_solution(task)
        except TaskError:
            continue
        if not plain.is_file():
            continue
        answers = [f"```python\n{code}```" for code in (plain.read_text(), solution)]
        trajectories.append(run_episode(task, ScriptedPolicy(answers=answers), max_turns=2, device=device,
                                        **eval_kwargs))
    return trajectories


def cold_start_data(data: str, tasks=(), device: str | None = None):
    """A notebook's data parameter as a Dataset: "demonstrations" builds the two-turn demonstrations of
    `tasks` here; anything else is a cold-start file or folder (relative paths from the repository)."""
    from datasets import Dataset

    from drk_lab.harness.task import in_repo

    if data == "demonstrations":
        return Dataset.from_list(trajectories_to_cold_start(demonstrations(tasks, device=device)))
    return load_cold_start(in_repo(data))


# -- training ------------------------------------------------------------------------------------
@dataclass
class SFTRun:
    trainer: object  # the trl.SFTTrainer (its model, state.log_history, train_dataset)
    metrics: dict  # what trainer.train() reported (train_loss, train_runtime, ...)
    output_dir: Path
    finished: bool = True  # False: stopped by time_limit_s, its checkpoint in output_dir for resume=True
    resumed: bool = False  # started from such a checkpoint


def lora_config(lora: dict):
    """A peft LoraConfig for a causal LM from a short dict: r (16), alpha (2*r), dropout (0.0),
    target_modules ("all-linear"); other keys go to LoraConfig as they are."""
    from peft import LoraConfig

    options = dict(lora)
    r = options.pop("r", 16)
    alpha = options.pop("alpha", options.pop("lora_alpha", 2 * r))
    dropout = options.pop("dropout", options.pop("lora_dropout", 0.0))
    target = options.pop("target_modules", "all-linear")
    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target,
                      task_type="CAUSAL_LM", **options)


def has_generation_markers(chat_template) -> bool:
    if isinstance(chat_template, dict):  # named variants
        chat_template = chat_template.get("default", "")
    return bool(chat_template) and re.search(r"\{%-?\s*generation\s*-?%\}", chat_template) is not None


def _check_template(tokenizer) -> None:
    """TRL (1.x) swaps in a marked training variant of the templates it knows; older releases do not."""
    if has_generation_markers(tokenizer.chat_template):
        return
    try:
        from trl.chat_template_utils import get_training_chat_template  # noqa: F401
    except ImportError:
        raise ColdStartError("the tokenizer's chat template has no {% generation %} markers, which assistant-only "
                             "loss needs, and this TRL cannot add them: pass chat_template= with markers") from None


def _check_untrained_messages(trainer, dataset) -> None:
    """An assistant message marked "train": False (a repair row's planted bug, drk_lab.data.bugs) must get no
    loss, which only a chat template that leaves it out of its {% generation %} block gives. Checked on the
    first such row among the trainer's own rows (TRL drops those truncation leaves untrained, shifting positions)."""
    rows = trainer.train_dataset  # TRL 1.x keeps the messages; without them, positions hold only if none was dropped
    messages_of = rows["messages"] if "messages" in rows.column_names else dataset["messages"] if len(rows) == len(dataset) else []
    marked = next((i for i, ms in enumerate(messages_of) if any(m.get("train") is False for m in ms)), None)
    if marked is None:
        return
    labels = trainer.data_collator([rows[marked]])["labels"][0].tolist()
    trained = trainer.processing_class.decode([t for t in labels if t != -100])
    untrained = next(m["content"] for m in messages_of[marked] if m.get("train") is False)
    if untrained.strip()[:200] in trained:
        raise ColdStartError('the chat template trains on assistant messages marked "train": false (planted bugs): '
                             "leave them out of its {% generation %} block, as drk_lab.tiny_model.CHAT_TEMPLATE does")


def run_sft(model, dataset, output_dir: str | os.PathLike, *, tokenizer=None, lora: dict | None = None,
            lr: float = 1e-5, epochs: float = 1.0, max_steps: int = -1, batch_size: int = 1,
            grad_accum: int = 1, max_length: int | None = 16384, report_to="none", seed: int = 0,
            chat_template: str | None = None, bf16: bool | None = None, save: bool = True,
            train: bool = True, time_limit_s: float | None = None, resume: bool = False,
            **extra_config) -> SFTRun:
    """Supervised fine-tuning with trl.SFTTrainer, loss on assistant tokens only.

    model: a path or hub id, or a loaded PreTrainedModel; tokenizer: defaults to the model's.
    dataset: a datasets.Dataset with a `messages` column (load_cold_start). lora: None for full
    fine-tuning, or a dict for lora_config. max_length truncates each conversation (keeping its
    start). bf16: None means on a CUDA GPU that supports it. report_to: "none", "wandb" (offline unless
    WANDB_MODE says otherwise), "tensorboard", ... extra_config: any other SFTConfig field
    (gradient_checkpointing, warmup_ratio, lr_scheduler_type, packing, ...), overriding the defaults
    here. save: write the final model (the adapter alone with LoRA) and tokenizer to output_dir.
    train=False builds the trainer without training (to inspect its data); metrics are then empty.
    time_limit_s: stop before a step that would pass this many seconds, saving a checkpoint (model,
    optimizer, schedule, data position, RNG) in output_dir and nothing else (finished=False); a later
    call with resume=True goes on from it, and only the finished run saves its model there.
    """
    import torch
    from transformers import AutoTokenizer
    from transformers.trainer_utils import get_last_checkpoint
    from trl import SFTConfig, SFTTrainer

    from drk_lab.rl.call_limit import stop_before_limit

    output_dir = Path(output_dir)
    if tokenizer is None:
        source = model if isinstance(model, (str, os.PathLike)) else model.config.name_or_path
        tokenizer = AutoTokenizer.from_pretrained(str(source))
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    _check_template(tokenizer)
    targets = [report_to] if isinstance(report_to, str) else list(report_to)
    if "wandb" in targets or "all" in targets:
        os.environ.setdefault("WANDB_MODE", "offline")
    if "messages" not in dataset.column_names:
        raise ColdStartError(f"the dataset has no 'messages' column (columns: {', '.join(dataset.column_names)})")
    cuda = torch.cuda.is_available()
    settings = dict(
        output_dir=str(output_dir), learning_rate=lr, num_train_epochs=epochs, max_steps=max_steps,
        per_device_train_batch_size=batch_size, gradient_accumulation_steps=grad_accum,
        max_length=max_length, assistant_only_loss=True, report_to=report_to, seed=seed,
        bf16=(cuda and torch.cuda.is_bf16_supported()) if bf16 is None else bf16, save_strategy="no",
        logging_steps=1, dataloader_pin_memory=cuda,
    )
    settings.update(extra_config)
    trainer = SFTTrainer(
        model=str(model) if isinstance(model, os.PathLike) else model,
        args=SFTConfig(**settings),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(lora) if lora is not None else None,
        callbacks=[stop_before_limit(time_limit_s)] if time_limit_s is not None else None,
    )
    _check_untrained_messages(trainer, dataset)
    if not train:
        return SFTRun(trainer=trainer, metrics={}, output_dir=output_dir)
    checkpoint = get_last_checkpoint(str(output_dir)) if resume and output_dir.is_dir() else None
    metrics = dict(trainer.train(resume_from_checkpoint=checkpoint).metrics)
    finished = trainer.state.global_step >= trainer.state.max_steps
    if finished:
        for old in output_dir.glob("checkpoint-*"):  # a finished model folder holds the model alone
            shutil.rmtree(old)
        if save:
            trainer.save_model(str(output_dir))
    return SFTRun(trainer=trainer, metrics=metrics, output_dir=output_dir, finished=finished,
                  resumed=checkpoint is not None)
