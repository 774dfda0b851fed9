"""The cache workload of bench/cache-vs-redis: cache-aside GET/SET over Zipfian keys against one
server (RESP over a socket, pipelined in batches), printing the hit ratio.

Each batch GETs --batch keys drawn from a Zipf(--theta) distribution over --keys keys (key rank
i drawn with probability proportional to 1 / i^theta, ranks scattered over the key names by a
fixed permutation), then SETs a value of --value-bytes for every miss, as a cache-aside client
does. The first --warmup operations fill the cache and are not counted. The draws come from a
seeded generator: both servers see the same sequence.
"""

import argparse
import bisect
import random
import socket
import sys


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise SystemExit("connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise SystemExit("connection closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.exact(n)
        if kind == b"-":
            return ("error", rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        return rest.decode()

    def call(self, *args):
        self.send(resp(*args))
        return self.reply()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--keys", type=int, default=200_000)
    p.add_argument("--ops", type=int, default=400_000)
    p.add_argument("--warmup", type=int, default=200_000)
    p.add_argument("--theta", type=float, default=0.99)
    p.add_argument("--value-bytes", type=int, default=256)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = random.Random(a.seed)
    weights = [1.0 / (i ** a.theta) for i in range(1, a.keys + 1)]
    cdf, total = [], 0.0
    for w in weights:
        total += w
        cdf.append(total)
    names = list(range(a.keys))
    random.Random(a.seed + 1).shuffle(names)
    value = b"v" * a.value_bytes
    c = Conn(a.port)
    gets = hits = errors = 0
    done = 0
    while done < a.warmup + a.ops:
        keys = [b"key:%d" % names[bisect.bisect_left(cdf, rng.random() * total)]
                for _ in range(a.batch)]
        c.send(b"".join(resp(b"GET", k) for k in keys))
        replies = [c.reply() for _ in keys]
        misses = [k for k, r in zip(keys, replies) if r is None]
        if misses:
            c.send(b"".join(resp(b"SET", k, value) for k in misses))
            for _ in misses:
                if isinstance(c.reply(), tuple):
                    errors += 1
        if done >= a.warmup:
            gets += len(keys)
            hits += len(keys) - len(misses)
        done += len(keys)
    info = c.call("INFO", "stats")
    evicted = 0
    for line in info.decode().split("\r\n"):
        if line.startswith("evicted_keys:"):
            evicted = int(line.split(":")[1])
    held = c.call("DBSIZE")
    print(f"{hits / gets:.4f} {evicted} {errors} {held}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
