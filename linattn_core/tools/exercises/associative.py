"""Exercises of the associative chapter: ``quadratic_form`` and ``associative_form``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._numpy import ABS_CLAMP, NO_PHI, causal_mask, row_normalize, softmax_rows, t
from .checker import Exercise, Mistake
from .inputs import EPS, Case, attention_cases, elu_phi, lib_phi, qkv

__all__ = ["associative_form", "crossover", "quadratic_form"]


def _solution_kernel_attention(q, k, v, phi, eps=1e-6):
    # q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v)  ->  (..., N_q, d_v)
    A = phi(q) @ np.swapaxes(phi(k), -1, -2)     # (..., N_q, N_k): A[i, j] = phi(q_i) . phi(k_j)
    den = A.sum(axis=-1)                         # (..., N_q): each row's total score
    return (A @ v) / np.maximum(den, eps)[..., None]


def _ref_kernel_attention(q, k, v, phi):
    from linattn_core import kernel_attention

    return kernel_attention(q, k, v, feature_map=lib_phi(phi))


def _library_kernel_attention(q, k, v, phi):
    import linattn_core as la  # the shortcut check() refuses: the library's own form

    return la.kernel_attention(q, k, v, phi)


def _library_associative_attention(q, k, v, phi):
    from linattn_core.linear import linear_attention

    return linear_attention(q, k, v, phi)


def _library_crossover_length(d_phi, d_v):
    from linattn_core.tools import timing

    return timing.flop_crossover("kernel", "linear", d=d_phi, d_v=d_v, d_phi=d_phi)


def _z_over_features(q, k, v, phi):
    # z summed over the feature axis: one number per key instead of one per feature
    fq, fk = phi(q), phi(k)
    num = fq @ (t(fk) @ v)
    den = fq.sum(-1) * fk.sum(-1)  # needs N_q == N_k to broadcast
    return num / np.maximum(den, EPS)[..., None]


def kernel_mistakes() -> list:
    """Typical wrong answers of the non-causal kernel forms (shared with the associative form)."""
    return [
        Mistake(lambda q, k, v, phi: (phi(q) @ t(phi(k))) @ v,
                "you forgot the normalizer: your output is the numerator sum_j "
                "(phi(q_i) . phi(k_j)) v_j. Divide each row by sum_j phi(q_i) . phi(k_j)."),
        Mistake(lambda q, k, v, phi: row_normalize(phi(q) @ t(phi(k)), v, eps=None),
                "you did not clamp the denominator: where phi(q_i) . z is 0 (relu features can "
                "be all zero) the output is 0/0 = NaN. Divide by max(den, 1e-6)."),
        Mistake(lambda q, k, v, phi: row_normalize(phi(q) @ t(phi(k)), v, absolute=True),
                ABS_CLAMP),
        Mistake(lambda q, k, v, phi: (phi(q) @ t(phi(k))) @ v
                / ((phi(q) @ t(phi(k))).sum(-1, keepdims=True) + EPS),
                "you added eps (den + 1e-6) instead of clamping (max(den, 1e-6)): adding changes "
                "every row a little; the clamp changes only the rows whose denominator is below "
                "eps."),
        Mistake(lambda q, k, v, phi: (phi(q) @ t(phi(k)))
                / (phi(q) @ t(phi(k))).sum(-2, keepdims=True) @ v,
                "you normalized the columns (axis=-2); each query's row of scores must be divided "
                "by its own sum (axis=-1)."),
        Mistake(lambda q, k, v, phi: row_normalize(q @ t(k), v), NO_PHI),
        Mistake(lambda q, k, v, phi: row_normalize(q @ t(k), v, eps=None), NO_PHI),
        Mistake(lambda q, k, v, phi: row_normalize(phi(q) @ t(k), v),
                "you applied phi to the queries only: the keys need it too (the kernel is "
                "phi(q) . phi(k); S and z are built from phi(k))."),
        Mistake(lambda q, k, v, phi: row_normalize(q @ t(phi(k)), v),
                "you did not apply phi to q: the kernel is phi(q) . phi(k), so query S and z "
                "with phi(q), not q."),
        Mistake(lambda q, k, v, phi: row_normalize(q @ t(phi(k)), v, eps=None),
                "you did not apply phi to q: the kernel is phi(q) . phi(k), so query S and z "
                "with phi(q), not q."),
        Mistake(lambda q, k, v, phi: row_normalize(phi(q @ t(k)), v),
                "you applied phi to the scores q k^T; phi maps each query and each key (its last "
                "axis has size d), and the kernel is their dot product."),
        Mistake(_z_over_features,
                "your z is summed over the wrong axis (over features, axis=-1: one number per "
                "key). z = sum_j phi(k_j) sums over the tokens, axis=-2, and has shape "
                "(..., d_phi)."),
        Mistake(lambda q, k, v, phi: softmax_rows(q @ t(k) / np.sqrt(q.shape[-1])) @ v,
                "that is softmax attention; here exp(q . k / sqrt(d)) is replaced by "
                "phi(q) . phi(k)."),
        Mistake(lambda q, k, v, phi: row_normalize(
            np.where(causal_mask(q.shape[-2]), phi(q) @ t(phi(k)), 0.0), v),
                "you applied a causal mask; this exercise is the non-causal form (every query "
                "sees every key)."),
        Mistake(lambda q, k, v, phi: (phi(q) @ t(phi(k))) @ v / k.shape[-2],
                "you divided by the number of keys N; the normalizer is each row's own sum of "
                "scores, sum_j phi(q_i) . phi(k_j)."),
    ]


_SHAPE_ADVICE = ("Check the shapes: phi(q) is (..., N_q, d_phi) and phi(k) (..., N_k, d_phi); "
                 "S = np.swapaxes(phi(k), -1, -2) @ v is (..., d_phi, d_v) and "
                 "z = phi(k).sum(axis=-2) is (..., d_phi) (summed over the tokens).")

quadratic_form = Exercise(
    name="kernel_attention_mine",
    path="exercises.associative.quadratic_form",
    fn_name="kernel_attention_mine",
    chapter="associative",
    title="Kernel attention, the direct quadratic form",
    task="""
        Write `kernel_attention_mine(q, k, v, phi)` for q: (..., N_q, d), k: (..., N_k, d),
        v: (..., N_k, d_v) and a feature map phi (a callable: (..., N, d) -> (..., N, d_phi)).
        Build every score A[i, j] = phi(q_i) . phi(k_j), divide each row by its sum clamped to
        max(sum, 1e-6) and apply the result to v: output (..., N_q, d_v). Non-causal. check()
        compares with linattn_core.kernel_attention on one token, N = 7, d = 5,
        cross-attention (N_q != N_k), batch dims, a feature map with d_phi != d, relu
        features whose denominators reach 0 (where only the clamp keeps the output finite) and
        identity features whose denominators are negative. Compute it yourself: an answer that
        calls the library's attention functions does not pass.
    """,
    arg_names=("q", "k", "v", "phi"),
    cases=lambda: attention_cases(seed=201),
    reference=_ref_kernel_attention,
    solution_fn=_solution_kernel_attention,
    hints=[
        "It is softmax attention with exp(q . k / sqrt(d)) replaced by phi(q) . phi(k): "
        "compute phi(q) and phi(k), then all pairwise dot products.",
        "A = phi(q) @ np.swapaxes(phi(k), -1, -2) has shape (..., N_q, N_k). The output row i is "
        "sum_j A[i, j] v_j / max(sum_j A[i, j], 1e-6).",
        "return (A @ v) / np.maximum(A.sum(axis=-1), 1e-6)[..., None]  - the [..., None] makes "
        "the (..., N_q) denominators broadcast over d_v.",
    ],
    mistakes=kernel_mistakes(),
    exception_hints=[("matmul", _SHAPE_ADVICE), ("broadcast", _SHAPE_ADVICE)],
    library_answer=_library_kernel_attention,
    difficulty=1,
    minutes=10,
    success="This is the reference: correct, but it builds an N_q x N_k matrix. The next exercise "
            "computes the same numbers without it.",
)


def _solution_associative_attention(q, k, v, phi, eps=1e-6):
    # q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v)  ->  (..., N_q, d_v)
    fq, fk = phi(q), phi(k)                      # (..., N_q, d_phi), (..., N_k, d_phi)
    S = np.swapaxes(fk, -1, -2) @ v              # (..., d_phi, d_v): S = sum_j phi(k_j) v_j^T
    z = fk.sum(axis=-2)                          # (..., d_phi):      z = sum_j phi(k_j)
    num = fq @ S                                 # (..., N_q, d_v)
    den = (fq * z[..., None, :]).sum(axis=-1)    # (..., N_q): phi(q_i) . z
    return num / np.maximum(den, eps)[..., None]


def ref_associative_attention(q, k, v, phi):
    from linattn_core import linear_attention

    return linear_attention(q, k, v, feature_map=lib_phi(phi))


def memory_case_attention(seed: int) -> Callable:
    """``make(n)``: a long input (n tokens, d = d_v = 4) on which nothing N x N may be allocated."""
    def make(n: int) -> Case:
        rng = np.random.default_rng(seed)
        q, k, v = qkv(rng, n, n, d=4, d_v=4)
        return Case(f"N = {n}", (q, k, v, elu_phi()))

    return make


associative_form = Exercise(
    name="associative_attention",
    path="exercises.associative.associative_form",
    fn_name="associative_attention",
    chapter="associative",
    title="Linear attention by associativity: S and z first",
    task="""
        Write `associative_attention(q, k, v, phi)` with the same inputs and output as
        kernel_attention_mine, but without building any N x N matrix: first S = phi(K)^T V
        (shape (..., d_phi, d_v)) and z = sum_j phi(k_j) (shape (..., d_phi)), then
        y_i = phi(q_i)^T S / max(phi(q_i) . z, 1e-6). check() compares with
        linattn_core.linear_attention on the same inputs as kernel_attention_mine, and measures
        that the memory of 1024- and 2048-token inputs does not grow like N x N (numpy arrays
        through tracemalloc, torch tensors through torch's dispatcher).
    """,
    arg_names=("q", "k", "v", "phi"),
    cases=lambda: attention_cases(seed=301),
    reference=ref_associative_attention,
    solution_fn=_solution_associative_attention,
    hints=[
        "Write row i of the kernel form out: sum_j (phi(q_i) . phi(k_j)) v_j. The dot product is a "
        "scalar, so phi(q_i) can be pulled out of the sum: phi(q_i)^T (sum_j phi(k_j) v_j^T).",
        "S = np.swapaxes(phi(k), -1, -2) @ v has shape (..., d_phi, d_v); z = phi(k).sum(axis=-2) "
        "has shape (..., d_phi). Neither depends on the query.",
        "numerator = phi(q) @ S; denominator = phi(q) @ z[..., None] (then drop the last axis), "
        "clamped with np.maximum(den, 1e-6); divide with [..., None].",
    ],
    mistakes=kernel_mistakes(),
    memory_case=memory_case_attention(302),
    exception_hints=[("matmul", _SHAPE_ADVICE), ("broadcast", _SHAPE_ADVICE)],
    library_answer=_library_associative_attention,
    difficulty=2,
    minutes=15,
    success="Same numbers as the quadratic form, in O(N d_phi d_v) time and O(d_phi d_v) extra "
            "memory: that re-bracketing is all of linear attention.",
)


def _solution_crossover_length(d_phi, d_v):
    # kernel form: 2 N^2 (d_phi + d_v) FLOPs; associative form: 4 N d_phi d_v (leading terms)
    # equal where 2 N (d_phi + d_v) = 4 d_phi d_v
    return 2 * d_phi * d_v / (d_phi + d_v)


def _ref_crossover_length(d_phi, d_v):
    # the cost model's leading terms; tests/tools/test_exercises.py holds this to timing.flop_crossover
    return 2.0 * d_phi * d_v / (d_phi + d_v)


crossover = Exercise(
    name="crossover_length",
    path="exercises.associative.crossover",
    fn_name="crossover_length",
    chapter="associative",
    title="Below which length is the quadratic kernel form cheaper?",
    task="""
        Write `crossover_length(d_phi, d_v)` returning the sequence length N (a float) at which
        the quadratic kernel form (phi(Q) phi(K)^T) V and the associative form need the same
        number of FLOPs, from the leading terms of the chapter's table: 2 N^2 (d_phi + d_v)
        against 4 N d_phi d_v (the normalizer rows are lower order and left out). Below that N
        the quadratic form is cheaper. check() tries d_phi = d_v, d_phi = 256 with d_v = 64,
        d_phi != d_v both ways, and one-dimensional heads.
    """,
    arg_names=("d_phi", "d_v"),
    cases=lambda: [
        Case("elu+1, d_phi = d_v = 64", (64, 64)),
        Case("a Performer with 256 features, d_v = 64", (256, 64)),
        Case("d_phi = 16, d_v = 128", (16, 128)),
        Case("d_phi = 7, d_v = 3", (7, 3)),
        Case("one-dimensional head", (1, 1)),
    ],
    reference=_ref_crossover_length,
    solution_fn=_solution_crossover_length,
    hints=[
        "Write both costs as functions of N: the quadratic one grows like N^2, the associative "
        "one like N. They are equal at one N > 0.",
        "2 N^2 (d_phi + d_v) = 4 N d_phi d_v: divide both sides by 2 N (d_phi + d_v).",
    ],
    kind="number",
    forbidden=("linattn_core.tools.timing",),
    library_answer=_library_crossover_length,
    mistakes=[
        Mistake(lambda f, v: f * v / (f + v),
                "you are off by a factor 2: the associative form does two products of N d_phi d_v "
                "multiply-adds (S, then phi(Q) S), 4 N d_phi d_v FLOPs in all."),
        Mistake(lambda f, v: 4 * f * v / (f + v),
                "you are off by a factor 2: the quadratic form costs 2 N^2 (d_phi + d_v) FLOPs "
                "(one multiply-add is 2 FLOPs on both sides)."),
        Mistake(lambda f, v: 2 * f * v / (2 * v), "you used the softmax count with d = d_v; this "
                "is the kernel form, whose scores have width d_phi: 2 N^2 (d_phi + d_v)."),
        Mistake(lambda f, v: (f + v) / 2,
                "that is the mean of d_phi and d_v; solve 2 N^2 (d_phi + d_v) = 4 N d_phi d_v "
                "for N."),
        Mistake(lambda f, v: 2 * f * (v + 1) / (f + v + 1),
                "you kept the normalizer terms (row sums, z and phi(Q) z); the task asks for the "
                "leading terms of the table only."),
        Mistake(lambda f, v: 2 * f * v // (f + v),
                "you used integer division (//): the crossover is a real number, use /."),
        Mistake(lambda f, v: (2 * f * v / (f + v)) ** 2,
                "you returned N^2; return the length N."),
    ],
    difficulty=1,
    minutes=10,
    success="For elu+1 with d_phi = d_v the crossover is d_phi itself; wider feature maps move it "
            "out. Measured times cross elsewhere: see the timing chapter.",
)
