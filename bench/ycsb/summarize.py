"""Summarise one run of bench/ycsb-vs-peers: markdown tables of throughput and latency per
workload and operation, the ratios against the peers, and the SLA verdicts."""
import json
import os
import sys

out, records_dram, records_big, budget_mb, overhead_mb, sla_ops = sys.argv[1:7]
sla_ops = float(sla_ops)
WORKLOADS = ["a", "b", "c", "f", "d", "e"]


def load(name):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def kops(r):
    return f"{r['throughput_ops_per_sec'] / 1000:.1f}K" if r else "n/a"


def ratio(a, b):
    if not a or not b or not b["throughput_ops_per_sec"]:
        return "n/a"
    return f"{a['throughput_ops_per_sec'] / b['throughput_ops_per_sec']:.2f}"


def lat(r):
    """p50/p99/p99.9 in µs per operation type."""
    if not r:
        return "n/a"
    return "; ".join(
        f"{o['operation'].lower()} {o['p50_us']}/{o['p99_us']}/{o['p999_us']}"
        for o in r["per_operation"]
    )


def answered(r):
    """Share of reads that returned the whole record (a cache's misses and any wrong data fail)."""
    if not r:
        return "n/a"
    reads = sum(o["count"] for o in r["per_operation"] if o["operation"] in ("READ", "READ-MODIFY-WRITE", "READMODIFYWRITE"))
    if not reads:
        return "-"
    return f"{100 * (1 - r['verify_errors'] / reads):.1f}%"


def info(name):
    path = os.path.join(out, name + ".info")
    if not os.path.exists(path):
        return {}
    d = {}
    for line in open(path):
        if ":" in line:
            k, v = line.strip().split(":", 1)
            d[k] = v
    return d


def nvme_reads_per_op(name, r):
    a, b = info(name + ".before"), info(name + ".after")
    if not r or "tier_nvme_reads" not in a or "tier_nvme_reads" not in b or not r["operations"]:
        return None
    return (int(b["tier_nvme_reads"]) - int(a["tier_nvme_reads"])) / r["operations"]


def fio_read(name):
    """The read side of a fio run's JSON, or None."""
    try:
        return json.load(open(os.path.join(out, name)))["jobs"][0]["read"]
    except Exception:
        return None


def device_iops():
    path = os.path.join(out, "fio.json")
    try:
        return json.load(open(path))["jobs"][0]["read"]["iops"]
    except Exception:
        return None


def device_p99_us():
    path = os.path.join(out, "fio.json")
    try:
        pct = json.load(open(path))["jobs"][0]["read"]["clat_ns"]["percentile"]
        return pct["99.000000"] / 1000
    except Exception:
        return None


def answered_kops(r):
    """Operations per second that did what was asked: reads that returned the record, and writes."""
    if not r:
        return "n/a"
    ops = sum(o["count"] for o in r["per_operation"])
    if not ops:
        return "-"
    good = (ops - r["verify_errors"] - r["errors"]) / ops
    return f"{r['throughput_ops_per_sec'] * good / 1000:.1f}K"


def worst_p99(r):
    return max(o["p99_us"] for o in r["per_operation"]) if r else None


def errors(r):
    return (r["errors"] + r["verify_errors"]) if r else 0


print(f"## In DRAM: {records_dram} records (1 KB), cxltier serve vs redis-server\n")
print("| workload | cxltier ops/s | redis ops/s | cxltier / redis | cxltier p50/p99/p99.9 µs | redis p50/p99/p99.9 µs |")
print("|---|---|---|---|---|---|")
for w in WORKLOADS:
    a, b = load(f"dram-cxltier-{w}"), load(f"dram-redis-{w}")
    print(f"| {w.upper()} | {kops(a)} | {kops(b)} | {ratio(a, b)} | {lat(a)} | {lat(b)} |")

print(f"\n## Data 5x the memory budget: {records_big} records, {budget_mb} MiB budget, "
      f"cgroup limit {int(budget_mb) + int(overhead_mb)} MiB (page cache counted)\n")
print("| workload | cxltier ops/s | memcached-extstore ops/s | cxltier / memcached | cxltier 5x / in DRAM | reads answered cxltier / memcached | answered ops/s cxltier / memcached | cxltier p50/p99/p99.9 µs | memcached p50/p99/p99.9 µs |")
print("|---|---|---|---|---|---|---|---|---|")
for w in WORKLOADS:
    a, b, d = load(f"big-cxltier-{w}"), load(f"big-memcached-{w}"), load(f"dram-cxltier-{w}")
    print(f"| {w.upper()} | {kops(a)} | {kops(b)} | {ratio(a, b)} | {ratio(a, d)} | {answered(a)} / {answered(b)} | {answered_kops(a)} / {answered_kops(b)} | {lat(a)} | {lat(b)} |")

iops = device_iops()
if iops:
    print(f"\nThe flash file's random 4 KiB read rate (fio, O_DIRECT, io_uring, queue depth 32): "
          f"{iops / 1000:.1f}K reads/s, p99 completion latency {device_p99_us() or 0:.0f} µs. "
          "Bound on cxltier's throughput from NVMe reads alone "
          "(that rate / NVMe reads per operation):\n")
    print("| workload | NVMe reads per op | bound ops/s | cxltier ops/s | of bound |")
    print("|---|---|---|---|---|")
    for w in WORKLOADS:
        r = load(f"big-cxltier-{w}")
        rpo = nvme_reads_per_op(f"big-cxltier-{w}", r)
        if rpo is None:
            continue
        bound = iops / rpo if rpo > 0 else float("inf")
        print(f"| {w.upper()} | {rpo:.2f} | {bound / 1000:.1f}K | {kops(r)} | "
              f"{r['throughput_ops_per_sec'] / bound:.2f} |")

