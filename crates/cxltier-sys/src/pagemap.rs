//! `/proc/PID/pagemap`: one 64-bit entry per virtual page (present, soft-dirty, frame number).
//! Here so that every part that maps virtual pages to physical frames (the store, tierd, RAS)
//! reads it the same way, in batches.
//!
//! Reading entries costs 8 bytes per virtual page whether or not the page exists: a process
//! with a sparse reservation of terabytes (an AddressSanitizer shadow, a database's 1 TiB map,
//! a JVM heap reserve) takes hours to read whole. [`Pagemap::walk_present`] first asks the
//! kernel which pages are present (the `PAGEMAP_SCAN` ioctl, Linux 6.7 and later, which walks
//! the page tables and skips holes) and reads entries for those pages only.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Bit 63: the page is in memory.
pub const PRESENT: u64 = 1 << 63;
/// Bit 55: the page was written since the soft-dirty bits were last cleared.
pub const SOFT_DIRTY: u64 = 1 << 55;
/// Bit 62: the page is in swap.
pub const SWAPPED: u64 = 1 << 62;
/// Bits 0–54: the page frame number (0 without CAP_SYS_ADMIN).
pub const PFN_MASK: u64 = (1 << 55) - 1;
/// Entries read per `pread`: one read per 2 MiB of 4 KiB pages.
const BATCH: usize = 512;

/// `struct pm_scan_arg` of `<linux/fs.h>`.
#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region` of `<linux/fs.h>`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// `PAGE_IS_PRESENT` of `<linux/fs.h>`.
const PAGE_IS_PRESENT: u64 = 1 << 3;
/// `PAGE_IS_HUGE` of `<linux/fs.h>`: mapped by one PMD (a transparent or hugetlb huge page).
const PAGE_IS_HUGE: u64 = 1 << 6;
/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 =
    (3 << 30) | ((std::mem::size_of::<PmScanArg>() as u64) << 16) | (0x66 << 8) | 16;
/// Regions returned per ioctl.
const REGIONS: usize = 256;

/// One page's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageEntry(pub u64);

impl PageEntry {
    pub fn present(self) -> bool {
        self.0 & PRESENT != 0
    }
    pub fn soft_dirty(self) -> bool {
        self.0 & SOFT_DIRTY != 0
    }
    /// Whether the page is in swap (not present).
    pub fn swapped(self) -> bool {
        self.0 & SWAPPED != 0
    }
    /// The frame number, when present and visible (the kernel shows 0 to the unprivileged).
    pub fn pfn(self) -> Option<u64> {
        let pfn = self.0 & PFN_MASK;
        (self.present() && pfn != 0).then_some(pfn)
    }
}

/// An open pagemap.
pub struct Pagemap {
    file: File,
}

impl Pagemap {
    pub fn open(path: &Path) -> io::Result<Pagemap> {
        File::open(path).map(|file| Pagemap { file })
    }

    /// Calls `f(virtual address, entry)` for every page of `[start, end)` (page-aligned, pages
    /// of `page` bytes), reading the entries in batches. A failed read (the mapping changed
    /// under us) ends the walk with its error; the pages before it were seen.
    pub fn walk<F>(&self, start: u64, end: u64, page: u64, mut f: F) -> io::Result<()>
    where
        F: FnMut(u64, PageEntry),
    {
        let mut buf = vec![0u8; 8 * BATCH];
        let (first, pages) = (start / page, end.saturating_sub(start).div_ceil(page));
        let mut done = 0;
        while done < pages {
            let n = (pages - done).min(BATCH as u64) as usize;
            let bytes = &mut buf[..n * 8];
            self.file.read_exact_at(bytes, (first + done) * 8)?;
            for (i, e) in bytes.chunks_exact(8).enumerate() {
                let v = u64::from_le_bytes(e.try_into().expect("8 bytes"));
                f((first + done + i as u64) * page, PageEntry(v));
            }
            done += n as u64;
        }
        Ok(())
    }

    /// The present parts of `[start, end)` as `[from, to)` address ranges in order, from the
    /// kernel's page tables (`PAGEMAP_SCAN`): its cost follows the pages present, not the size
    /// of the range. `None` when the kernel lacks the ioctl (before Linux 6.7).
    pub fn present_ranges(&self, start: u64, end: u64) -> io::Result<Option<Vec<(u64, u64)>>> {
        self.scan(start, end, PAGE_IS_PRESENT)
    }

