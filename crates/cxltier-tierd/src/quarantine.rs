//! Quarantined memory: each interval tierd reads the quarantine file of `cxltier ras --watch
//! --quarantine` (poisoned host physical ranges), finds the targets' pages whose frame lies in one
//! (`/proc/PID/pagemap`, frame numbers need CAP_SYS_ADMIN) and moves them off it with
//! `move_pages(2)`, and reports how many ranges and bytes each node has quarantined.
//!
//! What it does not do: keep the kernel's page allocator off those frames. That is what the
//! soft-offline `--quarantine` performs does (the kernel migrates the page and never hands the
//! frame out again); a page tierd moves off a frame that was *not* offlined leaves the frame free,
//! and the allocator may give it to anyone later. `move_pages` migrates only to another node, so
//! a page is moved to another node of its own tier when there is one, else to the nearest node of
//! the other tier (for CXL memory with one CXL node: to DRAM, outside the plan's DRAM budget); the
//! plan may demote it again later, onto a fresh frame.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cxltier_quarantine::QuarantineFile;
use cxltier_sys::pagemap::Pagemap;
use cxltier_sys::{errno_name, move_pages, query_pages, PageStatus};
use serde::Serialize;

use crate::engine::Tiers;
use crate::procfs;
use crate::TierdError;

/// A node's quarantined memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QuarantinedNode {
    pub ranges: u64,
    pub bytes: u64,
}

/// One JSON line per interval while anything is quarantined (`"event": "quarantine"`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct QuarantineReport {
    pub event: &'static str,
    pub file: PathBuf,
    pub ranges: u64,
    /// By the node the record names (`null` key when it names none is left out).
    pub nodes: BTreeMap<u32, QuarantinedNode>,
    /// Targets' pages found on a quarantined frame this interval.
    pub pages_on_quarantined_frames: u64,
    /// Of those, moved off (to a healthy frame on another node) this interval, and so far.
    pub moved_off_pages: u64,
    pub moved_off_pages_total: u64,
    /// Moves the kernel refused, by errno, so far (tried again next interval).
    pub failures: BTreeMap<String, u64>,
    /// Malformed lines of the file, reported once each and skipped.
    pub malformed: Vec<String>,
    /// Why pages could not be checked (no frame numbers, unreadable file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Follows the quarantine file for the engine loop.
#[derive(Debug)]
pub struct QuarantineMover {
    file: QuarantineFile,
    moved_total: u64,
    failures: BTreeMap<String, u64>,
}

impl QuarantineMover {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        QuarantineMover {
            file: QuarantineFile::new(path),
            moved_total: 0,
            failures: BTreeMap::new(),
        }
    }

    /// Reads the file and moves the targets' pages off quarantined frames (none when
    /// `dry_run`). Returns None while nothing is quarantined and nothing was malformed.
    pub fn step(
        &mut self,
        pids: &[u32],
        tiers: &Tiers,
        proc_root: &Path,
        dry_run: bool,
    ) -> Result<Option<QuarantineReport>, TierdError> {
        let mut report = QuarantineReport {
            event: "quarantine",
            file: self.file.path().to_path_buf(),
            ..QuarantineReport::default()
        };
        match self.file.poll() {
            Ok(u) => report.malformed = u.malformed,
            Err(e) => report.note = Some(e.to_string()),
        }
        let ranges: Vec<(u64, u64)> = self
            .file
            .ranges()
            .iter()
            .map(|r| (r.start, r.end))
            .collect();
        for r in self.file.ranges() {
            if let Some(n) = r.node {
                let q = report.nodes.entry(n).or_default();
                q.ranges += 1;
                q.bytes += r.end - r.start;
            }
        }
        report.ranges = ranges.len() as u64;
        if ranges.is_empty() {
            return Ok((!report.malformed.is_empty() || report.note.is_some()).then_some(report));
        }
        for &pid in pids {
            let (hits, frames_seen) = match pages_on(proc_root, pid, &ranges) {
                Ok(x) => x,
                // Gone since the engine looked: nothing to move.
                Err(TierdError::NoSuchProcess { .. }) => continue,
                Err(e) => return Err(e),
            };
            if !frames_seen {
                report.note = Some(format!(
                    "pid {pid}: /proc/{pid}/pagemap shows no frame numbers (needs CAP_SYS_ADMIN): its pages on quarantined memory cannot be found"
                ));
                continue;
            }
            report.pages_on_quarantined_frames += hits.len() as u64;
            if hits.is_empty() || dry_run {
                continue;
            }
            let status = query_pages(Some(pid), &hits)?;
            let mut addrs = Vec::new();
            let mut to = Vec::new();
            for (&a, s) in hits.iter().zip(&status) {
                if let Some(dest) = s.node().and_then(|n| other_node(tiers, n)) {
                    addrs.push(a);
                    to.push(dest);
                } else {
                    *self.failures.entry("no_other_node".into()).or_insert(0) += 1;
                }
            }
            if addrs.is_empty() {
                continue;
            }
            let moved = move_pages(Some(pid), &addrs, &to, false)?;
            for (s, &dest) in moved.status.iter().zip(&to) {
                match s {
                    PageStatus::Node(n) if *n == dest => {
                        report.moved_off_pages += 1;
                        self.moved_total += 1;
                    }
                    PageStatus::Node(n) => {
                        *self
                            .failures
                            .entry(format!("stayed_on_node{n}"))
                            .or_insert(0) += 1
                    }
                    PageStatus::Error(e) => *self.failures.entry(errno_name(*e)).or_insert(0) += 1,
                }
            }
        }
        report.moved_off_pages_total = self.moved_total;
        report.failures = self.failures.clone();
        Ok(Some(report))
    }
}

