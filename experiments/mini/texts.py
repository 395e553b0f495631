"""The mini run's training texts: the SFT conversations, the teacher's first replies to more tasks, and the
operator drills (a task's forward lines beside the kernel's lines for the same operators).

    texts = conversation_texts(sft, tokenizer) + first_turn_texts(train_specs, tokenizer)
    texts += [operator_drill(spec) for spec in drill_specs]                  # the chain in a kernel of its own
    texts += [operator_drill(spec, epilogue=True) for spec in headed_specs]  # ... in the GEMM's epilogue
"""

from __future__ import annotations

import json
from pathlib import Path


def write_json(path: Path, value) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1, default=str))
    return path


def conversation_texts(dataset, tokenizer=None) -> list[str]:
    """Each SFT row as one text: its messages through the chat template (or joined, without a tokenizer)."""
    return ["\n".join(m["content"] for m in messages) if tokenizer is None
            else tokenizer.apply_chat_template(list(messages), tokenize=False) for messages in dataset["messages"]]


def without_planted_bugs(dataset):
    """The rows with no planted bug's reply (drk_lab.data.bugs): pretraining learns every token of a text, and
    a repair row's buggy reply must never be a target (SFT masks it; pretraining cannot)."""
    return dataset.filter(lambda messages: all(m.get("train") is not False for m in messages), input_columns="messages")


def reply_token_lengths(dataset, tokenizer) -> list[int]:
    """The tokens of every assistant reply in the SFT set: a sampler whose max_new_tokens is under most
    of them cuts replies off before their code block closes, and RL then sees almost no reward."""
    replies = [m["content"] for messages in dataset["messages"] for m in messages if m["role"] == "assistant"]
    return [len(ids) for ids in tokenizer(replies, add_special_tokens=False)["input_ids"]]


def first_turn_texts(specs, tokenizer) -> list[str]:
    """The programmatic teacher's first reply to each task spec after the task's first prompt, as chat
    text: the same pair the SFT set's first turns hold, for tasks the SFT set does not cover. These replies
    are not evaluated one by one; the teacher's turns were correct in 3,059 of the 3,060 evaluated on the
    H200 for the SFT set (data/README.md)."""
    from drk_lab.agent.prompts import initial_prompt_for_source
    from drk_lab.data.spec import render_source
    from drk_lab.data.teacher import answer

    return [tokenizer.apply_chat_template([{"role": "user", "content": initial_prompt_for_source(render_source(spec))},
                                           {"role": "assistant", "content": answer(spec, 1)}], tokenize=False)
            for spec in specs]


def fresh_train_specs(n: int, rl_rows, heldout_fraction: float | None, split_seed: int, seed: int,
                      with_head: bool = False) -> list:
    """`n` task specs sampled afresh (data.generator.sample_specs) that are none of the RL prompt set's
    `rl_rows` ((spec, task, row), both splits) and whose operator combination is train-side for that set
    (data.splits.is_train_combination with its heldout_fraction and seed): more combinations for
    pretraining, never a held-out one. `with_head`: only tasks that start with a linear or a conv."""
    from drk_lab.data.generator import sample_specs
    from drk_lab.data.splits import combinations_by_split, is_train_combination

    known = combinations_by_split([row for _, _, row in rl_rows])
    taken = {spec.key for spec, _, _ in rl_rows}
    return sample_specs(n, seed, keep=lambda spec: spec.key not in taken and (spec.head or not with_head)
                        and is_train_combination(spec.combination, known, heldout_fraction, split_seed))


def operator_drill(spec, epilogue: bool = False) -> str:
    """The two places a task's operators appear, as the prompt and the teacher's reply write them: the
    reference's forward lines, then the chain kernel's load, pointwise lines and store. A few dozen tokens in
    which the operator lines are a large share, where in a whole reply they are a few of 1,300.

    `epilogue` (a task with a linear or conv head): the kernel's lines are instead those of the GEMM or conv
    tile's epilogue, where the teacher's second reply fuses the chain (kernels_gemm.epilogue_lines). Its
    first reply writes the chain in a kernel of its own, the form plain drills teach."""
    from drk_lab.data.kernels_gemm import epilogue_lines
    from drk_lab.data.kernels_rows import OUT, chain_lines, flat_bias_load
    from drk_lab.data.spec import forward_lines

    if epilogue:
        kernel = [*epilogue_lines(spec), f"tl.store(y_ptrs, v.to({OUT}), mask=mask)"]
    else:
        kernel = ["h = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)",
                  *chain_lines(spec, flat_bias_load), f"tl.store(y_ptr + offs, v.to({OUT}), mask=mask)"]
    return "".join(f"        {line}\n" for line in forward_lines(spec)) + "".join(f"    {line}\n" for line in kernel)


def drill_chain_span(drill: str) -> tuple[int, int]:
    """Where a drill's chain lies, in characters: from the end of the kernel's `v = h` (the line ends
    after it) to the start of its store line."""
    return drill.index("    v = h\n") + len("    v = h"), drill.index("    tl.store")
