"""Exercises of the two feature-map chapters: ``elu_plus_one`` (feature_maps.md) and
``performer_features`` (feature_maps_random.md)."""

from __future__ import annotations

import numpy as np

from .checker import Exercise, Mistake
from .inputs import BATCH, Case

__all__ = ["elu_plus_one", "performer_features"]


def _solution_elu_plus_one(x):
    # x: any shape  ->  same shape, every entry > 0 (or 0 after exp underflows)
    # elu(x) + 1 = x + 1 for x > 0, exp(x) for x <= 0.
    # np.where evaluates both branches everywhere, so feed exp only values <= 0: no overflow.
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def _ref_elu_plus_one(x):
    from linattn_core import get_feature_map

    return get_feature_map("elu+1")(x)


def _library_elu_plus_one(x):
    import linattn_core as la  # the shortcut check() refuses: the library's own map

    return la.get_feature_map("elu+1")(x)


def _library_performer_features(x, projection):
    from linattn_core import Performer

    m, d = projection.shape
    phi = Performer(d, m, stabilize=False)
    phi.projection = projection
    return phi(x)


# the feature maps these exercises write are the library's own: calling them is not writing them
_FEATURE_MAPS = ("linattn_core.feature_maps",)


def _cases_elu_plus_one() -> list:
    rng = np.random.default_rng(401)
    return [
        Case("nine values around 0", (np.array([-3.0, -1.0, -0.5, -1e-3, 0.0, 1e-3, 0.5, 1.0,
                                                 3.0]),)),
        Case("a (7, 4) matrix", (rng.standard_normal((7, 4)),)),
        Case("one value", (np.array([-0.25]),)),
        Case("a 0-d array", (np.array(0.75),)),
        Case(f"batch dims {BATCH}", (rng.standard_normal((*BATCH, 7, 4)),), batch_ndim=len(BATCH)),
        Case("large magnitudes (|x| up to 1e3)",
             (np.array([[-1000.0, -50.0, 0.0, 50.0, 1000.0], [-710.0, -1.0, 1.0, 709.0, 710.0]]),),
             large=True),
    ]


elu_plus_one = Exercise(
    name="elu_plus_one",
    path="exercises.feature_maps.elu_plus_one",
    fn_name="elu_plus_one",
    chapter="feature_maps",
    title="The elu + 1 feature map, without overflow",
    task="""
        Write `elu_plus_one(x)` returning elu(x) + 1 elementwise (x + 1 for x > 0, exp(x) for
        x <= 0), for an array of any shape. It must not overflow or make numpy warn for
        |x| up to 1e3. check() compares with linattn_core.get_feature_map("elu+1") on small
        values around 0, a matrix, one value, a 0-d array, batch dims (2, 3) and large
        magnitudes.
    """,
    arg_names=("x",),
    cases=_cases_elu_plus_one,
    reference=_ref_elu_plus_one,
    solution_fn=_solution_elu_plus_one,
    hints=[
        "elu(x) = x for x > 0 and exp(x) - 1 for x <= 0. Add 1 to both branches.",
        "np.where(x > 0, a, b) picks elementwise, but computes both a and b on every element. "
        "Which branch overflows for x = 1000?",
        "Use np.exp(np.minimum(x, 0)) in the negative branch: it equals exp(x) wherever it is "
        "selected and never sees a large positive number.",
    ],
    mistakes=[
        Mistake(lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
                "that is elu(x), without the + 1 (and it is negative for x < 0, which a feature "
                "map for attention must not be)."),
        Mistake(lambda x: np.where(x > 0, x + 1, np.expm1(np.minimum(x, 0))),
                "you added 1 only on the positive branch; for x <= 0, elu(x) + 1 = exp(x)."),
        Mistake(lambda x: np.maximum(x, 0) + 1,
                "that is relu(x) + 1; for x <= 0 the map is exp(x), which tends to 0."),
        Mistake(lambda x: np.exp(np.minimum(x, 700.0)), "you used exp(x) on both branches; for "
                "x > 0 the map is x + 1."),
        Mistake(lambda x: x + 1, "you used x + 1 on both branches; for x <= 0 it is exp(x)."),
        Mistake(lambda x: np.logaddexp(0, x), "that is softplus, log(1 + exp(x)), another "
                "positive feature map; this one is elu(x) + 1."),
    ],
    forbid_warnings=True,
    forbidden=_FEATURE_MAPS,
    library_answer=_library_elu_plus_one,
    difficulty=1,
    minutes=10,
    success="np.where computes both branches: guarding the discarded one is a habit worth "
            "keeping in every numerical code.",
)


def _solution_performer_features(x, projection):
    # x: (..., N, d), projection W: (m, d)  ->  (..., N, m)
    m, d = projection.shape
    x = x * d ** -0.25                                  # x' = x / d^(1/4)
    wx = x @ projection.T                               # (..., N, m): w_r . x'
    half_sq = 0.5 * np.sum(x * x, axis=-1, keepdims=True)  # (..., N, 1): |x'|^2 / 2
    return np.exp(wx - half_sq) / np.sqrt(m)


def ref_performer_features(x, projection):
    """The formula itself; tests/tools/test_exercises.py checks it against the library's Performer."""
    m, d = projection.shape
    xs = x * d ** -0.25
    return np.exp(xs @ projection.T - 0.5 * np.sum(xs * xs, axis=-1, keepdims=True)) / np.sqrt(m)


