//! Idle-page tracking (`/sys/kernel/mm/page_idle/bitmap`), the access source for kernels without
//! DAMON's sysfs interface.
//!
//! The bitmap holds one bit per page frame: bit `pfn % 64` of the 64-bit word at byte offset
//! `pfn / 64 * 8`. Writing a word with a bit set marks that frame idle (0 bits change nothing);
//! the kernel clears the bit when the page is accessed (through the page tables' accessed bits,
//! which it checks when the bitmap is read). The file is read and written only in whole, aligned
//! 8-byte words and is root-only.
//!
//! Each scan, for one target: read the frame of every resident page of its private anonymous
//! memory from `/proc/PID/pagemap` (frame numbers are shown only with CAP_SYS_ADMIN), read the
//! bitmap words of those frames, and count a page as accessed in the last interval when its bit is
//! clear although this tracker marked that same frame idle at the previous scan; then mark every
//! frame idle again. A page's last [`IdlePages::history`] observations give its access frequency
//! (how many of them saw it accessed: comparable to DAMON's `nr_accesses` out of its samples per
//! aggregation) and its age (how many observations in a row had the same outcome). A page seen on
//! a different frame than the one marked (it was moved, or its memory was replaced) gives no
//! observation that interval; its history, kept by virtual address, carries on.
//!
//! Huge pages: pagemap gives each 4 KiB page its own frame, but the kernel keeps the idle flag
//! once per folio, on its head frame, and ignores the tail frames (which always read as not
//! idle). So each frame is looked up in `/proc/kpageflags` and a tail frame is replaced by its
//! folio's head: every page of a transparent huge page shares the head's bit, and so its history.
//! The kernel tracks only folios on an LRU list; other frames (the shared zero page, a page still
//! in a per-CPU batch) always read as not idle and give no observation.
//!
//! Everything takes a root (`/` and `/proc` on a live system; a directory tree in tests, where a
//! plain file stands in for the bitmap and a test clears the bits of the pages it "accesses").

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use cxltier_sys::pagemap::Pagemap;

use crate::procfs::Range;
use crate::TierdError;

/// `/proc/kpageflags` bit: the page is on an LRU list, the only pages the kernel tracks idle.
const KPF_LRU: u64 = 1 << 5;
/// `/proc/kpageflags` bit: the first page of a compound page (a huge page or a large folio).
const KPF_COMPOUND_HEAD: u64 = 1 << 15;
/// `/proc/kpageflags` bit: a later page of a compound page.
const KPF_COMPOUND_TAIL: u64 = 1 << 16;
/// The largest folio whose head is looked for (1 GiB of 4 KiB frames).
const MAX_FOLIO_FRAMES: u64 = 1 << 18;
/// Words per read or write of the bitmap or kpageflags.
const RUN: u64 = 512;
/// The most observations kept per page.
pub const MAX_HISTORY: u32 = 64;

/// The bitmap under a root.
pub fn bitmap_path(sys_root: &Path) -> PathBuf {
    sys_root.join("sys/kernel/mm/page_idle/bitmap")
}

/// One page's access in the last observations: how many saw it accessed, and how many in a row
/// (the latest included) had the same outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageAccess {
    pub accesses: u32,
    pub age: u32,
}

#[derive(Debug, Clone, Copy, Default)]
struct History {
    /// The frame marked idle at the last scan (a head frame for huge pages).
    frame: u64,
    /// One bit per observation, the latest in bit 0: 1 = accessed.
    bits: u64,
    /// Observations so far (at most `MAX_HISTORY`).
    seen: u32,
    /// Observations in a row with the latest outcome.
    run: u32,
}

/// What one scan saw.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// For each page of the ranges, in address order: its access (0, 0 when not resident or not
    /// yet observed).
    pub pages: Vec<PageAccess>,
    /// Resident pages whose frame was marked at the previous scan: observed this time.
    pub observed: usize,
    /// Resident pages.
    pub resident: usize,
}

