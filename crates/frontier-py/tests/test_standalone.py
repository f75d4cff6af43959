"""The standalone Python API: Frontier (no Scrapy) and the asyncio Throttler."""

from __future__ import annotations

import asyncio
import time

import pytest

from polite_frontier import Frontier, SettingsError, Throttler, request_fingerprint


def test_frontier_orders_filters_and_throttles(tmp_path):
    f = Frontier({"download_delay": 10, "randomize_download_delay": False})
    assert f.push("https://a.example/1", priority=1)
    assert f.push("https://a.example/2")
    assert not f.push("https://a.example/2#frag")
    assert f.push("https://b.example/1")
    first = f.poll()
    assert first.url == "https://a.example/1"
    second = f.poll()
    assert second.url == "https://b.example/1"
    wait = f.poll()
    assert isinstance(wait, float) and 9 < wait <= 10
    assert f.complete(first.id, status=429, headers={"Retry-After": "60"})
    assert f.scope_stats("a.example")["level"] == 1
    assert f.stats()["dupefilter/filtered"] == 1


def test_frontier_in_sqlite_resumes(tmp_path):
    path = str(tmp_path / "q.sqlite3")
    with Frontier(path=path) as f:
        f.push("https://r.example/1")
        f.push("https://r.example/2")
        lease = f.poll()
        f.complete(lease.id, status=200)
    with Frontier(path=path) as f:
        assert len(f) == 1
        assert not f.push("https://r.example/1")  # the filter survived


def test_fingerprint_is_scrapys():
    assert request_fingerprint("http://www.example.com/") == "28fd680a059847ede1289d72f7a0e1c470f3d8d2"


@pytest.mark.parametrize("settings", [{"download_delay": "x"}, {"concurrent_requests": 0}, {"nope": 1}])
def test_bad_settings(settings):
    with pytest.raises(SettingsError):
        Frontier(settings)
    with pytest.raises(SettingsError):
        Throttler(settings)


def test_throttler_spaces_waiters_first_come_first_served():
    async def main():
        throttler = Throttler({"download_delay": 0.1, "randomize_download_delay": False})
        order, times = [], []

        async def call(i):
            async with throttler.acquire("api.example") as permit:
                order.append(i)
                times.append(time.monotonic())
                permit.finish(status=200)

        await asyncio.gather(*(call(i) for i in range(5)))
        return order, times

    order, times = asyncio.run(main())
    assert order == list(range(5))
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert min(gaps) >= 0.095, gaps


def test_throttler_obeys_retry_after_and_cancelled_waits_leave_the_queue():
    async def main():
        throttler = Throttler({"concurrent_requests_per_domain": 1})
        permit = await throttler.acquire("h.example")
        waiter = asyncio.ensure_future(throttler.acquire("h.example"))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        waiter.cancel()
        permit.finish(status=429, headers={"Retry-After": "1"})
        start = time.monotonic()
        async with throttler.acquire("h.example"):
            pass
        return time.monotonic() - start

    assert 0.95 <= asyncio.run(main()) < 2.0
