"""A crawl frontier for any Python crawler (no Scrapy needed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Union

from . import _native
from ._settings import SettingsError, translate_error

Scopes = Union[str, Iterable[str], Mapping[str, float], None]


@dataclass
class Lease:
    """A request handed out by :meth:`Frontier.poll`: send it, then call
    :meth:`Frontier.complete` (or :meth:`Frontier.retry`) with its ``id``."""

    id: int
    url: str
    method: str = "GET"
    callback: Optional[str] = None
    priority: int = 0
    depth: int = 0
    start: bool = False
    dont_filter: bool = False
    scopes: list = field(default_factory=list)
    body: bytes = b""
    meta: Optional[bytes] = None


class Frontier:
    """Priorities, a duplicate filter (Scrapy's fingerprints) and per-scope politeness.

    ``settings`` takes the keys of the behaviour contract in snake_case
    (``download_delay``, ``concurrent_requests_per_domain``, ``scopes``, ``backoff_*``,
    ...). ``path`` keeps the queue in a SQLite file (a killed process loses nothing),
    ``redis_url`` in Redis (many processes share one queue and one budget).

    >>> f = Frontier({"download_delay": 1.0, "randomize_download_delay": False})
    >>> f.push("https://example.com/a"), f.push("https://example.com/a#x")
    (True, False)
    >>> lease = f.poll()
    >>> lease.url
    'https://example.com/a'
    >>> f.complete(lease.id, status=200)
    True
    """

    def __init__(
        self,
        settings: Optional[Mapping[str, Any]] = None,
        *,
        path: Optional[str] = None,
        redis_url: Optional[str] = None,
        crawl: str = "crawl",
        dupefilter: str = "exact",
        lease_timeout: float = 300.0,
    ):
        import json

        try:
            text = json.dumps(dict(settings or {}))
        except (TypeError, ValueError) as e:
            raise SettingsError(f"settings must be JSON-like data: {e}") from None
        store = "redis" if redis_url else ("sqlite" if path else "memory")
        try:
            self._core = _native.Core(
                text, store=store, path=path, url=redis_url, crawl=crawl,
                dupefilter=dupefilter, lease_timeout=lease_timeout,
            )
        except ValueError as e:
            raise SettingsError(str(e)) from None

    def push(
        self,
        url: str,
        *,
        method: str = "GET",
        callback: Optional[str] = None,
        priority: int = 0,
        depth: int = 0,
        start: bool = False,
        dont_filter: bool = False,
        dont_track: bool = False,
        dont_throttle: bool = False,
        scopes: Scopes = None,
        delay: Optional[float] = None,
        body: Optional[bytes] = None,
        meta: Optional[bytes] = None,
    ) -> bool:
        """Queues a request; False when it is a duplicate (or deeper than ``depth_limit``)."""
        return self._core.push(
            url, method, callback, priority, depth, start, dont_filter, dont_track,
            dont_throttle, scopes, delay, body, meta,
        ) >= 0

    def poll(self) -> Union[Lease, float, None]:
        """The next request that may be sent now; else the seconds until one may (a
        float), or None when everything waits for a completion or nothing is queued."""
        got = self._core.poll()
        if isinstance(got, dict):
            return Lease(**got)
        return got

    def complete(self, lease_id: int, *, status: Optional[int] = None,
                 headers: Optional[Iterable] = None, error: Optional[str] = None) -> bool:
        """Ends a lease: ``status`` (and ``headers``, for Retry-After/RateLimit) of a
        response, ``error`` (``"timeout"``, ``"connection"``, ``"data_loss"``) of a
        failure, or neither for a request given up."""
        return self._core.complete(lease_id, status, _pairs(headers), error)

    def retry(self, lease_id: int, *, status: Optional[int] = None,
              headers: Optional[Iterable] = None, error: Optional[str] = None,
              priority_adjust: int = -1) -> bool:
        """Queues a lease again (skipping the duplicate filter), feeding its outcome."""
        return self._core.retry(lease_id, status, _pairs(headers), error, priority_adjust)

    def __len__(self) -> int:
        return len(self._core)

    def in_flight(self) -> int:
        return self._core.in_flight()

    def stats(self) -> dict:
        """Scrapy-named counters: ``scheduler/enqueued``, ``dupefilter/filtered``, ..."""
        return self._core.stats()

    def scope_stats(self, scope: str) -> Optional[dict]:
        return self._core.scope_stats(scope)

    def delay_scope(self, scope: str, seconds: float) -> None:
        self._core.delay_scope(scope, seconds)

    def handle_crawl_delay(self, scope: str, seconds: float) -> str:
        return self._core.handle_crawl_delay(scope, seconds)

    def import_seen(self, text: str) -> int:
        """Marks the fingerprints of a Scrapy ``requests.seen`` file as seen."""
        return self._core.import_seen(text)

    def commit(self) -> None:
        self._core.commit()

    def close(self) -> None:
        self._core.close()

    def __enter__(self) -> "Frontier":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _pairs(headers: Any) -> Optional[list]:
    if headers is None:
        return None
    if hasattr(headers, "items"):
        out = []
        for name, value in headers.items():
            if isinstance(value, (list, tuple)):
                out.extend((name, v) for v in value)
            else:
                out.append((name, value))
        return out
    return list(headers)


__all__ = ["Frontier", "Lease", "SettingsError", "translate_error"]
