"""Exercises of the training chapter: ``decay_step`` and ``model_state_bytes``.

``decay_step`` is one generation step of a decaying linear-attention head (the ``"decay"`` and
``"gated"`` models of :mod:`linattn_core.lm.model`): forget, add, answer. ``model_state_bytes`` is the
memory a whole model's states take per sequence, against which the KV cache grows.
"""

from __future__ import annotations

import numpy as np

from ._numpy import ABS_CLAMP, FLOAT_COUNT, clamp, float32_count, float64_count
from .checker import Exercise, Mistake
from .inputs import Case, elu_phi, identity_phi, performer_phi, relu_phi, signed_step

__all__ = ["decay_step", "model_state_bytes"]


def _solution_decay_step(S, z, q_t, k_t, v_t, g, phi, eps=1e-6):
    # S: (d_phi, d_v), z: (d_phi,), q_t, k_t: (d,), v_t: (d_v,), g: a number in (0, 1]
    fq, fk = phi(q_t[None])[0], phi(k_t[None])[0]   # (d_phi,): phi works on (N, d) arrays
    S_new = g * S + np.outer(fk, v_t)               # forget a fraction 1 - g of the past, add the token
    z_new = g * z + fk
    y_t = fq @ S_new / max(fq @ z_new, eps)          # then answer the query
    return S_new, z_new, y_t


def _ref_decay_step(S, z, q_t, k_t, v_t, g, phi):
    """The library's state, decayed as :class:`linattn_core.lm.model.Attention` does before each step."""
    from linattn_core import LinearAttentionState

    d, d_v = int(q_t.shape[-1]), int(v_t.shape[-1])
    state = LinearAttentionState(d, d_v, phi._fm)
    state.S, state.z = g * S, g * z
    y_t = state.step(q_t, k_t, v_t)
    return state.S, state.z, y_t


def _cases_decay_step() -> list:
    rng = np.random.default_rng(1501)

    def state_after(n, d, d_v, phi, g):
        S, z = np.zeros((phi_dim(phi, d), d_v)), np.zeros(phi_dim(phi, d))
        for k, v in zip(rng.standard_normal((n, d)), rng.standard_normal((n, d_v)), strict=True):
            fk = phi(k[None])[0]
            S, z = g * S + np.outer(fk, v), g * z + fk
        return S, z

    def phi_dim(phi, d):
        return int(phi(np.zeros((1, d))).shape[-1])

    def token(d, d_v):
        return rng.standard_normal(d), rng.standard_normal(d), rng.standard_normal(d_v)

    elu, relu, perf, ident = elu_phi(), relu_phi(), performer_phi(4, 6, 1502), identity_phi()
    empty = (np.zeros((4, 3)), np.zeros(4))
    q_0, k_0, v_0 = token(4, 3)
    k_0 = -np.abs(k_0) - 0.1                      # relu(k_0) = 0: z_new = 0, the denominator is 0
    q_s, k_s, v_s = token(4, 3)
    q_s = np.where(np.arange(4) == 0, 1e-3, -1.0)  # relu(q_s) . relu(k_s) = 1e-3 * 1e-4 < 1e-6
    k_s = np.where(np.arange(4) == 0, 1e-4, -1.0)
    return [
        Case("first token: S = 0, z = 0, g = 0.9", (np.zeros((4, 3)), np.zeros(4), *token(4, 3), 0.9, elu)),
        Case("after 5 tokens, g = 0.5", (*state_after(5, 4, 3, elu, 0.5), *token(4, 3), 0.5, elu)),
        Case("g = 1 (no decay): plain linear attention",
             (*state_after(6, 4, 3, elu, 1.0), *token(4, 3), 1.0, elu)),
        Case("d = 7, d_v = 5, g = 0.97", (*state_after(6, 7, 5, elu, 0.97), *token(7, 5), 0.97, elu)),
        Case("relu features, g = 0.8", (*state_after(4, 4, 3, relu, 0.8), *token(4, 3), 0.8, relu)),
        Case("a feature map with d_phi != d, g = 0.7",
             (*state_after(4, 4, 3, perf, 0.7), *token(4, 3), 0.7, perf)),
        Case("relu features, z_new = 0 (denominator 0), g = 0.6", (*empty, q_0, k_0, v_0, 0.6, relu)),
        Case("relu features, a denominator between 0 and 1e-6, g = 0.6",
             (*empty, q_s, k_s, v_s, 0.6, relu)),
        Case("identity features, a negative denominator, g = 0.9",
             (*signed_step(rng, 5, g=0.9), 0.9, ident)),
    ]