/// Where a page on `node` goes to leave its frame: another node of the same tier, else the first
/// node of the other tier.
fn other_node(tiers: &Tiers, node: u32) -> Option<u32> {
    let (same, other) = if tiers.fast.contains(&node) {
        (&tiers.fast, &tiers.slow)
    } else {
        (&tiers.slow, &tiers.fast)
    };
    same.iter().chain(other).copied().find(|&n| n != node)
}

/// The addresses of `pid`'s movable pages whose frame overlaps one of `ranges`, and whether any
/// frame number was visible at all.
pub fn pages_on(
    proc_root: &Path,
    pid: u32,
    ranges: &[(u64, u64)],
) -> Result<(Vec<usize>, bool), TierdError> {
    let page = cxltier_sys::page_size() as u64;
    let maps = procfs::movable_ranges(proc_root, pid)?;
    let path = proc_root.join(pid.to_string()).join("pagemap");
    let pagemap =
        Pagemap::open(&path).map_err(|e| TierdError::process_io(pid, "cannot read", &path, e))?;
    let mut hits = Vec::new();
    let mut present = 0u64;
    let mut with_frame = 0u64;
    for m in maps {
        // A failed read means the mapping changed under us: the next interval sees the new one.
        // Present pages only: a sparse reservation costs what is in memory, not its size.
        let _ = pagemap.walk_present(m.start as u64, m.end as u64, page, |va, entry| {
            if !entry.present() {
                return;
            }
            present += 1;
            let Some(pfn) = entry.pfn() else { return };
            with_frame += 1;
            let (s, e) = (pfn * page, pfn * page + page);
            if ranges.iter().any(|&(rs, re)| rs < e && s < re) {
                hits.push(va as usize);
            }
        });
    }
    Ok((hits, present == 0 || with_frame > 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cxltier_quarantine::{append, QuarantinedRange};

    fn range(start: u64, end: u64, node: u32) -> QuarantinedRange {
        QuarantinedRange {
            start,
            end,
            memdev: Some("mem0".into()),
            serial: None,
            region: Some("region0".into()),
            node: Some(node),
            processes: Vec::new(),
        }
    }

    #[test]
    fn a_page_of_a_target_on_a_quarantined_frame_is_found_and_reported() {
        let dir = crate::testutil::TempDir::new("quarantine");
        let file = dir.path().join("poisoned.jsonl");
        let tiers = Tiers {
            fast: vec![0],
            slow: vec![1],
        };
        let mut q = QuarantineMover::new(&file);
        let me = std::process::id();
        let proc_root = Path::new("/proc");
        assert!(q.step(&[me], &tiers, proc_root, true).unwrap().is_none());

        // A page of this process, touched, and its frame.
        let buf = vec![0x5au8; 3 * 4096];
        let page = cxltier_sys::page_size();
        let va = (buf.as_ptr() as usize).next_multiple_of(page);
        let pm = Pagemap::open(Path::new("/proc/self/pagemap")).unwrap();
        let mut pfn = 0;
        pm.walk(va as u64, (va + page) as u64, page as u64, |_, e| {
            pfn = e.pfn().unwrap_or(0)
        })
        .unwrap();
        append(&file, &range(0x1000, 0x1040, 1)).unwrap();
        if pfn == 0 {
            let r = q.step(&[me], &tiers, proc_root, true).unwrap().unwrap();
            assert!(r.note.unwrap().contains("CAP_SYS_ADMIN"));
            return;
        }
        let hpa = pfn * page as u64;
        append(&file, &range(hpa + 64, hpa + 128, 1)).unwrap();
        let r = q.step(&[me], &tiers, proc_root, true).unwrap().unwrap();
        assert_eq!(r.ranges, 2);
        assert_eq!(
            r.nodes[&1],
            QuarantinedNode {
                ranges: 2,
                bytes: 128
            }
        );
        assert_eq!(r.pages_on_quarantined_frames, 1, "{r:?}");
        assert_eq!(r.moved_off_pages, 0, "dry run");
        // The page is found at its address.
        let (hits, seen) = pages_on(proc_root, me, &[(hpa + 64, hpa + 128)]).unwrap();
        assert!(seen);
        assert_eq!(hits, vec![va]);
        drop(buf);
    }

    #[test]
    fn pages_leave_for_another_node_of_their_tier_first() {
        let t = Tiers {
            fast: vec![0],
            slow: vec![1, 2],
        };
        assert_eq!(other_node(&t, 1), Some(2));
        assert_eq!(other_node(&t, 2), Some(1));
        assert_eq!(other_node(&t, 0), Some(1));
        let one = Tiers {
            fast: vec![0],
            slow: vec![1],
        };
        assert_eq!(other_node(&one, 1), Some(0));
        assert_eq!(
            other_node(
                &Tiers {
                    fast: vec![0],
                    slow: vec![]
                },
                0
            ),
            None
        );
    }
}
