"""The numbers the chapters' figures show, computed by the library: no drawing here.

Each ``*_data`` / ``*_curves`` function returns plain arrays in a dict, which the figure builders of
:mod:`~linattn_core.tools.viz.causal`, :mod:`~linattn_core.tools.viz.feature_maps` and
:mod:`~linattn_core.tools.viz.beyond` draw, and the tests check against the library's own functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..style import as_float
from ..timing.cost import check_sizes


def resolve_feature_map(feature_map: Any, *, d: int, seed: int = 0, num_features: int | None = None,
                        **options: Any) -> tuple[str, Any]:
    """``(label, phi)`` for a name or a callable.

    ``"performer"`` gets ``d``, ``num_features`` (default 4 d), ``seed`` and ``stabilize=False`` (so
    φ(q)·φ(k) is the plain unbiased kernel estimate the pictures are about); other ``options`` go to
    :func:`linattn_core.get_feature_map` unchanged.
    """
    from ...feature_maps import as_feature_map, get_feature_map

    if callable(feature_map):
        return getattr(feature_map, "name", None) or getattr(feature_map, "__name__", "custom φ"), \
            as_feature_map(feature_map, d)
    if not isinstance(feature_map, str):
        raise TypeError(f"feature_map must be a name or a callable, got {type(feature_map).__name__}")
    if feature_map == "performer":
        m = num_features if num_features is not None else 4 * d
        opts = {"stabilize": False, **options}
        return f"performer (m={m})", get_feature_map("performer", d=d, num_features=m, seed=seed, **opts)
    return feature_map, get_feature_map(feature_map, **options)


def feature_pair(phi: Any, q: np.ndarray, k: np.ndarray, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """φ(q), φ(k) as the attention functions see them (``pair`` handles positions and stabilisers)."""
    if hasattr(phi, "pair"):
        fq, fk = phi.pair(q, k, causal=causal)
    else:
        fq, fk = phi(q), phi(k)
    return np.asarray(fq, dtype=np.float64), np.asarray(fk, dtype=np.float64)


def seeded_qkv(N: int, d: int, d_v: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded standard-normal ``q, k: (N, d)`` and ``v: (N, d_v)`` in float64 (signed, as in the tests)."""
    # q, k: (N, d), v: (N, d_v)
    check_sizes(N=N, d=d, d_v=d_v)
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, d)), rng.standard_normal((N, d)), rng.standard_normal((N, d_v))


def matrix_vs_state_data(q: Any, k: Any, v: Any, feature_map: Any = "elu+1", *, eps: float = 1e-6,
                         label: str | None = None) -> dict[str, Any]:
    """Everything the matrix-vs-state picture shows, computed by the library both ways.

    Parameters
    ----------
    q, k : array (N, d);  v : array (N, d_v)
    feature_map : name or callable φ

    Returns
    -------
    dict with ``scores`` (N, N) = φ(q_i)·φ(k_j) (the full matrix; the causal mask is the figure's job),
    ``weights`` (N, N) causal normalized attention, ``y_matrix`` (N, d_v) = weights @ v (from
    ``kernel_attention``), ``S`` (N, d_phi, d_v) and ``z`` (N, d_phi): the state after t + 1 tokens, and
    ``y_state`` (N, d_v): the outputs of :class:`LinearAttentionState.step`; ``max_diff`` (N,) per step.
    """
    import warnings

    from ...attention import kernel_attention
    from ...streaming import LinearAttentionState

    # q, k: (N, d), v: (N, d_v)
    q_ = as_float("q", q, 2)
    k_ = as_float("k", k, 2)
    v_ = as_float("v", v, 2)
    if q_.shape != k_.shape or v_.shape[0] != q_.shape[0]:
        raise ValueError(f"q, k must be (N, d) and v (N, d_v) with the same N; got q {q_.shape}, "
                         f"k {k_.shape}, v {v_.shape}")
    (N, d), d_v = q_.shape, v_.shape[1]
    # cosFormer's positions need M up front to stream: the whole sequence, as in the matrix form
    extra = {"max_len": N} if feature_map == "cosformer" else {}
    name, phi = resolve_feature_map(feature_map, d=d, **extra)
    phi_q, phi_k = feature_pair(phi, q_, k_, causal=True)  # (N, d_phi) each
    scores = phi_q @ phi_k.T  # (N, N)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # identity map: non-positive denominators
        y_matrix, weights = kernel_attention(q_, k_, v_, phi, causal=True, eps=eps, return_weights=True)
        state = LinearAttentionState(d, d_v, phi, eps=eps)
        S, z, y_state = [], [], []
        for t in range(N):
            y_state.append(np.asarray(state.step(q_[t], k_[t], v_[t])))
            S.append(np.array(state.S, dtype=np.float64))
            z.append(np.array(state.z, dtype=np.float64))
    y_matrix, y_state = np.asarray(y_matrix), np.stack(y_state)
    return {"label": label or name, "scores": scores, "weights": np.asarray(weights), "y_matrix": y_matrix,
            "S": np.stack(S), "z": np.stack(z), "y_state": y_state,
            "max_diff": np.max(np.abs(y_matrix - y_state), axis=1), "v": v_}


