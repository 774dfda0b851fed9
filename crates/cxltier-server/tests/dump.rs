//! DUMP and RESTORE between the server and a real redis-server 7.0, both ways: every type
//! (and each encoding redis-server chooses under small and default thresholds) DUMPed by one
//! and RESTOREd into the other, values compared; streams with groups, pending entries and
//! consumers both ways (XRANGE, XINFO, XPENDING compared), damaged stream payloads refused by
//! both; MIGRATE from redis-server into cxltier.
//!
//! redis-server is installed by scripts/peers (scripts/test runs it first); without it the test
//! fails with that instruction.

mod util;
use util::{redis, Conn, Reply as V, Server};

fn client(addr: &str) -> Conn {
    Conn::connect(addr)
}

/// A key's type and value as comparable text: members of sets and hashes sorted.
fn value_of(c: &mut Conn, key: &str) -> (String, Vec<Vec<u8>>) {
    let t = match c.call_line(&format!("TYPE {key}")) {
        V::Simple(t) => t,
        other => panic!("TYPE {key}: {other:?}"),
    };
    let flat = |v: V| -> Vec<Vec<u8>> {
        match v {
            V::Array(items) => items
                .into_iter()
                .map(|i| match i {
                    V::Bulk(b) => b,
                    other => panic!("{other:?}"),
                })
                .collect(),
            V::Bulk(b) => vec![b],
            other => panic!("{key}: {other:?}"),
        }
    };
    let mut items = match t.as_str() {
        "string" => flat(c.call_line(&format!("GET {key}"))),
        "list" => flat(c.call_line(&format!("LRANGE {key} 0 -1"))),
        "set" => flat(c.call_line(&format!("SMEMBERS {key}"))),
        "zset" => flat(c.call_line(&format!("ZRANGE {key} 0 -1 WITHSCORES"))),
        "hash" => {
            let f = flat(c.call_line(&format!("HGETALL {key}")));
            f.chunks(2)
                .map(|p| [&p[0][..], b"=", &p[1]].concat())
                .collect()
        }
        other => panic!("{key}: type {other}"),
    };
    if t == "set" || t == "hash" {
        items.sort();
    }
    (t, items)
}

/// Keys of every type, in the encodings redis-server picks under the current thresholds;
/// `tag` keeps the names of two rounds apart.
fn fill(c: &mut Conn, tag: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut add = |c: &mut Conn, name: &str, cmds: Vec<Vec<Vec<u8>>>| {
        let key = format!("{tag}:{name}");
        for mut cmd in cmds {
            cmd.insert(1, key.clone().into_bytes());
            let words: Vec<&[u8]> = cmd.iter().map(Vec::as_slice).collect();
            let r = c.call(&words);
            assert!(!matches!(r, V::Error(_)), "{key}: {r:?}");
        }
        keys.push(key);
    };
    let w = |s: &str| s.as_bytes().to_vec();
    let long = "abcdefgh".repeat(200);
    add(c, "str", vec![vec![w("SET"), w("hello world")]]);
    add(c, "int", vec![vec![w("SET"), w("-123456")]]);
    add(c, "lzf", vec![vec![w("SET"), w(&long)]]);
    add(c, "bin", vec![vec![w("SET"), (0..=255u8).collect()]]);
    let mut list = vec![w("RPUSH")];
    list.extend((0..300).map(|i| w(&format!("{i}-{}", "x".repeat(i % 70)))));
    list.extend([w("7"), w("-9000000000"), w(&long)]);
    add(c, "list", vec![list]);
    add(
        c,
        "smalllist",
        vec![vec![w("RPUSH"), w("a"), w("1"), w("")]],
    );
    add(
        c,
        "intset",
        vec![vec![
            w("SADD"),
            w("1"),
            w("-5"),
            w("70000"),
            w("5000000000"),
        ]],
    );
    let mut set = vec![w("SADD")];
    set.extend((0..200).map(|i| w(&format!("member{i}"))));
    add(c, "set", vec![set]);
    add(
        c,
        "smallzset",
        vec![vec![
            w("ZADD"),
            w("1.5"),
            w("a"),
            w("-inf"),
            w("b"),
            w("3"),
            w("c"),
        ]],
    );
    let mut zset = vec![w("ZADD")];
    for i in 0..200 {
        zset.extend([w(&format!("{}", f64::from(i) / 3.0)), w(&format!("m{i}"))]);
    }
    add(c, "zset", vec![zset]);
    add(
        c,
        "smallhash",
        vec![vec![w("HSET"), w("f"), w("v"), w("n"), w("12")]],
    );
    let mut hash = vec![w("HSET")];
    for i in 0..200 {
        hash.extend([w(&format!("field{i}")), w(&format!("value{i}"))]);
    }
    hash.extend([w("big"), w(&long)]);
    add(c, "hash", vec![hash]);
    add(
        c,
        "geo",
        vec![vec![
            w("GEOADD"),
            w("13.361389"),
            w("38.115556"),
            w("Palermo"),
            w("15.087269"),
            w("37.502669"),
            w("Catania"),
        ]],
    );
    keys
}

