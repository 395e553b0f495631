"""Mini Dr. Kernel: the pieces of the whole method at small scale (bench/mini_drkernel.py runs them).

    settings = MiniSettings()                                   # the H200 sizes; MiniSettings.smoke() for the CPU
    tokenizer = build_tokenizer(settings, sft_texts, prompt_texts)
    model_dir = build_model(tokenizer, settings, "out/init")    # a Qwen3-style model of ~27M parameters
    texts = conversation_texts(sft, tokenizer) + first_turn_texts(train_specs, tokenizer)
    texts += [operator_drill(spec) for spec in drill_specs]      # the operators, prompt beside kernel
    texts += [operator_drill(spec, epilogue=True) for spec in headed_specs]  # ... beside the GEMM's epilogue
    pretrain(model_dir, packed_rows(texts, tokenizer, settings.pretrain_length), "out/pretrain", ...)  # rl/pretrain.py

(mini_report.py summarises the evaluations and reads a run back for notebook 06.) What it is: a
byte-level BPE trained on the SFT trajectories and RL prompts (nothing downloaded), a small Qwen3-style
model trained from scratch, an optional short next-token pretraining on the SFT conversations, then the
project's own SFT (rl/sft.py), multi-turn RL (rl/trainer.py with the static-cache sampler,
rl/sampler.py) and evaluation (agent/episodes.py). A model this small trained on a few hundred
trajectories mostly copies the teacher; the point is the whole pipeline measured honestly.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch


@dataclass(frozen=True)
class MiniSettings:
    # tokenizer and model (a Qwen3-style model trained from scratch)
    vocab_size: int = 8192
    hidden_size: int = 512
    num_layers: int = 8
    num_heads: int = 8
    num_kv_heads: int = 4
    head_dim: int = 64
    intermediate_size: int = 1536
    max_positions: int = 8192
    tokenizer_prompts: int = 2000  # RL prompts (train split) added to the tokenizer's corpus
    # next-token pretraining on the SFT conversations and the teacher's first replies to other train-split
    # tasks (0 steps: skipped)
    # 66M tokens. Rows are drawn at random with replacement: 2,000 steps of 8 see about 69% of the 13,577
    # packed rows at least once, 1,000 steps 45%. On the H200, 2,000 steps took the held-out teacher replies
    # the model reproduces exactly (reads_the_task) from 27% to 53% (209 s of pretraining against 128 s)
    pretrain_steps: int = 2000
    pretrain_first_turns: int = 5000  # at most this many train-split tasks outside the SFT set (0: none)
    # and to tasks sampled afresh (not validated) whose operator combinations are train-side: the RL set's
    # 1,159 train combinations alone let the model memorise texts instead of reading the task
    pretrain_new_tasks: int = 12000
    # short drills, one per fresh train-side task: the forward's lines beside the kernel's lines for the same
    # operators. In whole replies the few tokens that name an operator are drowned by the template, and the
    # fourth H200 run's model wrote the task's chain in 2 of 94 replies (chance), though its loss was 0.015
    pretrain_drills: int = 70_000
    # drills in the form of the GEMM or conv epilogue (operator_drill's `epilogue`), from fresh train-side
    # tasks with a head; with the plain ones about 13M tokens, a fifth of the packed rows. Plain drills
    # teach the chain in a kernel of its own, the first reply's form; the second reply fuses it into the
    # epilogue, which only the SFT set's conversations showed (about 700, of the combinations they cover),
    # and second replies wrote a wrong chain twice as often as first ones. A drill model trained on plain
    # drills alone wrote 0-1 of 96 held-out chains in the epilogue form (86-95 of 100 plain); with half its
    # drills in that form, 83-84 of 96 (86-88 plain), two seeds each (bench/drill_learnability.py)
    pretrain_epilogue_drills: int = 30_000
    pretrain_batch: int = 8
    pretrain_length: int = 4096  # a whole first prompt and reply (<= 3,300 tokens) fit in one row
    pretrain_lr: float = 1e-3
    # stop (saving the state) before a step that would pass this many seconds of the call; the next call
    # resumes (None: no limit). bench/mini_device.sh sets it to what is left of the call, as for RL and SFT
    pretrain_time_limit_s: float | None = None
    # cold-start SFT (rl/sft.py on TRL, loss on assistant tokens)
    # 1 epoch over the 1,020 teacher trajectories and 330 repairs (about 170 steps): pretraining already saw
    # the trajectories; 2 epochs of the 1,020 alone took 153 s on the H200
    sft_epochs: float = 1.0
    sft_batch: int = 8
    sft_lr: float = 3e-4
    sft_max_length: int = 8192
    sft_max_steps: int = -1  # -1: sft_epochs decide
    # at most this many rows of the SFT and repair sets, drawn at random (None: all). TRL tokenizes every row
    # before the first step, 20 s on a CPU for the 1,350: the smoke's two steps need a few
    sft_rows: int | None = None
    sft_time_limit_s: float | None = None  # as pretrain_time_limit_s: TRL's checkpoint, resumed by the next call
    # multi-turn RL (rl/trainer.py)
    rl_steps: int = 50  # a ceiling: rl_budget_s decides
    # seconds of RL steps per RL run, across calls (the ablation gets the same): two runs of 300 s fit the
    # 25-minute plan; with no ablation, 540 (docs/mini_drkernel.md)
    rl_budget_s: float | None = 300.0
    # 8 prompts x 8 samples took 40 s a step on the H200 (sixth run), 23 s of it generating 64 rows at
    # 6,200 tokens/s, launch-bound: 16 prompts double the rollouts for a gradient half as noisy at little
    # more generation time
    prompts_per_step: int = 16
    # None: RL draws its prompts from the whole train split; N: only from the split's first N in the
    # evaluation's order, so the same prompts return every step (their rewards form a learning curve free of
    # which prompts were drawn) and, with N <= eval_seen, the seen evaluation holds every trained prompt
    rl_prompts: int | None = None
    samples: int = 8
    turns: int = 2
    # with the tokenizer made here the teacher's first replies are 1,270 tokens at the median, 1,578 at
    # the 90th percentile and 1,955 at most; at 512 tokens 86% of them would be cut off
    max_new_tokens: int = 1792
    max_context_tokens: int = 6144  # first prompt (<= 967) + reply + feedback (<= 512) + reply
    feedback_tokens: int = 512
    # at 5e-5 (2-9% of rollouts correct) 4 steps doubled the entropy and made 40-45% of held-out replies
    # syntax errors; at 1e-5 4 steps moved the policy by a KL of 1e-6 per token; at 1e-4, 4 updates a step,
    # held-out fell 31 -> 14; at 2e-5 with 8 smaller updates a step (a KL of 3e-5 to 3e-4 per token per step)
    # the reward on 16 fixed prompts rose 0.39 -> 0.73 in 7 steps (ninth run)
    rl_lr: float = 2e-5
    rl_kl_coef: float = 0.0  # beta of RL's KL penalty to the SFT model, 0: none (docs/mini_drkernel.md: why try it)
    # of the rollouts (the trainer scores the same tempered model): at 1, with the evaluation at 0.7, 17 steps
    # raised the rollouts' correct share from 64% to 71% and held-out correctness not at all (2026-12-06)
    rl_temperature: float = 1.0
    micro_batch_size: int = 16
    mini_batches: int = 8
    advantage: str = "trloo"  # or "grpo" (the ablation), "shuffled", "shuffled_in_group" (controls)
    prs: bool = True
    mrs: bool = True
    rl_time_limit_s: float = 330.0  # this call's RL phase stops (and checkpoints) before a step that would pass it
    rl_snapshot_step: int = 0  # also export the model after this RL step to rl_<tag>_step<N>/model (0: none)
    rl_probe_every: int = 0  # held-out probes at the arm's start and every N steps, each paired with its first (0: none)
    rl_probe_tasks: int = 256  # the evaluation's first held-out tasks; a probe costs about one RL step
    # the sampler's one-token steps replayed as a CUDA graph (rl/sampler.py), in RL and the evaluations: on
    # the H200 35,800 against 28,700 tokens/s (genbench, 256 rows), log-probs within 2e-6 of the trainer's;
    # on a CPU the same fixed-shape step runs without a graph
    cuda_graph: bool = True
    # evaluation (held-out split, built-in suite, STTS)
    eval_heldout: int = 64  # held-out tasks (operator combinations never seen in RL training)
    eval_seen: int = 32  # train-split tasks, whose teacher replies pretraining saw: the gap to held-out is generalisation
    eval_builtin_levels: tuple[int, ...] = (1, 2)
    eval_builtin_max: int | None = None  # at most this many built-in tasks (None: all of those levels)
    eval_turns: int = 2
    eval_temperature: float = 0.7
    # episodes per task (not STTS), each a draw of its own: with one, two checkpoints' correct counts on 64
    # tasks differ by chance by several tasks; more narrow that at the cost of rows and evaluations
    eval_samples: int = 1
    stts_tasks: int = 16
    stts: tuple[int, int, int] = (3, 2, 2)  # max_user_turns, remain_turns, iterations: 4 turns
    correctness_trials: int = 2
    timing_trials: int = 10
    genbench_rows: int = 256
    genbench_tokens: int = 512
    seed: int = 0
    rl_seed: int = 0  # RL's sampling and prompt order; another from the same SFT model: rl_<advantage>_seed<N>

    @classmethod
    def smoke(cls, **changes) -> MiniSettings:
        """Tiny sizes for a CPU run of every phase in well under a minute."""
        small = dict(vocab_size=2048, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                     intermediate_size=128, max_positions=4096, tokenizer_prompts=50, pretrain_steps=2,
                     pretrain_first_turns=20, pretrain_new_tasks=20, pretrain_drills=20,
                     pretrain_epilogue_drills=10, pretrain_batch=2,
                     pretrain_length=128, sft_epochs=1.0, sft_batch=1, sft_max_length=2048, sft_max_steps=2, sft_rows=16,
                     rl_steps=1, prompts_per_step=2, samples=2, turns=2, max_new_tokens=24, max_context_tokens=4096,
                     micro_batch_size=4, mini_batches=1, rl_time_limit_s=600.0, rl_probe_tasks=2, eval_heldout=2,
                     eval_seen=1, eval_builtin_levels=(1,), eval_builtin_max=2, eval_samples=2, stts_tasks=1, stts=(2, 1, 2),
                     genbench_rows=8, genbench_tokens=16)
        return replace(cls(**small), **changes)

    def to_dict(self) -> dict:
        return asdict(self)


def write_json(path: Path, value) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1, default=str))
    return path


# -- data ----------------------------------------------------------------------------------------
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


# -- tokenizer and model ---------------------------------------------------------------------------
def build_tokenizer(settings: MiniSettings, sft_texts: list[str], prompt_texts: list[str]):
    """A byte-level BPE with the ChatML template (drk_lab.tiny_model), trained on the SFT conversations
    and RL prompts."""
    from drk_lab.tiny_model import CORPUS, train_tokenizer

    tokenizer = train_tokenizer(settings.vocab_size, corpus=CORPUS + list(sft_texts) + list(prompt_texts))
    tokenizer.model_max_length = settings.max_positions
    return tokenizer


def build_model(tokenizer, settings: MiniSettings, path: str | Path) -> Path:
    """A randomly initialised Qwen3ForCausalLM of the settings' size (float32), saved with the tokenizer."""
    from transformers import GenerationConfig, Qwen3ForCausalLM

    from drk_lab.tiny_model import tiny_config

    config = tiny_config(tokenizer, settings.hidden_size, settings.num_layers, settings.num_heads,
                         num_kv_heads=settings.num_kv_heads, head_dim=settings.head_dim,
                         intermediate_size=settings.intermediate_size, max_positions=settings.max_positions)
    torch.manual_seed(settings.seed)
    model = Qwen3ForCausalLM(config).float()
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id, do_sample=True)
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


