//! Keyspace notifications and pub/sub pushes of the server, compared with redis-server
//! 7.0 side by side: the same commands sent to both, and what a real subscriber connection
//! receives from each compared message by message.
//!
//! redis-server must be installed (scripts/peers installs it): these tests fail, saying so,
//! when it is not.

mod util;
use std::time::{Duration, Instant};
use util::{info_number, over_nvme, redis, wait_blocked, Conn, Reply as V, Server, GUARD};

/// A bulk string's text (what a message's parts are).
fn bulk_text(r: &V) -> Option<String> {
    match r {
        V::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

/// Commands over every type, each of Redis's events among them (and commands that change
/// nothing, which announce nothing). `{fut}` is an absolute time in the future.
const SCRIPT: &str = "SET s 1
SET s 2 EX 100
SETEX s2 100 v
PSETEX s3 100000 v
SETNX s4 v
SETNX s4 v
MSET m1 a m2 b
MSETNX m3 a m5 b
MSETNX m3 x
INCR n
INCRBY n 5
DECR n
DECRBY n 2
INCRBYFLOAT f 1.5
APPEND s x
SETRANGE s 2 yy
SETBIT b 3 1
GETSET s z
GETDEL s
GETDEL s
GETEX s2 EX 200
GETEX s2 PERSIST
GETEX s2 PERSIST
SET s5 v KEEPTTL
SET s5 w GET
SET s5 w NX
EXPIRE m1 100
PEXPIRE m1 100000
EXPIREAT m1 {fut}
PERSIST m1
PERSIST m1
EXPIRE nokey 10
EXPIRE m2 -1
RENAME m3 r1
RENAME r1 m5
RENAMENX m5 s4
COPY m5 c1
COPY m5 c1
COPY m5 c1 REPLACE
DEL c1 nope
UNLINK m5
LPUSH l a b c
RPUSH l d
LPUSHX nol a
RPUSHX l e
LINSERT l BEFORE a x
LINSERT l BEFORE zz x
LSET l 0 y
LREM l 1 y
LREM l 1 nope
LTRIM l 0 10
LPOP l
RPOP l 2
LMOVE l l2 LEFT RIGHT
RPOPLPUSH l2 l3
LMPOP 2 nol l LEFT COUNT 10
RPUSH l3 q
BLPOP l3 0
BRPOP l3 0
RPUSH l4 a b c
LTRIM l4 1 0
LTRIM nol 0 1
SADD st a b c
SADD st a
SREM st a
SREM st zz
SPOP st
SPOP st 5
SPOP st 5
SADD t1 a b
SADD t2 b c
SINTERSTORE d1 t1 t2
SUNIONSTORE d1 t1 t2
SDIFFSTORE d1 t1 t1
SDIFFSTORE d1 t1 t1
SMOVE t1 t2 a
SMOVE t1 t2 b
SADD t3 x
SMOVE t3 t3 x
ZADD z 1 a 2 b 3 c
ZADD z 1 a
ZADD z INCR 1 a
ZINCRBY z 1 b
ZREM z c
ZREM z zz
ZREMRANGEBYSCORE z 100 200
ZADD z 5 e 6 f
ZREMRANGEBYRANK z 0 0
ZPOPMIN z
ZPOPMAX z 5
ZADD z1 1 a 2 b
ZADD z2 2 b 3 c
ZUNIONSTORE zd 2 z1 z2
ZINTERSTORE zd 2 z1 z2
ZDIFFSTORE zd 2 z1 z1
ZRANGESTORE zd z1 0 -1
ZMPOP 1 z1 MIN COUNT 10
BZPOPMIN z2 0
ZADD zl 0 a 0 b 0 c
ZREMRANGEBYLEX zl [a [b
HSET h a 1 b 2
HSET h a 1
HMSET h c 3
HSETNX h a 9
HSETNX h d 4
HINCRBY h n 5
HINCRBYFLOAT h f 1.5
HDEL h a zz
HDEL h nope
HDEL h b c d n f
RPUSH sl 3 1 2
SORT sl STORE so
SORT sl STORE so
SORT nosuch STORE so
SORT nosuch STORE so
DEL s4 s5 n f b
GET nk
MGET nk s2 nk2
EXISTS nk s2
TYPE nk
TTL nk
LRANGE nk 0 -1
LLEN nk
SCARD nk
SMEMBERS nk
ZSCORE nk a
ZRANGE nk 0 -1
HGET nk a
HGETALL nk
STRLEN nk
GETRANGE nk 0 1
OBJECT ENCODING nk
SORT_RO nk
SINTER nk t2
SINTERSTORE dd nk t2
ZUNION 2 nk z2
ZINTERSTORE dd 2 nk z2
HSTRLEN nk a
GETBIT nk 0
GETEX nk
GETDEL nk
APPEND nk2 x
INCRBYFLOAT nk3 1
HINCRBY nk4 a 1
LPUSHX nk5 a";

/// What a subscriber to every keyspace channel, speaking RESP `proto`, hears while `SCRIPT`
/// runs with `notify-keyspace-events` = `flags`, then while a key expires when a command finds it and
/// one expires in the background; each command followed by a marker message, so that a
/// difference names the command. `name` says which server listens on `addr`, for messages.
fn heard(name: &str, addr: &str, flags: &str, proto: &str, fut: u64) -> Vec<String> {
    let mut c = Conn::connect(addr);
    let mut sub = Conn::connect(addr);
    sub.call(&["HELLO", proto]);
    assert_eq!(c.call(&["FLUSHALL"]), V::Simple("OK".into()));
    assert_eq!(
        c.call(&["CONFIG", "SET", "notify-keyspace-events", flags]),
        V::Simple("OK".into()),
        "{name}"
    );
    sub.call(&["PSUBSCRIBE", "__key*__:*"]);
    sub.call(&["SUBSCRIBE", "marker"]);
    let script = SCRIPT.replace("{fut}", &fut.to_string());
    for line in script.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        if let V::Error(e) = c.call(&words) {
            panic!("{name}: {line}: -{e}");
        }
        c.call(&["PUBLISH", "marker", &format!("> {line}")]);
    }
    // DUMP and RESTORE, each server with its own payload.
    c.call(&["RPUSH", "rl", "a"]);
    // (A payload is binary: sent back through a request of bytes.)
    let V::Bulk(raw) = c.call(&["DUMP", "rl"]) else {
        panic!("{name}: DUMP rl")
    };
    for replace in [false, true] {
        let mut req = Vec::new();
        let mut args: Vec<&[u8]> = vec![b"RESTORE", b"rl2", b"0", &raw];
        if replace {
            args.push(b"REPLACE");
        }
        req.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in &args {
            req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            req.extend_from_slice(a);
            req.extend_from_slice(b"\r\n");
        }
        c.send_raw(&req).unwrap();
        assert_eq!(c.read(), V::Simple("OK".into()), "{name}: RESTORE");
        c.call(&["PUBLISH", "marker", "> RESTORE"]);
    }
    // Expiry found by a command (lazy), then by the server's own sampling (active).
    c.call(&["SET", "e1", "v", "PX", "20"]);
    std::thread::sleep(Duration::from_millis(60));
    c.call(&["GET", "e1"]);
    c.call(&["PUBLISH", "marker", "> GET e1"]);
    // The background expiry takes e2 off the count of keys (DBSIZE, which does not expire
    // keys itself): a wait for a state, bounded by the guard.
    let V::Int(before) = c.call(&["DBSIZE"]) else {
        panic!("DBSIZE")
    };
    c.call(&["SET", "e2", "v", "PX", "20"]);
    let t = Instant::now();
    while c.call(&["DBSIZE"]) != V::Int(before) {
        assert!(t.elapsed() < GUARD, "{name}: e2 never expired");
        std::thread::sleep(Duration::from_millis(20));
    }
    c.call(&["PUBLISH", "marker", "end"]);
    let mut out = Vec::new();
    loop {
        let (V::Push(m) | V::Array(m)) = sub.read() else {
            panic!("not a message")
        };
        let text: Vec<String> = m.iter().filter_map(bulk_text).collect();
        let line = match text[0].as_str() {
            "pmessage" => format!("{} {}", text[2], text[3]),
            "message" if text[2] == "end" => break,
            "message" => text[2].clone(),
            _ => continue,
        };
        out.push(line);
    }
    out
}

/// The first difference of two sequences, with what came before it.
fn first_difference(a: &[String], b: &[String]) -> Option<String> {
    let i = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or_else(|| (a.len() != b.len()).then_some(a.len().min(b.len())))?;
    let from = i.saturating_sub(6);
    Some(format!(
        "at message {i}:\n  redis-server: {:#?}\n  cxltier:      {:#?}",
        &a[from..(i + 3).min(a.len())],
        &b[from..(i + 3).min(b.len())]
    ))
}

/// Every event Redis announces for the script, in Redis's order and with Redis's names, and
/// none it does not: the whole sequence a subscriber hears is compared with redis-server's,
/// for all classes (with `new`), for the key-event and key-space channels alone, for single
/// classes, and for key misses. The old server published nothing at all.
#[test]
fn keyspace_events_are_redis_servers_for_every_type() {
    let redis = redis();
    let cxl = Server::start();
    let fut = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 100_000;
    for (flags, proto) in [
        ("AKEn", "2"),
        ("AKEn", "3"),
        ("KA", "2"),
        ("El", "2"),
        ("Kg$", "3"),
        ("Esz", "2"),
        ("Khx", "2"),
        ("KEm", "2"),
    ] {
        let want = heard(&redis.name, &redis.addr, flags, proto, fut);
        let got = heard("cxltier", &cxl.addr, flags, proto, fut);
        let events = want.iter().filter(|l| l.starts_with("__")).count();
        assert!(events > 0, "{flags}: redis-server announced nothing");
        if let Some(d) = first_difference(&want, &got) {
            panic!("notify-keyspace-events {flags}, RESP{proto}: {d}");
        }
    }
}

/// Redis's "PubSub messages with CLIENT REPLY OFF" (its stall in the suite), in RESP3 and
/// RESP2: subscription confirmations and messages are pushes, sent whatever CLIENT REPLY
/// says; what a client reads is compared with redis-server's, value by value.
#[test]
fn pubsub_pushes_survive_client_reply_off_as_on_redis_server() {
    let redis = redis();
    let cxl = Server::start();
    let run = |addr: &str, proto: &str| -> Vec<V> {
        let mut rd = Conn::connect(addr);
        let mut r = Conn::connect(addr);
        rd.call(&["HELLO", proto]);
        let mut seen = Vec::new();
        // Lines `rd` sends, each with how many replies it reads after it.
        let steps = |rd: &mut Conn, seen: &mut Vec<V>, lines: &[(&str, usize)]| {
            for (line, reads) in lines {
                rd.send_line(line);
                for _ in 0..*reads {
                    seen.push(rd.read());
                }
            }
        };
        steps(
            &mut rd,
            &mut seen,
            &[
                ("CLIENT REPLY OFF", 0),
                ("SUBSCRIBE channel", 1),
                ("PSUBSCRIBE ch*", 1),
                ("CLIENT REPLY OFF", 0),
                // PING's answer is a reply: dropped; the next thing read is the message.
                ("PING", 0),
            ],
        );
        seen.push(r.call(&["PUBLISH", "channel", "hello"]));
        seen.push(rd.read());
        seen.push(rd.read());
        steps(
            &mut rd,
            &mut seen,
            &[
                ("CLIENT REPLY OFF", 0),
                ("UNSUBSCRIBE channel", 1),
                ("PUNSUBSCRIBE ch*", 1),
                ("CLIENT REPLY ON", 1),
                // SKIP: the next command's reply goes, its confirmation stays.
                ("CLIENT REPLY SKIP", 0),
                ("SUBSCRIBE x", 1),
                ("PING", 1),
                ("PING", 1),
            ],
        );
        seen
    };
    for proto in ["3", "2"] {
        let want = run(&redis.addr, proto);
        let got = run(&cxl.addr, proto);
        assert_eq!(got, want, "RESP{proto}");
    }
    // A RESP3 client told of its own writes: each event before the reply of the command that
    // caused it, and still sent under CLIENT REPLY OFF.
    let own = |addr: &str| -> Vec<V> {
        let mut c = Conn::connect(addr);
        c.call(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]);
        c.call(&["HELLO", "3"]);
        let mut seen = vec![c.call(&["SUBSCRIBE", "__keyspace@0__:k"])];
        c.send(&["SET", "k", "v"]);
        seen.push(c.read());
        seen.push(c.read());
        c.send(&["CLIENT", "REPLY", "OFF"]);
        c.send(&["RPUSH", "k2", "a"]);
        c.send(&["DEL", "k"]);
        seen.push(c.read());
        c.send(&["CLIENT", "REPLY", "ON"]);
        seen.push(c.read());
        seen
    };
    assert_eq!(
        own(&cxl.addr),
        own(&redis.addr),
        "a client's own keyspace events"
    );
}

/// Values only on NVMe expire with an `expired` event each, and no device read: expiry is
/// decided from the index (lazily, when a command names the key, or by the background
/// sampling), never from the value.
#[test]
fn keys_on_nvme_expire_with_an_event_and_no_device_read() {
    let (_log, cxl) = over_nvme("16M", "256M");
    let mut c = cxl.client();
    let mut sub = cxl.client();
    c.call(&["CONFIG", "SET", "notify-keyspace-events", "Ex"]);
    sub.call(&["SUBSCRIBE", "__keyevent@0__:expired"]);
    const KEYS: usize = 400;
    let value = "v".repeat(64 << 10);
    for i in 0..KEYS {
        c.send(&["SET", &format!("k{i}"), &value, "PX", "1500"]);
    }
    for _ in 0..KEYS {
        assert_eq!(c.read(), V::Simple("OK".into()));
    }
    // 25 MiB written to a 16 MiB DRAM tier: most of it went to NVMe.
    let t = Instant::now();
    while info_number(&mut c, "tiers", "tier_nvme_objects") == 0 {
        assert!(t.elapsed() < GUARD, "nothing was demoted to NVMe");
        std::thread::sleep(Duration::from_millis(20));
    }
    let on_nvme = info_number(&mut c, "tiers", "tier_nvme_objects");
    let reads = info_number(&mut c, "tiers", "tier_nvme_reads");
    std::thread::sleep(Duration::from_millis(1600));
    // EXISTS looks at the index only: each key still there is found expired.
    for i in 0..KEYS {
        assert_eq!(c.call(&["EXISTS", &format!("k{i}")]), V::Int(0));
    }
    let mut named = std::collections::BTreeSet::new();
    while named.len() < KEYS {
        let V::Array(m) = sub.read() else {
            panic!("not a message")
        };
        assert!(
            named.insert(bulk_text(&m[2]).unwrap()),
            "a key announced twice"
        );
    }
    assert_eq!(
        info_number(&mut c, "tiers", "tier_nvme_reads"),
        reads,
        "expiry of {on_nvme} values on NVMe read the device"
    );
    assert_eq!(info_number(&mut c, "stats", "expired_keys"), KEYS as u64);
}

/// Events of pops served to parked clients (the push that wakes them, then their pop, and
/// `del` of what they emptied) and of the commands of a transaction, in Redis's order: what a
/// subscriber hears from each server is compared.
#[test]
fn events_of_served_blocked_pops_and_transactions_are_redis_servers() {
    let run = |addr: &str| -> Vec<String> {
        let mut c = Conn::connect(addr);
        let mut sub = Conn::connect(addr);
        let mut blpop = Conn::connect(addr);
        let mut blmove = Conn::connect(addr);
        c.call(&["CONFIG", "SET", "notify-keyspace-events", "AKEn"]);
        sub.call(&["PSUBSCRIBE", "__keyspace@0__:*"]);
        sub.call(&["SUBSCRIBE", "marker"]);
        blpop.send(&["BLPOP", "bl", "0"]);
        blmove.send(&["BLMOVE", "bm", "dst", "LEFT", "RIGHT", "0"]);
        wait_blocked(&mut c, 2);
        c.call(&["RPUSH", "bl", "a", "b"]);
        c.call(&["RPUSH", "bm", "a"]);
        blpop.read();
        blmove.read();
        c.call(&["PUBLISH", "marker", "> pushes"]);
        blpop.send(&["BZPOPMIN", "bz", "0"]);
        wait_blocked(&mut c, 1);
        c.call(&["ZADD", "bz", "1", "a"]);
        blpop.read();
        c.call(&["PUBLISH", "marker", "> zadd"]);
        c.call(&["MULTI"]);
        for cmd in [
            &["LPUSH", "ml", "a"][..],
            &["LPOP", "ml"],
            &["SET", "ms", "1"],
            &["SORT", "bl", "STORE", "ms"],
        ] {
            c.call(cmd);
        }
        c.call(&["EXEC"]);
        c.call(&["PUBLISH", "marker", "end"]);
        let mut out = Vec::new();
        loop {
            let V::Array(m) = sub.read() else {
                panic!("not a message")
            };
            let text: Vec<String> = m.iter().filter_map(bulk_text).collect();
            match text[0].as_str() {
                "pmessage" => out.push(format!("{} {}", text[2], text[3])),
                "message" if text[2] == "end" => break,
                "message" => out.push(text[2].clone()),
                _ => {}
            }
        }
        out
    };
    let want = run(&redis().addr);
    let got = run(&Server::start().addr);
    assert!(want.len() > 10, "{want:?}");
    if let Some(d) = first_difference(&want, &got) {
        panic!("{d}");
    }
}

/// Shard channels and the pub/sub introspection, in RESP2 and RESP3, compared with
/// redis-server value by value: SSUBSCRIBE's own count, SPUBLISH reaching only shard
/// subscribers (`smessage`), PUBSUB SHARDCHANNELS|SHARDNUMSUB|NUMSUB (flat arrays in RESP3),
/// UNSUBSCRIBE leaving shard channels alone, RESET, INFO's pubsubshard_channels, and a shard
/// confirmation and message under CLIENT REPLY OFF.
#[test]
fn shard_channels_and_pubsub_introspection_are_redis_servers() {
    let run = |addr: &str| -> Vec<V> {
        let mut seen = Vec::new();
        for proto in ["2", "3"] {
            let [mut a, mut b, mut p, mut d] = [(); 4].map(|_| Conn::connect(addr));
            for c in [&mut a, &mut b, &mut p, &mut d] {
                c.call(&["HELLO", proto]);
            }
            seen.push(a.call(&["SSUBSCRIBE", "chan1", "chan2", "chan1"]));
            seen.push(a.read());
            seen.push(a.read());
            seen.push(b.call(&["SUBSCRIBE", "chan1"]));
            seen.push(b.call(&["SSUBSCRIBE", "chan1"]));
            for cmd in [
                &["PUBSUB", "SHARDNUMSUB", "chan1", "chan2", "x"][..],
                &["PUBSUB", "NUMSUB", "chan1", "x"],
                &["PUBSUB", "SHARDCHANNELS"],
                &["PUBSUB", "SHARDCHANNELS", "*2"],
                &["PUBSUB", "CHANNELS"],
                &["PUBSUB", "HELP"],
            ] {
                let mut reply = p.call(cmd);
                // Redis lists channels in its hash table's order: compared as sets.
                if let (true, V::Array(items)) = (cmd[1].ends_with("CHANNELS"), &mut reply) {
                    items.sort_by_key(bulk_text);
                }
                seen.push(reply);
            }
            seen.push(p.call(&["SPUBLISH", "chan1", "hi"]));
            seen.push(a.read());
            seen.push(b.read());
            seen.push(p.call(&["PUBLISH", "chan1", "yo"]));
            seen.push(b.read());
            seen.push(a.call(&["PING"]));
            seen.push(a.call(&["UNSUBSCRIBE"]));
            seen.push(a.call(&["SUNSUBSCRIBE", "chan1"]));
            seen.push(a.call(&["SUNSUBSCRIBE"]));
            seen.push(a.call(&["SUNSUBSCRIBE"]));
            seen.push(b.call(&["SUNSUBSCRIBE", "nope"]));
            d.call(&["SSUBSCRIBE", "z"]);
            seen.push(d.call(&["RESET"]));
            seen.push(p.call(&["PUBSUB", "SHARDNUMSUB", "z", "chan1"]));
            // RESP3 sends INFO as a verbatim string, RESP2 as a bulk one.
            let (V::Bulk(stats) | V::Verbatim(_, stats)) = p.call(&["INFO", "stats"]) else {
                panic!("INFO stats")
            };
            let stats = String::from_utf8_lossy(&stats).into_owned();
            seen.push(V::Simple(
                stats
                    .lines()
                    .find(|l| l.starts_with("pubsubshard_channels:"))
                    .unwrap_or("no pubsubshard_channels")
                    .to_string(),
            ));
            d.send(&["CLIENT", "REPLY", "OFF"]);
            seen.push(d.call(&["SSUBSCRIBE", "q"]));
            d.send(&["PING"]);
            seen.push(p.call(&["SPUBLISH", "q", "m"]));
            seen.push(d.read());
        }
        seen
    };
    let want = run(&redis().addr);
    let got = run(&Server::start().addr);
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(g, w, "value {i}");
    }
    assert_eq!(got.len(), want.len());
}