def _decay_variant(S, z, q_t, k_t, v_t, g, phi, *, decay_z=True, decay_new=False, query_first=False,
                   normalize=True, g_power=1.0, eps=1e-6, absolute=False):
    fq, fk = phi(q_t[None])[0], phi(k_t[None])[0]
    gg = g**g_power
    S_new = gg * (S + np.outer(fk, v_t)) if decay_new else gg * S + np.outer(fk, v_t)
    z_new = (gg * (z + fk) if decay_new else gg * z + fk) if decay_z else z + fk
    S_q, z_q = ((gg * S, gg * z) if query_first else (S_new, z_new))
    num = fq @ S_q
    y = num / clamp(float(fq @ z_q), eps, absolute) if normalize else num
    return S_new, z_new, y


def _library_decay_step(S, z, q_t, k_t, v_t, g, phi):
    import linattn_core as la  # the shortcut check() refuses: the library's state

    state = la.LinearAttentionState(q_t.shape[-1], v_t.shape[-1], phi)
    state.S, state.z = g * S, g * z
    y_t = state.step(q_t, k_t, v_t)
    return state.S, state.z, y_t


decay_step = Exercise(
    name="decay_step",
    path="exercises.training.decay_step",
    fn_name="decay_step",
    chapter="training",
    title="One generation step of a decaying linear-attention head",
    task="""
        Write `decay_step(S, z, q_t, k_t, v_t, g, phi)` for a state S: (d_phi, d_v), z: (d_phi,),
        one token q_t, k_t: (d,), v_t: (d_v,) and a decay g in (0, 1], returning
        (S_new, z_new, y_t): S_new = g S + phi(k_t) v_t^T, z_new = g z + phi(k_t),
        y_t = phi(q_t)^T S_new / max(phi(q_t) . z_new, 1e-6). phi takes (N, d) arrays. check()
        compares with the library's LinearAttentionState decayed the same way, with g = 1,
        d != d_v, relu features, a Performer map with d_phi != d, and denominators that are 0,
        between 0 and 1e-6, and negative (identity features). An answer that uses the library's
        state does not pass.
    """,
    arg_names=("S", "z", "q_t", "k_t", "v_t", "g", "phi"),
    cases=_cases_decay_step,
    reference=_ref_decay_step,
    solution_fn=_solution_decay_step,
    hints=[
        "It is the streaming step of the causal chapter with one change: the old S and z are "
        "multiplied by g before the new token is added.",
        "fk = phi(k_t[None])[0]; S_new = g * S + np.outer(fk, v_t); z_new = g * z + fk; then "
        "query with phi(q_t[None])[0].",
    ],
    kind="triple",
    mistakes=[
        Mistake(lambda *a: _decay_variant(*a, decay_z=False),
                "you decayed S but not z: the normalizer must forget at the same rate, or old keys "
                "keep their weight in the denominator only."),
        Mistake(lambda *a: _decay_variant(*a, decay_new=True),
                "you decayed the new token too (g (S + phi(k) v^T)); the current token enters with "
                "weight 1, only the past is multiplied by g."),
        Mistake(lambda *a: _decay_variant(*a, query_first=True),
                "you answered the query before adding the current token: causal attention includes "
                "the token itself (y_0 = v_0)."),
        Mistake(lambda *a: _decay_variant(*a, normalize=False),
                "you returned the numerator phi(q)^T S without dividing by max(phi(q) . z, eps)."),
        Mistake(lambda *a: _decay_variant(*a, g_power=2.0),
                "you applied g twice (g**2); each step multiplies the past by g once."),
        Mistake(lambda *a: _decay_variant(*a, eps=None),
                "you did not clamp the denominator: with relu features phi(q_t) . z_new can be 0 "
                "(0/0 = NaN) or tiny (a huge output). Divide by max(phi(q_t) . z_new, 1e-6)."),
        Mistake(lambda *a: _decay_variant(*a, absolute=True), ABS_CLAMP),
    ],
    library_answer=_library_decay_step,
    difficulty=1,
    minutes=10,
    success="A constant-size state per head: this step costs the same at token 10 and at token "
            "10 million, which is the generation-speed figure of this chapter.",
)


def _solution_model_state_bytes(n_layer, n_head, d_phi, d_v, itemsize):
    # every head of every layer keeps S (d_phi x d_v) and z (d_phi), whatever the context length
    return n_layer * n_head * d_phi * (d_v + 1) * itemsize


def _ref_model_state_bytes(n_layer, n_head, d_phi, d_v, itemsize):
    """What :class:`linattn_core.LinearAttentionState` reports, one state per layer for all heads."""
    from linattn_core import LinearAttentionState, get_feature_map

    dtype = {4: np.float32, 8: np.float64}.get(itemsize)
    if dtype is None:  # the library keeps float16 states in float32, so count by the formula here
        return int(n_layer) * int(n_head) * int(d_phi) * (int(d_v) + 1) * int(itemsize)
    phi = get_feature_map("performer", d=4, num_features=d_phi)  # any map with this d_phi
    state = LinearAttentionState(4, d_v, phi, batch_shape=(n_head,), dtype=dtype)
    return n_layer * state.nbytes


