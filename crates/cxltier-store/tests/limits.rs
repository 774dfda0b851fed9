//! Limits that could never work are refused at start, with the reason and the fix; the smallest
//! accepted configuration really stores a value of the largest size.

use cxltier_store::log::{max_value_len, DEFAULT_SEGMENT_SIZE};
use cxltier_store::testing::temp_file;
use cxltier_store::{Durability, Kind, SsdSpec, StoreBuilder, StoreError};

fn config_error(b: StoreBuilder) -> String {
    match b.build() {
        Err(StoreError::Config(m)) => m,
        Err(e) => panic!("not a config error: {e}"),
        Ok(_) => panic!("accepted"),
    }
}

/// The `--dram` the error asks for, in MiB.
fn asked_dram(msg: &str) -> u64 {
    let at = msg.find("--dram of at least ").unwrap() + "--dram of at least ".len();
    msg[at..].split('M').next().unwrap().parse().unwrap()
}

#[test]
fn a_dram_tier_smaller_than_one_slab_page_is_refused_and_the_asked_size_works() {
    let big = 16 << 20;
    let msg = config_error(
        StoreBuilder::new()
            .dram(32 << 20)
            .max_object(big)
            .durability(Durability::None),
    );
    assert!(
        msg.contains("--max-object") && msg.contains("--dram"),
        "{msg}"
    );
    let dram = asked_dram(&msg) << 20;
    // The size the error asks for stores a value of the largest size, in memory only.
    let mut s = StoreBuilder::new()
        .dram(dram)
        .max_object(big)
        .durability(Durability::None)
        .build()
        .unwrap();
    s.put(b"k", Kind::String, &vec![7u8; big], None).unwrap();
    assert_eq!(s.get(b"k").unwrap().unwrap().value.len(), big);
    // And the largest object the error names for the smaller DRAM is accepted there.
    let at = msg.find("--max-object of at most ").unwrap() + "--max-object of at most ".len();
    let max: usize = msg[at..]
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap();
    let mut s = StoreBuilder::new()
        .dram(32 << 20)
        .max_object(max)
        .durability(Durability::None)
        .build()
        .unwrap();
    s.put(b"k", Kind::String, &vec![1u8; max], None).unwrap();
}

#[test]
fn an_object_larger_than_a_log_record_is_refused_not_lowered() {
    let p = temp_file("cxltier-limits-", "log");
    let ssd = SsdSpec {
        path: p.to_path_buf(),
        capacity: Some(16 << 20),
    };
    let msg = config_error(
        StoreBuilder::new()
            .dram(256 << 20)
            .ssd(ssd.clone())
            .max_object(64 << 20),
    );
    let max = max_value_len(DEFAULT_SEGMENT_SIZE, u16::MAX as usize / 2);
    assert!(msg.contains(&format!("at most {max}")), "{msg}");
    // At that limit a value with the longest key is stored on the log and read back.
    let mut s = StoreBuilder::new()
        .dram(256 << 20)
        .ssd(ssd)
        .durability(Durability::Always)
        .max_object(max)
        .build()
        .unwrap();
    let key = vec![b'k'; u16::MAX as usize / 2];
    s.put(&key, Kind::String, &vec![3u8; max], None).unwrap();
    s.commit().unwrap();
    assert_eq!(s.get(&key).unwrap().unwrap().value.len(), max);
}
