"""Rollouts of the tiny random transformer against KernelEnv: token sequences exactly as sampled,
environment tokens from the chat template, masks, turn ids, rewards from real evaluations."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from drk_lab.agent.context import episode_schedule  # noqa: E402
from drk_lab.policies.huggingface import TransformersPolicy  # noqa: E402
from drk_lab.rl.batch import ENV_TURN, build_batch
from drk_lab.rl.rollout import collect_rollouts, encode, feedback_glue, template_text
from drk_lab.rl.logprobs import sequence_logprobs  # noqa: E402
from drk_lab.rl.tiny_model import load_tiny  # noqa: E402

EVAL = {"device": "cpu", "correctness_trials": 1}


@pytest.fixture(scope="module")
def tiny(tiny_path):
    return load_tiny(tiny_path)


@pytest.fixture(scope="module")
def policy(tiny):
    model, tokenizer = tiny
    return TransformersPolicy(model, tokenizer, device="cpu", max_new_tokens=8)


@pytest.fixture(scope="module")
def rollout(policy, relu_small, relu_solution):
    """relu, 2 samples x 2 turns; sample 0's first reply is the known-good kernel (a real evaluation)."""
    def force(task, sample, turn):
        return f"Here it is.\n```python\n{relu_solution}```" if (sample, turn) == (0, 0) else None

    return collect_rollouts(policy, [relu_small], samples=2, schedule=episode_schedule(2), seed=3,
                            force_responses=force, **EVAL)


@pytest.mark.slow
def test_turn_prompts_are_the_earlier_tokens_plus_environment_tokens(rollout, tiny):
    _, tokenizer = tiny
    assert [len(t) for t in rollout.tokens] == [2, 2] and rollout.group == [0, 0]
    for traj, tokens in zip(rollout.trajectories, rollout.tokens):
        first, second = tokens
        chat = template_text(tokenizer, [{"role": "user", "content": traj.prompt}], True)
        assert first.prompt_ids == encode(tokenizer, chat)
        # the next prompt holds the sampled ids verbatim, never a re-tokenised text
        assert second.prompt_ids == first.prompt_ids + first.completion_ids + first.glue_ids
        ended = first.completion_ids[-1] == tokenizer.eos_token_id
        glue_text = tokenizer.decode(first.glue_ids)
        expected = ("" if ended else "<|im_end|>") + "\n<|im_start|>user\n" + traj.turns[0].feedback
        assert glue_text == expected + "<|im_end|>\n<|im_start|>assistant\n"
        assert second.glue_ids is None  # nothing follows the last turn
        for turn, tt in zip(traj.turns, tokens):
            assert turn.token_ids == tt.completion_ids and len(tt.logprobs) == len(tt.completion_ids)
    forced = rollout.tokens[0][0]
    assert forced.forced and forced.completion_ids[-1] == tokenizer.eos_token_id
    assert rollout.stats["forced_replies"] == 1 and rollout.stats["generated_tokens"] > 0


def test_rewards_come_from_real_evaluations(rollout):
    good, other = rollout.trajectories
    assert good.turns[0].result.correct and good.turns[0].reward == 0.5  # drkernel: correct, no timing on CPU
    assert all(t.result.error_kind == "no_code" and t.reward == 0.0 for t in good.turns[1:] + other.turns)


def test_batch_masks_turn_ids_and_log_probs(rollout, tiny):
    model, tokenizer = tiny
    batch = build_batch(rollout, tokenizer.pad_token_id)
    assert batch.num_sequences == 2 and batch.traj_index.tolist() == [0, 1]  # full context: one sequence each
    for row, tokens in enumerate(rollout.tokens):
        n = int(batch.attention_mask[row].sum())
        ids = batch.input_ids[row, :n].tolist()
        assert ids == tokens[1].prompt_ids + tokens[1].completion_ids
        assert (batch.input_ids[row, n:] == tokenizer.pad_token_id).all()
        model_positions = batch.model_mask[row].nonzero().squeeze(-1).tolist()
        p0, p1 = len(tokens[0].prompt_ids), len(tokens[1].prompt_ids)
        assert model_positions == (list(range(p0, p0 + len(tokens[0].completion_ids)))
                                   + list(range(p1, p1 + len(tokens[1].completion_ids))))
        assert batch.turn_ids[row][batch.model_mask[row]].tolist() == (
            [0] * len(tokens[0].completion_ids) + [1] * len(tokens[1].completion_ids))
        assert (batch.turn_ids[row][~batch.model_mask[row]] == ENV_TURN).all()
        assert batch.rollout_logp[row][batch.model_mask[row]].tolist() == pytest.approx(
            tokens[0].logprobs + tokens[1].logprobs)
    assert batch.rewards.tolist() == [[0.5, 0.0], [0.0, 0.0]] and batch.exists.all()
    assert batch.correct.tolist() == [[True, False], [False, False]] and batch.coverage.isnan().all()

    # the trainer's teacher-forced pass over the padded batch reproduces the sampler's log-probs
    for side in ("right", "left"):
        b = build_batch(rollout, tokenizer.pad_token_id, padding_side=side)
        with torch.no_grad():
            logp = sequence_logprobs(model, b.rows(torch.arange(b.num_sequences)))
        assert torch.allclose(logp[b.model_mask], b.rollout_logp[b.model_mask], atol=1e-4)

    adv = torch.tensor([[1.5, -2.0], [0.25, 4.0]])
    values = batch.token_values(adv)
    assert (values[~batch.model_mask] == 0).all()
    assert values[0][batch.turn_ids[0] == 1].unique().tolist() == [-2.0]
    flat, mask = batch.per_trajectory(batch.rollout_logp)
    assert mask.sum(1).tolist() == batch.model_mask.sum(1).tolist()


