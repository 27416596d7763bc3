"""Exercises of the trade-offs chapter: ``clamped_normalize``, ``kv_cache_bytes`` and
``exact_capacity``."""

from __future__ import annotations

import numpy as np

from ._numpy import FLOAT_COUNT, float32_count, float64_count
from .checker import Exercise, Mistake
from .inputs import BATCH, EPS, Case

__all__ = ["clamped_normalize", "exact_capacity", "kv_cache_bytes"]


def _solution_clamped_normalize(num, den, eps):
    # num: (..., N, d_v), den: (..., N)  ->  (..., N, d_v)
    # Clamp: denominators below eps become eps; those above are left exactly as they are.
    return num / np.maximum(den, eps)[..., None]


def _ref_clamped_normalize(num, den, eps):
    return num / np.maximum(den, eps)[..., None]


def _library_clamped_normalize(num, den, eps):
    from linattn_core.attention import normalized  # the shortcut check() refuses: the library's clamp

    return normalized(num, den, eps)


def _cases_clamped_normalize() -> list:
    rng = np.random.default_rng(801)
    return [
        Case("denominators around 1", (rng.standard_normal((5, 3)), rng.uniform(0.5, 2.0, 5),
                                       1e-6)),
        Case("one token", (rng.standard_normal((1, 3)), np.array([0.7]), 1e-6)),
        Case("zero, tiny and negative denominators",
             (rng.standard_normal((6, 3)), np.array([2.0, 0.0, 1e-9, -0.5, 1e-3, 1e-6]), 1e-6)),
        Case("N = d_v = 4", (rng.standard_normal((4, 4)), rng.uniform(0.5, 2.0, 4), 1e-6)),
        Case(f"batch dims {BATCH}, eps = 0.1",
             (rng.standard_normal((*BATCH, 7, 3)), rng.uniform(-0.5, 2.0, (*BATCH, 7)), 0.1),
             batch_ndim=len(BATCH)),
    ]


clamped_normalize = Exercise(
    name="clamped_normalize",
    path="exercises.tradeoffs.clamped_normalize",
    fn_name="clamped_normalize",
    chapter="tradeoffs",
    title="Normalising with a clamped denominator",
    task="""
        Write `clamped_normalize(num, den, eps)` for numerators num: (..., N, d_v) and
        denominators den: (..., N), returning num / max(den, eps), the denominator broadcast over
        d_v. A denominator at or above eps is used exactly as it is; one below (zero, tiny or
        negative) is replaced by eps. check() includes zero, tiny and negative denominators,
        N = d_v, batch dims (2, 3) and eps = 0.1.
    """,
    arg_names=("num", "den", "eps"),
    cases=_cases_clamped_normalize,
    reference=_ref_clamped_normalize,
    solution_fn=_solution_clamped_normalize,
    hints=[
        "np.maximum(den, eps) is the elementwise max of an array and a number.",
        "den has one value per row of num; den[..., None] has shape (..., N, 1) and broadcasts "
        "over the d_v columns.",
    ],
    mistakes=[
        Mistake(lambda n, d, e: n / (d + e)[..., None],
                "you added eps (den + eps) instead of clamping (max(den, eps)). Adding changes "
                "every output a little, and does not protect a negative denominator near -eps; "
                "the clamp changes nothing when den >= eps."),
        Mistake(lambda n, d, e: n / d[..., None],
                "you did not clamp: a zero denominator gives inf or NaN. Use max(den, eps)."),
        Mistake(lambda n, d, e: n / np.minimum(d, e)[..., None],
                "you used the minimum; the clamp is max(den, eps)."),
        Mistake(lambda n, d, e: n / np.maximum(np.abs(d), e)[..., None],
                "you took |den|: a negative denominator must be clamped up to eps, not flipped."),
        Mistake(lambda n, d, e: n / np.maximum(d, e),
                "you divided without [..., None], so numpy broadcast den along the d_v axis "
                "(it only worked because N = d_v). Row i must be divided by den[i]."),
        Mistake(lambda n, d, e: n / np.maximum(d, EPS)[..., None],
                "you used a fixed 1e-6; use the eps argument."),
        Mistake(lambda n, d, e: np.where((d > e)[..., None], n / np.where(d > e, d, 1.0)[
            ..., None], 0.0),
                "you set the rows with small denominators to 0; divide them by eps instead."),
    ],
    exception_hints=[("broadcast", "den has shape (..., N) and num (..., N, d_v): add an axis, "
                                   "den[..., None].")],
    library_answer=_library_clamped_normalize,
    difficulty=1,
    minutes=10,
    success="max(den, eps) leaves every healthy row bit-for-bit unchanged: that is why the "
            "quadratic and associative forms agree to rounding for any eps.",
)


