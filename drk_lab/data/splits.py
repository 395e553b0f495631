"""The held-out split: whole operator combinations kept out of training.

A task's combination is the sorted set of its operators (TaskSpec.combination, e.g.
"bias+gelu_tanh+linear+softmax"). A combination is held out when a hash of it and the seed falls
below `heldout_fraction`, so every task with that combination is held out and no held-out
combination ever occurs in train. The same seed gives the same split whatever the set's size.
"""

from __future__ import annotations

import hashlib


def is_heldout(combination: str, heldout_fraction: float, seed: int = 0) -> bool:
    digest = hashlib.sha256(f"{seed}:{combination}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64 < heldout_fraction


def split_of(combination: str, heldout_fraction: float, seed: int = 0) -> str:
    return "heldout" if is_heldout(combination, heldout_fraction, seed) else "train"


def is_train_combination(combination: str, known: dict[str, set[str]], heldout_fraction: float | None,
                         seed: int = 0) -> bool:
    """Whether tasks with `combination` may be trained on beside a prompt set whose combinations by split
    are `known` (combinations_by_split): a combination of the set keeps its split; a new one follows the
    set's hash rule (its heldout_fraction and seed), or is refused when that rule is not known."""
    if combination in known.get("train", ()) or combination in known.get("heldout", ()):
        return combination in known.get("train", ())
    return heldout_fraction is not None and not is_heldout(combination, heldout_fraction, seed)


def combinations_by_split(rows) -> dict[str, set[str]]:
    """{"train": {...}, "heldout": {...}}: the combinations of each split among rows with `combination`
    and `split` (the held-out test checks that the two sets are disjoint)."""
    out: dict[str, set[str]] = {"train": set(), "heldout": set()}
    for row in rows:
        out.setdefault(row["split"], set()).add(row["combination"])
    return out
