//! Setting the kernel's weighted-interleave table for the probe of an interleaved buffer, and
//! putting it back.
//!
//! `MPOL_WEIGHTED_INTERLEAVE` takes its weights from one global table
//! (`/sys/kernel/mm/mempolicy/weighted_interleave/nodeN`), not from the caller. To measure a buffer
//! interleaved 3:1, the probe writes the table (root only), allocates and places the buffer (placement
//! happens at first touch, so later changes to the table do not move it), and restores the previous
//! weights and the `auto` switch when it is done or fails. A probe killed by a signal cannot restore
//! them: `cxltier topo` shows the table, `cxltier apply` sets it.

use crate::ProbeError;
use serde::Serialize;
use std::io;
use std::path::{Path, PathBuf};

const DIR: &str = "sys/kernel/mm/mempolicy/weighted_interleave";

/// One node's weight before and during the probe.
#[derive(Debug, Clone, Serialize)]
pub struct WeightChange {
    pub node: u32,
    pub before: Option<u8>,
    pub during: u8,
}

/// The table as changed for the probe; dropping it restores the table.
#[derive(Debug)]
pub struct WeightGuard {
    dir: PathBuf,
    pub changes: Vec<WeightChange>,
    /// The `auto` switch's file name and its value before, when the kernel has one and it was on.
    auto_restore: Option<String>,
    restored: bool,
}

fn read_weight(dir: &Path, node: u32) -> Option<u8> {
    std::fs::read_to_string(dir.join(format!("node{node}")))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn write(path: &Path, value: &str) -> Result<(), ProbeError> {
    std::fs::write(path, format!("{value}\n")).map_err(|source| {
        let path = path.display().to_string();
        if matches!(
            source.kind(),
            io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
        ) {
            ProbeError::WeightsPermission { path, source }
        } else {
            ProbeError::WeightsWrite { path, source }
        }
    })
}

/// Check, without changing anything, that the table could be set to `weights`: it exists, and either
/// already holds them or this process may write it.
pub fn check_writable(root: &Path, nodes: &[u32], weights: &[u32]) -> Result<(), ProbeError> {
    let dir = root.join(DIR);
    if !dir.is_dir() {
        return Err(ProbeError::NoWeightedInterleave);
    }
    for (&n, &w) in nodes.iter().zip(weights) {
        if read_weight(&dir, n) == Some(w.min(255) as u8) {
            continue;
        }
        let path = dir.join(format!("node{n}"));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|source| {
                let path = path.display().to_string();
                if matches!(
                    source.kind(),
                    io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
                ) {
                    ProbeError::WeightsPermission { path, source }
                } else {
                    ProbeError::WeightsWrite { path, source }
                }
            })?;
    }
    Ok(())
}

impl WeightGuard {
    /// Set `nodes[i]`'s weight to `weights[i]` below `root` (`/` on a live machine). Writes
    /// nothing when the table already holds these weights.
    pub fn set(root: &Path, nodes: &[u32], weights: &[u32]) -> Result<WeightGuard, ProbeError> {
        let dir = root.join(DIR);
        if !dir.is_dir() {
            return Err(ProbeError::NoWeightedInterleave);
        }
        let auto_restore = ["auto", "__auto_type"].iter().find_map(|name| {
            let text = std::fs::read_to_string(dir.join(name)).ok()?;
            matches!(text.trim(), "true" | "1" | "Y" | "y").then(|| name.to_string())
        });
        let mut guard = WeightGuard {
            dir: dir.clone(),
            changes: Vec::new(),
            auto_restore,
            restored: false,
        };
        let wanted: Vec<(u32, u8)> = nodes
            .iter()
            .zip(weights)
            .map(|(&n, &w)| (n, w.min(255) as u8))
            .collect();
        if wanted.iter().all(|&(n, w)| read_weight(&dir, n) == Some(w)) {
            guard.auto_restore = None;
            return Ok(guard);
        }
        for (n, w) in wanted {
            let before = read_weight(&dir, n);
            write(&dir.join(format!("node{n}")), &w.to_string())?;
            guard.changes.push(WeightChange {
                node: n,
                before,
                during: w,
            });
        }
        Ok(guard)
    }

    /// Whether the probe changed the table.
    pub fn changed(&self) -> bool {
        !self.changes.is_empty()
    }

    /// Put the previous weights back (and the kernel's `auto` mode, if it was on). Errors are
    /// returned as sentences for the report.
    pub fn restore(&mut self) -> Vec<String> {
        if self.restored {
            return Vec::new();
        }
        self.restored = true;
        let mut problems = Vec::new();
        for c in self.changes.iter().rev() {
            if let Some(b) = c.before {
                if let Err(e) = write(&self.dir.join(format!("node{}", c.node)), &b.to_string()) {
                    problems.push(format!(
                        "could not restore the weight of node {}: {e}",
                        c.node
                    ));
                }
            }
        }
        if let Some(name) = &self.auto_restore {
            if self.changed() {
                if let Err(e) = write(&self.dir.join(name), "true") {
                    problems.push(format!(
                        "could not switch the kernel's automatic weights back on: {e}"
                    ));
                }
            }
        }
        problems
    }
}

impl Drop for WeightGuard {
    fn drop(&mut self) {
        for p in self.restore() {
            eprintln!("cxltier: warning: {p}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(weights: &[(u32, u8)], auto: Option<&str>) -> PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "cxltier-probe-wi-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let dir = root.join(DIR);
        std::fs::create_dir_all(&dir).unwrap();
        for (n, w) in weights {
            std::fs::write(dir.join(format!("node{n}")), format!("{w}\n")).unwrap();
        }
        if let Some(a) = auto {
            std::fs::write(dir.join("auto"), format!("{a}\n")).unwrap();
        }
        root
    }

    #[test]
    fn sets_and_restores_the_table() {
        let root = table(&[(0, 1), (1, 1)], Some("true"));
        {
            let g = WeightGuard::set(&root, &[0, 1], &[3, 1]).unwrap();
            assert!(g.changed());
            assert_eq!(read_weight(&root.join(DIR), 0), Some(3));
            assert_eq!(g.changes[0].before, Some(1));
        }
        assert_eq!(read_weight(&root.join(DIR), 0), Some(1));
        let auto = std::fs::read_to_string(root.join(DIR).join("auto")).unwrap();
        assert_eq!(auto.trim(), "true");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn leaves_a_matching_table_alone() {
        let root = table(&[(0, 3), (1, 1)], Some("false"));
        let g = WeightGuard::set(&root, &[0, 1], &[3, 1]).unwrap();
        assert!(!g.changed());
        drop(g);
        let auto = std::fs::read_to_string(root.join(DIR).join("auto")).unwrap();
        assert_eq!(auto.trim(), "false");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_kernel_without_the_table_is_unsupported() {
        let root = std::env::temp_dir().join(format!("cxltier-probe-nowi-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let e = WeightGuard::set(&root, &[0, 1], &[3, 1]).unwrap_err();
        assert!(matches!(e, ProbeError::NoWeightedInterleave));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
