//! Poisoned memory under the store's tiers: the objects on it are restored from their NVMe copy
//! or reported lost, key by key.
//!
//! RAS reports poison as host physical ranges (`cxltier ras --watch`: a device's poison list or a
//! media error, mapped to the range of its region). The store knows its objects by virtual
//! address; [`Store::poisoned_physical`] translates through `/proc/self/pagemap`, which shows
//! frame numbers only to CAP_SYS_ADMIN. Then, for every object whose slot overlaps a poisoned
//! range:
//!
//! - its NVMe copy is current (written through, or cleaned): the memory copy is dropped without
//!   being read (reading poison is what must not happen) and the object is served from NVMe;
//! - otherwise (write-back data not yet on NVMe, or no NVMe tier) its only current copy is gone:
//!   the key is removed and reported lost. Its older NVMe version, if any, is not resurrected.
//!
//! The OS pages holding poison are then retired in their arena for good: no slot overlapping
//! them is handed out again (free ones leave the free lists at once, used ones, objects on the
//! same page but not on the poisoned bytes, when they are freed). The kernel takes memory out of
//! service a page at a time, and a page it hard-offlined after consuming poison stays unmapped,
//! so reusing its slots would fault; after a soft-offline (`cxltier ras --watch --quarantine`)
//! the page is backed by a healthy frame, and retiring it costs one page per poisoned line.
//! [`Store::retired_memory`] counts what each tier gave up.

use super::{Place, Store};
use crate::arena::SLOT_HEADER;
use crate::{Result, StoreError};

/// What the store did about poisoned ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoisonOutcome {
    /// Keys whose memory copy overlapped poison and whose current copy is on NVMe: now served
    /// from NVMe.
    pub restored: Vec<Vec<u8>>,
    /// Keys whose only current copy overlapped poison: removed.
    pub lost: Vec<Vec<u8>>,
    /// Bytes of the store's memory newly retired (whole OS pages; never used again).
    pub retired_bytes: u64,
}

/// Memory a tier retired because it held poison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetiredMemory {
    pub tier: &'static str,
    pub node: u32,
    pub bytes: u64,
}

const PAGE: u64 = 4096;

impl Store {
    /// Handles poisoned virtual address ranges `[start, end)` of this process.
    pub fn poisoned(&mut self, ranges: &[(usize, usize)]) -> PoisonOutcome {
        let overlaps = |a: usize, b: usize| ranges.iter().any(|&(s, e)| a < e && s < b);
        let hit: Vec<Vec<u8>> = self
            .index
            .iter()
            .filter_map(|(k, e)| match e.place() {
                Place::Mem(t, off) => {
                    let start = self.arenas[t as usize].addr() + off as usize;
                    let end = start + SLOT_HEADER + k.len() + e.len() as usize;
                    overlaps(start, end).then(|| k.to_vec())
                }
                Place::Nvme => None,
            })
            .collect();
        let mut out = PoisonOutcome::default();
        // Retire first, so that the slots freed below stay out of use.
        for a in &mut self.arenas {
            let (base, len) = (a.addr(), a.capacity() as usize);
            for &(s, e) in ranges {
                if s < base + len && base < e {
                    out.retired_bytes += a.retire(s.max(base) - base, e.min(base + len) - base);
                }
            }
        }
        for k in hit {
            let e = self
                .index
                .get_mut(k.as_slice())
                .expect("listed from the index");
            if !e.dirty() && e.nv().is_some() {
                let place = e.place();
                e.set_place(Place::Nvme);
                self.free_place(place);
                out.restored.push(k);
            } else {
                // The memory copy is the only current one: nothing may read it, and an older
                // NVMe version must not come back in its place.
                let e = self.index.remove(k.as_slice()).expect("present");
                self.free_place(e.place());
                if let (Some(nv), Some(log)) = (e.nv(), self.log.as_mut()) {
                    let _ = log.append_tombstone(&k);
                    log.mark_dead(nv);
                }
                out.lost.push(k);
            }
        }
        out
    }

    /// Memory each tier retired because it held poison.
    pub fn retired_memory(&self) -> Vec<RetiredMemory> {
        self.arenas
            .iter()
            .map(|a| RetiredMemory {
                tier: a.tier,
                node: a.node,
                bytes: a.retired_bytes(),
            })
            .collect()
    }

    /// Checks that no free slot lies on retired memory (tests).
    pub fn check_retired(&self) -> std::result::Result<(), String> {
        self.arenas.iter().try_for_each(|a| a.check_retired())
    }

