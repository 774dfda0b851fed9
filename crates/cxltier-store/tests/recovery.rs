//! Recovery of a damaged NVMe tier through the store: nothing acknowledged is lost or reverted
//! silently, a refused start writes nothing, and `check_log` reads what a start would.

mod util;

use cxltier_store::log::{DamageKind, DEFAULT_SEGMENT_SIZE};
use cxltier_store::{check_log, Durability, Kind, SsdSpec, Store, StoreBuilder, StoreError};
use util::{get, in_memory, now_ms, over_log, temp};

/// 16 MiB of DRAM over 32 MiB of NVMe in `path`, committing every second.
fn builder(path: &std::path::Path) -> StoreBuilder {
    over_log(path, 16 << 20, 32 << 20).durability(Durability::EverySec)
}

/// Keys `fill{i}` for each `i` of `range`, of 600 bytes `i`, each committed.
fn filler(s: &mut Store, range: std::ops::Range<u32>) {
    for i in range {
        let key = format!("fill{i}");
        s.put(key.as_bytes(), Kind::String, &[i as u8; 600], None)
            .unwrap();
        s.commit().unwrap();
    }
}

/// Where `needle` occurs in the file, the `nth` time (0-based).
fn find(path: &std::path::Path, needle: &[u8], nth: usize) -> usize {
    let bytes = std::fs::read(path).unwrap();
    bytes
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .nth(nth)
        .unwrap_or_else(|| {
            panic!(
                "{:?} occurrence {nth} not in the file",
                String::from_utf8_lossy(needle)
            )
        })
        .0
}

fn flip(path: &std::path::Path, at: usize, len: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    for b in &mut bytes[at..at + len] {
        *b ^= 0xa5;
    }
    std::fs::write(path, &bytes).unwrap();
}

/// A store whose log holds: `victim` = old (early), a newer `victim` = NEW... record, a delete of
/// `gone`, each followed by more records in the same segment; closed cleanly.
fn write_history(p: &std::path::Path) {
    let mut s = builder(p).build().unwrap();
    s.put(b"victim", Kind::String, b"old-value", None).unwrap();
    s.put(b"gone-key", Kind::String, b"was-here", None).unwrap();
    s.commit().unwrap();
    filler(&mut s, 0..4000);
    s.put(
        b"victim",
        Kind::String,
        b"NEW-VALUE-MARKER-0123456789",
        None,
    )
    .unwrap();
    s.commit().unwrap();
    filler(&mut s, 4000..4100);
    assert!(s.delete(b"gone-key").unwrap());
    s.commit().unwrap();
    filler(&mut s, 4100..4200);
    s.close().unwrap();
}

#[test]
fn a_lost_newer_version_refuses_the_start_and_the_override_reports_it() {
    let p = temp("log");
    write_history(&p);
    // Damage the newer version of `victim`, which has valid records after it.
    flip(&p, find(&p, b"NEW-VALUE-MARKER", 0), 16);
    let before = std::fs::read(&*p).unwrap();
    let err = builder(&p).build().unwrap_err();
    let StoreError::Damaged(d) = &err else {
        panic!("{err}")
    };
    assert_eq!(d.report.damaged.len(), 1, "{err}");
    assert_eq!(d.report.damaged[0].kind, DamageKind::Records);
    // Every key written before the damage could have had a newer version in it.
    assert!(d.keys_possibly_stale.unwrap() >= 4001, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("segment ") && text.contains("--recover-anyway"),
        "{text}"
    );
    assert!(
        std::fs::read(&*p).unwrap() == before,
        "a refused start wrote to the file"
    );

    let mut s = builder(&p).recover_anyway(true).build().unwrap();
    let r = s.recovery().clone();
    assert_eq!(r.damaged_ranges.len(), 1);
    assert_eq!(r.damaged_bytes, r.damaged_ranges[0].bytes);
    assert!(r.keys_possibly_stale >= 4001);
    // Everything readable is served: the records after the damaged one too.
    assert_eq!(
        get(&mut s, b"fill4050"),
        Some(vec![(4050u32 % 256) as u8; 600])
    );
    assert_eq!(
        get(&mut s, b"fill4199"),
        Some(vec![(4199u32 % 256) as u8; 600])
    );
    assert_eq!(
        get(&mut s, b"gone-key"),
        None,
        "the delete after the damage holds"
    );
    assert_eq!(r.keys_recovered, 4200 + 1);
}

