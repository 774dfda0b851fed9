"""redis-py checks for scripts/client-checks: the calls an application makes, with the client's
default settings (redis-py 8: RESP3 through HELLO 3, transactional pipelines). One line per check,
PASS or FAIL with the reason; the exit status is the number of checks that failed.

Usage: python client-checks.py HOST PORT [2]
With 2, the client is made with protocol=2 (RESP2, no HELLO): to see what else fails on a server
that refuses HELLO 3. The defaults are the point; this is a diagnosis.
Keys are under a prefix unique to the run and deleted at the end: the server's other keys are
neither read nor changed (scan_iter matches the prefix only).
"""

import os
import sys
import time
import traceback

import redis

host, port = sys.argv[1], int(sys.argv[2])
resp2 = len(sys.argv) > 3 and sys.argv[3] == "2"
prefix = f"client-checks:{os.getpid()}:{int(time.time())}:"
failed = 0


def check(name):
    def run(fn):
        global failed
        try:
            fn()
            print(f"PASS redis-py {name}", flush=True)
        except Exception as e:  # every failure is reported, none stops the others
            failed += 1
            # The line of this file the failure came through, not redis-py's own.
            mine = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == __file__]
            where = mine[-1] if mine else traceback.extract_tb(e.__traceback__)[-1]
            reason = f"{type(e).__name__}: {e}".replace("\n", " ")
            print(f"FAIL redis-py {name}: {reason} (client-checks.py line {where.lineno})", flush=True)
        return fn

    return run


def expect(what, got, want):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def k(name):
    return prefix + name


# The defaults a new user gets: no protocol, no decode_responses.
r = redis.Redis(host=host, port=port, **({"protocol": 2} if resp2 else {}))


def connect_resp2():
    expect("PING", r.ping(), True)


def connect_resp3():
    expect("PING", r.ping(), True)
    conn = r.connection_pool.get_connection()
    try:
        expect("negotiated protocol", int(conn.protocol), 3)
    finally:
        r.connection_pool.release(conn)
    hello = r.execute_command("HELLO", "3")
    if not isinstance(hello, dict):
        raise AssertionError(f"HELLO 3 replied {type(hello).__name__} {hello!r}, want a RESP3 map")
    proto = hello.get(b"proto", hello.get("proto"))
    expect("HELLO 3's proto field", proto, 3)


if resp2:
    check("connect with protocol=2 (RESP2, no HELLO)")(connect_resp2)
else:
    check("connect with defaults (HELLO 3, RESP3)")(connect_resp3)


@check("strings")
def _():
    expect("SET", r.set(k("s"), "hello"), True)
    expect("GET", r.get(k("s")), b"hello")
    expect("APPEND", r.append(k("s"), " world"), 11)
    expect("STRLEN", r.strlen(k("s")), 11)
    expect("INCR", r.incr(k("n")), 1)
    expect("INCRBY", r.incrby(k("n"), 41), 42)
    expect("MSET", r.mset({k("m1"): "a", k("m2"): "b"}), True)
    expect("MGET", r.mget([k("m1"), k("m2"), k("missing")]), [b"a", b"b", None])
    expect("SET EX", r.set(k("e"), "x", ex=100), True)
    ttl = r.ttl(k("e"))
    if not 0 < ttl <= 100:
        raise AssertionError(f"TTL after SET EX 100: got {ttl!r}, want 1..100")
    expect("SET NX on an existing key", r.set(k("s"), "other", nx=True), None)
    expect("GETDEL", r.getdel(k("m1")), b"a")
    expect("EXISTS after GETDEL", r.exists(k("m1")), 0)


@check("hashes")
def _():
    expect("HSET", r.hset(k("h"), mapping={"f1": "v1", "f2": "v2"}), 2)
    expect("HGET", r.hget(k("h"), "f1"), b"v1")
    expect("HGETALL", r.hgetall(k("h")), {b"f1": b"v1", b"f2": b"v2"})
    expect("HINCRBY", r.hincrby(k("h"), "c", 5), 5)
    expect("HLEN", r.hlen(k("h")), 3)
    expect("HDEL", r.hdel(k("h"), "f2"), 1)
    expect("HEXISTS", r.hexists(k("h"), "f2"), False)
    expect("HMGET", r.hmget(k("h"), ["f1", "nope"]), [b"v1", None])


@check("lists")
def _():
    expect("RPUSH", r.rpush(k("l"), "a", "b", "c"), 3)
    expect("LPUSH", r.lpush(k("l"), "z"), 4)
    expect("LRANGE", r.lrange(k("l"), 0, -1), [b"z", b"a", b"b", b"c"])
    expect("LPOP", r.lpop(k("l")), b"z")
    expect("RPOP", r.rpop(k("l")), b"c")
    expect("LLEN", r.llen(k("l")), 2)
    expect("LINDEX", r.lindex(k("l"), 1), b"b")


