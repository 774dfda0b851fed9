"""Per-operation latency of a sorted set and a list as they grow, on several Redis-protocol servers.

Run by bench/collections-scale, which starts the servers and passes their addresses; this file
fills, measures, prints the table and writes the SVG. Every server gets the same data and the very
same sequence of requests (one random generator per server, seeded alike), one request in flight,
from the same client (redis-py, RESP2). The servers are measured one after another at each size,
so that the machine's noise falls on all of them alike.

Data: SIZE members in the sorted set `cs:zset` and SIZE elements in the list `cs:list`, grown in
steps; before the first step, string keys (`cs:filler:N`, --filler-bytes each) so that the final
data set is --data-bytes (the wrapper asks for 5x the cxltier server's DRAM budget). The sorted
set's member for id i is `member:%010d` with score i; the fill uses even ids in order (appends),
and ZADD measures new members at random odd ids below 2 x SIZE, i.e. at random places of both of
the set's orders. List elements are --element-bytes long, appended by RPUSH.

Operations at each size, interleaved in a random order, --ops of each: ZADD (a new member),
ZSCORE, ZRANK and ZREM (a random existing member), ZRANGE of 10 at a random rank, LPUSH (head),
RPOP (tail), LINDEX and LSET at a random index, LRANGE of 10 at a random offset. ZADD/ZREM and
LPUSH/RPOP come in equal numbers, so the sizes stay put. A tenth as many of the same mix run
first, unmeasured, after each growth step.
"""

import argparse
import gc
import hashlib
import json
import math
import os
import random
import sys
import time

import redis

ZSET = "cs:zset"
LIST = "cs:list"
FILLER = "cs:filler:"
OPS = ["ZADD", "ZSCORE", "ZRANK", "ZRANGE", "ZREM", "LPUSH", "RPOP", "LINDEX", "LSET", "LRANGE"]
BATCH = 1000  # members per fill command


def member(i):
    return "member:%010d" % i


