//! Space freed in a full memory tier (by deletes; overwrites, expiries and shrinking values free
//! slots the same way) is reusable by objects of other sizes: a store with DRAM alone, filled
//! with one size until it refuses writes, takes objects of any size again once some are deleted,
//! within the bound `docs/server.md` states ("Freed space is reused"): the bytes freed, less one
//! slab page per size class holding objects and one page more.

use std::collections::BTreeMap;

use cxltier_store::{Durability, Kind, Store, StoreBuilder, StoreError, TierStats};
use proptest::prelude::*;

/// A store with DRAM alone (no CXL, no NVMe): nothing can leave memory, so a write that finds
/// no room is refused.
fn dram_only(dram: u64, max_object: usize) -> Store {
    StoreBuilder::new()
        .dram(dram)
        .max_object(max_object)
        .durability(Durability::None)
        .build()
        .unwrap()
}

fn dram(s: &Store) -> TierStats {
    s.quick_stats().tiers[0].clone()
}

fn value(i: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (i.wrapping_mul(31) as usize).wrapping_add(j * 7) as u8)
        .collect()
}

/// Put, telling a full store (`Ok(false)`) from any other error (a failure of the test).
fn put(s: &mut Store, key: &[u8], value: &[u8]) -> bool {
    match s.put(key, Kind::String, value, None) {
        Ok(()) => true,
        Err(StoreError::Full { .. }) => false,
        Err(e) => panic!("put of {} bytes: {e}", value.len()),
    }
}

fn check_values(s: &mut Store, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in model {
        let got = s.get(k).unwrap().map(|o| o.value.to_vec());
        assert_eq!(
            got.as_ref(),
            Some(v),
            "{:?} reads back",
            String::from_utf8_lossy(k)
        );
    }
    assert_eq!(s.len(), model.len() as u64);
}

/// The case that showed the defect, with `cxltier serve`'s sizes (`--dram 16M`, values kept whole
/// up to 1 MiB, so 2 MiB slab pages): filled with 1 KiB values until a write is refused, then two
/// of them deleted, a 5-byte value was still refused: every resident page belonged to the 1 KiB
/// class, no page was left under the budget for the 5-byte class, and no class could give one
/// up without sending objects down a tier that does not exist. Redis (jemalloc) takes the write.
#[test]
fn a_small_value_fits_after_two_1k_values_are_deleted_from_a_full_dram_only_store() {
    let mut s = dram_only(16 << 20, cxltier_store::MAX_VALUE);
    let v = vec![b'x'; 1024];
    let key = |i: u64| format!("key:{i}").into_bytes();
    let mut n = 0;
    while put(&mut s, &key(n), &v) {
        n += 1;
    }
    assert!(n > 10_000, "only {n} values of 1 KiB in 16 MiB");
    assert!(!put(&mut s, b"k", b"abcde"), "the store was full");
    assert!(s.delete(&key(0)).unwrap());
    assert!(s.delete(&key(1)).unwrap());
    assert!(
        put(&mut s, b"k", b"abcde"),
        "the space of two deleted 1 KiB values takes a 5-byte value"
    );
    s.check_invariants().unwrap();
    assert_eq!(
        s.get(b"k").unwrap().map(|o| o.value.to_vec()),
        Some(b"abcde".to_vec())
    );
    // The other freed slot still takes a 1 KiB value.
    assert!(put(&mut s, &key(0), &v));
    s.check_invariants().unwrap();
    for i in 2..n {
        assert_eq!(
            s.get(&key(i)).unwrap().map(|o| o.value.len()),
            Some(1024),
            "key:{i}"
        );
    }
}

/// The general case of the same defect: after half of a full store's 1 KiB values are deleted,
/// small values fill the freed bytes (slab pages are emptied by moving the 1 KiB values left
/// into the free slots of the class's other pages, then handed to the small values' class), not
/// only the freed slots one small value each. Slab pages of 1 MiB (values up to 64 KiB) keep the
/// bound a small part of what is freed.
#[test]
fn small_values_fill_the_bytes_freed_by_deleting_half_of_the_1k_values() {
    let mut s = dram_only(32 << 20, 64 << 10);
    let v = vec![b'x'; 1024];
    let key = |i: u64| format!("key:{i}").into_bytes();
    let mut n = 0;
    while put(&mut s, &key(n), &v) {
        n += 1;
    }
    let full = dram(&s);
    for i in (0..n).step_by(2) {
        assert!(s.delete(&key(i)).unwrap());
    }
    let freed = full.bytes - dram(&s).bytes;
    let index_before = s.quick_stats().index_bytes;
    let small_key = |i: u64| format!("s:{i:06}").into_bytes();
    let mut small = 0u64;
    while put(&mut s, &small_key(small), &value(small, 200)) {
        small += 1;
    }
    s.check_invariants().unwrap();
    let end = dram(&s);
    // What the small values need at most: their bytes and header rounded up to a size class
    // (1/16 apart, at least 8 bytes), and their keys' index entries.
    let need = (4 + small_key(0).len() + 200) as u64;
    let taken = small * (need * 17 / 16 + 8) + (s.quick_stats().index_bytes - index_before);
    let bound = (end.size_classes + 1) * end.slab_page_bytes;
    assert!(
        taken + bound >= freed,
        "{small} small values took {taken} of the {freed} bytes freed (at most {bound} may stay unused)"
    );
    for i in (1..n).step_by(2) {
        assert_eq!(s.get(&key(i)).unwrap().map(|o| o.value.len()), Some(1024));
    }
    for i in 0..small {
        assert_eq!(
            s.get(&small_key(i)).unwrap().map(|o| o.value.to_vec()),
            Some(value(i, 200))
        );
    }
}

