"""Fast batched sampling for Qwen3-style models: a decode loop over the model's own layers with a
preallocated key/value cache.

    policy = StaticCachePolicy(model, tokenizer, batch_size=1024)       # a TokenPolicy: rollouts use it
    completions = policy.generate(conversations, n=8, temperature=1.0, max_new_tokens=512, seed=0)

Why: TransformersPolicy's loop calls the model's forward once per token with a growing DynamicCache,
in batches of `generation_batch_size`; for a small model the per-call overhead dominates (124 tokens/s
on the H200 in the first RL run). Here all rows of a call decode together, the cache is one tensor per
layer allocated once ([rows, kv heads, prompt + new tokens, head dim]), and each step runs only the
layer arithmetic; grouped-query attention reads the cache without copying it. For a model of a few tens
of millions of parameters the layers are launch-bound, so batching all the step's rows is what buys the
speed; over long caches reading the keys and values sets the pace. With `cuda_graph=True` each
one-token step has fixed shapes (it writes its key and value at a position held in a tensor and attends
over the cache up to the next multiple of ATTEND_STEP positions, those not yet written masked) and runs
as a CUDA graph, one per attended length: one launch per token instead of a few hundred. The default
step attends to the growing slice of the cache written so far, whose shape changes every token.

Token-exact with what the trainer scores: the layers' own modules (norms, projections, MLP, rotary
embedding) run on the same inputs; only attention is written out (scaled dot-product over the cache with
a padding-and-causal mask). Log-probabilities are the raw model's (temperature 1, no truncation), as in
TransformersPolicy; tests/rl/test_sampler.py checks greedy tokens and log-probs against the trainer's
teacher-forced forward (rl/logprobs.py's sequence_logprobs). Run the model in float32 for MRS statistics
near zero; bf16 gives mismatches of the order of bf16 rounding, as any two engines do.

Covers Qwen3ForCausalLM (and models with the same layer layout: q/k/v/o projections, optional q/k norms,
rotary embedding, no sliding window); other architectures raise ValueError and should use TokenPolicy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from drk_lab.policies.base import Completion
from drk_lab.policies.huggingface import truncate_logits
from drk_lab.rl.rollout import TokenPolicy

PREFILL_TOKENS = 2**26  # mask entries (rows x prompt x prompt) per prefill block
ATTEND_STEP = 512  # a graphed step attends over a multiple of this many cache positions (GraphedDecode)


def check_supported(model) -> None:
    base = getattr(model, "model", None)
    layers = getattr(base, "layers", None)
    if layers is None or not hasattr(base, "rotary_emb") or not hasattr(layers[0], "self_attn"):
        raise ValueError(f"StaticCachePolicy supports Qwen3-style models, not {type(model).__name__}: use TokenPolicy")
    if getattr(model.config, "use_sliding_window", False):
        raise ValueError("StaticCachePolicy does not implement sliding-window attention: use TokenPolicy")


class KVCache:
    """Keys and values of every layer for `rows` sequences of at most `length` tokens, allocated once."""

    def __init__(self, config, rows: int, length: int, device, dtype):
        heads = config.num_key_value_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = (config.num_hidden_layers, rows, heads, length, head_dim)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.valid = torch.zeros(rows, length, dtype=torch.bool, device=device)  # written and not padding

    def rows(self, start: int, stop: int) -> KVCache:
        """A view of rows start..stop-1 (writes go to this cache)."""
        view = KVCache.__new__(KVCache)
        view.keys, view.values, view.valid = self.keys[:, start:stop], self.values[:, start:stop], self.valid[start:stop]
        return view


def _attention(layer, hidden, cos, sin, cache: KVCache, index: int, start, mask):
    """The layer's self-attention for new tokens at cache positions start..start+T-1 (`start` an int), or
    for one new token at the position in the 1-element tensor `start`, attending over the whole cache."""
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

    attn = layer.self_attn
    rows, new = hidden.shape[:2]
    head_dim = cache.keys.shape[-1]
    q = attn.q_proj(hidden).view(rows, new, -1, head_dim)
    k = attn.k_proj(hidden).view(rows, new, -1, head_dim)
    v = attn.v_proj(hidden).view(rows, new, -1, head_dim).transpose(1, 2)
    if hasattr(attn, "q_norm"):
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    if isinstance(start, int):
        end = start + new
        cache.keys[index, :, :, start:end] = k
        cache.values[index, :, :, start:end] = v
        keys, values = cache.keys[index, :, :, :end], cache.values[index, :, :, :end]
    else:  # fixed shapes: the position is data, not a slice bound; the mask's width is the attended length
        cache.keys[index].index_copy_(2, start, k)
        cache.values[index].index_copy_(2, start, v)
        keys, values = cache.keys[index, :, :, :mask.shape[-1]], cache.values[index, :, :, :mask.shape[-1]]
    kv_heads = keys.shape[1]
    groups = q.shape[1] // kv_heads
    # grouped-query attention without copying the cache: the `groups` query heads that share a key/value
    # head become extra query rows of that head (query head h uses key/value head h // groups)
    q = q.reshape(rows, kv_heads, groups * new, head_dim)
    if new == 1 and q.dtype == torch.float32:
        out = _one_token_attention(q, keys, values, mask, attn.scaling)
    else:
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask.repeat(1, 1, groups, 1), scale=attn.scaling)
    out = out.reshape(rows, kv_heads * groups, new, head_dim)  # CUDA's attention may return it non-contiguous
    return attn.o_proj(out.transpose(1, 2).reshape(rows, new, -1))


def _one_token_attention(q, keys, values, mask, scale):
    """Attention of one new token per row as two batched matrix products ([rows, kv heads, groups, head
    dim] queries). Why not scaled_dot_product_attention: for float32 on the H200 it picks the
    memory-efficient kernel, whose 64-query tiles hold only `groups` real queries in decoding: 17.6 of
    19.1 ms per step for 128 rows over 6,144 cached positions. Softmax in float32, as the kernel does."""
    scores = torch.matmul(q, keys.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))  # every row sees at least its new token: no empty row
    return torch.matmul(scores.softmax(-1), values)


def forward_step(model, ids, positions, cache: KVCache, start: int):
    """Logits of the last new token of each row ([rows, vocab], float32); the new tokens' keys and values
    go into the cache at start..start+T-1."""
    base = model.model
    new = ids.shape[1]
    end = start + new
    hidden = base.embed_tokens(ids)
    cos, sin = base.rotary_emb(hidden, positions)
    query_at = torch.arange(start, end, device=ids.device)
    key_at = torch.arange(end, device=ids.device)
    causal = key_at[None, :] <= query_at[:, None]
    # every query sees itself, so a padding position never has an empty row (NaN); real tokens never see padding
    mask = (cache.valid[:, None, :end] & causal[None]) | (key_at[None, :] == query_at[:, None])[None]
    return _layers(model, hidden, cos, sin, cache, start, mask[:, None])  # mask [rows, 1, T, S]


def decode_step(model, ids, positions, cache: KVCache, start: torch.Tensor, length: int | None = None):
    """forward_step for one new token per row ([rows, 1]) at the cache position in the 1-element tensor
    `start`, every shape fixed: it attends over the cache's first `length` positions (default all; they
    must include `start`), where those not yet written are not valid, so the same step serves every
    token up to `length` and can be captured as a CUDA graph."""
    base = model.model
    hidden = base.embed_tokens(ids)
    cos, sin = base.rotary_emb(hidden, positions)
    length = length or cache.valid.shape[1]
    key_at = torch.arange(length, device=ids.device)
    mask = cache.valid[:, :length] | (key_at == start)[None]  # the new token sees itself even in a finished row
    return _layers(model, hidden, cos, sin, cache, start, mask[:, None, None])


def _layers(model, hidden, cos, sin, cache: KVCache, start, mask):
    base = model.model
    for index, layer in enumerate(base.layers):
        residual = hidden
        hidden = residual + _attention(layer, layer.input_layernorm(hidden), cos, sin, cache, index, start, mask)
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    hidden = base.norm(hidden[:, -1:])
    return model.lm_head(hidden)[:, -1].float()


class GraphedDecode:
    """decode_step on one cache as CUDA graphs, one per attended length (the first multiple of
    ATTEND_STEP positions that holds the new token, so that early tokens do not read the whole cache),
    each captured at its first use; a call copies the step's inputs into the graphs' buffers and replays
    the graph of its length, returning that graph's logits buffer (overwritten by its next replay). A
    capture first runs the step itself on a side stream (the first run creates cuBLAS handles and
    workspaces, which cannot be captured): that run writes the same key and value as the replay after it.
    Off CUDA the same fixed-shape step runs eagerly (what the CPU tests check)."""

    def __init__(self, model, cache: KVCache):
        self.model, self.cache = model, cache
        rows, device = cache.valid.shape[0], cache.valid.device
        self.ids = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.positions = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.start = torch.zeros(1, dtype=torch.long, device=device)
        self.graphs: dict[int, tuple] = {}  # attended length -> (graph, its logits buffer)
        self.pool = torch.cuda.graph_pool_handle() if device.type == "cuda" else None  # replayed one at a time

    def __call__(self, token, positions, start: int):
        self.ids.copy_(token[:, None])
        self.positions.copy_(positions)
        self.start.fill_(start)
        length = min(self.cache.valid.shape[1], (start // ATTEND_STEP + 1) * ATTEND_STEP)
        if self.pool is None:
            return decode_step(self.model, self.ids, self.positions, self.cache, self.start, length)
        if length not in self.graphs:
            self.graphs[length] = self._capture(length)
        graph, logits = self.graphs[length]
        graph.replay()
        return logits

    def _capture(self, length: int):
        device = self.ids.device
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            decode_step(self.model, self.ids, self.positions, self.cache, self.start, length)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            logits = decode_step(self.model, self.ids, self.positions, self.cache, self.start, length)
        return graph, logits


@torch.inference_mode()
def sample_tokens(model, prompts: list[list[int]], max_new: int, *, pad_token_id: int, stop_token_ids: list[int],
                  temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, generator=None,
                  cuda_graph: bool = False, on_finished=None):
    """Sample up to `max_new` tokens after each prompt, all rows at once. Returns (tokens [rows, n],
    raw log-probs [rows, n], sampling log-probs [rows, n], stopped [rows]) on the CPU; after a row's stop
    token its tokens are `pad_token_id`. `cuda_graph`: decode with GraphedDecode (see the module's
    docstring). `on_finished(rows, tokens, raw, sampled)`: rows that stopped, with their tensors so far (on
    the CPU), handed over every 8 tokens while the others decode on (the pipelined rollouts evaluate them)."""
    check_supported(model)
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    rows, width = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((rows, width), pad_token_id, dtype=torch.long)
    cache = KVCache(model.config, rows, width + max_new, device, dtype)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        cache.valid[row, width - len(prompt):width] = True
    ids = ids.to(device)
    graphed = GraphedDecode(model, cache) if cuda_graph else None
    positions = (cache.valid[:, :width].long().cumsum(-1) - 1).clamp(min=0)
    stops = torch.tensor(stop_token_ids, dtype=torch.long, device=device)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    tokens, raw_lps, sample_lps = [], [], []
    reported = torch.zeros(rows, dtype=torch.bool, device=device)  # rows handed to on_finished
    # the prompts in blocks of rows, so that the [rows, 1, T, T] mask and attention stay small
    block = max(1, PREFILL_TOKENS // (width * width))
    logits = torch.cat([forward_step(model, ids[r:r + block], positions[r:r + block], cache.rows(r, r + block), 0)
                        for r in range(0, rows, block)])
    next_position = positions[:, -1:] + 1
    for step in range(max_new):
        raw = torch.log_softmax(logits, dim=-1)
        if temperature <= 0:
            token = logits.argmax(dim=-1)
            sample_lp = torch.zeros(rows, device=device)
        else:
            sample = torch.log_softmax(truncate_logits(logits / temperature, top_k, top_p), dim=-1)
            token = torch.multinomial(sample.exp(), 1, generator=generator).squeeze(-1)
            sample_lp = sample.gather(-1, token[:, None]).squeeze(-1)
        token = torch.where(finished, torch.full_like(token, pad_token_id), token)
        tokens.append(token)
        raw_lps.append(raw.gather(-1, token[:, None]).squeeze(-1))
        sample_lps.append(sample_lp)
        finished |= torch.isin(token, stops)
        if on_finished is not None and step % 8 == 7 and step < max_new - 1:
            reported = hand_over(finished, reported, tokens, raw_lps, sample_lps, on_finished)
        if step == max_new - 1 or (step % 8 == 7 and bool(finished.all())):  # a host sync every 8 tokens only
            break
        cache.valid[:, width + step] = ~finished | torch.isin(token, stops)
        if graphed is not None:
            logits = graphed(token, next_position, width + step)
        else:
            logits = forward_step(model, token[:, None], next_position, cache, width + step)
        next_position = next_position + 1
    tokens = torch.stack(tokens, 1)
    stopped = torch.isin(tokens, stops).any(-1)
    return tokens.cpu(), torch.stack(raw_lps, 1).cpu(), torch.stack(sample_lps, 1).cpu(), stopped.cpu()


def hand_over(finished, reported, tokens, raw_lps, sample_lps, on_finished):
    """on_finished for the rows that stopped since the last hand-over; returns the rows handed over so far."""
    newly = finished & ~reported
    if not bool(newly.any()):
        return reported
    rows = newly.nonzero().squeeze(-1)
    on_finished(rows.tolist(), *(torch.stack(x, 1)[rows].cpu() for x in (tokens, raw_lps, sample_lps)))
    return reported | newly


class StaticCachePolicy(TokenPolicy):
    """A TokenPolicy (chat or token-id prompts) that decodes with sample_tokens: all rows of a generate
    call at once, up to `batch_size` rows (default 1024) per decode; `cuda_graph` as in sample_tokens."""

    cuda_graph = False

    def __init__(self, *args, batch_size: int = 1024, cuda_graph: bool = False, **kwargs):
        super().__init__(*args, batch_size=batch_size, **kwargs)
        self.cuda_graph = cuda_graph
        check_supported(self.model)

    @classmethod
    def wrap(cls, policy) -> StaticCachePolicy:
        wrapped = TokenPolicy.wrap(policy)
        out = cls.__new__(cls)
        out.__dict__.update(wrapped.__dict__)
        check_supported(out.model)
        return out

    def _decode_batch_eval(self, prompts, max_new, temperature, top_p, top_k, generator) -> list[Completion]:
        hook, on_finished = self.row_hook, None
        if hook is not None:  # a pipelined rollout's: each reply as soon as its row stops
            def on_finished(rows, tokens, raw, sampled):
                for row, ids_row, raw_row, sample_row in zip(rows, tokens.tolist(), raw.tolist(), sampled.tolist()):
                    hook(row, self.completion(prompts[row], ids_row, raw_row, sample_row, True))
        tokens, raw, sampled, stopped = sample_tokens(
            self.model, prompts, max_new, pad_token_id=self.pad_token_id, stop_token_ids=self.stop_token_ids,
            temperature=temperature, top_p=top_p, top_k=top_k, generator=generator, cuda_graph=self.cuda_graph,
            on_finished=on_finished)
        return [self.completion(prompt, ids_row, raw_row, sample_row, bool(stop))
                for prompt, ids_row, raw_row, sample_row, stop in zip(prompts, tokens.tolist(), raw.tolist(),
                                                                      sampled.tolist(), stopped.tolist())]

    def completion(self, prompt: list[int], ids_row: list[int], raw_row: list[float], sample_row: list[float],
                   stopped: bool) -> Completion:
        """One row's Completion: its tokens up to and with the stop token (or all, cut off)."""
        stop_set = set(self.stop_token_ids)
        length = next((k + 1 for k, tok in enumerate(ids_row) if tok in stop_set), len(ids_row))
        ids = ids_row[:length]
        text_ids = ids[:-1] if stopped else ids
        return Completion(
            text=self.tokenizer.decode(text_ids, skip_special_tokens=True), token_ids=ids, logprobs=raw_row[:length],
            finish_reason="stop" if stopped else "length",
            extra={"sampling_logprobs": sample_row[:length], "prompt_token_ids": list(prompt)})
