//! What the store's integration tests share: stores of the usual budgets over scratch log files,
//! numbered keys and values written and read back, and the NVMe tier's figures.

// Each test binary uses a part of this module.
#![allow(dead_code)]

use std::path::Path;

use cxltier_store::testing::{temp_file, TempFile};
use cxltier_store::{Durability, Kind, SsdSpec, Store, StoreBuilder, TierStats};

/// A scratch log file `name`, removed with its directory when dropped.
pub fn temp(name: &str) -> TempFile {
    temp_file("cxltier-store-test-", name)
}

/// An NVMe tier of `size` bytes in the file `path`.
pub fn ssd(path: &Path, size: u64) -> SsdSpec {
    SsdSpec {
        path: path.to_path_buf(),
        capacity: Some(size),
    }
}

/// A builder for `dram` bytes of DRAM over an NVMe tier of `nvme` bytes in `log`.
pub fn over_log(log: &Path, dram: u64, nvme: u64) -> StoreBuilder {
    StoreBuilder::new().dram(dram).ssd(ssd(log, nvme))
}

/// A store of `dram` bytes of DRAM over an NVMe tier of `nvme` bytes in `log` (recovered from
/// it if it holds records), with `durability`.
pub fn open(log: &Path, dram: u64, nvme: u64, durability: Durability) -> Store {
    open_with(log, dram, nvme, durability, |b| b)
}

/// [`open`], with the builder changed by `more` first.
pub fn open_with(
    log: &Path,
    dram: u64,
    nvme: u64,
    durability: Durability,
    more: impl FnOnce(StoreBuilder) -> StoreBuilder,
) -> Store {
    more(over_log(log, dram, nvme))
        .durability(durability)
        .build()
        .unwrap()
}

/// A store of `dram` bytes of DRAM and nothing else.
pub fn in_memory(dram: u64) -> Store {
    StoreBuilder::new()
        .dram(dram)
        .durability(Durability::None)
        .build()
        .unwrap()
}

/// A store of `dram` bytes of DRAM and `cxl` bytes of CXL memory, nothing on NVMe.
pub fn in_dram_and_cxl(dram: u64, cxl: u64) -> Store {
    StoreBuilder::new()
        .dram(dram)
        .cxl(cxl)
        .durability(Durability::None)
        .build()
        .unwrap()
}

/// The value numbered `i`, `len` bytes long.
pub fn value(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

/// `k`'s value, if it has one.
pub fn get(s: &mut Store, k: &[u8]) -> Option<Vec<u8>> {
    s.get(k).unwrap().map(|o| o.value.to_vec())
}

/// Puts string `value(i, len)` under `key(i)` for each `i` of `numbers`.
pub fn put_values<K: AsRef<[u8]>>(
    s: &mut Store,
    numbers: impl IntoIterator<Item = u64>,
    key: impl Fn(u64) -> K,
    len: usize,
) {
    for i in numbers {
        s.put(key(i).as_ref(), Kind::String, &value(i, len), None)
            .unwrap();
    }
}

/// Asserts that `key(i)` reads `value(i, len)` for each `i` of `numbers`, naming the first key
/// that does not.
pub fn assert_values<K, N>(s: &mut Store, numbers: N, key: impl Fn(u64) -> K, len: usize)
where
    K: AsRef<[u8]>,
    N: IntoIterator<Item = u64>,
{
    for i in numbers {
        let k = key(i);
        assert_eq!(
            get(s, k.as_ref()),
            Some(value(i, len)),
            "{}",
            String::from_utf8_lossy(k.as_ref())
        );
    }
}

/// The NVMe tier's figures.
pub fn nvme_tier(s: &Store) -> TierStats {
    s.stats()
        .tiers
        .into_iter()
        .find(|t| t.tier == "nvme")
        .unwrap()
}

/// Reads from the NVMe tier so far.
pub fn nvme_reads(s: &Store) -> u64 {
    nvme_tier(s).reads
}

/// The clock's time, in milliseconds since 1970.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}
