//! What the store reports about itself: its statistics (walked or from running counts), its
//! arenas and where the kernel placed their pages.

use super::{Store, CXL};
use crate::index::Place;
use crate::log::Log;
use crate::{ArenaInfo, ArenaPlacement, Durability, Result, StoreStats, TierStats};

impl Store {
    pub fn stats(&self) -> StoreStats {
        let mut objects = [0u64; 2];
        let mut bytes = [0u64; 2];
        let mut nvme_only = (0u64, 0u64);
        for e in self.index.values() {
            match e.place() {
                Place::Mem(t, _) => {
                    objects[t as usize] += 1;
                    bytes[t as usize] += e.len() as u64;
                }
                Place::Nvme => {
                    nvme_only.0 += 1;
                    nvme_only.1 += e.len() as u64;
                }
            }
        }
        self.stats_from(objects, bytes, nvme_only)
    }

    /// [`Store::stats`] in constant time, for a caller that samples often (the server's
    /// metrics): the walk of the index is left out, so the tiers' `objects` and `bytes` come
    /// from running counts instead. A memory tier's objects are its arena's (collection chunks
    /// included) and its bytes the slots they take (slot sizes, not value lengths); NVMe's
    /// objects are the index's entries not in memory and its bytes the log's live record bytes
    /// (records of objects also in memory included). Everything else is as `stats` reports it.
    pub fn quick_stats(&self) -> StoreStats {
        let mut objects = [0u64; 2];
        let mut bytes = [0u64; 2];
        for (t, a) in self.arenas.iter().enumerate() {
            objects[t] = a.objects;
            bytes[t] = a.used_bytes;
        }
        let in_memory: u64 = objects.iter().sum();
        let nvme_only = (
            (self.index.len() as u64).saturating_sub(in_memory),
            self.log.as_ref().map_or(0, |l| l.stats().live_bytes),
        );
        self.stats_from(objects, bytes, nvme_only)
    }

    fn stats_from(&self, objects: [u64; 2], bytes: [u64; 2], nvme_only: (u64, u64)) -> StoreStats {
        let mut tiers = Vec::new();
        for (t, a) in self.arenas.iter().enumerate() {
            tiers.push(TierStats {
                tier: a.tier,
                node: Some(a.node),
                capacity_bytes: self.tier_limit(t),
                resident_bytes: a.resident_bytes(),
                objects: objects[t],
                bytes: bytes[t],
                hits: self.counters[t].hits,
                promotions: self.counters[t].promotions,
                demotions: self.counters[t].demotions,
                size_classes: a.classes_in_use().count() as u64,
                slab_page_bytes: a.page_size() as u64,
                ..TierStats::default()
            });
        }
        let mut wa = 0.0;
        if let Some(log) = &self.log {
            let l = log.stats();
            wa = if l.appended_bytes > 0 {
                l.write_bytes as f64 / l.appended_bytes as f64
            } else {
                0.0
            };
            tiers.push(TierStats {
                tier: "nvme",
                node: None,
                capacity_bytes: l.capacity,
                resident_bytes: 0,
                objects: nvme_only.0,
                bytes: nvme_only.1,
                hits: self.counters[2].hits,
                promotions: self.counters[2].promotions,
                demotions: 0,
                reads: l.reads,
                writes: l.writes,
                read_bytes: l.read_bytes,
                write_bytes: l.write_bytes,
                ..TierStats::default()
            });
        }
        StoreStats {
            keys: self.index.user_len() as u64,
            index_bytes: self.index_bytes(),
            memory_used_bytes: self.memory_used(),
            misses: self.misses,
            evictions_to_nvme: self.evictions_to_nvme,
            admissions_rejected: self.admissions_rejected,
            slab_pages_moved: self.slab_pages_moved,
            slab_objects_moved: self.slab_objects_moved,
            slab_pages_compacted: self.slab_pages_compacted,
            spare_slot_writes: self.spare_slot_writes,
            write_amplification: wa,
            segments_cleaned: self
                .log
                .as_ref()
                .map(|l| l.stats().segments_cleaned)
                .unwrap_or(0),
            durability: match self.durability {
                Durability::None => "none",
                Durability::EverySec => "everysec",
                Durability::Always => "always",
            },
            cxl_emulated_on_dram: self.arenas.get(CXL).is_some_and(|a| a.emulated),
            tiers,
            nvme_read_latency: self.log.as_ref().and_then(Log::read_latency),
        }
    }

    /// Zero the activity counters of [`Store::stats`] (hits, misses, promotions, demotions,
    /// evictions, rejected admissions, device reads and writes and their bytes, segments cleaned,
    /// read latencies); what the store holds (keys, objects, bytes) is not a counter and stays.
    /// `CONFIG RESETSTAT`.
    pub fn reset_stats(&mut self) {
        self.counters = Default::default();
        self.misses = 0;
        self.evictions_to_nvme = 0;
        self.admissions_rejected = 0;
        self.slab_pages_moved = 0;
        self.slab_objects_moved = 0;
        self.slab_pages_compacted = 0;
        self.spare_slot_writes = 0;
        if let Some(log) = self.log.as_mut() {
            log.reset_stats();
        }
    }

    pub fn arenas(&self) -> Vec<ArenaInfo> {
        self.arenas
            .iter()
            .map(|a| ArenaInfo {
                tier: a.tier,
                node: a.node,
                addr: a.addr(),
                len: a.capacity() as usize,
            })
            .collect()
    }

    /// For each arena, the nodes its touched pages are on, as the kernel reports them
    /// (`move_pages(2)` with no target nodes): (tier, intended node, node → pages).
    pub fn placement(&self) -> Result<Vec<ArenaPlacement>> {
        let mut out = Vec::new();
        for a in &self.arenas {
            let addrs = a.used_page_addrs();
            let statuses = cxltier_sys::query_pages(None, &addrs)?;
            out.push(ArenaPlacement {
                tier: a.tier,
                node: a.node,
                pages_by_node: cxltier_sys::PagesPerNode::count(&statuses).nodes,
            });
        }
        Ok(out)
    }
}
