"""The benchmark harness (tkir/tools/bench.py) as the CLI drives it, without a GPU: `tkc run FILE` (no
--interpret) parses its flags in tkir/cli.py and hands `run_check` plain values; the GPU part
(`bench_one`) is replaced by a recorder that returns a made-up row.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from limits import HANG_S  # tests/ is on sys.path under pytest

from tkir.cli import main
from tkir.tools import bench, timing

ROOT = Path(__file__).resolve().parents[2]
GEMM = str(ROOT / "examples" / "gemm.tk")


def _row(ok: bool) -> bench.Row:
    return bench.Row("gemm", {}, {}, "tkir", 1e-3 if ok else 1.0, 1e-2, ok, 0.5, None, "torch", 1, 1)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    seen: list[dict] = []

    def fake_bench_one(path: str, companion: object, sizes: dict, consts: dict, **kw: object) -> bench.Row:
        seen.append(dict(path=path, sizes=sizes, consts=consts, **kw))
        return _row(consts.get("OK", 1) == 1)  # -D OK=0: a result past its bound

    monkeypatch.setattr(bench, "bench_one", fake_bench_one)
    return seen


def test_run_check_takes_parsed_values(calls: list[dict], capsys: pytest.CaptureFixture[str]) -> None:
    row = bench.run_check(GEMM, {"M": 128, "N": 256, "K": 64}, {"BM": 64}, compile_kw={"target": "sm_80"})
    assert row.ok
    (call,) = calls
    assert call["sizes"] == {"M": 128, "N": 256, "K": 64} and call["consts"] == {"BM": 64}
    assert call["compile_kw"] == {"target": "sm_80"}
    assert (call["reps"], call["warmup"], call["peer"]) == (3, 1, False)
    assert capsys.readouterr().out == "gemm.tk [M=128 N=256 K=64] on GPU: rel_err 1.000e-03 (bound 1e-02) ok; 0.500 ms\n"


def test_run_check_defaults_to_the_first_check_size(calls: list[dict], capsys: pytest.CaptureFixture[str]) -> None:
    bench.run_check(GEMM, {}, {}, compile_kw={})
    assert calls[0]["sizes"] == {"M": 256, "N": 512, "K": 192}  # examples/gemm.py CHECK_SIZES[0]
    assert capsys.readouterr().out.startswith("gemm.tk [M=256 N=512 K=192] on GPU:")


@pytest.mark.parametrize(("ok", "check", "rc"), [(True, True, 0), (False, True, 1), (False, False, 0)])
def test_tkc_run_on_the_gpu_passes_parsed_flags(calls: list[dict], capsys: pytest.CaptureFixture[str],
                                                ok: bool, check: bool, rc: int) -> None:
    argv = ["run", GEMM, "--size", "M=128", "--size", "N=256", "--size", "K=64", "-D", f"OK={int(ok)}",
            "--no-tma", "--passes", "create-tma{epilogue_chunk=128},persistent{group_m=4}", "--target", "sm_80"]
    assert main(argv + (["--check"] if check else [])) == rc
    (call,) = calls
    assert call["path"] == GEMM and call["sizes"] == {"M": 128, "N": 256, "K": 64} and call["consts"] == {"OK": int(ok)}
    kw = dict(call["compile_kw"])
    assert [str(s) for s in kw.pop("passes")] == ["create-tma{epilogue_chunk=128}", "persistent{group_m=4}"]
    assert kw == dict(target="sm_80", swizzle=None, no_tma=True, load_passes=[], pass_edits=None)
    assert capsys.readouterr().out.endswith(("ok; 0.500 ms\n", "FAIL; 0.500 ms\n")[not ok])


def test_tkc_run_bad_size_is_a_usage_error(calls: list[dict], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", GEMM, "--size", "M"]) == 1
    assert capsys.readouterr().err == "tkc run: error: --size expects NAME=VALUE, got 'M'\n"
    assert calls == []


def test_run_check_needs_neither_the_cli_nor_torch() -> None:
    """tkir.tools.bench is a driver beside the CLI, not part of it: run_check (its GPU part replaced) loads no
    tkir.cli; torch is imported only by the GPU part."""
    code = (f"import sys, tkir.tools.bench as b; b.bench_one = lambda *a, **k: b.Row('g', {{}}, {{}}, 't', 0.0, 1.0, "
            f"True, 1.0, None, 'p', 1, 1); b.run_check({GEMM!r}, {{}}, {{}}, compile_kw={{}}); "
            "assert 'tkir.cli' not in sys.modules, 'tkir.cli'; assert 'torch' not in sys.modules, 'torch'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr


class _FakeCudaTorch:
    """Just enough of torch for tkir.tools.timing.time_pair_ms and host_us_per_call: records the order in which
    the GPU work would be enqueued."""

    def __init__(self) -> None:
        self.log: list[str] = []
        outer = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.name = ""

            def record(self) -> None:
                outer.log.append("event")

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, other: object) -> float:
                return 1.0

        class Buffer:
            def zero_(self) -> None:
                outer.log.append("flush")

        class Cuda:
            @staticmethod
            def synchronize() -> None:
                pass

            @staticmethod
            def _sleep(cycles: int) -> None:
                outer.log.append(f"sleep {cycles}")

        self.cuda = Cuda()
        self.cuda.Event = Event
        self.buffer = Buffer()


def test_each_timed_run_waits_behind_flush_and_host_lead(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every timed run is flush, then the GPU-side lead (torch.cuda._sleep), then the start event, the
    kernel and the end event: the host enqueues the kernel while the GPU is still busy, so its launch
    path is not timed (without it a sweep measured Python launch time as kernel time)."""
    torch = _FakeCudaTorch()
    monkeypatch.setattr(timing, "_FLUSH", [torch.buffer])
    monkeypatch.setattr(timing, "WARMUP_S", 0.0)
    ran = lambda name: (lambda i: (lambda: torch.log.append(name)))  # noqa: E731
    ms = timing.time_pair_ms(torch, [ran("tkir"), ran("peer")], nsets=2, reps=3, warmup=1, rotate=False)
    assert ms == [1.0, 1.0]
    timed = torch.log[torch.log.index("event") - 2:]  # after the warm-up round
    lead = f"sleep {timing.HOST_LEAD_CYCLES}"
    assert timed == ["flush", lead, "event", "tkir", "event", "flush", lead, "event", "peer", "event"] * 3


