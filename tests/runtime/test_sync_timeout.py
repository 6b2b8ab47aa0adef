"""The bounded synchronise's logic without a GPU (backend/cuda.py): TKIR_SYNC_TIMEOUT parsed strictly, the
polling loop against a fake clock, and the launch list against a fake driver whose events never complete.
tests/gpu/test_sync_timeout_gpu.py runs it on a spinning kernel."""

from __future__ import annotations

import pytest
from cuda.bindings import driver as real_cu

from tkir.backend import cuda as tkcuda
from tkir.diagnostics import TkirError


@pytest.mark.parametrize("text, want", [(None, None), ("", None), ("  ", None), ("0", None), ("2.5", 2.5),
                                        (" 30 ", 30.0)])
def test_the_timeout_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, text: str | None,
                                                want: float | None) -> None:
    if text is None:
        monkeypatch.delenv(tkcuda.SYNC_TIMEOUT_ENV, raising=False)
    else:
        monkeypatch.setenv(tkcuda.SYNC_TIMEOUT_ENV, text)
    assert tkcuda.sync_timeout() == want


@pytest.mark.parametrize("text", ["abc", "-1", "inf", "nan", "1s"])
def test_a_bad_timeout_is_an_error_not_an_unbounded_wait(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(tkcuda.SYNC_TIMEOUT_ENV, text)
    with pytest.raises(tkcuda.CudaError, match=rf"TKIR_SYNC_TIMEOUT='{text}': expected a number of seconds"):
        tkcuda.sync_timeout()


class FakeClock:
    """time.monotonic and time.sleep: sleeping moves the clock, nothing waits."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        assert s > 0
        self.sleeps.append(s)
        self.now += s


def test_a_wait_that_runs_out_names_the_kernel_still_running() -> None:
    t = FakeClock()
    with pytest.raises(tkcuda.SyncTimeout, match=r"synchronize GPU 0: kernel 'spin' is still running after 0.25 s"):
        tkcuda.wait_until_done(lambda: "spin", 0.25, "synchronize GPU 0", clock=t.clock, sleep=t.sleep)
    assert t.now == pytest.approx(100.25)  # it slept exactly up to the deadline, never past it
    assert t.sleeps[0] == tkcuda.SYNC_POLL_FIRST_S and max(t.sleeps) == tkcuda.SYNC_POLL_MAX_S
    assert all(b <= max(2 * a, tkcuda.SYNC_POLL_MAX_S) for a, b in zip(t.sleeps, t.sleeps[1:], strict=False))
    assert issubclass(tkcuda.SyncTimeout, TimeoutError) and issubclass(tkcuda.SyncTimeout, TkirError)


def test_a_wait_returns_once_nothing_runs() -> None:
    t = FakeClock()
    answers = iter(["gemm", "gemm", "softmax", None])
    tkcuda.wait_until_done(lambda: next(answers), 10.0, "x", clock=t.clock, sleep=t.sleep)
    assert len(t.sleeps) == 3 and t.now < 100.01


def test_a_wait_that_is_done_at_once_does_not_sleep() -> None:
    t = FakeClock()
    tkcuda.wait_until_done(lambda: None, 0.0, "x", clock=t.clock, sleep=t.sleep)
    assert t.sleeps == []


class FakeDriver:
    """The driver calls the launch list makes; events of kernels named in `hung` never complete, those in
    `failed` report an illegal address."""

    CUresult = real_cu.CUresult
    CUevent_flags = real_cu.CUevent_flags

    def __init__(self, hung: set[str], failed: set[str] = frozenset()) -> None:
        self.hung, self.failed = hung, failed
        self.events: dict[int, str] = {}
        self.destroyed: list[str] = []
        self.current: str = ""
        self.synchronized = 0

    def cuEventCreate(self, flags: object) -> tuple:
        handle = len(self.events) + 1
        self.events[handle] = self.current
        return real_cu.CUresult.CUDA_SUCCESS, handle

    def cuEventRecord(self, event: int, stream: int) -> tuple:
        return (real_cu.CUresult.CUDA_SUCCESS,)

    def cuEventQuery(self, event: int) -> tuple:
        name = self.events[event]
        if name in self.hung:
            return (real_cu.CUresult.CUDA_ERROR_NOT_READY,)
        if name in self.failed:
            return (real_cu.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,)
        return (real_cu.CUresult.CUDA_SUCCESS,)

    def cuEventDestroy(self, event: int) -> tuple:
        self.destroyed.append(self.events[event])
        return (real_cu.CUresult.CUDA_SUCCESS,)

    def cuCtxSynchronize(self) -> tuple:
        self.synchronized += 1
        return (real_cu.CUresult.CUDA_SUCCESS,)


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> tkcuda._Launches:
    fresh = tkcuda._Launches()
    monkeypatch.setattr(tkcuda, "_LAUNCHES", fresh)
    return fresh


def _launch(driver: FakeDriver, name: str, device: int = 0) -> None:
    driver.current = name
    tkcuda.note_launch(device, name, 0)


def test_the_first_kernel_still_running_is_named_and_finished_ones_are_dropped(
        monkeypatch: pytest.MonkeyPatch, launches: tkcuda._Launches) -> None:
    driver = FakeDriver(hung={"spin"})
    monkeypatch.setattr(tkcuda, "cu", driver)
    monkeypatch.setenv(tkcuda.SYNC_TIMEOUT_ENV, "0.05")
    for name in ("gemm", "softmax", "spin", "vadd"):
        _launch(driver, name)
    assert [n for n, _ in launches.pending[0]] == ["spin", "vadd"]  # gemm, softmax dropped as spin came
    assert driver.destroyed == ["gemm", "softmax"]
    with pytest.raises(tkcuda.SyncTimeout, match=r"synchronize GPU 0: kernel 'spin' is still running after 0.05 s"):
        tkcuda.synchronize_current(0)
    assert driver.synchronized == 0  # never reached the unbounded cuCtxSynchronize
    assert launches.first_running(1) is None  # another device has nothing pending


def test_without_the_variable_nothing_is_recorded_and_the_wait_is_cuCtxSynchronize(
        monkeypatch: pytest.MonkeyPatch, launches: tkcuda._Launches) -> None:
    driver = FakeDriver(hung={"spin"})
    monkeypatch.setattr(tkcuda, "cu", driver)
    monkeypatch.delenv(tkcuda.SYNC_TIMEOUT_ENV, raising=False)
    _launch(driver, "spin")
    tkcuda.synchronize_current(0)
    assert driver.events == {} and driver.synchronized == 1


def test_a_finished_wait_synchronizes_the_context(monkeypatch: pytest.MonkeyPatch,
                                                  launches: tkcuda._Launches) -> None:
    driver = FakeDriver(hung=set())
    monkeypatch.setattr(tkcuda, "cu", driver)
    monkeypatch.setenv(tkcuda.SYNC_TIMEOUT_ENV, "5")
    _launch(driver, "gemm")
    tkcuda.synchronize_current(0)
    assert driver.synchronized == 1 and not launches.pending[0] and driver.destroyed == ["gemm"]


def test_a_kernel_that_failed_is_named_by_the_wait(monkeypatch: pytest.MonkeyPatch,
                                                   launches: tkcuda._Launches) -> None:
    driver = FakeDriver(hung={"spin"}, failed={"gemm"})
    monkeypatch.setattr(tkcuda, "cu", driver)
    monkeypatch.setenv(tkcuda.SYNC_TIMEOUT_ENV, "5")
    driver.current = "gemm"
    launches.pending[0].append(("gemm", driver.cuEventCreate(0)[1]))
    with pytest.raises(tkcuda.CudaError, match=r"gemm on GPU 0 \(cuEventQuery\) failed: CUDA_ERROR_ILLEGAL_ADDRESS"):
        tkcuda.synchronize_current(0)


def test_a_kernel_launch_is_recorded_on_its_stream_and_named_by_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime's side, against test_runtime_devices' fake driver: under the variable a launch records an
    event on its stream in its device's context, and the wait names the kernel; without it, no event."""
    from test_runtime_devices import DEVICE_BASE, DevCAI, FakeDriver, kernel

    driver = FakeDriver(monkeypatch)
    recorded: list[tuple[int, int, int | None]] = []

    def record(event: int, stream: int) -> tuple:
        recorded.append((event, stream, driver._device()))
        return (real_cu.CUresult.CUDA_SUCCESS,)

    monkeypatch.setattr(real_cu, "cuEventCreate", lambda flags: (real_cu.CUresult.CUDA_SUCCESS, len(recorded) + 1))
    monkeypatch.setattr(real_cu, "cuEventRecord", record)
    monkeypatch.setattr(real_cu, "cuEventQuery", lambda event: (real_cu.CUresult.CUDA_ERROR_NOT_READY,))
    monkeypatch.setattr(tkcuda, "_LAUNCHES", tkcuda._Launches())
    args = (DevCAI(256, 1), DevCAI(256, 1, ptr=DEVICE_BASE[1] + 4096))
    k = kernel()
    try:
        monkeypatch.setenv(tkcuda.SYNC_TIMEOUT_ENV, "0.05")
        k(*args)
        assert recorded == [(1, 0, 1)]  # after the launch, on its stream (0), in GPU 1's context
        assert tkcuda.pending_launches(1) == ["k"] and tkcuda.pending_launches(0) == []
        with pytest.raises(tkcuda.SyncTimeout, match="synchronize GPU 1: kernel 'k' is still running after 0.05 s"):
            tkcuda.synchronize(1)
        monkeypatch.delenv(tkcuda.SYNC_TIMEOUT_ENV)
        k(*args)
        assert len(recorded) == 1  # off: nothing recorded
    finally:
        tkcuda._driver.cache_clear()  # the fake's contexts must not outlive it
        tkcuda._primary_context.cache_clear()
