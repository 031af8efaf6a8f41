#!/usr/bin/env python3
"""Renders a Chrome trace dumped by the profiler (MXDumpProfile) as a timeline PNG: one row
per thread of each category (process), every B/E span a bar (nested spans one level down),
coloured by name, with each name's count and total time in the legend.

usage: trace-picture.py TRACE.json OUT.png [TITLE]      (needs matplotlib)
"""
import collections
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402


def spans(events):
    """(process, thread, name, start, end, depth, args) for every B/E pair, in file order."""
    stacks, out = collections.defaultdict(list), []
    for e in events:
        track = (e["pid"], e.get("tid"))
        if e["ph"] == "B":
            stacks[track].append(e)
        elif e["ph"] == "E":
            b = stacks[track].pop()
            out.append((e["pid"], e.get("tid"), b["name"], b["ts"], e["ts"], len(stacks[track]), b.get("args", {})))
    return out


def main():
    path, png = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else path
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    found = spans(events)
    if not found:
        sys.exit("no B/E spans in " + path)
    t0 = min(s[3] for s in found)
    rows = sorted({(p, t) for p, t, *_ in found}, key=lambda pt: (processes.get(pt[0], ""), threads.get(pt, str(pt[1]))))
    row_of = {r: i for i, r in enumerate(rows)}
    names = sorted({s[2] for s in found})
    palette = plt.get_cmap("tab10")
    colour = {n: palette(i % 10) for i, n in enumerate(names)}
    totals = collections.defaultdict(lambda: [0, 0.0])

    fig, ax = plt.subplots(figsize=(13, 1.2 + 0.75 * len(rows)), dpi=110)
    for p, t, name, start, end, depth, _ in found:
        y = row_of[(p, t)]
        height = 0.7 - 0.2 * depth
        ax.broken_barh([((start - t0) / 1e3, max((end - start) / 1e3, 0.002))], (y - height / 2, height),
                       facecolors=colour[name], edgecolors="black", linewidth=0.3)
        if depth == 0:
            totals[name][0] += 1
            totals[name][1] += (end - start) / 1e3
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(["%s: %s" % (processes.get(p, p), threads.get((p, t), t)) for p, t in rows])
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds since the first event")
    ax.set_title(title)
    ax.grid(axis="x", linestyle=":", linewidth=0.5)
    handles = [Patch(facecolor=colour[n], edgecolor="black", label="%s: %d, %.1f ms" % (n, totals[n][0], totals[n][1]))
               for n in names]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, title="span: count, total")
    fig.tight_layout()
    fig.savefig(png)
    print("wrote %s (%d spans on %d threads)" % (png, len(found), len(rows)))


if __name__ == "__main__":
    main()
