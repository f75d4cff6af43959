"""The Scheduler on its own (a crawler with a mock engine): ordering, round trips,
fingerprints, throttling-aware polling and engine wake-ups, completions feeding backoff,
settings errors, stats."""

from __future__ import annotations

import time
from unittest.mock import Mock

import pytest
from scrapy import Request, Spider
from scrapy.http import FormRequest, HtmlResponse
from scrapy.utils.request import fingerprint
from scrapy.utils.test import get_crawler

from polite_frontier import SettingsError
from polite_frontier.scrapy import Scheduler, _CompletionMiddleware


class S(Spider):
    name = "s"

    def parse(self, response):
        pass

    def parse_item(self, response):
        pass


def make(settings=None, jobdir=None):
    settings = dict(settings or {})
    if jobdir:
        settings["JOBDIR"] = str(jobdir)
    crawler = get_crawler(S, settings)
    crawler.engine = Mock()
    crawler.engine.downloader = Mock(spec=["middleware"])
    crawler.engine.downloader.middleware = Mock(spec=["_add_middleware"])
    spider = S.from_crawler(crawler)
    crawler.spider = spider
    sched = Scheduler.from_crawler(crawler)
    sched.open(spider)
    return sched, crawler, spider


def finish(sched, request, status=200, headers=None, error=None):
    mw = _CompletionMiddleware(sched)
    if error is not None:
        mw.process_exception(request, error)
    else:
        mw.process_response(request, HtmlResponse(request.url, status=status, headers=headers or {}, body=b""))
    sched._ack(request)


def test_priorities_lifo_and_start_requests_after_discovered():
    sched, crawler, spider = make()
    for i, prio in enumerate([0, 5, 0, 5]):
        assert sched.enqueue_request(Request(f"http://a.example/{i}", priority=prio))
    assert sched.enqueue_request(Request("http://a.example/s", meta={"is_start_request": True}))
    got = [sched.next_request().url for _ in range(5)]
    # Within one host: priority, then LIFO, start requests after discovered ones.
    assert got == [f"http://a.example/{i}" for i in (3, 1, 2, 0)] + ["http://a.example/s"]
    assert sched.next_request() is None and not sched.has_pending_requests()


def test_requests_round_trip_exactly_in_memory_and_on_disk(tmp_path):
    def requests(spider):
        return [
            Request("http://e.example/plain"),
            Request("http://e.example/cb", callback=spider.parse_item, meta={"depth": 3}, priority=2),
            Request("http://e.example/rich", callback=spider.parse, errback=spider.parse_item, method="POST",
                    body=b"x=1", headers={"X-A": "b"}, cookies={"c": "d"}, meta={"k": [1, 2]},
                    cb_kwargs={"n": 1}, flags=["f"], dont_filter=True),
            FormRequest("http://e.example/form", formdata={"q": "1"}),
        ]

    for jobdir in (None, tmp_path / "job"):
        sched, crawler, spider = make(jobdir=jobdir)
        originals = {r.url: r.to_dict(spider=spider) for r in requests(spider)}
        for r in requests(spider):
            assert sched.enqueue_request(r)
        if jobdir:  # and across a restart
            sched.close("shutdown")
            sched, crawler, spider = make(jobdir=jobdir)
        seen = {}
        while (r := sched.next_request()) is not None:
            seen[r.url] = r.to_dict(spider=spider)
            assert type(r).__name__ == ("FormRequest" if "form" in r.url else "Request")
        assert seen == originals
        sched.close("finished")


def test_duplicates_use_scrapys_fingerprint_and_dont_filter():
    sched, crawler, spider = make()
    assert sched.enqueue_request(Request("http://d.example/a?b=1&a=2"))
    assert not sched.enqueue_request(Request("http://d.example/a?a=2&b=1#frag"))
    assert sched.enqueue_request(Request("http://d.example/a?a=2&b=1", dont_filter=True))
    sched.close("finished")  # counts reach the stats collector in bulk
    assert crawler.stats.get_value("dupefilter/filtered") == 1
    assert crawler.stats.get_value("scheduler/enqueued") == 2


