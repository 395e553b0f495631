"""The static-cache sampler (rl/sampler.py) against what the trainer scores: on the tiny random transformer,
greedy decoding gives exactly the tokens of a step-by-step argmax over the trainer's full forward, sampled
replies' log-probs match the trainer's teacher-forced log-probs, rows of different prompt lengths do not
disturb each other, and an RL step with sampler="static" sees no mismatch. On a GPU, the speed."""

from __future__ import annotations


import pytest

pytest.importorskip("transformers")
pytest.importorskip("trl")

import torch  # noqa: E402

from drk_lab.agent.context import episode_schedule  # noqa: E402
from drk_lab.rl.sampler import StaticCachePolicy, sample_tokens  # noqa: E402
from drk_lab.rl.logprobs import sequence_logprobs  # noqa: E402
from drk_lab.rl.trainer import RLTrainer  # noqa: E402
from drk_lab.rl.tiny_model import load_tiny  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tiny_path):
    model, tokenizer = load_tiny(tiny_path)
    torch.manual_seed(3)  # a random model's greedy path loops on one token; perturb it so the path is varied
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return model.eval(), tokenizer


def trainer_logprobs(model, ids: list[int]) -> torch.Tensor:
    rows = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
            "position_ids": torch.arange(len(ids))[None]}
    with torch.no_grad():
        return sequence_logprobs(model, rows)[0]


def prompts_of(tokenizer) -> list[list[int]]:
    texts = ["import torch\nclass Model(nn.Module):", "def get_inputs():\n    x = torch.randn(batch_size, dim)",
             "@triton.jit"]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


@pytest.mark.slow
def test_greedy_tokens_are_the_trainers_argmax_and_logprobs_match(tiny):
    model, tokenizer = tiny
    prompts = prompts_of(tokenizer)
    assert len({len(p) for p in prompts}) == 3  # left padding is exercised
    tokens, raw, _, _ = sample_tokens(model, prompts, 12, pad_token_id=tokenizer.pad_token_id, stop_token_ids=[-1],
                                      temperature=0)
    for row, prompt in enumerate(prompts):
        ids = list(prompt)
        for _ in range(12):  # the trainer's forward over the whole sequence, one token at a time
            with torch.no_grad():
                ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
        assert tokens[row].tolist() == ids[len(prompt):]
        expected = trainer_logprobs(model, ids)[len(prompt):]
        assert torch.allclose(raw[row], expected, atol=1e-4), (raw[row] - expected).abs().max()
    assert len(set(tokens[0].tolist())) > 1  # not a degenerate path


def test_sampled_replies_score_the_same_in_the_trainer_and_rows_are_independent(tiny):
    model, tokenizer = tiny
    prompts = prompts_of(tokenizer)
    kw = {"pad_token_id": tokenizer.pad_token_id, "stop_token_ids": [-1], "temperature": 1.0}
    tokens, raw, sampled, _ = sample_tokens(model, prompts, 16, generator=torch.Generator().manual_seed(0), **kw)
    for row, prompt in enumerate(prompts):
        expected = trainer_logprobs(model, prompt + tokens[row].tolist())[len(prompt):]
        assert torch.allclose(raw[row], expected, atol=1e-4)
    assert torch.allclose(raw, sampled)  # temperature 1, no truncation: the same distribution
    # one row alone, teacher-forced through the sampler's own cache path, gives the same log-probs
    alone_tokens, alone_raw, _, _ = sample_tokens(model, [prompts[1]], 16, generator=torch.Generator().manual_seed(5),
                                                  **kw)
    expected = trainer_logprobs(model, prompts[1] + alone_tokens[0].tolist())[len(prompts[1]):]
    assert torch.allclose(alone_raw[0], expected, atol=1e-4)


def test_prefill_in_blocks_of_rows_changes_nothing(tiny, monkeypatch):
    from drk_lab.rl import sampler

    model, tokenizer = tiny
    kw = {"pad_token_id": tokenizer.pad_token_id, "stop_token_ids": [-1], "temperature": 0}
    whole = sample_tokens(model, prompts_of(tokenizer), 6, **kw)
    monkeypatch.setattr(sampler, "PREFILL_TOKENS", 1)  # one row per block
    blocked = sample_tokens(model, prompts_of(tokenizer), 6, **kw)
    assert torch.equal(whole[0], blocked[0]) and torch.allclose(whole[1], blocked[1], atol=1e-5)


