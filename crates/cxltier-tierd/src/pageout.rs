//! The NVMe tier's mover: which of a target's resident pages go to swap, and sending them there
//! with `process_madvise(MADV_PAGEOUT)`.
//!
//! A target may keep its DRAM budget plus its CXL budget in memory; what is resident beyond that
//! is paged out, coldest first, at most the interval's allowance (the rate limit, or the SLA
//! controller's figure, [`crate::psi`]). Cold pages go first, then warm ones, and hot ones only
//! when nothing colder is left: the budget is the budget (a workload whose hot set is larger
//! than it is slowed by its refaults, as it would be under the kernel alone, and the SLA
//! controller is what trades memory for stall). Among pages equally cold the ones already on a
//! slower tier go first (they were demoted for being cold before), and a page moved this interval
//! or too recently is left alone. The kernel's reclaim writes them to the
//! highest-priority swap area, tierd's; a page that is touched again faults back in.

use crate::plan::{Heat, PageInfo, Thresholds};
use crate::TierdError;
use std::collections::HashSet;
use std::fs;
use std::path::Path;

/// The units to page out, in address order, and the pages they hold. A unit is a page, or a
/// chunk of a large target (`crate::chunks`) counted at its resident pages: the excess over
/// `keep_pages` and the `allowance` are in pages.
pub fn select(
    units: &[PageInfo],
    thresholds: &Thresholds,
    fast: &[u32],
    keep_pages: u64,
    allowance: u64,
    leave_alone: &HashSet<usize>,
) -> (Vec<PageInfo>, PageoutHeld) {
    let resident: u64 = units.iter().map(|p| p.pages as u64).sum();
    let excess = resident.saturating_sub(keep_pages);
    let mut held = PageoutHeld::default();
    if excess == 0 {
        return (Vec::new(), held);
    }
    let mut candidates: Vec<&PageInfo> = Vec::new();
    for p in units {
        if leave_alone.contains(&p.addr) {
            continue;
        }
        candidates.push(p);
    }
    // Coldest first: cold, warm, then hot; fewer accesses, then older, slower tier first, address.
    candidates.sort_by_key(|p| {
        (
            thresholds.heat(p),
            p.accesses,
            std::cmp::Reverse(p.age),
            fast.contains(&p.node),
            p.addr,
        )
    });
    let candidate_pages: u64 = candidates.iter().map(|p| p.pages as u64).sum();
    let wanted = excess.min(candidate_pages);
    held.by_residency = excess - wanted;
    let mut out = Vec::new();
    let mut taken = 0u64;
    for p in candidates {
        if taken >= wanted {
            break;
        }
        if taken + p.pages as u64 > allowance {
            break;
        }
        taken += p.pages as u64;
        out.push(*p);
    }
    held.by_allowance = wanted.saturating_sub(taken);
    out.sort_unstable_by_key(|p| p.addr);
    (out, held)
}

/// How many of `prefetched` (pages read back ahead of their fault last interval) were hits: in
/// a resident unit now (not paged out again) whose region is hot (the page was predicted to be
/// touched, and its neighbourhood was). `span_of` gives a unit's length in bytes (a page's, or
/// a chunk's: a chunk counts as resident when any of its sampled pages is).
pub fn prefetch_hits(
    prefetched: &[usize],
    units: &[PageInfo],
    thresholds: &Thresholds,
    span_of: &dyn Fn(&PageInfo) -> usize,
) -> u64 {
    if prefetched.is_empty() {
        return 0;
    }
    let mut hot: Vec<(usize, usize)> = units
        .iter()
        .filter(|p| thresholds.heat(p) == Heat::Hot)
        .map(|p| (p.addr, p.addr + span_of(p)))
        .collect();
    hot.sort_unstable();
    prefetched
        .iter()
        .filter(|&&a| {
            let i = hot.partition_point(|&(start, _)| start <= a);
            i > 0 && a < hot[i - 1].1
        })
        .count() as u64
}

