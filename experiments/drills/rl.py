"""Does RL that pays for reading a task carry to operator combinations it never trained on?

    python experiments/drills/rl.py --work /tmp/drill_rl                        # about 40 minutes on 2 CPU cores
    python experiments/drills/rl.py --work /tmp/drill_rl --arms trloo --lr 1e-4  # the same starting model, reused
    python experiments/drills/rl.py --summarize data/runs/2026-12-05_drill_rl_cpu   # its figure and results.json

The mini run (experiments/mini/run.py) has not shown RL raising held-out correctness over SFT, and its
replies fail mostly by computing the wrong operators. This check asks whether the RL update itself can
teach reading that carries to unseen combinations, where nothing else is in the way. A drill model (as in
experiments/drills/learnability.py, with fewer pretraining steps, so that it writes only part of the chains
right) is the starting point. Each RL step takes `--prompts` train-side tasks never seen in pretraining,
samples `--samples` completions of each drill prompt at `--temperature` (1; the loss scores the model at
the same temperature, as the trainer does), and rewards a completion 1 when it writes the task's chain
exactly (kernels_rows.chain_written against chain_wanted), else 0. The update uses the project's own
pieces: rl/sampler.py's sample_tokens, rl/advantages.py (with one turn, TRLOO is the leave-one-out baseline
over a group's samples) and rl/loss.py's clipped loss, in `--updates` mini-batches per step. Arms, each
from the same starting model:

- `trloo`: the advantages as computed;
- `supervised`: next-token training on the teacher's drill for the same prompts (one per sample), as
  more pretraining would do with the same tasks.

Scores, greedy, at the start and every `--score-every` steps: chains written exactly on `--chains` tasks
of the RL set's held-out split (combinations in neither pretraining nor RL) and on as many fresh
train-side tasks (combinations pretraining saw, tasks it did not). A check of the method on a CPU, not a
measurement of kernels: nothing is compiled or run; the reward reads the written operators only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

ARMS = ("trloo", "supervised")
# the recorded runs of 2026-12-05 also had a control, TRLOO's values shuffled within each group (LOG.md)
COLORS = {"trloo": "#1f77b4", "shuffled_in_group": "#7f7f7f", "supervised": "#2ca02c"}


def chain_right(tokenizer, spec, token_ids: list[int]) -> bool:
    from drk_lab.data.kernels_rows import chain_wanted, chain_written

    text = tokenizer.decode(token_ids, skip_special_tokens=True)
    return chain_written(text.split("tl.store")[0]) == chain_wanted(spec)


def completions(model, tokenizer, prompts: list[list[int]], max_new: int, temperature: float, generator=None):
    """Token ids of each completion up to and including its end-of-text token (rl/sampler.py)."""
    from drk_lab.rl.sampler import sample_tokens

    stop = tokenizer.pad_token_id  # packed_rows ends every pretraining text with it
    tokens, _, _, _ = sample_tokens(model, prompts, max_new, pad_token_id=stop, stop_token_ids=[stop],
                                    temperature=temperature, generator=generator)
    out = []
    for row in tokens.tolist():
        end = row.index(stop) + 1 if stop in row else len(row)
        out.append(row[:end])
    return out


def score(model, tokenizer, specs, prompts, max_new: int) -> int:
    model.eval()
    return sum(chain_right(tokenizer, spec, ids)
               for spec, ids in zip(specs, completions(model, tokenizer, prompts, max_new, temperature=0.0)))


def token_rows(prompts: list[list[int]], replies: list[list[int]], pad: int):
    """Right-padded rows of prompt + reply, and the mask of the reply's tokens (the trained ones)."""
    import torch

    width = max(len(p) + len(r) for p, r in zip(prompts, replies))
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attention = torch.zeros_like(ids)
    trained = torch.zeros_like(ids, dtype=torch.bool)
    for i, (p, r) in enumerate(zip(prompts, replies)):
        ids[i, :len(p) + len(r)] = torch.tensor(p + r)
        attention[i, :len(p) + len(r)] = 1
        trained[i, len(p):len(p) + len(r)] = True
    positions = torch.arange(width).expand(len(prompts), width)
    return {"input_ids": ids, "attention_mask": attention, "position_ids": positions}, trained