# -- does the model read the task? ---------------------------------------------------------------
def teacher_forced_replies(model, tokenizer, specs) -> dict:
    """The teacher's first reply to each task spec, scored teacher-forced: at how many reply tokens the
    model's most likely next token is not the teacher's. A reply with none would come out exactly under
    greedy decoding. The few tokens that name an operator are a tiny share of a 1,300-token reply, so the
    training loss hides whether the model reads them from the prompt; the gap between seen and held-out
    tasks here shows it, on a scale finer than correct-or-not."""
    from drk_lab.agent.prompts import initial_prompt_for_source
    from drk_lab.data.spec import render_source

    spans = []
    for text, spec in zip(first_turn_texts(specs, tokenizer), specs):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": initial_prompt_for_source(render_source(spec))}],
                                               tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        spans.append((ids, len(tokenizer(prompt, add_special_tokens=False)["input_ids"]), len(ids)))
    return {"replies": len(spans), **wrong_guesses(model, spans)}


def teacher_forced_drills(model, tokenizer, specs, epilogue: bool = False) -> dict:
    """The operator drills of `specs` (operator_drill), scored teacher-forced on their chain alone: the
    tokens after the kernel's `v = h` up to its store. A drill with no wrong guess there would be written
    exactly under greedy decoding. Plain drills ask for the chain in a kernel of its own (the first reply's
    form), `epilogue` ones in the GEMM or conv tile's epilogue (the second reply's): whether the model
    reads the forward's operators into each form, in short texts free of the rest of a reply."""
    spans = []
    for spec in specs:
        drill = operator_drill(spec, epilogue)
        start, end = drill_chain_span(drill)
        encoded = tokenizer(drill, add_special_tokens=False, return_offsets_mapping=True)
        chain = [i for i, (first, _) in enumerate(encoded["offset_mapping"]) if start <= first < end]
        spans.append((encoded["input_ids"], chain[0], chain[-1] + 1))
    return {"drills": len(spans), **wrong_guesses(model, spans)}