    /// Handles poisoned host physical ranges `[start, end)`, as RAS reports them: finds the
    /// store's pages on them through `self/pagemap` below the builder's proc root (needs
    /// CAP_SYS_ADMIN).
    pub fn poisoned_physical(&mut self, ranges: &[(u64, u64)]) -> Result<PoisonOutcome> {
        let path = self.proc_root.join("self/pagemap");
        let pagemap =
            cxltier_sys::pagemap::Pagemap::open(&path).map_err(|source| StoreError::Io {
                context: format!(
                    "opening {} to find the store's pages on poisoned memory",
                    path.display()
                ),
                source,
            })?;
        let mut virtual_ranges = Vec::new();
        let mut present = 0u64;
        let mut with_frame = 0u64;
        for a in &self.arenas {
            let base = a.addr() as u64;
            // The arena is the store's own mapping: a failed read only ends that arena's walk.
            let _ = pagemap.walk(base, base + a.capacity(), PAGE, |va, entry| {
                if !entry.present() {
                    return;
                }
                present += 1;
                let Some(pfn) = entry.pfn() else { return };
                with_frame += 1;
                let (ps, pe) = (pfn * PAGE, pfn * PAGE + PAGE);
                for &(s, e) in ranges {
                    if s < pe && ps < e {
                        // Only the poisoned part of the page.
                        let from = va + s.saturating_sub(ps);
                        let to = va + (e.min(pe) - ps);
                        virtual_ranges.push((from as usize, to as usize));
                    }
                }
            });
        }
        if present > 0 && with_frame == 0 {
            return Err(StoreError::Config(
                "cannot map poisoned physical ranges to the store's memory: /proc/self/pagemap shows frame numbers only with CAP_SYS_ADMIN; run the store as root".to_string(),
            ));
        }
        Ok(self.poisoned(&virtual_ranges))
    }
}

#[cfg(test)]
mod tests {
    use crate::{Durability, Kind, SsdSpec, StoreBuilder};

    fn temp(name: &str) -> crate::testing::TempFile {
        crate::testing::temp_file("cxltier-store-poison-", name)
    }

    /// A store of 16 MiB of DRAM over a fresh log of 64 MiB at `p`, committing every second.
    fn over_a_log(p: &std::path::Path) -> super::Store {
        let _ = std::fs::remove_file(p);
        StoreBuilder::new()
            .dram(16 << 20)
            .ssd(SsdSpec {
                path: p.to_path_buf(),
                capacity: Some(64 << 20),
            })
            .durability(Durability::EverySec)
            .build()
            .unwrap()
    }

    /// The address of `k`'s slot in memory.
    fn slot(s: &super::Store, k: &str) -> usize {
        match s.index[k.as_bytes()].place() {
            super::Place::Mem(t, off) => s.arenas[t as usize].addr() + off as usize,
            super::Place::Nvme => panic!("{k} not in memory"),
        }
    }

    /// A store of 16 MiB of DRAM and nothing else.
    fn dram_only() -> super::Store {
        StoreBuilder::new()
            .dram(16 << 20)
            .durability(Durability::None)
            .build()
            .unwrap()
    }