/// Idle-page tracking of some processes.
pub struct IdlePages {
    bitmap: File,
    bitmap_path: PathBuf,
    kpageflags: File,
    kpageflags_path: PathBuf,
    proc_root: PathBuf,
    history: u32,
    pages: HashMap<u32, HashMap<usize, History>>,
}

impl IdlePages {
    /// Open the bitmap for reading and writing and `kpageflags` for reading. `history` is how many
    /// observations make a page's access frequency (1 to 64).
    pub fn open(sys_root: &Path, proc_root: &Path, history: u32) -> Result<IdlePages, TierdError> {
        let bitmap_path = bitmap_path(sys_root);
        let bitmap = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&bitmap_path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => TierdError::NoIdlePageTracking {
                    idle: bitmap_path.clone(),
                },
                _ => TierdError::io("cannot open for reading and writing", &bitmap_path, e),
            })?;
        let kpageflags_path = proc_root.join("kpageflags");
        let kpageflags = File::open(&kpageflags_path)
            .map_err(|e| TierdError::io("cannot open", &kpageflags_path, e))?;
        Ok(IdlePages {
            bitmap,
            bitmap_path,
            kpageflags,
            kpageflags_path,
            proc_root: proc_root.to_path_buf(),
            history: history.clamp(1, MAX_HISTORY),
            pages: HashMap::new(),
        })
    }

    /// How many observations make a page's access frequency: the highest `accesses` reported.
    pub fn history(&self) -> u32 {
        self.history
    }

    /// Forget every process but `pids` (they left; a process that comes back starts over).
    pub fn retain(&mut self, pids: &[u32]) {
        self.pages.retain(|pid, _| pids.contains(pid));
    }

    /// Observe `pid`'s pages of `ranges` (`page` bytes each) since the last scan, and mark them
    /// idle for the next.
    pub fn scan(&mut self, pid: u32, ranges: &[Range], page: usize) -> Result<Scan, TierdError> {
        let pagemap_path = self.proc_root.join(pid.to_string()).join("pagemap");
        let pagemap = Pagemap::open(&pagemap_path)
            .map_err(|e| TierdError::process_io(pid, "cannot open", &pagemap_path, e))?;
        // (index among the ranges' pages, address, frame) of every resident page.
        let mut resident: Vec<(usize, usize, u64)> = Vec::new();
        let mut index = 0;
        let mut hidden = false;
        for r in ranges {
            pagemap
                .walk(r.start as u64, r.end as u64, page as u64, |va, e| {
                    if e.present() {
                        match e.pfn() {
                            Some(pfn) => resident.push((index, va as usize, pfn)),
                            None => hidden = true,
                        }
                    }
                    index += 1;
                })
                .map_err(|e| TierdError::io("cannot read", &pagemap_path, e))?;
        }
        if hidden {
            return Err(TierdError::FramesHidden {
                pagemap: pagemap_path,
            });
        }
        let total = index;

        // Tail frames of huge pages and large folios stand for their head.
        let frames: BTreeSet<u64> = resident.iter().map(|r| r.2).collect();
        let flags = read_words(
            &self.kpageflags,
            &self.kpageflags_path,
            frames.iter().copied(),
        )?;
        let mut head_of: HashMap<u64, u64> = HashMap::new();
        // Tail frames whose head was not found (a folio split while it was read): not observed
        // this time.
        let mut headless: BTreeSet<u64> = BTreeSet::new();
        for &f in &frames {
            if flags.get(&f).copied().unwrap_or(0) & KPF_COMPOUND_TAIL != 0 {
                match self.head(f)? {
                    Some(h) => {
                        head_of.insert(f, h);
                    }
                    None => {
                        headless.insert(f);
                    }
                }
            }
        }
        for r in &mut resident {
            if let Some(&h) = head_of.get(&r.2) {
                r.2 = h;
            }
        }
        // The kernel tracks only folios on an LRU list (not the shared zero page a never-written
        // page maps, nor a page still in a per-CPU batch on its way to the LRU): their bits read
        // as "not idle" whatever happens, so they give no observation.
        let mut flags = flags;
        let heads: BTreeSet<u64> = head_of
            .values()
            .copied()
            .filter(|h| !flags.contains_key(h))
            .collect();
        flags.extend(read_words(
            &self.kpageflags,
            &self.kpageflags_path,
            heads.into_iter(),
        )?);
        let tracked = |frame: u64| {
            !headless.contains(&frame) && flags.get(&frame).copied().unwrap_or(0) & KPF_LRU != 0
        };

        let words: BTreeSet<u64> = resident.iter().map(|r| r.2 / 64).collect();
        let mut bitmap = read_words(&self.bitmap, &self.bitmap_path, words.iter().copied())?;

        let history = self.history;
        let known = self.pages.entry(pid).or_default();
        let mut out = Scan {
            pages: vec![PageAccess::default(); total],
            observed: 0,
            resident: resident.len(),
        };
        let mut now: HashMap<usize, History> = HashMap::with_capacity(resident.len());
        for &(i, addr, frame) in &resident {
            let idle = bitmap.get(&(frame / 64)).copied().unwrap_or(0) >> (frame % 64) & 1 == 1;
            let previous = known.get(&addr).copied();
            let mut h = previous.unwrap_or_default();
            // Observed only when this very frame was marked idle at the last scan.
            if tracked(frame) && previous.is_some_and(|p| p.frame == frame) {
                let accessed = !idle;
                let same = h.seen > 0 && (h.bits & 1 == 1) == accessed;
                h.bits = (h.bits << 1) | u64::from(accessed);
                h.seen = (h.seen + 1).min(MAX_HISTORY);
                h.run = if same { h.run.saturating_add(1) } else { 1 };
                out.observed += 1;
            }
            h.frame = if tracked(frame) { frame } else { 0 };
            now.insert(addr, h);
            let window = if history >= 64 {
                u64::MAX
            } else {
                (1u64 << history) - 1
            };
            out.pages[i] = PageAccess {
                accesses: (h.bits & window).count_ones(),
                age: h.run,
            };
        }
        // Mark every frame idle for the next scan: set its bit, and leave the other bits of the
        // word as they were read (a 1 written where the kernel showed 1 changes nothing, and 0
        // bits are ignored by the kernel).
        for &(_, _, frame) in resident.iter().filter(|r| tracked(r.2)) {
            *bitmap.entry(frame / 64).or_insert(0) |= 1 << (frame % 64);
        }
        write_words(&self.bitmap, &self.bitmap_path, &bitmap)?;
        *known = now;
        Ok(out)
    }

    /// The head frame of the folio that tail frame `pfn` belongs to; `None` when none is found
    /// (the folio was split meanwhile).
    fn head(&self, pfn: u64) -> Result<Option<u64>, TierdError> {
        let mut end = pfn;
        while pfn - end < MAX_FOLIO_FRAMES && end > 0 {
            let start = end.saturating_sub(RUN);
            let mut buf = vec![0u8; ((end - start) * 8) as usize];
            self.kpageflags
                .read_exact_at(&mut buf, start * 8)
                .map_err(|e| TierdError::io("cannot read", &self.kpageflags_path, e))?;
            for (k, w) in buf.chunks_exact(8).enumerate().rev() {
                let flags = u64::from_ne_bytes(w.try_into().expect("8 bytes"));
                if flags & KPF_COMPOUND_HEAD != 0 {
                    return Ok(Some(start + k as u64));
                }
                if flags & KPF_COMPOUND_TAIL == 0 {
                    return Ok(None);
                }
            }
            end = start;
        }
        Ok(None)
    }
}