/// How many pages the first prefetch may read back.
pub const PREFETCH_START_PAGES: u64 = 256;
/// The fewest: prefetching never stops outright, so that a workload that turns predictable is
/// found again.
pub const PREFETCH_MIN_PAGES: u64 = 16;
/// The most (1 GiB of 4 KiB pages).
pub const PREFETCH_MAX_PAGES: u64 = 1 << 18;

/// The next interval's prefetch limit after one that read back `prefetched` pages of which
/// `hits` were hits: doubled when at least half hit, halved otherwise, within
/// [`PREFETCH_MIN_PAGES`, `PREFETCH_MAX_PAGES`]; unchanged after an interval that prefetched
/// nothing. Under a budget a prefetched page nobody touches takes the place of one somebody
/// would have (every YCSB region of redis-server reads hot: in the lab its prefetches hit 2.5%
/// of the time).
pub fn next_prefetch_limit(limit: u64, prefetched: u64, hits: u64) -> u64 {
    if prefetched == 0 {
        return limit;
    }
    let next = if hits * 2 >= prefetched {
        limit.saturating_mul(2)
    } else {
        limit / 2
    };
    next.clamp(PREFETCH_MIN_PAGES, PREFETCH_MAX_PAGES)
}

/// Pages over the budget that stay resident this interval, and why.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageoutHeld {
    /// Only pages moved too recently were left to page out.
    pub by_residency: u64,
    /// The interval's allowance (rate limit or SLA) was spent.
    pub by_allowance: u64,
}

/// Sorted page addresses as `(start, length)` runs of adjacent pages.
pub fn ranges(addrs: &[usize], page: usize) -> Vec<(usize, usize)> {
    merge_runs(addrs.iter().map(|&a| (a, page)))
}

/// `(start, length)` stretches in address order, adjacent ones merged.
pub fn merge_runs(stretches: impl IntoIterator<Item = (usize, usize)>) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (a, n) in stretches {
        match out.last_mut() {
            Some((start, len)) if *start + *len == a => *len += n,
            _ => out.push((a, n)),
        }
    }
    out
}

/// Which of `addrs` (sorted) are in swap now (bit 62 of `/proc/PID/pagemap`), read run by run.
pub fn swapped_among(
    proc_root: &Path,
    pid: u32,
    addrs: &[usize],
    page: u64,
) -> Result<Vec<usize>, TierdError> {
    swapped_in(
        proc_root,
        pid,
        &ranges(addrs, page as usize),
        page,
        usize::MAX,
    )
}

/// The pages of `runs` (`(start, bytes)`, in address order) that are in swap now, at most
/// `limit` of them (the reading stops there).
pub fn swapped_in(
    proc_root: &Path,
    pid: u32,
    runs: &[(usize, usize)],
    page: u64,
    limit: usize,
) -> Result<Vec<usize>, TierdError> {
    let path = proc_root.join(pid.to_string()).join("pagemap");
    let map = cxltier_sys::pagemap::Pagemap::open(&path)
        .map_err(|e| TierdError::io("opening", &path, e))?;
    let mut out = Vec::new();
    for &(start, len) in runs {
        if out.len() >= limit {
            break;
        }
        map.walk(start as u64, (start + len) as u64, page, |a, e| {
            if e.swapped() && out.len() < limit {
                out.push(a as usize);
            }
        })
        .map_err(|e| TierdError::io("reading", &path, e))?;
    }
    Ok(out)
}

/// The target's bytes in swap (`VmSwap` of `/proc/PID/status`).
pub fn swapped_bytes(proc_root: &Path, pid: u32) -> Result<u64, TierdError> {
    let path = proc_root.join(format!("{pid}/status"));
    let text =
        fs::read_to_string(&path).map_err(|e| TierdError::process_io(pid, "reading", &path, e))?;
    parse_vm_swap(&text).ok_or_else(|| TierdError::Parse {
        path,
        content: String::new(),
        why: "no VmSwap line (a kernel thread?)".into(),
    })
}

