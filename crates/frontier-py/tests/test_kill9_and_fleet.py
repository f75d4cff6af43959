"""Crash safety and fleets, with real Scrapy processes and real servers:

- a JOBDIR crawl killed with SIGKILL and started again fetches every page, repeating
  at most the requests that were in flight (plus the start URLs, which Scrapy's
  spiders send with dont_filter);
- two Scrapy processes on one Redis crawl, one SIGKILLed mid-crawl: every page is
  fetched, and the per-host spacing holds across both processes (the server's log)."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from servers import nginx_sites, read_access_log, redis_server

HERE = Path(__file__).parent


def spawn(out: Path, ports: list[int], settings: list[str], log: Path) -> subprocess.Popen:
    args = [sys.executable, str(HERE / "crawl_sites.py"), str(out), *map(str, ports)]
    for s in settings:
        args += ["--set", s]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(log, "w"))


def served_ok(logs: list[Path]) -> collections.Counter:
    return collections.Counter(
        (n, uri) for n, log in enumerate(logs) for _, status, uri in read_access_log(log) if status == 200
    )


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_jobdir_crawl_killed_with_sigkill_loses_nothing(tmp_path: Path) -> None:
    pages = 60
    settings = [
        "SCHEDULER=polite_frontier.scrapy.Scheduler",
        f"JOBDIR={tmp_path / 'job'}",
        "DOWNLOAD_DELAY=0.1",
        "CONCURRENT_REQUESTS_PER_DOMAIN=2",
        "CONCURRENT_REQUESTS=16",
    ]
    with nginx_sites(2, pages, 100) as (ports, paths, logs):
        first = spawn(tmp_path / "first.json", ports, settings, tmp_path / "first.log")
        wait_for(lambda: sum(served_ok(logs).values()) >= 40, 120, "40 pages")
        first.send_signal(signal.SIGKILL)
        first.wait()
        before = served_ok(logs)
        assert sum(before.values()) < 2 * (pages + 1), "the crawl ended before it was killed"
        second = spawn(tmp_path / "second.json", ports, settings, tmp_path / "second.log")
        assert second.wait(300) == 0, (tmp_path / "second.log").read_text()[-3000:]
        after = served_ok(logs)

    expected = {(n, p) for n in range(2) for p in paths}
    assert set(after) == expected, sorted(expected - set(after))
    repeated = sum(after.values()) - len(expected)
    # In flight when killed: at most CONCURRENT_REQUESTS; plus the two start URLs, which
    # Scrapy sends again with dont_filter on every start.
    print(f"\nkill -9 of a JOBDIR crawl: {sum(before.values())} pages before the kill, "
          f"{repeated} fetched twice (<= 16 in flight + 2 start URLs)")
    assert repeated <= 16 + 2


def test_two_processes_share_one_redis_crawl_and_survive_a_sigkill(tmp_path: Path) -> None:
    pages = 40
    delay = 0.25
    with redis_server() as url, nginx_sites(2, pages, 10) as (ports, paths, logs):
        settings = [
            "SCHEDULER=polite_frontier.scrapy.Scheduler",
            f"POLITE_FRONTIER_REDIS_URL={url}",
            "POLITE_FRONTIER_CRAWL=fleet",
            "POLITE_FRONTIER_LEASE_TIMEOUT=3",
            f"DOWNLOAD_DELAY={delay}",
            "DOWNLOAD_DELAY_JITTER=0",
            "CONCURRENT_REQUESTS_PER_DOMAIN=1",
        ]
        victim = spawn(tmp_path / "a.json", ports, settings, tmp_path / "a.log")
        survivor = spawn(tmp_path / "b.json", ports, settings, tmp_path / "b.log")
        wait_for(lambda: sum(served_ok(logs).values()) >= 20, 120, "20 pages")
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        assert survivor.wait(300) == 0, (tmp_path / "b.log").read_text()[-3000:]
        entries = [read_access_log(log) for log in logs]

    ok = collections.Counter(
        (n, uri) for n, e in enumerate(entries) for _, status, uri in e if status == 200
    )
    expected = {(n, p) for n in range(2) for p in paths}
    assert set(ok) == expected, sorted(expected - set(ok))
    gaps = []
    for e in entries:
        times = sorted(t for t, _, _ in e)
        gaps += [b - a for a, b in zip(times, times[1:])]
    refused = sum(1 for e in entries for _, status, _ in e if status == 429)
    print(f"\nRedis fleet: {len(expected)} pages by two processes (one SIGKILLed), "
          f"smallest gap between two requests to one site {min(gaps):.3f} s "
          f"(DOWNLOAD_DELAY {delay}), {refused} answered 429")
    # One budget for both processes: requests to a site leave the scheduler at least the
    # delay apart; what reaches nginx also carries each process's dispatch latency (a few
    # tens of ms), hence the margin. Never over nginx's 10 requests a second either.
    assert min(gaps) >= delay - 0.05
    assert sorted(gaps)[len(gaps) // 2] >= delay - 0.005
    assert refused == 0
