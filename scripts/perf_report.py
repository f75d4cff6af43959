#!/usr/bin/env python3
"""The tables and the performance report of `scripts/bench-vs-peers`, built from the results
a run saves in its output directory (target/bench), so that they can be built again from
those results alone (`scripts/bench-vs-peers --report-only`).

    perf_report.py run-info OUT start|finish   # OUT/run.json: date, commit, host, options
    perf_report.py snapshot OUT                # criterion's medians -> OUT/criterion.json
    perf_report.py plot OUT                    # OUT/scaling.png (needs matplotlib)
    perf_report.py tables OUT                  # OUT/vs-peers.md and OUT/vs-peers.json
    perf_report.py redis-table OUT             # OUT/vs-peers-redis.md, appended to vs-peers.md
    perf_report.py report OUT REPORT           # REPORT (docs/performance.md), OUT/readme-table.md

Run from the workspace root (`snapshot` reads target/criterion and target/criterion-thp).
What a run leaves in OUT, and what reads it:

    run.json                  the run: date, commit, CPU, kernel, rustc, options (run-info)
    criterion.json            {"criterion": {bench: median ns}, "criterion-thp": {...}}
    peers-queues.jsonl        Scrapy's cases (its script's JSON lines: env, sample, summary)
    peers-queues-thp.jsonl    Scrapy's plain queue again with huge pages (unless THP=0)
    frontier-memory.jsonl     frontier-memory, one line per case
    hibernation-memory.jsonl  hibernation-memory, one line per case
    store-disk.jsonl          store-disk, one line per store and run
    driver-rounds.jsonl       profile-driver in paired rounds ("round" added)
    scaling.jsonl, scaling.png  the scaling binary's points, and their plot
    simulate.json             {"wall_s", "summary"} of the broad-crawl simulation
    paired-ours.jsonl         profile-poll and poll-floor in paired rounds ("round" added)
    paired-scrapy-R.jsonl     Scrapy's plain queue in round R
    redis-ours.jsonl          redis-bench in rounds ("round" added; unless SKIP_REDIS=1)
    peers-redis-R.jsonl       scrapy-redis's script in round R
    redis-driver-batch.jsonl  redis-driver-batch, one line per paired round (JSON_OUT)
    redis-shards.jsonl        redis-shards, one line per crawl (partitions 1, 2, 3 per round)

Every figure the report prints comes from these files; its prose is the template below.
"""
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_results  # noqa: E402

N = 1_000_000
F = "frontier_1m_10k_hosts/polite-frontier-core/"
DRIVER = "driver_overhead/"
# Elements per iteration of each driver benchmark, as in benches/driver.rs.
DRIVER_N = (("memory", 100_000), ("sqlite", 20_000))
DRIVER_WAYS = ("frontier", "tokio_driver", "tokio_driver_multi_thread", "async_std_driver")


# ------------------------------------------------------------------------- formatting
def rate(x):
    return f"{x/1e6:.2f}M/s" if x >= 1e6 else (f"{x/1e3:.1f}k/s" if x >= 1e3 else f"{x:.0f}/s")


def rate_k(x):
    """Rates as the Redis table writes them (no millions there)."""
    return f"{x/1e3:.1f}k/s" if x >= 1e3 else f"{x:.0f}/s"


def runs(n):
    n = int(n)
    return "one run" if n == 1 else f"median of {n} runs"


def spread(values, fmt, unit=""):
    """The median of `values`, and their range in brackets when they differ."""
    values = sorted(values)
    med = fmt(statistics.median(values))
    lo, hi = fmt(values[0]), fmt(values[-1])
    if len(values) > 1 and lo != hi:
        return f"{med}{unit} ({lo}-{hi}{unit})"
    return f"{med}{unit}"


def us(x):
    return f"{x:.1f}"


def pct(x):
    return f"{x:+.0%}"


def median(values):
    return statistics.median(values)


# ------------------------------------------------------------------------------ input
def read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def peer_env(path):
    for row in read_jsonl(path):
        if row.get("kind") == "env":
            return row
    return {}


class Run:
    """The results of one run of bench-vs-peers, as saved in `out`."""

    def __init__(self, out):
        self.out = out
        self.info = self._json("run.json") or {}
        crit = self._json("criterion.json") or {}
        self.crit = crit.get("criterion", {})
        self.crit_thp = crit.get("criterion-thp", {})
        self.peers = self._summaries("peers-queues.jsonl")
        self.peers_env = peer_env(self.path("peers-queues.jsonl"))
        self.peers_thp = self._summaries("peers-queues-thp.jsonl")
        self.mem = {r["case"]: r for r in read_jsonl(self.path("frontier-memory.jsonl"))}
        self.hib = {r["case"]: r for r in read_jsonl(self.path("hibernation-memory.jsonl"))}
        self.disk = {}
        for r in read_jsonl(self.path("store-disk.jsonl")):
            self.disk.setdefault(r["store"], []).append(r)
        self.paired_rows = read_jsonl(self.path("paired-ours.jsonl"))
        self.rounds = sorted({r["round"] for r in self.paired_rows})
        self.scrapy_pop = {}
        for r in self.rounds:
            table = self._summaries(f"paired-scrapy-{r}.jsonl")
            if table is not None:
                self.scrapy_pop[r] = peer_results.figure(table, "mem", "pop_ops_s")
        self.driver_rounds = read_jsonl(self.path("driver-rounds.jsonl"))
        self.scaling = read_jsonl(self.path("scaling.jsonl"))
        self.sim = self._json("simulate.json")
        self.plot = os.path.exists(self.path("scaling.png"))
        self.driver_batch = read_jsonl(self.path("redis-driver-batch.jsonl"))
        self.shards = read_jsonl(self.path("redis-shards.jsonl"))
        self._redis()

    def path(self, name):
        return os.path.join(self.out, name)

    def _json(self, name):
        p = self.path(name)
        if not os.path.exists(p):
            return None
        with open(p) as f:
            return json.load(f)

    def _summaries(self, name):
        p = self.path(name)
        return peer_results.summaries(p) if os.path.exists(p) else None

    def _redis(self):
        # (case, metric) -> {round: value}, for our runs and for the peer's.
        self.redis_ours, self.redis_layout = {}, {}
        for row in read_jsonl(self.path("redis-ours.jsonl")):
            if row["case"] == "layout":
                self.redis_layout[row["round"]] = row
            for k, v in row.items():
                if isinstance(v, (int, float)) and k not in ("n", "d", "batch", "round"):
                    self.redis_ours.setdefault((row["case"], k), {})[row["round"]] = v
        self.redis_rounds = sorted({r for by_round in self.redis_ours.values() for r in by_round})
        self.redis_theirs, self.redis_env = {}, {}
        for r in self.redis_rounds:
            p = self.path(f"peers-redis-{r}.jsonl")
            self.redis_env = self.redis_env or peer_env(p)
            for key, v in peer_results.summaries(p).items():
                self.redis_theirs.setdefault(key, {})[r] = v

    # ----------------------------------------------------------------- figures
    def per_s(self, path, elements=1, thp=False):
        """Elements per second of a criterion benchmark, or None if it did not run."""
        ns = (self.crit_thp if thp else self.crit).get(path)
        return elements / (ns / 1e9) if ns else None

    def peer(self, case, metric):
        return peer_results.figure(self.peers, case, metric)

    def peer_or_none(self, case, metric):
        return (self.peers or {}).get((case, metric))

    def disk_median(self, store, metric):
        return median(r[metric] for r in self.disk[store])

    def paired(self, case, d, metric):
        """{round: value} of our side of the paired rounds."""
        return {r["round"]: r[metric] for r in self.paired_rows
                if r["case"] == case and r["d"] == d and metric in r}

    def paired_ratios(self, case, d, metric):
        mine = self.paired(case, d, metric)
        return [mine[r] / self.scrapy_pop[r] for r in self.rounds if r in mine and r in self.scrapy_pop]

    def redis_by_round(self, table, key, what):
        if key not in table:
            sys.exit(f"{what} figure missing: {key[0]} {key[1]}")
        return table[key]

    def r_mine(self, case, metric):
        return median(self.redis_by_round(self.redis_ours, (case, metric), "our").values())

    def r_mine_all(self, case, metric):
        """Every round's value of one of our Redis figures (empty if it is not there)."""
        return list(self.redis_ours.get((case, metric), {}).values())

    def r_peer(self, case, metric):
        return median(self.redis_by_round(self.redis_theirs, (case, metric), "peer").values())

    def r_ratios(self, peer_key, our_key):
        """Each round's ratio of ours to theirs."""
        a = self.redis_by_round(self.redis_ours, our_key, "our")
        b = self.redis_by_round(self.redis_theirs, peer_key, "peer")
        return [a[r] / b[r] for r in self.redis_rounds if r in a and r in b]

    def r_per_round(self, fn):
        """fn(round) for every Redis round where it is defined (not None)."""
        vals = [fn(r) for r in self.redis_rounds]
        return [v for v in vals if v is not None]

    def r_at(self, case, metric, r):
        return self.redis_ours.get((case, metric), {}).get(r)

    # --------------------------------------------------------------- the run itself
    def date(self):
        return self.info.get("date") or datetime.date.today().isoformat()

    def cpu(self):
        return self.info.get("cpu") or cpu_model()

    def cores(self):
        return self.info.get("cores") or os.cpu_count()

    def option(self, name, default=""):
        return str(self.info.get("options", {}).get(name, os.environ.get(name, default)))


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


# --------------------------------------------------------------------------- run-info
def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def lock_version(name):
    """A crate's version in Cargo.lock."""
    try:
        text = open("Cargo.lock").read()
    except OSError:
        return None
    m = re.search(r'name = "%s"\nversion = "([^"]+)"' % re.escape(name), text)
    return m.group(1) if m else None


def run_info(out, phase):
    path = os.path.join(out, "run.json")
    now = datetime.datetime.now(datetime.timezone.utc)
    if phase == "finish":
        with open(path) as f:
            info = json.load(f)
        started = datetime.datetime.fromisoformat(info["started_at"])
        info["finished_at"] = now.isoformat(timespec="seconds")
        info["duration_s"] = round((now - started).total_seconds())
    else:
        # The working tree's state, leaving out what a run itself rewrites.
        status = sh("git", "status", "--porcelain", "--", ".",
                    ":(exclude)docs/performance.md", ":(exclude)docs/scaling.png")
        os_name = None
        try:
            for line in open("/etc/os-release"):
                if line.startswith("PRETTY_NAME="):
                    os_name = line.split("=", 1)[1].strip().strip('"')
        except OSError:
            pass
        mem_kib = None
        try:
            for line in open("/proc/meminfo"):
                if line.startswith("MemTotal:"):
                    mem_kib = int(line.split()[1])
        except OSError:
            pass
        try:
            load = open("/proc/loadavg").read().split()[:3]
        except OSError:
            load = None
        env = os.environ
        info = {
            "date": now.date().isoformat(),
            "started_at": now.isoformat(timespec="seconds"),
            "commit": sh("git", "rev-parse", "--short", "HEAD"),
            "dirty": bool(status) if status is not None else None,
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "mem_total_kib": mem_kib,
            "kernel": f"{platform.system()} {platform.release()} {platform.machine()}",
            "os": os_name,
            "rustc": sh("rustc", "--version"),
            "loadavg_start": " ".join(load) if load else None,
            "governor": lock_version("governor"),
            "criterion": lock_version("criterion"),
            "options": {k: env.get(k, "") for k in
                        ("PAIRS", "REPS", "PEER_REPS", "QUICK", "FULL", "THP", "SKIP_REDIS", "STORES")},
        }
        info["options"]["CRITERION_ARGS"] = env.get("CRITERION_ARGS_TEXT", "")
    with open(path, "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")


# --------------------------------------------------------------------------- snapshot
def snapshot(out):
    """Every criterion benchmark's median (ns per iteration), from both criterion homes."""
    found = {}
    for key, home in (("criterion", "target/criterion"), ("criterion-thp", "target/criterion-thp")):
        found[key] = {}
        for dirpath, dirnames, filenames in os.walk(home):
            if os.path.basename(dirpath) == "new" and "estimates.json" in filenames:
                with open(os.path.join(dirpath, "estimates.json")) as f:
                    ns = json.load(f)["median"]["point_estimate"]
                found[key][os.path.relpath(os.path.dirname(dirpath), home)] = ns
    with open(os.path.join(out, "criterion.json"), "w") as f:
        json.dump(found, f, indent=1, sort_keys=True)
        f.write("\n")


