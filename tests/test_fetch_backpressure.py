"""The fetcher's wait for the WARC writer (``_WarcOutput._backpressure``): requests wait while more
than the bound is queued, and are let go together once the writer has caught up, by one poll."""

from __future__ import annotations

import asyncio

import crawl.fetch.warcwriter as ww
from crawl.fetch.warcwriter import _WarcOutput, _WarcWriter


class _Output(_WarcOutput):
    """The WARC side alone, with the two attributes ``_backpressure`` reads (as _Fetcher sets them)."""

    def __init__(self) -> None:
        self.writer = _WarcWriter()  # not started: the test moves its counters itself
        self.bp_waiters: list[asyncio.Future[None]] = []


def test_waiting_requests_share_one_poll_and_all_go_once_the_writer_catches_up() -> None:
    async def main() -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()
        out = _Output()
        out.writer.submitted_bytes = ww._WRITE_QUEUE_BYTES + 1000  # over the bound
        tasks = [asyncio.create_task(out._backpressure()) for _ in range(200)]
        await asyncio.sleep(0.02)
        timers = len(loop._scheduled)  # type: ignore[attr-defined] # asyncio's own loop
        waiting = sum(not t.done() for t in tasks)
        out.writer.written_bytes = 1000  # back at the bound: everyone may go on
        await asyncio.wait_for(asyncio.gather(*tasks), 1.0)
        # under the bound no wait at all
        t0 = loop.time()
        await out._backpressure()
        return timers, waiting, round(loop.time() - t0)

    timers, waiting, quick = asyncio.run(main())
    assert waiting == 200  # nobody passes while over the bound
    assert timers <= 2  # one poll for all (a timer per waiting request before)
    assert quick == 0