/// `VmSwap:` in bytes from a `/proc/PID/status` text.
pub fn parse_vm_swap(status: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let v = l.strip_prefix("VmSwap:")?.trim();
        let kb = v.strip_suffix("kB").unwrap_or(v).trim();
        kb.parse::<u64>().ok().map(|k| k * 1024)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TH: Thresholds = Thresholds {
        hot_min: 5,
        cold_max: 1,
        cold_min_age: 2,
    };

    fn page(i: usize, node: u32, accesses: u32, age: u32) -> PageInfo {
        crate::testutil::page_at(i * 4096, node, accesses, age)
    }

    #[test]
    fn only_the_excess_goes_coldest_first_slower_tier_first_and_hot_last() {
        let pages = vec![
            page(0, 0, 9, 5), // hot
            page(1, 0, 0, 9), // cold on DRAM
            page(2, 1, 0, 9), // cold on CXL: before page 1
            page(3, 0, 3, 1), // warm
            page(4, 1, 1, 3), // cold, one access
        ];
        let none = HashSet::new();
        // Keep 3: two go, the two coldest (CXL's first at equal heat).
        let addrs = |v: Vec<PageInfo>| v.iter().map(|p| p.addr).collect::<Vec<_>>();
        let (out, held) = select(&pages, &TH, &[0], 3, 100, &none);
        assert_eq!(addrs(out), vec![4096, 2 * 4096]);
        assert_eq!(held, PageoutHeld::default());
        // Keep 1: everything but the hot page, which goes last.
        let (out, held) = select(&pages, &TH, &[0], 1, 100, &none);
        assert_eq!(addrs(out), vec![4096, 2 * 4096, 3 * 4096, 4 * 4096]);
        assert_eq!(held, PageoutHeld::default());
        // Keep 0: the hot page too (the budget is the budget).
        let (out, _) = select(&pages, &TH, &[0], 0, 100, &none);
        assert_eq!(out.len(), 5);
        // Within budget: nothing.
        assert!(select(&pages, &TH, &[0], 5, 100, &none).0.is_empty());
        // The allowance caps it; the rest is held.
        let (out, held) = select(&pages, &TH, &[0], 0, 1, &none);
        assert_eq!(addrs(out), vec![2 * 4096]);
        assert_eq!(held.by_allowance, 4);
        // A page moved this interval is left alone.
        let moved: HashSet<usize> = [2 * 4096].into();
        let (out, _) = select(&pages, &TH, &[0], 3, 100, &moved);
        assert_eq!(addrs(out), vec![4096, 4 * 4096]);
        // A written page is hot whatever its region says.
        let mut w = pages.clone();
        w[2].written = true;
        let (out, _) = select(&w, &TH, &[0], 4, 100, &none);
        assert_eq!(addrs(out), vec![4096]);
    }

    #[test]
    fn chunks_count_their_resident_pages_against_the_excess_and_the_allowance() {
        let chunk = |i: usize, pages: u32, accesses: u32| PageInfo {
            addr: i << 21,
            pages,
            node: 0,
            accesses,
            age: 9,
            written: false,
        };
        let units = vec![chunk(0, 512, 0), chunk(1, 300, 0), chunk(2, 512, 9)];
        let none = HashSet::new();
        // 1324 resident, keep 1000: 324 over. A chunk goes whole: the first of the two equally
        // cold ones (by address) covers it.
        let (out, held) = select(&units, &TH, &[0], 1000, 10_000, &none);
        assert_eq!(out, vec![units[0]]);
        assert_eq!(held, PageoutHeld::default());
        // An allowance below the first chunk's pages sends nothing and says why.
        let (out, held) = select(&units, &TH, &[0], 1000, 100, &none);
        assert!(out.is_empty());
        assert_eq!(held.by_allowance, 324);
        // Keep 0 with the first chunk just moved: its pages are held by residency, the hot
        // chunk goes last.
        let moved: HashSet<usize> = [0].into();
        let (out, held) = select(&units, &TH, &[0], 0, 10_000, &moved);
        assert_eq!(held.by_residency, 512);
        assert_eq!(out, vec![units[1], units[2]]);
    }

    #[test]
    fn a_prefetch_hits_when_its_page_is_resident_and_hot() {
        let pages = vec![
            page(1, 0, 9, 1), // resident, hot: a hit
            page(2, 0, 0, 9), // resident, cold: read back for nothing
            page(4, 1, 6, 2), // resident on the slower tier, hot: a hit
            page(5, 0, 9, 1), // hot, but not prefetched
        ];
        // Page 3 was prefetched and is not resident (swapped out again, or never read): no hit.
        let prefetched = [4096, 2 * 4096, 3 * 4096, 4 * 4096];
        let page_span = |_: &PageInfo| 4096;
        assert_eq!(prefetch_hits(&prefetched, &pages, &TH, &page_span), 2);
        assert_eq!(prefetch_hits(&[], &pages, &TH, &page_span), 0);
        assert_eq!(prefetch_hits(&prefetched, &[], &TH, &page_span), 0);
        // A chunk of 16 pages from page 0, hot: every prefetched page inside it is a hit.
        let chunk = [page(0, 0, 9, 1)];
        let chunk_span = |_: &PageInfo| 16 * 4096;
        assert_eq!(prefetch_hits(&prefetched, &chunk, &TH, &chunk_span), 4);
        assert_eq!(prefetch_hits(&[16 * 4096], &chunk, &TH, &chunk_span), 0);
    }

    #[test]
    fn the_prefetch_limit_follows_the_hit_rate() {
        assert_eq!(next_prefetch_limit(256, 0, 0), 256);
        assert_eq!(next_prefetch_limit(256, 100, 50), 512);
        assert_eq!(next_prefetch_limit(256, 100, 49), 128);
        assert_eq!(next_prefetch_limit(20, 100, 0), PREFETCH_MIN_PAGES);
        assert_eq!(
            next_prefetch_limit(PREFETCH_MAX_PAGES, 10, 10),
            PREFETCH_MAX_PAGES
        );
        // Missing all the time settles at the floor, hitting all the time at the ceiling.
        let mut l = PREFETCH_START_PAGES;
        for _ in 0..20 {
            l = next_prefetch_limit(l, l, 0);
        }
        assert_eq!(l, PREFETCH_MIN_PAGES);
        for _ in 0..40 {
            l = next_prefetch_limit(l, l, l);
        }
        assert_eq!(l, PREFETCH_MAX_PAGES);
    }

    #[test]
    fn adjacent_pages_make_one_range() {
        assert_eq!(
            ranges(&[0x1000, 0x2000, 0x3000, 0x5000, 0x9000, 0xa000], 0x1000),
            vec![(0x1000, 0x3000), (0x5000, 0x1000), (0x9000, 0x2000)]
        );
        assert!(ranges(&[], 4096).is_empty());
    }

    #[test]
    fn the_swap_bit_of_pagemap_picks_the_swapped_pages() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("5")).unwrap();
        // Pages 0..8: 2 and 3 in swap, 5 present, the rest never touched.
        let mut bytes = Vec::new();
        for i in 0..8u64 {
            let e: u64 = match i {
                2 | 3 => 1 << 62,
                5 => (1 << 63) | 77,
                _ => 0,
            };
            bytes.extend_from_slice(&e.to_le_bytes());
        }
        std::fs::write(d.path().join("5/pagemap"), &bytes).unwrap();
        let asked = [0x1000, 0x2000, 0x3000, 0x5000, 0x7000];
        assert_eq!(
            swapped_among(d.path(), 5, &asked, 0x1000).unwrap(),
            vec![0x2000, 0x3000]
        );
        // Whole runs, and the limit stops the reading.
        assert_eq!(
            swapped_in(d.path(), 5, &[(0, 0x8000)], 0x1000, 1).unwrap(),
            vec![0x2000]
        );
    }

    #[test]
    fn swapped_bytes_come_from_vm_swap() {
        assert_eq!(
            parse_vm_swap("Name:\tx\nVmRSS:\t  100 kB\nVmSwap:\t    2048 kB\n"),
            Some(2 << 20)
        );
        assert_eq!(parse_vm_swap("Name:\tkthreadd\n"), None);
        let d = tempfile::tempdir().unwrap();
        assert!(matches!(
            swapped_bytes(d.path(), 9),
            Err(TierdError::NoSuchProcess { pid: 9 })
        ));
    }
}
