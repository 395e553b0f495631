"""The mini run's model: a byte-level BPE trained on the SFT conversations and RL prompts, a small
Qwen3-style model built from scratch, and what is measured on it besides the evaluations: how often it
reproduces the teacher's replies and drills teacher-forced (does it read the task?), and how fast the
static-cache sampler generates.

    tokenizer = build_tokenizer(settings.model, sft_texts, prompt_texts)
    model_dir = build_model(tokenizer, settings.model, "out/init", seed=settings.seed)   # ~27M parameters
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from experiments.mini.settings import ModelSettings
from experiments.mini.texts import drill_chain_span, first_turn_texts, operator_drill


def build_tokenizer(settings: ModelSettings, sft_texts: list[str], prompt_texts: list[str]):
    """A byte-level BPE with the ChatML template (drk_lab.rl.tiny_model), trained on the SFT conversations
    and RL prompts."""
    from drk_lab.rl.tiny_model import CORPUS, train_tokenizer

    tokenizer = train_tokenizer(settings.vocab_size, corpus=CORPUS + list(sft_texts) + list(prompt_texts))
    tokenizer.model_max_length = settings.max_positions
    return tokenizer


def build_model(tokenizer, settings: ModelSettings, path: str | Path, seed: int = 0) -> Path:
    """A randomly initialised Qwen3ForCausalLM of the settings' size (float32), saved with the tokenizer."""
    from transformers import GenerationConfig, Qwen3ForCausalLM

    from drk_lab.rl.tiny_model import tiny_config

    config = tiny_config(tokenizer, settings.hidden_size, settings.num_layers, settings.num_heads,
                         num_kv_heads=settings.num_kv_heads, head_dim=settings.head_dim,
                         intermediate_size=settings.intermediate_size, max_positions=settings.max_positions)
    torch.manual_seed(seed)
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
