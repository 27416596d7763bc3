"""linear_attention never allocates anything N x N: measured peak memory at N = 200_000.

At N = 200_000 an N x N float32 matrix is 160 GB, so a quadratic intermediate could not even be
allocated; the measured peak must stay within a small multiple of the inputs and output, and it
must grow linearly with N (quadrupling N may not multiply it by anything near 16).
numpy allocations are traced with ``tracemalloc``; torch's CPU allocations (invisible to it) by the
process's peak resident set size, reset through ``/proc/self/clear_refs``; CUDA by the allocator.
"""

from __future__ import annotations

import sys
import tracemalloc

import numpy as np
import pytest

from linattn_core import linear_attention

N, D = 200_000, 16
# allowed peak, in multiples of the bytes of q, k, v and the output together
PEAK_FACTOR = 50
MODES = {"causal-auto": {"causal": True, "method": "auto"}, "full": {}}


def inputs(n, backend="numpy", device="cpu"):
    q, k, v = np.random.default_rng(0).standard_normal((3, n, D), dtype=np.float32)
    if backend == "torch":
        import torch

        q, k, v = (torch.from_numpy(x).to(device) for x in (q, k, v))
    return q, k, v


def io_bytes(n):
    return 4 * n * D * 4  # q, k, v and out, float32