def _solution_kv_cache_bytes(t, d, d_v, itemsize):
    # after t tokens the cache holds t keys (d numbers each) and t values (d_v numbers each)
    return t * (d + d_v) * itemsize


def _ref_kv_cache_bytes(t, d, d_v, itemsize):
    return int(t) * (int(d) + int(d_v)) * int(itemsize)


def _cases_kv_cache_bytes() -> list:
    return [
        Case("one token, d = 4, d_v = 3, float64", (1, 4, 3, 8)),
        Case("7 tokens, d = 64, d_v = 32, float16", (7, 64, 32, 2)),
        Case("empty cache (t = 0)", (0, 64, 64, 2)),
        Case("4096 tokens, d = d_v = 128, bfloat16", (4096, 128, 128, 2)),
        Case("a million tokens, d = 128, d_v = 256, float32", (10**6, 128, 256, 4)),
        Case("t = 2**45 + 1 tokens, d = 129, d_v = 130, 1-byte numbers (over 2**53 bytes: only "
             "integer arithmetic is exact)", (2**45 + 1, 129, 130, 1)),
    ]


kv_cache_bytes = Exercise(
    name="kv_cache_bytes",
    path="exercises.tradeoffs.kv_cache_bytes",
    fn_name="kv_cache_bytes",
    chapter="tradeoffs",
    title="How much memory does a KV cache hold after t tokens?",
    task="""
        Write `kv_cache_bytes(t, d, d_v, itemsize)` returning, as an int, the bytes that the KV
        cache of one attention head holds after t tokens: every key (d numbers) and every value
        (d_v numbers), itemsize bytes each. check() uses d != d_v, t = 0, t = 10**6 and a count
        so large that only exact integer arithmetic gets it right.
    """,
    arg_names=("t", "d", "d_v", "itemsize"),
    cases=_cases_kv_cache_bytes,
    reference=_ref_kv_cache_bytes,
    solution_fn=_solution_kv_cache_bytes,
    hints=[
        "What does the cache keep for each past token? (Softmax attention must look at all of "
        "them again for the next query.)",
        "Per token: a key with d entries and a value with d_v entries.",
    ],
    kind="int",
    mistakes=[
        Mistake(lambda t, d, dv, i: t * d * i, "you counted only the keys; the cache keeps the "
                "values too."),
        Mistake(lambda t, d, dv, i: t * dv * i, "you counted only the values; the cache keeps the "
                "keys too."),
        Mistake(lambda t, d, dv, i: 2 * t * d * i,
                "you assumed d_v = d (2 t d); keys have d entries and values d_v."),
        Mistake(lambda t, d, dv, i: 2 * t * dv * i,
                "you assumed d = d_v (2 t d_v); keys have d entries and values d_v."),
        Mistake(lambda t, d, dv, i: t * (d + dv),
                "you counted entries, not bytes: multiply by itemsize."),
        Mistake(lambda t, d, dv, i: t * (d + dv) * i * 8, "you counted bits; return bytes."),
        Mistake(lambda t, d, dv, i: float32_count(t, d + dv, i), FLOAT_COUNT),
        Mistake(lambda t, d, dv, i: float64_count(t, d + dv, i), FLOAT_COUNT),
        Mistake(lambda t, d, dv, i: (t + 1) * (d + dv) * i, "off by one: after t tokens the cache "
                "holds t of them."),
        Mistake(lambda t, d, dv, i: t * t * (d + dv) * i,
                "you counted t**2; the cache grows linearly: one key and one value per token."),
        Mistake(lambda t, d, dv, i: t * d * dv * i,
                "you multiplied d and d_v; the key and the value are stored side by side, so add "
                "them."),
        Mistake(lambda t, d, dv, i: d * dv * i,
                "that is the size of the linear-attention state S (d x d_v), which does not grow "
                "with t; the KV cache stores every token."),
    ],
    difficulty=1,
    minutes=5,
    success="It grows by (d + d_v) * itemsize bytes per token, forever; the linear-attention "
            "state stays at d_phi * (d_v + 1) numbers.",
)