fn dump(c: &mut Conn, key: &str) -> Vec<u8> {
    match c.call_bytes(&[b"DUMP", key.as_bytes()]) {
        V::Bulk(p) => p,
        other => panic!("DUMP {key}: {other:?}"),
    }
}

/// DUMP every key from `from`, RESTORE it into `to` under the same name with a TTL, compare.
fn move_all(from: &mut Conn, to: &mut Conn, keys: &[String], way: &str) {
    for key in keys {
        let p = dump(from, key);
        let r = to.call_bytes(&[b"RESTORE", key.as_bytes(), b"100000", &p]);
        assert_eq!(r, V::Simple("OK".into()), "{way}: RESTORE {key}");
        assert_eq!(value_of(to, key), value_of(from, key), "{way}: {key}");
        match to.call_line(&format!("PTTL {key}")) {
            V::Int(t) => assert!(t > 90_000 && t <= 100_000, "{way}: {key} PTTL {t}"),
            other => panic!("{other:?}"),
        }
        // REPLACE over the key, and the same value again.
        let r = to.call_bytes(&[b"RESTORE", key.as_bytes(), b"0", &p, b"REPLACE"]);
        assert_eq!(r, V::Simple("OK".into()), "{way}: RESTORE {key} REPLACE");
        assert_eq!(value_of(to, key), value_of(from, key), "{way}: {key}");
    }
}

