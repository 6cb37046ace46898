"""crawl.fetch.http._TotalBounds (every request's total_timeout_s kept by one timer) on a real event
loop: a request still waiting at its deadline is cancelled no earlier than start + total, one that
ended or is no longer on the network is left alone, later requests keep their own deadlines behind
ended ones, and a task cancelled by someone else as well is not mistaken for a timeout.
The fetcher's answers to the cancel (timeout rows, truncated=time) are checked end to end in
tests/test_fetch.py::test_total_timeout_bounds_each_request."""

from __future__ import annotations

import asyncio

from crawl.fetch.http import _TotalBounds

TOTAL = 0.3


async def _request(bounds: _TotalBounds, hold: float, waiting: bool, log: dict[str, object], name: str) -> None:
    loop = asyncio.get_running_loop()
    b = bounds.start()
    b.waiting = waiting
    t0 = loop.time()
    try:
        await asyncio.sleep(hold)
        log[name] = ("done", loop.time() - t0, b.fired)
    except asyncio.CancelledError:
        # _HttpCalls._request's rule: the bound's own cancel becomes a TimeoutError, any other propagates
        propagates = asyncio.current_task().uncancel() > b.cancelling or not b.fired
        log[name] = ("cancelled", loop.time() - t0, b.fired, propagates)
    finally:
        bounds.end(b)


async def _scenario() -> dict[str, object]:
    bounds = _TotalBounds(TOTAL)
    log: dict[str, object] = {}
    tasks = [asyncio.create_task(_request(bounds, 0.05, True, log, "short"))]  # ends long before its deadline
    await asyncio.sleep(0.02)
    tasks.append(asyncio.create_task(_request(bounds, 5.0, True, log, "hung")))  # on the network at its deadline
    tasks.append(asyncio.create_task(_request(bounds, 0.6, False, log, "released")))  # body in: not bounded
    await asyncio.sleep(0.1)
    tasks.append(asyncio.create_task(_request(bounds, 5.0, True, log, "hung-later")))  # its own, later deadline
    early = asyncio.create_task(_request(bounds, 5.0, True, log, "stopped-early"))
    tasks.append(early)
    await asyncio.sleep(TOTAL / 2)
    early.cancel()  # the fetcher's stop check, before the bound: not a timeout
    await asyncio.gather(*tasks, return_exceptions=True)
    bounds.close()
    return log


def test_total_bounds_cancel_only_requests_still_waiting_at_their_deadline() -> None:
    log = asyncio.run(asyncio.wait_for(_scenario(), 20))
    assert log["short"][:1] == ("done",) and log["short"][2] is False
    assert log["released"][0] == "done" and log["released"][2] is False  # 0.6 s > TOTAL, but not waiting
    kind, took, fired, other = log["hung"]
    assert (kind, fired, other) == ("cancelled", True, False) and took >= TOTAL - 0.005
    kind, took, fired, other = log["hung-later"]
    assert (kind, fired, other) == ("cancelled", True, False) and took >= TOTAL - 0.005
    assert log["stopped-early"][0] == "cancelled" and log["stopped-early"][3] is True


async def _stopped_as_the_bound_runs_out() -> tuple[object, ...]:
    bounds = _TotalBounds(TOTAL)
    log: dict[str, object] = {}
    task = asyncio.create_task(_request(bounds, 5.0, True, log, "stopped"))
    await asyncio.sleep(0.01)
    # the stop check's cancel and the bound's in one loop iteration, before the task runs again: the
    # request's deadline made due now and the bound's timer run at once
    when, n = bounds.q[0]
    bounds.q[0] = (asyncio.get_running_loop().time(), n)
    task.cancel()
    bounds._fire()
    await asyncio.gather(task, return_exceptions=True)
    bounds.close()
    return log["stopped"]


def test_a_stop_as_the_bound_runs_out_is_not_a_timeout() -> None:
    """Both cancels land in one CancelledError: the stop's must not be swallowed as a timeout."""
    kind, _, fired, propagates = asyncio.run(asyncio.wait_for(_stopped_as_the_bound_runs_out(), 20))
    assert (kind, fired, propagates) == ("cancelled", True, True)
