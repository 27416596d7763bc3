"""The whole model against context (python -m linattn_core.tools.bench.models): the quick run end to end,
the crossover rule, and the stored full run, which must replay its own configuration.

Speeds are printed by the benchmark and drawn by the timing chapter, never asserted here: what is
tested is that the rows, the tokens/s and the crossovers are computed from what was measured, and that
the stored file says how to measure it again.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict

import pytest
from _tolerances import assert_close

from linattn_core.tools import timing as T
from linattn_core.tools.bench import models

ROW_KEYS = {"kind", "context", "batch", "median_s", "q25_s", "q75_s", "repeats", "tokens_per_s", "skipped"}


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "quick.json"
    assert models.main(["--quick", "--kinds", "elu+1", "gla", "--json", str(path)]) == 0
    return json.loads(path.read_text())


def _check_rows(result, cfg):
    kinds = ["softmax", *(k for k in cfg.kinds if k != "softmax")] if cfg.kinds else None
    for what in ("training", "generation"):
        rows = result[what]
        if kinds is not None:
            assert {(r["kind"], r["context"]) for r in rows} == {(k, n) for k in kinds for n in cfg.contexts}
        for r in rows:
            assert ROW_KEYS <= set(r), r
            if r["skipped"]:
                continue
            assert 0 < r["q25_s"] <= r["median_s"] <= r["q75_s"]
            batch = cfg.batch(r["context"]) if what == "training" else cfg.gen_batch
            assert r["batch"] == batch
            tokens = batch * r["context"] if what == "training" else batch
            assert_close(r["tokens_per_s"] * r["median_s"], float(tokens), dtype="float64")
        assert result["crossovers"][what] == models.crossovers(rows)
    assert result["crossovers"]["training"].keys() == result["crossovers"]["generation"].keys()
    assert "softmax" not in result["crossovers"]["training"]


def test_quick_run_writes_rows_crossovers_and_provenance(quick):
    cfg = models.ModelSweepConfig(**{k: tuple(v) if isinstance(v, list) else v
                                     for k, v in quick["config"].items()})
    assert cfg == models.config_from_args(["--quick", "--kinds", "elu+1", "gla"])[0]
    _check_rows(quick, cfg)
    assert quick["command"].startswith("python -m linattn_core.tools.bench.models --quick --kinds elu+1 gla")
    assert quick["device"] == quick["hardware"]["device_description"]
    assert quick["device"].startswith(quick["hardware"]["device"])  # e.g. "cpu: ..." or "cuda:0: ..."
    assert set(quick["checks"]) == {"softmax", "elu+1", "gla"} and max(quick["checks"].values()) < 1e-10
    for r in quick["generation"]:
        assert r["memory_bytes"] > 0
    soft = [r["memory_bytes"] for r in quick["generation"] if r["kind"] == "softmax"]
    assert soft == sorted(soft) and soft[0] < soft[-1]  # the KV cache grows with the context
    gla = {r["memory_bytes"] for r in quick["generation"] if r["kind"] == "gla"}
    assert len(gla) == 1  # a fixed-size state
    fig = T.throughput_figure(quick, "generation")
    assert [tr.name for tr in fig.data] == ["softmax", "elu+1", "gla"]
    assert quick["device"] in fig.layout.title.text and fig.layout.meta["alt"]


def test_crossover_is_read_from_tokens_per_second():
    def rows(kind, rates):
        return [{"kind": kind, "context": n, "tokens_per_s": r, "skipped": None} for n, r in rates.items()]

    soft = {128: 100.0, 1024: 50.0, 8192: 10.0}
    data = rows("softmax", soft) + rows("fast", {128: 200.0, 1024: 300.0, 8192: 300.0})
    data += rows("late", {128: 50.0, 1024: 40.0, 8192: 40.0})
    data += rows("never", {128: 1.0, 1024: 1.0, 8192: 1.0})
    cross = models.crossovers(data)
    assert cross["fast"] == 128.0 and cross["never"] is None
    assert 1024 < cross["late"] < 8192  # interpolated in log context between the last loss and the win
    assert cross["late"] == T.crossing({n: 1 / r for n, r in soft.items()}, {128: 1 / 50, 1024: 1 / 40,
                                                                             8192: 1 / 40})


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="gen_steps"):
        models.run(models.ModelSweepConfig(contexts=(4,), gen_steps=8), device="cpu", say=None)
    with pytest.raises(SystemExit):
        models.config_from_args(["--contexts", "1"])
    with pytest.raises(SystemExit):
        models.config_from_args(["--kinds", "transformer"])


def test_the_stored_run_replays_its_configuration():
    result = models.stored("models-cpu")
    argv = shlex.split(result["command"])
    assert argv[:3] == ["python", "-m", "linattn_core.tools.bench.models"]
    cfg, device = models.config_from_args(argv[3:])
    assert json.loads(json.dumps(asdict(cfg))) == result["config"]  # the command gives the stored config
    assert device in (None, result["hardware"]["device"].split(":")[0], result["hardware"]["device"])
    assert result["device"] == result["hardware"]["device_description"] and result["git_commit"]
    assert min(cfg.contexts) == 128 and max(cfg.contexts) >= 8192
    kinds = set(models.table(result)) | {r["kind"] for r in result["training"] if r["skipped"]}
    from linattn_core.lm.layers import LAYERS

    assert kinds == set(LAYERS)
    _check_rows(result, cfg)  # the tokens/s and the crossovers recompute from the stored rows


def test_the_stored_run_is_package_data():
    from pathlib import Path

    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    assert '"linattn_core.tools.bench.results" = ["*.json"]' in pyproject
    with pytest.raises(ValueError, match="must be one of"):
        models.stored("nope")