def hit_ratio(name):
    """Share of key accesses served from memory (DRAM or CXL) during a run, from INFO."""
    a, b = info(name + ".before"), info(name + ".after")
    def d(k):
        return int(b.get(k, 0)) - int(a.get(k, 0))
    mem = d("tier_dram_hits") + d("tier_cxl_hits")
    total = mem + d("tier_nvme_hits")
    return mem / total if total else None


rows = []
for w in ["a", "b", "c", "f"]:
    path = os.path.join(out, f"hitbound-{w}.json")
    got = hit_ratio(f"big-cxltier-{w}")
    if not os.path.exists(path) or got is None:
        continue
    bound = json.load(open(path))["bounds"][0]
    rows.append((w, bound, got))
if rows:
    print("\nMemory hit ratio against its bound: the share of key accesses cxltier served from "
          "memory, and the best any cache holding as many objects can reach on the workload's key "
          "choices (`cxltier ycsb hit-bound`: the most requested keys always cached):\n")
    print("| workload | objects in memory | of the records | cxltier hit ratio | best possible | of best |")
    print("|---|---|---|---|---|---|")
    for w, bound, got in rows:
        print(f"| {w.upper()} | {bound['cache_objects']} | {100 * bound['cache_share']:.1f}% | "
              f"{100 * got:.1f}% | {100 * bound['best_hit_ratio']:.1f}% | "
              f"{got / bound['best_hit_ratio']:.2f} |")

peaks = []
for sys_name in ["cxltier", "memcached"]:
    p = os.path.join(out, f"big-{sys_name}.peak")
    if os.path.exists(p):
        peaks.append(f"{sys_name} {int(open(p).read().strip()) / 2**20:.0f} MiB")
print(f"\nPeak cgroup memory (anonymous + page cache): {', '.join(peaks)}.")

print(f"\n## SLA: workloads B and C at 5x the budget, open loop at {sla_ops / 1000:.0f}K ops/s "
      "(latency from the intended start)\n")
print(f"| system | workload | achieved ops/s | p99 µs (worst op) | reads answered | kept up with {sla_ops / 1000:.0f}K ops/s (achieved >= 99% of offered) | p99 <= 1 ms |")
print("|---|---|---|---|---|---|---|")
for sys_name in ["cxltier", "memcached"]:
    for w in ["b", "c"]:
        r = load(f"sla-{sys_name}-{w}")
        if not r:
            continue
        p99 = worst_p99(r)
        ok_tp = "yes" if r["throughput_ops_per_sec"] >= 0.99 * sla_ops else "no"
        ok_lat = "yes" if p99 <= 1000 else "no"
        print(f"| {sys_name} | {w.upper()} | {kops(r)} | {p99} | {answered(r)} | {ok_tp} | {ok_lat} |")

def info_fields(name):
    path = os.path.join(out, name + ".info")
    if not os.path.exists(path):
        return {}
    fields = {}
    for line in open(path):
        k, sep, v = line.strip().partition(":")
        if sep:
            fields[k] = v
    return fields


# The store's own NVMe reads during each SLA run (INFO tiers after CONFIG RESETSTAT): from each
# read's start to the event loop collecting it. Next to the operations' p99 and the device's
# paced p99 below, it says how much of the tail is the device's.
rows = []
for w in ["b", "c"]:
    f = info_fields(f"sla-cxltier-{w}.after")
    if f.get("tier_nvme_read_latency_reads", "0") not in ("", "0"):
        rows.append(f"{w.upper()}: {int(f['tier_nvme_read_latency_reads'])} reads, p50 {f['tier_nvme_read_latency_p50_us']} µs, "
                    f"p99 {f['tier_nvme_read_latency_p99_us']} µs, p99.9 {f['tier_nvme_read_latency_p999_us']} µs")
if rows:
    print("\ncxltier's NVMe reads during the SLA runs (INFO tiers, from each read's start to its collection): "
          + "; ".join(rows) + ".")

bad = [n[:-5] for n in sorted(os.listdir(out)) if n.endswith(".json") and not n.startswith("fio") and not n.startswith("hitbound-") and errors(load(n[:-5]))]
def detail(n):
    r = load(n)
    return f"{n} ({r['errors']} errors, {r['verify_errors']} reads missing or wrong)"


sla_fio = fio_read("fio-sla.json")
if sla_fio:
    pct = sla_fio["clat_ns"]["percentile"]
    print(f"\nThe device alone at the NVMe read rate cxltier's B needs at {sla_ops / 1000:.0f}K ops/s "
          f"({sla_fio['iops'] / 1000:.1f}K random 4 KiB reads/s, fio paced at that rate, queue depth up to 32): "
          f"p50 {pct['50.000000'] / 1000:.0f} µs, p99 {pct['99.000000'] / 1000:.0f} µs, "
          f"p99.9 {pct['99.900000'] / 1000:.0f} µs. An operation that reads NVMe cannot finish sooner "
          "than its read, so with that share of operations reading, the store's p99 is bounded below "
          "by roughly the device's p99 at this rate.")

print("\nRuns with errors or failed reads: " + (", ".join(detail(n) for n in bad) if bad else "none") + ".")