def test_the_fixed_shape_step_for_cuda_graphs_decodes_the_same(tiny):
    """cuda_graph=True decodes with the fixed-shape step (the whole cache read, positions not yet written
    masked); on a CPU it runs without capture: the same greedy tokens, the same sampled tokens from the
    same seed, log-probs within float rounding, and stop tokens still end the rows."""
    model, tokenizer = tiny
    prompts = prompts_of(tokenizer)
    greedy = {"pad_token_id": tokenizer.pad_token_id, "stop_token_ids": [-1], "temperature": 0}
    plain, graphed = (sample_tokens(model, prompts, 12, cuda_graph=g, **greedy) for g in (False, True))
    assert torch.equal(plain[0], graphed[0]) and torch.allclose(plain[1], graphed[1], atol=1e-5)
    stop = int(plain[0][0, 3])
    kw = {"pad_token_id": tokenizer.pad_token_id, "stop_token_ids": [stop], "temperature": 1.0}
    plain, graphed = (sample_tokens(model, prompts, 16, generator=torch.Generator().manual_seed(2), cuda_graph=g, **kw)
                      for g in (False, True))
    assert torch.equal(plain[0], graphed[0]) and torch.equal(plain[3], graphed[3])
    assert torch.allclose(plain[1], graphed[1], atol=1e-5)
    for row, prompt in enumerate(prompts):  # and the trainer agrees with the fixed-shape path's log-probs
        reply = graphed[0][row].tolist()
        reply = reply[: reply.index(stop) + 1] if stop in reply else reply
        expected = trainer_logprobs(model, prompt + reply)[len(prompt):]
        assert torch.allclose(graphed[1][row, : len(reply)], expected, atol=1e-4)


def test_graphed_steps_attending_over_part_of_the_cache_decode_the_same(tiny, monkeypatch):
    """With ATTEND_STEP of 4 positions the fixed-shape step attends over 4, 8, 12, ... cached positions as
    the reply grows (a graph each on CUDA), never over positions it has not reached: the same tokens."""
    import drk_lab.rl.sampler as sampler

    model, tokenizer = tiny
    prompts = prompts_of(tokenizer)
    kw = {"pad_token_id": tokenizer.pad_token_id, "stop_token_ids": [-1], "temperature": 1.0}
    whole = sample_tokens(model, prompts, 14, generator=torch.Generator().manual_seed(4), cuda_graph=True, **kw)
    lengths = []
    step = sampler.decode_step
    monkeypatch.setattr(sampler, "ATTEND_STEP", 4)
    monkeypatch.setattr(sampler, "decode_step", lambda *a: lengths.append(a[-1]) or step(*a))
    parts = sample_tokens(model, prompts, 14, generator=torch.Generator().manual_seed(4), cuda_graph=True, **kw)
    assert torch.equal(whole[0], parts[0]) and torch.allclose(whole[1], parts[1], atol=1e-5)
    width = max(len(p) for p in prompts)
    assert lengths == [min(width + 14, (width + i) // 4 * 4 + 4) for i in range(13)]


def test_policy_stops_at_a_stop_token_and_reports_like_the_loop_policy(tiny):
    model, tokenizer = tiny
    messages = [[{"role": "user", "content": "relu"}]]
    free = StaticCachePolicy(model, tokenizer, stop_token_ids=[-1]).generate(messages, temperature=0, max_new_tokens=12)
    path = free[0][0].token_ids
    stop = path[3]  # the greedy path's fourth token, made a stop token: the reply must end at its first use
    policy = StaticCachePolicy(model, tokenizer, stop_token_ids=[stop])
    out = policy.generate(messages, n=2, temperature=0, max_new_tokens=12)
    for c in out[0]:
        assert c.token_ids == path[: path.index(stop) + 1] and c.finish_reason == "stop"
        expected = trainer_logprobs(model, c.extra["prompt_token_ids"] + c.token_ids)[-len(c.token_ids):]
        assert torch.allclose(torch.tensor(c.logprobs), expected, atol=1e-4)
    assert free[0][0].finish_reason == "length" and len(path) == 12


def test_models_of_another_layout_are_refused(tiny):
    _, tokenizer = tiny
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=len(tokenizer)))
    with pytest.raises(ValueError, match="Qwen3-style"):
        StaticCachePolicy(gpt2, tokenizer)


