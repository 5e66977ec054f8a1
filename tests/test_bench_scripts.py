"""bench/scripts.py runs end to end on a real Redis: both script pairs drain their queue."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "scripts.py"


def test_the_script_cost_benchmark_drains_with_both_pairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The benchmarks' shared harness, as a script run from bench/ finds it (appended: shadows nothing).
    monkeypatch.setattr(sys, "path", [*sys.path, str(BENCH.parent)])
    spec = importlib.util.spec_from_file_location("bench_scripts", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_scripts"] = module
    try:
        spec.loader.exec_module(module)
        output = tmp_path / "scripts.json"
        small = ["--repeat", "1", "--messages", "300", "--calls", "20", "--memory-n", "5000"]
        assert module.main([*small, "--output", str(output)]) == 0
    finally:
        sys.modules.pop("bench_scripts", None)
    result = json.loads(output.read_text())
    (one,) = result["rounds"]
    variants = ("smq", "smq, queue in layout 1", "minimal", "minimal + smq's necessary reads")
    for variant in (*variants, "minimal, layout 2", "minimal, state in the member"):
        # drain() raises when a message is left or a script fails; here the figures are sane.
        assert 0 < one[variant]["inside"] < one[variant]["evalsha"]
        assert 0 < one[variant]["send_inside"] < one[variant]["send"]
    assert set(one["prices"]) >= {"nothing", "10 HMGET of 10 fields", "nothing, after receive's helpers"}
    memory = result["memory"]
    # Layout 2 stores a visible message in less than layout 1, and no layout an in-flight one in less
    # than the floor.
    assert 0 < memory["layout 2, visible"] < memory["layout 1, visible"]
    assert memory["layout 1, in flight"] > memory["layout 2, in flight"] > memory["floor, in flight"] > 0
