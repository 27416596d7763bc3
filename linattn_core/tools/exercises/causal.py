"""Exercises of the causal chapter: ``prefix_sums``, ``streaming_step`` and ``chunked_form``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import compare
from ._numpy import ABS_CLAMP, clamp, row_normalize
from ._numpy import t as swap_last
from .associative import memory_case_attention
from .checker import Exercise, Mistake
from .feedback import wrap
from .inputs import (
    BATCH,
    EPS,
    Case,
    attention_cases,
    elu_phi,
    identity_phi,
    lib_phi,
    performer_phi,
    qkv,
    relu_phi,
    signed_qkv,
    signed_step,
    zero_denominator_qkv,
)

__all__ = ["chunked_form", "prefix_sums", "streaming_step"]


def _solution_causal_cumsum(q, k, v, phi, eps=1e-6):
    # q, k: (..., N, d), v: (..., N, d_v)  ->  (..., N, d_v); token t sees tokens 0..t
    fq, fk = phi(q), phi(k)                                       # (..., N, d_phi)
    S = np.cumsum(fk[..., :, None] * v[..., None, :], axis=-3)    # (..., N, d_phi, d_v): S_t
    z = np.cumsum(fk, axis=-2)                                    # (..., N, d_phi): z_t
    num = np.einsum("...nf,...nfv->...nv", fq, S)                 # phi(q_t)^T S_t
    den = np.einsum("...nf,...nf->...n", fq, z)                   # phi(q_t) . z_t
    return num / np.maximum(den, eps)[..., None]


def _ref_causal_cumsum(q, k, v, phi):
    from linattn_core import linear_attention

    return linear_attention(q, k, v, feature_map=lib_phi(phi), causal=True, method="cumsum")


def _library_causal_cumsum(q, k, v, phi):
    import linattn_core as la  # the shortcut check() refuses: the library's own causal form

    return la.linear_attention(q, k, v, phi, causal=True)


def _variant(q, k, v, phi, *, shift=0, reverse=False, normalize=True, phi_q=True, phi_k=True,
             axis=None, eps=EPS, absolute=False):
    fq = phi(q) if phi_q else q
    fk = phi(k) if phi_k else k
    outer = fk[..., :, None] * v[..., None, :]
    if axis is not None:  # cumsum along a wrong axis
        S, z = np.cumsum(outer, axis=axis), np.cumsum(fk, axis=axis)
    elif reverse:
        S = np.flip(np.cumsum(np.flip(outer, -3), -3), -3)
        z = np.flip(np.cumsum(np.flip(fk, -2), -2), -2)
    else:
        S, z = np.cumsum(outer, axis=-3), np.cumsum(fk, axis=-2)
        if shift:  # exclusive prefix sums: token t sees 0..t-1
            S, z = S - outer, z - fk
    num = np.einsum("...nf,...nfv->...nv", fq, S)
    if not normalize:
        return num
    den = np.einsum("...nf,...nf->...n", fq, z)
    return num / clamp(den, eps, absolute)[..., None]


_NO_PHI_Q = ("you did not apply phi to q: the prefix states are built from phi(k), and each one is "
             "queried with phi(q_t), not q_t.")

prefix_sums = Exercise(
    name="causal_cumsum_mine",
    path="exercises.causal.prefix_sums",
    fn_name="causal_cumsum_mine",
    chapter="causal",
    title="Causal linear attention with prefix sums",
    task="""
        Write `causal_cumsum_mine(q, k, v, phi)` for q, k: (..., N, d), v: (..., N, d_v), returning
        (..., N, d_v) where token t attends to tokens 0..t (itself included, so y_0 = v_0):
        S_t = sum_{j<=t} phi(k_j) v_j^T, z_t = sum_{j<=t} phi(k_j),
        y_t = phi(q_t)^T S_t / max(phi(q_t) . z_t, 1e-6). Use prefix sums (np.cumsum), no N x N
        matrix. check() compares with linattn_core.linear_attention(..., causal=True) on one
        token, N = 7, d = 5, batch dims, a feature map with d_phi != d, relu features whose
        denominators reach 0 (only the clamp keeps them finite), identity features whose
        denominators are negative, and measures that the memory of 1024- and 2048-token inputs
        does not grow like N x N (numpy arrays and torch tensors). An answer that calls the
        library's attention functions does not pass.
    """,
    arg_names=("q", "k", "v", "phi"),
    cases=lambda: attention_cases(seed=601, cross=False),
    reference=_ref_causal_cumsum,
    solution_fn=_solution_causal_cumsum,
    hints=[
        "The non-causal S and z are sums over all tokens. Causal attention needs, for every t, the "
        "sum over tokens 0..t: a running (prefix) sum, which is what np.cumsum computes.",
        "Stack the outer products phi(k_j) v_j^T into an array of shape (..., N, d_phi, d_v): "
        "phi(k)[..., :, None] * v[..., None, :]. Its cumsum over the token axis (axis=-3) gives "
        "every S_t; np.cumsum(phi(k), axis=-2) gives every z_t.",
        "Contract each phi(q_t) with its own S_t: np.einsum('...nf,...nfv->...nv', phi(q), S); "
        "the denominator is np.einsum('...nf,...nf->...n', phi(q), z), clamped with "
        "np.maximum(den, 1e-6). np.cumsum includes the current token, as it should.",
    ],
    mistakes=[
        Mistake(lambda q, k, v, phi: _variant(q, k, v, phi, shift=1),
                "your output matches a strictly-causal version: token t does not see itself. Add "
                "the current key/value pair before answering the query (np.cumsum already "
                "includes it; y_0 must equal v_0)."),
        Mistake(lambda q, k, v, phi: _variant(q, k, v, phi, shift=1, eps=None),
                "your output matches a strictly-causal version without the clamp: token t does "
                "not see itself, so token 0 sees nothing and gets 0/0 = NaN. Include the current "
                "token (y_0 = v_0)."),
        Mistake(lambda q, k, v, phi: row_normalize(phi(q) @ swap_last(phi(k)), v),
                "you computed non-causal attention (every token sees the whole sequence): use "
                "running sums, not totals."),
        Mistake(lambda q, k, v, phi: _variant(q, k, v, phi, reverse=True),
                "your sums run backwards: token t sees tokens t..N-1. Causal means 0..t."),
        Mistake(lambda q, k, v, phi: _variant(q, k, v, phi, normalize=False),
                "you forgot the normalizer: divide by max(phi(q_t) . z_t, eps)."),
        Mistake(lambda q, k, v, phi: _variant(q, k, v, phi, eps=None),
                "you did not clamp the denominator: where phi(q_t) . z_t is 0 (relu features can "
                "be all zero) the output is 0/0 = NaN. Divide by max(den, 1e-6)."),
        Mistake(lambda q, k, v, phi: _variant(q, k, v, phi, absolute=True), ABS_CLAMP),
        Mistake(lambda q, k, v, phi: _variant(q, k, v, phi, phi_q=False, phi_k=False),
                "you left out phi: apply the feature map to q and k first."),
        Mistake(lambda q, k, v, phi: _variant(q, k, v, phi, phi_q=False), _NO_PHI_Q),
        Mistake(lambda q, k, v, phi: _variant(q, k, v, phi, phi_q=False, eps=None), _NO_PHI_Q),
        Mistake(lambda q, k, v, phi: _variant(q, k, v, phi, axis=0),
                "you took the prefix sums over axis 0, which is the token axis only when there "
                "are no batch dimensions: use the token axis counted from the end (axis=-3 for "
                "the outer products, axis=-2 for phi(k))."),
    ],
    memory_case=memory_case_attention(602),
    library_answer=_library_causal_cumsum,
    difficulty=3,
    minutes=20,
    success="The cumsum form stores N states of size d_phi x d_v; the recurrent form keeps one, "
            "and the chunked form sits in between - the trade-off of the next chapters.",
)


def _solution_streaming_step(S, z, q_t, k_t, v_t, phi, eps=1e-6):
    # S: (d_phi, d_v), z: (d_phi,), q_t, k_t: (d,), v_t: (d_v,)
    fq = phi(q_t[None])[0]                    # (d_phi,)  phi works on (N, d) arrays
    fk = phi(k_t[None])[0]                    # (d_phi,)
    S_new = S + np.outer(fk, v_t)             # add the current token first ...
    z_new = z + fk
    y_t = fq @ S_new / max(fq @ z_new, eps)   # ... then answer the query
    return S_new, z_new, y_t


def ref_streaming_step(S, z, q_t, k_t, v_t, phi):
    """The recurrence of CORE_API (update, then query); the tests check it against the library."""
    fq, fk = phi(q_t[None])[0], phi(k_t[None])[0]
    S_new = S + fk[:, None] * v_t[None, :]
    z_new = z + fk
    return S_new, z_new, (fq @ S_new) / max(float(fq @ z_new), EPS)


def _cases_streaming_step() -> list:
    rng = np.random.default_rng(701)

    def state_after(n, d, d_v, phi):
        k, v = rng.standard_normal((n, d)), rng.standard_normal((n, d_v))
        fk = phi(k)
        return fk.T @ v, fk.sum(0)

    def token(d, d_v):
        return rng.standard_normal(d), rng.standard_normal(d), rng.standard_normal(d_v)

    elu, relu = elu_phi(), relu_phi()
    perf = performer_phi(4, 6, 702)
    q_t, k_t, v_t = token(4, 3)
    k_t = -np.abs(k_t) - 0.1  # relu(k_t) = 0: the new state is still empty, z_new = 0
    q_s = np.where(np.arange(4) == 0, 1e-3, -1.0)  # relu(q_s) . relu(k_s) = 1e-3 * 1e-4 < 1e-6
    k_s = np.where(np.arange(4) == 0, 1e-4, -1.0)
    ident = identity_phi()
    return [
        Case("first token: S = 0, z = 0", (np.zeros((4, 3)), np.zeros(4), *token(4, 3), elu)),
        Case("after 5 tokens", (*state_after(5, 4, 3, elu), *token(4, 3), elu)),
        Case("d = 7, d_v = 5, after 6 tokens", (*state_after(6, 7, 5, elu), *token(7, 5), elu)),
        Case("a feature map with d_phi != d", (*state_after(4, 4, 3, perf), *token(4, 3), perf)),
        Case("relu features, z_new = 0 (denominator 0)",
             (np.zeros((4, 3)), np.zeros(4), q_t, k_t, v_t, relu)),
        Case("relu features, a denominator between 0 and 1e-6",
             (np.zeros((4, 3)), np.zeros(4), q_s, k_s, v_t, relu)),
        Case("identity features, a negative denominator", (*signed_step(rng, 5), ident)),
    ]


def _step_variant(S, z, q_t, k_t, v_t, phi, *, query_first=False, normalize=True, phi_k=True,
                  phi_q=True, phi_z=True, transpose=False, eps=EPS, absolute=False):
    fq = phi(q_t[None])[0] if phi_q else q_t
    fk = phi(k_t[None])[0] if phi_k else k_t
    fz = phi(k_t[None])[0] if phi_z else k_t
    S_new = S + (np.outer(v_t, fk) if transpose else np.outer(fk, v_t))
    z_new = z + fz
    S_q, z_q = (S, z) if query_first else (S_new, z_new)
    num = fq @ S_q
    y = num / clamp(float(fq @ z_q), eps, absolute) if normalize else num
    return S_new, z_new, y


def _library_streaming_step(S, z, q_t, k_t, v_t, phi):
    from linattn_core import LinearAttentionState  # the shortcut check() refuses

    state = LinearAttentionState(q_t.shape[-1], v_t.shape[-1], phi)
    state.S, state.z = S.copy(), z.copy()
    y_t = state.step(q_t, k_t, v_t)
    return state.S, state.z, y_t


def _stream_whole_sequence(ex: Exercise) -> Callable:
    """Prepare a 7-token sequence and its answer; the returned run(fn) steps fn through it."""
    from linattn_core import linear_attention

    rng = np.random.default_rng(703)
    n, d, d_v = 7, 4, 3
    q, k, v = qkv(rng, n, n, d=d, d_v=d_v)
    phi = elu_phi()
    expected = linear_attention(q, k, v, feature_map=lib_phi(phi), causal=True)
    where = f"Stepping through a sequence of {n} tokens from S = 0, z = 0"

    def run(fn: Callable) -> tuple[str | None, str]:
        S, z = np.zeros((d, d_v)), np.zeros(d)
        ys = []
        for t in range(n):
            step = ex.call(fn, (S, z, q[t], k[t], v[t], phi))
            if step.library or (step.unwatched and step.error is None):
                return ex.library_problem(f"{where}, token {t}", step.library), ""
            if step.error is not None:
                return (f"Not yet. {where}: at token {t} your function raised "
                        f"{type(step.error).__name__}: {compare.safe_str(step.error)}"), ""
            problem = compare.compare_triple(step.result, ex.reference(S, z, q[t], k[t], v[t],
                                                                       phi))
            if problem is not None:
                return f"Not yet. {where}: at token {t}:\n  {problem}", ""
            S, z, y = (compare.to_array(x)[0] for x in step.result)
            ys.append(y)
        problem = compare.array_difference(np.stack(ys), expected,
                                           what="the stacked outputs y_0..y_6")
        if problem is not None:
            return (f"Not yet. {where} and comparing with causal linear_attention:\n"
                    f"  {problem}"), ""
        return None, (f" Stepped through {n} tokens from the empty state, it reproduces causal "
                      "linear_attention.")

    return run


streaming_step = Exercise(
    name="streaming_step",
    path="exercises.causal.streaming_step",
    fn_name="streaming_step",
    chapter="causal",
    title="One step of the recurrent (streaming) form",
    task="""
        Write `streaming_step(S, z, q_t, k_t, v_t, phi)` for the state S: (d_phi, d_v),
        z: (d_phi,) and one token q_t, k_t: (d,), v_t: (d_v,). Return (S_new, z_new, y_t):
        S_new = S + phi(k_t) v_t^T, z_new = z + phi(k_t), then
        y_t = phi(q_t)^T S_new / max(phi(q_t) . z_new, 1e-6). phi works on (N, d) arrays, so
        apply it as phi(x[None])[0]. Do not modify S or z in place. check() tries the empty
        state, states after a few tokens, d != d_v, a feature map with d_phi != d, relu steps
        whose denominator is 0 and below 1e-6, and an identity step whose denominator is
        negative, then steps your function through a 7-token sequence and compares with causal
        linear_attention. An answer that uses the library's state does not pass.
    """,
    arg_names=("S", "z", "q_t", "k_t", "v_t", "phi"),
    cases=_cases_streaming_step,
    reference=ref_streaming_step,
    solution_fn=_solution_streaming_step,
    hints=[
        "Two moves, in this order: add the current token to the state, then answer the query "
        "from the new state.",
        "The token's contribution to S is the outer product np.outer(phi(k_t), v_t), shape "
        "(d_phi, d_v); to z it is phi(k_t).",
        "y_t = phi(q_t) @ S_new / max(phi(q_t) @ z_new, 1e-6). Return the three as a tuple.",
    ],
    kind="triple",
    mistakes=[
        Mistake(lambda *a: _step_variant(*a, query_first=True),
                "you answered the query before adding the current token (y_t comes from the old "
                "S and z). Causal attention includes the token itself: update first, then "
                "query. On the empty state the answer must be v_t."),
        Mistake(lambda *a: _step_variant(*a, normalize=False),
                "you forgot the normalizer: divide phi(q_t)^T S_new by max(phi(q_t) . z_new, "
                "eps)."),
        Mistake(lambda *a: _step_variant(*a, eps=None),
                "you did not clamp the denominator: with z_new = 0 the output is 0/0 = NaN. "
                "Divide by max(phi(q_t) . z_new, 1e-6)."),
        Mistake(lambda *a: _step_variant(*a, absolute=True), ABS_CLAMP),
        Mistake(lambda *a: _step_variant(*a, transpose=True),
                "the outer product is the wrong way round: S is (d_phi, d_v), so add "
                "np.outer(phi(k_t), v_t)."),
        Mistake(lambda *a: _step_variant(*a, phi_k=False, phi_z=False),
                "you added k_t to the state instead of phi(k_t)."),
        Mistake(lambda *a: _step_variant(*a, phi_z=False),
                "you added k_t to z instead of phi(k_t)."),
        Mistake(lambda *a: _step_variant(*a, phi_q=False),
                "you queried with q_t instead of phi(q_t)."),
    ],
    exception_hints=[("broadcast", "Check the shapes: S is (d_phi, d_v), so the token's outer "
                                   "product must be np.outer(phi(k_t), v_t); np.outer(v_t, ...) is "
                                   "the wrong way round. phi(k_t[None])[0] has shape (d_phi,).")],
    library_answer=_library_streaming_step,
    difficulty=2,
    minutes=15,
    success="A fixed-size state, updated once per token: this is what makes linear attention an "
            "RNN at inference time.",
    extra_check=_stream_whole_sequence,
)


def _solution_chunked_causal(q, k, v, phi, C, eps=1e-6):
    # q, k: (..., N, d), v: (..., N, d_v), C: chunk size -> (..., N, d_v); every chunk at once
    fq, fk = phi(q), phi(k)                                       # (..., N, d_phi)
    n = q.shape[-2]
    pad = [(0, 0)] * (q.ndim - 2) + [(0, -n % C), (0, 0)]        # zero tokens fill the last chunk
    Q, K, V = (np.pad(x, pad).reshape(x.shape[:-2] + (-1, C, x.shape[-1])) for x in (fq, fk, v))
    A = np.tril(Q @ np.swapaxes(K, -1, -2))                       # (..., N/C, C, C) masked blocks
    KV, Ks = np.swapaxes(K, -1, -2) @ V, K.sum(-2)                # each chunk's own pairs
    S = np.cumsum(KV, axis=-3) - KV                               # the state before each chunk:
    z = np.cumsum(Ks, axis=-2) - Ks                               # the chunks before it, summed
    num = Q @ S + A @ V                                           # earlier chunks + this chunk
    den = np.einsum("...ncf,...nf->...nc", Q, z) + A.sum(-1)
    out = num / np.maximum(den, eps)[..., None]
    return out.reshape(v.shape[:-2] + (-1, v.shape[-1]))[..., :n, :]


def _ref_chunked_causal(q, k, v, phi, C):
    from linattn_core import linear_attention

    return linear_attention(q, k, v, feature_map=lib_phi(phi), causal=True, method="chunked",
                            chunk_size=C)


def _library_chunked_causal(q, k, v, phi, C):
    from linattn_core.linear import linear_attention  # the shortcut check() refuses

    return linear_attention(q, k, v, phi, causal=True, method="chunked", chunk_size=C)


def _chunked_variant(q, k, v, phi, C, *, carry=True, diagonal=True, update_first=False,
                     mask=True, eps=EPS, absolute=False):
    fq, fk = phi(q), phi(k)
    S = np.zeros(fk.shape[:-2] + (fk.shape[-1], v.shape[-1]))
    z = np.zeros(fk.shape[:-2] + (fk.shape[-1],))
    out = np.empty(v.shape)
    for a in range(0, q.shape[-2], C):
        Qc, Kc, Vc = fq[..., a:a + C, :], fk[..., a:a + C, :], v[..., a:a + C, :]
        if update_first:
            S, z = S + np.swapaxes(Kc, -1, -2) @ Vc, z + Kc.sum(-2)
        scores = Qc @ np.swapaxes(Kc, -1, -2)
        A = (np.tril(scores) if diagonal else np.tril(scores, -1)) if mask else scores
        num = (Qc @ S if carry else 0.0) + A @ Vc
        den = (np.einsum("...cf,...f->...c", Qc, z) if carry else 0.0) + A.sum(-1)
        out[..., a:a + C, :] = num / clamp(den, eps, absolute)[..., None]
        if not update_first:
            S, z = S + np.swapaxes(Kc, -1, -2) @ Vc, z + Kc.sum(-2)
    return out


def _cases_chunked_causal() -> list:
    rng = np.random.default_rng(611)
    return [
        Case("N = 8, C = 4 (two whole chunks)", (*qkv(rng, 8, 8), elu_phi(), 4)),
        Case("N = 7, C = 3 (a shorter last chunk)", (*qkv(rng, 7, 7), elu_phi(), 3)),
        Case("one token, C = 4", (*qkv(rng, 1, 1), elu_phi(), 4)),
        Case("C = 1 (the recurrence)", (*qkv(rng, 6, 6), elu_phi(), 1)),
        Case("C = 16 > N = 10 (one chunk)", (*qkv(rng, 10, 10, d=5, d_v=2), elu_phi(), 16)),
        Case(f"batch dims {BATCH}, N = 9, C = 4", (*qkv(rng, 9, 9, batch=BATCH), elu_phi(), 4),
             batch_ndim=len(BATCH)),
        Case("relu features, denominators 0 and below eps, C = 2",
             (*zero_denominator_qkv(rng, 5), relu_phi(), 2)),
        Case("a feature map with d_phi != d, C = 3",
             (*qkv(rng, 6, 6, scale=0.5), performer_phi(4, 6, 611), 3)),
        Case("identity features, negative denominators, C = 4",
             (*signed_qkv(rng, 7), identity_phi(), 4)),
    ]


LOOP_CHUNKS = 128  # the chunks of the loop check: a loop over them runs its body this many times


def _no_loop_over_chunks(ex: Exercise) -> Callable:
    """Prepare a 256-token input in 128 chunks; run(fn) counts the lines fn's own code executes.

    A form that computes every chunk at once runs each of its lines a few times; a Python loop over
    the chunks (or the tokens) runs its body once per chunk, 128 times. Lines of code written in the
    file (or notebook cell) of ``fn`` are counted, helpers defined beside it included.
    """
    import sys

    rng = np.random.default_rng(612)
    C = 2
    q, k, v = qkv(rng, C * LOOP_CHUNKS, C * LOOP_CHUNKS)
    phi = elu_phi()
    expected = ex.reference(q, k, v, phi, C)

    def run(fn: Callable) -> tuple[str | None, str]:
        where = f"A long input: q ({C * LOOP_CHUNKS}, 4), k, v, phi = elu+1, C = {C} ({LOOP_CHUNKS} chunks)"
        home = getattr(getattr(fn, "__code__", None), "co_filename", None)
        lines = [0]

        def tracer(frame, event, arg):
            if frame.f_code.co_filename != home:
                return None
            if event == "line":
                lines[0] += 1
            return tracer

        previous = sys.gettrace()
        if home is not None:
            sys.settrace(tracer)
        try:
            call = ex.call(fn, (q, k, v, phi, C))
        finally:
            sys.settrace(previous)
        if call.library or (call.unwatched and call.error is None):
            return ex.library_problem(where, call.library), ""
        if call.error is not None:
            return ex._raised(call.error, where, None, False), ""
        problem = ex._compare(call.result, expected)
        if problem is not None:
            return f"Not yet. {where}:\n  {problem}{ex._stuck()}", ""
        if lines[0] > LOOP_CHUNKS // 2:
            return ("Almost!\n" + wrap(
                f"The values are right, but your function's own lines ran {lines[0]} times on "
                f"{LOOP_CHUNKS} chunks: it loops over the chunks (or the tokens), as the chapter's "
                "chunked_numpy does. This exercise is the form without that loop: lay the chunks "
                "out as an extra axis (pad N to a multiple of C, reshape to (..., N/C, C, d_phi)), "
                "compute every masked block in one batched product, and get the state before "
                "each chunk from a cumulative sum over the chunk axis.") + ex._stuck(), "")
        return None, (f" It computed {LOOP_CHUNKS} chunks without a loop over them ({lines[0]} "
                      "lines of your code ran).")

    return run


chunked_form = Exercise(
    name="chunked_causal",
    path="exercises.causal.chunked_form",
    fn_name="chunked_causal",
    chapter="causal",
    title="Every chunk at once: the chunked form without a loop",
    task="""
        The chapter's chunked_numpy walks the chunks one after another. Write
        `chunked_causal(q, k, v, phi, C)` for q, k: (..., N, d), v: (..., N, d_v), returning
        (..., N, d_v), that computes every chunk at once, with no Python loop over the chunks
        or the tokens: the chunks as an extra axis (pad N with zero rows up to a multiple of C),
        every masked C x C block in one batched product, and the state before each chunk,
        S_[c] and z_[c], from a cumulative sum of the chunks' own sums over the chunk axis
        (derive which one: a chunk's queries must not see its own pairs through the state).
        Clamp the denominator to max(., 1e-6). check() uses C that divides N and C that does
        not, C = 1, C > N, one token, batch dims, relu features whose denominators reach 0 and
        identity features whose denominators are negative, then counts the lines your code
        runs on 128 chunks: a loop over them does not pass, nor does an answer that calls the
        library's chunked form.
    """,
    arg_names=("q", "k", "v", "phi", "C"),
    cases=_cases_chunked_causal,
    reference=_ref_chunked_causal,
    solution_fn=_solution_chunked_causal,
    hints=[
        "Lay the tokens out as chunks: pad (after phi, so the padding adds nothing) N up to a "
        "multiple of C with zero rows, then reshape (..., N, d_phi) to (..., N/C, C, d_phi). "
        "Every chunk's masked block is then one batched product, np.tril(Q @ K^T), of shape "
        "(..., N/C, C, C).",
        "The state before chunk c is the sum of K_j^T V_j over the chunks j < c: an exclusive "
        "cumulative sum over the chunk axis. np.cumsum gives the inclusive one (chunk c's own "
        "pairs counted too, and counted again by the masked block); subtract each chunk's own "
        "sum, or shift the sums by one chunk with a zero state first.",
        "KV = K^T @ V per chunk (..., N/C, d_phi, d_v), S = np.cumsum(KV, axis=-3) - KV, "
        "z likewise from K.sum(-2); num = Q @ S + A @ V, den = Q . z + A.sum(-1); divide with "
        "the clamp, reshape back to (..., N_padded, d_v) and cut the padding off.",
    ],
    mistakes=[
        Mistake(lambda q, k, v, phi, C: _chunked_variant(q, k, v, phi, C, carry=False),
                "every chunk starts from an empty state: the earlier chunks never reach it. Read "
                "the state before the chunk, phi(q_t)^T S, and carry S and z from chunk to chunk."),
        Mistake(lambda q, k, v, phi, C: _chunked_variant(q, k, v, phi, C, diagonal=False),
                "your mask drops the diagonal (np.tril(..., -1)): token t must see itself, as in "
                "the recurrence (the update comes before the query)."),
        Mistake(lambda q, k, v, phi, C: _chunked_variant(q, k, v, phi, C, update_first=True),
                "you added the chunk's own pairs to the state before reading it, so they are "
                "counted twice (once in S, once in the masked block). Read S, then update it."),
        Mistake(lambda q, k, v, phi, C: _chunked_variant(q, k, v, phi, C, mask=False),
                "inside a chunk every query sees every key of the chunk, future ones included: "
                "mask the C x C block with np.tril."),
        Mistake(lambda q, k, v, phi, C: _chunked_variant(q, k, v, phi, C, eps=0.0),
                "you did not clamp the denominator: relu features can make it 0 (0/0 = NaN). "
                "Divide by max(den, 1e-6)."),
        Mistake(lambda q, k, v, phi, C: _chunked_variant(q, k, v, phi, C, absolute=True),
                ABS_CLAMP),
    ],
    library_answer=_library_chunked_causal,
    extra_check=_no_loop_over_chunks,
    difficulty=3,
    minutes=30,
    success="Nothing sequential is left but a cumulative sum over N/C chunk states, which a GPU "
            "runs as a parallel scan: this is how the chunked kernels of flash-linear-attention and "
            "Mamba-2 lay the work out. C = 1 gives back the cumsum form and C >= N the masked "
            "quadratic form.",
)
