"""Per-scope politeness for asyncio code, without a queue.

>>> import asyncio
>>> async def main():
...     throttler = Throttler({"download_delay": 0.05, "randomize_download_delay": False})
...     async with throttler.acquire("api.example.com") as permit:
...         permit.finish(status=200)
...     return throttler.scope_stats("api.example.com")["sent"]
>>> asyncio.run(main())
1
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Iterable, Mapping, Optional, Union

from . import _native
from ._settings import SettingsError

Scopes = Union[str, Iterable[str], Mapping[str, float]]


def _scope_list(scopes: Scopes) -> list:
    if isinstance(scopes, str):
        return [(scopes, 1.0)]
    if isinstance(scopes, Mapping):
        return [(str(k), float(v)) for k, v in scopes.items()]
    out = [(s, 1.0) for s in scopes]
    for name, _ in out:
        if not isinstance(name, str):
            raise TypeError(f"a scope name must be a str, got {name!r}")
    return out


class Permit:
    """A reserved send on every scope of a request. Finish it with the outcome (or let
    the ``async with`` block end, which releases it without feeding backoff)."""

    def __init__(self, throttler: "Throttler", permit_id: int):
        self._throttler = throttler
        self.id = permit_id
        self._done = False

    def finish(self, *, status: Optional[int] = None, headers: Any = None,
               error: Optional[str] = None) -> None:
        """Releases the permit and feeds its outcome: ``status`` and ``headers`` of a
        response (429/5xx back off; Retry-After and RateLimit are obeyed), or ``error``
        (``"timeout"``, ``"connection"``, ``"data_loss"``)."""
        if self._done:
            return
        self._done = True
        self._throttler._release(self.id, status, headers, error)

    async def __aenter__(self) -> "Permit":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is not None and isinstance(exc, asyncio.TimeoutError):
            self.finish(error="timeout")
        else:
            self.finish()


class _Acquire:
    def __init__(self, throttler: "Throttler", scopes: Scopes, dont_track: bool, dont_throttle: bool):
        self._args = (throttler, scopes, dont_track, dont_throttle)
        self._permit: Optional[Permit] = None

    def __await__(self):
        return self._get().__await__()

    async def _get(self) -> Permit:
        throttler, scopes, dont_track, dont_throttle = self._args
        return await throttler._acquire(scopes, dont_track, dont_throttle)

    async def __aenter__(self) -> Permit:
        self._permit = await self._get()
        return self._permit

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._permit is not None
        await self._permit.__aexit__(exc_type, exc, tb)


class Throttler:
    """Waits, first come first served per scope, until every scope of a request allows
    a send; each outcome feeds backoff. Use from one event loop.

    ``permit = await throttler.acquire(scopes)`` then ``permit.finish(status=...)``, or
    ``async with throttler.acquire(scopes) as permit: ...``.
    """

    def __init__(self, settings: Optional[Mapping[str, Any]] = None):
        try:
            self._native = _native.NativeThrottler(json.dumps(dict(settings or {})))
        except (TypeError, ValueError) as e:
            raise SettingsError(str(e)) from None
        self._waiters: dict[int, asyncio.Future] = {}
        self._timer: Optional[asyncio.TimerHandle] = None
        self._timer_at: Optional[float] = None

    def acquire(self, scopes: Scopes, *, dont_track: bool = False, dont_throttle: bool = False) -> _Acquire:
        return _Acquire(self, scopes, dont_track, dont_throttle)

    async def _acquire(self, scopes: Scopes, dont_track: bool, dont_throttle: bool) -> Permit:
        kind, ident, wait = self._native.acquire_or_enqueue(_scope_list(scopes), dont_track, dont_throttle)
        if kind == "permit":
            return Permit(self, ident)
        ticket = ident
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        self._waiters[ticket] = future
        self._arm(wait)
        try:
            permit_id = await future
        except BaseException:
            self._waiters.pop(ticket, None)
            if future.done() and not future.cancelled() and future.exception() is None:
                self._native.release(future.result())
            else:
                self._native.cancel(ticket)
            self._wake()
            raise
        return Permit(self, permit_id)

    def _release(self, permit_id: int, status: Any, headers: Any, error: Any) -> None:
        if headers is not None and hasattr(headers, "items"):
            headers = [(k, v) for k, v in headers.items()]
        self._native.release(permit_id, status, headers, error)
        self._wake()

    def _arm(self, wait: Optional[float]) -> None:
        timeout = self._native.poll_timeout()
        if wait is not None:
            timeout = wait if timeout is None else min(timeout, wait)
        if timeout is None:
            return
        loop = asyncio.get_running_loop()
        at = loop.time() + max(timeout, 0.0)
        if self._timer is not None and self._timer_at is not None and self._timer_at <= at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = loop.call_at(at, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self._native.handle_timeout()
        self._wake()

    def _wake(self) -> None:
        """Polls the tickets the engine says may go now, in order."""
        for ticket in self._native.wakeups():
            future = self._waiters.get(ticket)
            if future is None or future.done():
                continue
            kind, permit_id, wait = self._native.poll_ticket(ticket)
            if kind == "permit":
                del self._waiters[ticket]
                future.set_result(permit_id)
            elif kind == "unknown":
                del self._waiters[ticket]
                future.set_exception(RuntimeError("throttler ticket lost"))
        if self._waiters:
            try:
                self._arm(None)
            except RuntimeError:  # no running loop (called at shutdown)
                pass

    def scope_stats(self, scope: str) -> Optional[dict]:
        return self._native.scope_stats(scope)

    def delay_scope(self, scope: str, seconds: float) -> None:
        self._native.delay_scope(scope, seconds)
        self._wake()

    def in_flight(self) -> int:
        return self._native.in_flight()


__all__ = ["Permit", "Throttler"]
