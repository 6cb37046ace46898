"""Progress of a crawl round as ``crawl run`` shows it: a live bar per step on a terminal, plain lines
otherwise (a log file, CI, the Airflow task log).

A progress object is a plain ``Callable[[str], None]`` (a log line; what :mod:`crawl.round` always
accepted) that also has ``start(step, total)``, ``advance(n)`` and ``finish()``; :func:`steps_of`
gives the engine that interface over any callable (``print`` keeps working: steps are then silent).
Bars use ``rich`` (already in the lock through Airflow): one line per step with the pages done, pages/s
and the ETA from rich's rate estimate.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class _Steps:
    """The step interface over a plain callable: log lines only."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self._log = log

    def __call__(self, msg: str) -> None:
        self._log(msg)

    def start(self, step: str, total: int | None = None) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass

    def finish(self) -> None:
        pass


def steps_of(progress: Callable[[str], None] | None) -> Any:
    """``progress`` itself if it reports steps, else a wrapper whose steps do nothing."""
    if progress is None:
        return _Steps(lambda _msg: None)
    if all(hasattr(progress, name) for name in ("start", "advance", "finish")):
        return progress
    return _Steps(progress)


def _eta(done: int, total: int | None, rate: float) -> str:
    if not total or rate <= 0 or done >= total:
        return ""
    return f", ETA {max(0.0, (total - done) / rate):.0f} s"


class LineProgress:
    """Plain lines (no terminal): one when a step starts, one per advance with pages/s and ETA, one at the end."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self._step: str | None = None
        self._total: int | None = None
        self._done = 0
        self._t0 = 0.0

    def __call__(self, msg: str) -> None:
        print(msg, file=self.stream, flush=True)

    def start(self, step: str, total: int | None = None) -> None:
        self._step, self._total, self._done, self._t0 = step, total, 0, time.monotonic()
        self(f"{step}: started" + (f" ({total} pages)" if total else ""))

    def advance(self, n: int = 1) -> None:
        self._done += n
        elapsed = time.monotonic() - self._t0
        rate = self._done / elapsed if elapsed > 0 else 0.0
        of = f"/{self._total}" if self._total else ""
        self(f"{self._step}: {self._done}{of} pages, {rate:.1f} pages/s{_eta(self._done, self._total, rate)}")

    def finish(self) -> None:
        if self._step is not None:
            self(f"{self._step}: done in {time.monotonic() - self._t0:.1f} s")
        self._step = None

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


class _RateColumn(ProgressColumn):
    """pages/s from rich's moving estimate (blank for steps that count no pages)."""

    def render(self, task: Any) -> Text:
        if not task.fields.get("pages"):
            return Text("")
        if task.finished and task.finished_time:  # the step's average once done
            speed = task.completed / task.finished_time
        else:
            speed = task.speed
        return Text(f"{speed or 0.0:.1f} pages/s", style="progress.data.speed")


class BarProgress:
    """A live rich bar per step on a terminal; log lines are printed above the bars."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.bars = Progress(
            TextColumn("[bold]{task.description:<13}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
            _RateColumn(), TextColumn("ETA"), TimeRemainingColumn(), TextColumn("elapsed"), TimeElapsedColumn(),
            console=self.console, transient=False,
        )
        self._task: Any = None

    def __call__(self, msg: str) -> None:
        self.console.print(msg, markup=False, highlight=False)

    def start(self, step: str, total: int | None = None) -> None:
        self.finish()
        self._task = self.bars.add_task(step, total=total, pages=bool(total))

    def advance(self, n: int = 1) -> None:
        if self._task is not None:
            self.bars.advance(self._task, n)

    def finish(self) -> None:
        if self._task is not None:
            task = next(t for t in self.bars.tasks if t.id == self._task)
            done = task.completed if task.total is None else max(task.completed, task.total)
            self.bars.update(self._task, total=max(done, 1), completed=max(done, 1))
            self.bars.stop_task(self._task)
            self._task = None

    def __enter__(self) -> BarProgress:
        self.bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()
        self.bars.stop()


def make_progress(stream: IO[str] | None = None) -> LineProgress | BarProgress:
    """Bars when ``stream`` (default stderr) is a terminal, plain lines otherwise."""
    stream = stream or sys.stderr
    if hasattr(stream, "isatty") and stream.isatty():
        return BarProgress(Console(file=stream))
    return LineProgress(stream)