# ------------------------------------------------------------------------------- plot
def plot(out):
    scaling = read_jsonl(os.path.join(out, "scaling.jsonl"))
    if not scaling:
        return
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not available: no scaling.png", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, axis, key in ((axes[0], "queued", "queued"), (axes[1], "scopes", "scopes")):
        pts = [p for p in scaling if p["axis"] == axis]
        xs = [p[key] for p in pts]
        ax.plot(xs, [p["push_ns"] for p in pts], "o-", label="push")
        ax.plot(xs, [p["poll_complete_ns"] for p in pts], "s-", label="poll + complete")
        ax.set_xscale("log")
        ax.set_xlabel("queued requests" if axis == "queued" else f"scopes ({pts[0]['queued']:,} requests)" if pts else "scopes")
        ax.set_ylabel("ns per request")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "scaling.png"), dpi=100)


# ------------------------------------------------------------------------- the tables
# Each builder returns the table's lines (header included), or [] when its results are
# not in the run; vs-peers.md and the report put the same tables in different words.

def main_rows(run):
    missing = [name for name, there in (("criterion.json", run.crit), ("peers-queues.jsonl", run.peers),
                                        ("frontier-memory.jsonl (exact_dupefilter)", run.mem.get("exact_dupefilter")))
               if not there]
    if missing:
        sys.exit(f"{run.out} holds no complete run of bench-vs-peers: missing {', '.join(missing)}")
    m = run.mem["exact_dupefilter"]
    ours = {
        "push": run.per_s(F + "push_1m", N),
        "push_nodup": run.per_s(F + "push_1m_no_dupefilter", N),
        "push_all_nodup": run.per_s(F + "push_all_1m_no_dupefilter", N),
        "poll": run.per_s(F + "poll_1m", N),
        "poll_slot": run.per_s(F + "poll_1m_slot_aware", N),
        "poll_complete": run.per_s(F + "poll_complete_1m", N),
        "poll_complete_one_group": run.per_s(F + "poll_complete_1m_one_group", N),
        "poll_complete_one_host": run.per_s(F + "poll_complete_1m_one_host", N),
        "fingerprint": run.per_s("fingerprint/polite-frontier-core/fingerprint"),
        "throttle": run.per_s("decision_100k_scopes/polite-throttle-core/try_acquire+release"),
        "governor": run.per_s("decision_100k_scopes/governor/check_key"),
        "rss_per_req": m["rss_bytes_per_req"],
        "heap_per_req": m["heap_bytes_per_req"],
        "dupefilter_per_fp": m["dupefilter_bytes_per_req"],
    }
    missing = [k for k, v in ours.items() if v is None]
    if missing:
        sys.exit(f"criterion figures missing from {run.path('criterion.json')}: {', '.join(missing)}")
    peer = run.peer
    rows = [
        ("push, priority queue only (no duplicate filter)", "ScrapyPriorityQueue.push", peer("mem", "push_ops_s"), ours["push_nodup"], "rate"),
        ("push, priority queue only, ours through `push_all` in batches of 100 (a page's links)", "ScrapyPriorityQueue.push", peer("mem", "push_ops_s"), ours["push_all_nodup"], "rate"),
        ("push with duplicate filter (Scrapy: Scheduler.enqueue_request)", "Scheduler (default settings)", peer("sched_default", "enqueue_ops_s"), ours["push"], "rate"),
        ("poll + complete at 10,000 hosts (each lease ended: the steady state), vs the plain priority queue", "ScrapyPriorityQueue.pop", peer("mem", "pop_ops_s"), ours["poll_complete"], "rate"),
        ("poll at 10,000 hosts with all 1,000,000 leases left open, vs the plain priority queue", "ScrapyPriorityQueue.pop", peer("mem", "pop_ops_s"), ours["poll"], "rate"),
        ("poll at 10,000 hosts, slot-aware (Scrapy's default queue)", "DownloaderAwarePriorityQueue.pop", peer("dapq", "pop_ops_s"), ours["poll_slot"], "rate"),
        ("poll + complete (Scrapy: Scheduler.next_request)", "Scheduler (default settings)", peer("sched_default", "next_request_ops_s"), ours["poll_complete"], "rate"),
        ("poll + complete, all requests on one host (one plain group, no rotation), vs the plain priority queue", "ScrapyPriorityQueue.pop", peer("mem", "pop_ops_s"), ours["poll_complete_one_host"], "rate"),
        ("poll + complete, all requests in one explicit scope (`.scope(\"all\")`: records carry their scopes), vs the plain priority queue", "ScrapyPriorityQueue.pop", peer("mem", "pop_ops_s"), ours["poll_complete_one_group"], "rate"),
        ("request fingerprints", "RFPDupeFilter.request_seen", peer("dupefilter", "unique_seen_ops_s"), ours["fingerprint"], "rate"),
        (f"memory per queued request (RSS, ~{m['avg_url_len']:.0f}-byte URLs)", "ScrapyPriorityQueue", peer("mem", "rss_bytes_per_req_queued"), ours["rss_per_req"], "bytes"),
        ("memory per seen fingerprint", "RFPDupeFilter", peer("dupefilter", "rss_bytes_per_fp"), ours["dupefilter_per_fp"], "bytes"),
    ]
    return ours, rows


def main_table(rows):
    lines = [
        "| workload | Scrapy | Scrapy | polite-frontier | ratio |",
        "|---|---|---:|---:|---:|",
    ]
    for label, peer_name, theirs, mine, kind in rows:
        if kind == "rate":
            lines.append(f"| {label} | {peer_name} | {rate(theirs)} | {rate(mine)} | **{mine/theirs:,.1f}×** |")
        else:
            lines.append(f"| {label} | {peer_name} | {theirs:,.0f} B | {mine:,.0f} B | **{theirs/mine:,.1f}× smaller** |")
    return lines


PAIRED = (
    ("poll + complete at 10,000 hosts (`profile-poll 1000000 10000`)", ("profile_poll", 10000, "poll_complete_ops_s")),
    ("poll + complete, one host (`profile-poll 1000000 1`)", ("profile_poll", 1, "poll_complete_ops_s")),
    ("the floor, not a frontier, at 10,000 hosts (`poll-floor 1000000 10000`: round robin over per-host FIFO queues, an owned URL per lease, a lease slot; no throttling rules, ranking, stats or store)", ("poll_floor", 10000, "ops_s")),
    ("the floor, one host (`poll-floor 1000000 1`)", ("poll_floor", 1, "ops_s")),
)


def paired_table(run):
    if not run.rounds:
        return []
    lines = [
        "| workload | ScrapyPriorityQueue.pop | ours | ratio, median (range) |",
        "|---|---:|---:|---:|",
    ]
    for label, (case, d, metric) in PAIRED:
        mine = run.paired(case, d, metric)
        ratios = run.paired_ratios(case, d, metric)
        if not ratios:
            continue
        lines.append(
            f"| {label} | {rate(median(run.scrapy_pop.values()))} | "
            f"{rate(median(mine.values()))} | {peer_results.ratio_cell(ratios)} |"
        )
    return lines


def disk_label(store):
    return {"fs-pread": "polite-store-fs, `mmap_reads` off (pread)"}.get(store, f"polite-store-{store}")


