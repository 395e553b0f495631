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