def test_every_kernel_runs_equally_often_in_every_position(monkeypatch: pytest.MonkeyPatch) -> None:
    """The interleaved order rotates from rep to rep, and the reps round up to a multiple of the kernels:
    the kernels of a rep read the same input set, and on the H200 the second of two runs of one ~4 us
    kernel timed 10-15% faster than the first in a fixed order (docs/bench/README.md, "Method"), which
    had put tkir first against its peers in every comparison before."""
    torch = _FakeCudaTorch()
    monkeypatch.setattr(timing, "_FLUSH", [torch.buffer])
    monkeypatch.setattr(timing, "WARMUP_S", 0.0)
    ran = lambda name: (lambda i: (lambda: torch.log.append(name)))  # noqa: E731
    names = ["tkir", "eager", "compiled"]
    timing.time_pair_ms(torch, [ran(n) for n in names], nsets=2, reps=4, warmup=1)
    timed = [x for x in torch.log[torch.log.index("event"):] if x in names]
    assert len(timed) == 3 * 6  # 4 reps -> 6, a multiple of the 3 kernels
    for pos in range(3):
        firsts = [timed[r * 3 + pos] for r in range(6)]
        assert sorted(firsts) == sorted(names * 2)  # each kernel twice in each position


def test_a_large_group_rotates_without_rounding_the_reps_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tune space's group (more than ROTATE_FULL_MAX kernels): the reps stay as asked (rounding 20 up to
    the 132 kernels of layernorm's D = 768 space cost ~10 s a point), and the order still rotates, so no
    kernel is first in more than ceil(reps / K) of its reps."""
    torch = _FakeCudaTorch()
    monkeypatch.setattr(timing, "_FLUSH", [torch.buffer])
    monkeypatch.setattr(timing, "WARMUP_S", 0.0)
    k = timing.ROTATE_FULL_MAX + 3
    names = [f"k{j}" for j in range(k)]
    ran = lambda name: (lambda i: (lambda: torch.log.append(name)))  # noqa: E731
    timing.time_pair_ms(torch, [ran(n) for n in names], nsets=2, reps=4, warmup=1)
    timed = [x for x in torch.log[torch.log.index("event"):] if x in names]
    assert len(timed) == k * 4
    assert [timed[r * k] for r in range(4)] == names[:4]  # rep r starts with kernel r


def test_without_torch_sleep_the_lead_is_more_flushes(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.cuda._sleep is private: where it is missing, the lead is FALLBACK_LEAD_FLUSHES more
    zeroings of the flush buffer, still before the start event (not no lead at all)."""
    torch = _FakeCudaTorch()
    del type(torch.cuda)._sleep
    monkeypatch.setattr(timing, "_FLUSH", [torch.buffer])
    monkeypatch.setattr(timing, "WARMUP_S", 0.0)
    ms = timing.time_pair_ms(torch, [lambda i: (lambda: torch.log.append("k"))], nsets=1, reps=2, warmup=1)
    assert ms == [1.0]
    timed = torch.log[torch.log.index("event") - 1 - timing.FALLBACK_LEAD_FLUSHES:]
    assert timed == (["flush"] * (1 + timing.FALLBACK_LEAD_FLUSHES) + ["event", "k", "event"]) * 2


