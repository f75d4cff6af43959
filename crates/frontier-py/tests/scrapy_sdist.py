"""Runs Scrapy's own scheduler tests, from the source distribution of the installed
Scrapy version, against polite_frontier.scrapy.Scheduler.

    python scrapy_sdist.py WORKDIR [pytest args...]

It downloads the sdist (`pip download scrapy==VERSION --no-deps --no-binary :all:`),
unpacks it in WORKDIR, writes adapted copies of tests/test_scheduler.py and
tests/test_scheduler_base.py next to the originals, and runs them with Scrapy's own
conftest.py and pytest configuration (warnings are errors there). Each adaptation is a
textual replacement listed in ADAPTATIONS with its reason; a replacement that no longer
matches the upstream file is an error, so the list cannot silently go stale.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import scrapy

POLITE = "polite_frontier.scrapy.Scheduler"

# (file, old text, new text, why)
ADAPTATIONS = [
    (
        "test_scheduler.py",
        "from scrapy.core.scheduler import Scheduler\n",
        "from polite_frontier.scrapy import Scheduler\n",
        "the scheduler under test is polite_frontier's (every test that builds "
        "`Scheduler` builds ours)",
    ),
    (
        "test_scheduler.py",
        '            "DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter",\n        }\n        super().__init__(Spider, settings)',
        '            "DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter",\n'
        '            "THROTTLING_SCOPE_CONCURRENCY": 0,\n        }\n        super().__init__(Spider, settings)',
        "our scheduler enforces per-slot concurrency: the downloader-aware test takes "
        "two requests of slots named 'a', 'b', 'c' without completing any, and such "
        "scopes (no dot: neither host nor IP) default to one request in flight; 0 lifts "
        "the limit",
    ),
    (
        "test_scheduler.py",
        "class TestMigration:\n",
        '@pytest.mark.skip(reason="checks that Scrapy\'s two priority-queue classes refuse '
        "each other's saved state; polite_frontier has no queue classes (one SQLite "
        'file per JOBDIR)")\nclass TestMigration:\n',
        "not applicable: about SCHEDULER_PRIORITY_QUEUE classes, which we do not use",
    ),
    (
        "test_scheduler.py",
        "class TestIncompatibility:\n",
        '@pytest.mark.skip(reason="DownloaderAwarePriorityQueue rejects '
        "CONCURRENT_REQUESTS_PER_IP; polite_frontier supports per-IP scopes, so there "
        'is no error to raise")\nclass TestIncompatibility:\n',
        "not applicable: an error of a Scrapy queue class we replace",
    ),
    (
        "test_scheduler.py",
        '                "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",\n                "DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter",\n            },',
        '                "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",\n                "DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter",\n'
        f'                "SCHEDULER": "{POLITE}",\n            }},',
        "the integration crawl builds its scheduler from settings: point SCHEDULER at ours",
    ),
    (
        "test_scheduler.py",
        '{"JOBDIR": str(tmp_path), "SCHEDULER_DEBUG": True}',
        f'{{"JOBDIR": str(tmp_path), "SCHEDULER_DEBUG": True, "SCHEDULER": "{POLITE}"}}',
        "the unserializable-request crawl builds its scheduler from settings: point "
        "SCHEDULER at ours",
    ),
    (
        "test_scheduler_base.py",
        "class TestSimpleSchedulerCrawl(TestMinimalSchedulerCrawl):\n    scheduler_cls = SimpleScheduler\n",
        "class TestSimpleSchedulerCrawl(TestMinimalSchedulerCrawl):\n    scheduler_cls = SimpleScheduler\n\n\n"
        "from polite_frontier.scrapy import Scheduler as PoliteScheduler  # noqa: E402\n\n\n"
        "class TestPoliteSchedulerInterface(InterfaceCheckMixin):\n"
        "    def setup_method(self):\n"
        "        self.scheduler = PoliteScheduler.from_crawler(get_crawler(Spider))\n\n\n"
        "class TestPoliteSchedulerCrawl(TestMinimalSchedulerCrawl):\n"
        f'    scheduler_cls = "{POLITE}"\n',
        "the file tests example schedulers; run its interface check and its crawl test "
        "(every path scraped once) on ours too",
    ),
]


def fetch_sdist(workdir: Path) -> Path:
    version = scrapy.__version__
    root = workdir / f"scrapy-{version}"
    if (root / "tests" / "test_scheduler.py").exists():
        return root
    workdir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", f"scrapy=={version}", "--no-deps",
         "--no-binary", ":all:", "-d", str(workdir), "-q"],
        check=True,
    )
    with tarfile.open(workdir / f"scrapy-{version}.tar.gz") as tar:
        tar.extractall(workdir)
    return root


def adapt(root: Path) -> list[str]:
    written = []
    texts: dict[str, str] = {}
    for name, old, new, why in ADAPTATIONS:
        text = texts.setdefault(name, (root / "tests" / name).read_text())
        if text.count(old) != 1:
            raise SystemExit(f"adaptation no longer applies to tests/{name} ({why}):\n{old}")
        texts[name] = text.replace(old, new)
    for name, text in texts.items():
        target = root / "tests" / name.replace(".py", "_polite.py")
        target.write_text(text)
        written.append(str(target.relative_to(root)))
    return written


def main() -> int:
    workdir = Path(sys.argv[1])
    root = fetch_sdist(workdir)
    files = adapt(root)
    print(f"Scrapy {scrapy.__version__} scheduler tests, adapted for {POLITE}:")
    for name, _, _, why in ADAPTATIONS:
        print(f"  - tests/{name}: {why}")
    # The package under test must come from site-packages, not from a source tree.
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *files, *sys.argv[2:]],
        cwd=root,
    ).returncode


if __name__ == "__main__":
    sys.exit(main())