def feature_map_comparison_data(q: Any, k: Any, v: Any, feature_maps: Sequence[Any] = ("elu+1",), *,
                                eps: float = 1e-6, seed: int = 0) -> dict[str, Any]:
    """Normalized attention of each feature map beside softmax's, for the same q, k, v (non-causal).

    Returns
    -------
    dict with ``softmax``: {``weights`` (N_q, N_k), ``y`` (N_q, d_v)} and ``maps``: label -> {``weights``,
    ``y``, ``diff`` = weights - softmax weights, ``denominators`` (N_q,) = φ(q_i)·Σ_j φ(k_j),
    ``max_abs`` = max |diff|, ``tv`` = mean over rows of half the L1 distance (attention mass misplaced),
    ``out_rel`` = ‖y - y_softmax‖ / ‖y_softmax‖, ``n_nonpositive`` = number of denominators ≤ 0}.
    """
    import warnings

    from ...attention import kernel_attention, softmax_attention

    # q: (N_q, d), k: (N_k, d), v: (N_k, d_v)
    q_, k_, v_ = as_float("q", q, 2), as_float("k", k, 2), as_float("v", v, 2)
    y_s, w_s = softmax_attention(q_, k_, v_, return_weights=True)
    maps: dict[str, Any] = {}
    for fm in feature_maps:
        label, phi = resolve_feature_map(fm, d=q_.shape[1], seed=seed)
        fq, fk = feature_pair(phi, q_, k_, causal=False)
        den = fq @ fk.sum(axis=0)  # (N_q,)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # counted below instead
            y, w = kernel_attention(q_, k_, v_, phi, eps=eps, return_weights=True)
        w, y = np.asarray(w, dtype=np.float64), np.asarray(y, dtype=np.float64)
        diff = w - w_s
        maps[label] = {"weights": w, "y": y, "diff": diff, "denominators": den,
                       "max_abs": float(np.max(np.abs(diff))), "tv": float(0.5 * np.abs(diff).sum(1).mean()),
                       "out_rel": float(np.linalg.norm(y - y_s) / np.linalg.norm(y_s)),
                       "n_nonpositive": int(np.sum(den <= 0))}
    return {"softmax": {"weights": np.asarray(w_s), "y": np.asarray(y_s)}, "maps": maps}


PERFORMER_VARIANTS = (("positive", True), ("positive", False), ("trig", True), ("trig", False))


def variant_label(kind: str, orthogonal: bool) -> str:
    """How legends and menus name a Performer variant: ``'positive, orthogonal'``."""
    return f"{'positive' if kind == 'positive' else 'trigonometric'}, {'orthogonal' if orthogonal else 'iid'}"