def test_host_time_per_call_is_measured_per_kernel() -> None:
    torch = _FakeCudaTorch()
    us = timing.host_us_per_call(torch, [lambda i: (lambda: torch.log.append("a")),
                                        lambda i: (lambda: torch.log.append("b"))], nsets=3, calls=4)
    assert len(us) == 2 and all(u >= 0 for u in us)
    assert torch.log == ["a"] * 4 + ["b"] * 4


ATTENTION = str(ROOT / "examples" / "attention_fwd.tk")


def test_bench_tune_chooses_the_named_consts_per_row_with_the_rest_pinned(
        calls: list[dict], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`tkc bench --tune PERSIST`: each row asks the tuner with every other const pinned (the row's `auto`
    tiles resolved by the compiler first, the space's other consts at their header values) and benches
    the point it returns; the choice and the tuner's timings are printed."""
    from tkir.tools import tune

    asked: list[dict] = []

    def fake_tune(path: str, sizes: dict, *, fixed: dict, **kw: object) -> tune.TuneResult:
        asked.append(dict(sizes=sizes, fixed=fixed, kw=kw))
        best = {**fixed, "PERSIST": 1 if sizes["N"] < 1024 else 0}
        cands = [tune.Candidate({**fixed, "PERSIST": p}, {"PERSIST": p}) for p in (0, 1)]
        for c, ms in zip(cands, (2.0, 1.0) if best["PERSIST"] else (1.0, 2.0), strict=True):
            c.status, c.ms = "timed", ms
        return tune.TuneResult(path, sizes, sizes, best, cands, "key", False, "gpu", 1, [])

    monkeypatch.setattr(tune, "tune", fake_tune)
    rc = main(["bench", ATTENTION, "--tune", "PERSIST", "-D", "D=128", "-D", "BQ=auto", "-D", "BKV=auto",
               "--size", "B=1", "--size", "H=1", "--size", "N=768"])
    assert rc == 0
    (ask,) = asked
    assert ask["fixed"] == {"BQ": 128, "BKV": 128, "STAGES": 2, "D": 128, "CAUSAL": 0}  # auto resolved, rest pinned
    assert "PERSIST" not in ask["fixed"]
    (call,) = calls
    assert call["consts"]["PERSIST"] == 1 and call["consts"]["BQ"] == 128
    out = capsys.readouterr().out
    assert "B=1 H=1 N=768: PERSIST=1: 1.0000 ms, PERSIST=0: 2.0000 ms" in out


def test_bench_tune_refuses_names_outside_the_space_and_pinned_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", ATTENTION, "--tune", "D", "--size", "N=64"]) == 1
    assert "--tune D: not in the @tune space of kernel 'attention_fwd'" in capsys.readouterr().err
    assert main(["bench", ATTENTION, "--tune", "PERSIST", "-D", "PERSIST=1", "--size", "N=64"]) == 1
    assert "a const is either pinned or tuned" in capsys.readouterr().err
