"""Exercises of the training chapter: ``model_state_bytes``.

``model_state_bytes`` is the memory a whole model's states take per sequence, against which the KV
cache grows. (``decay_step``, one generation step of a decaying head, is an exercise of
beyond_decay.md: ``exercises.beyond.decay_step``.)
"""

from __future__ import annotations

import numpy as np

from ._numpy import FLOAT_COUNT, float32_count, float64_count
from .checker import Exercise, Mistake
from .inputs import Case

__all__ = ["model_state_bytes"]


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
        depend on the context length. Count, do not allocate: one input describes a model whose
        states would take about 22 PiB, so an answer that builds the arrays (or the library's
        states) to measure them cannot finish. check() tries d_phi != d_v, float64, float32 and
        2-byte numbers, one head of one number, a Performer-sized d_phi and that count, so large
        that only exact integer arithmetic gets it right.
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