#[test]
fn a_damaged_delete_never_brings_the_key_back_silently() {
    let p = temp("log");
    write_history(&p);
    // The key's bytes occur in its first record, then in the tombstone.
    flip(&p, find(&p, b"gone-key", 1) - 8, 16);
    let err = builder(&p).build().unwrap_err();
    let StoreError::Damaged(d) = &err else {
        panic!("{err}")
    };
    assert!(d.keys_possibly_stale.unwrap() >= 1, "{err}");
    // With the override the key is back, and counted among those possibly stale.
    let mut s = builder(&p).recover_anyway(true).build().unwrap();
    assert_eq!(get(&mut s, b"gone-key"), Some(b"was-here".to_vec()));
    assert!(s.recovery().keys_possibly_stale >= 1);
}

#[test]
fn the_offline_check_reads_what_a_start_would_and_writes_nothing() {
    let p = temp("log");
    write_history(&p);
    let clean = check_log(&p, DEFAULT_SEGMENT_SIZE).unwrap();
    assert!(!clean.start_refused, "{clean:?}");
    assert_eq!(clean.keys, 4201);
    assert_eq!(clean.deleted_keys, 1);
    assert_eq!(clean.keys_possibly_stale, 0);
    flip(&p, find(&p, b"NEW-VALUE-MARKER", 0), 16);
    let before = std::fs::read(&*p).unwrap();
    let c = check_log(&p, DEFAULT_SEGMENT_SIZE).unwrap();
    assert!(c.start_refused);
    assert_eq!(c.report.damaged.len(), 1);
    assert_eq!(c.damaged_bytes, c.report.damaged[0].bytes);
    assert!(c.keys_possibly_stale >= 4001);
    // The old version of `victim` is what a start would serve.
    assert_eq!(c.keys, 4201);
    assert!(std::fs::read(&*p).unwrap() == before);
}

#[test]
fn a_clean_store_reports_a_clean_recovery() {
    let p = temp("log");
    write_history(&p);
    let s = builder(&p).build().unwrap();
    let r = s.recovery();
    assert!(r.damaged_ranges.is_empty() && r.torn_tail.is_none());
    assert_eq!((r.keys_recovered, r.keys_possibly_stale), (4201, 0));
}

