"""A policy that generates with a local Hugging Face transformers causal LM.

    policy = TransformersPolicy("Qwen/Qwen3-8B")            # or a model object plus its tokenizer
    completions = policy.generate(messages_batch, n=4, temperature=1.0, max_new_tokens=2048, seed=0)

Each conversation goes through the tokenizer's chat template (with the generation prompt); the prompts,
repeated n times, are left-padded and decoded in batches of `batch_size` rows by a plain sampling loop
over the model's key/value cache. The loop is written out here (not `model.generate`) so that the
distribution sampled from is exactly the one documented below and both log-probabilities come for free.

Log-probabilities, one per generated token (the end-of-sequence token included when it was sampled):
- `Completion.logprobs`: the raw model log-probability, log_softmax(logits) at temperature 1 with no
  top-p/top-k truncation. This is what an RL trainer recomputes (logp_train) and compares against.
- `Completion.extra["sampling_logprobs"]`: the log-probability under the distribution actually sampled
  from (logits / temperature, then top-k and top-p truncation, renormalised). With temperature 0
  (greedy) it is 0 for every token.
`token_ids` hold the generated tokens (end-of-sequence token included, padding not); `text` decodes them
without special tokens; `extra["prompt_token_ids"]` holds the prompt the model saw.
"""

from __future__ import annotations

import inspect

import torch

from drk_lab.policies.base import Completion

SAMPLING_KEYS = {"temperature", "top_p", "top_k", "max_new_tokens", "max_tokens", "seed"}


def check_sampling(sampling: dict) -> None:
    unknown = set(sampling) - SAMPLING_KEYS
    if unknown:
        raise ValueError(f"unknown sampling parameters {sorted(unknown)}; known: {sorted(SAMPLING_KEYS)}")


