//! RESTORE's atomicity and Redis's rules: a refused payload or a store error midway leaves the
//! keyspace as it was, byte for byte.

use proptest::prelude::*;

use crate::rdb::dump;
use crate::rdb::load::{Strings, Value};
use crate::rdb::{TYPE_HASH, TYPE_LIST, TYPE_SET, TYPE_ZSET_2};
use crate::testdb::Db;

fn run(db: &mut Db, words: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    crate::dispatch::execute(
        &mut db.store,
        &mut db.info,
        &mut db.session,
        words,
        &mut out,
    );
    out
}

fn restore(db: &mut Db, key: &str, payload: &[u8], more: &[&str]) -> String {
    let mut words: Vec<&[u8]> = vec![b"RESTORE", key.as_bytes(), b"0", payload];
    words.extend(more.iter().map(|w| w.as_bytes()));
    String::from_utf8_lossy(&run(db, &words)).into_owned()
}

/// The payload of a bulk reply (`None` for nil).
fn bulk(out: &[u8]) -> Option<Vec<u8>> {
    if out.starts_with(b"$-1") {
        return None;
    }
    let nl = out.iter().position(|&b| b == b'\n').unwrap();
    Some(out[nl + 1..out.len() - 2].to_vec())
}

fn dump_of(db: &mut Db, key: &[u8]) -> Option<Vec<u8>> {
    bulk(&run(db, &[b"DUMP", key]))
}

/// A key, its DUMP and its absolute expiry (PEXPIRETIME's reply).
type KeyState = (Vec<u8>, Vec<u8>, String);

/// Every key with its DUMP and absolute expiry, and DBSIZE: what a failed RESTORE must leave.
fn snapshot(db: &mut Db) -> (String, Vec<KeyState>) {
    let size = db.cmd("DBSIZE");
    let keys = run(db, &[b"KEYS", b"*"]);
    let mut names = Vec::new();
    let mut rest = &keys[keys.iter().position(|&b| b == b'\n').unwrap() + 1..];
    while !rest.is_empty() {
        let nl = rest.iter().position(|&b| b == b'\n').unwrap();
        let len: usize = std::str::from_utf8(&rest[1..nl - 1])
            .unwrap()
            .parse()
            .unwrap();
        names.push(rest[nl + 1..nl + 1 + len].to_vec());
        rest = &rest[nl + 1 + len + 2..];
    }
    names.sort();
    let all = names
        .into_iter()
        .map(|k| {
            let d = dump_of(db, &k).unwrap();
            let at = String::from_utf8_lossy(&run(db, &[b"PEXPIRETIME", &k])).into_owned();
            (k, d, at)
        })
        .collect();
    (size, all)
}

fn strings(items: impl IntoIterator<Item = Vec<u8>>) -> Strings {
    let mut s = Strings::new();
    for i in items {
        s.push(&i);
    }
    s
}

/// A sorted set payload of 1,500 members whose 1,200th score is NaN, checksum valid: what the
/// old code stored 1,024 members of before it failed.
fn nan_at_1200_of_1500() -> Vec<u8> {
    let mut body = vec![TYPE_ZSET_2];
    crate::rdb::encode::length(1500, &mut body);
    for i in 0..1500u32 {
        crate::rdb::encode::string(format!("m{i}").as_bytes(), &mut body);
        let score = if i == 1199 { f64::NAN } else { f64::from(i) };
        body.extend_from_slice(&score.to_le_bytes());
    }
    dump::seal(&body)
}

#[test]
fn a_payload_refused_midway_leaves_the_old_value() {
    let mut db = Db::new();
    let p = nan_at_1200_of_1500();
    db.cmd("SET victim precious");
    let r = restore(&mut db, "victim", &p, &["REPLACE"]);
    assert!(r.starts_with("-ERR Bad data format"), "{r}");
    assert!(r.contains("NaN"), "{r}");
    assert_eq!(db.cmd("GET victim"), "$8\r\nprecious\r\n");
    // Without REPLACE, on a missing key: no key at all.
    assert!(restore(&mut db, "fresh", &p, &[]).starts_with("-ERR Bad data format"));
    assert_eq!(db.cmd("EXISTS fresh"), ":0\r\n");
    assert_eq!(db.cmd("DBSIZE"), ":1\r\n");
}