def performer_error_curves(*, d: int = 16, N: int = 48, ms: Sequence[int] = (4, 8, 16, 32, 64, 128, 256),
                           n_seeds: int = 10, seed: int = 0, input_scale: float = 0.75,
                           n_pairs: int = 150, eps: float = 1e-6) -> dict[str, Any]:
    """Relative errors of Performer random features against softmax, for every m and variant.

    For each variant (positive / trigonometric features, orthogonal / iid projections) and each m, the
    errors are the median over ``n_seeds`` projections (the same seeds for every variant, so the
    comparison is paired; the median because single draws are heavy-tailed):

    - ``kernel``: mean over entries of |K̂_ij − K_ij| / K_ij, with K_ij = exp(q_i·k_j / √d) and
      K̂ = φ(Q)φ(K)ᵀ. Entrywise relative error, so small kernel values count as much as large ones
      (where the positive features shine);
    - ``output``: ‖Ŷ − Y‖_F / ‖Y‖_F against :func:`softmax_attention` (trigonometric features can give
      denominators ≤ 0: the clamp then makes the output error huge).

    q and k are seeded standard normal times ``input_scale``. ``pairs`` keeps, for the first seed,
    ``n_pairs`` sampled entries (K_ij, K̂_ij) for a scatter plot.
    """
    from ...attention import softmax_attention
    from ...feature_maps import get_feature_map

    ms = [int(m) for m in ms]
    if not ms or min(ms) < 1:
        raise ValueError(f"ms must be a non-empty list of positive feature counts, got {ms}")
    q, k, v = seeded_qkv(N, d, d, seed)
    q, k = q * input_scale, k * input_scale
    K = np.exp(q @ k.T / np.sqrt(d))  # (N, N)
    y = np.asarray(softmax_attention(q, k, v))
    pick = np.random.default_rng(seed + 1).choice(N * N, size=min(n_pairs, N * N), replace=False)
    out: dict[str, Any] = {"ms": np.array(ms), "d": d, "N": N, "n_seeds": n_seeds, "variants": {},
                           "exact_pairs": K.ravel()[pick]}
    for kind, orth in PERFORMER_VARIANTS:
        ker = np.zeros((len(ms), n_seeds))
        outp = np.zeros((len(ms), n_seeds))
        pairs = []
        for a, m in enumerate(ms):
            for s in range(n_seeds):
                phi = get_feature_map("performer", d=d, num_features=m, seed=seed + s, orthogonal=orth,
                                      stabilize=False, kind=kind)
                fq, fk = feature_pair(phi, q, k, causal=False)
                K_hat = fq @ fk.T
                ker[a, s] = np.mean(np.abs(K_hat - K) / K)
                # the normalized output from K̂, exactly as kernel_attention forms it (the clamp
                # max(den, eps) included), without computing the features a second time
                y_hat = (K_hat @ v) / np.maximum(K_hat.sum(1), eps)[:, None]
                outp[a, s] = np.linalg.norm(y_hat - y) / np.linalg.norm(y)
                if s == 0:
                    pairs.append(K_hat.ravel()[pick])
        out["variants"][(kind, orth)] = {"kernel": np.median(ker, 1), "output": np.median(outp, 1),
                                         "kernel_all": ker, "output_all": outp, "pairs": np.stack(pairs)}
    return out


def chunk_layout(N: int, chunk_size: int) -> np.ndarray:
    """Integer (N, N) map of causal attention computed chunkwise: 0 future (j > i), 1 same chunk and
    j ≤ i (the masked product inside a chunk), 2 key in an earlier chunk (folded into the state S, z
    carried into query i's chunk). Any ``N`` works with any ``chunk_size`` (the last chunk may be short)."""
    check_sizes(N=N, chunk_size=chunk_size)
    i = np.arange(N)[:, None]
    j = np.arange(N)[None, :]
    same = (i // chunk_size) == (j // chunk_size)
    return np.where(j > i, 0, np.where(same, 1, 2)).astype(np.int64)


def decay_data(q: Any, k: Any, v: Any, gammas: Sequence[float] = (1.0, 0.95, 0.9, 0.8, 0.7, 0.5), *,
               feature_map: Any = "elu+1", recent: int = 8) -> dict[str, Any]:
    """Implied causal weights of decayed linear attention for each constant decay γ.

    Returns ``gammas``, ``weights`` (G, N, N) from :func:`linattn_core.decay.decayed_kernel_attention`,
    and ``recent_mass`` (G,): the share of the last query's weight on its ``recent`` most recent tokens.
    """
    from ...decay import decayed_kernel_attention

    gs = [float(g) for g in gammas]
    if not gs or any(not 0 < g <= 1 for g in gs):
        raise ValueError(f"gammas must be decays in (0, 1], got {gammas}")
    W = np.stack([np.asarray(decayed_kernel_attention(q, k, v, feature_map, decay=g, return_weights=True)[1],
                             dtype=np.float64) for g in gs])  # (G, N, N)
    return {"gammas": gs, "weights": W, "recent": recent, "recent_mass": W[:, -1, -recent:].sum(-1)}
