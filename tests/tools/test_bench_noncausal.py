"""The non-causal kernel's pass of the benchmark (``tools.bench.noncausal``): what it times, how its
fractions of the matmul's rate are taken round by round, and its targets' verdicts. Speeds are never
asserted: a tiny pass checks the plumbing, and the targets are read from timings built here."""

from __future__ import annotations

import os

import pytest
from _tolerances import assert_close

from linattn_core.fast import kernel
from linattn_core.tools.bench import noncausal as bench_noncausal
from linattn_core.tools.bench import suite as bench
from linattn_core.tools.timing import Timing

pytest.importorskip("torch")

needs_kernel = pytest.mark.skipif(not kernel.available(), reason="no compiled kernel in use here")


def test_the_matmul_has_the_same_flops_where_a_cube_allows():
    # 8 sequences, d = d_v = 64, N = 16384: 4 N d d_v * 8 = 2 * 1024^3 exactly
    assert bench_noncausal.matmul_side(4 * 16384 * 64 * 64 * 8) == 1024
    assert bench_noncausal.matmul_side(2 * 645.1**3) == 645
    assert bench_noncausal.matmul_side(1.0) == 1


@needs_kernel
def test_a_tiny_pass_times_every_call_interleaved():
    p = bench_noncausal.measure(64, batch_heads=2, d=16, d_v=8, threads=1, repeats=3, max_run_time=0.5)
    assert set(p.timings) == set(bench_noncausal.CALLS) and p.threads == 1
    assert all(t.repeats >= 3 and t.q25_s <= t.median_s <= t.q75_s for t in p.timings.values())
    assert p.flops == 4 * 64 * 16 * 8 * 2 and p.matmul_n == bench_noncausal.matmul_side(p.flops)
    for name in ("kernel", "linear_attention", "causal"):
        q25, median, q75 = p.fractions[name]
        assert 0 < q25 <= median <= q75
    text = bench_noncausal.format_passes([p])
    assert all(name in text for name in bench_noncausal.CALLS)
    assert p.to_dict()["calls"]["kernel"]["of_matmul"] == p.fractions["kernel"]


def _timing(median, times=(), iqr=0.1):
    return Timing(median, median - iqr / 2, median + iqr / 2, max(3, len(times)), 1, median, tuple(times))


def _pass(N, kernel_s, causal_s, matmul_s, *, kernel_times=(), matmul_times=(), kernel_iqr=0.1):
    """A pass at N (8 sequences, d = d_v = 64) from medians, with the rounds of the kernel and the matmul."""
    t = {"kernel": _timing(kernel_s, kernel_times, kernel_iqr), "linear_attention": _timing(kernel_s),
         "causal": _timing(causal_s), "matmul": _timing(matmul_s, matmul_times)}
    flops = 4.0 * N * 64 * 64 * 8
    n = bench_noncausal.matmul_side(flops)
    fr = {k: bench_noncausal._fractions(t[k], t["matmul"], flops, 2.0 * n**3) if t[k].times
          else (0.5, 0.5, 0.5) for k in ("kernel", "linear_attention", "causal")}
    return bench_noncausal.Pass(N, 8, 64, 64, 2, t, flops, n, fr, 1.0)


def test_the_fraction_is_the_median_of_the_rounds():
    # round by round: matmul time / kernel time (same FLOPs at N = 16384): 0.5, 0.8, 1.0 -> median 0.8
    p = _pass(16384, 1.0, 2.0, 1.0, kernel_times=(2.0, 1.0, 1.0), matmul_times=(1.0, 0.8, 1.0))
    q25, median, q75 = p.fractions["kernel"]
    assert_close(median, 0.8, dtype="float64")
    assert q25 <= median <= q75


def test_targets_pass_fail_and_withhold():
    fast = _pass(16384, 1.0, 2.0, 1.0, kernel_times=(1.0, 1.0, 1.0), matmul_times=(0.7, 0.7, 0.7))
    slow = _pass(4096, 1.0, 0.5, 1.0, kernel_times=(1.0, 1.0, 1.0), matmul_times=(0.5, 0.5, 0.5))
    t = {x.name: x for x in bench_noncausal.targets([fast, slow])}
    assert t["non-causal kernel / causal kernel, same pass, at N=4096"].verdict == "FAIL"
    assert t["non-causal kernel / causal kernel, same pass, at N=16384"].verdict == "PASS"
    frac = t["non-causal kernel GFLOP/s / matmul GFLOP/s, same pass, at N=16384"]
    assert frac.verdict == "PASS" and abs(frac.value - 0.7) < 1e-12
    missing = bench_noncausal.targets([slow])[-1]
    assert missing.verdict == "N/A"
    wide = _pass(16384, 1.0, 2.0, 1.0, kernel_times=(1.0, 1.0, 1.0), matmul_times=(0.5, 0.5, 0.5),
                 kernel_iqr=1.3)  # IQR 1.3 s > median 1 s
    noisy = bench_noncausal.targets([wide])[-1]
    assert noisy.verdict == "NOISY" and noisy.value == 0.5


def test_the_suite_takes_the_fraction_from_the_same_pass():
    p = _pass(16384, 1.0, 2.0, 1.0, kernel_times=(1.0, 1.0, 1.0), matmul_times=(0.65, 0.65, 0.65))
    t = bench.noncausal_targets([], 100.0, [16384], same_pass=[p])
    assert t[-1].name == "non-causal kernel GFLOP/s / matmul GFLOP/s, same pass, at N=16384"
    assert t[-1].verdict == "PASS"



@needs_kernel
@pytest.mark.parametrize(("given", "used"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_the_pass_apart_runs_in_a_process_whose_idle_workers_sleep(monkeypatch, given, used):
    """measure_apart: the same pass, from a child process under OMP_WAIT_POLICY=PASSIVE (a policy the
    caller set is kept), every round's time carried back; this process's policy is left alone."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    if given is not None:
        monkeypatch.setenv("OMP_WAIT_POLICY", given)
    p = bench_noncausal.measure_apart(256, batch_heads=2, d=8, d_v=8, threads=1, repeats=3)
    assert p.omp_wait_policy == used and os.environ.get("OMP_WAIT_POLICY") == given
    assert set(p.timings) == set(bench_noncausal.CALLS) and (p.N, p.d, p.threads) == (256, 8, 1)
    assert all(len(t.times) >= 3 for t in p.timings.values())
    assert set(p.fractions) == {"kernel", "linear_attention", "causal"}
    assert p.to_dict()["omp_wait_policy"] == used


def test_a_pass_apart_that_fails_says_why():
    with pytest.raises(RuntimeError, match="N=256 failed in its process"):
        bench_noncausal.measure_apart(256, no_such_option=1)
