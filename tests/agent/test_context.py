"""Context strategies, the STTS turn arithmetic, and the runners over real CPU evaluations."""

import json

import pytest

import drk_lab as drk
from drk_lab.agent.context import build_messages, episode_schedule, select_turns, stts_schedule, stts_total_turns
from drk_lab.agent.episodes import run_episode, run_many, run_stts
from drk_lab.agent.trajectory import Trajectory, read_jsonl, write_jsonl
from drk_lab.policies.base import Completion
from drk_lab.policies.scripted import ScriptedPolicy

NO_CODE = "I would tile the rows, but I have no code yet."


class TurnScript:
    """Answers by turn number (one generate call per turn, as the runners make them), whatever the
    context holds; records what it was asked and what it observed."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []  # (conversations, n) per generate call
        self.observed = []  # (task name, code, result)

    def generate(self, messages_batch, n=1, **sampling):
        answer = self.answers[min(len(self.calls), len(self.answers) - 1)]
        self.calls.append((messages_batch, n))
        return [[Completion(answer) for _ in range(n)] for _ in messages_batch]

    def observe(self, task_name, code, result):
        self.observed.append((task_name, code, result))


def fenced(code):
    return f"```python\n{code}```"


def test_select_turns_on_crafted_rewards():
    rewards = [0.1, 0.9, 0.2, 0.9, 0.0, 0.5]
    assert select_turns(rewards, 2, "top_k") == [1, 3]
    assert select_turns(rewards, 3, "top_k") == [1, 3, 5]
    assert select_turns([1.0, 0.0, 1.0, 1.0], 2, "top_k") == [2, 3]  # ties: the later turn
    assert select_turns(rewards, 2, "best_window") == [2, 3]  # 1.1 twice: the latest window
    assert select_turns(rewards, 3, "best_window") == [1, 2, 3]
    assert select_turns(rewards, 1, "best_window") == [3]
    assert select_turns(rewards, 2, "last_k") == [4, 5]
    for strategy in ("top_k", "best_window", "last_k"):
        assert select_turns(rewards, 10, strategy) == list(range(6))
        assert select_turns(rewards, 0, strategy) == []
        assert select_turns([], 3, strategy) == []
    with pytest.raises(ValueError):
        select_turns(rewards, 2, "random")


def test_stts_turn_arithmetic():
    assert stts_total_turns(5, 4, 10) == 14  # Dr. Kernel: 5 turns, then 9 iterations of 1 new turn
    schedule = stts_schedule(5, 4, 10)
    assert schedule.turns == 14
    assert [schedule.iteration(i) for i in range(14)] == [0] * 5 + list(range(1, 10))
    schedule = stts_schedule(3, 1, 3)
    assert schedule.turns == 7 and [schedule.iteration(i) for i in range(7)] == [0, 0, 0, 1, 1, 2, 2]
    assert stts_schedule(4, 0, 2).turns == 8 and stts_schedule(5, 4, 1).turns == 5
    for bad in ((5, 5, 10), (5, -1, 10), (5, 4, 0)):
        with pytest.raises(ValueError):
            stts_schedule(*bad)
    assert episode_schedule(3).limit is None


def test_dr_kernel_stts_settings_give_14_turns_and_a_sliding_context(relu_small):
    policy = TurnScript([NO_CODE])
    traj = run_stts(relu_small, policy, 5, 4, 10, device="cpu")
    assert len(traj.turns) == 14 and len(policy.calls) == 14 and not policy.observed
    assert all(t.extraction == "no_code" and t.reward == 0.0 for t in traj.turns)
    # equal rewards: the best window is the latest, so after the first rebuild each turn sees the 4 before it
    assert [t.context for t in traj.turns[:6]] == [[], [0], [0, 1], [0, 1, 2], [0, 1, 2, 3], [1, 2, 3, 4]]
    assert all(t.context == list(range(t.index - 4, t.index)) for t in traj.turns[5:])
    for (conversations, n), turn in zip(policy.calls, traj.turns):
        assert n == 1 and len(conversations) == 1
        assert sum(m["role"] == "assistant" for m in conversations[0]) == len(turn.context)
        assert turn.prompt_chars == sum(len(m["content"]) for m in conversations[0])
    assert traj.turns[5].prompt_tokens == traj.turns[13].prompt_tokens  # bounded, not growing


def test_stts_keeps_the_best_turns_over_real_evaluations(relu_small, relu_solution, tmp_path):
    wrong = relu_solution.replace("tl.where(x > 0, x, 0.0)", "tl.where(x > 0, x, 1.0)")
    raising = relu_solution.replace("x = x.contiguous()", "raise RuntimeError('boom')")
    answers = [fenced(wrong), fenced(relu_solution), NO_CODE, fenced("def f(:\n"), fenced(raising), NO_CODE,
               fenced(relu_solution)]
    policy = TurnScript(answers)
    path = tmp_path / "stts.jsonl"
    traj = run_stts(relu_small, policy, max_user_turns=3, remain_turns=1, iterations=3, strategy="best_window",
                    reward_fn="tiered", jsonl_path=path, device="cpu", correctness_trials=1)
    assert [t.result.error_kind for t in traj.turns] == ["mismatch", None, "no_code", "syntax", "runtime",
                                                         "no_code", None]
    assert traj.rewards == [-0.25, 0.1, -1.0, -1.0, -0.5, -1.0, 0.1]
    assert [t.iteration for t in traj.turns] == [0, 0, 0, 1, 1, 2, 2]
    # each rebuild keeps turn 1, the only correct one so far
    assert [t.context for t in traj.turns] == [[], [0], [0, 1], [1], [1, 3], [1], [1, 5]]
    seen = policy.calls[4][0][0]
    assert [m["role"] for m in seen] == ["user", "assistant", "user", "assistant", "user"]
    assert seen[1]["content"] == answers[1] and seen[3]["content"] == answers[3]
    assert seen[2]["content"] == traj.turns[1].feedback and seen[4]["content"].startswith("FAILED (syntax)")
    assert [code for _, code, _ in policy.observed] == [wrong, relu_solution, "def f(:\n", raising, relu_solution]
    assert all(name == relu_small.name for name, _, _ in policy.observed)
    assert traj.best.index == 1

    [back] = read_jsonl(path)
    assert back == traj and back.to_dict() == traj.to_dict()
    assert back.turns[0].result == traj.turns[0].result and back.schedule["keep"] == 1
    record = json.loads(path.read_text())
    assert record["turns"][2]["code"] is None and record["turns"][2]["extraction"] == "no_code"
    write_jsonl([back, back], path, append=False)
    assert len(read_jsonl(path)) == 2


def test_run_many_samples_per_task_and_writes_each_trajectory(tasks, tmp_path):
    chosen = [tasks["level1/01_relu"].small(), tasks["level1/03_silu"].small()]

    class Recording(ScriptedPolicy):
        calls = []

        def generate(self, messages_batch, n=1, **sampling):
            self.calls.append((len(messages_batch), n, sampling))
            return super().generate(messages_batch, n, **sampling)

    solutions = {t.name: drk.builtin_solution(t) for t in chosen}
    policy = Recording(answers=[fenced(solutions["01_relu"]), NO_CODE])
    path = tmp_path / "many.jsonl"
    trajs = run_many(chosen, policy, episode_schedule(2), samples=2, sampling={"temperature": 0.7},
                     jsonl_path=path, progress=False, max_workers=2, device="cpu", correctness_trials=1)
    assert [(t.task, t.sample) for t in trajs] == [("01_relu", 0), ("01_relu", 1), ("03_silu", 0), ("03_silu", 1)]
    assert Recording.calls == [(2, 2, {"temperature": 0.7}), (4, 1, {"temperature": 0.7})]
    relu_rewards = [t.rewards for t in trajs[:2]]
    assert relu_rewards == [[0.5, 0.0], [0.5, 0.0]]
    silu_first = [t.turns[0].result for t in trajs[2:]]
    assert all(r.error_kind == "mismatch" for r in silu_first)  # relu's code is wrong for silu
    assert all(t.turns[1].context == [0] for t in trajs)
    assert sorted((t.task, t.sample) for t in read_jsonl(path)) == [(t.task, t.sample) for t in trajs]


def test_rolling_context_and_messages(relu_small):
    policy = TurnScript([NO_CODE])
    traj = run_episode(relu_small, policy, max_turns=4, context_turns=1, strategy="last_k", device="cpu")
    assert [t.context for t in traj.turns] == [[], [0], [1], [2]]
    full = run_episode(relu_small, TurnScript([NO_CODE]), max_turns=3, device="cpu")
    assert [t.context for t in full.turns] == [[], [0], [0, 1]]
    messages = build_messages(full.prompt, full.turns, [0, 1], system_prompt="Be brief.")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[-1]["content"] == full.turns[1].feedback
    assert isinstance(Trajectory.from_dict(full.to_dict()), Trajectory)


def test_target_speedup_needs_valid_timings(relu_small):
    env = drk.KernelEnv(relu_small, target_speedup=1.2)
    timed = dict(compiled=True, correct=True, speedup=1.3, timings_valid=True)
    assert env.reached_target(drk.EvalResult(**timed))
    assert not env.reached_target(drk.EvalResult(**{**timed, "speedup": 1.1}))
    assert not env.reached_target(drk.EvalResult(**{**timed, "timings_valid": False}))
    assert not drk.KernelEnv(relu_small).reached_target(drk.EvalResult(**timed))


def test_scripted_policy_replays_files_by_turn_even_with_a_trimmed_context(tmp_path):
    (tmp_path / "turn_1.py").write_text("x = 1\n")
    (tmp_path / "turn_2.md").write_text("Second answer.\n")
    policy = ScriptedPolicy(tmp_path)
    first = [{"role": "user", "content": "task A"}]
    other = [{"role": "user", "content": "task B"}]
    [[a1], [b1]] = policy.generate([first, other])
    assert a1.text == "```python\nx = 1\n```" and b1.text == a1.text
    trimmed = first + [{"role": "user", "content": "feedback"}]  # the context dropped the assistant turn
    [[a2, a2b]] = policy.generate([trimmed], n=2)
    assert a2.text == a2b.text == "Second answer.\n"
    [[a3]] = policy.generate([trimmed])
    assert a3.text == "Second answer.\n"  # past the last file it repeats
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no answers"):
        ScriptedPolicy(tmp_path / "empty")