#[test]
fn empty_collections_are_refused_and_replace_keeps_the_key() {
    let mut db = Db::new();
    for t in [TYPE_LIST, TYPE_SET, TYPE_ZSET_2, TYPE_HASH] {
        db.cmd("SET keep precious");
        let r = restore(&mut db, "keep", &dump::seal(&[t, 0]), &["REPLACE"]);
        assert!(
            r.starts_with("-ERR Bad data format: an empty"),
            "type {t}: {r}"
        );
        assert_eq!(db.cmd("GET keep"), "$8\r\nprecious\r\n", "type {t}");
        assert!(restore(&mut db, "none", &dump::seal(&[t, 0]), &[]).starts_with("-ERR"));
        assert_eq!(db.cmd("EXISTS none"), ":0\r\n");
    }
}

#[test]
fn options_ttls_and_errors_follow_redis() {
    let mut db = Db::new();
    db.cmd("SET src v");
    let p = dump_of(&mut db, b"src").unwrap();
    // Redis 7.0's DUMP of the string "v": type 0, the string, version 10, then the CRC64.
    assert_eq!(&p[..5], &[0, 1, b'v', 10, 0]);
    assert_eq!(
        restore(&mut db, "src", &p, &[]),
        "-BUSYKEY Target key name already exists.\r\n"
    );
    // The key is checked before the TTL, the TTL before the payload.
    assert_eq!(
        String::from_utf8_lossy(&run(&mut db, &[b"RESTORE", b"src", b"x", b"junk"])),
        "-BUSYKEY Target key name already exists.\r\n"
    );
    assert_eq!(
        String::from_utf8_lossy(&run(&mut db, &[b"RESTORE", b"n", b"-1", &p])),
        "-ERR Invalid TTL value, must be >= 0\r\n"
    );
    assert_eq!(
        String::from_utf8_lossy(&run(&mut db, &[b"RESTORE", b"n", b"0", b"junk"])),
        "-ERR DUMP payload version or checksum are wrong\r\n"
    );
    for (opts, want) in [
        (
            &["IDLETIME", "-1"][..],
            "-ERR Invalid IDLETIME value, must be >= 0\r\n",
        ),
        (
            &["FREQ", "256"],
            "-ERR Invalid FREQ value, must be >= 0 and <= 255\r\n",
        ),
        (
            &["FREQ", "x"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (&["IDLETIME", "1", "FREQ", "1"], "-ERR syntax error\r\n"),
        (&["BOGUS"], "-ERR syntax error\r\n"),
    ] {
        assert_eq!(restore(&mut db, "n", &p, opts), want, "{opts:?}");
    }
    assert_eq!(restore(&mut db, "n", &p, &["IDLETIME", "10"]), "+OK\r\n");
    // A relative TTL, and an absolute one.
    let words: Vec<&[u8]> = vec![b"RESTORE", b"t1", b"100000", &p];
    assert_eq!(run(&mut db, &words), b"+OK\r\n");
    let pttl: i64 = db.cmd("PTTL t1")[1..].trim().parse().unwrap();
    assert!(pttl > 90_000 && pttl <= 100_000, "{pttl}");
    let at = (crate::context::now_ms() + 50_000).to_string();
    let words: Vec<&[u8]> = vec![b"RESTORE", b"t2", at.as_bytes(), &p, b"ABSTTL"];
    assert_eq!(run(&mut db, &words), b"+OK\r\n");
    assert_eq!(db.cmd("PEXPIRETIME t2"), format!(":{at}\r\n"));
    // A time already past: REPLACE deletes, and nothing is created.
    let words: Vec<&[u8]> = vec![b"RESTORE", b"t2", b"1", &p, b"ABSTTL", b"REPLACE"];
    assert_eq!(run(&mut db, &words), b"+OK\r\n");
    assert_eq!(db.cmd("EXISTS t2"), ":0\r\n");
    // ...but a bad payload is refused first, whatever the TTL.
    let words: Vec<&[u8]> = vec![b"RESTORE", b"t1", b"1", b"junk", b"ABSTTL", b"REPLACE"];
    assert!(run(&mut db, &words).starts_with(b"-ERR DUMP payload"));
    assert_eq!(db.cmd("EXISTS t1"), ":1\r\n");
}

#[test]
fn the_largest_value_is_refused_whole() {
    let mut db = Db::new();
    db.cmd("SET keep precious");
    let big = vec![b'x'; (1 << 20) + 1];
    let mut body = vec![crate::rdb::TYPE_STRING];
    crate::rdb::encode::string(&big, &mut body);
    let r = restore(&mut db, "keep", &dump::seal(&body), &["REPLACE"]);
    assert!(r.contains("--max-object"), "{r}");
    // A list member too large for the store, after many that fit.
    let members = (0..3000)
        .map(|i| format!("member-{i}").into_bytes())
        .chain([big]);
    let p = dump::payload(&Value::List(strings(members)));
    let r = restore(&mut db, "keep", &p, &["REPLACE"]);
    assert!(r.contains("--max-object"), "{r}");
    assert_eq!(db.cmd("GET keep"), "$8\r\nprecious\r\n");
    assert_eq!(db.cmd("DBSIZE"), ":1\r\n");
}

#[test]
fn large_collections_big_strings_and_chunked_hashes_round_trip() {
    let mut db = Db {
        store: cxltier_store::StoreBuilder::new()
            .dram(256 << 20)
            .max_object(8 << 20)
            .durability(cxltier_store::Durability::None)
            .build()
            .unwrap(),
        ..Db::new()
    };
    let big = "b".repeat(3 << 20);
    let words: Vec<&[u8]> = vec![b"SET", b"big", big.as_bytes()];
    run(&mut db, &words);
    for i in 0..2000 {
        db.cmd(&format!("HSET h field{i} {}", "v".repeat(40)));
        db.cmd(&format!("RPUSH l {i}"));
        db.cmd(&format!("SADD s member{i}"));
        db.cmd(&format!("ZADD z {i} m{i}"));
    }
    db.cmd("GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania");
    db.cmd("EXPIRE l 1000");
    for (k, read) in [
        ("big", "STRLEN"),
        ("h", "HLEN"),
        ("l", "LRANGE {} 0 -1"),
        ("s", "SCARD"),
        ("z", "ZRANGE {} 0 -1 WITHSCORES"),
        ("g", "GEOPOS {} Palermo Catania"),
    ] {
        let q = |key: &str| {
            if read.contains("{}") {
                read.replace("{}", key)
            } else {
                format!("{read} {key}")
            }
        };
        let p = dump_of(&mut db, k.as_bytes()).unwrap();
        let copy = format!("{k}2");
        assert_eq!(restore(&mut db, &copy, &p, &[]), "+OK\r\n", "{k}");
        assert_eq!(db.cmd(&q(&copy)), db.cmd(&q(k)), "{k}");
        assert_eq!(
            db.cmd(&format!("OBJECT ENCODING {copy}")),
            db.cmd(&format!("OBJECT ENCODING {k}")),
            "{k}"
        );
        assert_eq!(
            dump_of(&mut db, copy.as_bytes()).unwrap().len(),
            p.len(),
            "{k}"
        );
        // Over a key of another kind, with REPLACE.
        assert_eq!(
            restore(&mut db, "other", &p, &["REPLACE"]),
            "+OK\r\n",
            "{k}"
        );
        assert_eq!(db.cmd(&q("other")), db.cmd(&q(k)), "{k}");
    }
    db.store.check_invariants().unwrap();
    // Nothing is left under the server's own keys.
    let meta = crate::db::META_DB;
    assert!(!db
        .store
        .holds(&crate::db::store_key(meta, super::RESTORING)));
    assert!(!db.store.holds(&crate::db::store_key(meta, super::REPLACED)));
}

#[test]
fn a_store_error_midway_leaves_the_keyspace_as_it_was() {
    let mut db = Db::new();
    for i in 0..3000 {
        db.cmd(&format!("RPUSH victim old{i}"));
    }
    db.cmd("EXPIRE victim 5000");
    db.cmd("SET other x");
    let old = snapshot(&mut db);
    let old_at = db.cmd("PEXPIRETIME victim");
    let new_list = Value::List(strings(
        (0..6000).map(|i| format!("new-{i}-{}", "n".repeat(50)).into_bytes()),
    ));
    let p = dump::payload(&new_list);
    let old_victim = dump_of(&mut db, b"victim").unwrap();
    let (mut failed, mut done) = (0, 0);
    for writes in [0u64, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610] {
        db.store.fail_chunk_io_after(Some(writes), None);
        let r = restore(&mut db, "victim", &p, &["REPLACE"]);
        db.store.fail_chunk_io_after(None, None);
        if r.starts_with('-') {
            failed += 1;
            assert_eq!(
                snapshot(&mut db),
                old,
                "failed after {writes} chunk writes: {r}"
            );
        } else {
            done += 1;
            assert_eq!(r, "+OK\r\n");
            assert_eq!(db.cmd("LLEN victim"), ":6000\r\n");
            assert_eq!(db.cmd("PEXPIRETIME victim"), ":-1\r\n");
            // Back to the old value for the next round.
            let words: Vec<&[u8]> = vec![b"RESTORE", b"victim", b"0", &old_victim, b"REPLACE"];
            assert_eq!(run(&mut db, &words), b"+OK\r\n");
            db.cmd(&format!("PEXPIREAT victim {}", old_at[1..].trim()));
            assert_eq!(snapshot(&mut db), old);
        }
        db.store.check_invariants().unwrap();
    }
    assert!(failed > 0 && done > 0, "failed {failed}, done {done}");
}

/// A random value of every type, its members drawn from a small alphabet so repeats happen.
fn value_strategy() -> impl Strategy<Value = Value> {
    let member = proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'1'), any::<u8>()], 0..12);
    let members = proptest::collection::vec(member.clone(), 1..40);
    prop_oneof![
        member.clone().prop_map(Value::String),
        members.clone().prop_map(|m| Value::List(strings(m))),
        members.clone().prop_map(|m| {
            let set: std::collections::BTreeSet<Vec<u8>> = m.into_iter().collect();
            Value::Set(strings(set))
        }),
        proptest::collection::btree_map(member.clone(), -1e6f64..1e6, 1..40).prop_map(|m| {
            Value::ZSet {
                scores: m.values().copied().collect(),
                members: strings(m.into_keys()),
            }
        }),
        proptest::collection::btree_map(member.clone(), member, 1..40)
            .prop_map(|m| { Value::Hash(strings(m.into_iter().flat_map(|(f, v)| [f, v]))) }),
    ]
}