@check("sets")
def _():
    expect("SADD", r.sadd(k("set"), "a", "b", "c"), 3)
    expect("SADD of a member present", r.sadd(k("set"), "a"), 0)
    expect("SMEMBERS", r.smembers(k("set")), {b"a", b"b", b"c"})
    expect("SISMEMBER", bool(r.sismember(k("set"), "b")), True)
    expect("SREM", r.srem(k("set"), "b"), 1)
    expect("SCARD", r.scard(k("set")), 2)


@check("sorted sets")
def _():
    expect("ZADD", r.zadd(k("z"), {"a": 1, "b": 2.5, "c": 3}), 3)
    expect("ZRANGE WITHSCORES", r.zrange(k("z"), 0, -1, withscores=True),
           [(b"a", 1.0), (b"b", 2.5), (b"c", 3.0)])
    expect("ZSCORE", r.zscore(k("z"), "b"), 2.5)
    expect("ZINCRBY", r.zincrby(k("z"), 10, "a"), 11.0)
    expect("ZRANGEBYSCORE", r.zrangebyscore(k("z"), 2, 5), [b"b", b"c"])
    expect("ZREM", r.zrem(k("z"), "c"), 1)
    expect("ZCARD", r.zcard(k("z")), 2)


@check("pipeline() (MULTI/EXEC, the default)")
def _():
    p = r.pipeline()
    p.set(k("p"), "1").incr(k("p")).get(k("p"))
    expect("pipeline results", p.execute(), [True, 2, b"2"])


@check("scan_iter")
def _():
    keys = {k(f"scan:{i}").encode() for i in range(300)}
    p = r.pipeline(transaction=False)
    for key in keys:
        p.set(key, "v")
    p.execute()
    seen = set(r.scan_iter(match=k("scan:*"), count=50))
    if seen != keys:
        raise AssertionError(f"scan_iter returned {len(seen)} keys, {len(keys - seen)} of the "
                             f"{len(keys)} missing, {len(seen - keys)} unexpected")


@check("pub/sub round trip")
def _():
    channel = k("chan")
    ps = r.pubsub()
    try:
        ps.subscribe(channel)
        first = ps.get_message(timeout=5)
        if not first or first.get("type") != "subscribe":
            raise AssertionError(f"no subscribe confirmation: {first!r}")
        expect("PUBLISH receivers", r.publish(channel, "ping"), 1)
        msg = ps.get_message(timeout=5)
        if not msg:
            raise AssertionError("the published message did not arrive within 5 s")
        expect("message type", msg.get("type"), "message")
        expect("message data", msg.get("data"), b"ping")
    finally:
        ps.close()



@check("RQ (enqueue, a worker runs the jobs, results read back from the stream)")
def _():
    try:
        import rq
    except ImportError:
        raise AssertionError("rq is not installed in the venv (scripts/client-checks installs it)")
    import logging

    from rq import Queue, SimpleWorker

    # The worker's per-job lines are RQ's business; a failure is reported here.
    logging.getLogger("rq.worker").setLevel(logging.WARNING)

    from client_checks_jobs import square

    # RQ's own connection, with redis-py's defaults (RQ works over RESP2 or RESP3).
    conn = redis.Redis(host=host, port=port, **({"protocol": 2} if resp2 else {}))
    queue = Queue(k("rq"), connection=conn)
    jobs, worker = [], None
    try:
        jobs = [queue.enqueue(square, n, result_ttl=600) for n in range(1, 6)]
        expect("queued", queue.count, 5)
        worker = SimpleWorker([queue], connection=conn, name=k("rq-worker").replace(":", "-"))
        # burst: work until the queue is empty, then return (in this process: no fork).
        worker.work(burst=True, with_scheduler=False)
        for n, job in zip(range(1, 6), jobs):
            job.refresh()
            expect(f"job {n} status", job.get_status(), "finished")
            expect(f"job {n} return value", job.return_value(), n * n)
            # RQ 2 keeps each run's result in a stream (XADD ... MAXLEN ~, XREVRANGE).
            results = job.results()
            expect(f"job {n} results kept", len(results), 1)
            expect(f"job {n} result's value", results[0].return_value, n * n)
        expect("queue left", queue.count, 0)
    finally:
        # This run's RQ keys go with it (its jobs and their results, its queue and registries,
        # its worker); the server's other keys, RQ's included, are left alone.
        try:
            for job in jobs:
                conn.delete(f"rq:results:{job.id}")
                job.delete()
            queue.delete(delete_jobs=True)
            for pattern in (f"rq:*{queue.name}*", f"rq:worker:{worker.name}*"):
                for key in conn.scan_iter(match=pattern):
                    conn.delete(key)
            conn.srem("rq:workers", f"rq:worker:{worker.name}")
        except Exception:
            pass
        conn.close()

try:
    leftover = [key for key in r.scan_iter(match=prefix + "*")]
    if leftover:
        r.delete(*leftover)
except Exception:
    # Clean-up is best effort: a server without SCAN keeps this run's few keys.
    for name in ("s", "n", "m1", "m2", "e", "h", "l", "set", "z", "p"):
        try:
            r.delete(k(name))
        except Exception:
            break
# The exit status is the number of failed checks (the wrapper adds them up).
sys.exit(min(failed, 100))