def numpy_peak(n, kw):
    q, k, v = inputs(n)
    tracemalloc.start()
    try:
        out = linear_attention(q, k, v, **kw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.shape == (n, D) and out.dtype == np.float32 and np.isfinite(out).all()
    return peak


def _vm_hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _vm_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def torch_cpu_peak(n, kw):
    q, k, v = inputs(n, "torch")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak RSS (VmHWM) to the current RSS
    except OSError as e:  # pragma: no cover - only on kernels without clear_refs
        pytest.skip(f"cannot reset the peak RSS here: {e}")
    before = _vm_rss()
    out = linear_attention(q, k, v, **kw)
    peak = _vm_hwm() - before
    assert tuple(out.shape) == (n, D) and bool(out.isfinite().all())
    return peak


@pytest.mark.parametrize("mode", list(MODES))
def test_numpy_peak_memory_is_linear_in_n(mode):
    kw = MODES[mode]
    peak = numpy_peak(N, kw)
    assert peak < PEAK_FACTOR * io_bytes(N), (
        f"peak {peak / 1e6:.0f} MB >= {PEAK_FACTOR} x the {io_bytes(N) / 1e6:.0f} MB of q, k, v, out"
    )
    quarter = numpy_peak(N // 4, kw)
    assert peak < 6 * quarter, f"peak grew {peak / quarter:.1f}x for 4x the tokens (linear: 4x)"


@pytest.mark.parametrize("method", ["recurrent", "cumsum", "chunked"])
def test_numpy_every_causal_method_stays_far_below_n_squared(method):
    # a shorter sequence, so the step loop of "recurrent" stays quick; N^2 float32 would be 1.6 GB
    n = 20_000
    peak = numpy_peak(n, {"causal": True, "method": method})
    assert peak < PEAK_FACTOR * io_bytes(n), f"{method}: peak {peak / 1e6:.0f} MB"
    assert peak < n * n * 4 / 10, f"{method}: peak {peak / 1e6:.0f} MB, a tenth of an N x N matrix"


@pytest.mark.parametrize("mode", list(MODES))
def test_torch_cpu_peak_memory_is_far_below_n_squared(mode):
    pytest.importorskip("torch")
    peak = torch_cpu_peak(N, MODES[mode])
    assert peak < PEAK_FACTOR * io_bytes(N), (
        f"peak RSS grew {peak / 1e6:.0f} MB >= {PEAK_FACTOR} x the {io_bytes(N) / 1e6:.0f} MB of q, k, v, out"
    )


@pytest.mark.parametrize("mode", list(MODES))
def test_torch_cuda_peak_memory_is_far_below_n_squared(mode):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    q, k, v = inputs(N, "torch", "cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    linear_attention(q, k, v, **MODES[mode])
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    assert peak < PEAK_FACTOR * io_bytes(N)


# --- large results: kept blocks, reused once free, on huge pages (linattn_core._memory) ---------------
def _thp_mode() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return "unavailable"


def _anon_huge_bytes(address: int) -> int:
    """AnonHugePages of the mapping that holds ``address``, from /proc/self/smaps."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1]) * 1024
    return 0


@pytest.fixture
def memory():
    pytest.importorskip("torch")
    from linattn_core import _memory

    _memory.release()
    yield _memory
    _memory.release()


def big(memory, dtype="float32"):
    """A shape just over the threshold, and a tensor of the dtype to copy."""
    import torch

    like = torch.empty(0, dtype=getattr(torch, dtype))
    return (3, memory._FRESH_BYTES // like.element_size() // 3 // 64 + 1, 64), like


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_large_results_start_on_a_huge_page_and_hold_any_value(memory, dtype):
    shape, like = big(memory, dtype)
    out = memory.empty(shape, like)
    assert tuple(out.shape) == shape and out.dtype == like.dtype and out.is_contiguous()
    assert out.data_ptr() % memory._HUGE_PAGE == 0
    out.fill_(2)
    assert bool((out == 2).all())
    small = memory.empty((4, 5), like)  # below the threshold: an ordinary tensor
    assert small.storage_offset() == 0 and small.untyped_storage().nbytes() == 20 * like.element_size()


def test_a_result_in_use_is_never_handed_out_again(memory):
    # with two kept blocks, both in use, every new result must get a block of its own; a dropped one is
    # reused, but never the block of a result that something still holds
    shape, like = big(memory)
    first = memory.empty(shape, like)
    first.fill_(1)
    keepers = {
        "the tensor": lambda t: t,
        "a view": lambda t: t[1:, ::2],
        "its storage": lambda t: t.untyped_storage(),
        "its .data": lambda t: t.data,
        "a numpy array": lambda t: t.numpy(),
    }
    for what, keep in keepers.items():
        result = memory.empty(shape, like)
        result.fill_(2)
        lo, hi = result.data_ptr(), result.data_ptr() + result.numel() * result.element_size()
        held = keep(result)
        del result
        for _ in range(3):
            other = memory.empty(shape, like)
            assert not lo <= other.data_ptr() < hi, f"handed out again while {what} was held"
            other.fill_(7)
            del other
        assert bool((torch_view(held) == 2).all()), f"overwritten while {what} was held"
        del held
    assert bool((first == 1).all()), "a live result was overwritten"


def torch_view(held):
    import torch

    if isinstance(held, torch.UntypedStorage):
        return torch.empty(0).set_(held)
    return torch.as_tensor(held)


def test_a_dropped_result_is_reused_and_the_kept_blocks_are_bounded(memory):
    shape, like = big(memory)
    ptr = memory.empty(shape, like).data_ptr()  # dropped at once
    assert memory.empty(shape, like).data_ptr() == ptr
    alive = [memory.empty(shape, like) for _ in range(5)]
    assert len({t.data_ptr() for t in alive}) == 5
    assert len(memory._blocks) == memory._KEEP
    for i, t in enumerate(alive):
        t.fill_(i)
    assert all(bool((t == i).all()) for i, t in enumerate(alive))
    # a free block three times larger than needed is not taken: it would hold memory for nothing
    large = memory.empty((3 * memory._FRESH_BYTES // 4,), like)
    ptr = large.data_ptr()
    del large, alive
    assert memory.empty((memory._FRESH_BYTES // 4,), like).data_ptr() != ptr


def test_large_results_are_backed_by_huge_pages_where_the_kernel_allows(memory):
    if _thp_mode() not in ("always", "madvise"):
        pytest.skip(f"transparent huge pages here: {_thp_mode()}")
    out = memory.empty(*big(memory))
    out.fill_(1)  # the first touch maps the pages
    assert _anon_huge_bytes(out.data_ptr()) >= memory._HUGE_PAGE


def test_blocks_are_not_reused_where_maps_cannot_be_resized(memory, monkeypatch):
    monkeypatch.setattr(memory, "_is_free", lambda block: False)
    shape, like = big(memory)
    ptrs = [memory.empty(shape, like).data_ptr() for _ in range(2)]
    assert len(memory._blocks) <= memory._KEEP and ptrs[0] != ptrs[1]


def test_threads_never_share_a_result(memory):
    from concurrent.futures import ThreadPoolExecutor

    shape, like = big(memory)

    def work(i):
        out = memory.empty(shape, like)
        out.fill_(i)
        return out

    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(work, range(8)))
    assert len({t.data_ptr() for t in outs}) == 8
    assert all(bool((t == i).all()) for i, t in enumerate(outs))


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
def test_fast_path_results_in_kept_blocks_equal_the_reference(memory, causal):
    # outputs over the 32 MiB threshold (64 x 2048 x 64 float32): the second call reuses no block
    # while the first result is alive, and both equal the float64 reference
    import torch
    from _tolerances import assert_close

    rng = np.random.default_rng(7)
    results = []
    for seed in (7, 8):
        rng = np.random.default_rng(seed)
        q, k = rng.standard_normal((2, 64, 2048, 8)) * 0.5
        v = rng.standard_normal((64, 2048, 64))
        tq, tk, tv = (torch.from_numpy(x.astype(np.float32)) for x in (q, k, v))
        assert tv.numel() * 4 >= memory._FRESH_BYTES
        with torch.no_grad():
            out = linear_attention(tq, tk, tv, causal=causal, method="chunked")
        expected = linear_attention(*(x.numpy().astype(np.float64) for x in (tq, tk, tv)), causal=causal,
                                    method="chunked")
        results.append((out, expected))
    assert results[0][0].data_ptr() != results[1][0].data_ptr()
    for out, expected in results:
        assert_close(out, expected, what=f"fast path, 32 MiB output, causal={causal}")


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_writes_its_own_copy_of_a_result(memory):
    # private memory, like malloc's: a child (a DataLoader worker, say) cannot change the parent's result
    import os

    out = memory.empty(*big(memory))
    out.fill_(1)
    pid = os.fork()
    if pid == 0:  # the child: numpy only (OpenMP is not safe after fork), then leave at once
        out.numpy()[:] = 5
        os._exit(0)
    os.waitpid(pid, 0)
    assert bool((out == 1).all())


# --- the fast paths' block buffers: one kept workspace per thread (linattn_core._memory.scratch) ----
def test_scratch_buffers_are_consecutive_and_kept_between_calls(memory):
    import torch

    like = torch.empty(0)
    bufs = memory.scratch(like, S=(3, 4), z=(5,), A=(2, 2, 2))
    assert {k: tuple(v.shape) for k, v in bufs.items()} == {"S": (3, 4), "z": (5,), "A": (2, 2, 2)}
    assert bufs["z"].data_ptr() == bufs["S"].data_ptr() + 12 * 4
    assert bufs["A"].data_ptr() == bufs["z"].data_ptr() + 5 * 4
    again = memory.scratch(like, S=(3, 4))
    assert again["S"].data_ptr() == bufs["S"].data_ptr()  # the same workspace, no new memory
    grown = memory.scratch(like, big=(1000,))
    assert grown["big"].numel() == 1000
    assert memory.scratch(like, x=(1000,))["x"].data_ptr() == grown["big"].data_ptr()
    assert memory.scratch(torch.empty(0, dtype=torch.float64), S=(3, 4))["S"].dtype == torch.float64


def test_scratch_is_per_thread_and_released(memory):
    import threading

    import torch

    like = torch.empty(0)
    mine = memory.scratch(like, S=(64,))["S"].data_ptr()
    theirs = []
    t = threading.Thread(target=lambda: theirs.append(memory.scratch(like, S=(64,))["S"].data_ptr()))
    t.start()
    t.join()
    assert theirs[0] != mine
    keep = memory.scratch(like, S=(64,))["S"]  # still held: released memory must not be handed out
    memory.release()
    assert memory.scratch(like, S=(64,))["S"].data_ptr() != keep.data_ptr()


def test_scratch_does_not_keep_a_huge_workspace(memory):
    import torch

    like = torch.empty(0)
    small = memory.scratch(like, w=(16,))["w"].data_ptr()
    huge = memory.scratch(like, w=(memory._SCRATCH_MAX_BYTES // 4 + 1,))["w"]
    assert huge.data_ptr() != small
    del huge
    assert memory.scratch(like, w=(16,))["w"].data_ptr() == small  # the kept workspace is still the small one


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the fault counter of getrusage")
@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
def test_repeated_fast_path_calls_fault_in_no_fresh_memory(memory, causal):
    # the buffers and the 32 MiB result are kept from the first call: the next calls touch no new page
    import resource

    import torch

    q, k, v = (torch.randn(1, 8, 16384, 64) for _ in range(3))
    for _ in range(2):  # warm-up; then the measured calls
        linear_attention(q, k, v, causal=causal, method="chunked")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):
        linear_attention(q, k, v, causal=causal, method="chunked")
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 3
    # kept memory: none measured here; fresh buffers alone cost 245 (non-causal) and 512 (causal) per
    # call, and a fresh 32 MiB result 8,192
    assert faults < 50, f"{faults:.0f} page faults per call"