def _cases_performer_features() -> list:
    rng = np.random.default_rng(501)

    def w(m, d):
        return rng.standard_normal((m, d))

    return [
        Case("small, m = 6 features, d = 4", (rng.standard_normal((5, 4)), w(6, 4))),
        Case("one token", (rng.standard_normal((1, 4)), w(6, 4))),
        Case("odd length (N = 7), m = 16", (rng.standard_normal((7, 4)), w(16, 4))),
        Case(f"batch dims {BATCH}", (rng.standard_normal((*BATCH, 7, 4)), w(6, 4)),
             batch_ndim=len(BATCH)),
        Case("d = 8, m = 3", (rng.standard_normal((5, 8)), w(3, 8))),
        Case("d = 3, m = 5", (rng.standard_normal((4, 3)), w(5, 3))),
    ]


def _variant(x, W, *, xscale=None, norm_scale=None, m_div=None, half=0.5, sign=1.0,
             stabilise=False):
    m, d = W.shape
    xscale = d ** -0.25 if xscale is None else xscale
    norm_scale = xscale if norm_scale is None else norm_scale
    xs, xn = x * xscale, x * norm_scale
    u = sign * (xs @ W.T) - half * np.sum(xn * xn, axis=-1, keepdims=True)
    if stabilise:
        u = u - u.max(axis=-1, keepdims=True)
    return np.exp(u) / (np.sqrt(m) if m_div is None else m_div)


performer_features = Exercise(
    name="performer_features",
    path="exercises.feature_maps.performer_features",
    fn_name="performer_features",
    chapter="feature_maps_random",
    title="Positive random features (Performer / FAVOR+)",
    task="""
        Write `performer_features(x, projection)` for x: (..., N, d) and a projection matrix W of
        shape (m, d), returning (..., N, m): phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(m) with
        x' = x d^(-1/4) (so that phi(q) . phi(k) estimates exp(q . k / sqrt(d))). No stabiliser.
        check() compares with the formula (which the test suite checks against
        linattn_core.get_feature_map("performer", ..., stabilize=False)) on one token, N = 7,
        batch dims (2, 3), d = 3, 4 and 8, and m both larger and smaller than d.
    """,
    arg_names=("x", "projection"),
    cases=_cases_performer_features,
    reference=ref_performer_features,
    solution_fn=_solution_performer_features,
    hints=[
        "Three ingredients per token: the m projections w_r . x' (a matrix product), the squared "
        "norm |x'|^2 (one number per token), and the constant 1/sqrt(m).",
        "Scale first: x' = x * d ** -0.25 with d = projection.shape[1]. Then x' @ projection.T "
        "has shape (..., N, m).",
        "The norm term needs keepdims=True to broadcast: "
        "0.5 * np.sum(xp * xp, axis=-1, keepdims=True) has shape (..., N, 1).",
    ],
    mistakes=[
        Mistake(lambda x, W: _variant(x, W, xscale=1.0),
                "you forgot to scale x by d^(-1/4): with x' = x / d^(1/4) for both q and k, "
                "their dot product carries the 1/sqrt(d) of softmax attention."),
        Mistake(lambda x, W: _variant(x, W, xscale=W.shape[1] ** -0.5),
                "you scaled x by d^(-1/2); each of q and k gets d^(-1/4), so that together they "
                "give 1/sqrt(d)."),
        Mistake(lambda x, W: _variant(x, W, xscale=4 ** -0.25),
                "you scaled x by a fixed 4^(-1/4) (the d of the small inputs); use "
                "d = projection.shape[1], so that any d works."),
        Mistake(lambda x, W: _variant(x, W, norm_scale=1.0),
                "the projection uses x' but the norm term uses the unscaled x: use |x'|^2 with "
                "x' = x d^(-1/4) in both places."),
        Mistake(lambda x, W: _variant(x, W, m_div=1.0),
                "you forgot the 1/sqrt(m) factor (it makes phi(q) . phi(k) an average over the m "
                "features)."),
        Mistake(lambda x, W: _variant(x, W, m_div=float(W.shape[0])),
                "you divided by m; each of phi(q) and phi(k) gets 1/sqrt(m), so that their dot "
                "product averages over the m features."),
        Mistake(lambda x, W: _variant(x, W, m_div=np.sqrt(W.shape[1])),
                "you divided by sqrt(d); the factor is 1/sqrt(m), with m = projection.shape[0]."),
        Mistake(lambda x, W: _variant(x, W, half=0.0),
                "you left out the -|x'|^2 / 2 term; without it the estimate is not of "
                "exp(q . k / sqrt(d))."),
        Mistake(lambda x, W: _variant(x, W, half=1.0),
                "you subtracted |x'|^2; the term is |x'|^2 / 2."),
        Mistake(lambda x, W: _variant(x, W, sign=-1.0),
                "you used exp(-W x' ...); the sign is +."),
        Mistake(lambda x, W: _variant(x, W, stabilise=True),
                "you stabilised (subtracted the row maximum); this exercise asks for the plain, "
                "unstabilised features."),
    ],
    exception_hints=[("matmul", "The projection W has shape (m, d): use x' @ projection.T to get "
                               "(..., N, m).")],
    forbidden=_FEATURE_MAPS,
    library_answer=_library_performer_features,
    difficulty=2,
    minutes=15,
    success="Every feature is positive, so the denominators of linear attention never cancel to "
            "zero, unlike trigonometric random features.",
)