/// A log written before databases existed (by `cxltier serve` of that format: a string, one
/// with a TTL, a hash, a list, a set and a sorted set, and a deleted key; `--durability always`,
/// 8 MiB, only its first block is not zeros) opens with every key in database 0, collections
/// with their parts, the delete still applied; keys written after it go in the new format and
/// both survive a restart.
#[test]
fn a_log_of_the_first_format_opens_with_its_keys_in_database_0() {
    use cxltier_store::{db_key, DbKeyspace};
    let tmp = temp("old.log");
    let head = include_bytes!("fixtures/format1-db0.log-head");
    let mut bytes = head.to_vec();
    bytes.resize(8 << 20, 0);
    std::fs::write(&*tmp, &bytes).unwrap();
    let open = || {
        StoreBuilder::new()
            .dram(16 << 20)
            .ssd(SsdSpec {
                path: tmp.to_path_buf(),
                capacity: None,
            })
            .durability(Durability::Always)
            .build()
            .unwrap()
    };
    let check = |s: &mut Store| {
        assert_eq!(s.db_len(0), 6, "every key of the old log is in database 0");
        assert_eq!(get(s, &db_key(0, b"str")).as_deref(), Some(&b"hello"[..]));
        assert!(
            s.get(b"str").unwrap().is_none(),
            "no key is left without its database"
        );
        assert!(s
            .get(&db_key(0, b"ttl"))
            .unwrap()
            .unwrap()
            .expires_at_ms
            .is_some());
        assert_eq!(
            s.list_range(&db_key(0, b"l"), 0, -1).unwrap(),
            [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
        );
        assert!(s.sismember(&db_key(0, b"s"), b"y").unwrap());
        assert_eq!(s.zscore(&db_key(0, b"z"), b"m2").unwrap(), Some(2.0));
        assert_eq!(s.get(&db_key(0, b"h")).unwrap().unwrap().kind, Kind::Hash);
        assert!(s.get(&db_key(0, b"gone")).unwrap().is_none());
        s.check_invariants().unwrap();
    };
    let mut s = open();
    check(&mut s);
    s.put(&db_key(3, b"str"), Kind::String, b"three", None)
        .unwrap();
    s.commit().unwrap();
    s.close().unwrap();
    let mut s = open();
    check(&mut s);
    assert_eq!(
        get(&mut s, &db_key(3, b"str")).as_deref(),
        Some(&b"three"[..])
    );
    // The fixture's `ttl` key expires at 2100-01-01T00:00:00Z (the fixture first held a
    // TTL of a day from when it was written, and the test failed the day after); the
    // keyspace is read at a fixed instant so that its TTL sum is exact.
    const TTL_KEY_EXPIRES_AT_MS: u64 = 4_102_444_800_000;
    let ks = s.keyspace(TTL_KEY_EXPIRES_AT_MS - 1_000);
    assert_eq!(ks.len(), 2);
    assert_eq!((ks[0].db, ks[0].keys, ks[0].expires), (0, 6, 1));
    assert_eq!(ks[0].ttl_ms_sum, 1_000);
    assert_eq!(
        ks[1],
        DbKeyspace {
            db: 3,
            keys: 1,
            expires: 0,
            ttl_ms_sum: 0
        }
    );
}

/// FLUSHDB's store call removes one database's keys, collections with their parts, and no
/// other's; the counts per database follow; and it holds after a restart.
#[test]
fn flush_db_removes_one_database_only() {
    use cxltier_store::db_key;
    let tmp = temp("flushdb.log");
    let mut s = builder(&tmp).build().unwrap();
    for db in [0u8, 1, 2] {
        for i in 0..50 {
            s.put(
                &db_key(db, format!("k{i}").as_bytes()),
                Kind::String,
                b"v",
                None,
            )
            .unwrap();
        }
        s.list_push(
            &db_key(db, b"list"),
            cxltier_store::ListEnd::Right,
            &[b"a", b"b"],
        )
        .unwrap();
    }
    assert_eq!((s.db_len(0), s.db_len(1), s.db_len(2)), (51, 51, 51));
    assert_eq!(s.flush_db(1).unwrap(), 51);
    assert_eq!((s.db_len(0), s.db_len(1), s.db_len(2)), (51, 0, 51));
    assert_eq!(s.list_range(&db_key(2, b"list"), 0, -1).unwrap().len(), 2);
    s.check_invariants().unwrap();
    s.commit().unwrap();
    s.close().unwrap();
    let mut s = builder(&tmp).build().unwrap();
    assert_eq!((s.db_len(0), s.db_len(1), s.db_len(2)), (51, 0, 51));
    assert!(s.get(&db_key(1, b"k3")).unwrap().is_none());
    assert_eq!(get(&mut s, &db_key(0, b"k3")).as_deref(), Some(&b"v"[..]));
    s.check_invariants().unwrap();
}

/// Background expiry samples every database: keys whose TTL passed go from each, without a
/// command looking them up, and the counts per database follow.
#[test]
fn background_expiry_reaches_every_database() {
    use cxltier_store::db_key;
    let mut s = in_memory(16 << 20);
    let now = now_ms();
    for db in [0u8, 5, 13] {
        for i in 0..40 {
            let key = db_key(db, format!("k{i}").as_bytes());
            s.put(&key, Kind::String, b"v", Some(now + 30)).unwrap();
        }
        s.put(&db_key(db, b"stays"), Kind::String, b"v", None)
            .unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(60));
    let t = std::time::Instant::now();
    while [0u8, 5, 13].iter().any(|&db| s.db_len(db) > 1) {
        assert!(
            t.elapsed().as_secs() < 10,
            "expiry never reached every database"
        );
        s.tick().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(11));
    }
    for db in [0u8, 5, 13] {
        assert_eq!(s.db_len(db), 1);
        assert!(s.get(&db_key(db, b"stays")).unwrap().is_some());
    }
}