def rl_step(model, optimizer, tokenizer, arm: str, specs, prompts, args, generator) -> dict:
    """One step of `arm` on `specs` (their drill prompts `prompts`): sample, reward, update."""
    import torch

    from experiments.mini.texts import operator_drill
    from drk_lab.rl.advantages import trloo
    from drk_lab.rl.logprobs import sequence_logprobs
    from drk_lab.rl.loss import clipped_policy_loss

    model.eval()
    rep_specs = [s for s in specs for _ in range(args.samples)]
    rep_prompts = [p for p in prompts for _ in range(args.samples)]
    replies = completions(model, tokenizer, rep_prompts, args.max_new, args.temperature, generator)
    rewards = torch.tensor([[float(chain_right(tokenizer, s, r))] for s, r in zip(rep_specs, replies)])
    group = torch.arange(len(specs)).repeat_interleave(args.samples)
    valid = torch.ones_like(rewards, dtype=torch.bool)
    adv = trloo(rewards, group, valid)
    if arm == "supervised":  # the teacher's drill after the same prompt, once per sample
        teacher = [tokenizer(operator_drill(s), add_special_tokens=False)["input_ids"] + [tokenizer.pad_token_id]
                   for s in rep_specs]
        replies = [t[len(p):] for t, p in zip(teacher, rep_prompts)]  # drill_prompt is a token prefix of the drill
    rows, trained = token_rows(rep_prompts, replies, tokenizer.pad_token_id)
    with torch.no_grad():
        old_logp = sequence_logprobs(model, rows, temperature=args.temperature)
    model.train()
    order = torch.randperm(len(replies), generator=generator)
    for index in order.chunk(args.updates):
        part = {k: v[index] for k, v in rows.items()}
        # the policy that sampled is the tempered model; the supervised arm's loss is the raw model's
        logp = sequence_logprobs(model, part, temperature=1.0 if arm == "supervised" else args.temperature)
        if arm == "supervised":
            loss = -(logp * trained[index]).sum() / trained[index].sum()
        else:
            tok_adv = adv[index].expand_as(logp)
            loss, _ = clipped_policy_loss(logp, old_logp[index], tok_adv, trained[index], num_sequences=len(index))
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    solved = rewards.view(len(specs), args.samples)
    return {"reward": float(rewards.mean()), "groups_all_same": int(((solved == 0).all(1) | (solved == 1).all(1)).sum()),
            "grad_norm": float(grad_norm)}


def starting_model(args, train_specs) -> Path:
    """The drill model every arm starts from, made once per --work folder (its settings in start.json)."""
    from experiments.drills.learnability import train_drill_model

    from experiments.mini.texts import operator_drill

    work = Path(args.work)
    wanted = {"steps": args.pretrain_steps, "drills": args.drills, "hidden": args.hidden, "seed": args.seed}
    record = work / "start.json"
    if record.exists() and json.loads(record.read_text())["settings"] == wanted:
        return work / "start"
    texts = [operator_drill(spec) for spec in train_specs]
    result = train_drill_model(texts, work / "start", steps=args.pretrain_steps, hidden=args.hidden, layers=4, lr=2e-3,
                               seed=args.seed)
    record.write_text(json.dumps({"settings": wanted, "last_loss": result["loss"][-1],
                                  "seconds": result["train_seconds"]}))
    return work / "start"


def scores_figure(reports: dict[str, dict]):
    """Chains written exactly against RL step, held-out and train-side side by side: a color per arm, a
    dash per report (e.g. one per seed, named by the keys)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    dashes = ("solid", "dash", "dot", "dashdot")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("held-out combinations", "fresh train-side tasks"))
    for i, (name, report) in enumerate(reports.items()):
        for arm, run in report["arms"].items():
            for col, split in enumerate(("heldout", "train_side"), start=1):
                fig.add_trace(go.Scatter(x=[p["step"] for p in run["scores"]], y=[p[split] for p in run["scores"]],
                                         mode="lines+markers", name=f"{arm}, {name}", legendgroup=f"{arm}, {name}",
                                         showlegend=col == 1,
                                         line={"color": COLORS[arm], "dash": dashes[i % len(dashes)]}),
                              row=1, col=col)
    chains = next(iter(reports.values()))["chains"]["heldout"]
    fig.update_xaxes(title_text="RL step")
    fig.update_yaxes(title_text=f"chains written exactly (greedy, of {chains})", col=1)
    fig.update_layout(title="RL on operator drills", height=420, width=1000)
    return fig


def read_reports(folder: Path) -> dict[str, dict]:
    """{"seed0/report_temp1": report} for every report in the run folder's seed subfolders."""
    return {f"{f.parent.name}/{f.stem}": json.loads(f.read_text()) for f in sorted(folder.glob("*/report*.json"))}


SCHEMA_VERSION = 1  # results.json: bump when a key changes meaning


