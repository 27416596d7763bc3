"""python -m linattn_core.bench: the quick run end to end (JSON schema), and the target bookkeeping.

The targets themselves are performance claims, reported by the benchmark and never tested; what is
tested is that they are computed from the right records and reported as PASS / FAIL / N/A.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict

import pytest
from _tolerances import assert_close

from linattn_core.tools import timing as T
from linattn_core.tools.bench import decode as bench_decode
from linattn_core.tools.bench import layers as bench_layers
from linattn_core.tools.bench import suite as bench

RECORD_KEYS = {"method", "causal", "N", "d", "d_v", "batch_heads", "median_s", "peak_bytes", "gflops",
               "skipped"}
META_KEYS = {"device", "device_name", "torch", "python", "platform", "threads", "dtype"}


@pytest.fixture(scope="module")
def quick_json(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "quick.json"
    assert bench.main(["--quick", "--device", "cpu", "--no-progress", "--json", str(path)]) == 0
    return json.loads(path.read_text())


def test_quick_run_writes_the_schema(quick_json, capsys):
    assert quick_json["matmul_gflops"] > 0
    # the yardstick is measured before and after the sweep, and the fractions use the higher rate
    before, after = quick_json["matmul_gflops_before"], quick_json["matmul_gflops_after"]
    assert before > 0 and after > 0 and quick_json["matmul_gflops"] == max(before, after)
    assert META_KEYS <= set(quick_json["meta"])
    assert quick_json["meta"]["dtype"] == "float32"
    results = quick_json["results"]
    config = bench.Config.quick()
    expected = {(m.name, m.causal, n) for m in T.standard_methods() for n in config.lengths}
    assert {(r["method"], r["causal"], r["N"]) for r in results} == expected
    for r in results:
        assert RECORD_KEYS <= set(r), r
        assert r["method"] in T.METHODS
        assert (r["d"], r["d_v"], r["batch_heads"]) == (config.d, config.d_v, config.batch_heads)
        if r["skipped"] is None:
            assert r["median_s"] > 0 and r["gflops"] > 0
            assert r["peak_bytes"] is None or r["peak_bytes"] >= 0
        else:
            assert isinstance(r["skipped"], str) and r["skipped"]
    assert {t["verdict"] for t in quick_json["targets"]} <= {"PASS", "FAIL", "N/A", "NOISY"}
    labels = {m.label for m in T.standard_methods()}
    assert set(quick_json["checks"]) == labels | {f"{label} float32" for label in labels}
    assert bench.check_failures(quick_json["checks"]) == {}
    assert quick_json["chunked_kernel"] == bench.chunked_kernel("cpu")


def test_quick_run_times_a_training_step_per_layer(quick_json):
    from linattn_core.lm.layers import LAYERS

    layers = quick_json["layers"]
    assert layers["config"] == asdict(bench_layers.SIZES["quick"]())
    assert [(r["kind"], r["threads"]) for r in layers["results"]] == [(k, 1) for k in LAYERS]
    for r in layers["results"]:
        assert 0 < r["min_s"] <= r["median_s"] <= r["max_s"] and r["parameters"] > 0
        assert_close(r["tokens_per_s"] * r["median_s"], 2 * 24)  # batch 2, context 24
    soft = layers["results"][0]["median_s"]
    ratios = [r["ratio_to_softmax"] for r in layers["results"]]
    assert ratios == [r["median_s"] / soft for r in layers["results"]]
    assert set(layers["checks"]) == set(LAYERS) and max(layers["checks"].values()) < 1e-10
    names = {t["name"] for t in quick_json["targets"]}
    assert {f"training step: {k} vs softmax, 1 thread" for k in LAYERS if k != "softmax"} <= names


def test_quick_run_sweeps_the_whole_model_against_context(quick_json):
    from linattn_core.lm.layers import LAYERS
    from linattn_core.tools.bench import models as bench_models

    sweep = quick_json["models"]
    assert sweep["config"] == json.loads(json.dumps(asdict(bench_models.SIZES["quick"]())))
    assert set(sweep["crossovers"]["training"]) == set(LAYERS) - {"softmax"}
    assert sweep["crossovers"]["training"] == bench_models.crossovers(sweep["training"])
    assert sweep["device"].startswith("cpu")  # labelled with the device it ran on


def test_parts_run_alone(capsys):
    bench.main(["--quick", "--device", "cpu", "--no-progress", "--parts", "forward"])
    out = capsys.readouterr().out
    assert "Non-causal against causal on the same inputs" in out
    assert "Training, forward + backward" not in out and "whole model against context" not in out
    with pytest.raises(SystemExit):
        bench.main(["--parts", "everything"])


def test_layer_targets_verdicts():
    results = [{"kind": "softmax", "threads": 1, "ratio_to_softmax": 1.0},
               {"kind": "gla", "threads": 1, "ratio_to_softmax": 2.5},
               {"kind": "deltanet", "threads": 4, "ratio_to_softmax": 1.5},
               {"kind": "retnet", "threads": 1, "ratio_to_softmax": None}]
    targets = bench_layers.layer_targets({"results": results})
    assert [(t.name, t.verdict) for t in targets] == [
        ("training step: gla vs softmax, 1 thread", "FAIL"),
        ("training step: deltanet vs softmax, 4 threads", "PASS"),
        ("training step: retnet vs softmax, 1 thread", "N/A")]


def test_check_methods_catches_a_wrong_method():
    wrong = T.Method("chunked", True, lambda q, k, v: v)  # returns the values: not attention
    errors = bench.check_methods([wrong, *T.standard_methods(["linear"])], "cpu")
    assert errors["chunked (causal)"] > 0.1 and errors["linear"] <= bench.CHECK_ATOL
    assert errors["chunked (causal) float32"] > 0.1 and errors["linear float32"] <= bench.CHECK_ATOL_FLOAT32
    assert set(bench.check_failures(errors)) == {"chunked (causal)", "chunked (causal) float32"}


def test_quick_run_prints_table_and_targets(tmp_path, capsys):
    bench.main(["--quick", "--device", "cpu", "--no-progress", "--max-n", "64"])
    out = capsys.readouterr().out
    assert "matmul rate" in out and "chunked (causal)" in out
    assert "Targets (reported, not tested):" in out
    assert "[N/A ] causal: auto vs SDPA at N=16384" in out  # not run at --max-n 64
    sweeps = out.split("Training step of the whole model")[0]  # the layers' table has no length column
    rows = re.findall(r"^(\w+)(?: \(causal\))?\s+(\d+)\s", sweeps, flags=re.MULTILINE)
    assert rows and {int(n) for _, n in rows} == {64}


def test_bad_arguments_are_reported(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--max-n", "0"])
    with pytest.raises(SystemExit):
        bench.main(["--quick", "--max-n", "8"])
    assert "shorter than every length" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--device", "tpu"])
    assert "not a device name" in capsys.readouterr().err


def _rec(method, causal, N, seconds=None, skipped=None, gflops=None, peak=None, predicted_s=None):
    return T.Record(method, causal, N, 64, 64, 8, "float32", "cpu", chunk_size=64, median_s=seconds,
                    q25_s=seconds, q75_s=seconds, repeats=3 if seconds else 0, gflops=gflops, peak_bytes=peak,
                    skipped=skipped, predicted_s=predicted_s)


def _by_name(targets):
    return {t.name: t for t in targets}


def test_targets_from_records():
    N = 16384
    io = 8 * 65536 * 4 * 64 * 4  # bytes of q, k, v and the output at N=65536
    inputs = 8 * 65536 * 3 * 64 * 4
    recs = [
        _rec("sdpa", True, N, 2.0), _rec("auto", True, N, 0.1),  # 20x: pass
        _rec("sdpa", False, N, 1.0), _rec("linear", False, N, 0.1),  # 10x: fail (>= 30x wanted)
        _rec("chunked", True, 4096, 0.01, gflops=45.0),  # 45% of 100: pass
        _rec("chunked", True, N, 0.1, gflops=30.0),  # 30%: fail
        _rec("recurrent", True, N, 5.0), _rec("cumsum", True, N, skipped="needs about 9 GiB"),
        _rec("auto", True, 65536, 0.5, peak=8 * io - inputs),  # exactly 8x with the inputs: pass
        _rec("sdpa", True, 65536, skipped="predicted 30 s per call", predicted_s=30.0),
    ]
    t = _by_name(bench.evaluate_targets(recs, 100.0, lengths=[4096, N, 65536]))
    assert t["causal: auto vs SDPA at N=16384"].verdict == "PASS"
    assert_close(t["causal: auto vs SDPA at N=16384"].value, 20.0, dtype="float64")
    predicted = t["causal: auto vs SDPA at N=65536"]  # from the extrapolated SDPA time, and says so
    assert_close(predicted.value, 60.0, dtype="float64")
    assert "not measured: 30 s per call extrapolated" in predicted.note
    assert t["non-causal: linear vs SDPA at N=16384"].verdict == "FAIL"
    assert t["chunked GFLOP/s / matmul GFLOP/s at N=4096"].verdict == "PASS"
    assert t["chunked GFLOP/s / matmul GFLOP/s at N=16384"].verdict == "FAIL"
    assert t["chunked GFLOP/s / matmul GFLOP/s at N=65536"].verdict == "N/A"
    within = t[f"auto / fastest causal linear form at N={N}"]
    assert_close(within.value, 1.0, dtype="float64")
    assert within.verdict == "PASS" and within.note == "fastest: chunked"
    assert t["auto / fastest causal linear form at N=4096"].verdict == "N/A"
    memory = t["causal auto peak memory at N=65536 / bytes of q, k, v, out"]
    assert_close(memory.value, 8.0, dtype="float64")
    assert memory.verdict == "PASS"
    text = bench.format_targets(bench.evaluate_targets(recs, 100.0, lengths=[N]))
    assert "[PASS]" in text and "[FAIL]" in text and "[N/A ]" in text


def test_noncausal_targets_and_withheld_verdicts():
    # the non-causal form against the causal one from the same pass; a spread wider than the median
    # (IQR > median) withholds the verdict, the value still printed
    recs = [_rec("linear", False, 1024, 0.8), _rec("chunked", True, 1024, 1.0),
            _rec("linear", False, 4096, 1.2), _rec("chunked", True, 4096, 1.0),
            _rec("linear", False, 16384, 0.5, gflops=61.0), _rec("chunked", True, 16384, 1.0),
            _rec("linear", False, 256, 9.0), _rec("chunked", True, 256, 1.0)]
    t = _by_name(bench.noncausal_targets(recs, 100.0, [256, 1024, 4096, 16384]))
    assert "non-causal linear / causal chunked, same inputs, at N=256" not in t  # only from 1024 on
    assert t["non-causal linear / causal chunked, same inputs, at N=1024"].verdict == "PASS"
    assert t["non-causal linear / causal chunked, same inputs, at N=4096"].verdict == "FAIL"
    assert_close(t["non-causal linear / causal chunked, same inputs, at N=16384"].value, 0.5, dtype="float64")
    assert t["linear GFLOP/s / matmul GFLOP/s at N=16384"].verdict == "PASS"
    wide = _rec("linear", False, 4096, 1.2)
    wide.q25_s, wide.q75_s = 0.5, 2.0  # IQR 1.5 s > median 1.2 s
    t = _by_name(bench.noncausal_targets([wide, _rec("chunked", True, 4096, 1.0)], 100.0, [4096]))
    noisy = t["non-causal linear / causal chunked, same inputs, at N=4096"]
    assert noisy.verdict == "NOISY" and noisy.passed is None and noisy.value == 1.2
    assert "noisy: IQR > median, no verdict" in bench.format_targets([noisy])


def test_decode_targets_read_their_rows():
    def rows(cache_16k, state_1k, state_64k):
        return [{"method": "decode_kvcache", "batch": 1, "N": 16384, "median_s": cache_16k},
                {"method": "decode_state", "batch": 1, "N": 16384, "median_s": 1.0},
                {"method": "decode_state", "batch": 1, "N": 1024, "median_s": state_1k},
                {"method": "decode_state", "batch": 1, "N": 65536, "median_s": state_64k}]

    speed, flat = bench_decode.decode_targets(rows(10.0, 1.0, 1.5))
    assert (speed.value, speed.passed, flat.value, flat.passed) == (10.0, True, 1.5, True)
    speed, flat = bench_decode.decode_targets(rows(9.9, 2.0, 1.0))
    assert not speed.passed and flat.value == 2.0 and not flat.passed
    # every context from 1k to 64k counts, not only the two ends; the note gives the quartiles
    middle = {"method": "decode_state", "batch": 1, "N": 4096, "median_s": 1.6, "q25_s": 1.5, "q75_s": 2.5}
    _, flat = bench_decode.decode_targets([*rows(10.0, 1.0, 1.0), middle])
    assert_close(flat.value, 1.6, dtype="float64")
    assert not flat.passed
    assert "slowest N=4096: 1600000.0 µs, quartiles 1500000-2500000 µs" in flat.note
    assert "fastest N=" in flat.note
    speed, flat = bench_decode.decode_targets([])
    assert speed.passed is None and flat.passed is None


def test_decode_sweep_rows_and_memory():
    rows = bench_decode.decode_sweep((16, 32), batches=(1, 2), batch_heads=2, d=4, repeats=4)
    assert {(r["method"], r["batch"], r["N"]) for r in rows} == {
        (m, b, n) for m in bench_decode.DECODE_METHODS for b in (1, 2) for n in (16, 32)}
    for r in rows:
        assert 0 < r["q25_s"] <= r["median_s"] <= r["q75_s"] and r["repeats"] == 4
        if r["method"] == "decode_kvcache":   # every key and value of one sequence, float32
            assert r["bytes_per_sequence"] == r["N"] * 2 * 4 * 2 * 4
        else:                                  # S and z of one sequence: heads * d (d + 1) numbers
            assert r["bytes_per_sequence"] == 2 * 4 * (4 + 1) * 4
    table = bench_decode.format_decode(rows).splitlines()
    assert len(table) == 1 + 4 and "state / token" in table[0]  # a header, then batch x context


def test_default_budget_measures_the_training_targets_sdpa_step():
    # SDPA's training step at N = 16,384 takes about 7 s on a 2-core CPU: the default per-call
    # budget must let it be measured (the training target divides by it), not extrapolated
    assert bench.Config().max_call_s == 12.0 and 16384 in bench.Config().lengths
