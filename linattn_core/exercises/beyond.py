"""Exercises of the chapter beyond linear attention: ``delta_loop``."""

from __future__ import annotations

import numpy as np

from .checker import Exercise, Mistake
from .inputs import Case

__all__ = ["delta_loop"]


def _solution_delta_loop(q, k, v, beta):
    # q, k: (N, d), v: (N, d_v), beta: (N,)  ->  y: (N, d_v)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)   # unit-length queries and keys
    k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    S = np.zeros((q.shape[-1], v.shape[-1]))            # (d, d_v)
    ys = []
    for q_t, k_t, v_t, beta_t in zip(q, k, v, beta, strict=True):
        S = S + beta_t * np.outer(k_t, v_t - S.T @ k_t)  # write the error, not v_t
        ys.append(S.T @ q_t)                             # then read with the query
    return np.stack(ys)


def _ref_delta_loop(q, k, v, beta):
    from linattn_core.delta import delta_rule_attention

    return delta_rule_attention(q, k, v, beta, method="recurrent")


def _cases() -> list:
    rng = np.random.default_rng(901)

    def qkv(n, d=4, d_v=3):
        return (rng.standard_normal((n, d)), rng.standard_normal((n, d)),
                rng.standard_normal((n, d_v)))

    q, k, v = qkv(6)
    k[3] = k[1]  # the key of token 1 comes back: its value must be overwritten, not added to
    return [
        Case("small, beta in (0, 1)", (*qkv(5), rng.uniform(0.1, 0.9, 5))),
        Case("one token", (*qkv(1), np.array([0.7]))),
        Case("more tokens than dimensions (N = 9, d = 4)", (*qkv(9), rng.uniform(0.0, 1.0, 9))),
        Case("d = 3, d_v = 5", (*qkv(6, d=3, d_v=5), rng.uniform(0.0, 1.0, 6))),
        Case("beta = 1, a key that comes back", (q, k, v, np.ones(6))),
        Case("beta in (1, 2)", (*qkv(7), rng.uniform(1.0, 2.0, 7))),
    ]


def _loop(q, k, v, beta, *, norm_q=True, norm_k=True, query_first=False, delta=True,
          use_beta=True):
    if norm_q:
        q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    if norm_k:
        k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    S = np.zeros((q.shape[-1], v.shape[-1]))
    ys = []
    for q_t, k_t, v_t, b in zip(q, k, v, beta, strict=True):
        b = b if use_beta else 1.0
        old = S
        S = S + b * np.outer(k_t, v_t - S.T @ k_t if delta else v_t)
        ys.append((old if query_first else S).T @ q_t)
    return np.stack(ys)


delta_loop = Exercise(
    name="delta_loop",
    path="exercises.beyond.delta_loop",
    fn_name="delta_loop",
    chapter="beyond",
    title="The delta rule, one token at a time",
    task="""
        Write `delta_loop(q, k, v, beta)` for one sequence, q, k: (N, d), v: (N, d_v),
        beta: (N,), returning y: (N, d_v): L2-normalise every q_t and k_t, start from S = 0
        (shape (d, d_v)), then for each token S = S + beta_t k_t (v_t - S^T k_t)^T and
        y_t = S^T q_t (update, then read). check() compares with
        linattn_core.delta_rule_attention(q, k, v, beta, method="recurrent") on one token,
        N > d, d != d_v, a key that comes back with beta = 1, and beta above 1.
    """,
    arg_names=("q", "k", "v", "beta"),
    cases=_cases,
    reference=_ref_delta_loop,
    solution_fn=_solution_delta_loop,
    hints=[
        "Normalise first: q / np.linalg.norm(q, axis=-1, keepdims=True), the same for k. Then a "
        "plain Python loop over the tokens, carrying S from one token to the next.",
        "What the memory returns for k_t is S^T k_t (shape (d_v,)); the delta rule writes the "
        "error v_t - S^T k_t, scaled by beta_t, along k_t: np.outer(k_t, error) has S's shape "
        "(d, d_v).",
        "Update S first, then append S.T @ q_t; return np.stack of the outputs.",
    ],
    mistakes=[
        Mistake(lambda q, k, v, b: _loop(q, k, v, b, norm_q=False, norm_k=False),
                "you did not L2-normalise q and k: divide each row by its length "
                "(np.linalg.norm(..., axis=-1, keepdims=True))."),
        Mistake(lambda q, k, v, b: _loop(q, k, v, b, norm_q=False),
                "you normalised k but not q: the reading y_t = S^T q_t uses the unit-length "
                "q_t too."),
        Mistake(lambda q, k, v, b: _loop(q, k, v, b, norm_k=False),
                "you normalised q but not k: the write uses the unit-length k_t (with it, beta "
                "= 1 overwrites the value stored under k_t exactly)."),
        Mistake(lambda q, k, v, b: _loop(q, k, v, b, query_first=True),
                "you read before writing: y_t = S_{t-1}^T q_t. The token's own pair goes into the "
                "state first, then y_t = S_t^T q_t."),
        Mistake(lambda q, k, v, b: _loop(q, k, v, b, delta=False),
                "you added beta_t k_t v_t^T, the plain linear-attention write: the delta rule "
                "writes the error v_t - S^T k_t instead."),
        Mistake(lambda q, k, v, b: _loop(q, k, v, b, use_beta=False),
                "you left out beta_t: the error is scaled by each token's write strength."),
    ],
    exception_hints=[("matmul", "Check the shapes: S is (d, d_v), S.T @ k_t is (d_v,) and "
                               "np.outer(k_t, error) is (d, d_v).")],
    difficulty=2,
    minutes=15,
    success="With unit-length keys and beta = 1 the state overwrites what it held under k_t: a "
            "memory that corrects itself, one token at a time.",
)