def test_custom_fingerprinter_decides_duplicates():
    class ByPath:
        def fingerprint(self, request):
            from urllib.parse import urlparse
            import hashlib
            return hashlib.sha1(urlparse(request.url).path.encode()).digest()

    crawler = get_crawler(S, {"REQUEST_FINGERPRINTER_CLASS": ByPath})
    crawler.engine = Mock()
    spider = S.from_crawler(crawler)
    sched = Scheduler.from_crawler(crawler)
    sched.open(spider)
    assert sched.enqueue_request(Request("http://one.example/same"))
    assert not sched.enqueue_request(Request("http://two.example/same?x=1"))  # same path
    assert sched.enqueue_request(Request("http://two.example/other"))
    # Throttled on the real host, not on the fingerprint.
    urls = {sched.next_request().url, sched.next_request().url}
    assert urls == {"http://one.example/same", "http://two.example/other"}


def test_requests_seen_of_a_scrapy_job_is_imported(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    old = Request("http://seen.example/old")
    (job / "requests.seen").write_text(fingerprint(old).hex() + "\n")
    sched, crawler, spider = make(jobdir=job)
    assert not sched.enqueue_request(Request("http://seen.example/old"))
    assert sched.enqueue_request(Request("http://seen.example/new"))
    sched.close("finished")


def test_next_request_hands_out_only_what_may_go_and_wakes_the_engine():
    sched, crawler, spider = make({"DOWNLOAD_DELAY": 0.3, "DOWNLOAD_DELAY_JITTER": 0})
    for path in ("a", "b"):
        sched.enqueue_request(Request(f"http://slow.example/{path}"))
    sched.enqueue_request(Request("http://other.example/x"))
    first = sched.next_request()
    second = sched.next_request()
    assert {first.url.split("/")[2], second.url.split("/")[2]} == {"slow.example", "other.example"}
    assert sched.next_request() is None  # slow.example's delay holds its second request
    assert sched.has_pending_requests()
    nextcall = crawler.engine._slot.nextcall
    nextcall.schedule.reset_mock()
    # The engine is woken when the delay ends (asyncio/twisted call_later).
    from twisted.internet import reactor
    deadline = time.monotonic() + 2
    while not nextcall.schedule.called and time.monotonic() < deadline:
        reactor.iterate(0.02)
    assert nextcall.schedule.called
    assert sched.next_request().url.startswith("http://slow.example/")


def test_a_429_with_retry_after_holds_the_host():
    sched, crawler, spider = make()
    for i in range(3):
        sched.enqueue_request(Request(f"http://busy.example/{i}"))
    sched.enqueue_request(Request("http://calm.example/"))
    r = sched.next_request()
    while not r.url.startswith("http://busy.example/"):
        finish(sched, r)
        r = sched.next_request()
    others = []
    while (x := sched.next_request()) is not None:
        others.append(x)
    for x in others:
        if x.url.startswith("http://busy"):
            finish(sched, x)
    finish(sched, r, status=429, headers={"Retry-After": "30"})
    stats = sched.core.scope_stats("busy.example")
    assert stats["triggers"] == 1 and stats["level"] == 1
    assert stats["hard_until"] > time.time() + 25
    sched.enqueue_request(Request("http://busy.example/after"))
    sched.enqueue_request(Request("http://calm.example/after"))
    assert sched.next_request().url == "http://calm.example/after"
    assert sched.next_request() is None


def test_download_errors_back_off_by_kind():
    from scrapy.exceptions import DownloadTimeoutError, IgnoreRequest

    sched, crawler, spider = make()
    sched.enqueue_request(Request("http://t.example/1"))
    sched.enqueue_request(Request("http://i.example/1"))
    a, b = sched.next_request(), sched.next_request()
    t, i = (a, b) if "t.example" in a.url else (b, a)
    finish(sched, t, error=DownloadTimeoutError("slow"))
    finish(sched, i, error=IgnoreRequest())
    assert sched.core.scope_stats("t.example")["triggers"] == 1
    assert sched.core.scope_stats("i.example")["triggers"] == 0


def test_meta_scopes_delay_and_dont_throttle():
    sched, crawler, spider = make({"THROTTLING_SCOPES": {"api": {"concurrency": 1}}})
    sched.enqueue_request(Request("http://x.example/1", meta={"throttling_scopes": "api"}))
    sched.enqueue_request(Request("http://y.example/2", meta={"throttling_scopes": ["api"]}))
    sched.enqueue_request(Request("http://z.example/3", meta={"throttling_delay": 30}))
    sched.enqueue_request(Request("http://w.example/4", meta={"dont_throttle": True}))
    got = []
    while (r := sched.next_request()) is not None:
        got.append(r.url)
    # One of the two "api" requests (concurrency 1), the unthrottled one; the delayed one waits.
    assert len(got) == 2 and "http://w.example/4" in got
    assert any(u in got for u in ("http://x.example/1", "http://y.example/2"))


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"DOWNLOAD_DELAY": "soon"}, "DOWNLOAD_DELAY must be a number"),
        ({"CONCURRENT_REQUESTS": 0}, "CONCURRENT_REQUESTS"),
        ({"BACKOFF_DELAY_FACTOR": 0.5}, "BACKOFF_DELAY_FACTOR"),
        ({"BACKOFF_HTTP_CODES": 429}, "BACKOFF_HTTP_CODES must be a list"),
        ({"BACKOFF_EXCEPTIONS": ["no.such.Error"]}, "BACKOFF_EXCEPTIONS: cannot import 'no.such.Error'"),
        ({"THROTTLING_SCOPES": {"x.com": {"delai": 1}}}, "THROTTLING_SCOPES['x.com']: unknown key 'delai'"),
        ({"THROTTLING_SCOPES": {"x.com": {"backoff": {"delay_factor": 0.1}}}}, 'THROTTLING_SCOPES["x.com"]'),
        ({"THROTTLING_SCOPES": {"x.com": {"delay": -1}}}, "THROTTLING_SCOPES['x.com']['delay']"),
        ({"POLITE_FRONTIER_LEASE_TIMEOUT": "x"}, "POLITE_FRONTIER_LEASE_TIMEOUT"),
    ],
)
def test_bad_settings_are_errors_naming_the_setting(settings, message):
    with pytest.raises(SettingsError) as info:
        make(settings)
    assert message in str(info.value), str(info.value)