/// Read the 64-bit words at `indexes` (ascending) of `file`, runs of consecutive words at once.
fn read_words(
    file: &File,
    path: &Path,
    indexes: impl Iterator<Item = u64>,
) -> Result<BTreeMap<u64, u64>, TierdError> {
    let mut out = BTreeMap::new();
    for (start, len) in runs(indexes) {
        let mut buf = vec![0u8; (len * 8) as usize];
        file.read_exact_at(&mut buf, start * 8)
            .map_err(|e| TierdError::io("cannot read", path, e))?;
        for (k, w) in buf.chunks_exact(8).enumerate() {
            out.insert(
                start + k as u64,
                u64::from_ne_bytes(w.try_into().expect("8 bytes")),
            );
        }
    }
    Ok(out)
}

/// Write `words` (index → value) into `file`, runs of consecutive words at once.
fn write_words(file: &File, path: &Path, words: &BTreeMap<u64, u64>) -> Result<(), TierdError> {
    for (start, len) in runs(words.keys().copied()) {
        let buf: Vec<u8> = (start..start + len)
            .flat_map(|i| words[&i].to_ne_bytes())
            .collect();
        file.write_all_at(&buf, start * 8)
            .map_err(|e| TierdError::io("cannot write", path, e))?;
    }
    Ok(())
}

