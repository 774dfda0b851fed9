//! How much memory a run may still take, read before the state is allocated: the kernel's
//! `MemAvailable`, lowered by the limits of the process's cgroup (v2) and its ancestors. An
//! allocation beyond it would not fail cleanly: the pages are touched, so the process (or a
//! neighbour) would be killed by the OOM killer part-way through.

use std::path::Path;

/// Bytes of memory available to this process under `root` (`/` on a live system): the least of
/// `MemAvailable` and, for each cgroup v2 level from the process's own up to the root,
/// `memory.max - memory.current`. `None` when `/proc/meminfo` cannot be read (then nothing is
/// checked).
pub fn available(root: &Path) -> Option<u64> {
    let meminfo = std::fs::read_to_string(root.join("proc/meminfo")).ok()?;
    let mut avail = meminfo.lines().find_map(|l| {
        let kb = l.strip_prefix("MemAvailable:")?.trim().strip_suffix("kB")?;
        kb.trim().parse::<u64>().ok()?.checked_mul(1024)
    })?;
    // "0::/user.slice/..." is the v2 hierarchy; v1 lines (with controllers) are ignored.
    let cgroup = std::fs::read_to_string(root.join("proc/self/cgroup")).unwrap_or_default();
    if let Some(path) = cgroup.lines().find_map(|l| l.strip_prefix("0::")) {
        let base = root.join("sys/fs/cgroup");
        let mut dir = base.join(path.trim().trim_start_matches('/'));
        while dir.starts_with(&base) {
            let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
            if let (Some(max), Some(current)) = (read("memory.max"), read("memory.current")) {
                if let (Ok(max), Ok(current)) = (max.trim().parse::<u64>(), current.trim().parse())
                {
                    avail = avail.min(max.saturating_sub(current));
                }
            }
            if !dir.pop() {
                break;
            }
        }
    }
    Some(avail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, path: &str, text: &str) {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn the_least_of_mem_available_and_every_cgroup_level() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(
            root,
            "proc/meminfo",
            "MemTotal:       16000000 kB\nMemFree:  1 kB\nMemAvailable:    8000000 kB\n",
        );
        assert_eq!(available(root), Some(8_000_000 * 1024));
        write(root, "proc/self/cgroup", "0::/a/b\n");
        // The leaf has no limit; its parent has 1 GiB with 256 MiB used.
        write(root, "sys/fs/cgroup/a/b/memory.max", "max\n");
        write(root, "sys/fs/cgroup/a/b/memory.current", "1000\n");
        write(root, "sys/fs/cgroup/a/memory.max", "1073741824\n");
        write(root, "sys/fs/cgroup/a/memory.current", "268435456\n");
        assert_eq!(available(root), Some(805_306_368));
        // A cgroup over its limit leaves nothing.
        write(root, "sys/fs/cgroup/a/b/memory.max", "100\n");
        assert_eq!(available(root), Some(0));
        // Nothing readable: no answer.
        std::fs::remove_dir_all(root).unwrap();
        assert_eq!(available(root), None);
    }
}