@pytest.mark.parametrize(
    "meta, message",
    [
        ({"throttling_scopes": 5}, "throttling_scopes"),
        ({"throttling_scopes": {"api": "lots"}}, "throttling_scopes"),
        ({"throttling_scopes": []}, "no scope"),
        ({"throttling_delay": -2}, "throttling_delay"),
        ({"throttling_delay": "later"}, "throttling_delay"),
        ({"depth": "deep"}, "depth"),
    ],
)
def test_bad_meta_is_an_error_naming_the_key(meta, message):
    sched, crawler, spider = make()
    with pytest.raises(ValueError) as info:
        sched.enqueue_request(Request("http://m.example/", meta=meta))
    assert message in str(info.value)
    assert "http://m.example/" in str(info.value)


def test_stats_include_scrapys_names_and_per_scope_figures():
    sched, crawler, spider = make()
    sched.enqueue_request(Request("http://s1.example/"))
    r = sched.next_request()
    finish(sched, r, status=503)
    sched.close("finished")
    stats = crawler.stats.get_stats()
    for key in ("scheduler/enqueued", "scheduler/enqueued/memory", "scheduler/dequeued",
                "scheduler/dequeued/memory", "throttling/scopes", "throttling/triggers",
                "throttling/scope/s1.example/sent", "throttling/scope/s1.example/delay"):
        assert key in stats, key
    assert stats["throttling/triggers"] == 1