/// Ascending indexes as (first, count) runs of consecutive ones, at most `RUN` long.
fn runs(indexes: impl Iterator<Item = u64>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for i in indexes {
        match out.last_mut() {
            Some((s, n)) if *s + *n == i && *n < RUN => *n += 1,
            _ => out.push((i, 1)),
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testutil::TempDir;
    use crate::Classify;
    use cxltier_sys::pagemap::PRESENT;

    /// A simulated kernel under a temp root: a bitmap file covering `frames` frames, a zeroed
    /// kpageflags, and process `pid`'s pagemap mapping its pages at `base` onwards to `frames_of`.
    pub(crate) struct SimKernel {
        pub dir: TempDir,
        pub pid: u32,
    }

    impl SimKernel {
        pub(crate) fn new(tag: &str, frames: u64) -> SimKernel {
            let dir = TempDir::new(tag);
            dir.write("sys/kernel/mm/page_idle/bitmap", "");
            let f = File::options()
                .write(true)
                .open(dir.path().join("sys/kernel/mm/page_idle/bitmap"))
                .unwrap();
            f.set_len(frames.div_ceil(64) * 8).unwrap();
            // Every frame a page on an LRU list.
            std::fs::create_dir_all(dir.path().join("proc")).unwrap();
            let lru: Vec<u8> = (0..frames).flat_map(|_| KPF_LRU.to_ne_bytes()).collect();
            std::fs::write(dir.path().join("proc/kpageflags"), lru).unwrap();
            SimKernel { dir, pid: 4242 }
        }

        /// Set process `pid`'s pagemap: page i of the address space (4 KiB pages) has `entry(i)`.
        pub(crate) fn pagemap(&self, pages: usize, entry: impl Fn(usize) -> u64) {
            let bytes: Vec<u8> = (0..pages).flat_map(|i| entry(i).to_ne_bytes()).collect();
            std::fs::create_dir_all(self.dir.path().join(format!("proc/{}", self.pid))).unwrap();
            std::fs::write(
                self.dir.path().join(format!("proc/{}/pagemap", self.pid)),
                bytes,
            )
            .unwrap();
        }

        pub(crate) fn set_flags(&self, pfn: u64, flags: u64) {
            let f = File::options()
                .write(true)
                .open(self.dir.path().join("proc/kpageflags"))
                .unwrap();
            f.write_all_at(&flags.to_ne_bytes(), pfn * 8).unwrap();
        }

        /// What the kernel does when frame `pfn` is accessed: clear its idle bit.
        pub(crate) fn access(&self, pfn: u64) {
            let f = File::options()
                .read(true)
                .write(true)
                .open(bitmap_path(self.dir.path()))
                .unwrap();
            let mut w = [0u8; 8];
            f.read_exact_at(&mut w, pfn / 64 * 8).unwrap();
            let v = u64::from_ne_bytes(w) & !(1 << (pfn % 64));
            f.write_all_at(&v.to_ne_bytes(), pfn / 64 * 8).unwrap();
        }

        pub(crate) fn idle_bit(&self, pfn: u64) -> bool {
            let f = File::open(bitmap_path(self.dir.path())).unwrap();
            let mut w = [0u8; 8];
            f.read_exact_at(&mut w, pfn / 64 * 8).unwrap();
            u64::from_ne_bytes(w) >> (pfn % 64) & 1 == 1
        }

        pub(crate) fn proc_root(&self) -> PathBuf {
            self.dir.path().join("proc")
        }
    }

    const PAGE: usize = 4096;

    /// A kpageflags file (sparse) in which `frames` are pages on an LRU list: the real frames of
    /// a test's own pages may still sit in a per-CPU batch, off the LRU, in the real one.
    pub(crate) fn lru_kpageflags<'a>(path: &Path, frames: impl Iterator<Item = &'a u64>) {
        let f = File::create(path).unwrap();
        for pfn in frames {
            f.write_all_at(&KPF_LRU.to_ne_bytes(), pfn * 8).unwrap();
        }
    }

    #[test]
    fn frames_off_the_lru_give_no_observation_and_are_not_marked() {
        // Page 1 maps a frame the kernel does not track (the zero page, say): its bit reads
        // "not idle" whatever happens, which must not count as an access.
        let k = SimKernel::new("idle-lru", 256);
        k.set_flags(11, 0);
        k.pagemap(2, |i| PRESENT | (10 + i as u64));
        let ranges = [Range {
            start: 0,
            end: 2 * PAGE,
        }];
        let mut t = IdlePages::open(k.dir.path(), &k.proc_root(), 4).unwrap();
        for _ in 0..3 {
            let s = t.scan(k.pid, &ranges, PAGE).unwrap();
            assert_eq!(s.pages[1], PageAccess::default());
            assert!(!k.idle_bit(11));
        }
        let s = t.scan(k.pid, &ranges, PAGE).unwrap();
        assert_eq!((s.resident, s.observed), (2, 1));
        assert_eq!(
            s.pages[0],
            PageAccess {
                accesses: 0,
                age: 3
            }
        );
    }

    #[test]
    fn accessed_pages_are_told_from_idle_ones_and_histories_add_up() {
        // 16 pages at virtual page 16.., on frames 1000.. (crossing a bitmap word at 1024).
        let k = SimKernel::new("idle-basic", 4096);
        k.pagemap(32, |i| {
            if i >= 16 {
                PRESENT | (1000 + i as u64 - 16)
            } else {
                0
            }
        });
        let ranges = [Range {
            start: 16 * PAGE,
            end: 32 * PAGE,
        }];
        let mut t = IdlePages::open(k.dir.path(), &k.proc_root(), 4).unwrap();
        // First scan: nothing observed yet; every frame is now marked idle.
        let s = t.scan(k.pid, &ranges, PAGE).unwrap();
        assert_eq!((s.resident, s.observed), (16, 0));
        assert!(s.pages.iter().all(|p| *p == PageAccess::default()));
        assert!((1000..1016).all(|f| k.idle_bit(f)));
        // Pages 0..4 are accessed in every interval; page 4 only in the first.
        for round in 0..5 {
            for f in 1000..1004 {
                k.access(f);
            }
            if round == 0 {
                k.access(1004);
            }
            let s = t.scan(k.pid, &ranges, PAGE).unwrap();
            assert_eq!(s.observed, 16);
            assert!((1000..1016).all(|f| k.idle_bit(f)), "marked again");
            let n = round as u32 + 1;
            assert_eq!(
                s.pages[0],
                PageAccess {
                    accesses: n.min(4),
                    age: n
                }
            );
            assert_eq!(
                s.pages[15],
                PageAccess {
                    accesses: 0,
                    age: n
                }
            );
            if round > 0 {
                // Accessed once, then idle for `round` intervals.
                assert_eq!(
                    s.pages[4],
                    PageAccess {
                        accesses: u32::from(round < 4),
                        age: round as u32
                    }
                );
            }
        }
    }

    #[test]
    fn a_page_on_a_new_frame_gives_no_observation_and_keeps_its_history() {
        let k = SimKernel::new("idle-moved", 256);
        k.pagemap(2, |i| PRESENT | (10 + i as u64));
        let ranges = [Range {
            start: 0,
            end: 2 * PAGE,
        }];
        let mut t = IdlePages::open(k.dir.path(), &k.proc_root(), 8).unwrap();
        t.scan(k.pid, &ranges, PAGE).unwrap();
        k.access(10);
        let s = t.scan(k.pid, &ranges, PAGE).unwrap();
        assert_eq!(s.pages[0].accesses, 1);
        // Page 0 moved to frame 200 (never marked: reads as not idle, which is no access).
        k.pagemap(2, |i| PRESENT | if i == 0 { 200 } else { 11 });
        // Page 0 keeps its history (one access, one scan old) while the frame is unobserved.
        let kept = PageAccess {
            accesses: 1,
            age: 1,
        };
        let s = t.scan(k.pid, &ranges, PAGE).unwrap();
        assert_eq!((s.observed, s.pages[0]), (1, kept));
        assert!(k.idle_bit(200));
        let s = t.scan(k.pid, &ranges, PAGE).unwrap();
        assert_eq!((s.observed, s.pages[0]), (2, kept));
    }

    #[test]
    fn pages_of_a_huge_page_share_its_head_frames_bit() {
        // A 2 MiB page: frames 512..1024, head 512; mapped at virtual page 512.
        let k = SimKernel::new("idle-thp", 2048);
        k.set_flags(512, KPF_COMPOUND_HEAD | KPF_LRU);
        for f in 513..1024 {
            k.set_flags(f, KPF_COMPOUND_TAIL);
        }
        k.pagemap(1024, |i| if i >= 512 { PRESENT | i as u64 } else { 0 });
        let ranges = [Range {
            start: 512 * PAGE,
            end: 1024 * PAGE,
        }];
        let mut t = IdlePages::open(k.dir.path(), &k.proc_root(), 4).unwrap();
        t.scan(k.pid, &ranges, PAGE).unwrap();
        assert!(k.idle_bit(512));
        // Only the head's bit is marked: the kernel ignores tail frames.
        assert!(!k.idle_bit(700));
        k.access(512);
        let s = t.scan(k.pid, &ranges, PAGE).unwrap();
        assert_eq!(s.observed, 512);
        assert!(s.pages.iter().all(|p| p.accesses == 1));
        let s = t.scan(k.pid, &ranges, PAGE).unwrap();
        assert!(s.pages.iter().all(|p| p.accesses == 1 && p.age == 1));
        // The huge page is split under us, leaving tails without a head: those are not observed.
        k.set_flags(512, KPF_LRU);
        k.set_flags(513, KPF_LRU);
        // The old head is observed; the frame that is a page of its own now was marked as part
        // of the huge page (through its head), so only from the next scan on.
        let s = t.scan(k.pid, &ranges, PAGE).unwrap();
        assert_eq!(s.observed, 1);
        assert!(!k.idle_bit(600), "headless tails are not marked");
        let s = t.scan(k.pid, &ranges, PAGE).unwrap();
        assert_eq!(s.observed, 2);
    }

    #[test]
    fn missing_bitmap_hidden_frames_and_an_unopenable_bitmap_are_refused() {
        let dir = TempDir::new("idle-none");
        let e = IdlePages::open(dir.path(), &dir.path().join("proc"), 4)
            .err()
            .unwrap();
        assert!(e.to_string().contains("CONFIG_IDLE_PAGE_TRACKING"), "{e}");
        assert_eq!(e.class(), crate::Class::Unsupported);

        // Frame numbers read as 0: pagemap was read without CAP_SYS_ADMIN.
        let k = SimKernel::new("idle-hidden", 64);
        k.pagemap(4, |_| PRESENT);
        let mut t = IdlePages::open(k.dir.path(), &k.proc_root(), 4).unwrap();
        let r = [Range {
            start: 0,
            end: 4 * PAGE,
        }];
        let e = t.scan(k.pid, &r, PAGE).unwrap_err();
        assert!(e.to_string().contains("CAP_SYS_ADMIN"), "{e}");
        assert_eq!(e.class(), crate::Class::Permission);
        // A process that is gone.
        let e = t.scan(99, &r, PAGE).unwrap_err();
        assert!(matches!(e, TierdError::NoSuchProcess { pid: 99 }), "{e}");

        // A bitmap that cannot be opened for writing.
        let k = SimKernel::new("idle-dir", 64);
        let p = bitmap_path(k.dir.path());
        std::fs::remove_file(&p).unwrap();
        std::fs::create_dir(&p).unwrap();
        let e = IdlePages::open(k.dir.path(), &k.proc_root(), 4)
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .contains("cannot open for reading and writing"),
            "{e}"
        );
        // Denied access is a missing privilege, and says what to do.
        let denied = TierdError::io(
            "cannot open for reading and writing",
            &p,
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        assert_eq!(denied.class(), crate::Class::Permission);
        assert!(denied.to_string().contains("root"), "{denied}");
    }

    #[test]
    fn own_pages_through_the_real_pagemap() {
        // This process's own pagemap: frame numbers are visible only with CAP_SYS_ADMIN.
        let page = cxltier_sys::page_size();
        let mut m = cxltier_sys::Mapping::anonymous(8 * page).unwrap();
        m.write_each(page, 1);
        let ranges = [Range {
            start: m.addr(),
            end: m.addr() + 8 * page,
        }];
        let frames = crate::testutil::frames_of(&m, 8);
        let dir = TempDir::new("idle-self");
        let proc_root = dir.path().join("proc");
        std::fs::create_dir_all(&proc_root).unwrap();
        let pid = std::process::id();
        std::os::unix::fs::symlink(format!("/proc/{pid}"), proc_root.join(pid.to_string()))
            .unwrap();
        lru_kpageflags(&proc_root.join("kpageflags"), frames.iter().flatten());
        let most = frames.iter().flatten().max().copied().unwrap_or(0);
        dir.write("sys/kernel/mm/page_idle/bitmap", "");
        File::options()
            .write(true)
            .open(bitmap_path(dir.path()))
            .unwrap()
            .set_len((most / 64 + 1) * 8)
            .unwrap();
        if frames.iter().any(Option::is_none) {
            // Not root here: the frames are hidden, and tierd says what it needs.
            let mut t = match IdlePages::open(dir.path(), &proc_root, 4) {
                Ok(t) => t,
                Err(e) => {
                    assert_eq!(e.class(), crate::Class::Permission, "{e}");
                    return;
                }
            };
            let e = t.scan(pid, &ranges, page).unwrap_err();
            assert_eq!(e.class(), crate::Class::Permission, "{e}");
            return;
        }
        let frames: Vec<u64> = frames.into_iter().flatten().collect();
        let mut t = IdlePages::open(dir.path(), &proc_root, 4).unwrap();
        let s = t.scan(pid, &ranges, page).unwrap();
        assert_eq!((s.resident, s.observed), (8, 0));
        // Stand in for the kernel: frames of pages 0 and 1 were accessed.
        let f = File::options()
            .read(true)
            .write(true)
            .open(bitmap_path(dir.path()))
            .unwrap();
        for pfn in &frames[..2] {
            let mut w = [0u8; 8];
            f.read_exact_at(&mut w, pfn / 64 * 8).unwrap();
            let v = u64::from_ne_bytes(w) & !(1 << (pfn % 64));
            f.write_all_at(&v.to_ne_bytes(), pfn / 64 * 8).unwrap();
        }
        std::hint::black_box(m.as_slice());
        let s = t.scan(pid, &ranges, page).unwrap();
        assert_eq!(s.observed, 8);
        let acc: Vec<u32> = s.pages.iter().map(|p| p.accesses).collect();
        assert_eq!(acc, [1, 1, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn word_runs_are_consecutive_and_bounded() {
        assert_eq!(
            runs([1, 2, 3, 7, 8, 20].into_iter()),
            vec![(1, 3), (7, 2), (20, 1)]
        );
        let long = runs(0..1100);
        assert_eq!(long, vec![(0, 512), (512, 512), (1024, 76)]);
    }
}