def _solution_exact_capacity(d_phi, d_v):
    # the least-squares state Phi^+ V is exact while the n feature vectors are linearly
    # independent, which n <= d_phi of them can be (random ones are); d_v does not matter
    return d_phi


def _ref_exact_capacity(d_phi, d_v):
    return int(d_phi)


exact_capacity = Exercise(
    name="exact_capacity",
    path="exercises.tradeoffs.exact_capacity",
    fn_name="exact_capacity",
    chapter="tradeoffs",
    title="Predict it first: how many pairs can a state recall exactly?",
    task="""
        Before running anything, predict: a memory stores n random key-value pairs (keys with
        d_phi features, values with d_v entries) in a state S of shape d_phi x d_v, read out
        linearly (S^T phi(k)) and written in the best possible way (the least-squares state).
        What is the largest n for which every stored value can come back exactly? Write
        `exact_capacity(d_phi, d_v)` returning that n as an int. check() uses d_phi != d_v in
        both directions; then the solution runs the experiment to test the prediction.
    """,
    arg_names=("d_phi", "d_v"),
    cases=lambda: [Case("d_phi = 16, d_v = 8", (16, 8)), Case("d_phi = 8, d_v = 64", (8, 64)),
                   Case("d_phi = 32, d_v = 32", (32, 32)), Case("d_phi = 1, d_v = 5", (1, 5))],
    reference=_ref_exact_capacity,
    solution_fn=_solution_exact_capacity,
    hints=[
        "Reading the state with key i gives S^T phi(k_i). Exact recall of all n pairs means "
        "Phi S = V, with the n feature vectors as the rows of Phi (n x d_phi).",
        "Phi S = V has an exact solution S for every V when the rows of Phi are linearly "
        "independent. How many vectors in d_phi dimensions can be linearly independent? Does d_v "
        "enter at all?",
    ],
    kind="int",
    unit="pairs",
    mistakes=[
        Mistake(lambda f, v: f * v, "d_phi * d_v counts the numbers in S, but each pair needs its "
                "own direction in feature space: the limit is the number of linearly independent "
                "keys, d_phi."),
        Mistake(lambda f, v: f * (v + 1), "that is the size of S and z in numbers; the recall "
                "limit is the number of independent feature directions, d_phi."),
        Mistake(lambda f, v: v, "d_v limits how long each value is, not how many pairs fit; the "
                "keys' feature dimension d_phi does."),
        Mistake(lambda f, v: min(f, v), "d_v does not enter: each value column is a separate least-"
                "squares problem with the same n x d_phi matrix of features."),
        Mistake(lambda f, v: f // 2, "d_phi / 2 is about where linear attention's plain sum "
                "already blurs badly; the best state is exact up to d_phi."),
        Mistake(lambda f, v: f - 1, "off by one: d_phi independent vectors fit in d_phi "
                "dimensions."),
    ],
    difficulty=1,
    minutes=5,
    success="The best state holds d_phi pairs exactly, with a linear read-out (S^T phi(k)), "
            "whatever d_v is; linear attention's sum of outer products is exact only when the "
            "keys' features are orthonormal.",
)
