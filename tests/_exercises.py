"""Shared helpers of the exercise tests (tests/tools/test_exercises*.py): the exercises, the check
runner that undoes line wrapping, and the few wrong answers more than one file shows."""


from __future__ import annotations

from pathlib import Path

import numpy as np

from linattn_core.tools import exercises
from linattn_core.tools.exercises import CheckResult

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
ALL = list(exercises.EXERCISES.values())
IDS = [ex.name for ex in ALL]
SOL = {ex.name: ex.solution_fn for ex in ALL}
CHAPTER_PATHS = {
    "softmax": {"exercises.softmax.stable_attention", "exercises.softmax.score_matrix_bytes"},
    "associative": {"exercises.associative.quadratic_form",
                    "exercises.associative.associative_form", "exercises.associative.crossover"},
    "feature_maps": {"exercises.feature_maps.elu_plus_one"},
    "feature_maps_random": {"exercises.feature_maps.performer_features"},
    "causal": {"exercises.causal.prefix_sums", "exercises.causal.streaming_step",
               "exercises.causal.chunked_form"},
    "tradeoffs": {"exercises.tradeoffs.clamped_normalize", "exercises.tradeoffs.kv_cache_bytes",
                  "exercises.tradeoffs.exact_capacity"},
    "beyond_decay": {"exercises.beyond.decay_step"},
    "training": {"exercises.training.model_state_bytes"},
    "beyond_delta": {"exercises.beyond.delta_loop"},
    "beyond_tour": {"exercises.beyond.normed_numerator"},
}
ARRAY = [ex for ex in ALL if ex.kind == "array"]
CAUSAL_FORMS = {"causal_cumsum_mine", "delta_loop", "chunked_causal", "normed_numerator"}  # N_q = N_k
NO_DENOMINATOR = {"normed_numerator"}  # its output is normalized by its own size, not by phi(q).z
ATTENTION = [ex for ex in ARRAY if ex.arg_names[:3] == ("q", "k", "v")]
WITH_PHI = [ex for ex in ATTENTION if "phi" in ex.arg_names]
WITH_ARRAYS = [ex for ex in ALL if ex.kind in ("array", "triple")]  # array arguments


def run_check(ex, fn, capsys) -> tuple[bool, str]:
    """check(fn) and what it printed, with line wrapping undone so messages can be matched."""
    result = ex.check(fn)
    out = capsys.readouterr().out
    assert isinstance(result, CheckResult), f"check() returned {type(result).__name__}"
    assert result.feedback.strip() == out.strip()
    return bool(result), " ".join(out.split())


def sw(x):
    return np.swapaxes(x, -1, -2)


def resolve(path):
    """exercises.causal.prefix_sums -> the object (the path as a chapter writes it)."""
    obj = exercises
    for part in path.split(".")[1:]:
        obj = getattr(obj, part)
    return obj




def _softmax(s, axis=-1):
    s = s - s.max(axis=axis, keepdims=True)
    w = np.exp(s)
    return w / w.sum(axis=axis, keepdims=True)


def aa_quadratic(q, k, v, phi):
    return SOL["kernel_attention_mine"](q, k, v, phi)


def _prefix(q, k, v, phi, exclusive=False):
    fq, fk = phi(q), phi(k)
    outer = fk[..., :, None] * v[..., None, :]
    S, z = np.cumsum(outer, -3), np.cumsum(fk, -2)
    if exclusive:
        S, z = S - outer, z - fk
    return fq, S, z


def cc_strict(q, k, v, phi):
    fq, S, z = _prefix(q, k, v, phi, exclusive=True)
    return np.einsum("...nf,...nfv->...nv", fq, S) / np.maximum((fq * z).sum(-1), 1e-6)[..., None]



def sm_unstable(q, k, v):
    w = np.exp(q @ sw(k) / np.sqrt(q.shape[-1]))
    return w / w.sum(-1, keepdims=True) @ v


def diagnosed(name, fn, message, capsys) -> None:
    """A typical wrong answer fails, never as "Correct!", with the message that names its mistake."""
    ok, out = run_check(exercises.get(name), fn, capsys)
    assert not ok, out
    assert message in out, out
    assert "Correct!" not in out
