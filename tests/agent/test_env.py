"""KernelEnv on the CPU path (real workers, the Triton interpreter), code extraction, feedback and
middle truncation with and without a real tokenizer."""

import pytest

import drk_lab as drk
from drk_lab.agent.env import extract_code
from drk_lab.agent.feedback import count_tokens, evaluation_text, format_feedback, truncate_middle
from drk_lab.agent.prompts import REQUEST_FASTER, REQUEST_FIX, initial_prompt
from drk_lab.harness.result import EvalResult


def fenced(code: str, tag: str = "python") -> str:
    return f"```{tag}\n{code}```"


def test_scripted_episode_through_real_evaluations(relu_small, relu_solution):
    broken = relu_solution.replace("tl.where(x > 0, x, 0.0)", "tl.where(x > 0, x, 1.0)")
    assert broken != relu_solution
    env = drk.KernelEnv(relu_small, max_turns=3, device="cpu", correctness_trials=2)
    prompt = env.reset()
    assert "class Model(nn.Module)" in prompt and "ModelNew" in prompt and "@triton.jit" in prompt
    assert "SMALL_SIZES" not in prompt and "dim = 100" in prompt
    assert env.messages == [{"role": "user", "content": prompt}]

    feedback, reward, done, info = env.step("Plan: one pass.\n" + fenced(relu_solution))
    assert info["result"].ok and info["extraction"] == "ok" and info["code"] == relu_solution
    assert reward == 0.5 and not done and info["turn"] == 1  # drkernel on CPU: correct, no speed term
    assert feedback.startswith("CORRECT: all 2 correctness trials passed.")
    assert "interpreter" in feedback and feedback.endswith(REQUEST_FASTER)

    feedback, reward, done, info = env.step(fenced(broken))
    assert info["result"].error_kind == "mismatch" and reward == 0.0 and not done
    assert feedback.startswith("FAILED (mismatch)") and "max abs error" in feedback
    assert feedback.endswith(REQUEST_FIX)

    feedback, reward, done, info = env.step("I am not sure how to do this.")
    assert info["extraction"] == "no_code" and not info["evaluated"] and info["code"] is None
    assert info["result"].error_kind == "no_code" and info["result"].error.startswith("no code:")
    assert reward == 0.0 and done and info["turn"] == 3
    assert feedback.startswith("NOT EVALUATED") and REQUEST_FIX not in feedback  # last turn: no request
    assert [m["role"] for m in env.messages] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    with pytest.raises(RuntimeError):
        env.step(fenced(relu_solution))
    assert env.reset() == prompt and env.turn == 0 and len(env.messages) == 1


def test_reward_fn_and_statically_rejected_code_need_no_worker(relu_small):
    env = drk.KernelEnv(relu_small, max_turns=2, reward_fn="tiered", device="cpu")
    env.reset()
    _, reward, done, info = env.step(fenced("def broken(:\n    pass\n"))
    assert info["result"].error_kind == "syntax" and info["evaluated"] and reward == -1.0 and not done
    _, reward, done, info = env.step("nothing", finish_reason="length")
    assert info["extraction"] == "truncated" and reward == -1.0 and done  # tiered: as bad as unparseable


def test_extract_code_cases():
    a, b = "x = 1\n", "y = 2\n"
    assert extract_code(f"text\n{fenced(a)}\nmore\n{fenced(b)}\nbye") == (b, "ok")
    assert extract_code(f"{fenced(a, 'py')}\n{fenced(b, '')}") == (a, "ok")  # tagged wins over untagged
    assert extract_code(fenced(b, "")) == (b, "ok")
    assert extract_code(f"{fenced(a)}\n```bash\nls\n```") == (a, "ok")
    assert extract_code("  ```Python\n" + a + "  ```\n") == (a, "ok")
    assert extract_code("no fences at all") == (None, "no_code")
    assert extract_code(fenced("\n\n")) == (None, "no_code")
    assert extract_code(f"{fenced(a)}\n```python\nz = 3\n") == (None, "unclosed_block")
    assert extract_code(f"{fenced(a)}\n```python\nz = 3\n", finish_reason="length") == (None, "truncated")
    assert extract_code("Let me think about the tiling of", finish_reason="length") == (None, "truncated")
    assert extract_code(fenced(a) + "\nNow some explanation that was cu", finish_reason="length") == (a, "ok")
    assert extract_code(f"<think>{fenced(a)}</think>\nanswer:\n{fenced(b)}") == (b, "ok")
    assert extract_code(f"<think>{fenced(a)}</think>\nno code after thinking") == (None, "no_code")
    four = "````python\nprint('```')\n````\n"  # a longer fence may hold a shorter one
    assert extract_code(four) == ("print('```')\n", "ok")


def long_traceback(lines: int = 400) -> str:
    body = "\n".join(f'  File "candidate.py", line {i}, in step_{i}\n    value = compute_{i}(x)' for i in range(lines))
    return f"Traceback (most recent call last):\n{body}\nValueError: the final line that matters"