    #[test]
    fn clean_objects_come_back_from_nvme_and_dirty_ones_are_reported_lost() {
        let p = temp("clean-dirty");
        let mut s = over_a_log(&p);
        for i in 0..100u32 {
            let key = format!("k{i:03}");
            s.put(key.as_bytes(), Kind::String, &[i as u8; 200], None)
                .unwrap();
        }
        s.commit().unwrap();
        // Poison the slots of k010 and k020.
        let (a, b) = (slot(&s, "k010"), slot(&s, "k020"));
        // k020 is made dirty: its newest value is only in memory.
        s.index.get_mut(b"k020".as_slice()).unwrap().set_dirty(true);
        let out = s.poisoned(&[(a + 8, a + 9), (b, b + 1)]);
        assert_eq!(out.restored, vec![b"k010".to_vec()]);
        assert_eq!(out.lost, vec![b"k020".to_vec()]);
        s.check_invariants().unwrap();
        assert_eq!(s.get(b"k010").unwrap().unwrap().value, &[10u8; 200][..]);
        assert!(s.get(b"k020").unwrap().is_none(), "lost, not resurrected");
        assert_eq!(s.get(b"k030").unwrap().unwrap().value, &[30u8; 200][..]);
        assert_eq!(s.len(), 99);
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn physical_ranges_are_found_through_pagemap_or_refused() {
        let p = temp("physical");
        let mut s = over_a_log(&p);
        s.put(b"victim", Kind::String, &[9u8; 300], None).unwrap();
        s.put(b"bystander", Kind::String, &[8u8; 300], None)
            .unwrap();
        s.commit().unwrap();
        let va = match s.index[b"victim".as_slice()].place() {
            super::Place::Mem(t, off) => s.arenas[t as usize].addr() as u64 + off,
            super::Place::Nvme => panic!("victim not in memory"),
        };
        // The victim's frame, as RAS would report it.
        let pm = cxltier_sys::pagemap::Pagemap::open(std::path::Path::new("/proc/self/pagemap"))
            .unwrap();
        let page = va / super::PAGE * super::PAGE;
        let mut pfn = 0;
        pm.walk(page, page + super::PAGE, super::PAGE, |_, e| {
            pfn = e.pfn().unwrap_or(0)
        })
        .unwrap();
        if pfn == 0 {
            // Unprivileged: frame numbers are hidden, and the store says so.
            let err = s.poisoned_physical(&[(0, u64::MAX)]).unwrap_err();
            assert!(err.to_string().contains("CAP_SYS_ADMIN"), "{err}");
        } else {
            let hpa = pfn * super::PAGE + va % super::PAGE;
            let out = s.poisoned_physical(&[(hpa, hpa + 64)]).unwrap();
            assert_eq!(out.restored, vec![b"victim".to_vec()]);
            assert!(out.lost.is_empty());
            s.check_invariants().unwrap();
            assert_eq!(s.get(b"victim").unwrap().unwrap().value, &[9u8; 300][..]);
            assert_eq!(s.get(b"bystander").unwrap().unwrap().value, &[8u8; 300][..]);
        }
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn without_nvme_every_hit_object_is_lost() {
        let mut s = dram_only();
        s.put(b"only", Kind::String, b"in memory", None).unwrap();
        let a = s.arenas().iter().map(|a| a.addr).min().unwrap();
        let len: usize = s.arenas().iter().map(|a| a.len).max().unwrap();
        let out = s.poisoned(&[(a, a + len)]);
        assert_eq!(out.lost, vec![b"only".to_vec()]);
        assert!(out.restored.is_empty());
        s.check_invariants().unwrap();
        assert!(s.get(b"only").unwrap().is_none());
    }

    #[test]
    fn poisoned_pages_are_retired_for_good() {
        let mut s = dram_only();
        for i in 0..100u32 {
            s.put(format!("k{i:03}").as_bytes(), Kind::String, &[1; 200], None)
                .unwrap();
        }
        let a = slot(&s, "k010");
        let out = s.poisoned(&[(a + 20, a + 21)]);
        assert_eq!(out.lost, vec![b"k010".to_vec()]);
        let os_page = cxltier_sys::page_size();
        assert_eq!(out.retired_bytes, os_page as u64);
        let (page_start, page_end) = (a / os_page * os_page, a / os_page * os_page + os_page);
        // Objects on the same page but not on the poisoned bytes stay readable.
        let neighbour = (0..100u32)
            .map(|i| format!("k{i:03}"))
            .find(|k| k != "k010" && (page_start..page_end).contains(&slot(&s, k)))
            .expect("a 4 KiB page holds several 256-byte slots");
        assert_eq!(
            s.get(neighbour.as_bytes()).unwrap().unwrap().value,
            &[1; 200][..]
        );
        // Free everything and fill the store again many times over the poisoned page's slots:
        // nothing lands on the retired page.
        for i in 0..100u32 {
            s.delete(format!("k{i:03}").as_bytes()).unwrap();
        }
        s.check_retired().unwrap();
        for round in 0..3u32 {
            for i in 0..2000u32 {
                let k = format!("r{round}-{i:05}");
                s.put(k.as_bytes(), Kind::String, &[2; 200], None).unwrap();
                let at = slot(&s, &k);
                assert!(
                    !(page_start..page_end).contains(&at),
                    "{k} was placed on the retired page"
                );
            }
            for i in 0..2000u32 {
                s.delete(format!("r{round}-{i:05}").as_bytes()).unwrap();
            }
        }
        s.check_invariants().unwrap();
        s.check_retired().unwrap();
        let retired = s.retired_memory();
        assert_eq!(retired.iter().map(|r| r.bytes).sum::<u64>(), os_page as u64);
        assert_eq!(retired[0].tier, "dram");
        // Poison again on the same page retires nothing new.
        assert_eq!(s.poisoned(&[(a, a + 64)]).retired_bytes, 0);
    }
}