/// With an NVMe tier the same space is reused without sending anything down: a class that can
/// get no page takes one another class empties within DRAM before any object is evicted.
#[test]
fn with_nvme_a_page_is_emptied_within_dram_before_anything_is_evicted() {
    let log = cxltier_store::testing::temp_file("cxltier-reuse-", "nvme");
    let mut s = StoreBuilder::new()
        .dram(16 << 20)
        .max_object(cxltier_store::MAX_VALUE)
        .ssd(cxltier_store::SsdSpec {
            path: log.to_path_buf(),
            capacity: Some(128 << 20),
        })
        .durability(Durability::None)
        .build()
        .unwrap();
    let v = vec![b'x'; 1024];
    let key = |i: u64| format!("key:{i}").into_bytes();
    let mut n = 0;
    while s.quick_stats().evictions_to_nvme == 0 {
        s.put(&key(n), Kind::String, &v, None).unwrap();
        n += 1;
    }
    let full = dram(&s);
    for i in (0..n).filter(|i| i % 2 == 0) {
        if s.tier_of(&key(i)) == Some("dram") {
            assert!(s.delete(&key(i)).unwrap());
        }
    }
    let freed = full.bytes - dram(&s).bytes;
    let before = s.quick_stats();
    // Small values worth half of what was freed: well inside the bound.
    let count = freed / 2 / 232;
    for i in 0..count {
        assert!(put(&mut s, format!("s:{i}").as_bytes(), &value(i, 200)));
    }
    s.check_invariants().unwrap();
    let after = s.quick_stats();
    assert!(after.slab_pages_compacted > before.slab_pages_compacted);
    assert_eq!(after.evictions_to_nvme, before.evictions_to_nvme);
    assert_eq!(after.slab_pages_moved, before.slab_pages_moved);
    for i in 0..count {
        assert_eq!(s.tier_of(format!("s:{i}").as_bytes()), Some("dram"));
    }
}

/// Value sizes of the random writes: a few size classes far apart.
const SIZES: [usize; 5] = [12, 200, 1100, 3000, 7000];
const KEYS: u16 = 3000;

#[derive(Debug, Clone)]
enum Op {
    Put(u16, usize),
    Delete(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..KEYS, 0..SIZES.len()).prop_map(|(k, s)| Op::Put(k, s)),
        1 => (0..KEYS).prop_map(Op::Delete),
    ]
}

/// A number from `x` alone (SplitMix64's finaliser): which sizes the fill takes and which keys
/// are deleted, reproducibly from the case's seed.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Random writes (overwrites at other sizes among them) and deletes of mixed sizes, then the
    /// tier filled until no size fits, then a random share of the keys deleted: a value of any
    /// size fits when the bytes freed pass its slot by the bound, one slab page per size class
    /// holding objects and one page more; and every value reads back.
    #[test]
    fn a_value_of_any_size_fits_in_the_bytes_freed_less_the_bound(
        ops in prop::collection::vec(op(), 500..1500),
        seed in any::<u64>(),
        delete_per_mille in 300u64..950,
        probe_len in 1usize..60_000,
    ) {
        let mut s = dram_only(40 << 20, 64 << 10);
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for (i, op) in ops.iter().enumerate() {
            match *op {
                Op::Put(k, size) => {
                    let key = format!("r:{k}").into_bytes();
                    let v = value(i as u64, SIZES[size]);
                    if put(&mut s, &key, &v) {
                        model.insert(key, v);
                    }
                }
                Op::Delete(k) => {
                    let key = format!("r:{k}").into_bytes();
                    prop_assert_eq!(s.delete(&key).unwrap(), model.remove(&key).is_some());
                }
            }
        }
        // Fill until no size of the menu fits any more.
        let mut sizes: Vec<usize> = SIZES.to_vec();
        let mut i = 0u64;
        while !sizes.is_empty() {
            let len = sizes[(mix(seed ^ i) % sizes.len() as u64) as usize];
            let key = format!("f:{i}").into_bytes();
            let v = value(i, len);
            if put(&mut s, &key, &v) {
                model.insert(key, v);
            } else {
                sizes.retain(|&l| l != len);
            }
            i += 1;
        }
        s.check_invariants().unwrap();
        let full = dram(&s);
        let doomed: Vec<Vec<u8>> = model
            .keys()
            .enumerate()
            .filter(|&(j, _)| mix(seed.rotate_left(17) ^ j as u64) % 1000 < delete_per_mille)
            .map(|(_, k)| k.clone())
            .collect();
        for k in &doomed {
            prop_assert!(s.delete(k).unwrap());
            model.remove(k);
        }
        let after = dram(&s);
        let freed = full.bytes - after.bytes;
        let key = b"probe".to_vec();
        // The probe's slot: its bytes and the header, rounded up to its size class (1/16 apart,
        // at least 8 bytes).
        let slot = ((4 + key.len() + probe_len) * 17 / 16 + 8) as u64;
        let bound = (after.size_classes + 1) * after.slab_page_bytes;
        prop_assume!(freed >= slot + bound);
        let v = value(u64::MAX, probe_len);
        prop_assert!(
            put(&mut s, &key, &v),
            "{} freed bytes did not take a value of {} bytes (bound: {} bytes, {} size classes \
             in use, slab pages of {} bytes)",
            freed, probe_len, bound, after.size_classes, after.slab_page_bytes
        );
        model.insert(key, v);
        s.check_invariants().unwrap();
        check_values(&mut s, &model);
    }
}
