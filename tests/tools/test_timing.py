"""linattn_core.tools.timing: device choice, timers, memory measurement, guards, records and the cost model.

No test here asserts a speed: performance targets are reported by ``python -m linattn_core.bench``, never
tested. What is tested is that the machinery is right: which device is chosen, that the statistics are
consistent, that a known allocation is measured, that the guards skip with a reason instead of crashing,
and that the analytic counts and crossovers follow from their formulas.
"""

from __future__ import annotations

import json
import math
import sys
import time

import numpy as np
import pytest
import torch
from _tolerances import assert_close

from linattn_core.tools import timing as T


# A method standing in for any real one: the guards only look at its name (for the analytic counts).
def _identity(q, k, v):
    return v


# --- device choice ---------------------------------------------------------------------------------
@pytest.fixture
def no_accelerator(monkeypatch):
    monkeypatch.delenv(T.ENV_DEVICE, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


@pytest.fixture
def fake_cuda(monkeypatch):
    """Pretend a CUDA GPU named 'Fake GPU 9000' is present (nothing is run on it)."""
    monkeypatch.delenv(T.ENV_DEVICE, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU 9000")
    props = type("Props", (), {"total_memory": 80 * 2**30})()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: props)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def test_cpu_without_accelerator(no_accelerator):
    assert T.pick_device().type == "cpu"
    assert T.describe_device().startswith("cpu: ")
    assert str(torch.get_num_threads()) in T.describe_device()


def test_cuda_preferred_when_available(fake_cuda):
    assert T.pick_device().type == "cuda"
    assert "Fake GPU 9000" in T.describe_device("cuda")


def test_mps_when_no_cuda(no_accelerator, monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert T.pick_device().type == "mps"


def test_argument_overrides_auto_choice(fake_cuda):
    assert T.pick_device("cpu").type == "cpu"
    assert T.pick_device(torch.device("cpu")).type == "cpu"
    assert T.pick_device("auto").type == "cuda"


def test_environment_variable_overrides(fake_cuda, monkeypatch):
    monkeypatch.setenv(T.ENV_DEVICE, "cpu")
    assert T.pick_device().type == "cpu"
    assert T.pick_device("cuda").type == "cuda"  # the argument wins over the variable


def test_unavailable_request_is_an_error(no_accelerator, monkeypatch):
    with pytest.raises(ValueError, match=r"prefer='cuda'.*is_available\(\) is False"):
        T.pick_device("cuda")
    with pytest.raises(ValueError, match="mps"):
        T.pick_device("mps")
    monkeypatch.setenv(T.ENV_DEVICE, "cuda")
    with pytest.raises(ValueError, match=T.ENV_DEVICE):
        T.pick_device()
    with pytest.raises(ValueError, match="not a device name"):
        T.pick_device("gpu-please")


def test_cuda_index_out_of_range(fake_cuda):
    with pytest.raises(ValueError, match="1 CUDA device"):
        T.pick_device("cuda:3")


# --- timing ----------------------------------------------------------------------------------------
def _check_timing(t: T.Timing) -> None:
    assert t.repeats >= 3 and len(t.times) == t.repeats
    assert t.median_s > 0 and t.first_call_s > 0
    assert t.q25_s <= t.median_s <= t.q75_s
    assert min(t.times) <= t.q25_s and t.q75_s <= max(t.times)
    assert t.iqr_s == t.q75_s - t.q25_s >= 0


def test_time_call_torch():
    a = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    _check_timing(T.time_call(lambda: a @ a, device="cpu", min_run_time=0.01, max_run_time=0.05))


def test_time_call_numpy_loop():
    a = np.random.default_rng(0).standard_normal((64, 64))
    _check_timing(T.time_call(lambda: a @ a, min_run_time=0.01, max_run_time=0.05))


def test_time_call_measures_the_call():
    # a sleep lasts at least as long as asked: the median cannot be shorter
    t = T.time_call(lambda: time.sleep(0.01), device="cpu", min_run_time=0.01, max_run_time=0.05)
    assert t.median_s >= 0.01


def test_time_call_rejects_bad_budgets():
    with pytest.raises(ValueError, match="min_run_time"):
        T.time_call(lambda: None, min_run_time=0)
    with pytest.raises(ValueError, match="min_repeats"):
        T.time_call(lambda: None, min_repeats=0)


# --- memory ---------------------------------------------------------------------------------------
ALLOC_MIB = 64  # the known allocation the measurements must see
# Measured: 64.0 MiB (peak_memory hands freed heap pages back first, so the allocation needs new pages).
# The band is relative to the allocation: 10% below for page granularity (a 2 MiB huge page at either
# end) and resident memory another thread frees meanwhile; 25% above for what else the call touches
# (interpreter, allocator bookkeeping).
LOW, HIGH = 0.9, 1.25


def _mib(n: float) -> float:
    return n * 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the CPU measurement reads /proc")
def test_peak_memory_torch_cpu_sees_a_known_allocation():
    n = ALLOC_MIB * 2**20 // 4
    peak, source = T.peak_memory(lambda: torch.ones(n), device="cpu")
    assert "VmHWM" in source
    assert LOW * _mib(ALLOC_MIB) <= peak < HIGH * _mib(ALLOC_MIB), f"{peak / 2**20:.1f} MiB"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the CPU measurement reads /proc")
def test_peak_memory_counts_temporaries_not_just_the_output():
    n = ALLOC_MIB * 2**20 // 4

    def fn():
        big = torch.ones(n)  # a temporary, freed before returning
        return big[:1].clone()

    peak, _ = T.peak_memory(fn, device="cpu")
    assert peak >= LOW * _mib(ALLOC_MIB), f"{peak / 2**20:.1f} MiB"  # the output alone is 4 bytes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the CPU measurement reads /proc")
def test_peak_memory_counts_a_large_result_after_an_equal_one_was_freed():
    # the warm-up call frees a result of the same size, which the C allocator may keep resident for the
    # next one (glibc does for blocks under its mmap threshold); the measured call must still count it
    from linattn_core import linear_attention

    q, k, v = (torch.randn(64, 2048, 64) for _ in range(3))
    out_bytes = v.numel() * 4
    call = lambda: linear_attention(q, k, v, causal=True)  # noqa: E731
    call()  # warm-up: leaves a free block behind
    peak, _ = T.peak_memory(call, device="cpu")
    assert peak >= LOW * out_bytes, f"{peak / 2**20:.1f} MiB for a {out_bytes / 2**20:.0f} MiB result"


def test_peak_memory_numpy_tracemalloc():
    # tracemalloc counts the bytes asked for: exact on any allocator
    n = ALLOC_MIB * 2**20 // 8
    peak, source = T.peak_memory(lambda: np.ones(n))
    assert source == "tracemalloc peak"
    assert LOW * _mib(ALLOC_MIB) <= peak < HIGH * _mib(ALLOC_MIB)


# --- analytic counts -------------------------------------------------------------------------------
def test_flop_counts_follow_their_formulas():
    N, d, d_v, C, B = 1000, 32, 16, 64, 3
    assert T.flops("softmax_naive", N, d, d_v, batch_heads=B) == 2 * N * N * (d + d_v) * B
    assert T.flops("softmax_naive", N, d, d_v, causal=True) == 2 * N * N * (d + d_v)
    assert T.flops("sdpa", N, d, d_v, causal=True) == N * N * (d + d_v)
    assert T.flops("chunked", N, d, d_v, causal=True, chunk_size=C) == 4 * N * d * d_v + 2 * N * C * (d + d_v)
    assert T.flops("auto", N, d, d_v, causal=True) == T.flops("chunked", N, d, d_v, causal=True)
    for m in ("recurrent", "cumsum"):
        assert T.flops(m, N, d, d_v, causal=True) == T.flops("linear", N, d, d_v)
    assert T.flops("linear", N, d, d_v, d_phi=2 * d) == 4 * N * 2 * d * d_v
    # the quadratic kernel form multiplies features, not q and k: its width is d_phi
    assert T.flops("kernel", N, d, d_v, d_phi=3 * d) == 2 * N * N * (3 * d + d_v)
    assert T.flops("kernel", N, d, d_v) == T.flops("softmax_naive", N, d, d_v)
    # skipping the masked half of the score blocks: the default is each method's own behaviour
    assert T.flops("softmax_naive", N, d, d_v, causal=True, skip_masked=True) == N * N * (d + d_v)
    assert T.flops("sdpa", N, d, d_v, causal=True, skip_masked=False) == 2 * N * N * (d + d_v)
    assert T.flops("sdpa", N, d, d_v, skip_masked=True) == 2 * N * N * (d + d_v)  # nothing masked
    assert (T.flops("chunked", N, d, d_v, causal=True, chunk_size=C, skip_masked=True)
            == 4 * N * d * d_v + N * C * (d + d_v))
    # a chunk is never longer than the sequence
    short = 16  # < C
    assert (T.flops("chunked", short, d, d_v, causal=True, chunk_size=C)
            == 4 * short * d * d_v + 2 * short * short * (d + d_v))
    # a random-feature map projects every query and key through a d x d_phi matrix: 2 N d d_phi each,
    # in every form that applies phi, and never in softmax attention
    m = 3 * d
    for method, causal in (("linear", False), ("kernel", False), ("recurrent", True), ("cumsum", True),
                           ("chunked", True)):
        plain = T.flops(method, N, d, d_v, d_phi=m, causal=causal)
        assert T.flops(method, N, d, d_v, d_phi=m, causal=causal, projected=True) == plain + 4 * N * d * m
    for method in ("softmax_naive", "sdpa"):
        assert T.flops(method, N, d, d_v, projected=True) == T.flops(method, N, d, d_v)
    # with d = d_v the projection costs as much as the associative products: Performer with m = 4d
    # costs 8 times elu+1 (d_phi = d), not 4
    assert T.flops("linear", N, 64, 64, d_phi=256, projected=True) == 8 * T.flops("linear", N, 64, 64)
    curves = T.cost_curves(np.array([100.0, 1000.0]), d=64, d_phi=256, projected=True)
    assert curves["crossover_N"] == 512.0
    assert_close(curves["flops_linear"], 8 * 4 * np.array([100.0, 1000.0]) * 64 * 64, dtype="float64")


def test_flop_crossover_names_the_quadratic_form():
    # softmax's scores have width d, the kernel form's d_phi: two crossovers with the associative form
    for d, d_v, d_phi in ((64, 64, 64), (64, 64, 256), (32, 16, 100)):
        soft = T.flop_crossover("softmax_naive", "linear", d=d, d_v=d_v, d_phi=d_phi)
        kern = T.flop_crossover("kernel", "linear", d=d, d_v=d_v, d_phi=d_phi)
        assert_close(soft, 2 * d_phi * d_v / (d + d_v), what="softmax vs linear")
        assert_close(kern, 2 * d_phi * d_v / (d_phi + d_v), what="kernel form vs linear")
        for slow, n in (("softmax_naive", soft), ("kernel", kern)):  # the counts are equal there
            lo, hi = math.floor(n), math.floor(n) + 1
            assert (T.flops(slow, lo, d, d_v, d_phi=d_phi) <= T.flops("linear", lo, d, d_v, d_phi=d_phi)
                    and T.flops(slow, hi, d, d_v, d_phi=d_phi) > T.flops("linear", hi, d, d_v, d_phi=d_phi))
    assert_close(T.flop_crossover("softmax_naive", "chunked", d=64, d_v=64, chunk_size=64), 128.0)
    # a random-feature map also projects q and k (4 N d d_phi): against softmax the counts then cross
    # at 2 d_phi whatever d and d_v; against the kernel form, which projects too, nothing moves
    for d, d_v, d_phi in ((64, 64, 256), (32, 16, 100)):
        assert_close(T.flop_crossover("softmax_naive", "linear", d=d, d_v=d_v, d_phi=d_phi, projected=True),
                     2.0 * d_phi, what="softmax vs projected linear")
        assert_close(T.flop_crossover("kernel", "linear", d=d, d_v=d_v, d_phi=d_phi, projected=True),
                     T.flop_crossover("kernel", "linear", d=d, d_v=d_v, d_phi=d_phi), what="kernel vs linear")
    assert T.crossover_length(T.CostModel(flop_rate=1e9, byte_rate=math.inf), "softmax_naive", "linear",
                              d=64, d_v=64, d_phi=256, projected=True) == 512
    # causal SDPA skips the masked half: it stays cheaper twice as long
    assert_close(T.flop_crossover("sdpa", "linear", causal=True), 128.0)
    with pytest.raises(ValueError, match="grow faster"):
        T.flop_crossover("linear", "softmax_naive")


def test_decode_memory_counts_what_the_library_keeps():
    # the model's bytes are the .nbytes of the objects the trade-offs chapter measures
    from linattn_core import KVCache, LinearAttentionState

    d, d_v, steps = 8, 5, 7
    state = LinearAttentionState(d, d_v, feature_map="elu+1", dtype=np.float32)
    cache = KVCache(d, d_v, dtype=np.float32)
    k, v = np.ones((steps, d), np.float32), np.ones((steps, d_v), np.float32)
    for t in range(steps):
        state.update(k[t], v[t])
        cache.append(k[t], v[t])
    m = T.decode_memory(np.array([float(steps)]), d=d, d_v=d_v, itemsize=4)
    assert m["state"][0] == state.nbytes and m["kv_cache"][0] == cache.nbytes


def test_chapter_and_explorer_crossovers_come_from_one_model():
    """The associative chapter counts with timing.flops / flop_crossover; the trade-offs explorer draws
    timing.cost_curves. At the chapter's sizes they give the same numbers and the same crossover."""
    import pathlib
    import re

    from linattn_core.tools import viz, widgets

    assert viz.cost_model is T.cost_curves and viz.decode_memory_model is T.decode_memory
    chapter = (pathlib.Path(__file__).parents[2] / "book" / "associative.md").read_text(encoding="utf-8")
    cost_section = chapter[chapter.index("(sec-associative-cost)="):]
    cost_section = cost_section[:cost_section.index("\n## ", cost_section.index("## ") + 3)]
    assert "timing.flop_crossover(" in cost_section and "timing.flops(" in cost_section
    # no second model there, outside the solution of the exercise that asks the reader to derive one
    prose = re.sub(r"````\{solution-start\}.*?````\{solution-end\}", "", cost_section, flags=re.S)
    assert not re.search(r"viz\.cost_model|2 \* d_phi \* d_v", prose)
    d = d_v = 64  # the chapter's sizes; the explorer's default, elu+1 so d_phi = d
    twin = widgets.cost_explorer(d=d, d_v=d_v, static=True)
    shown = [tr for tr in twin.data if tr.name == "equal FLOPs" and tr.visible is not False]
    assert len(shown) == 1
    # the twin keeps 4 significant digits: compare with the model's numbers rounded alike
    expected = T.flop_crossover("softmax_naive", "linear", d=d, d_v=d_v)
    assert_close(float(shown[0].x[0]), float(viz.sig_round(expected)), what="explorer's crossover")
    soft = next(tr for tr in twin.data if tr.name == viz.tradeoffs.QUADRATIC_NAME and tr.xaxis == "x"
                and tr.visible is not False)
    counted = [T.flops("softmax_naive", int(n), d, d_v) for n in soft.x]
    assert_close(np.array(soft.y, dtype=float), viz.sig_round(counted), what="explorer's softmax FLOPs")


def test_quadratic_and_linear_memory():
    N, d, B = 2048, 64, 8
    assert T.predicted_bytes("softmax_naive", N, d, d, batch_heads=B) == (2 * N * N + N * d) * B * 4
    # doubling N: x4 for the matrix forms, x2 for the linear ones
    for m, factor in (("softmax_naive", 4), ("linear", 2)):
        small, big = (T.bytes_moved(m, n, d, d, itemsize=4) for n in (2**14, 2**15))
        assert round(big / small, 1) == factor
    assert T.bytes_moved("sdpa", N, d, d) == N * 4 * d * 4


def test_counts_reject_bad_input():
    with pytest.raises(ValueError, match="method='flash'"):
        T.flops("flash", 8, 4, 4)
    with pytest.raises(ValueError, match="causal=True"):
        T.flops("recurrent", 8, 4, 4)
    with pytest.raises(ValueError, match="N must be a positive integer, got 0"):
        T.predicted_bytes("linear", 0, 4, 4)


def test_crossover_closed_form():
    # equal rates, no memory limit: 2N²(d+d_v) = 4N d d_v + 2N C (d+d_v)  =>  N = 2 d d_v/(d+d_v) + C
    model = T.CostModel(flop_rate=1e9, byte_rate=math.inf)
    for d, d_v, C in ((64, 64, 64), (32, 128, 16)):
        expected = 2 * d * d_v / (d + d_v) + C
        n = T.crossover_length(model, "softmax_naive", "chunked", d=d, d_v=d_v, chunk_size=C)
        assert n == math.ceil(expected)
    # a slower linear method moves the crossover up by the rate ratio
    slower = T.CostModel(flop_rate=1e9, byte_rate=math.inf, efficiency={"chunked": 0.1})
    assert T.crossover_length(slower, d=64, d_v=64) == 1280
    # a fixed overhead makes softmax lose at tiny N too; the answer is where linear wins for good:
    # 1e-2 + 256 N²/1e9 = 4 N 64² / 0.01 / 1e9 = 1638.4 N/1e6, the larger root
    quirky = T.CostModel(flop_rate=1e9, byte_rate=math.inf, efficiency={"linear": 0.01},
                         overhead_s={"softmax_naive": 1e-2})
    a, b, c = 256.0, -1638.4 * 1e3, 1e-2 * 1e9
    root = (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
    assert T.crossover_length(quirky, "softmax_naive", "linear") == math.ceil(root)
    # overheads are per call, work is per head: two heads halve the weight of softmax's overhead, so the
    # range where linear loses widens and the crossover moves out
    two_heads = T.crossover_length(quirky, "softmax_naive", "linear", batch_heads=2)
    root2 = (-b + math.sqrt(b * b - 4 * a * c / 2)) / (2 * a)
    assert two_heads == math.ceil(root2) > math.ceil(root)
    # fixed per-call overhead with no other cost: the linear form never wins
    never = T.CostModel(flop_rate=math.inf, byte_rate=math.inf, overhead_s={"chunked": 1.0})
    assert T.crossover_length(never, n_max=2**20) is None


def _synthetic(method, causal, lengths, seconds):
    return [T.Record(method, causal, n, 64, 64, 1, "float32", "cpu", median_s=seconds(n), q25_s=seconds(n),
                     q75_s=seconds(n), repeats=3) for n in lengths]


def test_slopes_and_measured_crossover():
    lengths = [64, 128, 256, 512]
    recs = _synthetic("softmax_naive", False, lengths, lambda n: 1e-6 * n**2)
    recs += _synthetic("linear", False, lengths, lambda n: 1e-4 * n)
    assert_close(T.loglog_slope(recs, "softmax_naive"), 2.0, dtype="float64")
    assert_close(T.loglog_slope(recs, "linear"), 1.0, dtype="float64")
    assert_close(T.measured_crossover(recs, "softmax_naive", "linear"), 100.0, dtype="float64")
    assert T.measured_crossover(recs, "linear", "softmax_naive") is None  # softmax loses at long N
    short = [r for r in recs if r.N == 64]  # faster at every common length: the first is reported
    assert T.measured_crossover(short, "linear", "softmax_naive") == 64
    # a noisy early win does not count: the crossing that lasts is reported
    noisy = recs + _synthetic("softmax_naive", False, [16], lambda n: 1e-6 * n**2)
    noisy += _synthetic("linear", False, [16], lambda n: 1e-9)  # "faster" at N=16, slower at 64
    assert_close(T.measured_crossover(noisy, "softmax_naive", "linear"), 100.0, dtype="float64")
    with pytest.raises(ValueError, match="a slope needs 2"):
        T.loglog_slope(recs[:1], "softmax_naive")


def test_calibrate_recovers_efficiency_and_overhead():
    model = T.CostModel(flop_rate=1e10, byte_rate=1e9)
    lengths = [256, 1024, 4096, 16384]
    truth = {("linear", False): (0.25, 2e-4), ("chunked", True): (0.1, 1e-3)}
    recs = []
    for (name, causal), (eff, overhead) in truth.items():
        recs += _synthetic(name, causal, lengths, lambda n, name=name, causal=causal, eff=eff, o=overhead:
                           o + model.roofline_s(name, n, 64, 64, causal=causal) / eff)
    fitted = model.calibrate(recs)
    assert set(fitted.efficiency) == {"linear", "chunked (causal)"}  # keyed by label
    for (name, causal), (eff, overhead) in truth.items():
        label = f"{name} (causal)" if causal else name
        assert_close(fitted.efficiency[label], eff, dtype="float64")
        assert_close(fitted.overhead_s[label], overhead, dtype="float64")
        expected = overhead + model.roofline_s(name, 777, 64, 64, causal=causal) / eff
        assert_close(fitted.time_s(name, 777, 64, 64, causal=causal), expected, dtype="float64")


# --- sweeps: guards, budgets, records ---------------------------------------------------------------
SMALL = dict(d=8, d_v=8, batch_heads=2, min_run_time=0.005, max_run_time=0.02, progress=False)


def test_memory_guard_skips_with_a_reason(monkeypatch):
    # 1 MiB "free": the N x N matrices no longer fit at N=256, the linear form still does
    monkeypatch.setattr(T.sweeps, "available_memory", lambda device=None: 2**20)  # what sweep reads
    methods = [T.Method("softmax_naive", False, _identity), T.Method("linear", False, _identity)]
    recs = T.sweep(methods, [16, 256], device="cpu", **SMALL)
    by = {(r.method, r.N): r for r in recs}
    assert by["softmax_naive", 16].measured and by["linear", 256].measured
    skipped = by["softmax_naive", 256]
    assert not skipped.measured and skipped.median_s is None
    assert "needs about" in skipped.skipped and "GiB free on cpu" in skipped.skipped
    assert skipped.predicted_bytes > 0.5 * 2**20


def test_out_of_memory_is_reported_not_raised():
    def oom(q, k, v):
        raise torch.OutOfMemoryError("out of memory (simulated)")

    recs = T.sweep([T.Method("linear", False, oom)], [16, 32], device="cpu", **SMALL)
    assert recs[0].skipped.startswith("out of memory: OutOfMemoryError")
    assert "ran out of memory at N=16" in recs[1].skipped


def test_other_errors_are_raised():
    def broken(q, k, v):
        raise ZeroDivisionError("a real bug")

    with pytest.raises(ZeroDivisionError):
        T.sweep([T.Method("linear", False, broken)], [16], device="cpu", **SMALL)


class FakeClock:
    """The timers' clock, advanced only by the methods under test: a budget test that a busy machine
    cannot fail (a stall of the real clock used to push a fast call over its budget)."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    for module in (T.clock, T.sweeps):
        monkeypatch.setattr(module, "time", fake)
    return fake


def _taking(clock, seconds):
    def fn(q, k, v):
        clock.sleep(seconds)
        return v

    return fn


def test_per_call_budget_ends_a_method(clock):
    slow = T.Method("recurrent", True, _taking(clock, 0.3))
    fast = T.Method("chunked", True, _taking(clock, 1e-4))
    recs = T.sweep([slow, fast], [16, 32, 64], device="cpu", max_call_s=0.15, measure_memory=False, **SMALL)
    first, *rest = [r for r in recs if r.method == "recurrent"]
    assert first.measured and first.repeats == 1 and first.median_s >= 0.3
    assert all("over the 0.15 s budget" in r.skipped and "N=16" in r.skipped for r in rest)
    assert all(r.measured for r in recs if r.method == "chunked")


def test_predicted_time_skips_before_running(clock):
    calls = []

    def counted(q, k, v):
        calls.append(q.shape[-2])
        clock.sleep(0.002)
        return v

    # 2 ms at N=16; softmax's FLOPs grow 256x to N=256: predicted 0.5 s > 0.25 s, so it is not run
    recs = T.sweep([T.Method("softmax_naive", False, counted)], [16, 256], device="cpu", max_call_s=0.25,
                   measure_memory=False, **SMALL)
    assert recs[1].skipped.startswith("predicted") and recs[1].predicted_s >= 0.5
    assert 256 not in calls


def test_sweep_budget_ends_the_sweep(clock):
    methods = [T.Method("linear", False, _taking(clock, 0.01)), T.Method("sdpa", False, _taking(clock, 1e-4))]
    recs = T.sweep(methods, [16, 32, 64], device="cpu", budget_s=0.005, **SMALL)
    assert recs[0].measured  # the budget is checked before each measurement, so one always runs
    assert all(r.skipped.startswith("sweep time budget of 0.005 s used up") for r in recs[1:])


def test_records_carry_metadata_and_serialise():
    recs = T.sweep([T.Method("linear", False, _identity)], [16], device="cpu", **SMALL)
    r = recs[0]
    for key in ("device", "device_name", "torch", "numpy", "python", "platform", "threads", "dtype"):
        assert r.meta[key] not in (None, ""), key
    assert r.meta["dtype"] == r.dtype == "float32" and r.meta["threads"] == torch.get_num_threads()
    assert r.flops == T.flops("linear", 16, 8, 8, batch_heads=2)
    assert_close(r.gflops, r.flops / r.median_s / 1e9, dtype="float64")
    assert r.q25_s <= r.median_s <= r.q75_s
    d = json.loads(json.dumps(r.to_dict()))
    assert d["meta"]["torch"] == torch.__version__ and "meta" not in r.to_dict(meta=False)
    assert "linear" in T.format_table(recs)


def test_sweep_rejects_bad_input():
    m = [T.Method("linear", False, _identity)]
    with pytest.raises(ValueError, match=r"lengths\[0\] must be a positive integer, got 0"):
        T.sweep(m, [0, 8], device="cpu", progress=False)
    with pytest.raises(ValueError, match="memory_fraction"):
        T.sweep(m, [8], device="cpu", memory_fraction=1.5, progress=False)
    with pytest.raises(ValueError, match="methods is empty"):
        T.sweep([], [8], device="cpu", progress=False)
    with pytest.raises(ValueError, match="dtype='int32'"):
        T.sweep(m, [8], device="cpu", dtype="int32", progress=False)


# --- the standard methods compute what their names say ---------------------------------------------
def test_standard_methods_selection():
    assert {m.name for m in T.standard_methods(causal=False)} == {"softmax_naive", "sdpa", "linear"}
    causal = T.standard_methods(causal=True)
    assert {m.name for m in causal} == {"softmax_naive", "sdpa", "recurrent", "cumsum", "chunked", "auto"}
    assert [m.label for m in T.standard_methods(["sdpa"])] == ["sdpa", "sdpa (causal)"]
    with pytest.raises(ValueError, match="flash"):
        T.standard_methods(["flash"])


def test_standard_methods_agree_with_the_library():
    from linattn_core import kernel_attention, softmax_attention

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 37, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    for m in T.standard_methods(chunk_size=16):
        if m.name in ("softmax_naive", "sdpa"):
            expected = softmax_attention(q, k, v, causal=m.causal)
        else:
            expected = kernel_attention(q, k, v, "elu+1", causal=m.causal)
        assert_close(m.fn(q, k, v), expected, what=m.label)


def test_figures_show_measured_methods_only():
    recs = _synthetic("linear", False, [64, 128], lambda n: 1e-4 * n)
    recs.append(T.Record("sdpa", False, 64, 64, 64, 1, "float32", "cpu", skipped="too big"))
    for r in recs[:2]:
        r.peak_bytes = 1024 * r.N
    fig = T.time_figure(recs)
    assert [tr.name for tr in fig.data] == ["linear"]
    assert list(fig.data[0].x) == [64, 128]
    assert_close(np.array(fig.data[0].y), 1e3 * 1e-4 * np.array([64.0, 128.0]))
    assert fig.layout.xaxis.type == "log" and "ms" in fig.layout.yaxis.title.text
    assert "linear" in fig.layout.meta["alt"] and "sdpa" not in fig.layout.meta["alt"]
    with_line = T.time_figure(recs, crossover=100.0)
    assert list(with_line.data[-1].x) == [100.0, 100.0] and "N ≈ 100" in with_line.data[-1].name
    mem = T.memory_figure(recs)
    assert_close(np.array(mem.data[0].y), np.array([64.0, 128.0]) / 1024)
    for fig in (with_line, mem):  # legends below the plot, where long method names fit at any width
        assert fig.layout.legend.orientation == "h" and fig.layout.legend.y < 0
        assert fig.layout.xaxis.tickformat == "~s" and fig.layout.yaxis.tickformat == "~g"


def test_threads_option_is_applied_and_restored():
    before = torch.get_num_threads()
    seen = []

    def record_threads(q, k, v):
        seen.append(torch.get_num_threads())
        return v

    recs = T.sweep([T.Method("linear", False, record_threads)], [16], device="cpu", threads=1, **SMALL)
    assert set(seen) == {1} and recs[0].meta["threads"] == 1
    assert torch.get_num_threads() == before


def test_sweep_inputs_are_seeded_4d_heads():
    shapes, firsts = [], []

    def record_inputs(q, k, v):
        shapes.append((tuple(q.shape), tuple(v.shape), q.dtype))
        firsts.append(float(q.flatten()[0]))
        return v

    for _ in range(2):
        T.sweep([T.Method("linear", False, record_inputs)], [16], device="cpu", **dict(SMALL, d_v=4))
    assert set(shapes) == {((1, 2, 16, 8), (1, 2, 16, 4), torch.float32)}  # (batch, heads, N, d)
    assert len(set(firsts)) == 1  # same seed, same inputs


def test_time_call_stops_after_a_slow_first_call():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.03)

    t = T.time_call(slow, device="cpu", max_first_s=0.01)
    assert len(calls) == 1 and t.repeats == 1 and t.median_s == t.first_call_s >= 0.03
