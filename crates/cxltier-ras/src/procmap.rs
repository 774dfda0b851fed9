//! Which processes map a physical range: each process's `/proc/PID/maps`, and for every mapped
//! page its frame number from `/proc/PID/pagemap`. The kernel shows frame numbers only to
//! CAP_SYS_ADMIN (to others they read as zero), so without it the answer is "not permitted",
//! never "nobody".

use crate::event::PhysRange;
use cxltier_sys::pagemap::Pagemap;
use std::fs::{self, File};
use std::io::Read;
use std::path::Path;

/// A process that maps part of a range (defined with the quarantine file, whose lines carry it).
pub use cxltier_quarantine::Mapper;

/// Why the mappers could not be found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// Frame numbers read as zero: the caller lacks CAP_SYS_ADMIN.
    NoFrameNumbers,
}

const PAGE: u64 = 4096;

/// Every process below `proc_root` (`/proc`) mapping a page of `range`. Processes that vanish or
/// cannot be read are skipped.
pub fn mappers(proc_root: &Path, range: PhysRange) -> Result<Vec<Mapper>, Denied> {
    let mut out = Vec::new();
    let mut present = 0u64;
    let mut saw_pfn = false;
    let Ok(entries) = fs::read_dir(proc_root) else {
        return Ok(out);
    };
    let first_pfn = range.start / PAGE;
    let last_pfn = range.end.saturating_sub(1) / PAGE;
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let dir = e.path();
        let Ok(maps) = fs::read_to_string(dir.join("maps")) else {
            continue;
        };
        let Ok(pagemap) = Pagemap::open(&dir.join("pagemap")) else {
            continue;
        };
        let mut hit: Option<Mapper> = None;
        for line in maps.lines() {
            let Some((start, end)) = line.split_whitespace().next().and_then(|r| {
                let (a, b) = r.split_once('-')?;
                Some((
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(b, 16).ok()?,
                ))
            }) else {
                continue;
            };
            // [vsyscall] and other areas above the user range cannot be read from pagemap.
            if start >= 0xffff_8000_0000_0000 {
                continue;
            }
            // Present pages only: a sparse reservation of terabytes (an AddressSanitizer
            // shadow) costs what is in memory, not 8 bytes per reserved page.
            let walked = pagemap.walk_present(start, end, PAGE, |va, e| {
                if !e.present() {
                    return;
                }
                present += 1;
                let Some(pfn) = e.pfn() else {
                    return;
                };
                saw_pfn = true;
                if pfn >= first_pfn && pfn <= last_pfn {
                    let m = hit.get_or_insert_with(|| Mapper {
                        pid,
                        comm: comm(&dir),
                        vaddr: va,
                        pages: 0,
                    });
                    m.pages += 1;
                }
            });
            // A mapping that changed under us is skipped, as before; the pages seen count.
            let _ = walked;
            if !saw_pfn && present >= 64 {
                // Frame numbers are hidden from this caller: no point reading on.
                return Err(Denied::NoFrameNumbers);
            }
        }
        out.extend(hit);
    }
    if present > 0 && !saw_pfn {
        return Err(Denied::NoFrameNumbers);
    }
    Ok(out)
}

fn comm(dir: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = File::open(dir.join("comm")) {
        let _ = f.read_to_string(&mut s);
    }
    s.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cxltier_sys::pagemap::{PFN_MASK, PRESENT};
    use std::os::unix::fs::FileExt;

    /// This process's page holding `buf`: its physical range, read from our own pagemap.
    fn own_page(buf: &[u8]) -> Option<PhysRange> {
        let f = File::open("/proc/self/pagemap").ok()?;
        let va = buf.as_ptr() as u64;
        let mut e = [0u8; 8];
        f.read_exact_at(&mut e, va / PAGE * 8).ok()?;
        let v = u64::from_le_bytes(e);
        let pfn = v & PFN_MASK;
        (v & PRESENT != 0 && pfn != 0).then(|| PhysRange {
            start: pfn * PAGE + va % PAGE,
            end: pfn * PAGE + va % PAGE + 1,
        })
    }

    #[test]
    fn finds_this_process_on_its_own_page_or_says_it_may_not() {
        let buf = vec![7u8; 3 * PAGE as usize];
        let probe = &buf[PAGE as usize..];
        std::hint::black_box(&buf);
        let me = std::process::id();
        match own_page(probe) {
            Some(range) => {
                let found = mappers(Path::new("/proc"), range).expect("frame numbers are visible");
                let m = found
                    .iter()
                    .find(|m| m.pid == me)
                    .expect("this process maps it");
                assert_eq!(m.vaddr, probe.as_ptr() as u64 / PAGE * PAGE);
                assert_eq!(m.pages, 1);
            }
            None => {
                // No frame numbers (no CAP_SYS_ADMIN): the answer must be "not permitted".
                assert_eq!(
                    mappers(
                        Path::new("/proc"),
                        PhysRange {
                            start: 0,
                            end: u64::MAX
                        }
                    ),
                    Err(Denied::NoFrameNumbers)
                );
            }
        }
    }
}
