//! `/proc/PID/pagemap`: one 64-bit entry per virtual page (present, soft-dirty, frame number).
//! Plain file reads, no `unsafe`; here so that every part that maps virtual pages to physical
//! frames (the store, tierd, RAS) reads it the same way, in batches.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Bit 63: the page is in memory.
pub const PRESENT: u64 = 1 << 63;
/// Bit 55: the page was written since the soft-dirty bits were last cleared.
pub const SOFT_DIRTY: u64 = 1 << 55;
/// Bits 0–54: the page frame number (0 without CAP_SYS_ADMIN).
pub const PFN_MASK: u64 = (1 << 55) - 1;
/// Entries read per `pread`: one read per 2 MiB of 4 KiB pages.
const BATCH: usize = 512;

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
    pub fn walk(
        &self,
        start: u64,
        end: u64,
        page: u64,
        mut f: impl FnMut(u64, PageEntry),
    ) -> io::Result<()> {
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
}
