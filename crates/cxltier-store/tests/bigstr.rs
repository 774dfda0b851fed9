//! Strings longer than a slot ("big strings", up to 512 MiB): kept in pieces, read and changed a
//! range at a time, durable and recovered like collections, and larger than DRAM with an SSD.

use cxltier_store::testing::{temp_file, TempFile};
use cxltier_store::{Durability, Kind, SsdSpec, Store, StoreBuilder, StoreError, MAX_VALUE};

const MIB: usize = 1 << 20;

fn temp(name: &str) -> TempFile {
    temp_file("cxltier-bigstr-", name)
}

fn on_ssd(path: &std::path::Path, dram: u64, ssd: u64) -> StoreBuilder {
    StoreBuilder::new()
        .dram(dram)
        .max_object(MAX_VALUE)
        .ssd(SsdSpec {
            path: path.to_path_buf(),
            capacity: Some(ssd),
        })
        .durability(Durability::Always)
}

fn in_dram(dram: u64) -> Store {
    StoreBuilder::new()
        .dram(dram)
        .max_object(MAX_VALUE)
        .durability(Durability::None)
        .build()
        .unwrap()
}

/// Bytes that differ at every position (a piece put in the wrong place shows).
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(2654435761).wrapping_add(seed) >> 7) as u8)
        .collect()
}

fn get(s: &mut Store, k: &[u8]) -> Option<Vec<u8>> {
    s.get(k).unwrap().map(|o| o.value.to_vec())
}

fn nvme_write_bytes(s: &Store) -> u64 {
    s.stats()
        .tiers
        .iter()
        .find(|t| t.tier == "nvme")
        .map_or(0, |t| t.write_bytes)
}

#[test]
fn a_big_value_round_trips_in_dram_and_reads_by_range() {
    let mut s = in_dram(64 << 20);
    let v = pattern(1, 4 * MIB + 12345);
    s.put(b"big", Kind::String, &v, None).unwrap();
    assert_eq!(get(&mut s, b"big").as_deref(), Some(&v[..]));
    let o = s.get(b"big").unwrap().unwrap();
    assert_eq!(o.kind, Kind::String, "a big string is a string to callers");
    assert_eq!(s.strlen(b"big").unwrap(), Some(v.len() as u64));
    s.check_big_string(b"big").unwrap();
    // Ranges across pieces, at the end, past the end.
    for (at, len) in [
        (0, 10),
        (65530, 20),
        (3 * MIB as u64 - 7, 70000),
        (v.len() as u64 - 5, 100),
    ] {
        let end = (at + len).min(v.len() as u64) as usize;
        assert_eq!(
            s.get_range(b"big", at, len).unwrap().unwrap(),
            &v[at as usize..end],
            "{at}+{len}"
        );
    }
    assert_eq!(
        s.get_range(b"big", v.len() as u64 + 9, 5).unwrap(),
        Some(vec![])
    );
    assert_eq!(s.get_range(b"nope", 0, 5).unwrap(), None);
    assert_eq!(s.len(), 1, "the pieces are not keys");
    // Replaced by a small value: the pieces go.
    s.put(b"big", Kind::String, b"small", None).unwrap();
    assert_eq!(get(&mut s, b"big"), Some(b"small".to_vec()));
    s.check_collection(b"big").unwrap();
    s.check_invariants().unwrap();
    // And back, then deleted.
    s.put(b"big", Kind::String, &v, None).unwrap();
    assert!(s.delete(b"big").unwrap());
    s.check_collection(b"big").unwrap();
    assert_eq!(s.stats().tiers[0].objects, 0, "nothing left behind");
}