def write_results(folder: Path, reports: dict[str, dict]) -> Path:
    """results.json: per report and arm, the chains written exactly at each scored step (held-out and fresh
    train-side tasks, of `chains` each); date, commit and machine stay as an earlier results.json had them."""
    path = folder / "results.json"
    known = json.loads(path.read_text()) if path.exists() else {}
    out = {"schema_version": SCHEMA_VERSION, **{k: known.get(k) for k in ("date", "commit", "machine")},
           "chains": next(iter(reports.values()))["chains"],
           "scores": {name: {arm: [[p["step"], p["heldout"], p["train_side"]] for p in run["scores"]]
                             for arm, run in report["arms"].items()} for name, report in reports.items()}}
    path.write_text(json.dumps(out, indent=1) + "\n")
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", help="folder for the starting model and the report (made if missing)")
    p.add_argument("--summarize", metavar="FOLDER",
                   help="no run: FOLDER/*/report*.json (a subfolder per seed) into FOLDER/figures/drill_rl.{html,png} "
                        "and FOLDER/results.json")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    p.add_argument("--pretrain-steps", type=int, default=400)
    p.add_argument("--drills", type=int, default=60000)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--seed", type=int, default=0, help="the starting model's weights and batches; RL's sampling")
    p.add_argument("--steps", type=int, default=150, help="RL steps per arm")
    p.add_argument("--prompts", type=int, default=16, help="tasks per RL step")
    p.add_argument("--samples", type=int, default=8, help="completions per task")
    p.add_argument("--updates", type=int, default=4, help="optimizer steps (mini-batches) per RL step")
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--temperature", type=float, default=1.0, help="of the rollouts (the scores stay greedy)")
    p.add_argument("--max-new", type=int, default=160)
    p.add_argument("--chains", type=int, default=200, help="tasks per score (held-out, train-side)")
    p.add_argument("--score-every", type=int, default=50)
    p.add_argument("--report", default="report.json", help="the report's file name inside --work")
    p.add_argument("--rl-data", default=str(REPO / "data" / "rl" / "prompts.jsonl.gz"))
    args = p.parse_args()
    if args.summarize:
        folder = Path(args.summarize)
        reports = read_reports(folder)
        if not reports:
            sys.exit(f"--summarize {folder}: no */report*.json there")
        from drk_lab.viz.plots import save_figure

        print(write_results(folder, reports), *save_figure(scores_figure(reports), str(folder.resolve() / "figures" / "drill_rl")))
        return
    if not args.work:
        p.error("--work is needed for a run")
    if not Path(args.rl_data).is_file():
        sys.exit(f"--rl-data {args.rl_data}: no such file (the RL prompt set from `drk data rl`)")
    arms = args.arms.split(",")
    if unknown := [a for a in arms if a not in ARMS]:
        sys.exit(f"--arms: unknown {', '.join(unknown)} (choose from {', '.join(ARMS)})")
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from drk_lab.data.export import read_rl_tasks
    from drk_lab.data.kernels_rows import chain_wanted
    from experiments.mini.texts import fresh_train_specs

    from experiments.drills.learnability import drill_prompt

    rows = read_rl_tasks(args.rl_data, split=None)
    rule = json.loads(Path(args.rl_data).with_name("summary.json").read_text())
    fraction, split_seed = rule.get("heldout_fraction"), rule.get("seed", 0)
    pretrain_specs = fresh_train_specs(args.drills, rows, fraction, split_seed, seed=20_000)
    seen = {s.key for s in pretrain_specs}
    # RL's prompts and the train-side score's tasks: fresh, chained, and none of pretraining's
    fresh = [s for s in fresh_train_specs(4 * args.steps * args.prompts + 4 * args.chains, rows, fraction, split_seed,
                                          seed=30_000) if s.key not in seen and chain_wanted(s)]
    train_scored, rl_specs = fresh[: args.chains], fresh[args.chains:]
    heldout = [spec for spec, _, row in rows if row["split"] == "heldout" and chain_wanted(spec)][: args.chains]
    Path(args.work).mkdir(parents=True, exist_ok=True)
    start = starting_model(args, pretrain_specs)
    tokenizer = AutoTokenizer.from_pretrained(start)
    prompts = {"heldout": [drill_prompt(tokenizer, s) for s in heldout],
               "train_side": [drill_prompt(tokenizer, s) for s in train_scored]}
    report = {"settings": vars(args), "start": json.loads((Path(args.work) / "start.json").read_text()),
              "chains": {"heldout": len(heldout), "train_side": len(train_scored)}, "arms": {}}

    def scores(model) -> dict:
        return {"heldout": score(model, tokenizer, heldout, prompts["heldout"], args.max_new),
                "train_side": score(model, tokenizer, train_scored, prompts["train_side"], args.max_new)}

    for arm in arms:
        model = AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
        generator = torch.Generator().manual_seed(args.seed)  # every arm samples its first step alike
        log, points, started = [], [{"step": 0, **scores(model)}], time.perf_counter()
        for step in tqdm(range(1, args.steps + 1), desc=arm):
            specs = rl_specs[(step - 1) * args.prompts: step * args.prompts]
            log.append({"step": step, **rl_step(model, optimizer, tokenizer, arm, specs,
                                                [drill_prompt(tokenizer, s) for s in specs], args, generator)})
            if step % args.score_every == 0 or step == args.steps:
                points.append({"step": step, **scores(model)})
                tqdm.write(f"{arm} step {step}: {json.dumps(points[-1])} reward {log[-1]['reward']:.2f}")
        report["arms"][arm] = {"scores": points, "steps": log, "seconds": time.perf_counter() - started}
        (Path(args.work) / args.report).write_text(json.dumps(report, indent=1))
    print(json.dumps({arm: r["scores"] for arm, r in report["arms"].items()}, indent=1))


if __name__ == "__main__":
    main()
