"""Exercises of causal.md: causal_cumsum_mine, streaming_step, chunked_causal.

Their typical wrong answers, each failing with the message that names the mistake, and their
references held to the library. What holds for every exercise (adversarial answers, the watch for
library calls, graded mode) is in test_exercises.py.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from _exercises import SOL, _prefix, aa_quadratic, cc_strict, diagnosed, run_check, sw
from _tolerances import assert_close

from linattn_core import (
    LinearAttentionState,
    get_feature_map,
    linear_attention,
)
from linattn_core.tools import exercises


def cc_strict_unclamped(q, k, v, phi):
    fq, S, z = _prefix(q, k, v, phi, exclusive=True)
    return np.einsum("...nf,...nfv->...nv", fq, S) / (fq * z).sum(-1)[..., None]

def cc_noncausal(q, k, v, phi):
    return SOL["associative_attention"](q, k, v, phi)

def cc_unnormalized(q, k, v, phi):
    fq, S, _ = _prefix(q, k, v, phi)
    return np.einsum("...nf,...nfv->...nv", fq, S)

def cc_masked_quadratic(q, k, v, phi):
    A = np.tril(phi(q) @ sw(phi(k)))
    return A @ v / np.maximum(A.sum(-1), 1e-6)[..., None]

def cc_axis0(q, k, v, phi):
    fq, fk = phi(q), phi(k)
    S = np.cumsum(fk[..., :, None] * v[..., None, :], axis=0)
    z = np.cumsum(fk, axis=0)
    return np.einsum("...nf,...nfv->...nv", fq, S) / (fq * z).sum(-1)[..., None]

def ss_query_first(S, z, q_t, k_t, v_t, phi):
    fq, fk = phi(q_t[None])[0], phi(k_t[None])[0]
    y = fq @ S / max(fq @ z, 1e-6)
    return S + np.outer(fk, v_t), z + fk, y

def ss_inplace(S, z, q_t, k_t, v_t, phi):
    fq, fk = phi(q_t[None])[0], phi(k_t[None])[0]
    S += np.outer(fk, v_t)
    z += fk
    return S, z, fq @ S / max(fq @ z, 1e-6)

def ss_transposed(S, z, q_t, k_t, v_t, phi):
    fq, fk = phi(q_t[None])[0], phi(k_t[None])[0]
    S_new = S + np.outer(v_t, fk)
    return S_new, z + fk, fq @ S / max(fq @ z, 1e-6)

def ss_two_outputs(S, z, q_t, k_t, v_t, phi):
    out = SOL["streaming_step"](S, z, q_t, k_t, v_t, phi)
    return out[0], out[2]

def ss_unnormalized(S, z, q_t, k_t, v_t, phi):
    fq, fk = phi(q_t[None])[0], phi(k_t[None])[0]
    S_new = S + np.outer(fk, v_t)
    return S_new, z + fk, fq @ S_new

def cc_no_phi_q(q, k, v, phi):
    _, S, z = _prefix(q, k, v, phi)
    return np.einsum("...nf,...nfv->...nv", q, S) / np.maximum((q * z).sum(-1), 1e-6)[..., None]

def cc_no_clamp(q, k, v, phi):
    fq, S, z = _prefix(q, k, v, phi)
    return np.einsum("...nf,...nfv->...nv", fq, S) / (fq * z).sum(-1)[..., None]

def ss_no_clamp(S, z, q_t, k_t, v_t, phi):
    fq, fk = phi(q_t[None])[0], phi(k_t[None])[0]
    S_new, z_new = S + np.outer(fk, v_t), z + fk
    return S_new, z_new, fq @ S_new / (fq @ z_new)

@pytest.mark.parametrize("feature_map", ["elu+1", "performer", "relu"])
def test_streaming_reference_matches_library(feature_map):
    d, d_v, n = 4, 3, 9
    phi = (get_feature_map("performer", d=d, num_features=6, seed=1, stabilize=False)
           if feature_map == "performer" else get_feature_map(feature_map))
    q, k = np.random.default_rng(1).standard_normal((2, n, d))
    v = np.random.default_rng(2).standard_normal((n, d_v))
    state = LinearAttentionState(d, d_v, phi)
    S, z = np.zeros_like(state.S), np.zeros_like(state.z)
    ys = []
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # relu: denominators <= 0 are clamped, and said so
        for t in range(n):
            S, z, y = exercises.causal.ref_streaming_step(S, z, q[t], k[t], v[t], phi)
            assert_close(y, state.step(q[t], k[t], v[t]), what=f"step {t}")
            ys.append(y)
        assert_close(np.stack(ys), linear_attention(q, k, v, phi, causal=True), what="causal")
    assert_close(S, state.S, what="S")
    assert_close(z, state.z, what="z")
    if feature_map != "relu":
        assert_close(ys[0], v[0], what="y_0 = v_0")

def chunked_vectorised(q, k, v, phi, C=64):
    """Causal linear attention by chunks, all at once: (N/C, C, C) blocks and N/C states, O(N C)."""
    fq, fk = phi(q), phi(k)
    n, f, dv = q.shape[-2], fq.shape[-1], v.shape[-1]
    pad = -n % C
    widths = [(0, 0)] * (q.ndim - 2) + [(0, pad), (0, 0)]
    Q, K, V = (np.pad(x, widths).reshape(x.shape[:-2] + (-1, C, x.shape[-1])) for x in (fq, fk, v))
    A = np.tril(Q @ sw(K))                                          # (..., N/C, C, C)
    S = np.cumsum(sw(K) @ V, axis=-3) - sw(K) @ V                   # state before each chunk
    z = np.cumsum(K.sum(-2), axis=-2) - K.sum(-2)                   # (..., N/C, f)
    num = Q @ S + A @ V
    den = np.einsum("...ncf,...nf->...nc", Q, z) + A.sum(-1)
    out = num / np.maximum(den, 1e-6)[..., None]
    return out.reshape(q.shape[:-2] + (-1, dv))[..., :n, :] + 0 * f

def test_an_o_n_c_chunked_answer_passes_the_memory_check(capsys):
    import tracemalloc

    ex = exercises.causal.prefix_sums
    n = exercises.checker.MEMORY_LENGTHS[-1]
    case = ex._memory_case(n)
    tracemalloc.start()
    try:
        chunked_vectorised(*case.fresh_args())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak >= n * n // 2  # a size threshold of half an N x N byte matrix would refuse it
    ok, out = run_check(ex, chunked_vectorised, capsys)
    assert ok, out
    assert "never built an N x N matrix" in out

@pytest.mark.parametrize(("name", "fn"), [("associative_attention", aa_quadratic),
                                          ("causal_cumsum_mine", cc_masked_quadratic)])
def test_an_n_by_n_answer_fails_the_memory_check_with_its_growth(name, fn, capsys):
    ok, out = run_check(exercises.get(name), fn, capsys)
    assert not ok and "Almost!" in out and "grows like N^2" in out, out
    assert re.search(r"\((3\.\d|4\.\d) times as much for 2 times the tokens", out), out


WRONG = [
    ("causal_cumsum_mine", cc_strict, "strictly-causal"),
    ("causal_cumsum_mine", cc_strict_unclamped, "strictly-causal"),
    ("causal_cumsum_mine", cc_noncausal, "non-causal attention"),
    ("causal_cumsum_mine", cc_unnormalized, "forgot the normalizer"),
    ("causal_cumsum_mine", cc_masked_quadratic, "N x N matrix"),
    ("causal_cumsum_mine", cc_axis0, "over axis 0"),
    ("causal_cumsum_mine", cc_no_phi_q, "did not apply phi to q"),
    ("causal_cumsum_mine", cc_no_clamp, "did not clamp the denominator"),
    ("streaming_step", ss_query_first, "before adding the current token"),
    ("streaming_step", ss_inplace, "in place"),
    ("streaming_step", ss_transposed, "wrong way round"),
    ("streaming_step", ss_two_outputs, "tuple (S_new, z_new, y_t) of three arrays"),
    ("streaming_step", ss_unnormalized, "forgot the normalizer"),
    ("streaming_step", ss_no_clamp, "did not clamp the denominator"),
]


@pytest.mark.parametrize(("name", "fn", "message"), WRONG,
                         ids=[f"{n}-{f.__name__}-{i}" for i, (n, f, _) in enumerate(WRONG)])
def test_typical_mistake_is_diagnosed(name, fn, message, capsys):
    diagnosed(name, fn, message, capsys)
