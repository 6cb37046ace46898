"""CPU timelines for the benchmarks: user+system CPU of named processes and of the whole machine,
sampled every 0.25 s from /proc, and the step boundaries of a round (the progress interface of
:mod:`crawl.progress`). Used by ``round_timeline.py`` and ``crawl_bench.py`` to say how many cores a
round's steps kept busy and how many were left idle.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")
INTERVAL_S = 0.25


def busy_s() -> float:
    """CPU seconds the whole machine spent busy so far (all cores; /proc/stat minus idle and iowait)."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    return (sum(vals[:8]) - vals[3] - vals[4]) / TICK


def cpu_s(pid: int) -> float:
    """user + system CPU seconds of ``pid`` so far (its own threads; not its children)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / TICK


class Sampler(threading.Thread):
    """CPU seconds of named processes every :data:`INTERVAL_S`, as (monotonic time, {name: cpu_s})."""

    def __init__(self, pids: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.samples.append(self._sample())
            self._halt.wait(INTERVAL_S)

    def stop(self) -> None:
        self._halt.set()
        self.join()
        self.samples.append(self._sample())

    def _sample(self) -> tuple[float, dict[str, float]]:
        cpu = {n: cpu_s(p) for n, p in self.pids.items()}
        cpu["others"] = busy_s() - sum(cpu.values())  # every other process on the (shared) machine
        return time.monotonic(), cpu

    def cores(self, name: str, t0: float, t1: float) -> float:
        """Average cores ``name`` used between monotonic times t0 and t1 (samples interpolated)."""
        return (self._at(name, t1) - self._at(name, t0)) / max(t1 - t0, 1e-9)

    def _at(self, name: str, t: float) -> float:
        s = self.samples
        for (ta, a), (tb, b) in zip(s, s[1:], strict=False):
            if ta <= t <= tb:
                return a[name] + (b[name] - a[name]) * (t - ta) / max(tb - ta, 1e-9)
        return s[0][1][name] if t < s[0][0] else s[-1][1][name]


class StepClock:
    """The progress interface of :mod:`crawl.progress`, recording (step, start, end) in monotonic time."""

    def __init__(self) -> None:
        self.steps: list[list[Any]] = []

    def __call__(self, msg: str) -> None:
        pass

    def start(self, step: str, total: int | None = None) -> None:
        self.steps.append([step, time.monotonic(), None])

    def advance(self, n: int = 1) -> None:
        pass

    def finish(self) -> None:
        self.steps[-1][2] = time.monotonic()


def step_table(sampler: Sampler, steps: list[list[Any]]) -> dict[str, Any]:
    """Print, per step and for the whole round, its wall time, the cores each sampled process used and
    the cores left idle (the machine's cores minus every process's use, ``others`` included); returns
    the same as a dict: ``{"steps": {step: {...}}, "round": {..., "idle_share": ...}}``."""
    names = [*sampler.pids, "others"]
    ncores = os.cpu_count() or 1
    print("| step | wall s | " + " | ".join(f"{n} cores" for n in names) + " | idle cores |")
    print("|---|---|" + "---|" * (len(names) + 1))
    out: dict[str, Any] = {"steps": {}}
    rows = [*steps, ["**round**", steps[0][1], steps[-1][2]]]
    for step, a, b in rows:
        used = {n: sampler.cores(n, a, b) for n in names}
        idle = max(0.0, ncores - sum(used.values()))
        row = {"s": round(b - a, 3), **{n: round(v, 2) for n, v in used.items()}, "idle": round(idle, 2),
               "idle_share": round(idle / ncores, 3)}
        if step == "**round**":
            out["round"] = row
        else:
            out["steps"][step] = row
        print(f"| {step} | {b - a:.2f} | " + " | ".join(f"{v:.2f}" for v in used.values()) + f" | {idle:.2f} |")
    return out