def cache_argument(model) -> str:
    """The name under which the model's forward takes the key/value cache: `cache` in newer transformers,
    `past_key_values` before."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def truncate_logits(scores: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """scores[B, V] with everything outside the top-k and the top-p nucleus set to -inf."""
    if top_k and 0 < top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        probs = torch.softmax(sorted_scores, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs
        drop_sorted = mass_before >= top_p  # never drops the most likely token
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores


class TransformersPolicy:
    """Generates with a causal LM from transformers. `model_or_path` is a model or a name/folder for
    `from_pretrained` (then `tokenizer` defaults to the same place). `stop_token_ids` defaults to the
    tokenizer's and the generation config's end-of-sequence ids. `chat_template_kwargs` are passed to
    `apply_chat_template` (e.g. {"enable_thinking": False} for Qwen3)."""

    def __init__(
        self,
        model_or_path,
        tokenizer=None,
        device: str | torch.device | None = None,
        max_new_tokens: int = 512,
        batch_size: int = 8,
        dtype: torch.dtype | str | None = None,
        stop_token_ids: list[int] | None = None,
        chat_template_kwargs: dict | None = None,
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if isinstance(model_or_path, str) or hasattr(model_or_path, "__fspath__"):
            kwargs = {"dtype": dtype} if dtype is not None else {}
            model = AutoModelForCausalLM.from_pretrained(model_or_path, **kwargs)
            tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(model_or_path)
            device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        else:
            model = model_or_path
            if tokenizer is None:
                raise ValueError("TransformersPolicy: pass the tokenizer along with a model object")
            device = device or next(model.parameters()).device  # a model object stays where it is
        if isinstance(tokenizer, str) or hasattr(tokenizer, "__fspath__"):
            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.stop_token_ids = sorted(set(stop_token_ids if stop_token_ids is not None else self._default_stops()))
        pad = tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else (self.stop_token_ids[0] if self.stop_token_ids else 0)

    def _default_stops(self) -> list[int]:
        ids = [self.tokenizer.eos_token_id]
        config_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids += config_eos if isinstance(config_eos, (list, tuple)) else [config_eos]
        return [i for i in ids if i is not None]

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **self.chat_template_kwargs
        )
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def generate(self, messages_batch: list[list[dict]], n: int = 1, **sampling) -> list[list[Completion]]:
        """n completions per conversation. Sampling: temperature (1.0; 0 means greedy), top_p (1.0),
        top_k (0 = off), max_new_tokens (alias max_tokens; default from the constructor), seed (None:
        torch's global generator; an int: a private generator, so the same call gives the same answer)."""
        check_sampling(sampling)
        sampling = {k: v for k, v in sampling.items() if v is not None}
        max_new = sampling.get("max_new_tokens", sampling.get("max_tokens", self.max_new_tokens))
        temperature = float(sampling.get("temperature", 1.0))
        top_p = float(sampling.get("top_p", 1.0))
        top_k = int(sampling.get("top_k", 0) or 0)
        if max_new < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {max_new}")
        generator = None
        if sampling.get("seed") is not None:
            generator = torch.Generator(device=self.device).manual_seed(int(sampling["seed"]))

        prompts = [self.prompt_ids(messages) for messages in messages_batch]
        rows = [i for i in range(len(prompts)) for _ in range(n)]
        out: list[list[Completion]] = [[] for _ in prompts]
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start : start + self.batch_size]
            decoded = self._decode_batch([prompts[i] for i in chunk], max_new, temperature, top_p, top_k, generator)
            for i, completion in zip(chunk, decoded):
                out[i].append(completion)
        return out

    def _decode_batch(self, *args) -> list[Completion]:
        was_training = self.model.training  # a trainer may share this model: leave its mode as it was
        self.model.eval()
        try:
            with torch.inference_mode():
                return self._decode_batch_eval(*args)
        finally:
            self.model.train(was_training)

    def _decode_batch_eval(self, prompts, max_new, temperature, top_p, top_k, generator) -> list[Completion]:
        batch, width = len(prompts), max(len(p) for p in prompts)
        input_ids = torch.full((batch, width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((batch, width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention[row, width - len(ids) :] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        stops = torch.tensor(self.stop_token_ids, dtype=torch.long, device=self.device)

        tokens, raw_lps, sample_lps = [], [], []
        finished = torch.zeros(batch, dtype=torch.bool, device=self.device)
        stopped = torch.zeros(batch, dtype=torch.bool, device=self.device)
        cache, cache_name = None, cache_argument(self.model)
        step_ids, step_positions = input_ids, positions
        for _ in range(max_new):
            result = self.model(
                input_ids=step_ids,
                attention_mask=attention,
                position_ids=step_positions,
                use_cache=True,
                logits_to_keep=1,
                **{cache_name: cache},
            )
            cache = result.cache if getattr(result, "cache", None) is not None else result.past_key_values
            logits = result.logits[:, -1, :].float()
            raw = torch.log_softmax(logits, dim=-1)
            if temperature <= 0:
                token = logits.argmax(dim=-1)
                sample_lp = torch.zeros(batch, device=self.device)
            else:
                scores = truncate_logits(logits / temperature, top_k, top_p)
                sample = torch.log_softmax(scores, dim=-1)
                token = torch.multinomial(sample.exp(), 1, generator=generator).squeeze(-1)
                sample_lp = sample.gather(-1, token[:, None]).squeeze(-1)
            token = torch.where(finished, torch.full_like(token, self.pad_token_id), token)
            tokens.append(token)
            raw_lps.append(raw.gather(-1, token[:, None]).squeeze(-1))
            sample_lps.append(sample_lp)
            hit_stop = torch.isin(token, stops) & ~finished
            stopped |= hit_stop
            finished |= hit_stop
            if bool(finished.all()):
                break
            step_ids = token[:, None]
            step_positions = step_positions[:, -1:] + 1
            attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=-1)

        token_grid = torch.stack(tokens, 1).tolist()
        raw_grid = torch.stack(raw_lps, 1).tolist()
        sample_grid = torch.stack(sample_lps, 1).tolist()
        stop_set = set(self.stop_token_ids)
        completions = []
        for row in range(batch):
            length = len(token_grid[row])
            for k, tok in enumerate(token_grid[row]):
                if tok in stop_set:
                    length = k + 1
                    break
            ids = token_grid[row][:length]
            text_ids = ids[:-1] if stopped[row] else ids
            completions.append(
                Completion(
                    text=self.tokenizer.decode(text_ids, skip_special_tokens=True),
                    token_ids=ids,
                    logprobs=raw_grid[row][:length],
                    finish_reason="stop" if bool(stopped[row]) else "length",
                    extra={"sampling_logprobs": sample_grid[row][:length], "prompt_token_ids": list(prompts[row])},
                )
            )
        return completions