@pytest.mark.slow
def test_an_rl_step_with_the_static_sampler_has_no_mismatch(tiny_path, relu_small, relu_solution):
    from drk_lab.rl.rollout import solution_replies

    trainer = RLTrainer(str(tiny_path), [relu_small], samples=2, turns=2, max_new_tokens=8, sampler="static",
                        eval_kwargs={"device": "cpu", "correctness_trials": 1}, lr=1e-4,
                        force_responses=solution_replies([relu_small]))
    row = trainer.step()
    assert row["generated_tokens"] > 0
    assert row["mrs/rejected_frac"] == 0.0 and row["mrs/log_ratio_abs_max"] < 1e-4
    assert trainer.schedule() == episode_schedule(2)


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["static", "loop"])
def test_rl_at_another_temperature_records_and_scores_the_tempered_model(tiny_path, relu_small, sampler):
    """At temperature 0.7 the rollouts' recorded log-probs are those of softmax(logits / 0.7), sampled and
    forced replies alike, and the trainer scores the same: MRS sees no mismatch. Scored raw (the trainer
    before this setting), the same tokens are far off."""
    from drk_lab.rl.rollout import solution_replies

    trainer = RLTrainer(str(tiny_path), [relu_small], samples=2, turns=2, max_new_tokens=8, sampler=sampler,
                        temperature=0.7, eval_kwargs={"device": "cpu", "correctness_trials": 1}, lr=1e-4,
                        force_responses=solution_replies([relu_small]))
    rollout = trainer.rollout(0)
    turns = [turn for episode in rollout.tokens for turn in episode]
    assert any(turn.forced for turn in turns) and any(not turn.forced for turn in turns)
    model = trainer.model.eval()
    for turn in turns:
        ids = turn.prompt_ids + turn.completion_ids
        rows = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
                "position_ids": torch.arange(len(ids))[None]}
        with torch.no_grad():
            tempered = sequence_logprobs(model, rows, temperature=0.7)[0, len(turn.prompt_ids):]
        raw = trainer_logprobs(model, ids)[len(turn.prompt_ids):]
        recorded = torch.tensor(turn.logprobs)
        assert torch.allclose(recorded, tempered, atol=1e-4), (recorded - tempered).abs().max()
        assert (recorded - raw).abs().max() > 1e-2
    row = trainer.step()
    assert row["mrs/rejected_frac"] == 0.0 and row["mrs/log_ratio_abs_max"] < 1e-4


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 0.7, "top_p": 0.9},
                                      {"temperature": 0.7, "top_k": 20}])
def test_rl_refuses_sampling_the_trainer_cannot_score(tiny_path, relu_small, sampling):
    with pytest.raises(ValueError, match="temperature"):
        RLTrainer(str(tiny_path), [relu_small], samples=2, **sampling)


@pytest.mark.gpu
def test_cuda_graph_decoding_matches_the_plain_step_on_a_gpu(tiny, monkeypatch):
    """On CUDA the fixed-shape step is captured and replayed, one graph per attended length (here 8, 16,
    ... positions, sharing one memory pool): the same greedy tokens as the plain step, log-probs within
    float rounding, sampled replies scored the same by the trainer."""
    import drk_lab.rl.sampler as sampler

    model, tokenizer = tiny
    model = model.cuda()
    prompts = prompts_of(tokenizer) * 5
    kw = {"pad_token_id": tokenizer.pad_token_id, "stop_token_ids": [-1], "temperature": 0}
    plain, graphed = (sample_tokens(model, prompts, 32, cuda_graph=g, **kw) for g in (False, True))
    assert torch.equal(plain[0], graphed[0]) and torch.allclose(plain[1], graphed[1], atol=1e-4)
    monkeypatch.setattr(sampler, "ATTEND_STEP", 8)
    parts = sample_tokens(model, prompts, 32, cuda_graph=True, **kw)
    assert torch.equal(plain[0], parts[0]) and torch.allclose(plain[1], parts[1], atol=1e-4)
    sampled = sample_tokens(model, prompts, 32, cuda_graph=True, generator=torch.Generator("cuda").manual_seed(0),
                            **{**kw, "temperature": 1.0})
    for row, prompt in enumerate(prompts[:3]):
        ids = prompt + sampled[0][row].tolist()
        rows = {"input_ids": torch.tensor([ids], device="cuda"), "attention_mask": torch.ones(1, len(ids), dtype=torch.long, device="cuda"),
                "position_ids": torch.arange(len(ids), device="cuda")[None]}
        with torch.no_grad():
            expected = sequence_logprobs(model, rows)[0, len(prompt):].cpu()
        assert torch.allclose(sampled[1][row], expected, atol=1e-4)
    model.cpu()
