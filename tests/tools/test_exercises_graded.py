"""Answers must compute their result, and graded work holds: calls into the library (however they are
reached) are refused, in graded work the kit's own solutions too; the graded mode is locked for the
session; each group of inputs earns its points (partial credit).
"""

from __future__ import annotations

import numpy as np
import pytest
from _exercises import (
    ALL,
    IDS,
    SOL,
    cc_strict,
    run_check,
)

import linattn_core
from linattn_core import (
    get_feature_map,
    linear_attention,
)
from linattn_core.tools import exercises

# --------------------------------------------------------------------------------------------------
# An answer must compute its result: calls into the library's attention code are refused
# --------------------------------------------------------------------------------------------------
SHORTCUTS = [ex for ex in ALL if ex.library_answer is not None]

LIBRARY_MESSAGE = "calls the library's own"


@pytest.fixture
def practice():
    """Formative mode around a test that switches to summative (the mode is global)."""
    exercises.grading._unlock_for_tests()
    yield
    exercises.grading._unlock_for_tests()


@pytest.mark.parametrize("ex", SHORTCUTS, ids=[e.name for e in SHORTCUTS])
def test_library_shortcut_has_the_right_numbers_and_is_refused(ex, capsys):
    # the shortcut's numbers are right on every input, so only the watch for library calls fails it
    import warnings

    for case in ex.cases():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the library says so when it clamps a denominator
            got = ex.library_answer(*case.fresh_args())
        assert ex._compare(got, ex.expected(case)) is None, case.title
    ok, out = run_check(ex, ex.library_answer, capsys)
    assert not ok and LIBRARY_MESSAGE in out and "Input #1" in out, out


def test_at_least_the_attention_exercises_have_a_shortcut():
    assert {"softmax_attention_mine", "kernel_attention_mine", "associative_attention", "causal_cumsum_mine",
            "streaming_step", "chunked_causal", "decay_step", "delta_loop",
            "normed_numerator"} <= {ex.name for ex in SHORTCUTS}


def la_alias(q, k, v, phi):
    import linattn_core as la

    return la.linear_attention(q, k, v, phi)


def la_from_module(q, k, v, phi):
    from linattn_core.linear import linear_attention as mine

    return mine(q, k, v, phi)


BOUND_EARLY = linear_attention  # a name bound before check() ran, as a notebook's import does


def la_bound_early(q, k, v, phi):
    return BOUND_EARLY(q, k, v, phi)


def la_through_helper(q, k, v, phi):
    helpers = {"attend": lambda *a: linattn_core.kernel_attention(*a)}
    return helpers["attend"](q, k, v, phi)


def la_in_a_thread(q, k, v, phi):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(linear_attention, q, k, v, phi).result()


def la_internal(q, k, v, phi):
    from linattn_core import linear

    fq, fk = phi(q), phi(k)
    out, _ = linear.noncausal(fq, fk, v, 1e-6)
    return out


@pytest.mark.parametrize("fn", [la_alias, la_from_module, la_bound_early, la_through_helper,
                                la_in_a_thread, la_internal], ids=lambda f: f.__name__)
def test_library_calls_are_seen_however_they_are_reached(fn, capsys):
    ok, out = run_check(exercises.associative.associative_form, fn, capsys)
    assert not ok and LIBRARY_MESSAGE in out, out
    assert "linattn_core." in out.split(LIBRARY_MESSAGE, 1)[1]  # names what it called


def softmax_via_method(q, k, v):
    from linattn_core import KVCache as Cache

    out = []
    for b in np.ndindex(q.shape[:-2]):
        cache = Cache(q.shape[-1], v.shape[-1])
        for k_t, v_t in zip(k[b], v[b], strict=True):
            cache.append(k_t, v_t)
        out.append(np.stack([cache.attend(q_t) for q_t in q[b]]))
    return np.stack(out).reshape(q.shape[:-1] + v.shape[-1:])


def decay_via_decayed(S, z, q_t, k_t, v_t, g, phi):
    from linattn_core.decay import decayed_linear_attention

    decayed_linear_attention(q_t[None], k_t[None], v_t[None], phi, decay=g)
    return SOL["decay_step"](S, z, q_t, k_t, v_t, g, phi)


@pytest.mark.parametrize(("name", "fn", "called"), [
    ("softmax_attention_mine", softmax_via_method, "linattn_core.KVCache"),
    ("decay_step", decay_via_decayed, "decayed_linear_attention`"),
])
def test_states_and_decays_are_library_calls_too(name, fn, called, capsys):
    ok, out = run_check(exercises.get(name), fn, capsys)
    assert not ok and LIBRARY_MESSAGE in out and called in out, out


def test_feature_maps_are_allowed_where_phi_is_given_and_refused_where_they_are_the_task(capsys):
    def with_library_map(q, k, v, phi):  # get_feature_map is no attention: allowed here
        fq, fk = phi(q), phi(k)
        assert get_feature_map("elu+1")(np.zeros((1, 2))).shape == (1, 2)
        return SOL["associative_attention"](q, k, v, lambda x: phi(x)) + 0 * fq.sum() * fk.sum()

    assert run_check(exercises.associative.associative_form, with_library_map, capsys)[0]
    ok, out = run_check(exercises.feature_maps.elu_plus_one,
                        lambda x: linattn_core.EluPlusOne()(x), capsys)
    assert not ok and "linattn_core.EluPlusOne.__call__" in out, out


