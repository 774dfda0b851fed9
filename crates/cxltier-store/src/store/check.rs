//! Checks: a log file verified offline, read-only ([`check_log`]), and the store's own invariants
//! for tests ([`Store::check_invariants`]).

use hashbrown::HashMap;

use super::{now_ms, Store, WritePos, DRAM};
use crate::index::Place;
use crate::keys::is_internal_key;
use crate::log::Log;
use crate::Result;

impl Store {
    /// Check the store's invariants (tests): every entry in one place, byte accounting, budgets.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let mut objects = vec![0u64; self.arenas.len()];
        let mut slot_bytes = vec![0u64; self.arenas.len()];
        let mut slots = std::collections::HashSet::new();
        for (k, e) in self.index.iter() {
            match e.place() {
                Place::Mem(t, off) => {
                    objects[t as usize] += 1;
                    let a = &self.arenas[t as usize];
                    if !slots.insert((t, off)) {
                        return Err(format!("two entries share {} slot {off}", a.tier));
                    }
                    if a.key_at(off) != Some(k) {
                        return Err(format!(
                            "{:?}: its {} slot {off} holds another key",
                            String::from_utf8_lossy(k),
                            a.tier
                        ));
                    }
                    let size = a.slot_size_at(off);
                    if crate::arena::SLOT_HEADER + k.len() + e.len() as usize > size {
                        return Err(format!(
                            "{:?} overflows its slot",
                            String::from_utf8_lossy(k)
                        ));
                    }
                    slot_bytes[t as usize] += size as u64;
                }
                Place::Nvme => {
                    if e.nv().is_none() {
                        return Err(format!("{:?} is nowhere", String::from_utf8_lossy(k)));
                    }
                }
            }
            if e.dirty() && matches!(e.place(), Place::Nvme) {
                return Err("a dirty entry has no memory copy".into());
            }
        }
        for (t, a) in self.arenas.iter().enumerate() {
            a.check_slabs()?;
            if a.objects != objects[t] {
                return Err(format!(
                    "{}: arena holds {} objects, index says {}",
                    a.tier, a.objects, objects[t]
                ));
            }
            if a.used_bytes != slot_bytes[t] {
                return Err(format!(
                    "{}: arena counts {} bytes in use, the index's slots add up to {}",
                    a.tier, a.used_bytes, slot_bytes[t]
                ));
            }
            if a.used_bytes > a.capacity() {
                return Err(format!("{}: more bytes in use than mapped", a.tier));
            }
        }
        if self.index_bytes() > self.dram_budget {
            return Err(format!(
                "the index ({} bytes) exceeds the DRAM budget ({})",
                self.index_bytes(),
                self.dram_budget
            ));
        }
        if self.arenas[DRAM].used_bytes + self.index_bytes() > self.dram_budget {
            return Err(format!(
                "DRAM objects ({} bytes) and the index ({} bytes) exceed the DRAM budget ({})",
                self.arenas[DRAM].used_bytes,
                self.index_bytes(),
                self.dram_budget
            ));
        }
        if self.arenas[DRAM].resident_bytes() + self.index_bytes() > self.dram_budget {
            return Err(format!(
                "resident DRAM slab pages ({} bytes) and the index ({} bytes) exceed the DRAM budget ({})",
                self.arenas[DRAM].resident_bytes(),
                self.index_bytes(),
                self.dram_budget
            ));
        }
        for k in self.staged.keys() {
            if !self.index.get(k).is_some_and(|e| e.place() == Place::Nvme) {
                return Err("a staged value belongs to no NVMe-only key".into());
            }
        }
        self.index.check()?;
        Ok(())
    }
}

/// What [`check_log`] found in a log file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LogCheck {
    pub path: std::path::PathBuf,
    pub segment_size: u32,
    #[serde(flatten)]
    pub report: crate::log::OpenReport,
    pub damaged_bytes: u64,
    /// Keys a start would serve.
    pub keys: u64,
    /// Keys whose newest record is a delete (or an expiry that has passed).
    pub deleted_keys: u64,
    /// Keys whose newest readable record lies before a damaged range: a newer version or a delete
    /// of theirs may be lost.
    pub keys_possibly_stale: u64,
    /// Whether `cxltier serve` would refuse this file without `--recover-anyway`.
    pub start_refused: bool,
}

/// Verify a log file offline, read-only (it is never written, and need not be on a file system
/// with `O_DIRECT`): its segments and records replayed as recovery would, the keys and deletes
/// that a start would see, every range that could not be read, and what a start would lose.
pub fn check_log(path: &std::path::Path, segment_size: u32) -> Result<LogCheck> {
    let now = now_ms();
    // key → (record seq, place in write order, deleted)
    let mut keys: HashMap<Box<[u8]>, (u64, WritePos, bool)> = HashMap::new();
    let mut flush_seq = 0u64;
    let report = Log::check_file(path, segment_size, &mut |r| {
        if r.flush_all {
            flush_seq = r.seq;
            keys.clear();
            return;
        }
        if r.seq < flush_seq || keys.get(r.key).is_some_and(|&(s, _, _)| s > r.seq) {
            return;
        }
        let gone = r.tombstone || r.expires_at_ms.is_some_and(|t| t <= now);
        keys.insert(
            r.key.into(),
            (r.seq, (r.segment_seq, r.loc.offset as u64), gone),
        );
    })?;
    let last = report.last_damage();
    let keys_possibly_stale = last.map_or(0, |last| {
        keys.values().filter(|&&(_, at, _)| at < last).count() as u64
    });
    // Collection chunks are parts of their collection's key, not keys.
    keys.retain(|k, _| !is_internal_key(k));
    let deleted_keys = keys.values().filter(|&&(_, _, gone)| gone).count() as u64;
    Ok(LogCheck {
        path: path.to_path_buf(),
        segment_size,
        damaged_bytes: report.damaged_bytes(),
        start_refused: report.is_damaged(),
        keys: keys.len() as u64 - deleted_keys,
        deleted_keys,
        keys_possibly_stale,
        report,
    })
}
