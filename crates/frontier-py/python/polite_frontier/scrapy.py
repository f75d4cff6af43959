"""A drop-in Scrapy scheduler: ``SCHEDULER = "polite_frontier.scrapy.Scheduler"``.

Requests go through the Rust frontier: priorities, ``dont_filter``, start requests after
discovered ones of equal priority, Scrapy's request fingerprint (custom fingerprinters
and a job's ``requests.seen`` included). ``next_request`` hands out only requests whose
throttling scopes (the host by default) allow a send now, and wakes the engine exactly
when the next one becomes ready. Every response and download error feeds backoff
(``Retry-After``, ``RateLimit`` headers, 429/5xx), rampup and quotas.

Settings (all optional): Scrapy's ``DOWNLOAD_DELAY``, ``DOWNLOAD_DELAY_JITTER``,
``CONCURRENT_REQUESTS``, ``CONCURRENT_REQUESTS_PER_DOMAIN``, ``CONCURRENT_REQUESTS_PER_IP``;
the throttling settings ``THROTTLING_SCOPES``, ``BACKOFF_*``, ``RAMPUP_BACKOFF_TARGET``,
``THROTTLING_*``, ``DELAYED_REQUESTS_WARN_THRESHOLD``; and this scheduler's own
``POLITE_FRONTIER_REDIS_URL``, ``POLITE_FRONTIER_CRAWL``, ``POLITE_FRONTIER_LEASE_TIMEOUT``,
``POLITE_FRONTIER_STATS_SCOPES``. Request meta keys: ``throttling_scopes``,
``throttling_delay``, ``throttling_dont_track``, ``dont_throttle``.
"""

from __future__ import annotations

import logging
import pickle
import time
from pathlib import Path
from typing import Any

from scrapy import Request, signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.job import job_dir
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.request import RequestFingerprinter, request_from_dict

from . import _native
from ._settings import SettingsError, frontier_settings, to_json, translate_error

logger = logging.getLogger(__name__)

#: The SQLite file of a job, inside ``JOBDIR``.
JOB_FILE = "polite-frontier.sqlite3"


def _exception_classes() -> list[tuple[type, str]]:
    """Exception classes of failed downloads and the error kind each one is."""
    out: list[tuple[type, str]] = []

    def add(module: str, names: list[str], kind: str) -> None:
        try:
            mod = __import__(module, fromlist=names)
        except ImportError:
            return
        for name in names:
            cls = getattr(mod, name, None)
            if isinstance(cls, type):
                out.append((cls, kind))

    add("scrapy.exceptions", ["DownloadTimeoutError"], "timeout")
    add("scrapy.exceptions", ["ResponseDataLossError"], "data_loss")
    add("scrapy.exceptions", ["DownloadConnectionRefusedError", "DownloadFailedError"], "connection")
    add("twisted.internet.error", ["TimeoutError", "TCPTimedOutError"], "timeout")
    add("twisted.internet.defer", ["TimeoutError"], "timeout")
    add("twisted.web._newclient", ["ResponseFailed"], "connection")
    add("twisted.internet.error", ["ConnectionRefusedError", "ConnectionDone", "ConnectError", "ConnectionLost", "DNSLookupError"], "connection")
    add("scrapy.core.downloader.handlers.http11", ["TunnelError"], "connection")
    return out


_KNOWN_EXCEPTIONS = _exception_classes()


def _kind_of_class(cls: type) -> str:
    for known, kind in _KNOWN_EXCEPTIONS:
        if issubclass(cls, known):
            return kind
    return f"{cls.__module__}.{cls.__qualname__}"


def _exception_kinds(name: str, value: Any) -> list[tuple[type, str]]:
    if isinstance(value, (str, bytes, type)) or not hasattr(value, "__iter__"):
        raise SettingsError(f"{name} must be a list of exception classes or import paths, got {value!r}")
    out = []
    for item in value:
        cls = item
        if isinstance(item, str):
            try:
                cls = load_object(item)
            except Exception as e:  # NameError, ImportError, ValueError
                raise SettingsError(f"{name}: cannot import {item!r}: {e}") from None
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise SettingsError(f"{name}: {item!r} is not an exception class")
        out.append((cls, _kind_of_class(cls)))
    if not out:
        raise SettingsError(f"{name} must list at least one exception class")
    return out


def _kinds_for_engine(name: str, value: Any) -> list[str]:
    return sorted({kind for _, kind in _exception_kinds(name, value)})


_RATE_HEADERS = (b"retry-after", b"ratelimit", b"x-ratelimit")