def element(i, length):
    """A list element of `length` bytes that names its id (so a wrong LINDEX reply is visible)."""
    head = "element:%010d:" % i
    pad = hashlib.blake2b(head.encode(), digest_size=32).hexdigest()
    return (head + pad * (length // len(pad) + 1))[:length]


class Server:
    def __init__(self, name, addr, seed):
        host, port = addr.rsplit(":", 1)
        self.name = name
        self.conn = redis.Redis(host=host, port=int(port), protocol=2, socket_timeout=120)
        self.rng = random.Random(seed)
        self.zids = []  # ids of the sorted set's members, in no order
        self.zset_ids = set()  # the same, for "is this odd id taken"
        self.list_len = 0
        self.next_element = 0  # ids of list elements ever pushed (for their content)

    def info(self, section):
        return self.conn.execute_command("INFO", section)

    def nvme_counts(self):
        """(objects served from the NVMe tier, device reads): the second excludes what the log's
        write-behind buffer or a read already in flight answered."""
        t = self.info("tiers")
        if not isinstance(t, dict):
            return 0, 0
        return int(t.get("tier_nvme_hits", 0)), int(t.get("tier_nvme_reads", 0))


def load_filler(srv, count, value_bytes):
    pipe = srv.conn.pipeline(transaction=False)
    for k in range(count):
        value = hashlib.blake2b(b"%d" % k, digest_size=32).hexdigest()
        pipe.execute_command("SET", FILLER + str(k), (value * (value_bytes // 64 + 1))[:value_bytes])
        if k % 100 == 99:
            pipe.execute()
    pipe.execute()


def grow(srv, size, element_bytes):
    """Fill the sorted set and the list up to `size` members each."""
    while len(srv.zids) < size:
        n = min(BATCH, size - len(srv.zids))
        # Even ids in order: the fill appends; the measured ZADDs insert odd ids in between.
        start = 2 * len(srv.zids)
        while start in srv.zset_ids:
            start += 2
        ids = []
        i = start
        while len(ids) < n:
            if i not in srv.zset_ids:
                ids.append(i)
            i += 2
        args = []
        for i in ids:
            args += [i, member(i)]
        added = srv.conn.execute_command("ZADD", ZSET, *args)
        if int(added) != n:
            raise SystemExit(f"{srv.name}: ZADD of {n} new members added {added}")
        srv.zids += ids
        srv.zset_ids.update(ids)
    while srv.list_len < size:
        n = min(BATCH, size - srv.list_len)
        elems = [element(srv.next_element + k, element_bytes) for k in range(n)]
        srv.next_element += n
        length = srv.conn.execute_command("RPUSH", LIST, *elems)
        srv.list_len += n
        if int(length) != srv.list_len:
            raise SystemExit(f"{srv.name}: RPUSH left {LIST} at {length} members, expected {srv.list_len}")


def one_op(srv, op, size, element_bytes):
    """Run one operation and return its latency in microseconds (request sent to reply parsed)."""
    rng = srv.rng
    c = srv.conn
    if op == "ZADD":
        while True:
            i = 2 * rng.randrange(size) + 1
            if i not in srv.zset_ids:
                break
        args = ("ZADD", ZSET, i, member(i))
    elif op in ("ZSCORE", "ZRANK", "ZREM"):
        pos = rng.randrange(len(srv.zids))
        i = srv.zids[pos]
        args = (op, ZSET, member(i))
    elif op == "ZRANGE":
        r = rng.randrange(max(1, len(srv.zids) - 10))
        args = ("ZRANGE", ZSET, r, r + 9)
    elif op == "LPUSH":
        args = ("LPUSH", LIST, element(srv.next_element, element_bytes))
        srv.next_element += 1
    elif op == "RPOP":
        args = ("RPOP", LIST)
    elif op == "LINDEX":
        args = ("LINDEX", LIST, rng.randrange(srv.list_len))
    elif op == "LSET":
        args = ("LSET", LIST, rng.randrange(srv.list_len), element(srv.next_element, element_bytes))
        srv.next_element += 1
    elif op == "LRANGE":
        r = rng.randrange(max(1, srv.list_len - 10))
        args = ("LRANGE", LIST, r, r + 9)
    else:
        raise ValueError(op)
    t0 = time.perf_counter_ns()
    reply = c.execute_command(*args)
    t1 = time.perf_counter_ns()
    # Check the reply and keep the client's picture of the collections right.
    bad = None
    if op == "ZADD":
        if int(reply) != 1:
            bad = reply
        srv.zids.append(i)
        srv.zset_ids.add(i)
    elif op == "ZSCORE":
        if reply is None or float(reply) != i:
            bad = reply
    elif op == "ZRANK":
        if reply is None or not 0 <= int(reply) < len(srv.zids):
            bad = reply
    elif op == "ZREM":
        if int(reply) != 1:
            bad = reply
        srv.zids[pos] = srv.zids[-1]
        srv.zids.pop()
        srv.zset_ids.discard(i)
    elif op in ("ZRANGE", "LRANGE"):
        if len(reply) != 10:
            bad = reply
    elif op == "LPUSH":
        srv.list_len += 1
        if int(reply) != srv.list_len:
            bad = reply
    elif op == "RPOP":
        srv.list_len -= 1
        if reply is None or len(reply) != element_bytes:
            bad = reply
    elif op == "LINDEX":
        if reply is None or len(reply) != element_bytes:
            bad = reply
    elif op == "LSET":
        if reply not in (b"OK", "OK", True):
            bad = reply
    if bad is not None:
        raise SystemExit(f"{srv.name}: {' '.join(map(str, args))[:120]} answered {bad!r:.120}")
    return (t1 - t0) / 1000.0


def percentile(sorted_values, q):
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[k]


def measure(srv, size, ops, warmup, element_bytes):
    schedule = [op for op in OPS for _ in range(ops)]
    srv.rng.shuffle(schedule)
    warm = [op for op in OPS for _ in range(warmup)]
    srv.rng.shuffle(warm)
    for op in warm:
        one_op(srv, op, size, element_bytes)
    hits0, reads0 = srv.nvme_counts()
    lat = {op: [] for op in OPS}
    # The client's own pauses stay out of the figures: Python's cyclic collector, run now, then
    # not during the timed operations.
    gc.collect()
    gc.disable()
    t0 = time.monotonic()
    try:
        for op in schedule:
            lat[op].append(one_op(srv, op, size, element_bytes))
    finally:
        gc.enable()
    seconds = time.monotonic() - t0
    hits1, reads1 = srv.nvme_counts()
    out = {}
    for op in OPS:
        v = sorted(lat[op])
        out[op] = {"p50_us": percentile(v, 0.50), "p99_us": percentile(v, 0.99), "n": len(v)}
    return out, (hits1 - hits0) / len(schedule), (reads1 - reads0) / len(schedule), seconds


# ---- the SVG ---------------------------------------------------------------------------------------
COLORS = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"]


def svg(path, title, sizes, servers, results):
    """One panel per operation: p50 (solid, dots) and p99 (dashed) against size, both axes log."""
    cols, rows = 5, 2
    pw, ph = 300, 230
    ml, mt, mb, mr = 56, 30, 40, 10
    width, height = cols * pw, rows * ph + 70
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="15">{title}</text>',
    ]
    x0, x1 = math.log10(min(sizes)), math.log10(max(sizes))
    if x1 == x0:
        x1 = x0 + 1
    for k, op in enumerate(OPS):
        ox, oy = (k % cols) * pw, 30 + (k // cols) * ph
        vals = [
            results[s][str(n)]["ops"][op][q]
            for s in servers
            for n in sizes
            if str(n) in results[s]
            for q in ("p50_us", "p99_us")
        ]
        vals = [v for v in vals if v > 0 and math.isfinite(v)]
        if not vals:
            continue
        y0 = math.floor(math.log10(min(vals)))
        y1 = math.ceil(math.log10(max(vals)))
        if y1 == y0:
            y1 += 1
        left, right = ox + ml, ox + pw - mr
        top, bottom = oy + mt, oy + ph - mb

        def px(n):
            return left + (math.log10(n) - x0) / (x1 - x0) * (right - left)

        def py(v):
            return bottom - (math.log10(v) - y0) / (y1 - y0) * (bottom - top)

        out.append(f'<text x="{(left + right) / 2}" y="{oy + 20}" text-anchor="middle" font-size="13">{op}</text>')
        out.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#888"/>')
        for e in range(y0, y1 + 1):
            y = py(10**e)
            out.append(f'<line x1="{left}" y1="{y}" x2="{right}" y2="{y}" stroke="#ddd"/>')
            label = f"{10**e:g} µs" if e < 3 else f"{10 ** (e - 3):g} ms"
            out.append(f'<text x="{left - 4}" y="{y + 4}" text-anchor="end">{label}</text>')
        for n in sizes:
            x = px(n)
            out.append(f'<line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" stroke="#eee"/>')
            label = f"{n // 1000}k" if n < 1_000_000 else f"{n / 1e6:g}M"
            out.append(f'<text x="{x}" y="{bottom + 14}" text-anchor="middle">{label}</text>')
        for si, s in enumerate(servers):
            color = COLORS[si % len(COLORS)]
            for q, dash in (("p50_us", ""), ("p99_us", ' stroke-dasharray="4 3"')):
                pts = [(px(n), py(results[s][str(n)]["ops"][op][q])) for n in sizes if str(n) in results[s]]
                if len(pts) > 1:
                    d = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
                    out.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
                if q == "p50_us":
                    for x, y in pts:
                        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"/>')
    ly = rows * ph + 50
    lx = 20
    for si, s in enumerate(servers):
        color = COLORS[si % len(COLORS)]
        out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 24}" y2="{ly}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{lx + 30}" y="{ly + 4}">{s} p50</text>')
        out.append(
            f'<line x1="{lx + 200}" y1="{ly}" x2="{lx + 224}" y2="{ly}" stroke="{color}" stroke-width="2" stroke-dasharray="4 3"/>'
        )
        out.append(f'<text x="{lx + 230}" y="{ly + 4}">{s} p99</text>')
        lx += 420
    out.append(
        f'<text x="{width / 2}" y="{height - 4}" text-anchor="middle">'
        "members in the collection (log scale); latency per operation, one request in flight (log scale)</text>"
    )
    out.append("</svg>")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", action="append", required=True, metavar="NAME=HOST:PORT")
    ap.add_argument("--reference", required=True, help="the NAME the ratios divide by")
    ap.add_argument("--sizes", required=True, help="comma-separated, ascending")
    ap.add_argument("--ops", type=int, required=True, help="measured operations of each kind per size")
    ap.add_argument("--data-bytes", type=int, required=True, help="data set at the largest size")
    ap.add_argument("--element-bytes", type=int, required=True)
    ap.add_argument("--filler-bytes", type=int, required=True, help="bytes per filler value")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--svg", required=True)
    ap.add_argument("--title", required=True)
    a = ap.parse_args()

    sizes = [int(s) for s in a.sizes.split(",")]
    servers = []
    for spec in a.server:
        name, addr = spec.split("=", 1)
        servers.append(Server(name, addr, a.seed))
    names = [s.name for s in servers]
    if a.reference not in names:
        raise SystemExit(f"--reference {a.reference}: not one of {', '.join(names)}")

    # The collections' share of the data set at the largest size: member + 8-byte score, element.
    top = sizes[-1]
    coll_bytes = top * (len(member(0)) + 8) + top * a.element_bytes
    filler_value = a.filler_bytes
    filler_count = max(0, (a.data_bytes - coll_bytes) // (filler_value + len(FILLER) + 7))
    data_bytes = coll_bytes + filler_count * (filler_value + len(FILLER) + 7)
    print(
        f"data set at {top:,} members: collections {coll_bytes / 2**20:.1f} MiB + filler "
        f"{filler_count:,} x {filler_value} B = {data_bytes / 2**20:.1f} MiB",
        file=sys.stderr,
    )
    for srv in servers:
        srv.conn.execute_command("DEL", ZSET, LIST)
        t = time.monotonic()
        load_filler(srv, filler_count, filler_value)
        print(f"{srv.name}: filler loaded in {time.monotonic() - t:.1f} s", file=sys.stderr)

    results = {s.name: {} for s in servers}
    meta = {
        "sizes": sizes,
        "ops_per_kind": a.ops,
        "element_bytes": a.element_bytes,
        "member_bytes": len(member(0)),
        "filler_keys": filler_count,
        "filler_value_bytes": filler_value,
        "data_bytes_at_largest": data_bytes,
        "seed": a.seed,
    }
    for n in sizes:
        for srv in servers:
            t = time.monotonic()
            grow(srv, n, a.element_bytes)
            grow_s = time.monotonic() - t
            ops, hits_per_op, reads_per_op, secs = measure(srv, n, a.ops, max(1, a.ops // 10), a.element_bytes)
            results[srv.name][str(n)] = {
                "ops": ops,
                "nvme_hits_per_op": hits_per_op,
                "nvme_reads_per_op": reads_per_op,
                "grow_seconds": grow_s,
                "measure_seconds": secs,
            }
            print(
                f"{srv.name} at {n:,}: grown in {grow_s:.1f} s, {len(OPS) * a.ops} ops in {secs:.1f} s"
                f" (per op: {hits_per_op:.2f} objects from the NVMe tier, {reads_per_op:.2f} device reads)",
                file=sys.stderr,
            )
            # Written after every step, so an interrupted run leaves what it measured.
            with open(a.json, "w") as f:
                json.dump({"meta": meta, "results": results}, f, indent=1)

    # Where the data is at the end, on the servers that say.
    tiers = {}
    for srv in servers:
        t = srv.info("tiers")
        if isinstance(t, dict) and t:
            where = {}
            for key in (ZSET, LIST):
                try:
                    where[key] = srv.conn.execute_command("OBJECT", "TIER", key)
                except redis.ResponseError as e:
                    where[key] = f"error: {e}"
            where = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in where.items()}
            keep = {k: v for k, v in t.items() if k.startswith(("keys", "index_bytes", "tier_dram", "tier_nvme", "evictions"))}
            tiers[srv.name] = {"object_tier": where, "info_tiers": keep}
        else:
            mem = srv.info("memory")
            tiers[srv.name] = {"used_memory": mem.get("used_memory")}
    with open(a.json, "w") as f:
        json.dump({"meta": meta, "results": results, "end": tiers}, f, indent=1)

    # ---- the table ----
    ref = a.reference
    others = [s for s in names if s != ref]
    print()
    print(
        f"Per-operation latency, one request in flight, {a.ops} of each operation per size "
        f"(p50 / p99 in µs; ratio = server / {ref})"
    )
    head = f"{'size':>9} {'op':<7}" + "".join(f" {s + ' p50/p99':>24}" for s in names)
    head += "".join(f" {s + '/' + ref + ' p50, p99':>30}" for s in others)
    print(head)
    for n in sizes:
        for op in OPS:
            row = f"{n:>9,} {op:<7}"
            for s in names:
                r = results[s][str(n)]["ops"][op]
                row += f" {r['p50_us']:>11.1f} / {r['p99_us']:>9.1f}"
            base = results[ref][str(n)]["ops"][op]
            for s in others:
                r = results[s][str(n)]["ops"][op]
                row += f" {r['p50_us'] / base['p50_us']:>14.2f}, {r['p99_us'] / base['p99_us']:>13.2f}"
            print(row)
    print()
    print(f"Flatness: p50 (p99) at {sizes[-1]:,} / at {sizes[0]:,} members")
    print(f"{'op':<7}" + "".join(f" {s:>24}" for s in names))
    for op in OPS:
        row = f"{op:<7}"
        for s in names:
            lo = results[s][str(sizes[0])]["ops"][op]
            hi = results[s][str(sizes[-1])]["ops"][op]
            row += f" {hi['p50_us'] / lo['p50_us']:>13.2f} ({hi['p99_us'] / lo['p99_us']:>6.2f})"
        print(row)
    print()
    print("Per operation, by size: objects served from the NVMe tier / device reads (INFO tiers)")
    for s in names:
        r = results[s]
        print(f"  {s}: " + ", ".join(f"{n:,}: {r[str(n)]['nvme_hits_per_op']:.2f} / {r[str(n)]['nvme_reads_per_op']:.2f}" for n in sizes))
    print()
    print("At the end:")
    for s in names:
        print(f"  {s}: {json.dumps(tiers[s])}")
    svg(a.svg, a.title, sizes, names, results)
    print(f"curve: {a.svg}")


if __name__ == "__main__":
    main()