    /// The parts of `[start, end)` mapped by huge pages (PMD-mapped transparent huge pages and
    /// hugetlb pages) as `[from, to)` ranges in order; adjacent huge pages come as one range.
    /// The kernel moves such a page whole: `move_pages` on any 4 KiB of it migrates all of it.
    /// `None` when the kernel lacks `PAGEMAP_SCAN` (before Linux 6.7).
    pub fn huge_ranges(&self, start: u64, end: u64) -> io::Result<Option<Vec<(u64, u64)>>> {
        self.scan(start, end, PAGE_IS_PRESENT | PAGE_IS_HUGE)
    }

    /// `PAGEMAP_SCAN` for the pages that have every category of `mask`.
    fn scan(&self, start: u64, end: u64, mask: u64) -> io::Result<Option<Vec<(u64, u64)>>> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut regions = [PageRegion::default(); REGIONS];
        let mut from = start;
        while from < end {
            let mut arg = PmScanArg {
                size: std::mem::size_of::<PmScanArg>() as u64,
                flags: 0,
                start: from,
                end,
                walk_end: 0,
                vec: regions.as_mut_ptr() as u64,
                vec_len: REGIONS as u64,
                max_pages: 0,
                category_inverted: 0,
                category_mask: mask,
                category_anyof_mask: 0,
                return_mask: mask,
            };
            // SAFETY: `arg` is a valid pm_scan_arg whose `size` is its own size; `vec` points to
            // `regions`, an exclusively borrowed array of `vec_len` page_region entries that
            // outlives the call. The kernel writes at most `vec_len` regions there and updates
            // `arg.walk_end`; it touches no other memory of this process (flags 0: get only,
            // no write-protection change).
            let n = unsafe {
                libc::ioctl(
                    self.file.as_raw_fd(),
                    PAGEMAP_SCAN as libc::c_ulong,
                    &mut arg as *mut PmScanArg,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    // An older kernel: pagemap has no ioctls (ENOTTY) or does not know this one.
                    Some(libc::ENOTTY) | Some(libc::EINVAL) if out.is_empty() && from == start => {
                        return Ok(None)
                    }
                    _ => return Err(e),
                }
            }
            for r in &regions[..(n as usize).min(REGIONS)] {
                match out.last_mut() {
                    Some(last) if last.1 == r.start => last.1 = r.end,
                    _ => out.push((r.start, r.end)),
                }
            }
            // The walk stops early when the regions array is full; go on from where it ended.
            if arg.walk_end <= from {
                break;
            }
            from = arg.walk_end;
        }
        Ok(Some(out))
    }

    /// [`Pagemap::walk`] over the present pages of `[start, end)` only, in order (with
    /// [`Pagemap::present_ranges`]); every page when the kernel cannot say which are present.
    pub fn walk_present<F>(&self, start: u64, end: u64, page: u64, mut f: F) -> io::Result<()>
    where
        F: FnMut(u64, PageEntry),
    {
        match self.present_ranges(start, end)? {
            Some(ranges) => {
                for (from, to) in ranges {
                    self.walk(from / page * page, to, page, &mut f)?;
                }
                Ok(())
            }
            None => self.walk(start, end, page, f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_pages_are_walked_in_order_and_touched_ones_are_present() {
        let page = crate::page_size() as u64;
        let buf = vec![1u8; 8 * page as usize];
        let start = (buf.as_ptr() as u64).div_ceil(page) * page;
        let end = start + 4 * page;
        let pm = Pagemap::open(Path::new("/proc/self/pagemap")).unwrap();
        let mut seen = Vec::new();
        pm.walk(start, end, page, |va, e| seen.push((va, e.present())))
            .unwrap();
        let addrs: Vec<u64> = seen.iter().map(|s| s.0).collect();
        assert_eq!(addrs, (0..4).map(|i| start + i * page).collect::<Vec<_>>());
        assert!(seen.iter().all(|s| s.1), "written pages are present");
        assert_eq!(PageEntry(PRESENT | 42).pfn(), Some(42));
        assert_eq!(PageEntry(42).pfn(), None);
        assert_eq!(PageEntry(PRESENT).pfn(), None);
        assert!(PageEntry(SOFT_DIRTY).soft_dirty());
    }

    /// A sparse mapping of 1 GiB with two pages written: the present-page walk sees exactly
    /// those two. (Before `walk_present`, a process with an AddressSanitizer shadow, terabytes
    /// reserved, kept `ras` reading every entry for as long as it ran.)
    #[test]
    fn walk_present_visits_only_the_pages_in_memory_of_a_sparse_mapping() {
        let page = crate::page_size() as u64;
        let len = 1u64 << 30;
        let mut map = crate::mapping::Mapping::anonymous(len as usize).expect("map 1 GiB");
        let base = map.addr() as u64;
        // One written byte must fault one page, not a transparent huge page (THP "always").
        map.advise(crate::mapping::Advice::NoHugePage).unwrap();
        map.as_mut_slice()[page as usize * 3] = 1;
        map.as_mut_slice()[(len - 1) as usize] = 2;
        let pm = Pagemap::open(Path::new("/proc/self/pagemap")).unwrap();
        // A kernel before 6.7 has no PAGEMAP_SCAN (None): walk_present then reads every entry,
        // and must see the same two pages.
        if let Some(ranges) = pm.present_ranges(base, base + len).unwrap() {
            assert_eq!(
                ranges,
                vec![
                    (base + 3 * page, base + 4 * page),
                    (base + len - page, base + len)
                ]
            );
        }
        let mut seen = Vec::new();
        pm.walk_present(base, base + len, page, |va, e| seen.push((va, e.present())))
            .unwrap();
        assert_eq!(
            seen,
            vec![(base + 3 * page, true), (base + len - page, true)]
        );
    }

    /// A mapping advised for huge pages: what `huge_ranges` reports is 2 MiB-aligned and adds
    /// up to the kernel's own count for the mapping (`AnonHugePages` in smaps); a mapping
    /// advised against them has none.
    #[test]
    fn huge_ranges_match_the_kernels_count_of_huge_pages() {
        let huge = 2u64 << 20;
        let len = 16 * huge;
        let pm = Pagemap::open(Path::new("/proc/self/pagemap")).unwrap();
        let mut map = crate::mapping::Mapping::anonymous(len as usize).expect("map 32 MiB");
        let base = map.addr() as u64;
        map.advise(crate::mapping::Advice::NoHugePage).unwrap();
        map.as_mut_slice().fill(1);
        let Some(none) = pm.huge_ranges(base, base + len).unwrap() else {
            return; // a kernel before 6.7: nothing to check
        };
        assert_eq!(none, vec![], "huge pages in a mapping advised against them");
        drop(map);

        let mut map = crate::mapping::Mapping::anonymous(len as usize).expect("map 32 MiB");
        let base = map.addr() as u64;
        // Where THP is off ("never") the advice fails or gives none: the count is then 0 both ways.
        let _ = map.advise(crate::mapping::Advice::HugePage);
        map.as_mut_slice().fill(1);
        for (a, b) in pm.huge_ranges(base, base + len).unwrap().expect("scan") {
            assert!(
                a % huge == 0 && b % huge == 0,
                "{a:#x}-{b:#x} is not 2 MiB-aligned"
            );
            assert!(
                a >= base && b <= base + len,
                "{a:#x}-{b:#x} outside the mapping"
            );
        }
        // The kernel counts per VMA (ours may have merged with a neighbour): the whole VMA's
        // huge ranges against its AnonHugePages, read before and after the scan so that a
        // change by another thread or khugepaged in between is seen and the check repeated.
        let vma_huge_kb = || -> (u64, u64, u64) {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let mut vma = None;
            for line in smaps.lines() {
                let head = line.split_once(' ').and_then(|(r, _)| r.split_once('-'));
                if let Some((from, to)) = head {
                    if let (Ok(from), Ok(to)) =
                        (u64::from_str_radix(from, 16), u64::from_str_radix(to, 16))
                    {
                        vma = (from <= base && base < to).then_some((from, to));
                        continue;
                    }
                }
                if let (Some((from, to)), Some(v)) = (vma, line.strip_prefix("AnonHugePages:")) {
                    let kb = v.trim().trim_end_matches("kB").trim().parse().unwrap();
                    return (from, to, kb);
                }
            }
            panic!("no VMA holds the mapping in /proc/self/smaps");
        };
        let mut compared = false;
        for _ in 0..5 {
            let (from, to, before) = vma_huge_kb();
            let ranges = pm.huge_ranges(from, to).unwrap().expect("scan");
            let ours: u64 = ranges.iter().map(|(a, b)| b - a).sum::<u64>() / 1024;
            let (_, _, after) = vma_huge_kb();
            if before == after {
                assert_eq!(ours, before, "huge KiB: ours vs smaps");
                compared = true;
                break;
            }
        }
        assert!(compared, "the VMA's huge pages kept changing");
    }
}
