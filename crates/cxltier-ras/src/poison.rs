//! Poison: reading a device's poison list, and taking poisoned pages out of use.
//!
//! The poison list is read by writing to `memN/trigger_poison_list`: the kernel sends Get Poison
//! List to the device and reports each entry as a `cxl_poison` trace event (`trace_type=List`),
//! before the write returns. So a [`Watch`] on `cxl_poison` must be open first.
//!
//! Poisoned pages of memory the kernel manages (a region onlined as a NUMA node) are soft-offlined
//! through `/sys/devices/system/memory/soft_offline_page`: the kernel migrates the page's contents
//! elsewhere (the data is still readable: the poison list names lines that will fail, before any
//! access consumed them) and never hands the page out again.

use crate::event::{EventType, PhysRange, RasEvent};
use crate::inventory::{Inventory, CXL_DIR};
use crate::tracefs::Watch;
use crate::RasError;
use cxltier_error::PathError;
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The file that soft-offlines a page, relative to the root.
pub const SOFT_OFFLINE: &str = "sys/devices/system/memory/soft_offline_page";

/// The page size soft-offlining works in.
pub const PAGE_SIZE: u64 = 4096;

/// The trigger file of a memdev.
pub fn trigger_path(root: &Path, memdev: &str) -> PathBuf {
    root.join(CXL_DIR).join(memdev).join("trigger_poison_list")
}

/// Asks the device for its poison list; the entries arrive on `watch` as `cxl_poison` events.
pub fn trigger(root: &Path, memdev: &str) -> Result<(), RasError> {
    let path = trigger_path(root, memdev);
    crate::write_attr(&path, "1").map_err(|e| {
        PathError::io(
            format!("reading the poison list of {memdev} (trigger_poison_list)"),
            &path,
            e,
        )
        .into()
    })
}

/// Reads the poison list of every device in `inventory` that supports it, through `watch` (which
/// must have `cxl_poison` enabled). Entries come back mapped, one per poisoned range.
pub fn read_lists(
    root: &Path,
    inventory: &Inventory,
    watch: &mut Watch,
) -> Result<Vec<RasEvent>, RasError> {
    for d in inventory
        .devices
        .iter()
        .filter(|d| d.health.poison_list_supported)
    {
        trigger(root, &d.memdev)?;
    }
    // The events are in the buffer when the writes return; read until it stays empty briefly.
    let mut out = Vec::new();
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_millis(200) {
        let lines = watch.poll()?;
        if lines.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        quiet_since = Instant::now();
        for l in lines {
            let mut e = RasEvent::from_trace(&l);
            if e.event_type == EventType::Poison {
                e.map(inventory);
                out.push(e);
            }
        }
    }
    Ok(dedup(out))
}

/// Keeps the first record of each (device, address, length): every read of the list reports
/// every entry again.
pub fn dedup(events: Vec<RasEvent>) -> Vec<RasEvent> {
    let mut seen = BTreeSet::new();
    events.into_iter().filter(|e| seen.insert(key(e))).collect()
}

/// What identifies a poison entry.
pub fn key(e: &RasEvent) -> (Option<String>, Option<u64>, Option<u64>, Option<u64>) {
    (e.memdev.clone(), e.serial, e.dpa, e.length_bytes)
}

/// The pages covering a physical range.
pub fn pages(range: PhysRange) -> impl Iterator<Item = u64> {
    let first = range.start / PAGE_SIZE * PAGE_SIZE;
    (first..range.end.max(first + 1)).step_by(PAGE_SIZE as usize)
}

/// What happened to one page.
#[derive(Debug, Clone, Serialize)]
pub struct OfflinedPage {
    pub address: u64,
    pub offlined: bool,
    /// Why not, when not.
    pub error: Option<String>,
}

/// Soft-offlines every page of `range` (or says what it would do with `dry_run`). A page that
/// cannot be offlined is reported, not fatal: the others still are.
pub fn soft_offline(
    root: &Path,
    range: PhysRange,
    dry_run: bool,
) -> Result<Vec<OfflinedPage>, RasError> {
    let path = root.join(SOFT_OFFLINE);
    if !path.exists() {
        return Err(PathError::io(
            "soft-offlining poisoned pages (the kernel needs CONFIG_MEMORY_FAILURE)",
            &path,
            std::io::Error::from(std::io::ErrorKind::NotFound),
        )
        .into());
    }
    let mut out = Vec::new();
    for address in pages(range) {
        if dry_run {
            out.push(OfflinedPage {
                address,
                offlined: false,
                error: Some("dry run".to_string()),
            });
            continue;
        }
        match crate::write_attr(&path, &format!("{address:#x}")) {
            Ok(()) => out.push(OfflinedPage {
                address,
                offlined: true,
                error: None,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(PathError::io("soft-offlining poisoned pages", &path, e).into())
            }
            Err(e) => out.push(OfflinedPage {
                address,
                offlined: false,
                error: Some(e.to_string()),
            }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A root with `sys/bus/cxl/devices/mem0/` and nothing in it.
    fn root_with_memdev() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join(CXL_DIR).join("mem0")).unwrap();
        root
    }

    #[test]
    fn trigger_writes_the_existing_attribute() {
        let tmp = root_with_memdev();
        let root = tmp.path();
        fs::write(trigger_path(root, "mem0"), "").unwrap();
        trigger(root, "mem0").unwrap();
        assert_eq!(fs::read_to_string(trigger_path(root, "mem0")).unwrap(), "1");
    }

    /// A device whose attribute is missing (being re-probed after a fatal error's recovery) is
    /// "not found", never created, and never a permission problem: on sysfs, an `O_CREAT` open of
    /// a missing attribute fails with EACCES, which the watch took for a lack of privilege.
    #[test]
    fn trigger_on_a_missing_attribute_is_not_found_and_creates_nothing() {
        let tmp = root_with_memdev();
        let root = tmp.path();
        let err = trigger(root, "mem0").unwrap_err();
        assert!(
            matches!(&err, RasError::Path(PathError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound),
            "{err:?}"
        );
        assert!(
            !trigger_path(root, "mem0").exists(),
            "the attribute was created"
        );
    }

    #[test]
    fn pages_cover_the_range() {
        let p: Vec<u64> = pages(PhysRange {
            start: 0x2_d000_2000,
            end: 0x2_d000_2040,
        })
        .collect();
        assert_eq!(p, vec![0x2_d000_2000]);
        let p: Vec<u64> = pages(PhysRange {
            start: 0x1ff0,
            end: 0x3010,
        })
        .collect();
        assert_eq!(p, vec![0x1000, 0x2000, 0x3000]);
    }
}