#[test]
fn set_range_and_append_change_a_big_value_in_place() {
    let mut s = in_dram(64 << 20);
    let mut v = pattern(2, 3 * MIB);
    s.put(b"k", Kind::String, &v, None).unwrap();
    // Across a piece boundary, inside.
    let patch = pattern(9, 70000);
    assert_eq!(s.set_range(b"k", 100_000, &patch).unwrap(), v.len() as u64);
    v[100_000..170_000].copy_from_slice(&patch);
    // Past the end: zero-filled.
    let end = s.set_range(b"k", v.len() as u64 + 1000, b"tail").unwrap();
    v.resize(v.len() + 1000, 0);
    v.extend_from_slice(b"tail");
    assert_eq!(end, v.len() as u64);
    // Appends that fill the last piece and add new ones.
    for n in [1usize, 65536, 200_000, 3] {
        let add = pattern(n as u64, n);
        v.extend_from_slice(&add);
        assert_eq!(s.append(b"k", &add).unwrap(), v.len() as u64);
    }
    assert_eq!(get(&mut s, b"k").as_deref(), Some(&v[..]));
    s.check_big_string(b"k").unwrap();
    // A small value grown past a slot by SETRANGE and APPEND becomes a big one.
    s.put(b"s", Kind::String, b"abc", None).unwrap();
    assert_eq!(
        s.set_range(b"s", 2 * MIB as u64, b"z").unwrap(),
        2 * MIB as u64 + 1
    );
    let mut w = b"abc".to_vec();
    w.resize(2 * MIB, 0);
    w.push(b'z');
    assert_eq!(get(&mut s, b"s"), Some(w.clone()));
    s.check_big_string(b"s").unwrap();
    assert_eq!(s.append(b"new", &w).unwrap(), w.len() as u64);
    assert_eq!(get(&mut s, b"new"), Some(w));
    // Over the largest value: refused, nothing changed.
    let mut t = StoreBuilder::new()
        .dram(64 << 20)
        .max_object(4 * MIB)
        .durability(Durability::None)
        .build()
        .unwrap();
    t.put(b"k", Kind::String, &pattern(3, 3 * MIB), None)
        .unwrap();
    assert!(matches!(
        t.set_range(b"k", 4 * MIB as u64, b"x"),
        Err(StoreError::TooLarge { .. })
    ));
    assert!(matches!(
        t.put(b"k", Kind::String, &vec![0; 4 * MIB + 1], None),
        Err(StoreError::TooLarge { .. })
    ));
    assert_eq!(t.strlen(b"k").unwrap(), Some(3 * MIB as u64));
    // Other types: WRONGTYPE; the big string is no list.
    t.list_push(b"l", cxltier_store::ListEnd::Left, &[b"a"])
        .unwrap();
    assert!(matches!(t.strlen(b"l"), Err(StoreError::WrongType { .. })));
    assert!(matches!(
        t.list_push(b"k", cxltier_store::ListEnd::Left, &[b"a"]),
        Err(StoreError::WrongType { held: "string" })
    ));
}

/// A hash value (encoded by the caller) longer than a slot is kept in pieces too, and stays a
/// hash: string calls and collection calls on it answer WRONGTYPE naming a hash.
#[test]
fn a_big_hash_value_is_kept_in_pieces_and_stays_a_hash() {
    let mut s = in_dram(64 << 20);
    let v = pattern(11, 3 * MIB);
    s.put(b"h", Kind::Hash, &v, None).unwrap();
    let o = s.get(b"h").unwrap().unwrap();
    assert_eq!((o.kind, o.value), (Kind::Hash, &v[..]));
    assert!(matches!(
        s.strlen(b"h"),
        Err(StoreError::WrongType { held: "hash" })
    ));
    assert!(matches!(
        s.set_range(b"h", 0, b"x"),
        Err(StoreError::WrongType { held: "hash" })
    ));
    assert!(matches!(
        s.list_push(b"h", cxltier_store::ListEnd::Left, &[b"a"]),
        Err(StoreError::WrongType { held: "hash" })
    ));
    s.check_big_string(b"h").unwrap();
}

