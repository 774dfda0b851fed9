//! Huge pages as units of placement. The kernel migrates a transparent huge page whole:
//! `move_pages` on any 4 KiB of it moves all 2 MiB. Planned page by page, one promotion of a
//! hot 4 KiB inside a huge page put 512 pages on the fast tier while the budget counted one, and
//! a target whose hot memory sat in huge pages held several times its DRAM budget there.
//!
//! So the pages of each huge page (found with `PAGEMAP_SCAN`'s `PAGE_IS_HUGE`) are merged into
//! one [`PageInfo`] of that many pages before planning; its heat is its pages' mean access count
//! (what it gives per page of DRAM it takes), its age the youngest page's, and it counts as
//! written when half its pages or more were.

use std::path::Path;

use cxltier_sys::pagemap::Pagemap;

use crate::plan::PageInfo;
use crate::procfs::Range;

/// Size of a PMD-mapped huge page where the kernel does not say
/// (`/sys/kernel/mm/transparent_hugepage/hpage_pmd_size`).
pub const DEFAULT_HUGE_BYTES: usize = 2 << 20;

/// The kernel's huge page size (`sys_root` is the root `/sys` is under), else
/// [`DEFAULT_HUGE_BYTES`].
pub fn huge_bytes(sys_root: &Path) -> usize {
    std::fs::read_to_string(sys_root.join("sys/kernel/mm/transparent_hugepage/hpage_pmd_size"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|n: &usize| n.is_power_of_two())
        .unwrap_or(DEFAULT_HUGE_BYTES)
}

/// The parts of `ranges` of process `pid` mapped by huge pages, in address order; `None` when
/// the kernel cannot say (no `PAGEMAP_SCAN` before Linux 6.7: every page is then planned alone,
/// and the report says so).
pub fn huge_ranges(
    proc_root: &Path,
    pid: u32,
    ranges: &[Range],
) -> std::io::Result<Option<Vec<(usize, usize)>>> {
    let pm = Pagemap::open(&proc_root.join(pid.to_string()).join("pagemap"))?;
    let mut out = Vec::new();
    for r in ranges {
        match pm.huge_ranges(r.start as u64, r.end as u64)? {
            Some(h) => out.extend(h.into_iter().map(|(a, b)| (a as usize, b as usize))),
            None => return Ok(None),
        }
    }
    Ok(Some(out))
}

/// `pages` (resident, in address order) with the pages of each huge page of `huge` (address
/// ranges in order, each a whole number of `huge_bytes` pages) merged into one unit at the huge
/// page's first address. Returns the units and how many of them are huge pages.
pub fn merge(
    pages: &[PageInfo],
    huge: &[(usize, usize)],
    huge_bytes: usize,
) -> (Vec<PageInfo>, u64) {
    let mut out: Vec<PageInfo> = Vec::with_capacity(pages.len());
    let mut huge_units = 0;
    let mut h = 0;
    // The huge page being merged: its unit, the sum of its pages' accesses, its pages written.
    let mut open: Option<(PageInfo, u64, u64)> = None;
    let close = |open: &mut Option<(PageInfo, u64, u64)>, out: &mut Vec<PageInfo>| {
        if let Some((mut unit, sum, written)) = open.take() {
            let n = unit.pages as u64;
            unit.accesses = sum.div_ceil(n).min(u32::MAX as u64) as u32;
            unit.written = 2 * written >= n;
            out.push(unit);
        }
    };
    for p in pages {
        while h < huge.len() && huge[h].1 <= p.addr {
            h += 1;
        }
        let in_huge = h < huge.len() && huge[h].0 <= p.addr;
        if !in_huge {
            close(&mut open, &mut out);
            out.push(*p);
            continue;
        }
        let head = p.addr & !(huge_bytes - 1);
        match &mut open {
            Some((unit, sum, written)) if unit.addr == head => {
                unit.pages += p.pages;
                unit.age = unit.age.min(p.age);
                *sum += p.accesses as u64 * p.pages as u64;
                *written += if p.written { p.pages as u64 } else { 0 };
            }
            _ => {
                close(&mut open, &mut out);
                huge_units += 1;
                let unit = PageInfo { addr: head, ..*p };
                let written = if p.written { p.pages as u64 } else { 0 };
                open = Some((unit, p.accesses as u64 * p.pages as u64, written));
            }
        }
    }
    close(&mut open, &mut out);
    (out, huge_units)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HUGE: usize = 2 << 20;

    fn page(addr: usize, accesses: u32, written: bool) -> PageInfo {
        PageInfo {
            addr,
            pages: 1,
            node: 1,
            accesses,
            age: 7,
            written,
        }
    }

    #[test]
    fn the_pages_of_a_huge_page_become_one_unit_and_the_others_stay() {
        let base = 0x4000_0000;
        let mut pages = vec![page(base - 4096, 3, false)];
        // One huge page: 512 pages, 8 of them hot (100 accesses), the rest at 0, 300 written.
        for i in 0..512 {
            pages.push(page(base + i * 4096, if i < 8 { 100 } else { 0 }, i < 300));
        }
        pages.push(page(base + HUGE, 5, false));
        let (units, n) = merge(&pages, &[(base, base + HUGE)], HUGE);
        assert_eq!(n, 1);
        assert_eq!(units.len(), 3, "{units:?}");
        assert_eq!(units[0], pages[0]);
        assert_eq!(
            units[1],
            PageInfo {
                addr: base,
                pages: 512,
                node: 1,
                accesses: 2, // 800 / 512, rounded up
                age: 7,
                written: true,
            }
        );
        assert_eq!(units[2], pages[513]);
        let total: u64 = units.iter().map(|u| u.pages as u64).sum();
        assert_eq!(total, pages.len() as u64, "every page counted once");
    }

    #[test]
    fn adjacent_huge_pages_in_one_range_stay_separate_units() {
        let base = 0x4000_0000;
        let pages: Vec<PageInfo> = (0..1024).map(|i| page(base + i * 4096, 1, false)).collect();
        let (units, n) = merge(&pages, &[(base, base + 2 * HUGE)], HUGE);
        assert_eq!(n, 2);
        assert_eq!(
            units.iter().map(|u| (u.addr, u.pages)).collect::<Vec<_>>(),
            vec![(base, 512), (base + HUGE, 512)]
        );
        assert!(units.iter().all(|u| !u.written));
    }

    #[test]
    fn without_huge_pages_nothing_changes() {
        let pages: Vec<PageInfo> = (0..10).map(|i| page(i * 4096, i as u32, false)).collect();
        assert_eq!(merge(&pages, &[], HUGE), (pages.clone(), 0));
    }

    #[test]
    fn the_huge_page_size_is_read_from_sysfs() {
        let dir = crate::testutil::TempDir::new("hpage");
        assert_eq!(huge_bytes(dir.path()), DEFAULT_HUGE_BYTES);
        let d = dir.path().join("sys/kernel/mm/transparent_hugepage");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("hpage_pmd_size"), "524288\n").unwrap();
        assert_eq!(huge_bytes(dir.path()), 512 << 10);
        std::fs::write(d.join("hpage_pmd_size"), "garbage\n").unwrap();
        assert_eq!(huge_bytes(dir.path()), DEFAULT_HUGE_BYTES);
    }
}
