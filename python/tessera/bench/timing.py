"""The CUDA-event timer every GPU benchmark uses (python -m tessera.bench train, bench/gpu/*.py),
so that tessera and its peers are measured the same way in the same run: warm-up calls, then one
pair of CUDA events around each call on the current stream, the median of the calls.

torch is imported when a timer runs, not with this module (python -m tessera.bench --help runs
without torch).
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Set


def _event_ms(fn: Callable[[], object]) -> float:
    """Milliseconds of one fn() between two CUDA events on the current stream."""
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def _device_ms(fn: Callable[[], object]) -> Optional[float]:
    """Milliseconds of one fn()'s GPU work alone: the stream is first held by a spin kernel
    (torch.cuda._sleep) long enough that fn()'s launches are all queued before the start event
    runs, so the host's enqueue cost falls outside the two events. The spin doubles until the
    start event is still pending when fn() returns (checked on every call); None when even a
    spin of 2^25 cycles (~17 ms) ran out first: fn() waits for the device (a host sync), so
    its GPU work cannot be timed apart from its host's."""
    import torch
    cycles = _device_ms.spin
    while True:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(cycles)
        start.record()
        fn()
        hidden = not start.query()
        end.record()
        end.synchronize()
        if hidden:
            _device_ms.spin = cycles
            return start.elapsed_time(end)
        if cycles >= 1 << 25:
            return None
        cycles *= 2


_device_ms.spin = 1 << 21  # ~1 ms at 2 GHz; doubled while too short, kept for the next call


def _median(times: list) -> float:
    """The upper median (the middle element of the sorted list; no averaging of two calls)."""
    return sorted(times)[len(times) // 2]


def cuda_median_ms(fn: Callable[[], object], reps: int = 30, warmup: int = 5) -> float:
    """Median milliseconds of `reps` CUDA-event timings of fn(), after `warmup` calls."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    return _median([_event_ms(fn) for _ in range(reps)])


def cuda_interleaved_ms(fns: Dict[str, Callable[[], object]], reps: int,
                        warmup: int = 3, device_only: bool = False,
                        eager: Optional[Set[str]] = None) -> Dict[str, float]:
    """Median milliseconds of each step in `fns` (name -> callable), timed in interleaved rounds
    (every contender once per round), so that clock and temperature drift over a long run fall
    on all of them alike instead of on whichever is timed last. device_only: each call's GPU
    work alone (_device_ms: its host enqueue hidden behind a spin kernel), for kernels whose
    bandwidth is the question; otherwise the call as a user's eager code sees it, started on an
    idle GPU (its host enqueue included). A contender that waits for the device (_device_ms
    gives None) is timed that second way in every round; its name is added to `eager`."""
    import torch
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    times: Dict[str, list] = {name: [] for name in fns}
    syncing: Set[str] = set() if eager is None else eager
    for _ in range(reps):
        for name, fn in fns.items():
            ms = _device_ms(fn) if device_only and name not in syncing else None
            if ms is None:
                if device_only:
                    syncing.add(name)
                ms = _event_ms(fn)
            times[name].append(ms)
    return {name: _median(t) for name, t in times.items()}


def wait_polling() -> None:
    """Waits for the current stream by polling an event (the CPU stays busy) instead of
    blocking in torch.cuda.synchronize()."""
    import torch
    done = torch.cuda.Event()
    done.record()
    while not done.query():
        pass


def marked_step_us(fwd: Callable[[], object], bwd: Callable[[object], object], steps: int,
                   polling: bool = False, warmup: int = 3) -> list:
    """Where a synchronized training step waits (tools/gpu/step_marks.py): medians over `steps`
    steps, each started after a synchronize as cuda_interleaved_ms starts them, of four µs
    figures since the step's start: [host when fwd() returned, device when the forward's work
    was done, host when bwd(y) returned, device when the step's work was done]. The device stamps
    are CUDA events recorded at those points. polling: wait for the GPU before each step with
    wait_polling instead of torch.cuda.synchronize()."""
    import time

    import torch
    rows = []
    for i in range(warmup + steps):
        wait_polling() if polling else torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        h0 = time.perf_counter()
        ev[0].record()
        y = fwd()
        ev[1].record()
        h1 = time.perf_counter()
        bwd(y)
        ev[2].record()
        h2 = time.perf_counter()
        ev[2].synchronize()
        if i >= warmup:
            rows.append(((h1 - h0) * 1e6, ev[0].elapsed_time(ev[1]) * 1e3, (h2 - h0) * 1e6,
                         ev[0].elapsed_time(ev[2]) * 1e3))
    return [_median([r[j] for r in rows]) for j in range(4)]


__all__ = ["cuda_interleaved_ms", "cuda_median_ms", "marked_step_us", "wait_polling"]