def test_truncate_middle_without_tokenizer_keeps_head_and_tail():
    text = long_traceback()
    assert truncate_middle("short", 100) == "short"
    out = truncate_middle(text, 200)
    assert count_tokens(out) <= 200 and len(out) > 600
    assert out.startswith("Traceback (most recent call last):\n")
    assert out.endswith("ValueError: the final line that matters")
    assert "tokens (estimated) cut from the middle" in out
    assert count_tokens(truncate_middle(text, 3)) <= 3


def test_feedback_fits_budget_with_request_and_keeps_the_error_tail():
    result = EvalResult(error_kind="runtime", error=long_traceback(), stdout="printed line\n" * 500)
    full = evaluation_text(result)
    assert count_tokens(full) > 5000
    feedback = format_feedback(result, max_tokens=300)
    assert count_tokens(feedback) <= 300
    assert feedback.startswith("FAILED (runtime): forward raised an exception.")
    assert feedback.endswith(REQUEST_FIX) and "cut from the middle" in feedback
    assert "ValueError: the final line that matters" in feedback  # the printed output cannot crowd it out
    assert "Your code printed:\nprinted line" in feedback


def test_feedback_reports_gpu_metrics_kernel_table_and_bottleneck():
    kernels = [{"name": "my_kernel", "calls": 1, "total_us": 80.0, "mean_us": 80.0, "share": 0.8,
                "candidate": True, "kind": "kernel"},
               {"name": "elementwise_kernel", "calls": 2, "total_us": 20.0, "mean_us": 10.0, "share": 0.2,
                "candidate": False, "kind": "kernel"}]
    result = EvalResult(compiled=True, correct=True, trials=5, speedup=1.5, speedup_compile=1.1,
                        runtime_ms=0.1, runtime_iqr_ms=0.002, ref_runtime_ms=0.15, ref_compile_runtime_ms=0.11,
                        coverage=0.8, kernels=kernels, timings_valid=True, bandwidth_fraction=0.7,
                        bottleneck="Memory-bound at 70% of copy bandwidth.")
    text = format_feedback(result)
    for piece in ("CORRECT: all 5", "1.50x", "reference 0.1500 ms", "torch.compile: 1.10x", "80%",
                  "70% of the measured copy bandwidth", "* my_kernel", "elementwise_kernel",
                  "Bottleneck: Memory-bound", REQUEST_FASTER):
        assert piece in text, piece


@pytest.fixture(scope="module")
def word_tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.trainers import WordLevelTrainer

    tok = tokenizers.Tokenizer(WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    corpus = ["Traceback most recent call last", "File candidate.py line in value compute x",
              "ValueError the final line that matters", long_traceback(50)]
    tok.train_from_iterator(corpus, WordLevelTrainer(special_tokens=["[UNK]"]))
    return tok


def test_truncate_middle_counts_real_tokens(word_tokenizer):
    text = " ".join(["supercalifragilistic_expialidocious_word"] * 600)  # few tokens, many characters
    assert count_tokens(text, word_tokenizer) == 600 and count_tokens(text) > 5000
    out = truncate_middle(text, 100, word_tokenizer)
    assert count_tokens(out, word_tokenizer) <= 100
    assert len(out) > 4 * 100 * 5  # far more characters than the chars/4 estimate would keep
    assert "tokens cut from the middle" in out and "(estimated)" not in out

    tb = long_traceback()
    out = truncate_middle(tb, 150, word_tokenizer)
    assert count_tokens(out, word_tokenizer) <= 150
    assert out.startswith("Traceback") and out.endswith("that matters")
    result = EvalResult(error_kind="runtime", error=tb)
    assert count_tokens(format_feedback(result, 120, word_tokenizer), word_tokenizer) <= 120


def test_env_uses_the_tokenizer_for_feedback(relu_small, relu_solution, word_tokenizer):
    raising = relu_solution.replace("x = x.contiguous()", 'raise ValueError("overflowing " * 3000)')
    assert raising != relu_solution
    env = drk.KernelEnv(relu_small, max_turns=2, tokenizer=word_tokenizer, feedback_tokens=60, device="cpu",
                        correctness_trials=1)
    env.reset()
    feedback, _, _, info = env.step(fenced(raising))
    assert info["result"].error_kind == "runtime" and feedback.startswith("FAILED (runtime)")
    assert count_tokens(feedback, word_tokenizer) <= 60
    assert "tokens cut from the middle" in feedback and "(estimated)" not in feedback


def test_initial_prompt_of_every_level(tasks):
    for name in ("level1/08_softmax", "level2/01_linear_bias_relu", "level3/02_causal_attention"):
        prompt = initial_prompt(tasks[name])
        assert tasks[name].source.splitlines()[0] in prompt
        assert "get_init_inputs" in prompt and "```python" in prompt
        assert extract_code(prompt)[1] == "ok"  # the example parses as a block too
