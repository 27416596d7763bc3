"""Tests of linattn_core.exercises: every solution passes, typical wrong answers fail with the right
diagnosis, and the exercises' own references agree with the library.

The wrong answers below are what a reader plausibly writes; each test asserts that check() returns
False (never raises) and prints the message that names the mistake.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _tolerances import assert_close

from linattn_core import (
    KVCache,
    LinearAttentionState,
    exercises,
    get_feature_map,
    kernel_attention,
    linear_attention,
    softmax_attention,
)

ALL = list(exercises.EXERCISES.values())
IDS = [ex.name for ex in ALL]
CHAPTER_NAMES = {
    "softmax": {"softmax_attention", "score_matrix_bytes"},
    "associative": {"kernel_attention", "associative_attention"},
    "feature_maps": {"elu_plus_one", "performer_features"},
    "causal": {"causal_cumsum", "streaming_step"},
    "tradeoffs": {"clamped_normalise", "kv_cache_bytes"},
}


def run_check(ex, fn, capsys) -> tuple[bool, str]:
    """check(fn) and what it printed, with line wrapping undone so messages can be matched."""
    result = ex.check(fn)
    out = capsys.readouterr().out
    assert isinstance(result, bool), f"check() returned {type(result).__name__}"
    return result, " ".join(out.split())


def sw(x):
    return np.swapaxes(x, -1, -2)


# --------------------------------------------------------------------------------------------------
# The fixed names and the solutions
# --------------------------------------------------------------------------------------------------
def test_fixed_names_by_chapter():
    found = {}
    for ex in ALL:
        found.setdefault(ex.chapter, set()).add(ex.name)
        assert getattr(exercises, ex.name) is ex
    assert found == CHAPTER_NAMES


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_solution_passes(ex, capsys):
    ok, out = run_check(ex, ex.solution_fn, capsys)
    assert ok, out
    assert out.startswith("Correct!"), out


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_solution_printed_is_the_tested_function(ex, capsys):
    ex.solution()
    src = capsys.readouterr().out
    assert src.startswith(f"def {ex.name}("), src[:80]
    namespace = {"np": np}
    exec(src, namespace)  # the printed text is a working solution on its own
    ok, out = run_check(ex, namespace[ex.name], capsys)
    assert ok, out


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_calling_the_exercise_is_check(ex, capsys):
    assert ex(ex.solution_fn) is True
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_stub_returning_none(ex, capsys):
    def stub(*args):
        ...  # the unsolved template cell

    ok, out = run_check(ex, stub, capsys)
    assert not ok
    assert "your function returned None - did you forget `return`?" in out
    assert "Input #1 of" in out


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_exception_is_caught_and_reported(ex, capsys):
    def broken(*args):
        raise KeyError("oops in my code")

    ok, out = run_check(ex, broken, capsys)
    assert not ok
    assert "raised KeyError" in out and "oops in my code" in out
    assert f"{ex.name}({', '.join(ex.arg_names)})" in out


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_not_a_function(ex, capsys):
    ok, out = run_check(ex, None, capsys)
    assert not ok
    assert "needs your function itself" in out


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_hints_are_progressive_and_bounded(ex, capsys):
    assert len(ex.hints) >= 2
    texts = []
    for n in range(1, len(ex.hints) + 1):
        ex.hint(n)
        out = capsys.readouterr().out
        assert out.startswith(f"Hint {n} of {len(ex.hints)}:"), out
        texts.append(out)
    assert len(set(texts)) == len(texts)
    ex.hint(len(ex.hints) + 5)
    out = capsys.readouterr().out
    assert "here is the last one" in out and f"exercises.{ex.name}.solution()" in out
    ex.hint(0)
    assert "hint(n) takes n = 1 to" in capsys.readouterr().out


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_feedback_is_deterministic(ex, capsys):
    def wrong(*args):
        out = ex.solution_fn(*args)
        if isinstance(out, tuple):
            return (out[0], out[1], out[2] * 1.5)
        return out * 3 + 1

    first = run_check(ex, wrong, capsys)
    second = run_check(ex, wrong, capsys)
    assert first == second
    assert not first[0]
    assert "Not yet" in first[1]


def test_list_prints_every_exercise_by_chapter(capsys):
    exercises.list()
    out = capsys.readouterr().out
    for chapter, names in CHAPTER_NAMES.items():
        assert f"{chapter}.md" in out
        for name in names:
            assert f"exercises.{name}" in out
    # chapters appear in the book's order
    positions = [out.index(f"{c}.md") for c in ["softmax", "associative", "feature_maps", "causal",
                                                "tradeoffs"]]
    assert positions == sorted(positions)


def test_markdown_repr_describes_the_task():
    md = exercises.associative_attention._repr_markdown_()
    assert "exercises.associative_attention" in md and "S = phi(K)^T V" in md


# --------------------------------------------------------------------------------------------------
# Typical wrong answers: each must fail with the message that names the mistake
# --------------------------------------------------------------------------------------------------
def _softmax(s, axis=-1):
    s = s - s.max(axis=axis, keepdims=True)
    w = np.exp(s)
    return w / w.sum(axis=axis, keepdims=True)


def sm_no_scale(q, k, v):
    return _softmax(q @ sw(k)) @ v


def sm_unstable(q, k, v):
    w = np.exp(q @ sw(k) / np.sqrt(q.shape[-1]))
    return w / w.sum(-1, keepdims=True) @ v


def sm_dot_T(q, k, v):
    return _softmax(q @ k.T / np.sqrt(q.shape[-1])) @ v


def sm_einsum_2d(q, k, v):  # works without batch dims only, no exception with them
    s = np.einsum("...id,...jd->ij", q, k) / np.sqrt(q.shape[-1])
    return _softmax(s) @ v


def sm_global_max(q, k, v):
    s = q @ sw(k) / np.sqrt(q.shape[-1])
    w = np.exp(s - s.max())
    return w / w.sum(-1, keepdims=True) @ v


def sm_whole_matrix(q, k, v):
    s = q @ sw(k) / np.sqrt(q.shape[-1])
    w = np.exp(s - s.max())
    return w / w.sum() @ v


def sm_wrong_axis(q, k, v):
    return _softmax(q @ sw(k) / np.sqrt(q.shape[-1]), axis=-2) @ v


def sm_dv_scale(q, k, v):
    return _softmax(q @ sw(k) / np.sqrt(v.shape[-1])) @ v


def sm_weights(q, k, v):
    return _softmax(q @ sw(k) / np.sqrt(q.shape[-1]))


def sm_float32(q, k, v):
    return exercises._solution_softmax_attention(q, k, v).astype(np.float32)


def elu_where(x):
    return np.where(x > 0, x + 1, np.exp(x))


def elu_plain(x):
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


def elu_relu(x):
    return np.maximum(x, 0) + 1


def elu_inplace(x):
    neg = x <= 0
    x[neg] = np.exp(x[neg])
    x[~neg] += 1
    return x


def ka_unnormalised(q, k, v, phi):
    return phi(q) @ sw(phi(k)) @ v


def ka_columns(q, k, v, phi):
    A = phi(q) @ sw(phi(k))
    return A / A.sum(-2, keepdims=True) @ v


def ka_no_phi(q, k, v, phi):
    A = q @ sw(k)
    return A @ v / A.sum(-1, keepdims=True)


def ka_softmax(q, k, v, phi):
    return _softmax(q @ sw(k) / np.sqrt(q.shape[-1])) @ v


def aa_unnormalised(q, k, v, phi):
    return phi(q) @ (sw(phi(k)) @ v)


def aa_quadratic(q, k, v, phi):
    return exercises._solution_kernel_attention(q, k, v, phi)


def aa_raw_k(q, k, v, phi):
    fq = phi(q)
    return fq @ (sw(k) @ v) / np.maximum(fq @ k.sum(-2)[..., None], 1e-6)


def pf_no_scale(x, W):
    return np.exp(x @ W.T - 0.5 * (x * x).sum(-1, keepdims=True)) / np.sqrt(W.shape[0])


def pf_no_m(x, W):
    xs = x * W.shape[1] ** -0.25
    return np.exp(xs @ W.T - 0.5 * (xs * xs).sum(-1, keepdims=True))


def pf_no_norm(x, W):
    xs = x * W.shape[1] ** -0.25
    return np.exp(xs @ W.T) / np.sqrt(W.shape[0])


def pf_stabilised(x, W):
    xs = x * W.shape[1] ** -0.25
    u = xs @ W.T - 0.5 * (xs * xs).sum(-1, keepdims=True)
    return np.exp(u - u.max(-1, keepdims=True)) / np.sqrt(W.shape[0])


def pf_untransposed(x, W):
    xs = x * W.shape[1] ** -0.25
    return np.exp(xs @ W - 0.5 * (xs * xs).sum(-1, keepdims=True)) / np.sqrt(W.shape[0])


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


def cc_strict_unclamped(q, k, v, phi):
    fq, S, z = _prefix(q, k, v, phi, exclusive=True)
    return np.einsum("...nf,...nfv->...nv", fq, S) / (fq * z).sum(-1)[..., None]


def cc_noncausal(q, k, v, phi):
    return exercises._solution_associative_attention(q, k, v, phi)


def cc_unnormalised(q, k, v, phi):
    fq, S, _ = _prefix(q, k, v, phi)
    return np.einsum("...nf,...nfv->...nv", fq, S)


def cc_masked_quadratic(q, k, v, phi):
    A = np.tril(phi(q) @ sw(phi(k)))
    return A @ v / A.sum(-1, keepdims=True)


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
    out = exercises._solution_streaming_step(S, z, q_t, k_t, v_t, phi)
    return out[0], out[2]


def ss_unnormalised(S, z, q_t, k_t, v_t, phi):
    fq, fk = phi(q_t[None])[0], phi(k_t[None])[0]
    S_new = S + np.outer(fk, v_t)
    return S_new, z + fk, fq @ S_new


def cn_plus_eps(num, den, eps):
    return num / (den + eps)[..., None]


def cn_no_clamp(num, den, eps):
    return num / den[..., None]


def cn_no_newaxis(num, den, eps):
    return num / np.maximum(den, eps)


def cn_no_newaxis_square(num, den, eps):  # silently wrong only when N = d_v
    if num.shape[-1] == den.shape[-1]:
        return num / np.maximum(den, eps)
    return exercises._solution_clamped_normalise(num, den, eps)


def cn_abs(num, den, eps):
    return num / np.maximum(np.abs(den), eps)[..., None]


def cn_fixed_eps(num, den, eps):
    return num / np.maximum(den, 1e-6)[..., None]


def smb_no_square(N, batch_heads, itemsize):
    return N * batch_heads * itemsize


def smb_no_heads(N, batch_heads, itemsize):
    return N * N * itemsize


def smb_float(N, batch_heads, itemsize):
    return N * N * batch_heads * itemsize / 1


def smb_int32(N, batch_heads, itemsize):
    return int(np.int32(N) * np.int32(N) * np.int32(batch_heads) * np.int32(itemsize))


def smb_mib(N, batch_heads, itemsize):
    return N * N * batch_heads * itemsize / 2**20


def kv_keys_only(t, d, d_v, itemsize):
    return t * d * itemsize


def kv_same_dim(t, d, d_v, itemsize):
    return 2 * t * d * itemsize


def kv_off_by_one(t, d, d_v, itemsize):
    return (t + 1) * (d + d_v) * itemsize


def kv_state_size(t, d, d_v, itemsize):
    return d * d_v * itemsize


def kv_product(t, d, d_v, itemsize):
    return t * d * d_v * itemsize


def kv_no_itemsize(t, d, d_v, itemsize):
    return t * (d + d_v)


WRONG = [
    ("softmax_attention", sm_no_scale, "forgot the 1/sqrt(d) scale"),
    ("softmax_attention", sm_unstable, "not numerically stable"),
    ("softmax_attention", sm_dot_T, "works without batch dimensions"),
    ("softmax_attention", sm_einsum_2d, "works without batch dimensions"),
    ("softmax_attention", sm_wrong_axis, "normalised over the wrong axis"),
    ("softmax_attention", sm_global_max, "maximum of the whole score array"),
    ("softmax_attention", sm_whole_matrix, "normalised over the whole score matrix"),
    ("softmax_attention", sm_dv_scale, "1/sqrt(d_v)"),
    ("softmax_attention", sm_weights, "returned the attention weights"),
    ("softmax_attention", sm_float32, "not float64"),
    ("score_matrix_bytes", smb_no_square, "N**2"),
    ("score_matrix_bytes", smb_no_heads, "multiply by batch_heads"),
    ("score_matrix_bytes", smb_float, "but a float"),
    ("score_matrix_bytes", smb_int32, "integer overflow"),
    ("score_matrix_bytes", smb_mib, "you returned MiB"),
    ("kernel_attention", ka_unnormalised, "forgot the normaliser"),
    ("kernel_attention", ka_columns, "normalised the columns"),
    ("kernel_attention", ka_no_phi, "you left out phi"),
    ("kernel_attention", ka_softmax, "that is softmax attention"),
    ("associative_attention", aa_unnormalised, "forgot the normaliser"),
    ("associative_attention", aa_quadratic, "N x N matrix"),
    ("associative_attention", aa_raw_k, "applied phi to the queries only"),
    ("elu_plus_one", elu_where, "evaluates BOTH branches"),
    ("elu_plus_one", elu_plain, "that is elu(x), without the + 1"),
    ("elu_plus_one", elu_relu, "that is relu(x) + 1"),
    ("elu_plus_one", elu_inplace, "changed its input `x` in place"),
    ("performer_features", pf_no_scale, "forgot to scale x by d^(-1/4)"),
    ("performer_features", pf_no_m, "forgot the 1/sqrt(m) factor"),
    ("performer_features", pf_no_norm, "left out the -|x'|^2 / 2 term"),
    ("performer_features", pf_stabilised, "you stabilised"),
    ("performer_features", pf_untransposed, "projection.T"),
    ("causal_cumsum", cc_strict, "strictly-causal"),
    ("causal_cumsum", cc_strict_unclamped, "strictly-causal"),
    ("causal_cumsum", cc_noncausal, "non-causal attention"),
    ("causal_cumsum", cc_unnormalised, "forgot the normaliser"),
    ("causal_cumsum", cc_masked_quadratic, "N x N matrix"),
    ("causal_cumsum", cc_axis0, "over axis 0"),
    ("streaming_step", ss_query_first, "before adding the current token"),
    ("streaming_step", ss_inplace, "in place"),
    ("streaming_step", ss_transposed, "wrong way round"),
    ("streaming_step", ss_two_outputs, "tuple (S_new, z_new, y_t) of three arrays"),
    ("streaming_step", ss_unnormalised, "forgot the normaliser"),
    ("clamped_normalise", cn_plus_eps, "added eps (den + eps) instead of clamping"),
    ("clamped_normalise", cn_no_clamp, "did not clamp"),
    ("clamped_normalise", cn_no_newaxis, "add an axis, den[..., None]"),
    ("clamped_normalise", cn_no_newaxis_square, "without [..., None]"),
    ("clamped_normalise", cn_abs, "you took |den|"),
    ("clamped_normalise", cn_fixed_eps, "use the eps argument"),
    ("kv_cache_bytes", kv_keys_only, "counted only the keys"),
    ("kv_cache_bytes", kv_same_dim, "assumed d_v = d"),
    ("kv_cache_bytes", kv_off_by_one, "off by one"),
    ("kv_cache_bytes", kv_state_size, "linear-attention state S"),
    ("kv_cache_bytes", kv_product, "multiplied d and d_v"),
    ("kv_cache_bytes", kv_no_itemsize, "multiply by itemsize"),
]


@pytest.mark.parametrize(("name", "fn", "message"), WRONG,
                         ids=[f"{n}-{f.__name__}" for n, f, _ in WRONG])
def test_typical_mistake_is_diagnosed(name, fn, message, capsys):
    ok, out = run_check(getattr(exercises, name), fn, capsys)
    assert not ok, out
    assert message in out, out
    assert "Correct!" not in out


def test_wrong_values_report_position_and_size(capsys):
    def off_in_one_place(q, k, v):
        out = exercises._solution_softmax_attention(q, k, v)
        if out.shape[-2] >= 7:  # wrong only from the third input (N = 7) on
            out[..., 6, 1] += 0.25
        return out

    ok, out = run_check(exercises.softmax_attention, off_in_one_place, capsys)
    assert not ok
    assert "Input #3 of 6" in out and "first at index [6, 1]" in out
    assert "largest error |got - expected| = 2.50e-01" in out
    assert "Inputs #1 to #2 were right" in out


def test_wrong_shape_names_both_shapes(capsys):
    def squeezed(q, k, v):
        return exercises._solution_softmax_attention(q, k, v)[..., 0]

    ok, out = run_check(exercises.softmax_attention, squeezed, capsys)
    assert not ok
    assert "expected (5, 3), got (5,)" in out


def test_check_restores_nothing_global(capsys):
    # check() must not leave numpy's error state or tracemalloc changed
    import tracemalloc

    before = np.geterr()
    run_check(exercises.associative_attention, exercises._solution_associative_attention, capsys)
    run_check(exercises.softmax_attention, sm_unstable, capsys)
    assert np.geterr() == before
    assert not tracemalloc.is_tracing()


# --------------------------------------------------------------------------------------------------
# The exercises' own references agree with the library
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("d", "m"), [(4, 6), (8, 3), (4, 16)])
def test_performer_reference_matches_library(d, m):
    fm = get_feature_map("performer", d=d, num_features=m, seed=3, stabilize=False)
    x = np.random.default_rng(0).standard_normal((2, 7, d))
    assert_close(exercises._ref_performer_features(x, fm.projection), fm(x), what="performer")
    assert_close(exercises._solution_performer_features(x, fm.projection), fm(x), what="solution")


@pytest.mark.parametrize("feature_map", ["elu+1", "performer"])
def test_streaming_reference_matches_library(feature_map):
    d, d_v, n = 4, 3, 9
    phi = (get_feature_map("performer", d=d, num_features=6, seed=1, stabilize=False)
           if feature_map == "performer" else get_feature_map(feature_map))
    q, k = np.random.default_rng(1).standard_normal((2, n, d))
    v = np.random.default_rng(2).standard_normal((n, d_v))
    state = LinearAttentionState(d, d_v, phi)
    S, z = np.zeros_like(state.S), np.zeros_like(state.z)
    ys = []
    for t in range(n):
        S, z, y = exercises._ref_streaming_step(S, z, q[t], k[t], v[t], phi)
        assert_close(y, state.step(q[t], k[t], v[t]), what=f"step {t}")
        ys.append(y)
    assert_close(S, state.S, what="S")
    assert_close(z, state.z, what="z")
    assert_close(np.stack(ys), linear_attention(q, k, v, phi, causal=True), what="causal")
    assert_close(ys[0], v[0], what="y_0 = v_0")


def test_solutions_agree_with_the_quadratic_reference():
    rng = np.random.default_rng(5)
    q, k = rng.standard_normal((2, 2, 3, 9, 4))
    v = rng.standard_normal((2, 3, 9, 5))
    phi = get_feature_map("elu+1")
    for causal, fn in [(False, exercises._solution_kernel_attention),
                       (False, exercises._solution_associative_attention),
                       (True, exercises._solution_causal_cumsum)]:
        assert_close(fn(q, k, v, phi), kernel_attention(q, k, v, phi, causal=causal),
                     what=fn.__name__)
    assert_close(exercises._solution_softmax_attention(q, k, v), softmax_attention(q, k, v),
                 what="softmax")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_score_matrix_bytes_matches_stored_weights(dtype):
    q, k, v = np.random.default_rng(6).standard_normal((3, 2, 3, 7, 4)).astype(dtype)
    _, weights = softmax_attention(q, k, v, return_weights=True)
    assert exercises._solution_score_matrix_bytes(7, 6, np.dtype(dtype).itemsize) == weights.nbytes


@pytest.mark.parametrize(("d", "d_v", "t"), [(4, 3, 0), (4, 3, 1), (8, 5, 7), (2, 6, 40)])
def test_kv_cache_bytes_matches_kvcache(d, d_v, t):
    cache = KVCache(d, d_v)
    rng = np.random.default_rng(t)
    for _ in range(t):
        cache.append(rng.standard_normal(d), rng.standard_normal(d_v))
    assert exercises._solution_kv_cache_bytes(t, d, d_v, 8) == cache.nbytes


def test_clamped_normalise_is_the_library_clamp():
    # With the identity map, some denominators are negative; the library clamps them with
    # max(den, eps), which is exactly clamped_normalise applied to the numerator and denominator.
    rng = np.random.default_rng(7)
    q, k = rng.standard_normal((2, 8, 4))
    v = rng.standard_normal((8, 3))
    A = q @ k.T
    eps = 1e-3
    assert (A.sum(-1) < eps).any()  # the input really exercises the clamp
    with pytest.warns(RuntimeWarning):
        lib = kernel_attention(q, k, v, "identity", eps=eps)
    assert_close(exercises._solution_clamped_normalise(A @ v, A.sum(-1), eps), lib, what="clamp")


# --------------------------------------------------------------------------------------------------
# book/instructors.md quotes the checker; keep the quote and the exercise table true
# --------------------------------------------------------------------------------------------------
INSTRUCTORS = Path(__file__).resolve().parent.parent / "book" / "instructors.md"


@pytest.mark.skipif(not INSTRUCTORS.exists(), reason="book/instructors.md not written yet")
def test_instructors_page_quotes_real_feedback(capsys):
    text = INSTRUCTORS.read_text(encoding="utf-8")
    block = text.split("```text\n", 1)[1].split("```", 1)[0]
    ok, out = run_check(exercises.causal_cumsum, cc_strict, capsys)
    assert not ok
    for line in block.splitlines():
        quoted = " ".join(line.split())
        if quoted and "..." not in quoted:
            assert quoted in out, f"instructors.md quotes {quoted!r}, check() prints {out!r}"


@pytest.mark.skipif(not INSTRUCTORS.exists(), reason="book/instructors.md not written yet")
def test_instructors_table_matches_the_exercises():
    rows = {}
    for line in INSTRUCTORS.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`") and cells[0].strip("`") in exercises.EXERCISES:
            rows[cells[0].strip("`")] = cells
    assert set(rows) == set(exercises.EXERCISES)
    for name, (_, chapter, stars, minutes, _) in rows.items():
        ex = exercises.EXERCISES[name]
        assert chapter.endswith(f"<{ex.chapter}>`"), (name, chapter)
        assert stars == "★" * ex.difficulty, (name, stars)
        assert minutes == f"{ex.minutes} min", (name, minutes)


def test_star_import_does_not_shadow_builtins():
    namespace: dict = {}
    exec("from linattn_core.exercises import *", namespace)
    assert "list" not in namespace
    assert namespace["softmax_attention"] is exercises.softmax_attention
