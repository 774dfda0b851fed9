//! What the loop reads from procfs and sysfs besides DAMON: a target's movable mappings
//! (`/proc/PID/maps`) and each node's free memory (`/sys/devices/system/node/nodeN/meminfo`).

use std::fs;
use std::path::Path;

use crate::TierdError;

/// A `[start, end)` address range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub start: usize,
    pub end: usize,
}

/// The private, writable, anonymous mappings of a process (anonymous memory, heap, stack): the
/// memory `move_pages` can move and that belongs to the process alone. File mappings and shared
/// memory are left where they are.
pub fn movable_ranges(proc_root: &Path, pid: u32) -> Result<Vec<Range>, TierdError> {
    let path = proc_root.join(pid.to_string()).join("maps");
    let text = fs::read_to_string(&path)
        .map_err(|e| TierdError::process_io(pid, "cannot read", &path, e))?;
    Ok(parse_maps(&text))
}

/// Parse `/proc/PID/maps` text into its movable ranges (see [`movable_ranges`]).
pub fn parse_maps(text: &str) -> Vec<Range> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let name = fields.nth(3).unwrap_or("");
        let anonymous = name.is_empty() || name == "[heap]" || name == "[stack]";
        if !(anonymous && perms.contains('w') && perms.ends_with('p')) {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        if let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
            if end > start {
                out.push(Range { start, end });
            }
        }
    }
    out
}

/// The process's resident anonymous memory (`RssAnon` of `/proc/PID/status`, Linux 4.5+), in
/// bytes; `None` when it does not say (no such line, or no status file: a process gone since
/// its liveness was checked is found gone by the next read of its pages).
pub fn rss_anon_bytes(proc_root: &Path, pid: u32) -> Result<Option<u64>, TierdError> {
    let path = proc_root.join(pid.to_string()).join("status");
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(TierdError::io("cannot read", path, e)),
    };
    Ok(text.lines().find_map(|l| {
        let v = l.strip_prefix("RssAnon:")?.trim();
        let kb: u64 = v.strip_suffix("kB").unwrap_or(v).trim().parse().ok()?;
        Some(kb * 1024)
    }))
}

/// Whether the process exists (and is not a zombie).
pub fn alive(proc_root: &Path, pid: u32) -> bool {
    match fs::read_to_string(proc_root.join(pid.to_string()).join("stat")) {
        // The state follows the command name in parentheses, which may itself hold ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// A node's total and free memory in bytes, from its `meminfo`.
pub fn node_memory(sys_root: &Path, node: u32) -> Result<(u64, u64), TierdError> {
    let path = sys_root.join(format!("sys/devices/system/node/node{node}/meminfo"));
    let text = fs::read_to_string(&path).map_err(|e| TierdError::io("cannot read", &path, e))?;
    let field = |name: &str| -> Option<u64> {
        text.lines().find_map(|l| {
            let rest = l.split_once(name)?.1.trim_start_matches(':');
            let kb: u64 = rest.split_whitespace().next()?.parse().ok()?;
            Some(kb * 1024)
        })
    };
    match (field(" MemTotal"), field(" MemFree")) {
        (Some(total), Some(free)) => Ok((total, free)),
        _ => Err(TierdError::Parse {
            path,
            content: text.lines().take(2).collect::<Vec<_>>().join("; "),
            why: "no MemTotal/MemFree lines".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    #[test]
    fn resident_anonymous_memory_comes_from_rss_anon() {
        let d = TempDir::new("procfs-rss-anon");
        d.write(
            "7/status",
            "Name:\tx\nVmRSS:\t  900 kB\nRssAnon:\t  512 kB\n",
        );
        d.write("8/status", "Name:\tx\nVmRSS:\t  900 kB\n");
        assert_eq!(rss_anon_bytes(d.path(), 7).unwrap(), Some(512 * 1024));
        assert_eq!(rss_anon_bytes(d.path(), 8).unwrap(), None);
        assert_eq!(rss_anon_bytes(d.path(), 9).unwrap(), None);
    }

    #[test]
    fn only_private_writable_anonymous_mappings_are_movable() {
        let maps = "\
55d0c0000000-55d0c0100000 r--p 00000000 08:01 123 /usr/bin/cxltier
55d0c0100000-55d0c0200000 rw-p 00100000 08:01 123 /usr/bin/cxltier
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000800000 rw-p 00000000 00:00 0
7f0000800000-7f0000900000 rw-s 00000000 00:01 9 /dev/zero (deleted)
7f0000900000-7f0000a00000 ---p 00000000 00:00 0
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0 [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]
";
        let r = parse_maps(maps);
        assert_eq!(
            r,
            vec![
                Range {
                    start: 0x55d0c1000000,
                    end: 0x55d0c1021000
                },
                Range {
                    start: 0x7f0000000000,
                    end: 0x7f0000800000
                },
                Range {
                    start: 0x7ffc00000000,
                    end: 0x7ffc00021000
                },
            ]
        );
    }

    #[test]
    fn process_liveness_and_node_memory() {
        let dir = TempDir::new("procfs");
        dir.write("7/stat", "7 (a) b) S 1 7\n");
        dir.write("8/stat", "8 (zombie) Z 1 8\n");
        assert!(alive(dir.path(), 7));
        assert!(!alive(dir.path(), 8));
        assert!(!alive(dir.path(), 9));
        assert!(matches!(
            movable_ranges(dir.path(), 9),
            Err(TierdError::NoSuchProcess { pid: 9 })
        ));
        dir.write(
            "sys/devices/system/node/node1/meminfo",
            "Node 1 MemTotal:         262144 kB\nNode 1 MemFree:          131072 kB\nNode 1 MemUsed: 131072 kB\n",
        );
        assert_eq!(node_memory(dir.path(), 1).unwrap(), (256 << 20, 128 << 20));
        assert!(node_memory(dir.path(), 2).is_err());
    }
}
