"""Exercises of the softmax chapter: ``stable_attention`` and ``score_matrix_bytes``."""

from __future__ import annotations

import numpy as np

from ._numpy import FLOAT_COUNT, causal_mask, float32_count, float64_count, softmax_rows, t
from .checker import Exercise, Mistake
from .inputs import Case, attention_cases, qkv

__all__ = ["score_matrix_bytes", "stable_attention"]


def _solution_attention(q, k, v):
    # q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v)  ->  (..., N_q, d_v)
    d = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d)           # (..., N_q, N_k)
    scores = scores - scores.max(axis=-1, keepdims=True)       # stable: every exp(.) <= 1
    weights = np.exp(scores)
    weights = weights / weights.sum(axis=-1, keepdims=True)    # each row sums to 1
    return weights @ v                                         # (..., N_q, d_v)


def _ref_attention(q, k, v):
    from linattn_core import softmax_attention

    return softmax_attention(q, k, v)


def _library_attention(q, k, v):
    from linattn_core import softmax_attention  # the shortcut check() refuses

    return softmax_attention(q, k, v)


def _cases_attention() -> list:
    cases = attention_cases(seed=101, with_phi=False)
    rng = np.random.default_rng(102)
    cases.append(Case("large scores (|q . k| / sqrt(d) ~ 1e3)", qkv(rng, 6, 6, scale=30.0),
                      large=True))
    return cases


def _scaled(scale_fn):
    return lambda q, k, v: softmax_rows(q @ t(k) * scale_fn(q, v)) @ v


def _scores(q, k):
    return q @ t(k) / np.sqrt(q.shape[-1])


def _no_keepdims(q, k, v):
    s = _scores(q, k)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1) @ v  # (N_q, N_k) / (N_q,): divides column j by row j's sum


def _global_shift(q, k, v):
    s = _scores(q, k)
    w = np.exp(s - s.max())
    return w / w.sum(axis=-1, keepdims=True) @ v


def _whole_matrix(q, k, v):
    s = _scores(q, k)
    w = np.exp(s - s.max())
    return w / w.sum() @ v


def _attention_mistakes() -> list:
    return [
        Mistake(_scaled(lambda q, v: 1.0),
                "you forgot the 1/sqrt(d) scale: your output matches softmax(q k^T) v. Divide the "
                "scores by sqrt(d), where d = q.shape[-1]."),
        Mistake(_scaled(lambda q, v: 1.0 / q.shape[-1]),
                "you scaled the scores by 1/d; the scale is 1/sqrt(d)."),
        Mistake(_scaled(lambda q, v: np.sqrt(q.shape[-1])),
                "you multiplied the scores by sqrt(d) instead of dividing by it."),
        Mistake(_scaled(lambda q, v: 1.0 / np.sqrt(v.shape[-1])),
                "you scaled by 1/sqrt(d_v); the scale uses the query/key dimension, "
                "d = q.shape[-1]."),
        Mistake(_scaled(lambda q, v: 0.5),
                "you divided the scores by a fixed 2 (sqrt(4), the d of the small inputs); use "
                "np.sqrt(q.shape[-1]) so that any d works."),
        Mistake(lambda q, k, v: softmax_rows(_scores(q, k), axis=-2) @ v,
                "you normalized over the wrong axis (over queries, axis=-2): each query's weights "
                "over the keys must sum to 1. Use axis=-1 with keepdims=True."),
        Mistake(_no_keepdims,
                "you summed each row (axis=-1) without keepdims=True, so numpy broadcast the row "
                "sums along the wrong axis (column j was divided by row j's sum). Use "
                "w.sum(axis=-1, keepdims=True)."),
        Mistake(lambda q, k, v: np.exp(_scores(q, k)) @ v,
                "you forgot to normalize: divide exp(scores) by its row sums."),
        Mistake(_global_shift,
                "you subtracted the maximum of the whole score array; subtract each row's own "
                "maximum (axis=-1, keepdims=True). With one global shift, rows whose scores are "
                "all far below it underflow to 0/0."),
        Mistake(_whole_matrix,
                "you normalized over the whole score matrix (a sum without axis); each row must "
                "sum to 1: sum over axis=-1 with keepdims=True."),
        Mistake(lambda q, k, v: np.exp(_scores(q, k) - _scores(q, k).max(-1, keepdims=True)) @ v,
                "you subtracted the row maximum but did not divide by the row sums."),
        Mistake(lambda q, k, v: softmax_rows(
            np.where(causal_mask(q.shape[-2]), _scores(q, k), -np.inf)) @ v,
                "you applied a causal mask, but this attention is non-causal: every query sees "
                "every key."),
        Mistake(lambda q, k, v: softmax_rows(_scores(q, k)),
                "you returned the attention weights (..., N_q, N_k); multiply them by v."),
    ]


