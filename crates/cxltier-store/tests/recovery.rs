//! Recovery of a damaged NVMe tier through the store: nothing acknowledged is lost or reverted
//! silently, a refused start writes nothing, and `check_log` reads what a start would.

use cxltier_store::log::{DamageKind, DEFAULT_SEGMENT_SIZE};
use cxltier_store::testing::{temp_file, TempFile};
use cxltier_store::{check_log, Durability, Kind, SsdSpec, Store, StoreBuilder, StoreError};

fn temp(name: &str) -> TempFile {
    temp_file("cxltier-recovery-", name)
}

fn builder(path: &std::path::Path) -> StoreBuilder {
    StoreBuilder::new()
        .dram(16 << 20)
        .ssd(SsdSpec {
            path: path.to_path_buf(),
            capacity: Some(32 << 20),
        })
        .durability(Durability::EverySec)
}

fn get(s: &mut Store, k: &[u8]) -> Option<Vec<u8>> {
    s.get(k).unwrap().map(|o| o.value.to_vec())
}

fn filler(s: &mut Store, range: std::ops::Range<u32>) {
    for i in range {
        s.put(
            format!("fill{i}").as_bytes(),
            Kind::String,
            &[i as u8; 600],
            None,
        )
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