def test_switching_off_the_watch_is_refused_and_the_watch_is_restored(capsys):
    import sys

    def unwatched(q, k, v, phi):
        sys.setprofile(None)
        return linear_attention(q, k, v, phi)

    def other_profiler(frame, event, arg):
        return None

    sys.setprofile(other_profiler)
    try:
        ok, out = run_check(exercises.associative.associative_form, unwatched, capsys)
        assert sys.getprofile() is other_profiler  # check() puts back what was there
    finally:
        sys.setprofile(None)
    assert not ok and "switched off check()'s watch" in out, out


def test_deep_recursion_is_reported_as_such_not_as_tampering(capsys):
    def recursive(*args):
        return recursive(*args)

    ok, out = run_check(exercises.softmax.stable_attention, recursive, capsys)
    assert not ok and "raised RecursionError" in out and "watch" not in out, out


# --------------------------------------------------------------------------------------------------
# Summative mode: no solution(), limited hints, the kit's own solutions refused
# --------------------------------------------------------------------------------------------------
def test_summative_mode_switches_solution_off_and_limits_hints(practice, capsys):
    ex = exercises.causal.prefix_sums
    exercises.summative(max_hints=1)
    ex.solution()
    out = capsys.readouterr().out
    assert "switched off" in out and "def causal_cumsum_mine" not in out
    ex.hint(1)
    assert capsys.readouterr().out.startswith(f"Hint 1 of {len(ex.hints)}:")
    ex.hint(3)
    out = capsys.readouterr().out
    assert "allows hints 1 to 1" in out and ex.hints[2][:30] not in " ".join(out.split())
    assert "solution()" not in out and "More:" not in out
    exercises.summative(max_hints=0)
    ex.hint(1)
    assert "no hints" in capsys.readouterr().out
    ok, out = run_check(ex, cc_strict, capsys)
    assert not ok and "Stuck?" not in out  # no pointer to hints that are off
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="max_hints"):
            exercises.summative(max_hints=bad)
    exercises.grading._unlock_for_tests()  # what no learner's notebook calls
    ex.solution()
    assert capsys.readouterr().out.startswith("def causal_cumsum_mine(")


def test_graded_mode_is_locked_for_the_session(practice, capsys):
    ex = exercises.causal.prefix_sums
    exercises.summative(max_hints=1)
    assert exercises.formative() is False  # a learner's cell cannot switch grading back
    assert "stays on" in capsys.readouterr().out and exercises.is_summative()
    ex.solution()
    assert "switched off" in capsys.readouterr().out
    assert ex.solution_source() == ""
    with exercises.grading.practice_mode() as practice_on:  # nor can the teacher's switch
        assert practice_on is False and exercises.is_summative()
        ex.solution()
        assert "switched off" in capsys.readouterr().out
    exercises.summative(max_hints=5)  # a second call can lower the hints, never raise them
    assert exercises.grading.max_hints() == 1
    exercises.summative(max_hints=0)
    assert exercises.grading.max_hints() == 0
    # a learner who clears the flag by hand: the graded cell's own summative() call sets it again
    exercises.grading._MODE.summative = False
    exercises.grading._MODE.max_hints = None
    exercises.summative(max_hints=0)
    assert exercises.is_summative() and exercises.grading.max_hints() == 0
    ok, out = run_check(ex, lambda *a: SOL["causal_cumsum_mine"](*a), capsys)
    assert not ok and "exercises' own solutions" in out


def test_partial_credit_groups_and_points(capsys):
    for ex in ALL:
        points = ex.points()
        assert sum(points.values()) == exercises.grading.POINTS_PER_STAR * ex.difficulty, ex.name
        assert list(points) == ex.groups() and points["values"] >= ex.difficulty, ex.name
        for part in points:  # the solution earns every group
            assert ex.check(ex.solution_fn, part=part)
            assert "Correct on" in capsys.readouterr().out
    assert exercises.causal.prefix_sums.groups() == ["values", "batch", "edge", "memory"]
    with pytest.raises(ValueError, match="no group"):
        exercises.causal.prefix_sums.check(SOL["causal_cumsum_mine"], part="nope")


def test_partial_credit_right_on_values_wrong_on_memory(capsys):
    from _exercises import aa_quadratic

    ex = exercises.associative.associative_form
    verdicts = {part: bool(ex.check(aa_quadratic, part=part)) for part in ex.groups()}
    capsys.readouterr()
    assert verdicts == {"values": True, "batch": True, "edge": True, "memory": False}
    earned = sum(p for part, p in ex.points().items() if verdicts[part])
    assert 0 < earned < sum(ex.points().values())  # part of the points


def test_partial_credit_right_without_batches(capsys):
    def no_batches(q, k, v, phi):  # x.T on a 2-d array only
        fq, fk = phi(q), phi(k)
        S, z = fk.T @ v, fk.sum(0)
        return (fq @ S) / np.maximum(fq @ z, 1e-6)[:, None]

    ex = exercises.associative.associative_form
    verdicts = {part: bool(ex.check(no_batches, part=part)) for part in ex.groups()}
    out = capsys.readouterr().out
    assert verdicts["values"] and not verdicts["batch"], out


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_summative_mode_refuses_the_kits_own_solution(ex, practice, capsys):
    def copied(*args):
        return ex.solution_fn(*args)

    assert run_check(ex, copied, capsys)[0]  # in practice it is one solution() away anyway
    exercises.summative(max_hints=2)
    ok, out = run_check(ex, copied, capsys)
    assert not ok and LIBRARY_MESSAGE in out and "exercises' own solutions" in out, out
    assert "linattn_core.tools.exercises." in out
