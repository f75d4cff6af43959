"""A Scrapy spider that crawls local sites and writes what it fetched as JSON.

    python crawl_sites.py OUT.json PORT [PORT...] [--set NAME=VALUE ...]

Every setting comes from the command line (`--set`, values parsed as JSON when they
parse); nothing else is configured."""

from __future__ import annotations

import json
import sys
import time

import scrapy
from scrapy.crawler import CrawlerProcess


class SitesSpider(scrapy.Spider):
    name = "sites"

    def __init__(self, ports: str = "", out: str = "", **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [f"http://127.0.0.1:{p}/" for p in ports.split(",") if p]
        self.out = out
        self.fetched: list[str] = []

    def parse(self, response):
        self.fetched.append(response.url)
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)

    def closed(self, reason):
        stats = self.crawler.stats.get_stats()
        with open(self.out, "w") as f:
            json.dump(
                {
                    "reason": reason,
                    "fetched": self.fetched,
                    "requests": stats.get("downloader/request_count", 0),
                    "status_429": stats.get("downloader/response_status_count/429", 0),
                    "retry_max_reached": stats.get("retry/max_reached", 0),
                    "stats": {k: (v if isinstance(v, (int, float, str)) else str(v)) for k, v in stats.items()},
                },
                f,
            )


def main(argv: list[str]) -> None:
    out, *rest = argv
    ports, settings = [], {"LOG_LEVEL": "INFO"}
    it = iter(rest)
    for arg in it:
        if arg == "--set":
            name, _, value = next(it).partition("=")
            try:
                settings[name] = json.loads(value)
            except ValueError:
                settings[name] = value
        else:
            ports.append(arg)
    started = time.monotonic()
    process = CrawlerProcess(settings)
    process.crawl(SitesSpider, ports=",".join(ports), out=out)
    process.start()
    with open(out) as f:
        result = json.load(f)
    result["seconds"] = round(time.monotonic() - started, 1)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1:])