/// How a valid payload is damaged before it is sent (checksum recomputed).
#[derive(Debug, Clone)]
enum Damage {
    None,
    /// One body byte changed.
    Byte(usize, u8),
    /// The body cut short.
    Cut(usize),
}

fn canon(v: &Value) -> Vec<Vec<u8>> {
    let mut items: Vec<Vec<u8>> = match v {
        Value::String(s) => vec![s.clone()],
        Value::List(s) | Value::Set(s) => s.iter().map(<[u8]>::to_vec).collect(),
        Value::ZSet { members, scores } => members
            .iter()
            .zip(scores)
            .map(|(m, s)| [m, &s.to_le_bytes()[..]].concat())
            .collect(),
        Value::Hash(_) => v
            .pairs()
            .iter()
            .map(|(f, x)| [*f, b"=", *x].concat())
            .collect(),
        Value::Stream(s) => vec![format!("{s:?}").into_bytes()],
    };
    if !matches!(v, Value::List(_)) {
        items.sort();
    }
    items.insert(0, v.type_name().as_bytes().to_vec());
    items
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_failed_restore_changes_nothing_and_a_good_one_round_trips(
        keyspace in proptest::collection::vec(value_strategy(), 0..5),
        value in value_strategy(),
        damage in prop_oneof![
            Just(Damage::None),
            (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Damage::Byte(i, b)),
            any::<usize>().prop_map(Damage::Cut),
        ],
        target in 0usize..6,
        replace in any::<bool>(),
    ) {
        let mut db = Db::new();
        for (i, v) in keyspace.iter().enumerate() {
            let key = format!("k{i}");
            prop_assert_eq!(restore(&mut db, &key, &dump::payload(v), &[]), "+OK\r\n");
            if i % 2 == 1 {
                db.cmd(&format!("PEXPIREAT {key} {}", 4_000_000_000_000u64 + i as u64));
            }
        }
        let before = snapshot(&mut db);
        let good = dump::payload(&value);
        let body = &good[..good.len() - dump::FOOTER_LEN];
        let payload = match damage {
            Damage::None => good.clone(),
            Damage::Byte(i, b) => {
                let mut body = body.to_vec();
                let n = body.len();
                body[i % n] = b;
                dump::seal(&body)
            }
            Damage::Cut(i) => dump::seal(&body[..i % body.len()]),
        };
        let key = format!("k{target}");
        let r = restore(&mut db, &key, &payload, if replace { &["REPLACE"] } else { &[] });
        if r.starts_with('-') {
            prop_assert_eq!(snapshot(&mut db), before, "{}", r);
        } else {
            prop_assert_eq!(&r, "+OK\r\n");
            let sent = dump::parse(&payload, usize::MAX).unwrap();
            let back = dump::parse(&dump_of(&mut db, key.as_bytes()).unwrap(), usize::MAX).unwrap();
            prop_assert_eq!(canon(&back), canon(&sent));
        }
        db.store.check_invariants().unwrap();
    }
}