def _cases_model_state_bytes() -> list:
    # the first two cases tell every typical mistake apart from every other (a fixed itemsize 4
    # fails the first, a fixed 8 the second; n_head != itemsize in both)
    return [
        Case("3 layers, 5 heads, d_phi = 5, d_v = 7, float64", (3, 5, 5, 7, 8)),
        Case("2 layers, 4 heads, d_phi = d_v = 16 (width 64), float32", (2, 4, 16, 16, 4)),
        Case("one layer, one head, d_phi = d_v = 1, float64", (1, 1, 1, 1, 8)),
        Case("12 layers, 12 heads, d_phi = 256 (Performer), d_v = 64, float32", (12, 12, 256, 64, 4)),
        Case("6 layers, 8 heads, d_phi = 64, d_v = 128, 2-byte numbers", (6, 8, 64, 128, 2)),
        Case("1,000,003 layers, 3,001 heads, d_phi = 4,099, d_v = 1,024, 2-byte numbers (over "
             "2**54 bytes: only integer arithmetic is exact)", (1_000_003, 3_001, 4_099, 1_024, 2)),
    ]


_FIXED_ITEMSIZE = ("you used a fixed number of bytes per number instead of the itemsize argument "
                   "(4 for float32, 8 for float64, 2 for float16): multiply by itemsize.")


model_state_bytes = Exercise(
    name="model_state_bytes",
    path="exercises.training.model_state_bytes",
    fn_name="model_state_bytes",
    chapter="training",
    title="How much memory does a linear-attention model keep per sequence?",
    task="""
        Write `model_state_bytes(n_layer, n_head, d_phi, d_v, itemsize)` returning, as an int, the
        bytes of the states that a linear-attention model keeps for one sequence while it
        generates. The model has n_layer layers, each a linear-attention layer with the
        normaliser z and n_head heads; a head has values of width d_v (the model width is
        n_embd = n_head * d_v) and a feature map of width d_phi. Each layer keeps one state for
        all its heads: per head S (d_phi x d_v) and z (d_phi), itemsize bytes per number (4 for
        float32, the dtype in which the training chapter's models keep their states). It does not
        depend on the context length. check() tries d_phi != d_v, float64, float32 and 2-byte
        numbers, one head of one number, a Performer-sized d_phi and a count so large that only
        exact integer arithmetic gets it right.
    """,
    arg_names=("n_layer", "n_head", "d_phi", "d_v", "itemsize"),
    cases=_cases_model_state_bytes,
    reference=_ref_model_state_bytes,
    solution_fn=_solution_model_state_bytes,
    hints=[
        "One head keeps S and z: d_phi * d_v + d_phi numbers.",
        "Every head of every layer has its own: multiply by n_layer * n_head, then by itemsize.",
    ],
    kind="int",
    mistakes=[
        Mistake(lambda L, H, f, dv, i: L * H * f * dv * i,
                "you counted S but not z: each head also keeps the normalizer z (d_phi numbers)."),
        Mistake(lambda L, H, f, dv, i: H * f * (dv + 1) * i,
                "you counted one layer; every layer has its own attention and its own states."),
        Mistake(lambda L, H, f, dv, i: L * f * (dv + 1) * i,
                "you counted one head per layer; each of the n_head heads keeps its own S and z."),
        Mistake(lambda L, H, f, dv, i: L * H * f * (dv + 1),
                "you counted numbers, not bytes: multiply by itemsize."),
        Mistake(lambda L, H, f, dv, i: L * H * f * (dv + 1) * i * 8, "you counted bits; return bytes."),
        Mistake(lambda L, H, f, dv, i: L * H * (f * f + f) * i,
                "you used d_phi x d_phi for S; S is d_phi x d_v (a feature per row, a value per column)."),
        Mistake(lambda L, H, f, dv, i: L * H * f * (dv + 1) * 4, _FIXED_ITEMSIZE),
        Mistake(lambda L, H, f, dv, i: L * H * f * (dv + 1) * 8, _FIXED_ITEMSIZE),
        Mistake(lambda L, H, f, dv, i: L * H * f * (dv + 1) * 2, _FIXED_ITEMSIZE),
        Mistake(lambda L, H, f, dv, i: float32_count(L, H, f, dv + 1, i), FLOAT_COUNT),
        Mistake(lambda L, H, f, dv, i: float64_count(L, H, f, dv + 1, i), FLOAT_COUNT),
    ],
    difficulty=1,
    minutes=5,
    success="Compare with the KV cache of the same model, n_layer * n_head * t * (d + d_v) * itemsize "
            "bytes after t tokens: the printed memory per sequence in this chapter's speed table.",
)
