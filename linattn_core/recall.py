"""Associative recall: how many key-value pairs can a memory give back?

Store ``n`` pairs with random unit keys in ``d`` dims and random unit values, then query the memory
with every stored key and compare each answer with the value stored under that key. The error
``1 - cos^2(answer, value)`` is the part of the answer that is not the stored value (0: perfect
recall, 1: nothing of it); it ignores the answer's length, so a normalizer does not change it.

The memories compared (``rule``):

- ``"softmax"``: softmax attention over the full KV cache, with a sharp scale;
- ``"linear"``: linear attention's state ``S = sum_j k_j v_j^T`` (identity features, ``d_phi = d``),
  read as ``S^T k_i``;
- ``"decay"``: the same with a decaying state, ``S_t = gamma S_{t-1} + k_t v_t^T``;
- ``"delta"``: the delta rule, ``S_t = S_{t-1} + beta k_t (v_t - S_{t-1}^T k_t)^T``, optionally
  replaying the pairs ``passes`` times;
- ``"best"``: the least-squares ``d x d_v`` state, the best that *any* linear read-out of a state
  of that size can do (exact up to ``n = d``, and never beyond).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _backend as ops
from .attention import softmax_attention
from .decay import decayed_linear_attention
from .delta import delta_rule_attention

__all__ = ["RULES", "RecallTask", "make_task", "recall_answers", "recall_error", "recall_errors"]

RULES = ("softmax", "linear", "decay", "delta", "best")


@dataclass(frozen=True)
class RecallTask:
    """``n`` pairs to store: ``keys: (n, d)`` and ``values: (n, d_v)``, rows of unit length."""

    keys: np.ndarray
    values: np.ndarray


def _unit_rows(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def make_task(n: int, d: int, d_v: int = 8, *, seed: int = 0) -> RecallTask:
    """``n`` random unit keys in ``d`` dims with random unit values (seeded)."""
    n, d, d_v = (ops.check_positive_int(value, name) for name, value in (("n", n), ("d", d), ("d_v", d_v)))
    rng = np.random.default_rng(seed)
    return RecallTask(_unit_rows(rng.standard_normal((n, d))), _unit_rows(rng.standard_normal((n, d_v))))


def recall_answers(
    task: RecallTask,
    rule: str,
    *,
    gamma: float = 0.95,
    beta: float = 1.0,
    passes: int = 1,
    softmax_scale: float = 100.0,
) -> np.ndarray:
    """The memory's answer to each stored key, ``(n, d_v)``, after writing all ``n`` pairs in order."""
    K, V = task.keys, task.values
    if rule == "softmax":
        return softmax_attention(K, K, V, scale=softmax_scale)
    if rule in ("linear", "decay"):
        # the read-out S^T k_i without the normalizer: it only rescales an answer, and with signed
        # (identity) features its sign could flip; the error ignores the length anyway
        decay = 1.0 if rule == "linear" else gamma
        _, (S, _) = decayed_linear_attention(
            K, K, V, "identity", decay=decay, normalize=False, return_state=True
        )
        return K @ S
    if rule == "delta":
        passes = ops.check_positive_int(passes, "passes")
        K_all, V_all = np.tile(K, (passes, 1)), np.tile(V, (passes, 1))  # replay the same pairs
        _, S = delta_rule_attention(K_all, K_all, V_all, beta, return_state=True)
        return K @ S
    if rule == "best":
        S = np.linalg.lstsq(K, V, rcond=None)[0]  # (d, d_v): minimises sum_i |S^T k_i - v_i|^2
        return K @ S
    raise ValueError(f"rule must be one of {RULES}, got {rule!r}")


def recall_errors(answers: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per-pair error ``1 - cos^2(answer_i, value_i)``, shape ``(n,)``."""
    cos = np.sum(_unit_rows(answers) * _unit_rows(values), axis=-1)
    return np.clip(1.0 - cos**2, 0.0, None)  # clip: rounding can give -1e-16


def recall_error(task: RecallTask, rule: str, **options: float) -> float:
    """Mean recall error of ``rule`` on ``task`` (0: every value recalled exactly)."""
    return float(recall_errors(recall_answers(task, rule, **options), task.values).mean())