@torch.no_grad()
def wrong_guesses(model, spans) -> dict:
    """For each (token ids, start, end): at how many of the tokens start..end-1 the model's most likely
    next token, given the ones before, is not the text's; summed up as the share of texts with none
    (`exact_share`), the median count and the share of tokens guessed right."""
    device = next(model.parameters()).device
    errors, tokens = [], 0
    for ids, start, end in spans:
        logits = model(input_ids=torch.tensor([ids[:end]], device=device)).logits[0]
        guess = logits[start - 1: end - 1].argmax(-1).cpu()
        errors.append(int((guess != torch.tensor(ids[start:end])).sum()))
        tokens += end - start
    errors.sort()
    return {"exact_share": sum(e == 0 for e in errors) / max(len(errors), 1),
            "errors_median": errors[len(errors) // 2] if errors else None,
            "token_accuracy": 1 - sum(errors) / max(tokens, 1)}


# -- generation speed ------------------------------------------------------------------------------
def generation_speed(model, prompts: list[list[int]], max_new: int, *, pad_token_id: int, stop_token_ids: list[int],
                     repeats: int = 2, cuda_graph: bool = False) -> dict:
    """Generated tokens per second of the static-cache sampler at temperature 1 (the best of `repeats`
    runs after one warm-up), with no stop token so that every row makes max_new tokens."""
    from drk_lab.rl.sampler import sample_tokens

    def once():
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        started = time.perf_counter()
        tokens, *_ = sample_tokens(model, prompts, max_new, pad_token_id=pad_token_id, stop_token_ids=[-1],
                                   temperature=1.0, generator=torch.Generator(device=next(model.parameters()).device).manual_seed(0),
                                   cuda_graph=cuda_graph)
        return tokens.numel(), time.perf_counter() - started

    once()
    best = min((once() for _ in range(repeats)), key=lambda r: r[1])
    return {"rows": len(prompts), "prompt_tokens_max": max(map(len, prompts)), "new_tokens": max_new,
            "generated_tokens": best[0], "seconds": best[1], "tokens_per_s": best[0] / best[1]}


@torch.inference_mode()
def decode_step_cost(model, rows: int, length: int, steps: int = 16, profile: bool = False) -> dict:
    """Milliseconds per one-token step of the fixed-shape decode (rl/sampler.py's decode_step) for `rows`
    rows over a cache of `length` positions, all but the last `steps` already written: run eagerly and, on
    a GPU, replayed as a CUDA graph. `profile`: also the eager step's largest device-time operators
    (torch.profiler), to tell attention over the cache from the layers' fixed cost."""
    from drk_lab.rl.sampler import GraphedDecode, KVCache, decode_step

    device = next(model.parameters()).device
    cuda = device.type == "cuda"
    cache = KVCache(model.config, rows, length, device, next(model.parameters()).dtype)
    cache.keys.normal_()
    cache.values.normal_()
    first = length - steps
    cache.valid[:, :first] = True
    token = torch.zeros(rows, dtype=torch.long, device=device)
    positions = torch.full((rows, 1), first, dtype=torch.long, device=device)

    def timed(step) -> float:
        step(first)  # warm-up
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        for k in range(steps):
            step(first + k)
        if cuda:
            torch.cuda.synchronize()
        return 1000 * (time.perf_counter() - started) / steps

    def eager(at: int):
        return decode_step(model, token[:, None], positions, cache, torch.tensor([at], device=device))

    out = {"rows": rows, "cache_positions": length, "eager_ms": timed(eager)}
    if cuda:
        graphed = GraphedDecode(model, cache)
        out["graph_ms"] = timed(lambda at: graphed(token, positions, at))
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as run_profiler

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with run_profiler(activities=activities) as prof:
            for k in range(steps):
                eager(first + k)
            if cuda:
                torch.cuda.synchronize()
        key = "self_device_time_total" if cuda else "self_cpu_time_total"
        top = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0.0), reverse=True)
        out["top_ops"] = [{"op": e.key, "ms_per_step": getattr(e, key, 0.0) / 1000 / steps,
                           "calls_per_step": e.count / steps} for e in top[:12]]
    return out
