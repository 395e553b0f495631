"""A model's second reply to another run's recorded first turns: does it keep the task's pointwise chain?

    python experiments/mini/second_reply.py --trajectories T/eval_sft_heldout.jsonl --model runs/mini/sft --out R.json

From an evaluation's held-out trajectories (experiments/mini/run.py writes eval_<checkpoint>_heldout.jsonl),
take every episode whose first reply wrote the task's chain exactly (kernels_rows.chain_written against
chain_wanted), rebuild the conversation its second turn saw (the prompt, that first reply, the harness's
feedback on it), and let the model write the second reply (temperature 0.7 and seed 0, the evaluation's).
Its chain is compared with the task's, beside the recorded second reply's. Every model answers the same
contexts, so two models' counts pair episode by episode, with no evaluation in the way (a chain is read
from the text; whether the kernel is right otherwise is not checked). Generation runs on a CPU too (a 27M
model: about 3 minutes for a batch of 16 second replies on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def kept_contexts(trajectories: Path, rl_data: Path) -> list[dict]:
    """The episodes whose first reply wrote the chain, with what the second turn saw and wrote."""
    from drk_lab.agent.context import build_messages
    from drk_lab.agent.trajectory import read_jsonl
    from drk_lab.data.export import read_rl_tasks
    from drk_lab.data.kernels_rows import chain_wanted, chain_written

    specs = {task.name: spec for spec, task, _ in read_rl_tasks(rl_data)}
    rows = []
    for t in read_jsonl(trajectories):
        spec = specs.get(t.task)
        if spec is None or len(t.turns) < 2 or not chain_wanted(spec) or not t.turns[0].code:
            continue
        if chain_written(t.turns[0].code) != chain_wanted(spec):
            continue
        rows.append({"task": t.task, "head": spec.head or "none", "wanted": chain_wanted(spec),
                     "messages": build_messages(t.prompt, t.turns, [0], t.system_prompt),
                     "recorded_kept": chain_written(t.turns[1].code or "") == chain_wanted(spec)})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trajectories", required=True, help="eval_<checkpoint>_heldout.jsonl of a mini run")
    p.add_argument("--model", required=True, help="a local Hugging Face model folder (with its tokenizer)")
    p.add_argument("--rl-data", default=str(REPO / "data" / "rl" / "prompts.jsonl.gz"))
    p.add_argument("--limit", type=int, default=None, help="only the first N episodes")
    p.add_argument("--batch", type=int, default=16, help="conversations generated at once")
    p.add_argument("--max-new-tokens", type=int, default=1792)
    p.add_argument("--out", required=True, help="the report (JSON)")
    args = p.parse_args(argv)
    for path in (Path(args.trajectories), Path(args.model) / "config.json"):
        if not path.exists():
            sys.exit(f"second_reply: {path} does not exist")

    import torch
    from tqdm.auto import tqdm

    from drk_lab.agent.extraction import extract_code
    from drk_lab.data.kernels_rows import chain_written
    from drk_lab.rl.sampler import StaticCachePolicy

    rows = kept_contexts(Path(args.trajectories), Path(args.rl_data))[: args.limit]
    policy = StaticCachePolicy(args.model, dtype=torch.float32)
    for start in tqdm(range(0, len(rows), args.batch), desc="second replies", unit="batch"):
        chunk = rows[start:start + args.batch]
        answers = policy.generate([r["messages"] for r in chunk], n=1, temperature=0.7,
                                  max_new_tokens=args.max_new_tokens, seed=start)
        for row, (completion,) in zip(chunk, answers):
            code, _ = extract_code(completion.text, completion.finish_reason)
            row["written"] = chain_written(code or "")
            row["kept"] = row["written"] == row["wanted"]
    counts = Counter()
    for r in rows:
        for kind in (r["head"], "all"):
            counts[kind, "episodes"] += 1
            counts[kind, "kept"] += r["kept"]
            counts[kind, "recorded_kept"] += r["recorded_kept"]
            counts[kind, "kept_only_here"] += r["kept"] and not r["recorded_kept"]
            counts[kind, "kept_only_recorded"] += r["recorded_kept"] and not r["kept"]
    kinds = sorted({kind for kind, _ in counts})
    report = {"trajectories": args.trajectories, "model": args.model,
              "by_head": {k: {m: counts[k, m] for m in ("episodes", "kept", "recorded_kept", "kept_only_here",
                                                         "kept_only_recorded")} for k in kinds},
              "episodes": [{k: r[k] for k in ("task", "head", "wanted", "written", "kept", "recorded_kept")}
                           for r in rows]}
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report["by_head"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
