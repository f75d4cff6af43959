"""Scrapy's default scheduler against polite_frontier.scrapy.Scheduler, through Python,
in one run: enqueue_request and next_request rates, and memory per queued request.

    python bench_schedulers.py [--requests N] [--hosts H] [--scrapy-pops P] [--which both|scrapy|polite]

Each scheduler runs in a child process of its own (clean memory figures). Requests are
made in batches of 10,000 outside the timed region; memory is the growth of the
process's resident set while the queue fills, divided by the requests queued (what a
queued request costs, its Request object included if the scheduler keeps it).
Scrapy's default priority queue (DownloaderAwarePriorityQueue) looks at every slot on
each pop, so over 10,000 hosts it pops only P requests, and its rate is P / time.
Our next_request is timed with each request completed right after it is handed out
(as the engine does), through the same code path as a crawl.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from unittest.mock import Mock

BATCH = 10_000


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def urls(n: int, hosts: int):
    for i in range(n):
        yield f"http://h{i % hosts}.example.com/page/{i}"


def run(which: str, n: int, hosts: int, pops: int) -> dict:
    from scrapy import Request, Spider
    from scrapy.utils.test import get_crawler

    class S(Spider):
        name = "bench"

    class Downloader:  # what Scrapy's priority queue asks the downloader
        def __init__(self):
            self.slots = {}

        def get_slot_key(self, request):
            from scrapy.utils.httpobj import urlparse_cached
            return request.meta.get("download_slot") or urlparse_cached(request).hostname or ""

    crawler = get_crawler(S, {"LOG_LEVEL": "ERROR"})
    crawler.engine = Mock(downloader=Downloader())
    spider = S.from_crawler(crawler)
    crawler.spider = spider
    if which == "scrapy":
        from scrapy.core.scheduler import Scheduler
    else:
        from polite_frontier.scrapy import Scheduler
    sched = Scheduler.from_crawler(crawler)
    sched.open(spider)
    gc.collect()
    base = rss()
    enqueue = 0.0
    it = urls(n, hosts)
    done = 0
    while done < n:
        batch = [Request(u) for _, u in zip(range(BATCH), it)]
        if not batch:
            break
        t = time.perf_counter()
        for r in batch:
            sched.enqueue_request(r)
        enqueue += time.perf_counter() - t
        done += len(batch)
        del batch
    gc.collect()
    grown = rss() - base
    count = pops if which == "scrapy" else n
    t = time.perf_counter()
    got = 0
    if which == "scrapy":
        for _ in range(count):
            if sched.next_request() is None:
                break
            got += 1
    else:
        outcome, ack = sched._outcome, sched._ack
        while got < count:
            r = sched.next_request()
            if r is None:
                break
            outcome(r, status=200)
            ack(r)
            got += 1
    pop = time.perf_counter() - t
    return {
        "scheduler": which,
        "requests": n,
        "hosts": hosts,
        "enqueue_per_s": n / enqueue,
        "next_request_per_s": got / pop,
        "popped": got,
        "bytes_per_request": grown / n,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=1_000_000)
    p.add_argument("--hosts", type=int, default=10_000)
    p.add_argument("--scrapy-pops", type=int, default=2_000)
    p.add_argument("--which", default="both")
    p.add_argument("--child", action="store_true")
    a = p.parse_args()
    if a.child:
        print(json.dumps(run(a.which, a.requests, a.hosts, a.scrapy_pops)))
        return
    results = {}
    for which in (["scrapy", "polite"] if a.which == "both" else [a.which]):
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--which", which, "--requests", str(a.requests),
             "--hosts", str(a.hosts), "--scrapy-pops", str(a.scrapy_pops)],
            capture_output=True, text=True, check=True,
        )
        results[which] = json.loads(out.stdout.strip().splitlines()[-1])
        r = results[which]
        print(f"{which:>7}: enqueue {r['enqueue_per_s']:>11,.0f}/s   next_request {r['next_request_per_s']:>11,.0f}/s "
              f"({r['popped']:,} popped)   {r['bytes_per_request']:,.0f} bytes per queued request", flush=True)
    if len(results) == 2:
        s, p_ = results["scrapy"], results["polite"]
        print(f"ratios: enqueue {p_['enqueue_per_s'] / s['enqueue_per_s']:.1f}x, "
              f"next_request {p_['next_request_per_s'] / s['next_request_per_s']:.1f}x, "
              f"memory per request {s['bytes_per_request'] / max(p_['bytes_per_request'], 1):.1f}x less "
              f"({a.requests:,} requests over {a.hosts:,} hosts)")


if __name__ == "__main__":
    main()