stable_attention = Exercise(
    name="softmax_attention_mine",
    path="exercises.softmax.stable_attention",
    fn_name="softmax_attention_mine",
    chapter="softmax",
    title="Softmax attention, numerically stable, with batch dimensions",
    task="""
        Write `softmax_attention_mine(q, k, v)` for q: (..., N_q, d), k: (..., N_k, d),
        v: (..., N_k, d_v), returning (..., N_q, d_v): softmax(q k^T / sqrt(d)) v with the softmax
        over the keys. It must work with any leading batch dimensions, with N_q != N_k, and stay
        finite when the scores are around 1e3. check() compares with
        linattn_core.softmax_attention on one token, N = 7, d = 5, cross-attention, batch dims
        (2, 3) and (1,), and large scores.
    """,
    arg_names=("q", "k", "v"),
    cases=_cases_attention,
    reference=_ref_attention,
    solution_fn=_solution_attention,
    hints=[
        "Three steps: scores = q k^T / sqrt(d) (shape (..., N_q, N_k)); weights = softmax of each "
        "row; output = weights @ v.",
        "With batch dimensions, transpose only the last two axes: np.swapaxes(k, -1, -2). "
        "Row-wise reductions need axis=-1 and keepdims=True so they broadcast back.",
        "For stability, subtract each row's maximum before exp: "
        "scores - scores.max(axis=-1, keepdims=True). Every exp is then <= 1, and the softmax is "
        "unchanged because the constant cancels between numerator and denominator.",
    ],
    mistakes=_attention_mistakes(),
    library_answer=_library_attention,
    exception_hints=[
        ("matmul", "Check the shapes in each product: q @ k needs k transposed over its last two "
                   "axes, (..., d, N_k)."),
        ("broadcast", "A row sum without keepdims=True has shape (..., N_q) and does not "
                      "broadcast against (..., N_q, N_k): use keepdims=True."),
    ],
    difficulty=2,
    minutes=15,
    success="The max-shift is the same trick FlashAttention's online softmax uses to process keys "
            "in blocks.",
)


def _solution_score_matrix_bytes(N, batch_heads, itemsize):
    # one N x N score matrix per (batch, head) pair, itemsize bytes per entry
    return N * N * batch_heads * itemsize


def _ref_score_matrix_bytes(N, batch_heads, itemsize):
    return int(N) * int(N) * int(batch_heads) * int(itemsize)


def _cases_score_matrix_bytes() -> list:
    return [
        Case("one token, one head, float32", (1, 1, 4)),
        Case("N = 7, one head, float64", (7, 1, 8)),
        Case("N = 1024, batch 1 x 12 heads, float32", (1024, 12, 4)),
        Case("N = 4096, batch 8 x 32 heads, bfloat16", (4096, 256, 2)),
        Case("N = 131072, batch 1 x 64 heads, float16 (over 2**31 bytes)", (131072, 64, 2)),
        Case("N = 1,000,003, 16,383 (batch x heads) pairs, float16 (over 2**54 bytes: only "
             "integer arithmetic is exact)", (1_000_003, 16_383, 2)),
    ]


def _int32(x):
    return int(np.int64(x).astype(np.int32))


score_matrix_bytes = Exercise(
    name="score_matrix_bytes",
    path="exercises.softmax.score_matrix_bytes",
    fn_name="score_matrix_bytes",
    chapter="softmax",
    title="How many bytes do the N x N score matrices take?",
    task="""
        Write `score_matrix_bytes(N, batch_heads, itemsize)` returning, as an int, the number of
        bytes needed to hold the attention score matrices of one layer: one N x N matrix for each
        of the `batch_heads` (batch x heads) pairs, `itemsize` bytes per entry (4 for float32, 2 for
        float16/bfloat16). check() tries N from 1 to 1,000,003, up to counts that only exact
        integer arithmetic gets right.
    """,
    arg_names=("N", "batch_heads", "itemsize"),
    cases=_cases_score_matrix_bytes,
    reference=_ref_score_matrix_bytes,
    solution_fn=_solution_score_matrix_bytes,
    hints=[
        "Count entries first: how many numbers are in one N x N matrix, and how many such "
        "matrices are there?",
        "entries = N * N * batch_heads; each entry takes itemsize bytes. Keep it an int "
        "(no `/`).",
    ],
    kind="int",
    mistakes=[
        Mistake(lambda N, b, i: N * b * i,
                "you counted N entries per matrix; a score matrix is N x N, so N**2."),
        Mistake(lambda N, b, i: N * N * i,
                "you counted one matrix; there is one per (batch, head) pair: multiply by "
                "batch_heads."),
        Mistake(lambda N, b, i: N * N * b,
                "you counted entries, not bytes: multiply by itemsize."),
        Mistake(lambda N, b, i: N * N * b * i * 8,
                "you counted bits; the answer is in bytes (itemsize is already bytes)."),
        Mistake(lambda N, b, i: N * (N + 1) // 2 * b * i,
                "you counted only the causal lower triangle; the full N x N matrix is stored "
                "(the masked entries are set to -inf, not skipped)."),
        Mistake(lambda N, b, i: 2 * N * N * b * i,
                "you counted two matrices (scores and weights) per head; count one."),
        Mistake(lambda N, b, i: float32_count(N, N, b, i), FLOAT_COUNT),
        Mistake(lambda N, b, i: float64_count(N, N, b, i), FLOAT_COUNT),
        Mistake(lambda N, b, i: _int32(N * N * b * i),
                "integer overflow: your arithmetic wrapped around at 2**31, which happens with "
                "numpy int32 values. Use Python ints (int(N) * ...)."),
        Mistake(lambda N, b, i: N * N * b * i / 2**20,
                "you returned MiB; return bytes."),
        Mistake(lambda N, b, i: N * N * b * i / 1e9,
                "you returned GB; return bytes."),
    ],
    difficulty=1,
    minutes=5,
    success="At N = 131072 that is hundreds of GiB for a single layer: why long contexts cannot "
            "materialise the scores.",
)