#[test]
fn values_move_between_redis_and_cxltier_both_ways() {
    let (r, x) = (redis(), Server::start());
    let (mut rc, mut xc) = (client(&r.addr), client(&x.addr));
    // Default thresholds (large values as hashtables, skiplists, quicklists of many nodes),
    // then small ones (the same data as listpacks), LZF on.
    let mut keys = fill(&mut rc, "default");
    for (knob, v) in [
        ("hash-max-listpack-entries", "1000"),
        ("hash-max-listpack-value", "10000"),
        ("zset-max-listpack-entries", "1000"),
        ("zset-max-listpack-value", "1000"),
        ("set-max-intset-entries", "1000"),
        ("list-max-listpack-size", "4"),
        ("list-compress-depth", "1"),
    ] {
        assert_eq!(
            rc.call_line(&format!("CONFIG SET {knob} {v}")),
            V::Simple("OK".into())
        );
    }
    keys.extend(fill(&mut rc, "packed"));
    move_all(&mut rc, &mut xc, &keys, "redis -> cxltier");
    // And back: cxltier's DUMP of each into a fresh name on redis-server.
    let back: Vec<String> = keys.iter().map(|k| format!("back:{k}")).collect();
    for (key, new) in keys.iter().zip(&back) {
        let p = dump(&mut xc, key);
        let r = rc.call_bytes(&[b"RESTORE", new.as_bytes(), b"0", &p]);
        assert_eq!(r, V::Simple("OK".into()), "cxltier -> redis: RESTORE {key}");
        assert_eq!(
            value_of(&mut rc, new),
            value_of(&mut xc, key),
            "cxltier -> redis: {key}"
        );
    }
    // Values made in cxltier go to redis-server the same way.
    let made = fill(&mut xc, "made");
    move_all(&mut xc, &mut rc, &made, "cxltier -> redis");
    // A payload redis-server refuses, cxltier refuses with Redis's words.
    let mut bad = dump(&mut rc, &keys[0]);
    bad[1] ^= 1;
    for c in [&mut rc, &mut xc] {
        match c.call_bytes(&[b"RESTORE", b"nope", b"0", &bad]) {
            V::Error(e) => assert_eq!(e, "ERR DUMP payload version or checksum are wrong"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn migrate_from_redis_into_cxltier() {
    let (r, x) = (redis(), Server::start());
    let (mut rc, mut xc) = (client(&r.addr), client(&x.addr));
    let keys = fill(&mut rc, "migrate");
    let want: Vec<_> = keys.iter().map(|k| value_of(&mut rc, k)).collect();
    for key in &keys {
        let reply = rc.call_bytes(&[
            b"MIGRATE",
            b"127.0.0.1",
            x.port().as_bytes(),
            key.as_bytes(),
            b"0",
            b"5000",
        ]);
        assert_eq!(reply, V::Simple("OK".into()), "MIGRATE {key}");
        assert_eq!(
            rc.call_line(&format!("EXISTS {key}")),
            V::Int(0),
            "{key} left redis"
        );
    }
    for (key, want) in keys.iter().zip(want) {
        assert_eq!(value_of(&mut xc, key), want, "{key}");
    }
}

/// MIGRATE from cxltier into redis-server, as `redis-cli --cluster reshard` drives it: every
/// type moved with its TTL (the keys leave cxltier), KEYS several at once into another
/// database, COPY and REPLACE, AUTH, NOKEY, the target's own error passed on, and the
/// connection kept for the next MIGRATE (INFO `migrate_cached_sockets`).
#[test]
fn migrate_from_cxltier_into_redis() {
    let (r, x) = (redis(), Server::start());
    let (mut rc, mut xc) = (client(&r.addr), client(&x.addr));
    let port = r.port.to_string();
    let migrate = |xc: &mut Conn, rest: &[&str]| -> V {
        let mut args: Vec<&[u8]> = vec![b"MIGRATE", b"127.0.0.1", port.as_bytes()];
        args.extend(rest.iter().map(|a| a.as_bytes()));
        xc.call_bytes(&args)
    };
    let keys = fill(&mut xc, "out");
    let want: Vec<_> = keys.iter().map(|k| value_of(&mut xc, k)).collect();
    assert_eq!(
        xc.call_line(&format!("PEXPIRE {} 100000", keys[0])),
        V::Int(1)
    );
    for key in &keys {
        assert_eq!(
            migrate(&mut xc, &[key, "0", "5000"]),
            V::Simple("OK".into()),
            "{key}"
        );
        assert_eq!(
            xc.call_line(&format!("EXISTS {key}")),
            V::Int(0),
            "{key} left"
        );
    }
    for (key, want) in keys.iter().zip(want) {
        assert_eq!(value_of(&mut rc, key), want, "{key}");
    }
    match rc.call_line(&format!("PTTL {}", keys[0])) {
        V::Int(ms) => assert!(ms > 90_000 && ms <= 100_000, "the TTL went with it: {ms}"),
        other => panic!("{other:?}"),
    }
    // Several keys at once into database 3; a missing one is skipped; COPY leaves them here.
    for k in ["m1", "m2"] {
        xc.call_line(&format!("SET {k} v-{k}"));
    }
    assert_eq!(
        migrate(
            &mut xc,
            &["", "3", "5000", "COPY", "KEYS", "m1", "nosuch", "m2"]
        ),
        V::Simple("OK".into())
    );
    assert_eq!(xc.call_line("EXISTS m1 m2"), V::Int(2), "COPY keeps them");
    rc.call_line("SELECT 3");
    assert_eq!(rc.call_line("GET m2"), V::Bulk(b"v-m2".to_vec()));
    // Already there: the target's BUSYKEY is passed on and the key stays; REPLACE moves it.
    match migrate(&mut xc, &["m1", "3", "5000"]) {
        V::Error(e) => assert!(
            e.starts_with("ERR Target instance replied with error: BUSYKEY"),
            "{e}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(xc.call_line("EXISTS m1"), V::Int(1));
    assert_eq!(
        migrate(&mut xc, &["m1", "3", "5000", "REPLACE"]),
        V::Simple("OK".into())
    );
    assert_eq!(xc.call_line("EXISTS m1"), V::Int(0));
    assert_eq!(
        migrate(&mut xc, &["nosuch", "0", "5000"]),
        V::Simple("NOKEY".into())
    );
    assert_eq!(
        migrate(&mut xc, &["m2", "0", "5000", "KEYS", "m2"]),
        V::Error(
            "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string"
                .into()
        )
    );
    // A password the target does not have: its error, and the key stays.
    match migrate(&mut xc, &["m2", "0", "5000", "AUTH", "wrong"]) {
        V::Error(e) => assert!(
            e.starts_with("ERR Target instance replied with error: ERR AUTH"),
            "{e}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(xc.call_line("EXISTS m2"), V::Int(1));
    let info = match xc.call_line("INFO stats") {
        V::Bulk(b) => String::from_utf8(b).unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(info.contains("migrate_cached_sockets:1\r\n"), "{info}");
    // Nothing listens there: Redis's IOERR.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = closed.local_addr().unwrap().port().to_string();
    drop(closed);
    match xc.call_bytes(&[
        b"MIGRATE",
        b"127.0.0.1",
        dead.as_bytes(),
        b"m2",
        b"0",
        b"500",
    ]) {
        V::Error(e) => assert_eq!(e, "IOERR error or timeout connecting to the client"),
        other => panic!("{other:?}"),
    }
}

/// A reply with what may differ between two servers holding the same stream blanked: idle
/// times (they move with the clock) and XINFO's `radix-tree-nodes` (Redis counts its radix
/// tree's inner nodes, cxltier keeps no radix tree).
fn comparable(v: V) -> V {
    match v {
        V::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            let mut blank_next = false;
            // XPENDING's extended form: [id, consumer, idle, deliveries].
            let pending_item = items.len() == 4
                && matches!(&items[0], V::Bulk(b) if b.contains(&b'-'))
                && matches!(items[2], V::Int(_))
                && matches!(items[3], V::Int(_));
            for (i, item) in items.into_iter().enumerate() {
                if blank_next || (pending_item && i == 2) {
                    out.push(V::Int(0));
                    blank_next = false;
                    continue;
                }
                if let V::Bulk(b) = &item {
                    blank_next = b == b"idle" || b == b"radix-tree-nodes";
                }
                out.push(comparable(item));
            }
            V::Array(out)
        }
        other => other,
    }
}

/// What must read the same of a stream on either server.
fn stream_views(c: &mut Conn, key: &str) -> Vec<V> {
    [
        format!("XLEN {key}"),
        format!("XRANGE {key} - +"),
        format!("XINFO STREAM {key}"),
        format!("XINFO STREAM {key} FULL COUNT 0"),
        format!("XINFO GROUPS {key}"),
        format!("XINFO CONSUMERS {key} g"),
        format!("XPENDING {key} g"),
        format!("XPENDING {key} g - + 100"),
        format!("XPENDING {key} g - + 100 bob"),
    ]
    .iter()
    .map(|cmd| comparable(c.call_line(cmd)))
    .collect()
}

/// Thousands of entries (several listpack nodes, entries with their node's fields and with
/// others), a deleted one, a group with two consumers' pending entries and an empty group.
fn fill_stream(c: &mut Conn, key: &str) {
    for i in 1..=3000 {
        let (f, v) = if i % 11 == 0 {
            ("other", format!("x{i}"))
        } else {
            ("f", format!("{i}"))
        };
        c.send_line(&format!("XADD {key} {i}-0 {f} {v} n {}", i % 7));
    }
    for _ in 0..3000 {
        assert!(matches!(c.read(), V::Bulk(_)));
    }
    for cmd in [
        format!("XDEL {key} 7-0"),
        format!("XDEL {key} 1500-0"),
        format!("XGROUP CREATE {key} g 0"),
        format!("XGROUP CREATE {key} late $"),
        format!("XREADGROUP GROUP g alice COUNT 10 STREAMS {key} >"),
        format!("XREADGROUP GROUP g bob COUNT 5 STREAMS {key} >"),
        format!("XACK {key} g 2-0"),
        format!("XCLAIM {key} g bob 0 3-0"),
    ] {
        let r = c.call_line(&cmd);
        assert!(!matches!(r, V::Error(_)), "{cmd}: {r:?}");
    }
}

#[test]
fn streams_move_between_redis_and_cxltier_both_ways() {
    let (r, x) = (redis(), Server::start());
    let (mut rc, mut xc) = (client(&r.addr), client(&x.addr));
    fill_stream(&mut rc, "s");
    let from_redis = dump(&mut rc, "s");
    let restored = xc.call_bytes(&[b"RESTORE", b"s", b"0", &from_redis]);
    assert_eq!(restored, V::Simple("OK".into()));
    let want = stream_views(&mut rc, "s");
    assert_eq!(stream_views(&mut xc, "s"), want, "redis -> cxltier");
    // Several nodes, and the same number of them.
    let V::Array(info) = xc.call_line("XINFO STREAM s") else {
        panic!("XINFO STREAM")
    };
    let at = info
        .iter()
        .position(|v| *v == V::Bulk(b"radix-tree-keys".to_vec()))
        .unwrap();
    assert_eq!(info[at + 1], V::Int(30));
    // And back: cxltier's DUMP into redis-server under another name.
    let from_cxltier = dump(&mut xc, "s");
    let restored = rc.call_bytes(&[b"RESTORE", b"back", b"0", &from_cxltier]);
    assert_eq!(restored, V::Simple("OK".into()));
    assert_eq!(stream_views(&mut rc, "back"), want, "cxltier -> redis");
    // A stream made in cxltier goes to redis-server the same way.
    fill_stream(&mut xc, "made");
    let p = dump(&mut xc, "made");
    assert_eq!(
        rc.call_bytes(&[b"RESTORE", b"made", b"0", &p]),
        V::Simple("OK".into())
    );
    assert_eq!(
        stream_views(&mut rc, "made"),
        stream_views(&mut xc, "made"),
        "made in cxltier -> redis"
    );
    // Payloads cut short or with a bit flipped: refused by both with Redis's words.
    for bad in [
        from_redis[..from_redis.len() / 2].to_vec(),
        from_redis[..from_redis.len() - 1].to_vec(),
        {
            let mut b = from_redis.clone();
            b[from_redis.len() / 3] ^= 4;
            b
        },
    ] {
        for c in [&mut rc, &mut xc] {
            match c.call_bytes(&[b"RESTORE", b"nope", b"0", &bad]) {
                V::Error(e) => assert_eq!(e, "ERR DUMP payload version or checksum are wrong"),
                other => panic!("{other:?}"),
            }
        }
    }
    // Bad bytes under a good checksum: a listpack whose count is wrong, a consumer's pending
    // entry missing from its group's. redis-server checks as cxltier does once told to.
    assert_eq!(
        rc.call_line("CONFIG SET sanitize-dump-payload yes"),
        V::Simple("OK".into())
    );
    let body = |p: &[u8]| p[..p.len() - 10].to_vec();
    let mut lp_count = body(&from_redis);
    lp_count[25] ^= 1;
    xc.call_line("XADD one 1-0 f v");
    xc.call_line("XGROUP CREATE one g 0");
    xc.call_line("XREADGROUP GROUP g c STREAMS one >");
    let mut orphan = body(&dump(&mut xc, "one"));
    *orphan.last_mut().unwrap() ^= 1;
    for bad in [lp_count, orphan] {
        let sealed = cxltier_server::rdb::dump::seal(&bad);
        for c in [&mut rc, &mut xc] {
            match c.call_bytes(&[b"RESTORE", b"nope", b"0", &sealed]) {
                V::Error(e) => assert!(e.starts_with("ERR Bad data format"), "{e}"),
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(xc.call_line("EXISTS nope"), V::Int(0));
}
