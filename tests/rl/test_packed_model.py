"""A small model packed into one file (int8 rows, config and tokenizer inside) loads back as the same model,
within int8 rounding: a real tiny transformer, real safetensors."""

import pytest
import torch

pytest.importorskip("transformers")

from drk_lab.rl.packed_model import dequantize_rows, load_packed, pack_model, packed_config, quantize_rows  # noqa: E402


def test_rows_round_trip_within_half_a_step():
    w = torch.randn(64, 300) * torch.logspace(-3, 1, 64)[:, None]  # rows of very different scales
    values, scale = quantize_rows(w)
    assert values.dtype == torch.int8 and scale.shape == (64,)
    assert ((dequantize_rows(values, scale) - w).abs() <= scale[:, None] / 2 + 1e-12).all()


def test_a_packed_model_gives_the_same_next_tokens(tiny_path, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    original = AutoModelForCausalLM.from_pretrained(tiny_path).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    path = pack_model(tiny_path, tmp_path / "model.safetensors")
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:  # every matrix as int8, with its row scales
        matrices = [name for name in f.keys() if f.get_slice(name).get_dtype() == "I8"]
        assert matrices and all(f"{name}.int8_scale" in f.keys() for name in matrices)
        assert all(f.get_slice(name).get_dtype() in ("I8", "F32") for name in f.keys())
    assert packed_config(path)["hidden_size"] == original.config.hidden_size
    model, loaded_tokenizer = load_packed(path)
    text = "@triton.jit\ndef relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):"
    ids = tokenizer(text, return_tensors="pt").input_ids
    assert loaded_tokenizer(text, return_tensors="pt").input_ids.equal(ids)
    assert loaded_tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == \
        tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    with torch.no_grad():
        a, b = original(ids).logits, model(ids).logits
    assert (a - b).abs().max() < 0.05 * a.abs().max()
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.9


def test_a_file_that_is_not_a_packed_model_is_refused(tmp_path):
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a packed model"):
        load_packed(tmp_path / "other.safetensors")


@pytest.mark.slow
def test_the_shipped_sft_model_unpacks_once_and_writes_in_the_teachers_form(tmp_path):
    # the committed model file itself: unpacked to a Hugging Face folder, it answers a held-out task's prompt the way
    # the SFT set's replies begin (a plan sentence, then the code); a second call reuses the folder
    from drk_lab.agent.env import KernelEnv
    from drk_lab.harness.task import in_repo, load_task_set
    from drk_lab.policies.huggingface import TransformersPolicy
    from drk_lab.rl.tiny_model import SHIPPED_MODELS, unpack_shipped

    folder = unpack_shipped(in_repo(SHIPPED_MODELS["mini_sft"]), tmp_path / "mini_sft")
    made = (folder / "model.safetensors").stat().st_mtime_ns
    assert unpack_shipped(in_repo(SHIPPED_MODELS["mini_sft"]), folder) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == made
    task = load_task_set("data/rl/prompts.jsonl.gz:heldout")[0]
    policy = TransformersPolicy(folder, max_new_tokens=12, device="cpu")
    env = KernelEnv(task, device="cpu")
    env.reset()
    reply = policy.generate([env.messages], temperature=0.0)[0][0]
    assert reply.text.startswith("A first, straightforward version")
