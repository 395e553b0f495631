"""The SFT cold start: supervised fine-tuning on multi-turn chat trajectories before RL.

    data = load_cold_start("data/sft/sft.parquet")                  # drk_lab.data.cold_start: the layout
    run = run_sft("Qwen/Qwen3-8B", data, "out/sft", lora={"r": 16, "alpha": 32}, epochs=2)

Loss on assistant tokens only (TRL's assistant_only_loss): the chat template marks each assistant turn
with {% generation %} ... {% endgeneration %}, and only tokens inside those spans are trained. The
convention here (drk_lab.rl.tiny_model's template; TRL's own training templates for Qwen add the newline
after the role header and after the end token as well): an assistant turn's content and the end-of-turn
token that closes it (<|im_end|>), so the model learns to stop; system and user turns, the role headers
and the newline between turns get label -100. A tokenizer whose template has no markers gets TRL's
training variant of it when TRL knows the template (Qwen2.5/3, Llama 3, Gemma, ...); for any other,
pass `chat_template` with markers.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from drk_lab.data.cold_start import ColdStartError


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
                             "leave them out of its {% generation %} block, as drk_lab.rl.tiny_model.CHAT_TEMPLATE does")


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