/// A change of a few bytes in the middle of a 16 MiB value writes one piece and its path, not
/// the value: counted in chunk writes and in bytes written to the log (durability always).
#[test]
fn a_small_change_of_a_big_value_touches_only_its_pieces() {
    let p = temp("touch");
    let mut s = on_ssd(&p, 128 << 20, 256 << 20).build().unwrap();
    let mut v = pattern(4, 16 * MIB);
    s.put(b"k", Kind::String, &v, None).unwrap();
    s.commit().unwrap();
    let (chunks, bytes) = (s.collection_chunk_writes(), nvme_write_bytes(&s));
    s.set_range(b"k", 8 * MIB as u64 + 5, b"hello").unwrap();
    s.commit().unwrap();
    v[8 * MIB + 5..8 * MIB + 10].copy_from_slice(b"hello");
    let written = nvme_write_bytes(&s) - bytes;
    assert!(
        s.collection_chunk_writes() - chunks <= 3,
        "{} chunk writes for a 5-byte change",
        s.collection_chunk_writes() - chunks
    );
    assert!(
        written <= 4 * 65536 + 64 * 1024,
        "{written} bytes written to the log for a 5-byte change of a 16 MiB value"
    );
    let (chunks, bytes) = (s.collection_chunk_writes(), nvme_write_bytes(&s));
    s.append(b"k", b"more").unwrap();
    s.commit().unwrap();
    v.extend_from_slice(b"more");
    assert!(s.collection_chunk_writes() - chunks <= 3);
    assert!(nvme_write_bytes(&s) - bytes <= 4 * 65536 + 64 * 1024);
    // A read of a few bytes reads one piece.
    assert_eq!(
        s.get_range(b"k", 8 * MIB as u64, 16).unwrap().unwrap(),
        &v[8 * MIB..8 * MIB + 16]
    );
    assert_eq!(get(&mut s, b"k").as_deref(), Some(&v[..]));
}

#[test]
fn a_big_value_survives_a_restart_and_larger_than_dram_lives_on_nvme() {
    let p = temp("restart");
    // 40 MiB through 16 MiB of DRAM: most pieces are on the log only.
    let v = pattern(5, 40 * MIB + 3);
    let w = pattern(6, 2 * MIB);
    {
        let mut s = on_ssd(&p, 16 << 20, 256 << 20).build().unwrap();
        s.put(b"big", Kind::String, &v, None).unwrap();
        s.put(b"other", Kind::String, &w, Some(u64::MAX / 2))
            .unwrap();
        s.set_range(b"other", 10, b"patched").unwrap();
        s.commit().unwrap();
        assert_eq!(get(&mut s, b"big").as_deref(), Some(&v[..]));
        s.check_invariants().unwrap();
        // Crash: dropped without close.
    }
    let mut s = on_ssd(&p, 16 << 20, 256 << 20).build().unwrap();
    assert_eq!(s.recovery().chunks_dropped, 0);
    assert_eq!(s.len(), 2);
    assert_eq!(get(&mut s, b"big").as_deref(), Some(&v[..]));
    let mut w2 = w.clone();
    w2[10..17].copy_from_slice(b"patched");
    let o = s.get(b"other").unwrap().unwrap();
    assert_eq!(o.value, &w2[..]);
    assert_eq!(o.expires_at_ms, Some(u64::MAX / 2), "the expiry stays");
    s.check_big_string(b"big").unwrap();
    s.check_big_string(b"other").unwrap();
}

/// A write that fails half way (its pieces partly written) leaves the old value whole, now and
/// after a restart, and nothing behind.
#[test]
fn a_big_write_that_fails_half_way_keeps_the_old_value() {
    let p = temp("fail");
    let old = pattern(7, 3 * MIB);
    {
        let mut s = on_ssd(&p, 64 << 20, 256 << 20).build().unwrap();
        s.put(b"k", Kind::String, &old, None).unwrap();
        s.commit().unwrap();
        s.fail_chunk_io_after(Some(10), None);
        assert!(s
            .put(b"k", Kind::String, &pattern(8, 5 * MIB), None)
            .is_err());
        assert!(s.set_range(b"k", 0, &pattern(9, 2 * MIB)).is_err());
        s.fail_chunk_io_after(None, None);
        assert_eq!(get(&mut s, b"k").as_deref(), Some(&old[..]));
        s.check_big_string(b"k").unwrap();
        s.commit().unwrap();
    }
    let mut s = on_ssd(&p, 64 << 20, 256 << 20).build().unwrap();
    assert_eq!(get(&mut s, b"k").as_deref(), Some(&old[..]));
    s.check_big_string(b"k").unwrap();
}