def disk_table(run):
    if not run.disk:
        return []
    peer = run.peer
    lines = [
        "| store | push/s | pop/s (poll + complete) | bytes on disk per request | vs PickleFifoDiskQueue push / pop / bytes | vs PickleLifoDiskQueue push / pop / bytes |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for store in sorted(run.disk):
        push, pop, size = (run.disk_median(store, m) for m in ("push_ops_s", "pop_ops_s", "disk_bytes_per_req"))
        cells = []
        for case in ("disk_pickle_fifo", "disk_pickle_lifo"):
            p_push, p_pop, p_size = (peer(case, m) for m in ("push_ops_s", "pop_ops_s", "disk_bytes_per_req"))
            cells.append(f"{push/p_push:.1f}× / {pop/p_pop:.1f}× / {p_size/size:.1f}× smaller")
        lines.append(f"| {disk_label(store)} | {rate(push)} | {rate(pop)} | {size:.0f} B | {cells[0]} | {cells[1]} |")
    for case, name in (("disk_pickle_fifo", "PickleFifoDiskQueue"), ("disk_pickle_lifo", "PickleLifoDiskQueue")):
        lines.append(
            f"| Scrapy {name} | {rate(peer(case, 'push_ops_s'))} | "
            f"{rate(peer(case, 'pop_ops_s'))} | {peer(case, 'disk_bytes_per_req'):.0f} B | | |"
        )
    return lines


def drivers(run):
    found = {}
    for store, n in DRIVER_N:
        for how in DRIVER_WAYS:
            v = run.per_s(f"{DRIVER}{store}/{how}", n)
            if v:
                found[(store, how)] = v
    return found


def driver_round_table(run):
    """{round: {how: ops_s}} of the rounds that ran `direct`."""
    by_round = {}
    for r in run.driver_rounds:
        by_round.setdefault(r["round"], {})[r["how"]] = r["ops_s"]
    return {k: v for k, v in by_round.items() if "direct" in v}


def driver_overheads(full, how):
    return sorted(v["direct"] / v[how] for v in full.values() if how in v)


def driver_table(run, ours=None):
    found = drivers(run)
    if not found:
        return []
    lines = [
        "| store | frontier directly | tokio driver, current-thread runtime | tokio driver, multi-threaded runtime | async-std driver |",
        "|---|---:|---:|---:|---:|",
    ]
    for store, _ in DRIVER_N:
        direct = found.get((store, "frontier"))
        if not direct:
            continue
        cells = []
        for how in DRIVER_WAYS[1:]:
            v = found.get((store, how))
            cells.append(f"{rate(v)} ({direct/v:.2f}x overhead)" if v else "-")
        lines.append(f"| {store} | {rate(direct)} | {' | '.join(cells)} |")
    full = driver_round_table(run)
    if full:
        cells = []
        for how in ("tokio", "tokio-multi", "async-std"):
            overheads = driver_overheads(full, how)
            spread_ = f" ({overheads[0]:.2f}-{overheads[-1]:.2f}x)" if len(overheads) > 1 else ""
            cells.append(f"{median(overheads):.2f}x{spread_}" if overheads else "-")
        direct = median(v["direct"] for v in full.values())
        lines.append(
            f"| memory, {len(full)} paired rounds (`profile-driver 1000000 1000 HOW`; overhead: median of the rounds' own, range) "
            f"| {rate(direct)} | {' | '.join(cells)} |"
        )
        if ours is not None:
            ours["driver_rounds"] = run.driver_rounds
    return lines


def scaling_table(run):
    if not run.scaling:
        return []
    lines = [
        "| queued | scopes | push | poll + complete |",
        "|---:|---:|---:|---:|",
    ]
    for p in run.scaling:
        scopes = f"{p['scopes']:,}" + (", 1 in 10 delayed" if p["axis"] == "delayed" else "")
        lines.append(f"| {p['queued']:,} | {scopes} | {p['push_ns']:,.0f} ns | {p['poll_complete_ns']:,.0f} ns |")
    return lines


def throttle_table(ours):
    return [
        "| throttling decision, 100,000 live scopes | governor 0.10 `check_key` | polite-frontier `try_acquire` + `release` | ratio |",
        "|---|---:|---:|---:|",
        f"| one host scope per request | {rate(ours['governor'])} | {rate(ours['throttle'])} | {ours['throttle']/ours['governor']:.2f}× |",
    ]


THP_ROWS = (
    ("poll + complete at 10,000 hosts", "poll_complete_1m"),
    ("poll at 10,000 hosts, leases left open", "poll_1m"),
    ("poll + complete, one host", "poll_complete_1m_one_host"),
    ("poll + complete, one explicit scope", "poll_complete_1m_one_group"),
)


def thp_table(run, ours):
    if not run.peers_thp or not run.crit_thp:
        return []
    theirs = run.peers_thp[("mem", "pop_ops_s")]
    lines = [
        "| workload | ScrapyPriorityQueue.pop | polite-frontier | ratio |",
        "|---|---:|---:|---:|",
    ]
    thp = {"scrapy_pop": theirs}
    for label, bench in THP_ROWS:
        mine = run.per_s(F + bench, N, thp=True)
        if mine is None:
            continue
        thp[bench] = mine
        lines.append(f"| {label} | {rate(theirs)} | {rate(mine)} | **{mine/theirs:,.1f}×** |")
    ours["thp"] = thp
    return lines


def redis_rows(run):
    url = run.r_mine("push_no_dupefilter", "avg_url_len")
    return [
        ("push, queue only (ours: batches of 1,000 per script call, pipelined)", "PriorityQueue.push (ZADD)",
         ("sr_priority", "push_ops_s"), ("push_no_dupefilter", "push_ops_s"), "rate"),
        ("push with the duplicate check (ours: in the same script call)", "PriorityQueue.push (ZADD)",
         ("sr_priority", "push_ops_s"), ("push", "push_ops_s"), "rate"),
        ("pop, one lease per call (throttle checks, reservation, lease record)", "PriorityQueue.pop (MULTI ZRANGE ZREMRANGEBYRANK)",
         ("sr_priority", "pop_ops_s"), ("pop", "pop_ops_s"), "rate"),
        ("pop, `poll_batch(64)`", "PriorityQueue.pop",
         ("sr_priority", "pop_ops_s"), ("pop_batch", "pop_batch_ops_s"), "rate"),
        ("pop, 4 workers at once, one lease per call (server-bound: Redis runs one script at a time)", "PriorityQueue.pop (one client)",
         ("sr_priority", "pop_ops_s"), ("pop_workers", "pop_ops_s"), "rate"),
        ("pop, 4 workers at once, `poll_batch(64)`", "PriorityQueue.pop (one client)",
         ("sr_priority", "pop_ops_s"), ("pop_batch_workers", "pop_ops_s"), "rate"),
        ("the floor, not a frontier: the bare commands of a `poll_batch(64)` in this key layout, no scheduling or throttling logic (redis-bench `lease_floor`, keys kept hot)", "PriorityQueue.pop",
         ("sr_priority", "pop_ops_s"), ("lease_floor", "batch_ops_s"), "rate"),
        ("the floor, not a frontier: an empty function call, one after the other (the round trip under a single-lease pop)", "PriorityQueue.pop",
         ("sr_priority", "pop_ops_s"), ("lease_floor", "empty_ops_s"), "rate"),
        ("poll + complete (two calls per request)", "PriorityQueue.pop (no completion)",
         ("sr_priority", "pop_ops_s"), ("poll_complete", "poll_complete_ops_s"), "rate"),
        ("duplicate checks of seen URLs (ours: pipelined batches)", "RFPDupeFilter.request_seen",
         ("sr_dupefilter", "dup_seen_ops_s"), ("dupefilter_seen", "dup_seen_ops_s"), "rate"),
        (f"Redis memory per queued request (~{url:.0f}-byte URLs; goal ≤ URL + 24 = {url + 24:.0f} B)", "PriorityQueue (pickled Request)",
         ("sr_priority", "redis_bytes_per_req"), ("push_no_dupefilter", "redis_bytes_per_req"), "bytes"),
        ("Redis memory per queued request, vs the seed blog's compact strings", "\"callback--url\" in a sorted set",
         ("compact_zset", "redis_bytes_per_req"), ("push_no_dupefilter", "redis_bytes_per_req"), "bytes"),
        ("duplicate filter, Redis memory per fingerprint", "RFPDupeFilter (hex SHA1 set)",
         ("sr_dupefilter", "redis_bytes_per_fp"), ("dupefilter", "redis_bytes_per_fp"), "bytes"),
        ("duplicate filter as a Bloom filter (1% false positives), memory per URL", "RFPDupeFilter (hex SHA1 set)",
         ("sr_dupefilter", "redis_bytes_per_fp"), ("dupefilter_bloom", "redis_bytes_per_fp"), "bytes"),
    ]


def redis_table(run):
    if not run.redis_rounds:
        return []
    lines = [
        "| workload | scrapy-redis | scrapy-redis | polite-store-redis | ratio, median (range) |",
        "|---|---|---:|---:|---:|",
    ]
    for label, name, peer_key, our_key, kind in redis_rows(run):
        t, m = run.r_peer(*peer_key), run.r_mine(*our_key)
        if kind == "rate":
            lines.append(f"| {label} | {name} | {rate_k(t)} | {rate_k(m)} | {peer_results.ratio_cell(run.r_ratios(peer_key, our_key))} |")
        else:
            lines.append(f"| {label} | {name} | {t:,.0f} B | {m:,.1f} B | **{t/m:,.1f}× smaller** |")
    return lines


# ------------------------------------------------- vs-peers.md, vs-peers.json (the run)
def tables(out):
    run = Run(out)
    ours, rows = main_rows(run)
    date, cpu = run.date(), run.cpu()
    lines = [
        f"Measured {date} on {run.cores()} cores ({cpu}) by `scripts/bench-vs-peers`: "
        "1,000,000 requests over 10,000 hosts with the peers' URL shapes and priorities; "
        f"Scrapy 2.19 figures come from its own script run in the same session "
        f"(`../shared/peers`, {runs(run.option('PEER_REPS', '1'))}), ours are criterion medians. Throttling is on for every poll "
        "(unlimited concurrency, no delay, so nothing waits).",
        "",
    ]
    lines += main_table(rows)
    paired = paired_table(run)
    if paired:
        lines += [
            "",
            f"Paired rounds ({len(run.rounds)}): each round runs Scrapy's plain priority queue "
            "(its script, `--cases mem`) and ours one straight after the other (Scrapy first in "
            "odd rounds, ours in even ones: the second tends to run slower here), so that both "
            "sides of a ratio see the machine in the same state; the ratio is each round's, the "
            "rates are medians over the rounds.",
            "",
        ] + paired
        ours["paired"] = {"scrapy_pop": run.scrapy_pop, "rows": run.paired_rows}
    if run.disk:
        lines += [
            "",
            "Persistent stores, 1,000,000 requests over 10,000 hosts, group commit every 1,000 "
            "operations or 100 ms (fsync'd); Scrapy's JOBDIR disk queues (pickle, 200,000 "
            "requests, its script's default size for them). Ours: "
            f"{runs(len(next(iter(run.disk.values()))))}; Scrapy's: {runs(run.option('PEER_REPS', '1'))}.",
            "",
        ] + disk_table(run)
    driver = driver_table(run, ours)
    if driver:
        lines += [
            "",
            "Driver overhead: poll + complete with an instant fetch, through `polite_runtime_tokio::Driver` "
            "vs calling the frontier directly (goal: under 2x).",
            "",
        ] + driver
    if run.scaling:
        lines += [
            "",
            "Scaling (`target/release/scaling`, in-memory frontier, nanoseconds per request, "
            "median of 5 runs): growing the queue at up to 10,000 hosts, then 1,000,000 requests "
            "over more and more scopes, then one host whose every tenth request is delayed 1 s "
            "(polled once the delays are over).",
            "",
        ] + scaling_table(run)
        if run.plot:
            lines += ["", "![scaling curves](docs/scaling.png)"]
    if run.sim:
        sim = run.sim
        lines += [
            "",
            f"Simulator: `frontier simulate examples/broad-crawl.toml --summary-only` (1,000,000 "
            f"requests over 10,000 hosts, {sim['summary'].get('finished_at', 0)/3600:.1f} hours of "
            f"virtual time) ran in {sim['wall_s']:.2f} s of wall time.",
        ]
    lines += [""] + throttle_table(ours)
    thp = thp_table(run, ours)
    if thp:
        lines += [
            "",
            "The same polls with transparent huge pages for malloc'd memory on both sides "
            "(`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, same session): at 10,000 hosts each poll "
            "reads a request from a random place in tens of megabytes, a page-table walk per poll "
            "with 4 KiB pages.",
            "",
        ] + thp
    table = "\n".join(lines)
    print()
    print(table)
    with open(os.path.join(out, "vs-peers.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(out, "vs-peers.json"), "w") as f:
        json.dump({"date": date, "cpu": cpu, "ours": ours, "stores": run.disk,
                   "peers": {f"{c}/{m}": v for (c, m), v in run.peers.items()}}, f, indent=2)


def redis_intro(run):
    return (
        "polite-store-redis vs scrapy-redis 0.9 (`../shared/peers/bench_scrapy_redis.py`), same run, "
        f"50,000 requests over 10,000 hosts, in {len(run.redis_rounds)} round(s): scrapy-redis's script and "
        "ours one straight after the other (theirs first in odd rounds, ours in even ones); rates are medians over the rounds, a ratio is the median of the "
        "rounds' own ratios (their range in brackets); each side against its own redis-server "
        f"(Redis 7, no persistence). Round trip floor here: PING {rate_k(run.r_peer('ping', 'ping_ops_s'))} from Python."
    )


def redis_tables(out):
    run = Run(out)
    if not run.redis_rounds:
        sys.exit(f"no Redis results in {out} (redis-ours.jsonl)")
    lines = ["", redis_intro(run), ""] + redis_table(run)
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(out, "vs-peers-redis.md"), "w") as f:
        f.write(table.lstrip("\n") + "\n")
    with open(os.path.join(out, "vs-peers.md"), "a") as f:
        f.write(table + "\n")


# ---------------------------------------------------------------------------- report
def slug(title):
    """GitHub's anchor for a heading."""
    s = re.sub(r"[^\w\- ]", "", title.lower().replace("`", ""))
    return s.replace(" ", "-")


class Doc:
    def __init__(self):
        self.parts = []
        self.toc = []

    def h2(self, title):
        self.toc.append(title)
        self.parts.append(f"## {title}")

    def h3(self, title):
        self.parts.append(f"### {title}")

    def p(self, *sentences):
        """A paragraph from sentences (None ones left out), wrapped at 90 columns."""
        text = " ".join(s for s in sentences if s)
        self.parts.append(wrap(text))

    def raw(self, lines):
        if isinstance(lines, str):
            lines = [lines]
        self.parts.append("\n".join(lines))

    def render(self, head):
        return "\n\n".join(head + self.parts) + "\n"


# Words kept on the line of the number before them.
UNITS = {"µs", "ns", "ms", "s", "B", "MiB", "GiB", "KiB", "×"}


def wrap(text, width=90):
    """Wraps prose at spaces (a line break in a code span reads as a space), never putting
    at the start of a line a word that Markdown would read as a list item, heading, quote
    or table row."""
    out, line = [], ""
    for w in text.split(" "):
        candidate = f"{line} {w}" if line else w
        if line and len(candidate) > width and not re.match(r"^([-+*]|\d+[.)])$|^[#>|=]", w) \
                and w.rstrip(".,;:)") not in UNITS:
            out.append(line)
            line = w
        else:
            line = candidate
    if line:
        out.append(line)
    return "\n".join(out)


def ratio_words(x):
    return f"{x:,.0f}×" if x >= 100 else f"{x:,.1f}×"


def plural(n, word, words=None):
    return f"{n} {word if n == 1 else (words or word + 's')}"


def about(x):
    """x to two significant figures, for figures that are estimates."""
    from math import floor, log10
    if x <= 0:
        return f"{x:,.0f}"
    digits = 1 - int(floor(log10(x)))
    return f"{round(x, digits):,.{max(digits, 0)}f}"


def peer_runs(n):
    n = int(n)
    return "one run of its script" if n == 1 else f"the median of {n} runs of its script"


def run_header(run):
    info = run.info
    rows = []
    date = run.date()
    if info.get("started_at") and info.get("finished_at"):
        a = datetime.datetime.fromisoformat(info["started_at"])
        b = datetime.datetime.fromisoformat(info["finished_at"])
        took = info.get("duration_s", (b - a).total_seconds())
        took = f"{round(took / 60)} min" if took >= 90 else f"{took:.0f} s"
        date += f", {a.strftime('%H:%M')}-{b.strftime('%H:%M')} UTC ({took}, the builds included)"
    rows.append(("date", date))
    commit = info.get("commit") or "unknown"
    if info.get("dirty"):
        rows.append(("commit", f"`{commit}-dirty` (the working tree had uncommitted changes)"))
    else:
        rows.append(("commit", f"`{commit}`"))
    rows.append(("CPU", f"{run.cpu()}, {run.cores()} cores"))
    if info.get("mem_total_kib"):
        rows.append(("memory", f"{info['mem_total_kib'] / 2**20:.1f} GiB"))
    kernel = info.get("kernel") or f"{platform.system()} {platform.release()} {platform.machine()}"
    if info.get("os"):
        kernel += f"; {info['os']}"
    rows.append(("kernel", kernel))
    rows.append(("compiler", info.get("rustc") or "not recorded"))
    if info.get("loadavg_start"):
        rows.append(("load average before the run", f"{info['loadavg_start']} (1, 5, 15 min)"))
    rows.append(("options", options_text(run)))
    peers = []
    env = run.peers_env
    if env.get("scrapy"):
        peers.append(f"Scrapy {env['scrapy']} on Python {env.get('python', '?')}")
    renv = run.redis_env
    if renv.get("scrapy-redis"):
        peers.append(f"scrapy-redis {renv['scrapy-redis']} against redis-server {renv.get('redis_server', '?')}")
    if info.get("governor"):
        peers.append(f"governor {info['governor']}")
    if peers:
        rows.append(("peers", "; ".join(peers)))
    lines = ["| the run | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    if not info:
        lines += ["", "(This run saved no `run.json`: the date, CPU and kernel above are the "
                      "report's, not the run's, and its commit is unknown.)"]
    return lines


def options_text(run):
    if not run.info:
        return (f"not recorded (the results hold {plural(len(run.rounds), 'paired round')} of polls"
                + (f" and {plural(len(run.redis_rounds), 'Redis round')}" if run.redis_rounds else "") + ")")
    o = lambda k, d="": run.option(k, d)  # noqa: E731
    if o("QUICK"):
        kind = "`QUICK=1` (one run and one round of everything; the scaling curves stop at 100,000 requests)"
    elif o("FULL"):
        kind = "`FULL=1` (3 runs of everything, criterion's own measurement times)"
    else:
        kind = "the default run (neither `QUICK` nor `FULL`)"
    parts = [kind, f"`PAIRS={o('PAIRS', '?')}` paired rounds of polls and drivers",
             f"`REPS={o('REPS', '?')}` runs of each persistent store and rounds of Redis",
             f"`PEER_REPS={o('PEER_REPS', '1')}`: " + plural(int(o('PEER_REPS', '1') or 1), "run") + " of Scrapy's cases"]
    crit = o("CRITERION_ARGS")
    parts.append(f"criterion `{crit}`" if crit else "criterion's default times")
    parts.append("huge-page reruns off (`THP=0`)" if o("THP", "1") == "0" else "huge-page reruns on")
    if o("SKIP_REDIS"):
        parts.append("Redis left out (`SKIP_REDIS=1`)")
    stores = o("STORES")
    if stores and stores != "sqlite fs fs-pread":
        parts.append(f"`STORES={stores}`")
    return "; ".join(parts)


def report(out, dest):
    run = Run(out)
    ours, rows = main_rows(run)
    dest_dir = os.path.dirname(os.path.abspath(dest))
    os.makedirs(dest_dir, exist_ok=True)
    plot_name = None
    if run.plot:
        plot_name = "scaling.png"
        target = os.path.join(dest_dir, plot_name)
        if os.path.abspath(run.path("scaling.png")) != os.path.abspath(target):
            shutil.copyfile(run.path("scaling.png"), target)

    d = Doc()
    url_len = run.mem["exact_dupefilter"].get("avg_url_len")
    env = run.peers_env
    sched_n = env.get("sched_n", 200_000)
    disk_n = env.get("disk_n", 200_000)
    scrapy = f"Scrapy {env['scrapy']}" if env.get("scrapy") else "Scrapy"
    peer_reps = run.option("PEER_REPS", "1")
    crit_args = run.option("CRITERION_ARGS")

    # ------------------------------------------------------------ how to read them
    d.h2("How to read these figures")
    redis = bool(run.redis_rounds)
    d.p("Every figure here comes from one run of `scripts/bench-vs-peers` on the machine above:",
        "our benchmarks and the peers' own benchmark scripts (`../shared/peers`: Scrapy's queues,",
        "scheduler and duplicate filter" + ("; scrapy-redis)" if redis else ")"),
        "ran in the same session, on the same workload: 1,000,000 requests over 10,000 hosts",
        "(50,000 for Redis)" if redis else "",
        "with the peers' URL shapes (`https://host{i}.example{j}.com/path/{k}?q={k}`"
        + (f", {url_len:.1f} bytes on average in this run)" if url_len else ")"),
        "and priorities spread over [-5, 5]. Building the requests is left out of every timing, on both sides.",
        "Throttling is on for every one of our polls (unlimited concurrency and no delay, so",
        "nothing waits): a poll pays for the politeness rules even when they let everything through.")
    d.p("**Read the ratios, not the rates.** Absolute times on a small shared machine are noisy:",
        "the same binary, and Scrapy too, can change speed a lot within minutes, and hosts differ",
        "more. A ratio's two sides ran in the same session, so most of that cancels out; a rate",
        "from this report is only comparable with rates from the same report.")
    if not run.info:
        crit_how = "(`cargo bench -p workspace-benches`)."
    elif crit_args:
        crit_how = f"(`cargo bench -p workspace-benches`, options `{crit_args}`)."
    else:
        crit_how = "(`cargo bench -p workspace-benches` with its default measurement times)."
    d.p("**Criterion medians.** Our in-process figures (push, poll, fingerprints, the throttler,",
        "the drivers) are criterion medians", crit_how,
        "One criterion figure is one benchmark binary with one placement in memory, measured at",
        "one moment against a peer measured at another: where a ratio matters, the paired rounds",
        "below are the careful measure.")
    d.p("**Paired rounds, taking turns.** A ratio needs both of its sides measured at the same",
        "moment, since the machine's speed moves within minutes. So the polls, the drivers and",
        "Redis are also measured in rounds: each round runs the peer's script and ours one",
        "straight after the other, the ratio is each round's own, and the tables give the",
        "median of the rounds' ratios with their range. The rounds take turns at who goes first",
        "(the peer in odd rounds, ours in even ones): whichever runs second tends to run slower",
        "on such a machine, and a fixed order would tilt every ratio the same way. An even",
        "number of rounds (`PAIRS`) balances the order.",
        order_effect(run))
    d.p("**Binaries run from a fresh copy.** Where a program's file sits in memory moves its",
        "speed: two byte-identical copies of one binary can run measurably apart, run after",
        "run, each steady, because where the kernel puts each file's pages matters to the caches.",
        "So every paired round runs `profile-poll`, `poll-floor` and `profile-driver` from a fresh",
        "copy of its file, which turns placement into noise that the rounds' medians and ranges",
        "show, instead of a bias of the whole run. A criterion figure has no such protection.")
    sizes = (f"Scrapy's scheduler cases and disk queues run at {sched_n:,} requests" if sched_n == disk_n else
             f"Scrapy's scheduler cases run at {sched_n:,} requests and its disk queues at {disk_n:,}")
    d.p(f"**Peer figures** are the medians of their scripts' own runs ({runs(peer_reps)} of the",
        f"Scrapy cases; one per round for scrapy-redis). {sizes} (its script's defaults: they are",
        "slow), and its slot-aware pops stop after a few seconds (their cost grows with the",
        "number of slots); rates are per request either way.")

    # ------------------------------------------------------------------- main table
    d.h2("Scrapy's queues, scheduler and duplicate filter")
    d.p(f"Ours against {scrapy}'s in-memory priority queues, its scheduler with default",
        f"settings and its duplicate filter: criterion medians for ours; for Scrapy, {peer_runs(peer_reps)}.")
    d.raw(main_table(rows))
    d.h3("What each row measures")
    d.raw([
        "- **push, priority queue only**: `Frontier::push` without the duplicate filter: the",
        "  request's group (its host) found, a compact record encoded and queued; against",
        "  `ScrapyPriorityQueue.push`, which appends an object it already holds.",
        "- **push through `push_all`**: the same requests in batches of 100 (a page's links).",
        "  `push_all` queues a batch exactly as `push` one by one would (a property test compares",
        "  outcomes, errors, stats and the order out) while loading what the pushes a few places",
        "  ahead will read; the drivers' `push_all` and the crawler use it.",
        "- **push with duplicate filter**: ours with the exact fingerprint filter (Scrapy-compatible",
        "  fingerprints); Scrapy's `Scheduler.enqueue_request` with default settings",
        "  (`RFPDupeFilter`, `DownloaderAwarePriorityQueue`, `LifoMemoryQueue`).",
        "- **poll + complete at 10,000 hosts**: each poll chooses the next host group, takes a",
        "  throttling permit, decodes the request into an owned `Request` and records a lease; each",
        "  completion feeds the throttler (backoff) and frees the slots. This is the steady state",
        "  of a crawl. Scrapy's plain priority queue pops objects it holds, with no throttling, no",
        "  host rotation, no decoding and no leases.",
        "- **poll with all leases left open**: the same polls, never completed, so the lease table",
        "  grows by 1,000,000 records during the polls and much of the time goes to the kernel",
        "  faulting in fresh pages. Not a shape a crawler runs in: its open leases are bounded by",
        "  its concurrency.",
        "- **slot-aware**: our slot-aware policy (Scrapy's default order) against Scrapy's default",
        "  queue, `DownloaderAwarePriorityQueue`, whose pop looks at every slot; and against the",
        "  whole default scheduler (`Scheduler.next_request`). These are the like-for-like",
        "  comparisons with what Scrapy runs by default.",
        "- **one host**: every request on one host (one plain group, no rotation): the shape of a",
        "  plain priority queue. **One explicit scope** (`.scope(\"all\")`) gives every record its",
        "  scope list, which takes the general (postcard) decoder instead of the hand-written one",
        "  for plain host records and makes every record too long for a queue slot.",
        "- **fingerprints**: Scrapy-compatible request fingerprints per second, against",
        "  `RFPDupeFilter.request_seen` on unique requests.",
        "- **memory per queued request**: growth of the process's resident set with every",
        "  request queued (frontier-memory, exact duplicate filter on), measured as the peer script",
        "  measures Scrapy's queue. **Per seen fingerprint**: our exact filter keeps a 64-bit",
        "  prefix of each fingerprint; Scrapy's keeps hex strings in a Python set.",
    ])

    # --------------------------------------------------------------- paired rounds
    paired = paired_table(run)
    if paired:
        d.h2("Polls in paired rounds")
        one = len(run.rounds) == 1
        d.p("One round runs" if one else f"{plural(len(run.rounds), 'round')}: each round runs",
            "Scrapy's plain priority queue (its",
            "script, `--cases mem`) and, next to it, our poll + complete (`profile-poll`) and the",
            "floor (`poll-floor`, `benches/poll_floor.rs`), each at 10,000 hosts and at one, every",
            "binary from a fresh copy.",
            "Scrapy goes first." if one else
            "Scrapy goes first in odd rounds, ours in even ones. The rates are medians over the",
            None if one else "rounds; the ratio is the median of the rounds' own.")
        d.raw(paired)
    d.h3("Where the 10× goal for polls stands")
    for para in poll_goal(run, ours):
        d.p(*para)
    d.h3("Push")
    for para in push_text(run, ours):
        d.p(*para)

    # ------------------------------------------------------------------------ memory
    d.h2("Memory per queued request")
    d.p("`target/release/frontier-memory CASE 1000000 10000`, each case in a fresh process:",
        "`heap` counts the bytes the frontier asked the allocator for (a counting global",
        "allocator), `RSS` the growth of the resident set (allocator overhead and fragmentation",
        "included), the duplicate filter's share separately.")
    d.raw(memory_table(run))
    d.p("A queue is kept per host and priority. A queue of one request keeps it in a 64-byte",
        "cell; its second request moves it into a block of seven 64-byte slots, so a broad",
        "crawl, with many hosts and few requests each, does not pay a whole block per host.",
        "Freed cells are kept for reuse, not given back. Records longer than a queue slot (a",
        "long path and query) live in the in-memory store's own cells, reused as soon as freed.",
        "Other host counts: `target/release/frontier-memory no_dupefilter 1000000 HOSTS`.")

    # -------------------------------------------------------------- scope states
    if run.hib:
        d.h2("Scope states over a million hosts")
        d.p("`target/release/hibernation-memory CASE 1000000 10000`, each case in a fresh process:",
            "1,000,000 hosts visited one after another, each answering 429 with a Retry-After of",
            "an hour, with `throttling_scope_limit` 10,000; then every host returns at once with a",
            "second page, which must not go before the hour is over. `RSS after visits` is the",
            "resident set once every host holds a backoff (the queue is empty then); the peak adds",
            "a million queued requests. In the `_resident` cases the frontier keeps evicted states",
            "that still matter in memory (`FrontierConfig::hibernate_scopes(false)`); otherwise",
            "they go to the store and come back when the host returns.")
        rows = ["| case | RSS after visits | peak RSS | scope states in memory | hibernated | woken | served early | seconds |",
                "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for case in ("fs", "fs_resident", "sqlite", "sqlite_resident"):
            r = run.hib.get(case)
            if r:
                rows.append(f"| {case} | {r['rss_after_visits_mib']:.0f} MiB | {r['peak_rss_mib']:.0f} MiB | "
                            f"{r['resident_scopes']:,} | {r['hibernated']:,} | {r['woken']:,} | "
                            f"{r['served_early']} | {r['seconds']:.0f} |")
        d.raw(rows)
        d.p("The peak is mostly the queue: one queued request per host costs about 500 bytes",
            "(see above, one request per host), whichever store holds the states.")

    # ------------------------------------------------------------------------ stores
    if run.disk:
        d.h2("Persistent stores")
        d.p("`target/release/store-disk STORE 1000000 10000`: push and pop (poll + complete) of",
            "1,000,000 requests over 10,000 hosts, with group commit every 1,000 operations or",
            "100 ms (fsync'd), and the bytes of all the store's files once the pushes are durable.",
            f"Ours: {runs(len(next(iter(run.disk.values()))))} of each store; Scrapy's JOBDIR disk queues",
            f"(pickle, {disk_n:,} requests): {runs(peer_reps)}.")
        d.raw(disk_table(run))
        d.p("Our pop is a poll + complete with an fsync'd group commit, against a disk-queue pop",
            "that never syncs; Scrapy's default disk queue is the LIFO one. polite-store-fs reads",
            "sealed segments through a memory map (`FsConfig::mmap_reads`, on by default; the",
            "`pread` row has it off).")
        mem = store_memory_table(run)
        if mem:
            d.p("The process's memory over the same runs (frontier, duplicate filter and store",
                "included; medians). Mapped segment pages count in the resident set but are page",
                "cache the kernel can drop, which `pread` fills just the same without counting it in",
                "the process: the anonymous peak is what the store needs.",
                "`target/release/store-disk fs 10000000` measures the same at ten times the size.")
            d.raw(mem)

    # ----------------------------------------------------------------------- drivers
    driver = driver_table(run)
    if driver:
        d.h2("Drivers")
        d.p("Poll + complete with an instant fetch through the runtime drivers",
            "(`polite_runtime_tokio::Driver` on either tokio runtime, `polite_runtime_async_std`)",
            "against calling the frontier directly, same requests, same store: criterion's",
            "`driver_overhead` (100,000 requests over 1,000 hosts in memory, 20,000 with SQLite),",
            "then the memory store in paired rounds, each running the frontier directly and",
            "through each driver straight after (`profile-driver 1000000 1000 HOW`, fresh copies).",
            "The goal is an overhead under 2×.")
        d.raw(driver)
        for para in driver_text(run):
            d.p(*para)

    # ----------------------------------------------------------------------- scaling
    if run.scaling:
        d.h2("Scaling")
        d.p("`target/release/scaling`" + (" `--quick`" if run.option("QUICK") else "") + ": the in-memory",
            "frontier (duplicate filter on, throttling on for every poll), nanoseconds per request,",
            f"{'one run' if run.option('QUICK') else 'median of 5 runs'} of each point: growing the queue at up to 10,000 hosts, then",
            f"{max(p['queued'] for p in run.scaling):,} requests over more and more scopes, then one host whose every",
            "tenth request is delayed 1 s (polled once the delays are over).")
        d.raw(scaling_table(run))
        if plot_name:
            d.raw(f"![push and poll + complete cost against queued requests and scopes]({plot_name})")
        d.p("The first row is a run of well under a millisecond, mostly first touches of fresh",
            "memory: do not read much into it. A broad crawl has many hosts with few requests",
            "each, so what a host costs when it first appears and when its queue empties weighs",
            "on every request: the rows with as many scopes as requests show it.")
        d.p("The `delayed` rows are one host whose every tenth request carries a 1 s delay: the",
            "delayed requests rejoin the host's queue behind newer ones, into an ordered map beside",
            "its FIFO run, merged once large, instead of being inserted into the run at their",
            "place (quadratic). The tier queues of the round-robin take groups that join out of",
            "order the same way. Flat rows here mean that still holds.")

    # ---------------------------------------------------------------------- throttle
    d.h2("Throttling decisions")
    d.p("`cargo bench -p workspace-benches --bench throttle`: `try_acquire` + `release` over",
        "100,000 live scopes next to governor's keyed rate limiter checking the same keys, visited",
        "round-robin so that every call goes to another key than the one before. governor",
        "answers one question (does this key have a cell in its GCRA budget?); the throttler",
        "reserves a scope, checks delay, concurrency, hard backoff and quota, records the send,",
        "hands out a permit and takes it back with an outcome checked against the backoff codes.")
    d.raw(throttle_table(ours))
    d.p("Both sides of this row swing from run to run, and it is one criterion run each, not",
        "paired: rerun `cargo bench -p workspace-benches --bench throttle -- decision_100k` a few",
        "times before reading much into it.")

    # --------------------------------------------------------------------------- THP
    thp = thp_table(run, dict(ours))
    if thp:
        d.h2("Transparent huge pages")
        d.p("The same polls and Scrapy's plain queue again with transparent huge pages for",
            "malloc'd memory on both sides (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, glibc 2.35",
            "or later, same session; criterion figures for ours): at 10,000 hosts each poll reads",
            "a request from a random place in tens of megabytes, and with 4 KiB pages that is a",
            "page-table walk per poll.")
        d.raw(thp)
        d.p(thp_text(run, ours))

    # --------------------------------------------------------------------- simulator
    if run.sim:
        d.h2("Simulator")
        d.p(sim_text(run.sim))

    # ------------------------------------------------------------------------- Redis
    if run.redis_rounds:
        redis_section(d, run)

    # --------------------------------------------------------------------- reproduce
    reproduce(d)

    head = [
        "# Performance",
        "<!-- Generated by scripts/bench-vs-peers (template: scripts/perf_report.py) from the\n"
        "     results of the run described below. Do not edit: rerun the benchmarks, or rebuild\n"
        "     this file from a run's saved results with `scripts/bench-vs-peers --report-only`. -->",
        wrap("polite-frontier measured next to Scrapy, scrapy-redis and governor in one run on one "
             "machine by `scripts/bench-vs-peers`. Every number below comes from that run; the text "
             "explains how each is measured and what it means."),
        "\n".join(run_header(run)),
        "Contents: " + " · ".join(f"[{t}](#{slug(t)})" for t in d.toc),
    ]
    with open(dest, "w") as f:
        f.write(d.render(head))
    readme_table(run, ours, os.path.join(out, "readme-table.md"), dest)


def order_effect(run):
    """What this run's paired rounds show about running first or second."""
    if len(run.rounds) < 2:
        return None
    mine = run.paired("profile_poll", 10000, "poll_complete_ops_s")
    first_s = [v for r, v in run.scrapy_pop.items() if r % 2 == 1]
    second_s = [v for r, v in run.scrapy_pop.items() if r % 2 == 0]
    first_o = [v for r, v in mine.items() if r % 2 == 0]
    second_o = [v for r, v in mine.items() if r % 2 == 1]
    if not (first_s and second_s and first_o and second_o):
        return None
    return (f"In this run's rounds Scrapy's pop read a median {rate(median(first_s))} when it ran first "
            f"and {rate(median(second_s))} second; our poll + complete at 10,000 hosts "
            f"{rate(median(first_o))} first and {rate(median(second_o))} second.")


def poll_goal(run, ours):
    paras = []
    crit_ratio = ours["poll_complete"] / run.peer("mem", "pop_ops_s")
    ratios = run.paired_ratios("profile_poll", 10000, "poll_complete_ops_s")
    one = run.paired_ratios("profile_poll", 1, "poll_complete_ops_s")
    s = [f"The goal is 10× Scrapy's plain priority queue's pop at 10,000 hosts with every lease",
         f"completed. The criterion benchmark reads **{ratio_words(crit_ratio)}** in this run."]
    if ratios:
        lo, hi, med = min(ratios), max(ratios), median(ratios)
        s.append(f"The paired rounds, the careful measure, read **{ratio_words(med)}**"
                 + (f" ({lo:,.1f}-{hi:,.1f}× over {len(ratios)} rounds taking turns)" if len(ratios) > 1 else " (one round)")
                 + (f", one host {ratio_words(median(one))}." if one else "."))
        if crit_ratio >= 10 and lo >= 10:
            s.append("The goal is met on this host, by both measures" + (" and in every round." if len(ratios) > 1 else "."))
        elif med >= 10:
            s.append("The paired median meets it" + ("" if lo >= 10 else ", though not every round does")
                     + ("; the criterion figure does not." if crit_ratio < 10 else "."))
        else:
            s.append("The paired median falls short of it on this host.")
    s.extend(("A host where memory is slower can put it under 10×: at 10,000 hosts each of our polls",
             "is a cache miss or more, where Scrapy's pop mostly is not."))
    paras.append(s)

    one_host = run.paired("profile_poll", 1, "poll_complete_ops_s")
    many = run.paired("profile_poll", 10000, "poll_complete_ops_s")
    floor = run.paired("poll_floor", 10000, "ops_s")
    s = ["The work is spread thin: choosing the group and its bookkeeping, taking the request out of",
         "its queue's blocks, admission and release in the throttler, the lease record, decoding,",
         "and the URL's allocation and free (the caller drops each request) all take their share",
         "(count them with `valgrind --tool=callgrind --toggle-collect='*drain*'",
         "target/release/profile-poll 1000000 10000`)."]
    if one_host and many:
        s.extend(("At 10,000 hosts memory, not instructions, sets the pace: the same code ran a one-host",
                 f"crawl {median(one_host.values()) / median(many.values()):.1f}× as fast in the paired rounds."))
    if floor and many:
        per_round = [floor[r] / many[r] for r in run.rounds if r in floor and r in many]
        s.extend(("`poll-floor` shows where this machine's floor is: a skeleton that does only what any",
                 "frontier serving hosts round-robin must do (the next host of the best priority, a bare",
                 "delay and concurrency gate kept in the host's record, the head request from a 64-byte",
                 "slot, its URL rebuilt as an owned string, a lease slot taken and freed), prefetching as",
                 "the frontier does, and none of the frontier's other rules (backoff, rampup, quotas,",
                 "shared scopes, ranking, stats, the store interface).",
                 f"It ran at {ratio_words(median(run.paired_ratios('poll_floor', 10000, 'ops_s')))} Scrapy's pop",
                 f"and the frontier takes {spread(per_round, lambda x: f'{x:.1f}', '×')} the skeleton's time",
                 "(the median of the rounds' own ratios): the frontier cannot be faster than the skeleton, so the",
                 "skeleton's ratio bounds what any such frontier can show against Scrapy here."))
    paras.append(s)

    lf = ours["poll_complete_one_group"]
    paras.append([
        f"The rows that are not the goal's: with every lease left open the poll read",
        f"{ratio_words(ours['poll'] / run.peer('mem', 'pop_ops_s'))} (the lease table's growth, above); one explicit scope",
        f"{ratio_words(lf / run.peer('mem', 'pop_ops_s'))} (the general decoder). Scrapy's own default is the like-for-like",
        f"comparison: {ratio_words(ours['poll_slot'] / run.peer('dapq', 'pop_ops_s'))} at the slot-aware poll,",
        f"{ratio_words(ours['poll_complete'] / run.peer('sched_default', 'next_request_ops_s'))} through the scheduler.",
        "`PROFILE_LONG_URLS=1 target/release/profile-poll 1000000 10000` adds 40 characters of tracking",
        "parameters to every URL, so that no record fits a queue slot, for a look at the long-record path.",
    ])
    return paras


def push_text(run, ours):
    pop_push = run.peer("mem", "push_ops_s")
    s = [f"Push reads {ratio_words(ours['push_nodup'] / pop_push)} Scrapy's queue-only push here:",
         "ours parses the host and encodes a compact record where Scrapy's push appends an object",
         "it holds, and over 10,000 hosts it mostly waits for memory (the host's record, its list",
         "of queues and the end of the queue it joins)."]
    one = run.paired("profile_poll", 1, "push_ops_s")
    many = run.paired("profile_poll", 10000, "push_ops_s")
    if one and many:
        s.extend((f"The same pushes for one host ran {median(one.values()) / median(many.values()):.1f}× as fast",
                 "(`profile-poll`'s push phase in the paired rounds)."))
    s.extend((f"`push_all` loads those three for the requests a few places ahead: "
             f"{ours['push_all_nodup'] / ours['push_nodup']:.2f}× the pushes a second of `push` in criterion",
             f"({ratio_words(ours['push_all_nodup'] / pop_push)} Scrapy's push).",
             "With the duplicate filter, against Scrapy's scheduler with its defaults, ours is",
             f"{ratio_words(ours['push'] / run.peer('sched_default', 'enqueue_ops_s'))}.",
             "`PROFILE_PUSH_ALL=100 target/release/profile-poll 1000000 10000` measures `push_all`",
             "against `push` from a fresh copy of one binary, and `valgrind --tool=callgrind",
             "--toggle-collect='*fill*'` on it counts the pushes' instructions alone."))
    return [s]


def memory_table(run):
    lines = [
        "| case | URL, average | heap per request | RSS per request | duplicate filter per request |",
        "|---|---:|---:|---:|---:|",
    ]
    for case, label in (("exact_dupefilter", "exact duplicate filter"), ("no_dupefilter", "no duplicate filter")):
        m = run.mem.get(case)
        if not m:
            continue
        lines.append(f"| {label} ({m.get('n', N):,} requests, {m.get('hosts', 10000):,} hosts) | {m['avg_url_len']:.1f} B | "
                     f"{m['heap_bytes_per_req']:.1f} B | {m['rss_bytes_per_req']:.1f} B | {m['dupefilter_bytes_per_req']:.1f} B |")
    scrapy = run.peer_or_none("mem", "rss_bytes_per_req_queued")
    if scrapy:
        lines.append(f"| Scrapy's `ScrapyPriorityQueue` (RSS) | | | {scrapy:.1f} B | |")
    return lines


def store_memory_table(run):
    keys = ("rss_queued_mib", "rss_peak_mib", "rss_anon_peak_mib")
    lines = [
        "| store | resident, all 1,000,000 queued | peak resident | peak of its own (anonymous) memory |",
        "|---|---:|---:|---:|",
    ]
    for store in sorted(run.disk):
        if all(k in run.disk[store][0] for k in keys):
            q, peak, anon = (run.disk_median(store, k) for k in keys)
            lines.append(f"| {disk_label(store)} | {q:,.0f} MiB | {peak:,.0f} MiB | {anon:,.0f} MiB |")
    return lines if len(lines) > 2 else []


def driver_text(run):
    paras = []
    full = driver_round_table(run)
    s = []
    meds = {how: median(driver_overheads(full, how)) for how in ("tokio", "tokio-multi", "async-std")
            if driver_overheads(full, how)}
    if meds:
        worst = max(meds.values())
        s.append(f"In the paired rounds a direct poll + complete took {1e9 / median(v['direct'] for v in full.values()):.0f} ns;")
        if worst < 2:
            s.append("every driver stays under the 2× goal (medians of the rounds above).")
        else:
            over = [h for h, v in meds.items() if v >= 2]
            s.append(f"{', '.join(over)} {'is' if len(over) == 1 else 'are'} over the 2× goal in this run.")
        crit = drivers(run)
        direct = crit.get(("memory", "frontier"))
        crit_over = [direct / crit[("memory", w)] for w in DRIVER_WAYS[1:] if direct and ("memory", w) in crit]
        if crit_over:
            word = "higher" if median(crit_over) > median(meds.values()) else "lower"
            s.append(f"Criterion's shorter run of 100,000 requests reads {word} than the rounds "
                     f"({min(crit_over):.2f}-{max(crit_over):.2f}× against {min(meds.values()):.2f}-{max(meds.values()):.2f}×).")
    s.extend(("What the driver adds to a lease with the in-memory store is mostly two clock reads",
             "(one per store call, taken once the frontier's lock is held, on purpose: a send is never",
             "recorded as earlier than it goes out) and the atomic operations of the frontier's mutex",
             "and the `next` turn; `next` looks at an in-memory frontier without taking the turn when",
             "nobody holds it. One clock reading for a batch of leases would need a batch API, which",
             "the driver does not have. `valgrind --tool=callgrind --toggle-collect='*drain*'",
             "target/release/profile-driver 200000 1000 tokio` against `direct` counts the",
             "instructions it adds; `perf record` shows the clock reads, which callgrind does not."))
    paras.append(s)
    found = drivers(run)
    direct, cur = found.get(("sqlite", "frontier")), found.get(("sqlite", "tokio_driver"))
    multi, asy = found.get(("sqlite", "tokio_driver_multi_thread")), found.get(("sqlite", "async_std_driver"))
    s = ["With a store whose calls block (SQLite) the overhead is the cost of keeping I/O off the",
         "executor: `block_in_place` on tokio's multi-threaded runtime costs little",
         f"({1e6 / multi - 1e6 / direct:.1f} µs per lease here)" if (direct and multi) else "",
         "; a thread handoff per call (tokio's current-thread runtime, async-std's blocking pool)",
         f"costs {1e6 / cur - 1e6 / direct:.0f} µs and {1e6 / asy - 1e6 / direct:.0f} µs per lease here,"
         if (direct and cur and asy) else "costs",
         "many times a SQLite operation that stays in the page cache. A real fetch takes",
         "milliseconds, which dwarfs both; use the multi-threaded runtime with a blocking store",
         "when it matters."]
    paras.append([" ".join(x for x in s if x).replace(" ;", ";")])
    return paras


def thp_text(run, ours):
    theirs = run.peers_thp.get(("mem", "pop_ops_s"))
    mine = run.per_s(F + "poll_complete_1m", N, thp=True)
    if not (theirs and mine):
        return None
    a = theirs / run.peer("mem", "pop_ops_s") - 1
    b = mine / ours["poll_complete"] - 1
    return (f"Against the runs without huge pages, Scrapy's pop moved {pct(a)} and our poll + complete at "
            f"10,000 hosts {pct(b)} (each side measured once, minutes apart, so within this machine's "
            "noise unless the change is large).")


def sim_text(sim):
    su = sim.get("summary", {})
    sent = su.get("sent")
    resp = su.get("responses", {})
    s = (f"`frontier simulate examples/broad-crawl.toml --summary-only`: a broad crawl of 10,000 "
         f"hosts (Scrapy's broad-crawl recipe: breadth-first, a global cap, a jittered per-host "
         f"delay, 100 hosts behind a rate limiter), {su.get('finished_at', 0)/3600:.1f} hours of virtual "
         f"time, ran in {sim['wall_s']:.2f} s of wall time")
    if sent:
        s += f": {sent:,} requests sent, {sent / sim['wall_s']:,.0f} a second of wall time"
        if resp.get("429"):
            s += f", {resp['429']:,} of them answered 429"
    return s + ". The frontier and the throttler run unchanged on a virtual clock."


# ----------------------------------------------------------------------- Redis report
def redis_section(d, run):
    env = run.redis_env
    d.h2("polite-store-redis vs scrapy-redis")
    d.p(f"`target/release/redis-bench 50000 10000` next to scrapy-redis {env.get('scrapy-redis', '')}'s",
        "own script (`../shared/peers/bench_scrapy_redis.py`), 50,000 requests over 10,000 hosts,",
        f"in {plural(len(run.redis_rounds), 'round')} taking turns (theirs first in odd rounds). Each side",
        f"runs against its own throwaway redis-server ({('Redis ' + env['redis_server']) if env.get('redis_server') else 'Redis 7'}, no persistence).",
        "Rates are medians over the rounds; a ratio is the median of the rounds' own ratios, their",
        "range in brackets. Memory is `INFO memory` `used_memory` before and after the pushes",
        "(per request), on both sides. The round trip floor from Python (PING) was",
        f"{rate_k(run.r_peer('ping', 'ping_ops_s'))}.")
    d.raw(redis_table(run))
    d.p("Every request costs one atomic server-side call (or one per batch), which checks and",
        "reserves every scope of the request, records the lease and feeds backoff and rampup;",
        "scrapy-redis's pop is a bare `ZRANGE` + `ZREMRANGEBYRANK` with politeness left to each",
        "worker. The floors are not frontiers: `lease_floor` runs the commands of a lease from a",
        "script with no logic at all, on keys kept hot, and an empty function call is the round",
        "trip under a single-lease pop.")

    bd = redis_breakdown(run)
    if bd:
        d.h3("Where a Redis call's time goes")
        d.p("From `INFO commandstats`, reset before each phase of `redis-bench`: the server's time",
            "in script calls (round trips and the client left out), the commands the scripts ran,",
            "the time in those commands, and the rest, spent in Lua itself. Medians over the rounds,",
            "their range in brackets.")
        d.raw(bd)
    for title, paras in (("How many requests one Redis serves", redis_capacity(run)),
                         ("What a queued request costs in Redis", redis_memory(run)),
                         ("What 10× scrapy-redis's pop would take", redis_budget(run))):
        if paras:
            d.h3(title)
            for para in paras:
                d.p(*para)
    batched_drivers(d, run)
    sharded_crawls(d, run)
    d.h3("Looking deeper into the script")
    d.p("`target/release/profile-redis` runs the redis-bench pushes and a `poll_batch(64)` drain",
        "phase by phase against a server under `valgrind --tool=callgrind",
        "--toggle-collect=luaCallFunction --dump-before=pingCommand redis-server`: instructions",
        "per pushed request and per lease, repeatable where timing on this machine is not",
        "(`single` for one lease per call and its completions; `PROFILE_LUA` swaps in a changed",
        "script without a rebuild). `scripts/profile-redis-lua [N] [HOSTS]` counts the Lua VM",
        "instructions each line and function of the script executes (`PROF_OP=push` for pushes,",
        "`PROF_MODE=single` for one lease per call): it builds Redis from Debian's source once,",
        "with a `debug` library for functions, under `target/redis-prof/`.")


def batched_drivers(d, run):
    rows = run.driver_batch
    if not rows:
        return
    n, workers = rows[0]["requests"], rows[0]["workers"]
    d.h3("Batched drivers")
    d.p(f"`JSON_OUT=... target/release/redis-driver-batch {n} {workers} {len(rows)}`: poll + complete pairs",
        f"a second through the tokio driver (two worker threads, {workers} tasks looping `next` /",
        "`complete(200)`, unlimited concurrency and no delay, no duplicate filter) against one",
        "local redis-server, the driver making one call per lease and per completion",
        "(`Batching::off()`) and the batched driver (`Batching::default()`: the task whose turn",
        "it is takes leases for the tasks waiting behind it in one `poll_batch`, at most 64;",
        "completions gather for one `complete_batch` call, at most 64, at most 2 ms, or until",
        "every lease the driver took is back), in the same binary, in",
        f"{plural(len(rows), 'paired round')} of {n:,} requests alternating which goes first, each on a",
        "fresh crawl. The floor is the script alone: `poll_batch(64)` and `complete_batch` from",
        "one client in a loop, no driver. Calls and server time per pair are from",
        "`INFO commandstats`, reset before each crawl.")
    ratios = [r["batched_pairs_s"] / r["single_pairs_s"] for r in rows]
    t = ["| driver | pairs/s, median (range) | script calls per pair | server time per pair |",
         "|---|---:|---:|---:|"]
    for label, k in (("one call per lease and per completion", "single"),
                     ("batched", "batched"), ("floor: the script alone, batches of 64", "floor")):
        rates = [r[f"{k}_pairs_s"] for r in rows]
        calls = spread([r[f"{k}_calls"] for r in rows], '{:.2f}'.format) if f"{k}_calls" in rows[0] else ""
        t.append(f"| {label} | {spread(rates, '{:,.0f}'.format)} | {calls} | "
                 f"{spread([r[f'{k}_us'] for r in rows], '{:.0f}'.format, ' µs')} |")
    t.append(f"| batched / one call each, median of the paired rounds | **{spread(ratios, '{:.2f}'.format, '×')}** | | |")
    d.raw(t)
    d.p("A script call has a fixed cost of its own (loading the counters, writing the changes",
        "back) besides each lease's and completion's work, and every call is a round trip: the",
        "batched driver pays both once per batch. What is left is the scheduler and throttler",
        "work of each lease and completion, the floor's server time.")


def sharded_crawls(d, run):
    rows = run.shards
    if not rows:
        return
    n, workers, drivers = rows[0]["requests"], rows[0]["workers"], rows[0]["drivers"]
    rounds = sorted({r["round"] for r in rows})
    d.h3("Sharded crawls")
    d.p(f"`target/release/redis-shards {n} {workers} {len(rounds)} {drivers}`: one crawl of {n:,} requests over",
        "10,000 hosts split over 1, 2 and 3 partitions (`ShardedRedisFrontier`), each partition on",
        f"its own local redis-server, driven by a fleet of {drivers} batched tokio drivers (each its",
        f"own handle and connections, as separate workers would have; {workers} tasks in all, on",
        f"two runtime threads), in {plural(len(rounds), 'round')} taking the partition counts in turn.",
        "`busiest server` is the share of the run's wall time the busiest server spent in",
        "scripts; `server capacity` is the rate divided by it: what the servers could serve if",
        "they, not the client, were the limit. Memory is `used_memory` before and after the",
        "pushes, summed over the servers in use.")
    t = ["| partitions | pairs/s, median (range) | server time per pair | busiest server | server capacity | Redis bytes per queued request (URL) |",
         "|---:|---:|---:|---:|---:|---:|"]
    per_part = {}
    for p in (1, 2, 3):
        rs = [r for r in rows if r["partitions"] == p]
        if not rs:
            continue
        cap = [r["pairs_s"] / r["busiest_server_busy"] for r in rs if r["busiest_server_busy"] > 0]
        per_part[p] = (median([r["pairs_s"] for r in rs]), median([r["server_us_per_pair"] for r in rs]),
                       median(cap) if cap else None)
        t.append(f"| {p} | {spread([r['pairs_s'] for r in rs], '{:,.0f}'.format)} | "
                 f"{spread([r['server_us_per_pair'] for r in rs], '{:.0f}'.format, ' µs')} | "
                 f"{spread([100 * r['busiest_server_busy'] for r in rs], '{:.0f}'.format, '%')} | "
                 f"{spread(cap, '{:,.0f}'.format)} | "
                 f"{median([r['bytes_per_request'] for r in rs]):.1f} ({median([r['url_bytes'] for r in rs]):.1f}) |")
    d.raw(t)
    cores = run.cores()
    busy1 = median([r["busiest_server_busy"] for r in rows if r["partitions"] == 1] or [0])
    d.p(f"This machine has {cores or 'two'} cores for the servers and the client together. With one",
        f"partition its server is busy {100 * busy1:.0f}% of the time and the client (four drivers, their",
        "decoding, the runtime) has the other core; more servers take load off the first but",
        "find no core of their own, so the rate stays where the two cores put it, and what grows",
        "with the partitions is the capacity the servers leave unused. Each partition's share of",
        "a batch is smaller, so a pair costs more server time (more calls per pair). The memory",
        "per queued request does not change with the partition count.")
    one = per_part.get(1)
    if one and one[1]:
        us = one[1]
        per_shard = 1e6 / us
        d.p("On paper, from the one-partition run: a shard spends",
            f"~{us:.0f} µs of server time per pair, so a shard on its own core serves about",
            f"{about(per_shard)} pairs a second. Partitions share nothing (a host lives in one), so",
            f"N shards on N cores serve N times that: ~{about(10 * per_shard)} a second for 10 and",
            f"~{about(100 * per_shard)} for 100, provided the fleet's workers keep them busy (here one",
            f"worker drives ~{about(one[0] / drivers)} pairs a second, so 100 shards need a few hundred",
            "workers on their own machines).")
        db = run.driver_batch
        if db:
            # Two calls per pair one at a time, 2/64 in the floor's batches: a call's fixed cost
            # and a pair's own work, solved from the two.
            fixed = median([(r["single_us"] - r["floor_us"]) / (2 - 2 / 64) for r in db])
            own = median([r["floor_us"] for r in db]) - fixed * 2 / 64
            at8 = own + fixed * 2 / 8
            d.p("The term that grows with many partitions is the batch each one sees: a worker asks a",
                "partition for at least 8 leases, so with 100 partitions a batch of 64 goes to a few of",
                "them. From the batched-driver rounds above (two calls per pair one at a time, two",
                f"per 64 pairs in the floor), a script call costs ~{fixed:.0f} µs of its own and a pair",
                f"~{own:.0f} µs of work, so at 8 leases per call a pair costs ~{at8:.0f} µs of server",
                f"time: ~{about(1e6 / at8)} pairs a second per shard, ~{about(100e6 / at8)} for 100. A",
                "crawl of a billion URLs over millions of hosts spreads its queue's memory (the last",
                "column, times the requests) over the shards the same way.")


BREAKDOWN = (
    # label, case, server time metric, commands, in commands, in Lua, per
    ("pop, one lease per call", "pop", "server_us_per_call", "redis_cmds_per_req", "cmd_us_per_req", "lua_us_per_req", "lease"),
    ("pop, `poll_batch(64)`", "pop_batch", "server_us_per_lease", "redis_cmds_per_req", "cmd_us_per_req", "lua_us_per_req", "lease"),
    ("poll + complete (two calls)", "poll_complete", "server_us_per_req", "redis_cmds_per_req", "cmd_us_per_req", "lua_us_per_req", "request"),
    ("push with the duplicate check", "push", "server_us_per_req", "redis_cmds_per_req", "cmd_us_per_req", "lua_us_per_req", "request"),
    ("push, queue only", "push_no_dupefilter", "server_us_per_req", "redis_cmds_per_req", "cmd_us_per_req", "lua_us_per_req", "request"),
    ("push of an already-seen URL (dropped)", "dupefilter_seen", "server_us_per_req", "redis_cmds_per_req", "cmd_us_per_req", "lua_us_per_req", "request"),
    ("push with a Bloom filter", "dupefilter_bloom", "server_us_per_req", "redis_cmds_per_req", "cmd_us_per_req", "lua_us_per_req", "request"),
    ("pop, 4 workers, one lease per call", "pop_workers", "server_us_per_lease", "redis_cmds_per_req", "cmd_us_per_req", "lua_us_per_req", "lease"),
    ("pop, 4 workers, `poll_batch(64)`", "pop_batch_workers", "server_us_per_lease", "redis_cmds_per_req", "cmd_us_per_req", "lua_us_per_req", "lease"),
    ("floor: a single lease's commands, no logic", "lease_floor", "server_us_per_call", "cmds_per_call", "cmd_us_per_call", "lua_us_per_call", "call"),
    ("floor: a batched lease's commands, no logic", "lease_floor", "batch_server_us_per_lease", "batch_cmds_per_lease", "batch_cmd_us_per_lease", "batch_lua_us_per_lease", "lease"),
    ("floor: an empty function call", "lease_floor", "empty_server_us_per_call", None, None, None, "call"),
)


def redis_breakdown(run):
    lines = [
        "| phase | per | server time | commands | in the commands | in Lua |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for label, case, total, cmds, cmd_us, lua_us, per in BREAKDOWN:
        t = run.r_mine_all(case, total)
        if not t:
            continue
        cells = [spread(t, us, " µs")]
        for metric, fmt, unit in ((cmds, lambda x: f"{x:.1f}", ""), (cmd_us, us, " µs"), (lua_us, us, " µs")):
            v = run.r_mine_all(case, metric) if metric else []
            cells.append(spread(v, fmt, unit) if v else "")
        lines.append(f"| {label} | {per} | {' | '.join(cells)} |")
    return lines if len(lines) > 2 else []


def redis_capacity(run):
    """Server time per poll, lease, completion and push: what one Redis can serve."""
    poll = run.r_mine_all("pop", "server_us_per_call")
    pc = run.r_mine_all("poll_complete", "server_us_per_req")
    batch = run.r_mine_all("pop_batch", "server_us_per_lease")
    if not (poll and pc and batch):
        return []

    def completion(r):
        both = run.r_at("poll_complete", "server_us_per_req", r), run.r_at("pop", "server_us_per_call", r)
        return both[0] - both[1] if None not in both else None

    comp = median(run.r_per_round(completion) or [0])
    push = run.r_mine_all("push", "server_us_per_req")
    dup = run.r_mine_all("dupefilter_seen", "server_us_per_req")
    pushes = ""
    if push:
        pushes = f" (~{median(push):.1f} µs for each new link a page yields"
        pushes += f", ~{median(dup):.1f} µs for each one the duplicate filter drops)" if dup else ")"
    s = ["Redis runs one script at a time, so a crawl's rate across the whole fleet is bounded by",
         "the server's time per request, whatever the number of workers (the table above gives",
         "the range over the rounds). In this run a single-lease poll, what the drivers do,",
         f"took {median(poll):.1f} µs of server time, a lease in `poll_batch(64)` {median(batch):.1f} µs and a",
         f"completion ~{comp:.0f} µs (a poll + complete {median(pc):.1f} µs less the poll)"
         + (f"; a pushed request took {median(push):.1f} µs." if push else "."),
         f"One crawl on one Redis therefore hands out and takes back about {about(1e6 / median(pc))}",
         f"requests a second through the drivers and about {about(1e6 / (median(batch) + comp))} with",
         f"`poll_batch`, less the time its pushes take{pushes}.",
         "The batched drivers get most of the `poll_batch` rate (below); past one server, a",
         "crawl is sharded over partitions (`ShardedRedisFrontier`, below): politeness stays",
         "exact per host."]
    return [s]


def redis_memory(run):
    if not run.redis_layout:
        return []
    per_req = run.r_mine_all("push_no_dupefilter", "redis_bytes_per_req")
    url = run.r_mine("push_no_dupefilter", "avg_url_len")
    payload = run.r_mine_all("push", "avg_payload_len")
    kinds = {}
    for row in run.redis_layout.values():
        for k, v in row.items():
            if isinstance(v, dict) and "bytes_per_req" in v:
                kinds.setdefault(k, []).append(v)

    def per(kind_names, field):
        vals = []
        for name in kind_names:
            if name in kinds:
                vals.append(median(v[field] for v in kinds[name]))
        return sum(vals) if vals else None

    q = per(["Q"], "bytes_per_req")
    own = per(["q"], "bytes_per_req")
    names = per(["N"], "bytes_per_req")
    cands = per(["C", "C|"], "bytes_per_req")
    names_host = per(["N"], "bytes_per_host")
    cands_host = per(["C", "C|"], "bytes_per_host")
    events = per(["E", "E|"], "bytes_per_req")
    total_usage = sum(median(v["bytes_per_req"] for v in vs) for vs in kinds.values())
    goal = url + 24
    pr = median(per_req)
    s = ["Almost nothing is kept per host: one binary record (its group and its scope) in a hash",
         "bucket, one entry in the candidates' ordered set (its rank and name), and its requests",
         "in a sorted set shared with 15 other hosts. Buckets, records and the leaves of the",
         "ordered sets stay small enough for Redis to keep them as compact listpacks under its",
         "default limits (no server configuration). A queued request is its payload (the",
         "in-process frontier's record without the host) behind a few bytes of order (priority,",
         "sequence number, flags)."]
    paras = [s]
    s = [f"In this run (50,000 requests over 10,000 hosts, {url:.0f}-byte URLs on average) a queued",
         f"request took {spread(per_req, lambda x: f'{x:.1f}')} B of Redis memory, against a goal of",
         f"URL + 24 = {goal:.0f} B" + (" (met)." if pr <= goal else " (not met in this run).")]
    parts = []
    if q is not None:
        parts.append(f"{q:.1f} B in the queue buckets" +
                     (f" (of which ~{median(payload):.1f} B of payload, the rest order bytes, listpack "
                      "headers, the allocator's rounding and the keys)" if payload else ""))
    if own:
        parts.append(f"{own:.1f} B in queues of their own")
    if names is not None:
        parts.append(f"{names:.1f} B of name records ({names_host:.0f} B per host)")
    if cands is not None:
        parts.append(f"{cands:.1f} B of candidates ({cands_host:.0f} B per host)")
    if events:
        parts.append(f"{events:.1f} B of events")
    if parts:
        s.append("By `MEMORY USAGE` per kind of key: " + ", ".join(parts) + ";")
        s.append(f"these sum to {total_usage:.1f} B with the crawl's few fixed keys, `MEMORY USAGE` counting "
                 f"{total_usage - pr:+.1f} B against `used_memory`.")
    s.extend(("`redis-bench` measures `used_memory` without Redis's per-command latency histograms",
             "(`CONFIG RESETSTAT` before each reading), which are not queue data."))
    paras.append(s)
    paras.append([
        "Requests per host move the figure: fewer requests per host spread each host's record and",
        "candidate entry over fewer requests (`target/release/redis-bench 50000 HOSTS` measures",
        "another shape). A host that has been fetched also keeps its throttle state until it is",
        "idle, and each lease out keeps a lease record. When a bucket holds 120 requests, the",
        "group that pushes next gets a sorted set of its own, which Redis turns into a skiplist",
        "past 128 requests, at a higher cost per request.",
    ])
    return paras


def redis_budget(run):
    """Why batched pops stop short of 10× scrapy-redis's pop, from this run's figures."""
    need = ("pop_batch", "pop_batch_ops_s"), ("pop_batch", "server_us_per_lease"), ("pop_batch", "cmd_us_per_req"), ("pop_batch", "lua_us_per_req"), \
           ("lease_floor", "batch_cmd_us_per_lease"), ("lease_floor", "batch_lua_us_per_lease"), ("lease_floor", "empty_ops_s")
    if not all(run.r_mine_all(*k) for k in need) or not run.r_mine("lease_floor", "batch_cmd_us_per_lease"):
        return []
    sr_pop = run.r_peer("sr_priority", "pop_ops_s")
    batch_ratio = run.r_ratios(("sr_priority", "pop_ops_s"), ("pop_batch", "pop_batch_ops_s"))
    empty_ratio = run.r_ratios(("sr_priority", "pop_ops_s"), ("lease_floor", "empty_ops_s"))
    budget = 1e6 / (10 * sr_pop)
    client = median(run.r_per_round(
        lambda r: 1e6 / run.r_at("pop_batch", "pop_batch_ops_s", r) - run.r_at("pop_batch", "server_us_per_lease", r)
        if run.r_at("pop_batch", "pop_batch_ops_s", r) and run.r_at("pop_batch", "server_us_per_lease", r) else None))
    server_budget = budget - client
    cmds = run.r_mine("pop_batch", "cmd_us_per_req")
    hot = run.r_mine("lease_floor", "batch_cmd_us_per_lease")
    call_lua = run.r_mine("lease_floor", "batch_lua_us_per_lease")
    lua_today = run.r_mine("pop_batch", "lua_us_per_req")
    logic = lua_today - call_lua
    left = server_budget - cmds - call_lua
    paras = []
    s = [f"The goal of 10× scrapy-redis's pop is {budget:.1f} µs per lease in this run (its pop:",
         f"{rate_k(sr_pop)})."]
    em = median(empty_ratio)
    if em < 10:
        s.extend((f"An empty function call, one after the other, runs at {ratio_words(em)} scrapy-redis's pop,",
                 "so one lease per call cannot reach 10× here: it would have to cost no more than an empty call."))
    else:
        s.extend((f"An empty function call runs at {ratio_words(em)} scrapy-redis's pop here, so the round",
                 "trip alone does not rule out 10× for one lease per call on this host."))
    paras.append(s)
    bm = median(batch_ratio)
    s = ["For a batched lease the hot-key floor hides what stands in the way. Of the" if bm < 10 else
         "For a batched lease, of the",
         f"{budget:.1f} µs the client and the round trip take ~{client:.1f} µs (wall time per lease less",
         f"server time), so the server may spend ~{server_budget:.1f} µs. The real keys' commands alone",
         f"take {cmds:.1f} µs ({cmds / hot:.1f}× their hot-key time: bigger listpacks, cold caches) and",
         f"calling them from Lua ~{call_lua:.1f} µs, ~{cmds + call_lua:.1f} µs together, which leaves",
         (f"~{left:.1f} µs for the whole scheduler and throttler" if left > 0 else "nothing for the scheduler and throttler"),
         f"against ~{logic:.1f} µs of Lua today (the batched lease's {lua_today:.1f} µs of Lua less the",
         f"floor's {call_lua:.1f})."]
    if bm < 10:
        s.extend((f"That is why batched pops stay at {spread(batch_ratio, lambda x: f'{x:.1f}', '×')} here. No rewrite",
                 "of the logic in Lua cuts it that far; fewer commands per lease (take the head, read and",
                 "write the host's record, record the lease, re-rank the candidate) would narrow the gap.",
                 "10× needs the logic in native code, a Redis module, where this store keeps to",
                 "server-side Lua functions, which also run on any Redis 7, managed services included,",
                 "where modules cannot be loaded."))
    else:
        s.append(f"Batched pops read {spread(batch_ratio, lambda x: f'{x:.1f}', '×')} in this run.")
    paras.append(s)
    return paras


# ----------------------------------------------------------------------- reproduce
def reproduce(d):
    d.h2("Reproducing")
    d.p("From the workspace root, on a machine with nothing else running (the load average",
        "before the run is in the table at the top). The peers' Python runs from a venv with",
        "the locked versions of `../shared/peers/requirements-lock.txt` (created at",
        "`~/.cache/peers-venv` if missing, or set `PEERS_PY`); the Redis section needs",
        "`redis-server` (`apt-get install -y redis-server`).")
    d.raw([
        "```sh",
        "scripts/bench-vs-peers                 # everything: builds, runs, writes this file",
        "QUICK=1 scripts/bench-vs-peers         # one run and one round of everything",
        "FULL=1 scripts/bench-vs-peers          # 3 runs of everything, longer criterion runs",
        "PAIRS=6 REPS=3 scripts/bench-vs-peers  # more paired rounds (keep PAIRS even); store and Redis rounds",
        "THP=0 SKIP_REDIS=1 scripts/bench-vs-peers  # without the huge-page reruns, without Redis",
        "scripts/bench-vs-peers --report-only   # this file again from target/bench's saved results",
        "```",
    ])
    d.p("The run saves its raw results in `target/bench/` (one JSON file or JSON-lines file per",
        "benchmark, `criterion.json` with criterion's medians, `run.json` with the header above),",
        "the tables alone in `target/bench/vs-peers.md` (raw numbers in `vs-peers.json`), the",
        "README's headline rows in `target/bench/readme-table.md`, and this file with its plot in",
        "`docs/`. Single pieces, once built (`cargo build --release -p workspace-benches --benches",
        "--bins`):")
    d.raw([
        "```sh",
        "cargo bench -p workspace-benches --bench frontier      # push, poll, fingerprints",
        "cargo bench -p workspace-benches --bench throttle      # the throttler vs governor",
        "cargo bench -p workspace-benches --bench driver        # driver overhead",
        "PROFILE_JSON=1 target/release/profile-poll 1000000 10000   # one paired-round side",
        "target/release/poll-floor 1000000 10000",
        "PROFILE_JSON=1 target/release/profile-driver 1000000 1000 tokio",
        "target/release/frontier-memory exact_dupefilter 1000000 10000",
        "target/release/store-disk fs 1000000 10000",
        "target/release/scaling",
        "target/release/redis-bench 50000 10000                 # starts its own redis-server",
        "FLOOR=1 target/release/redis-driver-batch 20000 64 5   # batched drivers, paired rounds",
        "target/release/redis-shards 50000 64 3 4               # 1, 2, 3 partitions, 3 servers",
        "$PEERS_PY ../shared/peers/bench_scrapy_queues.py 1000000 10000 --cases mem",
        "$PEERS_PY ../shared/peers/bench_scrapy_redis.py 50000 10000",
        "```",
    ])


# ------------------------------------------------------------------- readme-table.md
def readme_table(run, ours, path, report_path):
    pop = run.peer("mem", "pop_ops_s")
    rows = []
    ratios = run.paired_ratios("profile_poll", 10000, "poll_complete_ops_s")
    if ratios:
        mine = median(run.paired("profile_poll", 10000, "poll_complete_ops_s").values())
        rows.append(("poll + complete at 10,000 hosts (paired rounds)", "ScrapyPriorityQueue.pop",
                     rate(median(run.scrapy_pop.values())), rate(mine), peer_results.ratio_cell(ratios)))
    else:
        rows.append(("poll + complete at 10,000 hosts", "ScrapyPriorityQueue.pop", rate(pop),
                     rate(ours["poll_complete"]), f"**{ours['poll_complete'] / pop:,.1f}×**"))
    for label, name, theirs, mine in (
        ("push with duplicate filter", "Scheduler.enqueue_request", run.peer("sched_default", "enqueue_ops_s"), ours["push"]),
        ("poll, slot-aware (Scrapy's default queue)", "DownloaderAwarePriorityQueue.pop", run.peer("dapq", "pop_ops_s"), ours["poll_slot"]),
        ("request fingerprints", "RFPDupeFilter.request_seen", run.peer("dupefilter", "unique_seen_ops_s"), ours["fingerprint"]),
    ):
        rows.append((label, name, rate(theirs), rate(mine), f"**{mine / theirs:,.1f}×**"))
    theirs = run.peer("mem", "rss_bytes_per_req_queued")
    rows.append(("memory per queued request (RSS)", "ScrapyPriorityQueue", f"{theirs:,.0f} B",
                 f"{ours['rss_per_req']:,.0f} B", f"**{theirs / ours['rss_per_req']:,.1f}× smaller**"))
    if run.redis_rounds:
        for label, name, pk, ok in (
            ("Redis: push, queue only", "scrapy-redis PriorityQueue.push", ("sr_priority", "push_ops_s"), ("push_no_dupefilter", "push_ops_s")),
            ("Redis: pop, `poll_batch(64)`", "scrapy-redis PriorityQueue.pop", ("sr_priority", "pop_ops_s"), ("pop_batch", "pop_batch_ops_s")),
            ("Redis: pop, one lease per call", "scrapy-redis PriorityQueue.pop", ("sr_priority", "pop_ops_s"), ("pop", "pop_ops_s")),
        ):
            rows.append((label, name, rate(run.r_peer(*pk)), rate(run.r_mine(*ok)),
                         peer_results.ratio_cell(run.r_ratios(pk, ok))))
    if run.driver_batch:
        db = run.driver_batch
        rows.append(("Redis: poll + complete through the tokio driver, batched",
                     "the same driver, one call per lease and per completion",
                     rate(median([r["single_pairs_s"] for r in db])),
                     rate(median([r["batched_pairs_s"] for r in db])),
                     peer_results.ratio_cell([r["batched_pairs_s"] / r["single_pairs_s"] for r in db])))
    commit = (run.info.get("commit") or "unknown") + ("-dirty" if run.info.get("dirty") else "")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    link = os.path.relpath(os.path.abspath(report_path), root)
    lines = [
        f"Measured {run.date()} at `{commit}` on {run.cores()} cores ({run.cpu()}) by "
        f"`scripts/bench-vs-peers`, the peers in the same run; how each figure is measured, "
        f"and every other table: [{link}]({link}).",
        "",
        "| workload | peer | peer | polite-frontier | ratio |",
        "|---|---|---:|---:|---:|",
    ] + [f"| {a} | {b} | {c} | {e} | {f} |" for a, b, c, e, f in rows]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


# ------------------------------------------------------------------------------ main
def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    cmd, out = argv[1], argv[2]
    if cmd == "run-info" and len(argv) == 4 and argv[3] in ("start", "finish"):
        run_info(out, argv[3])
    elif cmd == "snapshot":
        snapshot(out)
    elif cmd == "plot":
        plot(out)
    elif cmd == "tables":
        tables(out)
    elif cmd == "redis-table":
        redis_tables(out)
    elif cmd == "report" and len(argv) == 4:
        report(out, argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