def test_trimmed_context_starts_a_new_sequence(policy, tiny, relu_small):
    """A rolling window of one earlier turn: turn 3's prompt drops turn 1, so it cannot continue the
    sequence of turns 1-2; it becomes its own sequence where turn 2's reply is context, not trained."""
    _, tokenizer = tiny
    rollout = collect_rollouts(policy, [relu_small], samples=1, schedule=episode_schedule(3, context_turns=1),
                               seed=1, **EVAL)  # random replies hold no code: nothing is evaluated
    (t0, t1, t2), traj = rollout.tokens[0], rollout.trajectories[0]
    assert [t.context for t in traj.turns] == [[], [0], [1]]
    assert t2.prompt_ids == t0.prompt_ids + t1.completion_ids + t1.glue_ids
    batch = build_batch(rollout, tokenizer.pad_token_id)
    assert batch.num_sequences == 2 and batch.traj_index.tolist() == [0, 0]
    assert batch.turn_ids[0][batch.model_mask[0]].unique().tolist() == [0, 1]
    second = batch.input_ids[1][batch.attention_mask[1].bool()].tolist()
    assert second == t2.prompt_ids + t2.completion_ids
    assert batch.turn_ids[1][batch.model_mask[1]].unique().tolist() == [2]
    assert int(batch.model_mask[1].sum()) == len(t2.completion_ids)  # turn 2's reply appears only as context


def test_length_limits_end_episodes(policy, relu_small):
    none = collect_rollouts(policy, [relu_small], samples=1, schedule=episode_schedule(2), seed=0,
                            max_prompt_tokens=10, **EVAL)
    assert none.trajectories[0].turns == [] and none.stats["prompt_too_long"] == 1
    prompt_len = len(policy.prompt_ids([{"role": "user", "content": none.trajectories[0].prompt}]))
    # room for the first reply (8 tokens) but not for the feedback and a second reply
    one = collect_rollouts(policy, [relu_small], samples=1, schedule=episode_schedule(3), seed=0,
                           max_context_tokens=prompt_len + 8 + 8, **EVAL)
    assert len(one.trajectories[0].turns) == 1 and one.stats["context_full"] == 1


def test_feedback_glue_drops_only_the_stop_text_the_model_wrote(tiny):
    _, tokenizer = tiny
    after_stop = feedback_glue(tokenizer, "FB", stop_text="<|im_end|>")
    assert after_stop == "\n<|im_start|>user\nFB<|im_end|>\n<|im_start|>assistant\n"
    assert feedback_glue(tokenizer, "FB").startswith("<|im_end|>\n<|im_start|>user\nFB")


def test_a_steps_tasks_are_passes_over_the_set_in_seeded_orders():
    from drk_lab.rl.rollout import tasks_of_step

    tasks = list(range(10))
    steps = [tasks_of_step(tasks, step, 4, seed=3) for step in range(5)]
    drawn = sum(steps, [])
    assert sorted(drawn[:10]) == tasks and sorted(drawn[10:]) == tasks and drawn[:10] != drawn[10:]  # a pass each
    assert steps == [tasks_of_step(tasks, step, 4, seed=3) for step in range(5)]  # known ahead, resumed alike
    assert drawn != sum((tasks_of_step(tasks, step, 4, seed=4) for step in range(5)), [])
    assert tasks_of_step(tasks, 1, 4, seed=3, shuffle=False) == [4, 5, 6, 7]
