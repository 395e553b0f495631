"""Teacher-forced log-probabilities of token rows, as the RL loss and its filters read them.

    logp = sequence_logprobs(model, rows)                       # [n, L], with gradient
    logp = batch_logprobs(model, batch, micro_batch_size=16)    # a whole SequenceBatch, no gradient, on CPU

The trainer scores its rollouts with `batch_logprobs` twice per step when a KL penalty is set: under the
model being trained (the old policy of the ratio, and MRS's side of the mismatch) and under the frozen
starting model (the reference the penalty pulls towards).

`temperature` scores the tempered model, softmax(logits / T): the distribution an RL run samples its
rollouts from at temperature T (RLSettings.temperature), so that the ratio, MRS and the KL penalty all
speak of the policy that made the rollouts. T = 1 is the raw model.
"""

from __future__ import annotations

import contextlib

import torch


def sequence_logprobs(model, rows: dict, entropy: bool = False, return_logits: bool = False,
                      temperature: float = 1.0):
    """Log-probability of every token given the ones before it ([n, L]; 0 at position 0) under the model at
    `temperature`, optionally the entropy of each predictive distribution (no gradient) and the raw logits."""
    from trl.trainer.utils import entropy_from_logits, selective_log_softmax

    logits = model(input_ids=rows["input_ids"], attention_mask=rows["attention_mask"],
                   position_ids=rows["position_ids"], use_cache=False).logits
    shifted = logits[:, :-1] if temperature == 1 else logits[:, :-1] / temperature
    logp = torch.nn.functional.pad(selective_log_softmax(shifted, rows["input_ids"][:, 1:]).float(), (1, 0))
    out = [logp]
    if entropy:
        with torch.no_grad():
            out.append(torch.nn.functional.pad(entropy_from_logits(shifted.detach()).float(), (1, 0)))
    if return_logits:
        out.append(logits)
    return out[0] if len(out) == 1 else tuple(out)


@torch.no_grad()
def batch_logprobs(model, batch, *, micro_batch_size: int, device=None, autocast=contextlib.nullcontext,
                   temperature: float = 1.0) -> torch.Tensor:
    """`sequence_logprobs` of every row of a SequenceBatch (rl/batch.py), `micro_batch_size` rows per
    forward on `device` (the model's own by default), laid out like the batch's rows ([N, L], on CPU)."""
    device = device if device is not None else next(model.parameters()).device
    out = torch.zeros_like(batch.rollout_logp)
    for index in torch.split(torch.arange(batch.num_sequences), micro_batch_size):
        rows = {k: v.to(device) for k, v in batch.rows(index).items()}
        with autocast():
            logp = sequence_logprobs(model, rows, temperature=temperature).cpu()
        width = logp.shape[1]
        if batch.padding_side == "right":
            out[index, :width] = logp
        else:
            out[index, out.shape[1] - width:] = logp
    return out
