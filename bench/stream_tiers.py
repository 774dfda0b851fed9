"""XADD and XRANGE latency per decile of a stream's fill, on one Redis-protocol server.

Run by bench/stream-tiers, which starts `cxltier serve` with a DRAM budget well below the
stream's final size. The stream `st` grows to --entries entries (ids 1-0, 2-0, ...; one field
`v` of --value-bytes each), one XADD in flight at a time, each timed: that is the XADD column of
the decile it falls in. At the end of each decile, --ranges `XRANGE st (id) + COUNT 10` at ids
drawn uniformly over the entries added so far are timed, one in flight, each reply checked
(ten entries, the first one after the id asked). The server's INFO tiers counters before and
after each decile say how much of it was served from NVMe. A stdlib client (RESP2), so the
benchmark needs nothing installed.
"""

import argparse
import json
import random
import socket
import sys
import time


class Conn:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=120)
        self.file = self.sock.makefile("rb")

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self.read()

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.file.read(n + 2)
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError("unexpected reply %r" % line)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


def tiers(c):
    text = c.call("INFO", "tiers")
    fields = {}
    for line in (text or b"").decode().splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k] = v
    return fields


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True)
    ap.add_argument("--entries", type=int, required=True)
    ap.add_argument("--value-bytes", type=int, required=True)
    ap.add_argument("--ranges", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--budget-bytes", type=int, required=True)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    c = Conn(a.addr)
    c.call("DEL", "st")
    value = (b"%032x" % rng.getrandbits(128)) * (a.value_bytes // 32 + 1)
    value = value[: a.value_bytes]
    rows = []
    added = 0
    print("decile  entries  data/budget  XADD p50 us  XADD p99 us  XRANGE p50 us  XRANGE p99 us  nvme hits")
    for decile in range(1, 11):
        upto = a.entries * decile // 10
        before = tiers(c)
        adds = []
        while added < upto:
            added += 1
            t = time.perf_counter()
            got = c.call("XADD", "st", "%d-0" % added, "v", value)
            adds.append(time.perf_counter() - t)
            if got != b"%d-0" % added:
                sys.exit("XADD answered %r" % got)
        reads = []
        for _ in range(a.ranges):
            at = rng.randrange(0, max(1, added - 10))
            t = time.perf_counter()
            got = c.call("XRANGE", "st", "(%d-0" % at, "+", "COUNT", 10)
            reads.append(time.perf_counter() - t)
            if len(got) != 10 or got[0][0] != b"%d-0" % (at + 1):
                sys.exit("XRANGE after %d answered %r" % (at, got[:1]))
        after = tiers(c)
        hits = int(after.get("tier_nvme_hits", 0)) - int(before.get("tier_nvme_hits", 0))
        row = {
            "decile": decile,
            "entries": added,
            "data_over_budget": round(added * (a.value_bytes + 40) / a.budget_bytes, 2),
            "xadd_p50_us": round(pct(adds, 50) * 1e6, 1),
            "xadd_p99_us": round(pct(adds, 99) * 1e6, 1),
            "xrange_p50_us": round(pct(reads, 50) * 1e6, 1),
            "xrange_p99_us": round(pct(reads, 99) * 1e6, 1),
            "nvme_hits": hits,
        }
        rows.append(row)
        print(
            "%6d  %7d  %11.2f  %11.1f  %11.1f  %13.1f  %13.1f  %9d"
            % (
                decile,
                added,
                row["data_over_budget"],
                row["xadd_p50_us"],
                row["xadd_p99_us"],
                row["xrange_p50_us"],
                row["xrange_p99_us"],
                hits,
            ),
            flush=True,
        )
    first, last = rows[0], rows[-1]
    print(
        "flatness (decile 10 / decile 1): XADD p99 %.2fx, XRANGE p99 %.2fx"
        % (last["xadd_p99_us"] / first["xadd_p99_us"], last["xrange_p99_us"] / first["xrange_p99_us"])
    )
    with open(a.json, "w") as f:
        json.dump({"entries": a.entries, "value_bytes": a.value_bytes, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
