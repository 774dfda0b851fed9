//! Memory mode's mechanism on the live kernel: a swap file created, turned on, paged out to with
//! `process_madvise(MADV_PAGEOUT)`, and removed again, with the memory intact. Needs root and a
//! temporary directory on a filesystem that holds swap files (ext4, xfs ...); elsewhere it says
//! why and checks nothing. The swap area is turned off by `teardown`, and by `Drop` should an
//! assertion fail first, so the host is left without it.

use cxltier_sys::swap::{pidfd_open, process_madvise, RemoteAdvice};
use cxltier_sys::{Advice, Mapping};
use cxltier_tierd::pageout::swapped_bytes;
use cxltier_tierd::swap::{active_swaps, NvmeSpec, SwapPlan};
use std::path::Path;

fn root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false)
}

#[test]
fn a_swap_file_takes_paged_out_memory_and_is_gone_after_teardown() {
    if !root() {
        eprintln!("skipped: swapon needs root");
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join("tierd-test.swap");
    let spec = NvmeSpec::parse(&format!("{}:16M", path.display())).unwrap();
    let plan = match SwapPlan::prepare(&spec, Path::new("/proc")) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let mut area = plan.apply().unwrap();
    let on = active_swaps(Path::new("/proc")).unwrap();
    let ours = on
        .iter()
        .find(|s| s.path == area.path())
        .expect("in /proc/swaps");
    assert_eq!(ours.size_bytes + 4096, 16 << 20, "{ours:?}");

    let page = cxltier_sys::page_size();
    let len = 2 << 20;
    let mut m = Mapping::anonymous(len).unwrap();
    m.advise(Advice::NoHugePage).unwrap();
    for (i, b) in m.as_mut_slice().iter_mut().enumerate() {
        *b = (i / page) as u8 ^ 0x5a;
    }
    let me = std::process::id();
    let before = swapped_bytes(Path::new("/proc"), me).unwrap();
    let fd = pidfd_open(me).unwrap();
    let advised = process_madvise(&fd, &[(m.addr(), len)], RemoteAdvice::Pageout).unwrap();
    assert_eq!(advised, len as u64);
    let after = swapped_bytes(Path::new("/proc"), me).unwrap();
    assert!(
        after >= before + len as u64 / 2,
        "VmSwap {before} -> {after}"
    );
    // Read back ahead of the faults, then check every byte.
    process_madvise(&fd, &[(m.addr(), len)], RemoteAdvice::WillNeed).unwrap();
    for (i, b) in m.as_slice().iter().enumerate() {
        assert_eq!(*b, (i / page) as u8 ^ 0x5a, "byte {i}");
    }

    let done = area.teardown().unwrap();
    assert!(done.swapped_off && done.removed_file);
    assert!(!path.exists());
    assert!(!active_swaps(Path::new("/proc"))
        .unwrap()
        .iter()
        .any(|s| s.path == path));
}
