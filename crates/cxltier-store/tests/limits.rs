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

/// Keys up to 1 MiB (Redis's suite sets a key of 50,000 bytes): stored in memory and on the log
/// (their length's high bits in the record's flags), recovered after a crash, demoted to NVMe and
/// read back; a record with a short key reads as before. Longer keys are refused by name.
#[test]
fn keys_up_to_1_mib_are_stored_logged_and_recovered() {
    let p = temp_file("cxltier-limits-", "keys");
    let b = StoreBuilder::new()
        .dram(16 << 20)
        .ssd(SsdSpec {
            path: p.to_path_buf(),
            capacity: Some(64 << 20),
        })
        .durability(Durability::Always);
    let keys: Vec<Vec<u8>> = [50_000usize, 65_535, 65_536, 300_001, 1 << 20]
        .iter()
        .map(|&n| (0..n).map(|i| b'a' + (i % 26) as u8).collect())
        .collect();
    {
        let mut s = b.clone().build().unwrap();
        for (i, k) in keys.iter().enumerate() {
            s.put(k, Kind::String, format!("v{i}").as_bytes(), None)
                .unwrap();
        }
        s.put(b"short", Kind::String, b"s", None).unwrap();
        assert!(s.delete(&keys[3]).unwrap());
        s.commit().unwrap();
        // Enough other values to push the long keys out of 16 MiB of DRAM onto the log.
        for i in 0..40u32 {
            s.put(
                format!("fill{i}").as_bytes(),
                Kind::String,
                &[1u8; 500_000],
                None,
            )
            .unwrap();
            s.tick().unwrap();
        }
        s.commit().unwrap();
        for (i, k) in keys.iter().enumerate().filter(|&(i, _)| i != 3) {
            let o = s.get(k).unwrap().unwrap();
            assert_eq!(
                o.value,
                format!("v{i}").as_bytes(),
                "key of {} bytes",
                k.len()
            );
        }
        s.check_invariants().unwrap();
        let too_long = vec![b'x'; (1 << 20) + 1];
        let Err(StoreError::Config(msg)) = s.put(&too_long, Kind::String, b"v", None) else {
            panic!("a key over 1 MiB was accepted")
        };
        assert!(msg.contains("1048576"), "{msg}");
    }
    let mut s = b.build().unwrap();
    assert_eq!(s.len(), 4 + 1 + 40);
    for (i, k) in keys.iter().enumerate() {
        let got = s.get(k).unwrap().map(|o| o.value.to_vec());
        let want = (i != 3).then(|| format!("v{i}").into_bytes());
        assert_eq!(got, want, "key of {} bytes after a restart", k.len());
    }
    assert_eq!(s.get(b"short").unwrap().unwrap().value, b"s");
}
