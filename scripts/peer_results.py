"""The peers' benchmark results for `bench-vs-peers`: the JSON lines their scripts in
../shared/peers write (`kind` = env | sample | summary | error)."""
import json
import statistics
import sys


def summaries(path):
    """The medians of a peer script's JSON lines, by (case, metric); exits on an error row."""
    found = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if row.get("kind") == "summary":
                found[(row["case"], row["metric"])] = row["median"]
            if row.get("kind") == "error":
                sys.exit(f"peer benchmark failed: {row}")
    return found


def figure(table, case, metric):
    """table[(case, metric)], or an exit naming the missing figure."""
    try:
        return table[(case, metric)]
    except KeyError:
        sys.exit(f"peer figure missing: {case} {metric}")


def ratio_cell(ratios):
    """A table cell for the ratios of paired rounds: their median in bold, and their
    range when there was more than one round."""
    ratios = sorted(ratios)
    spread = f" ({ratios[0]:,.1f}-{ratios[-1]:,.1f}×)" if len(ratios) > 1 else ""
    return f"**{statistics.median(ratios):,.1f}×**{spread}"
