#!/usr/bin/env python3
"""Summarize a bench/probe-vs-peers run: every figure per round, medians, and ours / best peer.

Usage: summarize.py OUT_DIR THREADS ROUNDS LAT_RUNS

All bandwidths are GB/s = 10^9 bytes per second of *requested* bytes (what the program read plus
what it wrote), which is how STREAM counts; memory traffic (which adds a read-for-ownership per line
written with regular stores) is shown for ours where it differs. Each peer's figure is converted to
that convention:
- STREAM prints MB/s (10^6) of requested bytes, best iteration of 10;
- mbw prints MiB/s of bytes *copied*, counting each byte once although it is read and written: x2,
  x1.048576, and summed over the concurrent instances (mbw is single-threaded);
- stress-ng prints the *geometric mean per instance* of read and write MB/s: (read + write) x the
  number of instances.
"""

import glob
import json
import os
import re
import statistics
import sys

out, threads, rounds, lat_runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def ours(r):
    try:
        d = json.loads(read(f"{out}/ours-{r}.json"))
    except ValueError:
        return {}
    t = d["targets"][0]
    res = {}
    for b in t["bandwidth"]:
        res[b["mix"]] = b
    return res


def stream(r):
    rows = {}
    for kernel in ("Copy", "Scale", "Add", "Triad"):
        m = re.search(rf"^{kernel}:\s+([\d.]+)", read(f"{out}/stream-{r}.txt"), re.M)
        if m:
            rows[kernel] = float(m.group(1)) / 1000.0
    return rows


def mbw(r, method):
    total = 0.0
    files = sorted(glob.glob(f"{out}/mbw-t{method}-{r}-*.txt"))
    for path in files:
        m = re.search(r"^AVG\s.*Copy:\s+([\d.]+) MiB/s", read(path), re.M)
        if not m:
            return None
        total += float(m.group(1)) * 1.048576 * 2 / 1000.0
    return total if files else None


def stress(r, kind):
    text = read(f"{out}/stress-{kind}-{r}.txt")
    if kind == "stream":
        rd = re.search(r"([\d.]+) memory read rate", text)
        wr = re.search(r"([\d.]+) memory write rate", text)
        if rd and wr:
            return (float(rd.group(1)) + float(wr.group(1))) * threads / 1000.0
        return None
    best = None
    for m in re.finditer(r"([\d.]+) (read\w*) MB per sec", text):
        v = float(m.group(1)) * threads / 1000.0
        if best is None or v > best[0]:
            best = (v, m.group(2))
    return best


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x):
    return "-" if x is None else f"{x:.2f}"


rows = []  # (label, [per round], kind) kind: ours-read, ours-copy, peer-read, peer-copy


def add(label, values, kind):
    rows.append((label, values, kind))


R = range(1, rounds + 1)
o = [ours(r) for r in R]
add("ours R, median window", [x.get("R", {}).get("requested_gbps") for x in o], "ours-read")
add("ours R, best window", [x.get("R", {}).get("best_requested_gbps") for x in o], "ours-read-best")
add("ours 1:1, median window", [x.get("1:1", {}).get("requested_gbps") for x in o], "ours-copy")
add("ours 1:1, best window", [x.get("1:1", {}).get("best_requested_gbps") for x in o], "ours-copy-best")
add("ours 1:1 memory traffic (RFO incl.)", [x.get("1:1", {}).get("traffic_gbps") for x in o], "info")
add("ours 1:1nt, median window", [x.get("1:1nt", {}).get("requested_gbps") for x in o], "ours-copy")
add("ours 1:1nt, best window", [x.get("1:1nt", {}).get("best_requested_gbps") for x in o], "ours-copy-best")
s = [stream(r) for r in R]
has_stream = any(s)
memcpy = read(f"{out}/stream-memcpy").strip() == "yes"
if has_stream:
    add("STREAM Copy, best of 10" + (" (compiled to memcpy)" if memcpy else ""), [x.get("Copy") for x in s], "peer-copy")
    add("STREAM Scale, best of 10", [x.get("Scale") for x in s], "peer-copy")
    add("STREAM Add, best of 10 (2 reads : 1 write)", [x.get("Add") for x in s], "info")
    add("STREAM Triad, best of 10 (2 reads : 1 write)", [x.get("Triad") for x in s], "info")
add(f"mbw MEMCPY x{threads} instances", [mbw(r, 0) for r in R], "peer-copy")
add(f"mbw MCBLOCK x{threads} instances", [mbw(r, 2) for r in R], "peer-copy")
add(f"stress-ng stream x{threads} (read+write)", [stress(r, "stream") for r in R], "peer-copy")
mr = [stress(r, "memrate") for r in R]
best_method = next((m[1] for m in mr if m), "read")
add(f"stress-ng memrate {best_method} x{threads}", [m[0] if m else None for m in mr], "peer-read")

print()
print(f"Bandwidth, GB/s of requested bytes ({threads} threads; {rounds} round(s), tools alternating)")
head = "".join(f"  round {r:<3}" for r in R)
print(f"{'':46}{head}  median")
for label, values, _ in rows:
    cells = "".join(f"  {fmt(v):>9}" for v in values)
    print(f"{label:46}{cells}  {fmt(med(values)):>6}")


def best(kinds):
    cands = [(med(v), label) for label, v, k in rows if k in kinds and med(v) is not None]
    return max(cands) if cands else (None, "")


print()
print("Ratios, ours / best peer (medians of the rounds):")
for what, ours_kind, peer_kind in (
    ("read", ("ours-read",), ("peer-read",)),
    ("copy", ("ours-copy",), ("peer-copy",)),
    ("read, best windows", ("ours-read-best",), ("peer-read",)),
    ("copy, best windows", ("ours-copy-best",), ("peer-copy",)),
):
    ov, ol = best(ours_kind)
    pv, pl = best(peer_kind)
    if ov and pv:
        print(f"  {what:20} {ov:7.2f} ({ol}) / {pv:7.2f} ({pl}) = {ov / pv:.2f}")

# Latency
lat = []
for r in range(1, lat_runs + 1):
    try:
        d = json.loads(read(f"{out}/lat-ours-{r}.json"))
        lat.append(d["targets"][0]["idle_latency"]["ns"])
    except (ValueError, KeyError, IndexError):
        pass


def chase(pattern):
    xs = []
    for path in sorted(glob.glob(f"{out}/{pattern}")):
        m = re.search(r"^median: ([\d.]+)", read(path), re.M)
        if m:
            xs.append(float(m.group(1)))
    return xs


base = chase("lat-chase-[0-9]*.txt")
huge = chase("lat-chase-huge-*.txt")


def spread(xs):
    return (max(xs) - min(xs)) / statistics.median(xs) * 100.0 if xs else float("nan")


print()
print(f"Idle latency, ns per load ({lat_runs} runs each)")
for label, xs in (
    ("ours (cxltier probe, median of 7 runs each)", lat),
    ("plain chase, lmbench way, base pages", base),
    ("plain chase, lmbench way, huge pages (-H)", huge),
):
    if xs:
        print(
            f"  {label:44} median {statistics.median(xs):6.1f}  min {min(xs):6.1f}  max {max(xs):6.1f}"
            f"  spread {spread(xs):4.1f}%   runs: {', '.join(f'{x:.1f}' for x in xs)}"
        )
if lat and huge:
    print(f"  ours / plain chase with huge pages = {statistics.median(lat) / statistics.median(huge):.3f}")
if lat:
    ok = spread(lat) <= 3.0
    print(f"  our idle latency spread across runs: {spread(lat):.1f}% ({'within' if ok else 'NOT within'} 3%)")
