"""A tiny, randomly initialised Qwen3-style causal LM with a locally trained tokenizer.

For tests and smoke runs of everything that needs a real transformer (the transformers policy, the
RL trainer, supervised fine-tuning) without downloading anything:

    path = make_tiny_model("/tmp/tiny")          # a Hugging Face folder: config, safetensors, tokenizer
    model, tokenizer = load_tiny(path)           # or AutoModelForCausalLM / AutoTokenizer.from_pretrained

The tokenizer is a byte-level BPE (any text encodes) trained on a small built-in corpus of Python and
Triton code, with ChatML-style turns as in Qwen's chat template (<|im_start|>role ... <|im_end|>).
<|im_end|> is the end-of-sequence token and <|endoftext|> the padding token. The weights are random, so
generations are noise; the point is the real code path (chat template, padding, caching, sampling).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

TINY_MODEL_VERSION = 3  # bump when the recipe below changes; stale folders are rebuilt

IM_START, IM_END, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"

# {% generation %} marks what an assistant turn generates (its content and the <|im_end|> that ends it) for
# assistant-only loss masks (tokenizer.apply_chat_template(..., return_assistant_tokens_mask=True), TRL's
# assistant_only_loss); the rendered text is the same as without the markers. An assistant message with
# "train": False (a planted bug's reply in a repair row, drk_lab.data.bugs) is left unmarked: context, no loss.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- if message['train'] is defined and message['train'] == false -%}"
    "{{ message['content'] + '<|im_end|>' }}"
    "{%- else -%}"
    "{%- generation -%}{{ message['content'] + '<|im_end|>' }}{%- endgeneration -%}"
    "{%- endif -%}"
    "{{ '\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

CORPUS = [
    "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n",
    "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
    "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        return torch.relu(x)\n",
    "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
    "    def forward(self, x):\n        out = torch.empty_like(x)\n        n_elements = x.numel()\n"
    "        grid = lambda meta: (triton.cdiv(n_elements, meta['BLOCK_SIZE']),)\n"
    "        relu_kernel[grid](x, out, n_elements, BLOCK_SIZE=1024)\n        return out\n",
    "@triton.jit\ndef relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):\n"
    "    pid = tl.program_id(axis=0)\n    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n"
    "    mask = offsets < n_elements\n    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)\n"
    "    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)\n",
    "@triton.jit\ndef layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):\n"
    "    row = tl.program_id(0)\n    cols = tl.arange(0, BLOCK)\n    mask = cols < n_cols\n"
    "    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)\n"
    "    mean = tl.sum(x, axis=0) / n_cols\n    diff = tl.where(mask, x - mean, 0.0)\n"
    "    var = tl.sum(diff * diff, axis=0) / n_cols\n    rstd = 1.0 / tl.sqrt(var + eps)\n"
    "    w = tl.load(w_ptr + cols, mask=mask)\n    b = tl.load(b_ptr + cols, mask=mask)\n"
    "    tl.store(y_ptr + row * stride + cols, diff * rstd * w + b, mask=mask)\n",
    "@triton.jit\ndef matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,\n"
    "                  stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):\n"
    "    pid_m = tl.program_id(0)\n    pid_n = tl.program_id(1)\n"
    "    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)\n"
    "    offs_k = tl.arange(0, BLOCK_K)\n    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
    "    for k in range(0, tl.cdiv(K, BLOCK_K)):\n"
    "        a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k * BLOCK_K + offs_k)[None, :] * stride_ak)\n"
    "        b = tl.load(b_ptr + (k * BLOCK_K + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn)\n"
    "        acc += tl.dot(a, b)\n"
    "    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc)\n",
    "def get_inputs():\n    x = torch.randn(batch_size, dim, device='cuda')\n    return [x]\n\n"
    "def get_init_inputs():\n    return []\n\nbatch_size = 16\ndim = 16384\n",
    "You are an expert in writing fast, correct Triton kernels. Write a ModelNew that replaces the "
    "PyTorch operators with custom Triton kernels. Return the code in a fenced python block.\n",
    "The kernel compiled and the output is correct. Speedup over eager PyTorch: 1.35x. "
    "Coverage of the Triton kernels: 0.92. Please improve the performance of ModelNew.\n",
    "The output does not match the reference: max abs difference 0.031 with tolerance 0.01. "
    "Fix the kernel and return the full code.\n",
    "```python\nimport torch\nimport triton\n```\n",
]


def train_tokenizer(vocab_size: int = 1024, corpus: list[str] | None = None):
    """The byte-level BPE trained on `corpus` (default: CORPUS), wrapped as a PreTrainedTokenizerFast with
    the chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[END_OF_TEXT, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus if corpus is not None else CORPUS * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        additional_special_tokens=[IM_START],
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_config(tokenizer, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4,
                num_kv_heads: int | None = None, head_dim: int | None = None, intermediate_size: int | None = None,
                max_positions: int = 4096):
    """A Qwen3Config for `tokenizer` with tied embeddings; unset sizes follow the tiny model's proportions
    (half as many key-value heads, heads of hidden_size / num_heads, an MLP three times hidden_size)."""
    from transformers import Qwen3Config

    vocab_size = -(-len(tokenizer) // 64) * 64  # room to spare, a multiple of 64 as real models use
    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or hidden_size * 3,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads or num_heads // 2,
        head_dim=head_dim or hidden_size // num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )


def _recipe(seed: int) -> dict:
    return {"tiny_model_version": TINY_MODEL_VERSION, "seed": seed}


def make_tiny_model(path: str | os.PathLike, seed: int = 0) -> Path:
    """Write the tiny model and tokenizer to `path` (a Hugging Face folder) and return it as a Path.

    Idempotent: a folder already built by the same recipe and seed is left as it is. The same seed
    gives the same weights.
    """
    import torch
    from transformers import GenerationConfig, Qwen3ForCausalLM

    path = Path(path)
    marker = path / "tiny_model.json"
    if marker.exists() and json.loads(marker.read_text()) == _recipe(seed):
        return path

    tokenizer = train_tokenizer()
    config = tiny_config(tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config).float().eval()
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )

    building = path.with_name(f"{path.name}.building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    model.save_pretrained(building)
    tokenizer.save_pretrained(building)
    (building / "tiny_model.json").write_text(json.dumps(_recipe(seed)))
    return move_into_place(building, path)


def move_into_place(building: Path, path: Path) -> Path:
    """A folder built beside `path` takes its place whole, so that a reader never sees a half-written one."""
    shutil.rmtree(path, ignore_errors=True)
    try:
        os.rename(building, path)
    except OSError:  # another process finished the same folder first
        shutil.rmtree(building, ignore_errors=True)
    return path


def load_tiny(path: str | os.PathLike, seed: int = 0):
    """(model, tokenizer) from `path`, building the folder first when it is missing."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = make_tiny_model(path, seed=seed)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    return model, tokenizer


# the mini recipe's SFT model (27M parameters, experiments/rl_arm/make_sft.sh): it writes kernels for the generated
# tasks of data/rl, so RL from it has a reward signal without forced solutions
SHIPPED_MODELS = {"mini_sft": "data/models/mini_sft.safetensors.xz"}


def model_path(spec: str, folder: str | os.PathLike = "runs/tiny_model") -> str:
    """A model to load (a notebook's `model` parameter): "tiny" builds (once) the tiny random model in
    `folder`; "mini_sft" unpacks (once) the shipped SFT model into runs/models/mini_sft; anything else is a
    local Hugging Face folder and is returned as it is."""
    from drk_lab.harness.task import in_repo

    if spec == "tiny":
        return str(make_tiny_model(in_repo(folder)))
    if spec in SHIPPED_MODELS:
        return str(unpack_shipped(in_repo(SHIPPED_MODELS[spec]), in_repo("runs/models") / spec))
    if not Path(spec).expanduser().is_dir():
        raise FileNotFoundError(f"model {spec!r}: no such folder (give a local Hugging Face model folder, "
                                f"'tiny' or {', '.join(map(repr, SHIPPED_MODELS))})")
    return spec


def unpack_shipped(packed_xz: Path, path: Path) -> Path:
    """A Hugging Face folder at `path` from a packed, xz-compressed model file (rl/packed_model.py), made
    once: a complete folder is reused."""
    import lzma
    import tempfile

    from drk_lab.rl.packed_model import unpack_model

    if (path / "config.json").is_file() and (path / "model.safetensors").is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    with lzma.open(packed_xz) as src, open(building / "packed.safetensors", "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    unpack_model(building / "packed.safetensors", building)
    (building / "packed.safetensors").unlink()
    return move_into_place(building, path)
