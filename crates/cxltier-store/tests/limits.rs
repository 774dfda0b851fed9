//! Limits that could never work are refused at start, with the reason and the fix; the largest
//! value accepted is really stored, whatever the slab pages and log segments hold.

use cxltier_store::log::{max_value_len, DEFAULT_SEGMENT_SIZE};
use cxltier_store::testing::temp_file;
use cxltier_store::{Durability, Kind, SsdSpec, StoreBuilder, StoreError, MAX_VALUE};

fn config_error(b: StoreBuilder) -> String {
    match b.build() {
        Err(StoreError::Config(m)) => m,
        Err(e) => panic!("not a config error: {e}"),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn a_value_over_512m_is_refused_and_a_large_one_needs_no_large_slab_pages() {
    let msg = config_error(
        StoreBuilder::new()
            .max_object(MAX_VALUE + 1)
            .durability(Durability::None),
    );
    assert!(
        msg.contains("--max-object") && msg.contains("512M"),
        "{msg}"
    );
    // A 16 MiB value in 32 MiB of DRAM (refused while a value had to fit one slab page): it is
    // kept in pieces, and the arena's pages stay sized for the pieces.
    let big = 16 << 20;
    let mut s = StoreBuilder::new()
        .dram(32 << 20)
        .max_object(big)
        .durability(Durability::None)
        .build()
        .unwrap();
    s.put(b"k", Kind::String, &vec![7u8; big], None).unwrap();
    assert_eq!(s.get(b"k").unwrap().unwrap().value.len(), big);
    s.check_invariants().unwrap();
}

#[test]
fn a_value_larger_than_a_log_record_is_kept_in_pieces_on_the_log() {
    let p = temp_file("cxltier-limits-", "log");
    let ssd = SsdSpec {
        path: p.to_path_buf(),
        capacity: Some(64 << 20),
    };
    let record = max_value_len(DEFAULT_SEGMENT_SIZE, u16::MAX as usize / 2);
    let len = 3 * record + 17;
    let v: Vec<u8> = (0..len).map(|i| (i / 4099) as u8).collect();
    {
        let mut s = StoreBuilder::new()
            .dram(16 << 20)
            .ssd(ssd.clone())
            .durability(Durability::Always)
            .max_object(MAX_VALUE)
            .build()
            .unwrap();
        s.put(b"k", Kind::String, &v, None).unwrap();
        s.commit().unwrap();
    }
    let mut s = StoreBuilder::new()
        .dram(16 << 20)
        .ssd(ssd)
        .durability(Durability::Always)
        .max_object(MAX_VALUE)
        .build()
        .unwrap();
    assert_eq!(s.get(b"k").unwrap().unwrap().value, &v[..]);
    // The longest key with the largest value kept whole fits one record.
    let key = vec![b'k'; u16::MAX as usize / 2];
    s.put(&key, Kind::String, &vec![3u8; 1 << 20], None)
        .unwrap();
    s.commit().unwrap();
    assert_eq!(s.get(&key).unwrap().unwrap().value.len(), 1 << 20);
}
