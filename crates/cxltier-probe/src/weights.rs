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
use cxltier_control::weights::{TemporaryWeights, WeightChange, WeightTable};
use cxltier_control::ControlError;
use serde::Serialize;
use std::io;
use std::path::Path;

#[cfg(test)]
const DIR: &str = cxltier_control::weights::WI_DIR;

/// One node's weight before and during the probe (the probe report's stable JSON fields).
#[derive(Debug, Clone, Serialize)]
pub struct WeightSetting {
    pub node: u32,
    pub before: Option<u8>,
    pub during: u8,
}

/// `node1 2->5` (`?` for a weight that was not known before).
impl std::fmt::Display for WeightSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.before {
            Some(b) => write!(f, "node{} {b}->{}", self.node, self.during),
            None => write!(f, "node{} ?->{}", self.node, self.during),
        }
    }
}

/// The table as changed for the probe; dropping it restores the table. A thin wrapper over
/// [`TemporaryWeights`] (reading, validating, writing with rollback and restoring all happen
/// there) that speaks the probe's errors and report fields.
#[derive(Debug)]
pub struct WeightGuard {
    weights: TemporaryWeights,
    pub changes: Vec<WeightSetting>,
}

/// Translate the table's errors into the probe's (which carry the probe's hints and exit codes).
fn probe_error(e: ControlError) -> ProbeError {
    match e {
        ControlError::NoWeightedInterleave { .. } => ProbeError::NoWeightedInterleave,
        ControlError::NeedsRoot { path } => ProbeError::WeightsPermission {
            path: path.display().to_string(),
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        },
        ControlError::Write { path, source, .. } | ControlError::Read { path, source } => {
            let path = path.display().to_string();
            if matches!(
                source.kind(),
                io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
            ) {
                ProbeError::WeightsPermission { path, source }
            } else {
                ProbeError::WeightsWrite { path, source }
            }
        }
        other => ProbeError::Weights {
            given: String::new(),
            reason: other.to_string(),
        },
    }
}

/// Read the table and validate `nodes[i]` = `weights[i]` against it, writing nothing.
fn plan(
    root: &Path,
    nodes: &[u32],
    weights: &[u32],
) -> Result<(WeightTable, WeightChange), ProbeError> {
    let table = WeightTable::read(root).map_err(probe_error)?;
    let pairs: Vec<(u32, u32)> = nodes.iter().copied().zip(weights.iter().copied()).collect();
    let change = table.plan(&pairs).map_err(probe_error)?;
    Ok((table, change))
}

/// Check, without changing anything, that the table could be set to `weights`: it exists, and either
/// already holds them or this process may write it.
pub fn check_writable(root: &Path, nodes: &[u32], weights: &[u32]) -> Result<(), ProbeError> {
    let (table, change) = plan(root, nodes, weights)?;
    for nw in change.changed() {
        let path = table.dir().join(format!("node{}", nw.node));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|source| {
                probe_error(ControlError::Write {
                    path,
                    source,
                    rollback: String::new(),
                })
            })?;
    }
    Ok(())
}

impl WeightGuard {
    /// Set `nodes[i]`'s weight to `weights[i]` below `root` (`/` on a live machine). Writes
    /// nothing when the table already holds these weights.
    pub fn set(root: &Path, nodes: &[u32], weights: &[u32]) -> Result<WeightGuard, ProbeError> {
        let mut guard = TemporaryWeights::read(root).map_err(probe_error)?;
        let pairs: Vec<(u32, u32)> = nodes.iter().copied().zip(weights.iter().copied()).collect();
        if guard.plan(&pairs).map_err(probe_error)?.is_noop() {
            return Ok(WeightGuard {
                weights: guard,
                changes: Vec::new(),
            });
        }
        let applied = guard.set(&pairs).map_err(probe_error)?;
        let changes = applied
            .change
            .changed()
            .map(|nw| WeightSetting {
                node: nw.node,
                before: Some(nw.old),
                during: nw.new,
            })
            .collect();
        Ok(WeightGuard {
            weights: guard,
            changes,
        })
    }

    /// Whether the probe changed the table.
    pub fn changed(&self) -> bool {
        !self.changes.is_empty()
    }

    /// Put the previous weights back (and the kernel's `auto` mode, if it was on). Errors are
    /// returned as sentences for the report. Restores once; dropping the guard restores too.
    pub fn restore(&mut self) -> Vec<String> {
        let Some(restored) = self.weights.restore() else {
            return Vec::new();
        };
        let report = restored.report;
        let mut problems: Vec<String> = report
            .failed
            .iter()
            .map(|(path, e)| format!("could not restore {}: {e}", path.display()))
            .collect();
        problems.extend(report.left_alone.iter().map(|(node, w)| {
            format!(
                "left node {node}'s weight at {w}: it was changed by someone else during the probe"
            )
        }));
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(weights: &[(u32, u8)], auto: Option<&str>) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(DIR);
        std::fs::create_dir_all(&dir).unwrap();
        for (n, w) in weights {
            std::fs::write(dir.join(format!("node{n}")), format!("{w}\n")).unwrap();
        }
        if let Some(a) = auto {
            std::fs::write(dir.join("auto"), format!("{a}\n")).unwrap();
        }
        root
    }

    fn read_weight(dir: &std::path::Path, node: u32) -> Option<u8> {
        std::fs::read_to_string(dir.join(format!("node{node}")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    #[test]
    fn sets_and_restores_the_table() {
        let tmp = table(&[(0, 1), (1, 1)], Some("true"));
        let root = tmp.path();
        {
            let g = WeightGuard::set(root, &[0, 1], &[3, 1]).unwrap();
            assert!(g.changed());
            assert_eq!(read_weight(&root.join(DIR), 0), Some(3));
            assert_eq!(g.changes[0].before, Some(1));
        }
        assert_eq!(read_weight(&root.join(DIR), 0), Some(1));
        // The kernel reads any kstrtobool truth; the table writes "1".
        let auto = std::fs::read_to_string(root.join(DIR).join("auto")).unwrap();
        assert!(matches!(auto.trim(), "1" | "true"), "auto is {auto:?}");
    }

    #[test]
    fn leaves_a_matching_table_alone() {
        let tmp = table(&[(0, 3), (1, 1)], Some("false"));
        let root = tmp.path();
        let g = WeightGuard::set(root, &[0, 1], &[3, 1]).unwrap();
        assert!(!g.changed());
        drop(g);
        let auto = std::fs::read_to_string(root.join(DIR).join("auto")).unwrap();
        assert_eq!(auto.trim(), "false");
    }

    #[test]
    fn a_kernel_without_the_table_is_unsupported() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let e = WeightGuard::set(root, &[0, 1], &[3, 1]).unwrap_err();
        assert!(matches!(e, ProbeError::NoWeightedInterleave));
    }
}
