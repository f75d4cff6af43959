"""polite_frontier: Scrapy's scheduler and throttling design, in Rust.

- ``polite_frontier.scrapy.Scheduler``: a drop-in Scrapy scheduler
  (``SCHEDULER = "polite_frontier.scrapy.Scheduler"``).
- :class:`Frontier`: a crawl frontier for any Python crawler.
- :class:`Throttler`: per-scope politeness for asyncio code (``async with throttler.acquire(...)``).
"""

from ._native import request_fingerprint, url_scope
from ._settings import SettingsError
from .frontier import Frontier, Lease
from .throttle import Permit, Throttler

__all__ = [
    "Frontier",
    "Lease",
    "Permit",
    "SettingsError",
    "Throttler",
    "request_fingerprint",
    "url_scope",
]
__version__ = "0.1.0"
