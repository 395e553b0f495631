"""A whole small causal LM in one safetensors file: its config, its tokenizer and its weights, the matrices
stored as int8 with one float32 scale per row, everything else (norms, biases) as float32.

    pack_model("runs/sft/model", "data/models/mini_sft.safetensors")   # a Hugging Face folder -> one file
    model, tokenizer = load_packed("data/models/mini_sft.safetensors")  # -> transformers model and tokenizer
    folder = unpack_model("data/models/mini_sft.safetensors", "/tmp/mini_sft")  # -> a Hugging Face folder

Why int8: the file must live in the repository and travel to a GPU machine with the rest of it (64 MiB
for the whole working tree), and a 27M-parameter model is 54 MB in bf16. Rows scaled to their largest
absolute value lose about 0.4% of a weight at most; whatever the file holds *is* the model (every
comparison, the SFT baseline included, loads it through load_packed), so nothing is compared against
weights that no longer exist. The file is plain safetensors: the config and tokenizer files are strings
in its metadata.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

FORMAT = "drk_lab.packed_model/1"
SCALE = ".int8_scale"  # the suffix of a matrix's row scales
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 values and one float32 scale per row (its largest absolute value / 127)."""
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1, keepdim=True) / 127.0).clamp_min(torch.finfo(torch.float32).tiny)
    return torch.round(w / scale).clamp_(-127, 127).to(torch.int8), scale.squeeze(1)


def dequantize_rows(values: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return values.float() * scale[:, None]


def pack_model(folder: str | Path, path: str | Path) -> Path:
    """A Hugging Face model folder (config.json, weights, tokenizer) -> one file."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    folder, path = Path(folder), Path(path)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tensors = {}
    for name, tensor in model.state_dict().items():
        if name in tensors or any(tensor.data_ptr() == t.data_ptr() for t in tensors.values() if t.dtype == tensor.dtype):
            continue  # a tied weight (the output layer shares the embedding): stored once, tied again on load
        if tensor.dim() == 2:
            tensors[name], tensors[name + SCALE] = quantize_rows(tensor)
        else:
            tensors[name] = tensor.detach().float().contiguous()
    metadata = {"format": FORMAT, "config.json": (folder / "config.json").read_text()}
    for name in TOKENIZER_FILES:
        if (folder / name).is_file():
            metadata[name] = (folder / name).read_text()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=metadata)
    return path


def unpack_model(path: str | Path, folder: str | Path, dtype: torch.dtype = torch.float32) -> Path:
    """One file -> a Hugging Face model folder (weights dequantized to `dtype`), for anything that loads
    models by path."""
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
        if metadata.get("format") != FORMAT:
            raise ValueError(f"{path}: not a packed model (format {metadata.get('format')!r}, expected {FORMAT})")
        for name, text in metadata.items():
            if name != "format":
                (folder / name).write_text(text)
        state = {}
        for name in f.keys():
            if name.endswith(SCALE):
                continue
            values = f.get_tensor(name)
            state[name] = dequantize_rows(values, f.get_tensor(name + SCALE)) if values.dtype == torch.int8 else values
    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False,
                                                assign=True)
    if unexpected or any(not _tied(model, name) for name in missing):
        raise ValueError(f"{path}: weights do not fit the config (missing {missing[:3]}, unexpected {unexpected[:3]})")
    model.tie_weights()
    model.save_pretrained(folder)
    return folder


def _tied(model, name: str) -> bool:
    return bool(getattr(model.config, "tie_word_embeddings", False)) and name.endswith("lm_head.weight")


def load_packed(path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    """(model, tokenizer) from one packed file, the model in eval mode on `device`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory() as folder:
        unpack_model(path, folder, dtype)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
    return model, tokenizer


def packed_config(path: str | Path) -> dict:
    """The model's config, read from the file's metadata alone."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return json.loads((f.metadata() or {})["config.json"])