/// COPY, RENAME, an expiry and SCAN treat a big value as one value: its pieces follow its key.
#[test]
fn a_big_value_is_copied_renamed_expired_and_scanned_whole() {
    let mut s = in_dram(64 << 20);
    let v = pattern(12, 2 * MIB + 5);
    s.put(b"a", Kind::String, &v, None).unwrap();
    assert!(s.copy_key(b"a", b"b", false).unwrap());
    assert!(s.rename(b"a", b"c", false).unwrap());
    assert_eq!(get(&mut s, b"a"), None);
    s.check_collection(b"a").unwrap();
    for k in [&b"b"[..], b"c"] {
        assert_eq!(get(&mut s, k).as_deref(), Some(&v[..]));
        s.check_big_string(k).unwrap();
    }
    let items = s.scan(b"", 10).unwrap();
    assert_eq!(items.len(), 2);
    assert!(items.iter().all(|i| i.kind == Kind::String && i.value == v));
    // An expiry rewrites the root only; a past one deletes the value and its pieces.
    let later = u64::MAX / 2;
    assert!(s.set_expiry(b"b", Some(later)).unwrap());
    let o = s.get(b"b").unwrap().unwrap();
    assert_eq!((o.value.len(), o.expires_at_ms), (v.len(), Some(later)));
    assert!(s.set_expiry(b"b", Some(1)).unwrap());
    assert_eq!(get(&mut s, b"b"), None);
    s.check_collection(b"b").unwrap();
    s.check_invariants().unwrap();
}

/// A scan returns every key even when reading a big string on NVMe pushes the values after it
/// out of DRAM: they were in memory when the scan looked, on NVMe and not staged when it copied
/// them, and went missing (KEYS, SCAN and a replica's snapshot took the short batch for the end).
#[test]
fn a_scan_keeps_the_values_a_big_string_read_pushes_out_of_dram() {
    let ssd = temp("scan-evict");
    let mut s = on_ssd(&ssd, 10 * MIB as u64, 128 * MIB as u64)
        .durability(Durability::EverySec)
        .build()
        .unwrap();
    // The small values fill DRAM; the big one, written last, goes partly to NVMe, and reading
    // it takes DRAM back from the small values that sort after it.
    let small = |i: usize| pattern(i as u64, 3000);
    for i in 0..1500 {
        s.put(
            format!("b:{i:04}").as_bytes(),
            Kind::String,
            &small(i),
            None,
        )
        .unwrap();
    }
    let big = pattern(3, 3 * MIB);
    s.put(b"a:big", Kind::String, &big, None).unwrap();
    s.end_batch();
    let in_dram = (0..1500)
        .filter(|i| s.tier_of(format!("b:{i:04}").as_bytes()) == Some("dram"))
        .count();
    assert!(
        in_dram > 1000,
        "the case needs small values in DRAM: {in_dram}"
    );
    assert_ne!(
        s.tier_of(b"a:big"),
        Some("dram"),
        "and a big one not all in DRAM"
    );
    let items = s.scan(b"", 2000).unwrap();
    assert_eq!(items.len(), 1501);
    assert_eq!(items[0].value, big);
    for (i, it) in items[1..].iter().enumerate() {
        assert_eq!(it.key, format!("b:{i:04}").as_bytes());
        assert_eq!(it.value, small(i), "b:{i:04}");
    }
    s.check_invariants().unwrap();
}