def _rate_headers(headers: Any) -> list[tuple[bytes, bytes]]:
    """The rate-limit headers of a Scrapy response, as (name, value) pairs."""
    out = []
    if not headers:
        return out
    for name, values in headers.items():
        lower = name.lower() if isinstance(name, bytes) else str(name).lower().encode()
        if lower.startswith(_RATE_HEADERS):
            if isinstance(values, (bytes, str)):
                values = [values]
            for value in values:
                out.append((lower, value))
    return out


class _CompletionMiddleware:
    """Installed by the scheduler next to the download handlers: the first to see each
    response and each download error."""

    def __init__(self, scheduler: Scheduler):
        self._scheduler = scheduler

    def process_response(self, request: Request, response: Any, spider: Any = None) -> Any:
        self._scheduler._outcome(request, status=response.status, headers=_rate_headers(response.headers))
        return response

    def process_exception(self, request: Request, exception: BaseException, spider: Any = None) -> None:
        if isinstance(exception, IgnoreRequest):
            self._scheduler._outcome(request)
        else:
            self._scheduler._outcome(request, error=self._scheduler._error_kind(exception))
        return None


class Scheduler(BaseScheduler):
    """Scrapy's scheduler interface on the Rust frontier. See the module docs."""

    def __init__(
        self,
        dupefilter: Any = None,
        jobdir: str | None = None,
        dqclass: Any = None,
        mqclass: Any = None,
        logunser: bool = False,
        stats: Any = None,
        pqclass: Any = None,
        crawler: Any = None,
    ):
        # Scrapy's signature, so that subclasses and callers of Scrapy's scheduler work;
        # the queue classes are not used (the frontier is the queue).
        from scrapy.dupefilters import BaseDupeFilter, RFPDupeFilter
        from scrapy.settings import Settings

        self.crawler = crawler
        settings = crawler.settings if crawler is not None else Settings()
        self.stats = stats if stats is not None else (getattr(crawler, "stats", None) or _NoStats())
        self._exceptions = _exception_kinds(
            "BACKOFF_EXCEPTIONS",
            settings.get("BACKOFF_EXCEPTIONS") or [cls for cls, _ in _KNOWN_EXCEPTIONS],
        )
        doc = frontier_settings(settings, _kinds_for_engine)
        doc["backoff_exceptions"] = sorted({kind for _, kind in self._exceptions})
        # Scrapy's DepthMiddleware already lowers priorities by DEPTH_PRIORITY and
        # enforces DEPTH_LIMIT: the frontier must not do it a second time.
        self._settings_json = to_json(doc)
        self._jobdir = jobdir
        self._redis_url = settings.get("POLITE_FRONTIER_REDIS_URL")
        self._crawl_name = settings.get("POLITE_FRONTIER_CRAWL")
        self._lease_timeout = _seconds_setting(settings, "POLITE_FRONTIER_LEASE_TIMEOUT", 300.0)
        if self._lease_timeout <= 0:
            raise SettingsError("POLITE_FRONTIER_LEASE_TIMEOUT must be > 0 seconds")
        stats_scopes = settings.get("POLITE_FRONTIER_STATS_SCOPES", 20)
        try:
            self._stats_scopes = int(stats_scopes)
        except (TypeError, ValueError):
            raise SettingsError(f"POLITE_FRONTIER_STATS_SCOPES must be a whole number, got {stats_scopes!r}") from None

        # Duplicate filter: Scrapy's default filter and fingerprinter run in Rust (same
        # fingerprints); a custom fingerprinter is called here and its fingerprint
        # filtered in Rust; any other filter class is used as it is.
        self._df = None
        self._fingerprinter = None
        self._dupefilter = "exact"
        df_cls = type(dupefilter) if dupefilter is not None else load_object(settings["DUPEFILTER_CLASS"])
        if df_cls is BaseDupeFilter:
            self._dupefilter = "disabled"
        elif df_cls is RFPDupeFilter:
            fingerprinter = getattr(dupefilter, "fingerprinter", None) or getattr(crawler, "request_fingerprinter", None)
            if fingerprinter is not None and type(fingerprinter) is not RequestFingerprinter:
                self._fingerprinter = fingerprinter
        else:
            self._df = dupefilter if dupefilter is not None else build_from_crawler(df_cls, crawler)
            self._dupefilter = "disabled"
        self._debug_dupes = settings.getbool("DUPEFILTER_DEBUG")
        self._logged_dupe = False
        self._logunser = logunser
        self.core: Any = None
        self.spider: Any = None
        self._leases: dict[int, tuple[int, Request]] = {}
        self._outcomes: dict[int, tuple[Any, Any, Any]] = {}
        self._wake_call: Any = None
        self._wake_at: float | None = None
        self._deferred_ack = False
        self._store_stat = "memory"
        self._autothrottle = settings.getbool("AUTOTHROTTLE_ENABLED")
        # enqueued, dequeued, filtered since the last sync into the stats collector
        # (counted here, added in bulk: the collector's calls cost more than a push).
        self._counts = [0, 0, 0]

    @classmethod
    def from_crawler(cls, crawler: Any) -> Scheduler:
        return cls(
            jobdir=job_dir(crawler.settings),
            logunser=crawler.settings.getbool("SCHEDULER_DEBUG"),
            stats=crawler.stats,
            crawler=crawler,
        )

    # -- life cycle ---------------------------------------------------------------

    def open(self, spider: Any) -> None:
        self.spider = spider
        try:
            if self._redis_url:
                crawl = self._crawl_name or spider.name
                self.core = _native.Core(
                    self._settings_json, store="redis", url=str(self._redis_url), crawl=str(crawl),
                    dupefilter=self._dupefilter, lease_timeout=self._lease_timeout,
                )
                self._store_stat = "redis"
            elif self._jobdir:
                Path(self._jobdir).mkdir(parents=True, exist_ok=True)
                self.core = _native.Core(
                    self._settings_json, store="sqlite", path=str(Path(self._jobdir) / JOB_FILE),
                    dupefilter=self._dupefilter,
                )
                self._store_stat = "disk"
            else:
                self.core = _native.Core(self._settings_json, store="memory", dupefilter=self._dupefilter)
        except ValueError as e:
            raise SettingsError(translate_error(str(e))) from None
        self.core.bind_scrapy(spider, Request)
        if self._jobdir and not self._redis_url and self._dupefilter == "exact":
            seen = Path(self._jobdir) / "requests.seen"
            if seen.exists():
                n = self.core.import_seen(seen.read_text(), custom=self._fingerprinter is not None)
                logger.info("Imported %d fingerprints from %s", n, seen, extra={"spider": spider})
        if self._jobdir and (Path(self._jobdir) / "requests.queue").exists():
            logger.warning(
                "%s holds a queue of Scrapy's default scheduler (requests.queue): "
                "polite_frontier does not resume it", self._jobdir, extra={"spider": spider},
            )
        queued = len(self.core)
        if queued and self._store_stat != "memory":
            logger.info("Resuming crawl (%d requests scheduled)", queued, extra={"spider": spider})
        self._hook_engine()
        if self._df is not None:
            return self._df.open()
        return None

    def _hook_engine(self) -> None:
        """Completions: a downloader middleware next to the handlers sees every response
        and error; the request is acknowledged once the engine is done with it (its
        callback's requests are queued by then), so a crash never loses them."""
        if self.crawler is None:
            return
        try:
            engine = self.crawler.engine
        except RuntimeError:  # no engine yet (a scheduler used on its own)
            engine = None
        downloader = getattr(engine, "downloader", None)
        manager = getattr(downloader, "middleware", None)
        if manager is not None and hasattr(manager, "_add_middleware"):
            manager._add_middleware(_CompletionMiddleware(self))
        else:
            self.crawler.signals.connect(self._on_response_downloaded, signal=signals.response_downloaded)
        self.crawler.signals.connect(self._on_left_downloader, signal=signals.request_left_downloader)
        slot = getattr(engine, "_slot", None)
        if slot is not None and hasattr(slot, "remove_request"):
            original = slot.remove_request

            def remove_request(request: Request, _original=original) -> None:
                try:
                    self._ack(request)
                finally:
                    _original(request)

            slot.remove_request = remove_request
            self._deferred_ack = True
        # The scheduler spaces and limits requests per scope: the downloader's own
        # per-slot delay and concurrency would apply them a second time.
        if isinstance(getattr(downloader, "_delay", None), (int, float)):
            downloader._delay = 0.0
            total = getattr(downloader, "total_concurrency", None)
            domain = getattr(downloader, "domain_concurrency", None)
            if isinstance(total, int) and isinstance(domain, int) and total > domain:
                downloader.domain_concurrency = total
        if self._autothrottle:
            logger.warning(
                "AUTOTHROTTLE_ENABLED is on with polite_frontier's scheduler: both throttle; "
                "turn AutoThrottle off (the scheduler backs off and ramps up by itself)"
            )

    def close(self, reason: str) -> Any:
        if self._wake_call is not None:
            try:
                self._wake_call.cancel()
            except Exception:
                pass
            self._wake_call = None
        if self.core is not None:
            # Completions the engine never acknowledged still feed the throttler.
            self._record_stats()
            self.core.close()
        if self._df is not None:
            return self._df.close(reason)
        return None

    # -- the scheduler interface ---------------------------------------------------

    def has_pending_requests(self) -> bool:
        # With Redis, other workers' leases count: a dead worker's are delivered again.
        return self.core is not None and self.core.pending() > 0

    def __len__(self) -> int:
        return len(self.core) if self.core is not None else 0

    def enqueue_request(self, request: Request) -> bool:
        if self._df is not None and not request.dont_filter and self._df.request_seen(request):
            self._df.log(request, self.spider)
            return False
        fp = None
        if self._fingerprinter is not None and not request.dont_filter:
            fp = self._fingerprinter.fingerprint(request).hex()
        try:
            result = self.core.push_scrapy(request, None, fp)
            if result == _native.NEEDS_PAYLOAD:
                try:
                    payload = pickle.dumps(request.to_dict(spider=self.spider), protocol=4)
                except Exception as e:
                    if self._logunser:
                        logger.warning(
                            "Unable to serialize request: %(request)s - reason: %(reason)s"
                            " - no more unserializable requests will be logged (stats being collected)",
                            {"request": request, "reason": e}, exc_info=True, extra={"spider": self.spider},
                        )
                        self._logunser = False
                    self.stats.inc_value("scheduler/unserializable")
                    result = self.core.push_scrapy_in_memory(request, fp)
                    if result >= 0:
                        self.stats.inc_value("scheduler/enqueued/memory")
                        self.stats.inc_value("scheduler/enqueued")
                        return True
                else:
                    result = self.core.push_scrapy(request, payload, fp)
        except ValueError as e:
            raise ValueError(f"{e} (request {request!r})") from None
        if result >= 0:
            self._counts[0] += 1
            return True
        if result == _native.DUPLICATE:
            self._counts[2] += 1
            if self._debug_dupes:
                logger.debug("Filtered duplicate request: %(request)s", {"request": request}, extra={"spider": self.spider})
            elif not self._logged_dupe:
                logger.debug(
                    "Filtered duplicate request: %(request)s - no more duplicates will be shown"
                    " (see DUPEFILTER_DEBUG to show all duplicates)",
                    {"request": request}, extra={"spider": self.spider},
                )
                self._logged_dupe = True
        return False

    def next_request(self) -> Request | None:
        while True:
            polled = self.core.poll_scrapy()
            if polled is None or isinstance(polled, float):
                self._sync_stats()
            if polled is None:
                # Everything waits for a completion (which wakes the engine), or nothing
                # is queued; a Redis frontier also looks again after its recheck time.
                timeout = self.core.poll_timeout()
                if timeout is not None:
                    self._wake_in(timeout)
                return None
            if isinstance(polled, float):
                self._wake_in(polled)
                return None
            lease_id, obj, url, method, callback, priority, dont_filter, depth, start, shape = polled
            try:
                request = self._rebuild(obj, url, method, callback, priority, dont_filter, depth, start, shape)
            except Exception as e:
                logger.error(
                    "Dropping a queued request that cannot be rebuilt (%s: %s): %s",
                    type(e).__name__, e, url, extra={"spider": self.spider},
                )
                self.stats.inc_value("scheduler/undecodable")
                self.core.complete(lease_id)
                continue
            self._leases[id(request)] = (lease_id, request)
            self._counts[1] += 1
            return request

    # -- internals --------------------------------------------------------------------

    def _rebuild(self, obj, url, method, callback, priority, dont_filter, depth, start, shape) -> Request:
        if obj is None:
            meta = None
            if shape:
                meta = {}
                if "d" in shape:
                    meta["depth"] = depth
                if "s" in shape:
                    meta["is_start_request"] = True
            return Request(
                url,
                callback=getattr(self.spider, callback) if callback else None,
                method=method,
                priority=priority,
                dont_filter=dont_filter,
                meta=meta,
            )
        if isinstance(obj, bytes):
            return request_from_dict(pickle.loads(obj), spider=self.spider)
        if isinstance(obj, str):
            raise ValueError("an unserializable request of an earlier process was lost")
        return obj

    def _wake_in(self, delay: float) -> None:
        """Wakes the engine in `delay` seconds (it would otherwise look again only on its
        5-second heartbeat)."""
        delay = max(float(delay), 0.0005)
        when = time.monotonic() + delay
        if self._wake_at is not None and self._wake_at <= when + 0.0005:
            return
        if self._wake_call is not None:
            try:
                self._wake_call.cancel()
            except Exception:
                pass
        self._wake_call = _call_later(delay, self._wake)
        self._wake_at = when

    def _wake(self) -> None:
        self._wake_call = None
        self._wake_at = None
        try:
            engine = self.crawler.engine
        except (RuntimeError, AttributeError):
            return
        slot = getattr(engine, "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

    def _error_kind(self, exception: BaseException) -> str:
        for cls, kind in self._exceptions:
            if isinstance(exception, cls):
                return kind
        cls = type(exception)
        return f"{cls.__module__}.{cls.__qualname__}"

    def _outcome(self, request: Request, status: Any = None, headers: Any = None, error: Any = None) -> None:
        """The downloader's answer for a request; acknowledged by `_ack`."""
        if id(request) not in self._leases:
            return
        if self._deferred_ack:
            self._outcomes[id(request)] = (status, headers, error)
        else:
            self._complete(request, status, headers, error)

    def _ack(self, request: Request) -> None:
        key = id(request)
        if key not in self._leases:
            return
        status, headers, error = self._outcomes.pop(key, (None, None, None))
        self._complete(request, status, headers, error)

    def _complete(self, request: Request, status: Any, headers: Any, error: Any) -> None:
        entry = self._leases.pop(id(request), None)
        self._outcomes.pop(id(request), None)
        if entry is None or entry[1] is not request or self.core is None:
            return
        self.core.complete(entry[0], status, headers, error)
        if self._store_stat == "disk":
            # Durable now: a crash repeats only the requests still in flight.
            self.core.commit()

    def _on_response_downloaded(self, response: Any, request: Request, spider: Any = None) -> None:
        self._outcome(request, status=response.status, headers=_rate_headers(response.headers))

    def _on_left_downloader(self, request: Request, spider: Any = None) -> None:
        # A request that left the downloader without an answer seen by the middleware
        # (an error raised before it): record it as abandoned unless an outcome exists.
        key = id(request)
        if key in self._leases and key not in self._outcomes and not self._deferred_ack:
            self._complete(request, None, None, None)

    def _sync_stats(self) -> None:
        enqueued, dequeued, filtered = self._counts
        if enqueued:
            self.stats.inc_value("scheduler/enqueued", enqueued)
            self.stats.inc_value(f"scheduler/enqueued/{self._store_stat}", enqueued)
        if dequeued:
            self.stats.inc_value("scheduler/dequeued", dequeued)
            self.stats.inc_value(f"scheduler/dequeued/{self._store_stat}", dequeued)
        if filtered:
            self.stats.inc_value("dupefilter/filtered", filtered)
        self._counts = [0, 0, 0]

    def _record_stats(self) -> None:
        self._sync_stats()
        try:
            for name, value in self.core.stats().items():
                if name.startswith(("scheduler/leased", "scheduler/acked", "scheduler/redelivered", "scheduler/retried")):
                    self.stats.set_value(name, value)
            scopes = self.core.scopes()
        except Exception as e:  # a Redis server gone at close: the figures are lost
            logger.warning("could not read the frontier's figures: %s", e)
            return
        self.stats.set_value("throttling/scopes", len(scopes))
        self.stats.set_value("throttling/triggers", sum(s["triggers"] for _, s in scopes))
        self.stats.set_value("throttling/backing_off", sum(1 for _, s in scopes if s["level"] > 0))
        busiest = sorted(scopes, key=lambda item: (-item[1]["sent"], item[0]))[: max(self._stats_scopes, 0)]
        for name, s in busiest:
            for key in ("sent", "triggers", "level", "concurrency"):
                self.stats.set_value(f"throttling/scope/{name}/{key}", s[key])
            self.stats.set_value(f"throttling/scope/{name}/delay", round(s["delay"], 3))

    def throttling_stats(self) -> dict[str, dict[str, Any]]:
        """The throttler's figures per scope (in-process stores)."""
        return dict(self.core.scopes())


class _NoStats:
    """Stats of a scheduler built without a crawler: counted nowhere."""

    def inc_value(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_value(self, *args: Any, **kwargs: Any) -> None:
        pass


def _seconds_setting(settings: Any, name: str, default: float) -> float:
    value = settings.get(name)
    if value is None:
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        raise SettingsError(f"{name} must be a number of seconds, got {value!r}") from None


def _call_later(delay: float, func: Any) -> Any:
    try:
        from scrapy.utils.asyncio import call_later
    except ImportError:  # Scrapy before 2.14
        from twisted.internet import reactor

        return reactor.callLater(delay, func)
    return call_later(delay, func)
