"""Can a small model learn the operator drills, and does it carry to held-out operator combinations?

    python experiments/drills/learnability.py --steps 1500 --drills 60000      # about 12 minutes on 2 CPU cores
    python experiments/drills/learnability.py --hidden 256 --layers 4          # a wider model, the same drills and steps
    python experiments/drills/learnability.py --drills 30000 --epilogue-drills 30000   # half in the epilogue form

A 4-layer model (hidden 128; --hidden, --layers, --lr and --seed change it) with its own tokenizer is
pretrained (rl/pretrain.py) on nothing but operator drills from tasks sampled afresh with train-side
combinations. Then, given a drill's forward lines and the kernel's first line, it writes the chain
greedily; the score is the share of chains written exactly (kernels_rows.chain_written against
chain_wanted), and per position in the chain, on 100 drills it was trained on and on 100 tasks of the RL
set's held-out split (--chains). The same held-out tasks with a linear or conv head are scored in the
epilogue form too (operator_drill's `epilogue`: the chain inside the GEMM or conv tile, where the teacher's
second reply fuses it), whether or not training had any such drill (--epilogue-drills). A check of the
drill as training data, run on a CPU; the mini run (experiments/mini/run.py) mixes the drills into its
pretraining.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def drill_prompt(tokenizer, spec, epilogue: bool = False) -> list[int]:
    """The drill's own tokens up to the end of its `v = h` line. Cutting the text after that line's newline
    instead ends the prompt on a lone newline token, which in training comes only before the end of a
    text: a model that learned that much ends the drill there and writes one of its own."""
    from experiments.mini.texts import drill_chain_span, operator_drill

    drill = operator_drill(spec, epilogue)
    cut, _ = drill_chain_span(drill)
    whole = tokenizer(drill, add_special_tokens=False, return_offsets_mapping=True)
    return [t for t, (_, end) in zip(whole["input_ids"], whole["offset_mapping"]) if end <= cut]


def written_chain(model, tokenizer, spec, epilogue: bool = False) -> tuple[list[str], str]:
    """The chain the model writes greedily after drill_prompt, and its text."""
    import torch

    from drk_lab.data.kernels_rows import chain_written

    ids = torch.tensor([drill_prompt(tokenizer, spec, epilogue)])
    out = model.generate(ids, max_new_tokens=200, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    text = tokenizer.decode(out[0, ids.shape[1]:])
    return chain_written(text.split("tl.store")[0]), text


def score(model, tokenizer, specs, epilogue: bool = False) -> dict:
    from drk_lab.data.kernels_rows import chain_wanted

    exact, positions, examples = 0, Counter(), []
    for spec in specs:
        (got, text), want = written_chain(model, tokenizer, spec, epilogue), chain_wanted(spec)
        exact += got == want
        if len(examples) < 3:  # what a score of nearly nothing is made of: wrong operators, or no chain at all
            examples.append({"wanted": want, "written": got, "text": text[:300]})
        for i, step in enumerate(want):
            positions[f"position {i} right" if i < len(got) and got[i] == step else f"position {i} wrong"] += 1
    return {"chains": len(specs), "exact": exact, **dict(sorted(positions.items())), "examples": examples}


def train_drill_model(texts: list[str], out: Path, *, steps: int, hidden: int, layers: int, lr: float,
                      seed: int) -> dict:
    """A tokenizer and a `layers`-layer model (heads of 32 dimensions) pretrained on `texts` alone, saved
    in `out`; returns rl/pretrain.py's result (its losses and seconds)."""
    from drk_lab.rl.pretrain import packed_rows, pretrain
    from drk_lab.rl.tiny_model import train_tokenizer
    from experiments.mini.model import build_model
    from experiments.mini.settings import ModelSettings

    heads = hidden // 32
    size = ModelSettings(vocab_size=1024, hidden_size=hidden, num_layers=layers, num_heads=heads,
                         num_kv_heads=max(heads // 2, 1), head_dim=32, intermediate_size=3 * hidden, max_positions=1024)
    tokenizer = train_tokenizer(1024, corpus=texts[:3000])
    with tempfile.TemporaryDirectory() as tmp:
        init = build_model(tokenizer, size, Path(tmp) / "init", seed=seed)
        return pretrain(init, packed_rows(texts, tokenizer, 512, seed=seed), out, steps=steps, batch=8, lr=lr, seed=seed)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--drills", type=int, default=60000)
    p.add_argument("--epilogue-drills", type=int, default=0, help="drills in the epilogue form, tasks with a head")
    p.add_argument("--chains", type=int, default=100, help="chains written per score (trained, held-out)")
    p.add_argument("--hidden", type=int, default=128, help="model width (heads of 32 dimensions)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (warmup, then cosine)")
    p.add_argument("--seed", type=int, default=0, help="the model's initial weights and the batches' order")
    p.add_argument("--rl-data", default=str(REPO / "data" / "rl" / "prompts.jsonl.gz"))
    args = p.parse_args()
    if not Path(args.rl_data).is_file():
        sys.exit(f"--rl-data {args.rl_data}: no such file (the RL prompt set from `drk data rl`)")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from drk_lab.data.export import read_rl_tasks
    from drk_lab.data.kernels_rows import chain_wanted
    from experiments.mini.texts import fresh_train_specs, operator_drill

    rows = read_rl_tasks(args.rl_data, split=None)
    rule = json.loads(Path(args.rl_data).with_name("summary.json").read_text())
    train = fresh_train_specs(args.drills, rows, rule.get("heldout_fraction"), rule.get("seed", 0), seed=20_000)
    heldout = [spec for spec, _, row in rows if row["split"] == "heldout" and chain_wanted(spec)][: args.chains]
    epilogue = fresh_train_specs(args.epilogue_drills, rows, rule.get("heldout_fraction"), rule.get("seed", 0),
                                 seed=30_000, with_head=True)
    texts = [operator_drill(spec) for spec in train] + [operator_drill(spec, epilogue=True) for spec in epilogue]
    with tempfile.TemporaryDirectory() as tmp:
        result = train_drill_model(texts, Path(tmp) / "out", steps=args.steps, hidden=args.hidden, layers=args.layers,
                                   lr=args.lr, seed=args.seed)
        model = AutoModelForCausalLM.from_pretrained(Path(tmp) / "out").eval()
        tokenizer = AutoTokenizer.from_pretrained(Path(tmp) / "out")
        report = {"steps": args.steps, "drills": len(train), "epilogue_drills": len(epilogue),
                  "hidden": args.hidden, "layers": args.layers, "lr": args.lr, "seed": args.seed,
                  "parameters": sum(p.numel() for p in model.parameters()), "first_loss": result["loss"][0],
                  "last_loss": result["loss"][-1], "seconds": result["train_seconds"],
                  "trained_drills": score(model, tokenizer, train[: args.chains]),
                  "heldout_combinations": score(model, tokenizer, heldout),
                  "heldout_combinations_epilogue": score(model, tokenizer, [s for s in heldout if s.head], True)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
