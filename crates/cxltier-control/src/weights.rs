//! The kernel's weighted-interleave table (Linux 6.9+).
//!
//! `/sys/kernel/mm/mempolicy/weighted_interleave/nodeN` holds the weight (1..=255) that the
//! `MPOL_WEIGHTED_INTERLEAVE` policy gives node N. There is **one table for the whole system**: every
//! process using weighted interleave allocates by it, at allocation time. Linux 6.16 added an `auto`
//! switch in the same directory: while it reads true, the kernel derives the weights from firmware
//! bandwidth figures; writing any node's weight switches it off, and writing true to it makes the
//! kernel recompute the weights. (Some 6.18 kernels name the switch `__auto_type`, a side effect of a
//! macro; both names are handled.)
//!
//! The flow is: [`WeightTable::read`], then [`WeightTable::plan`] to validate a request and get a
//! [`WeightChange`] (old → new per node; no file is touched), then [`WeightTable::apply`] to write the
//! nodes that change (rolling back what was written if a later write fails), and, for temporary
//! changes, [`WeightTable::restore`] to put the old values back.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::ControlError;

/// The table's directory, relative to the root.
pub const WI_DIR: &str = "sys/kernel/mm/mempolicy/weighted_interleave";

/// Names of the `auto` switch, in order of preference.
const AUTO_NAMES: [&str; 2] = ["auto", "__auto_type"];

/// The table as read from sysfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightTable {
    root: PathBuf,
    dir: PathBuf,
    weights: BTreeMap<u32, u8>,
    auto: Option<bool>,
    auto_file: Option<String>,
}

/// One node's weight before and after a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NodeWeight {
    pub node: u32,
    pub old: u8,
    pub new: u8,
}

impl NodeWeight {
    /// Whether the weight changes.
    pub fn changed(&self) -> bool {
        self.old != self.new
    }
}

/// The `auto` switch before and after a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AutoChange {
    pub old: bool,
    pub new: bool,
}

/// A validated change to the table: what each requested node holds now and will hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WeightChange {
    /// The requested nodes, in the order requested.
    pub nodes: Vec<NodeWeight>,
    /// The `auto` switch, on kernels that have it (6.16+); writing any weight switches it off.
    pub auto: Option<AutoChange>,
}

impl WeightChange {
    /// Whether nothing would be written.
    pub fn is_noop(&self) -> bool {
        !self.nodes.iter().any(NodeWeight::changed) && !self.turns_auto_on()
    }

    /// Whether the change switches the kernel's automatic weights on (see [`WeightTable::plan_auto`]).
    pub fn turns_auto_on(&self) -> bool {
        matches!(
            self.auto,
            Some(AutoChange {
                old: false,
                new: true
            })
        )
    }

    /// The nodes whose weight changes.
    pub fn changed(&self) -> impl Iterator<Item = &NodeWeight> {
        self.nodes.iter().filter(|n| n.changed())
    }

    /// A `node0=3,node1=1` spec holding the *old* values of the changed nodes (of every node when
    /// the change switches `auto` on, as the kernel then recomputes them all): what puts the
    /// weights back by hand (`cxltier apply --weights ...`).
    pub fn undo_spec(&self) -> String {
        let all = self.turns_auto_on();
        self.nodes
            .iter()
            .filter(|n| all || n.changed())
            .map(|n| format!("node{}={}", n.node, n.old))
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl WeightChange {
    /// The command that puts the table back by hand: `cxltier apply --auto` when the change
    /// switches the kernel's automatic weights off, else `cxltier apply --weights` with the old
    /// weights ([`WeightChange::undo_spec`]); with `--sysfs-root` for a table below another root.
    pub fn undo_command(&self, root: Option<&Path>) -> String {
        let mut cmd = match self.auto {
            Some(AutoChange {
                old: true,
                new: false,
            }) => "cxltier apply --auto".to_string(),
            _ => format!("cxltier apply --weights {}", self.undo_spec()),
        };
        if let Some(r) = root {
            cmd.push_str(&format!(" --sysfs-root {}", r.display()));
        }
        cmd
    }
}

impl AutoChange {
    /// The switch's change in words.
    pub fn describe(&self) -> String {
        let on = |b: bool| if b { "on" } else { "off" };
        if self.old == self.new {
            format!("auto: {} (unchanged)", on(self.old))
        } else {
            format!(
                "auto: {} -> {}{}",
                on(self.old),
                on(self.new),
                if self.new {
                    ""
                } else {
                    " (a manual weight switches the kernel's automatic weights off)"
                }
            )
        }
    }
}

/// A change of the table as `cxltier apply --json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct ChangeReport {
    /// The table's directory.
    pub table: String,
    pub dry_run: bool,
    /// Whether anything was (or, in a dry run, would be) written.
    pub changed: bool,
    /// Each node's weights, by node: `{"<node>": {...}}` as every per-node figure.
    pub nodes: BTreeMap<u32, NodeReport>,
    pub auto: Option<AutoChange>,
    /// The command that undoes the change, when there is one.
    pub undo: Option<String>,
    /// The kernel's own tiering moving pages of the interleaved nodes, with the setting to change.
    pub warnings: Vec<String>,
    /// The change as the table shows it (after `auto` was switched on, the kernel's weights).
    #[serde(skip)]
    pub shown: WeightChange,
}

/// One node of a [`ChangeReport`].
#[derive(Debug, Clone, Copy, Serialize)]
pub struct NodeReport {
    pub old: u8,
    pub new: u8,
    pub changed: bool,
}

impl ChangeReport {
    /// The report of `change` to `table` (written unless `dry_run`), with the undo command for a
    /// table below `root` (`None`: `/`). After `auto` was switched on, the kernel chose the new
    /// weights: the table is read again to show them.
    pub fn new(
        table: &WeightTable,
        change: &WeightChange,
        dry_run: bool,
        root: Option<&Path>,
        warnings: Vec<String>,
    ) -> ChangeReport {
        let mut shown = change.clone();
        if change.turns_auto_on() && !dry_run {
            if let Ok(now) = WeightTable::read(&table.root) {
                for n in &mut shown.nodes {
                    n.new = now.weight(n.node).unwrap_or(n.new);
                }
            }
        }
        let writes = !change.is_noop();
        ChangeReport {
            table: table.dir().display().to_string(),
            dry_run,
            changed: writes,
            nodes: shown
                .nodes
                .iter()
                .map(|n| {
                    let report = NodeReport {
                        old: n.old,
                        new: n.new,
                        changed: n.changed(),
                    };
                    (n.node, report)
                })
                .collect(),
            auto: change.auto,
            undo: writes.then(|| change.undo_command(root)),
            warnings,
            shown,
        }
    }
}

/// Warnings when the kernel's own tiering can move pages that weighted interleave places on
/// `nodes` of the machine below `root`. A tree that cannot be discovered (a scratch tree holding
/// only the weight table) gives none: there is nothing to judge by.
pub fn kernel_tiering_warnings(root: &Path, nodes: &[u32]) -> Vec<String> {
    match cxltier_topo::Topology::discover(root) {
        Ok(topo) => {
            topo.kernel_tiering_warnings(nodes, cxltier_topo::Placement::WeightedInterleave)
        }
        Err(_) => Vec::new(),
    }
}

/// What [`WeightTable::restore`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RestoreReport {
    /// Nodes written back to their old weight.
    pub restored: Vec<NodeWeight>,
    /// Nodes left alone because someone else changed them meanwhile: (node, weight found).
    pub left_alone: Vec<(u32, u8)>,
    /// Whether the `auto` switch was turned back on.
    pub auto_restored: bool,
    /// Writes that failed: (file, error).
    pub failed: Vec<(PathBuf, String)>,
}

impl WeightTable {
    /// Read the table below `root` (`/` on a live machine).
    pub fn read(root: &Path) -> Result<WeightTable, ControlError> {
        let dir = root.join(WI_DIR);
        if !dir.is_dir() {
            return Err(ControlError::NoWeightedInterleave { dir });
        }
        let read_err = |path: &Path, source: io::Error| ControlError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut weights = BTreeMap::new();
        let entries = std::fs::read_dir(&dir).map_err(|e| read_err(&dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| read_err(&dir, e))?;
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_prefix("node"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let path = entry.path();
            let text = std::fs::read_to_string(&path).map_err(|e| read_err(&path, e))?;
            let weight = text
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&w| w > 0)
                .ok_or_else(|| ControlError::Garbled {
                    path: path.clone(),
                    content: text.clone(),
                    expected: "a weight from 1 to 255",
                })?;
            weights.insert(id, weight);
        }
        let mut auto = None;
        let mut auto_file = None;
        for name in AUTO_NAMES {
            let path = dir.join(name);
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    auto = Some(parse_bool(&text).ok_or_else(|| ControlError::Garbled {
                        path: path.clone(),
                        content: text.clone(),
                        expected: "true or false",
                    })?);
                    auto_file = Some(name.to_string());
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(read_err(&path, e)),
            }
        }
        Ok(WeightTable {
            root: root.to_path_buf(),
            dir,
            weights,
            auto,
            auto_file,
        })
    }

    /// The table's directory (below the root it was read from).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every node's weight.
    pub fn weights(&self) -> &BTreeMap<u32, u8> {
        &self.weights
    }

    /// The weight of `node`.
    pub fn weight(&self, node: u32) -> Option<u8> {
        self.weights.get(&node).copied()
    }

    /// The `auto` switch, on kernels that have it.
    pub fn auto(&self) -> Option<bool> {
        self.auto
    }

    /// Validate `requested` (node, weight) pairs and compute the change. Fails, before anything is
    /// written, on a node without a weight file, a weight of 0 or above 255, or a node given twice.
    pub fn plan(&self, requested: &[(u32, u32)]) -> Result<WeightChange, ControlError> {
        let mut seen = Vec::new();
        let mut nodes = Vec::new();
        for &(node, weight) in requested {
            if seen.contains(&node) {
                return Err(ControlError::DuplicateNode {
                    node,
                    spec: format_pairs(requested),
                });
            }
            seen.push(node);
            let Some(old) = self.weight(node) else {
                return Err(ControlError::UnknownNode {
                    node,
                    known: self.weights.keys().copied().collect(),
                });
            };
            let new = match weight {
                0 => return Err(ControlError::ZeroWeight { node }),
                w if w > 255 => {
                    return Err(ControlError::WeightTooLarge {
                        node,
                        weight: w as u64,
                    })
                }
                w => w as u8,
            };
            nodes.push(NodeWeight { node, old, new });
        }
        let writes = nodes.iter().any(NodeWeight::changed);
        let auto = self.auto.map(|old| AutoChange {
            old,
            new: old && !writes,
        });
        Ok(WeightChange { nodes, auto })
    }

    /// Plan the planner's advice: when it is to keep the kernel's own `auto` weights and the
    /// kernel has the switch (Linux 6.16+), switch `auto` on, so that the kernel keeps deriving
    /// them; otherwise write `pairs` (on older kernels the same values the kernel would derive).
    pub fn plan_advice(
        &self,
        pairs: &[(u32, u32)],
        keep_auto: bool,
    ) -> Result<WeightChange, ControlError> {
        if keep_auto && self.auto.is_some() {
            self.plan_auto()
        } else {
            self.plan(pairs)
        }
    }

    /// Plan switching the kernel's automatic weights (back) on, Linux 6.16+: the kernel then derives
    /// every weight from the firmware's bandwidth figures. `nodes` lists every node at its current
    /// weight (the kernel decides the new ones).
    pub fn plan_auto(&self) -> Result<WeightChange, ControlError> {
        let Some(old) = self.auto else {
            return Err(ControlError::NoAutoSwitch {
                dir: self.dir.clone(),
            });
        };
        Ok(WeightChange {
            nodes: self
                .weights
                .iter()
                .map(|(&node, &w)| NodeWeight {
                    node,
                    old: w,
                    new: w,
                })
                .collect(),
            auto: Some(AutoChange { old, new: true }),
        })
    }

    fn node_path(&self, node: u32) -> PathBuf {
        self.dir.join(format!("node{node}"))
    }

    /// Write the changed weights of `change` (a change planned on this table). If a write fails,
    /// the weights already written are put back (and the `auto` switch turned back on if it was on)
    /// before the error is returned; the error says how that went.
    pub fn apply(&self, change: &WeightChange) -> Result<(), ControlError> {
        let mut written: Vec<NodeWeight> = Vec::new();
        for nw in change.changed() {
            let path = self.node_path(nw.node);
            if let Err(source) = write_value(&path, &nw.new.to_string()) {
                if source.kind() == io::ErrorKind::PermissionDenied && written.is_empty() {
                    return Err(ControlError::NeedsRoot { path });
                }
                let rollback = self.roll_back(&written, change.auto);
                return Err(ControlError::Write {
                    path,
                    source,
                    rollback,
                });
            }
            written.push(*nw);
        }
        if change.turns_auto_on() {
            if let Some(name) = &self.auto_file {
                let path = self.dir.join(name);
                if let Err(source) = write_value(&path, "1") {
                    if source.kind() == io::ErrorKind::PermissionDenied {
                        return Err(ControlError::NeedsRoot { path });
                    }
                    return Err(ControlError::Write {
                        path,
                        source,
                        rollback: "nothing else was written".into(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Undo `written` (newest first) and turn `auto` back on if it was on; describe the outcome.
    fn roll_back(&self, written: &[NodeWeight], auto: Option<AutoChange>) -> String {
        if written.is_empty() {
            return "nothing had been written, so the table is unchanged".to_string();
        }
        let mut undone = Vec::new();
        let mut failed = Vec::new();
        for nw in written.iter().rev() {
            match write_value(&self.node_path(nw.node), &nw.old.to_string()) {
                Ok(()) => undone.push(format!("node{}={}", nw.node, nw.old)),
                Err(e) => failed.push(format!("node{} (still {}: {e})", nw.node, nw.new)),
            }
        }
        if let (Some(AutoChange { old: true, .. }), Some(name)) = (auto, &self.auto_file) {
            if let Err(e) = write_value(&self.dir.join(name), "1") {
                failed.push(format!("{name} (still off: {e})"));
            }
        }
        if failed.is_empty() {
            format!("rolled back {}: the table is as before", undone.join(","))
        } else {
            format!(
                "rollback failed for {}; the table is partly changed: check it with `cxltier topo`",
                failed.join(", ")
            )
        }
    }

    /// Put back the old values of an applied `change`. A node whose current weight is no longer the
    /// one `change` wrote is left alone (someone else changed it since). If `auto` was on before,
    /// it is switched back on, which makes the kernel recompute its weights.
    pub fn restore(&self, change: &WeightChange) -> RestoreReport {
        let mut report = RestoreReport::default();
        // If the table cannot be re-read, assume it still holds what was written.
        let now = WeightTable::read(&self.root).ok();
        for nw in change.changed() {
            let current = now.as_ref().map_or(Some(nw.new), |t| t.weight(nw.node));
            if current.is_some() && current != Some(nw.new) {
                report
                    .left_alone
                    .push((nw.node, current.unwrap_or_default()));
                continue;
            }
            let path = self.node_path(nw.node);
            match write_value(&path, &nw.old.to_string()) {
                Ok(()) => report.restored.push(*nw),
                Err(e) => report.failed.push((path, e.to_string())),
            }
        }
        if let (
            Some(AutoChange {
                old: true,
                new: false,
            }),
            Some(name),
        ) = (change.auto, &self.auto_file)
        {
            let path = self.dir.join(name);
            match write_value(&path, "1") {
                Ok(()) => report.auto_restored = true,
                Err(e) => report.failed.push((path, e.to_string())),
            }
        }
        report
    }
}

/// The weighted-interleave table changed for a while: [`set`](TemporaryWeights::set) writes a
/// change (as often as needed), [`restore`](TemporaryWeights::restore) or dropping the guard puts
/// the values from before the first change back. `run`, the probe and `tierd --tune` hold the
/// table this way; the guard says nothing itself ([`Applied`] and [`Restored`] display what
/// happened, for the caller to tell).
#[derive(Debug)]
pub struct TemporaryWeights {
    /// The table as it was before the guard changed it.
    original: WeightTable,
    /// What is written now, against the original values (what restoring undoes).
    held: Option<WeightChange>,
}

/// What [`TemporaryWeights::set`] wrote. Displays as the changed nodes, `node0 1 -> 3, ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The table's directory.
    pub dir: PathBuf,
    /// The change against the table as it was just before (a no-op when it already held it).
    pub change: WeightChange,
    /// The change against the table from before the guard: what restoring puts back.
    pub against_original: WeightChange,
}

impl std::fmt::Display for Applied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<String> = self
            .change
            .changed()
            .map(|n| format!("node{} {} -> {}", n.node, n.old, n.new))
            .collect();
        f.write_str(&nodes.join(", "))
    }
}

/// What [`TemporaryWeights::restore`] did. Displays as the nodes put back, `node0 3 -> 1, ...`,
/// and whether `auto` was switched back on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    pub report: RestoreReport,
    /// The change that was undone (against the original values).
    pub change: WeightChange,
}

impl Restored {
    /// Whether every node is back as it was.
    pub fn complete(&self) -> bool {
        self.report.failed.is_empty() && self.report.left_alone.is_empty()
    }
}

impl std::fmt::Display for Restored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<String> = self
            .report
            .restored
            .iter()
            .map(|n| format!("node{} {} -> {}", n.node, n.new, n.old))
            .collect();
        f.write_str(&nodes.join(", "))?;
        if self.report.auto_restored {
            f.write_str("; auto switched back on")?;
        }
        Ok(())
    }
}

impl TemporaryWeights {
    /// Read the table below `root` (`/` on a live machine); nothing is written yet.
    pub fn read(root: &Path) -> Result<TemporaryWeights, ControlError> {
        Ok(TemporaryWeights {
            original: WeightTable::read(root)?,
            held: None,
        })
    }

    /// The table as it was before the guard changed it.
    pub fn original(&self) -> &WeightTable {
        &self.original
    }

    /// What setting `requested` (node, weight) pairs would change in the table as it is now;
    /// nothing is written (a dry run).
    pub fn plan(&self, requested: &[(u32, u32)]) -> Result<WeightChange, ControlError> {
        WeightTable::read(&self.original.root)?.plan(requested)
    }

    /// Whether the guard has written anything not yet restored.
    pub fn holds(&self) -> bool {
        self.held.is_some()
    }

    /// Set `requested` (node, weight) pairs, writing only what differs from the table now (with
    /// rollback on a failed write).
    pub fn set(&mut self, requested: &[(u32, u32)]) -> Result<Applied, ControlError> {
        let current = WeightTable::read(&self.original.root)?;
        let change = current.plan(requested)?;
        if !change.is_noop() {
            current.apply(&change)?;
        }
        let against_original = self.original.plan(requested)?;
        self.held = Some(against_original.clone());
        Ok(Applied {
            dir: current.dir().to_path_buf(),
            change,
            against_original,
        })
    }

    /// Put the original values back (see [`WeightTable::restore`]); None when nothing was
    /// written. Restores once.
    pub fn restore(&mut self) -> Option<Restored> {
        let change = self.held.take()?;
        Some(Restored {
            report: self.original.restore(&change),
            change,
        })
    }
}

impl Drop for TemporaryWeights {
    fn drop(&mut self) {
        // On a path that did not restore explicitly (an error, a panic): put the table back all
        // the same; the caller had no chance to report it, and a library does not print.
        let _ = self.restore();
    }
}

/// Write `value` to an existing sysfs-style file (no create), in one `write`.
fn write_value(path: &Path, value: &str) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).truncate(true).open(path)?;
    file.write_all(format!("{value}\n").as_bytes())
}

/// Parse a boolean the way the kernel prints and reads them (`kstrtobool`).
fn parse_bool(text: &str) -> Option<bool> {
    match text.trim() {
        "1" | "Y" | "y" | "true" | "on" => Some(true),
        "0" | "N" | "n" | "false" | "off" => Some(false),
        _ => None,
    }
}

fn format_pairs(pairs: &[(u32, u32)]) -> String {
    pairs
        .iter()
        .map(|(n, w)| format!("node{n}={w}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A weight request as written on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightsSpec {
    /// `node0=3,node1=1` (or `0=3,1=1`): a weight per named node.
    PerNode(Vec<(u32, u32)>),
    /// `3:1`: weights in tier order, fastest first.
    InTierOrder(Vec<u32>),
}

impl std::str::FromStr for WeightsSpec {
    type Err = ControlError;
    /// `node0=3,node1=1` or `0=3,1=1` gives per-node weights; `3:1` (or a single `3`) weights in tier
    /// order. Only syntax is checked here; ranges and nodes are checked against the table later,
    /// so that the error can name the node.
    fn from_str(spec: &str) -> Result<WeightsSpec, ControlError> {
        if spec.contains('=') {
            parse_node_weights(spec).map(WeightsSpec::PerNode)
        } else {
            parse_tier_weights(spec).map(WeightsSpec::InTierOrder)
        }
    }
}

fn bad(spec: &str, reason: impl Into<String>) -> ControlError {
    ControlError::BadWeights {
        spec: spec.to_string(),
        reason: reason.into(),
    }
}

/// A weight: digits only. Values beyond u32 are kept as u32::MAX so that the range check reports
/// "too large" rather than "not a number".
fn parse_weight(spec: &str, text: &str) -> Result<u32, ControlError> {
    let t = text.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(
            spec,
            format!("{t:?} is not a weight (a whole number from 1 to 255)"),
        ));
    }
    Ok(t.parse::<u64>()
        .map_or(u32::MAX, |v| v.min(u32::MAX as u64) as u32))
}

/// Parse `node0=3,node1=1` (the `node` prefix is optional).
pub fn parse_node_weights(spec: &str) -> Result<Vec<(u32, u32)>, ControlError> {
    const FORM: &str = "expected node=weight pairs like node0=3,node1=1";
    if spec.trim().is_empty() {
        return Err(bad(spec, FORM));
    }
    let mut out: Vec<(u32, u32)> = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        let Some((node, weight)) = part.split_once('=') else {
            return Err(bad(spec, format!("{part:?} has no '=': {FORM}")));
        };
        let node_text = node.trim();
        let digits = node_text.strip_prefix("node").unwrap_or(node_text);
        let node = digits
            .parse::<u32>()
            .ok()
            .filter(|_| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| bad(spec, format!("{node_text:?} is not a node: {FORM}")))?;
        let weight = parse_weight(spec, weight)?;
        if out.iter().any(|(n, _)| *n == node) {
            return Err(ControlError::DuplicateNode {
                node,
                spec: spec.to_string(),
            });
        }
        out.push((node, weight));
    }
    Ok(out)
}

/// Parse `3:1` (weights in tier order, fastest first; [`cxltier_topo::Weights`]' rules).
pub fn parse_tier_weights(spec: &str) -> Result<Vec<u32>, ControlError> {
    cxltier_topo::Weights::parse(spec)
        .map(cxltier_topo::Weights::into_vec)
        .map_err(|e| bad(spec, e.reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TempDir;
    use crate::{Class, Classify};

    /// The table of `weights` (with `auto` beside it), read, and its change to `requested`.
    fn planned(
        weights: &[(u32, u8)],
        auto: Option<(&str, &str)>,
        requested: &[(u32, u32)],
    ) -> (TempDir, WeightTable, WeightChange) {
        let t = table(weights, auto);
        let wt = WeightTable::read(t.path()).unwrap();
        let change = wt.plan(requested).unwrap();
        (t, wt, change)
    }

    /// A sysfs-like tree with weights for the given nodes and, optionally, an auto switch.
    fn table(weights: &[(u32, u8)], auto: Option<(&str, &str)>) -> TempDir {
        let dir = TempDir::new("wi");
        for (n, w) in weights {
            dir.write(&format!("{WI_DIR}/node{n}"), &format!("{w}\n"));
        }
        if let Some((name, value)) = auto {
            dir.write(&format!("{WI_DIR}/{name}"), value);
        }
        dir
    }

    fn weight_in(dir: &TempDir, node: u32) -> String {
        dir.read(&format!("{WI_DIR}/node{node}")).trim().to_string()
    }

    #[test]
    fn parses_specs() {
        assert_eq!(
            parse_node_weights("node0=3,node1=1").unwrap(),
            vec![(0, 3), (1, 1)]
        );
        assert_eq!(
            parse_node_weights(" 0=3 , 2=10").unwrap(),
            vec![(0, 3), (2, 10)]
        );
        assert_eq!(parse_tier_weights("3:1").unwrap(), vec![3, 1]);
        assert_eq!(parse_tier_weights("5").unwrap(), vec![5]);
        assert_eq!(
            "node0=3".parse::<WeightsSpec>().unwrap(),
            WeightsSpec::PerNode(vec![(0, 3)])
        );
        assert_eq!(
            "5:2".parse::<WeightsSpec>().unwrap(),
            WeightsSpec::InTierOrder(vec![5, 2])
        );
        // Out of range values parse; the table check names the node.
        assert_eq!(
            parse_node_weights("node1=99999999999").unwrap(),
            vec![(1, u32::MAX)]
        );
        for bad in [
            "",
            "node0",
            "nodeX=1",
            "node=1",
            "node0=",
            "node0=a",
            "node0=-1",
            "node0=3,,node1=1",
            "n0=1",
        ] {
            let e = parse_node_weights(bad).unwrap_err();
            assert!(matches!(e, ControlError::BadWeights { .. }), "{bad:?}: {e}");
            assert_eq!(e.class(), Class::BadInput);
        }
        for bad in ["", "3:", ":1", "3:x", "3,1", "-3:1", "3.5:1"] {
            assert!(parse_tier_weights(bad).is_err(), "{bad:?}");
        }
        let e = parse_node_weights("node0=1,0=2").unwrap_err();
        assert!(
            e.to_string().contains("node 0 is given more than once"),
            "{e}"
        );
    }

    #[test]
    fn advice_to_keep_auto_switches_auto_on_where_the_kernel_has_it() {
        let keep = [(0, 23), (1, 8)];
        let t = table(&[(0, 1), (1, 1)], Some(("auto", "false\n")));
        let with_switch = WeightTable::read(t.path()).unwrap();
        let change = with_switch.plan_advice(&keep, true).unwrap();
        assert!(change.turns_auto_on());
        // Without the switch (before Linux 6.16) the same values are written.
        let t2 = table(&[(0, 1), (1, 1)], None);
        let without = WeightTable::read(t2.path()).unwrap();
        let change = without.plan_advice(&keep, true).unwrap();
        assert!(!change.turns_auto_on());
        assert_eq!(
            change
                .nodes
                .iter()
                .map(|n| (n.node, n.new))
                .collect::<Vec<_>>(),
            vec![(0, 23), (1, 8)]
        );
        // Advice to interleave writes the weights even where auto exists.
        let change = with_switch.plan_advice(&[(0, 9), (1, 4)], false).unwrap();
        assert!(!change.turns_auto_on());
    }

    #[test]
    fn reads_table_and_auto_switch_under_either_name() {
        let t = table(&[(0, 1), (1, 1), (10, 7)], Some(("__auto_type", "true\n")));
        let wt = WeightTable::read(t.path()).unwrap();
        assert_eq!(
            wt.weights()
                .iter()
                .map(|(n, w)| (*n, *w))
                .collect::<Vec<_>>(),
            vec![(0, 1), (1, 1), (10, 7)]
        );
        assert_eq!(wt.auto(), Some(true));
        let t = table(&[(0, 2)], Some(("auto", "N\n")));
        assert_eq!(WeightTable::read(t.path()).unwrap().auto(), Some(false));
        let t = table(&[(0, 2)], None);
        assert_eq!(WeightTable::read(t.path()).unwrap().auto(), None);
    }

    #[test]
    fn kernel_without_the_table_is_unsupported() {
        let t = TempDir::new("nowi");
        let e = WeightTable::read(t.path()).unwrap_err();
        assert_eq!(e.class(), Class::Unsupported);
        let msg = e.to_string();
        assert!(
            msg.contains("this kernel has no weighted interleave (Linux 6.9+ with CONFIG_NUMA;")
        );
        assert!(
            msg.contains("/sys/kernel/mm/mempolicy/weighted_interleave missing)"),
            "{msg}"
        );
    }

    #[test]
    fn garbled_weight_is_named() {
        let t = table(&[(0, 1)], None);
        t.write(&format!("{WI_DIR}/node1"), "heavy\n");
        let e = WeightTable::read(t.path()).unwrap_err();
        assert!(
            e.to_string().contains("node1") && e.to_string().contains("heavy"),
            "{e}"
        );
    }

    #[test]
    fn plan_validates_and_diffs() {
        let (_t, wt, change) = planned(
            &[(0, 1), (1, 1)],
            Some(("auto", "true\n")),
            &[(0, 3), (1, 1)],
        );
        assert_eq!(
            change.nodes,
            vec![
                NodeWeight {
                    node: 0,
                    old: 1,
                    new: 3
                },
                NodeWeight {
                    node: 1,
                    old: 1,
                    new: 1
                }
            ]
        );
        assert!(!change.is_noop());
        assert_eq!(
            change.auto,
            Some(AutoChange {
                old: true,
                new: false
            })
        );
        assert_eq!(change.undo_spec(), "node0=1");

        let same = wt.plan(&[(0, 1), (1, 1)]).unwrap();
        assert!(same.is_noop());
        assert_eq!(
            same.auto,
            Some(AutoChange {
                old: true,
                new: true
            })
        );

        let e = wt.plan(&[(0, 3), (5, 1)]).unwrap_err();
        assert_eq!(e.class(), Class::BadInput);
        assert!(
            e.to_string().contains("node 5") && e.to_string().contains("0-1"),
            "{e}"
        );
        let e = wt.plan(&[(0, 0)]).unwrap_err();
        assert!(matches!(e, ControlError::ZeroWeight { node: 0 }), "{e}");
        let e = wt.plan(&[(1, 256)]).unwrap_err();
        assert!(
            e.to_string().contains("256") && e.to_string().contains("node 1"),
            "{e}"
        );
        assert!(wt.plan(&[(0, 2), (0, 3)]).is_err());
    }

    #[test]
    fn apply_writes_only_changes_and_restore_puts_them_back() {
        let (t, wt, change) = planned(
            &[(0, 1), (1, 1), (2, 4)],
            Some(("auto", "true\n")),
            &[(0, 3), (1, 1)],
        );
        wt.apply(&change).unwrap();
        assert_eq!(weight_in(&t, 0), "3");
        assert_eq!(weight_in(&t, 1), "1");
        assert_eq!(weight_in(&t, 2), "4");
        // The kernel switches auto off on a manual write; play its part.
        t.write(&format!("{WI_DIR}/auto"), "false\n");

        let report = wt.restore(&change);
        assert_eq!(
            report.restored,
            vec![NodeWeight {
                node: 0,
                old: 1,
                new: 3
            }]
        );
        assert!(report.auto_restored);
        assert!(report.failed.is_empty());
        assert_eq!(weight_in(&t, 0), "1");
        assert_eq!(t.read(&format!("{WI_DIR}/auto")).trim(), "1");
    }

    #[test]
    fn restore_leaves_alone_what_someone_else_changed() {
        let (t, wt, change) = planned(&[(0, 1), (1, 1)], None, &[(0, 3), (1, 2)]);
        wt.apply(&change).unwrap();
        t.write(&format!("{WI_DIR}/node1"), "9\n");
        let report = wt.restore(&change);
        assert_eq!(report.restored.len(), 1);
        assert_eq!(report.left_alone, vec![(1, 9)]);
        assert_eq!(weight_in(&t, 0), "1");
        assert_eq!(weight_in(&t, 1), "9");
    }

    #[test]
    fn failed_write_rolls_back_what_was_written() {
        let (t, wt, change) = planned(
            &[(0, 1), (1, 1), (2, 1)],
            Some(("auto", "true\n")),
            &[(0, 3), (1, 2), (2, 5)],
        );
        // node2 becomes a directory: its write fails after node0 and node1 were written.
        let node2 = t.path().join(WI_DIR).join("node2");
        std::fs::remove_file(&node2).unwrap();
        std::fs::create_dir(&node2).unwrap();
        let e = wt.apply(&change).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, ControlError::Write { .. }), "{msg}");
        assert!(msg.contains("node2"), "{msg}");
        assert!(msg.contains("rolled back node1=1,node0=1"), "{msg}");
        assert_eq!(weight_in(&t, 0), "1");
        assert_eq!(weight_in(&t, 1), "1");
        assert_eq!(t.read(&format!("{WI_DIR}/auto")).trim(), "1");
    }

    #[test]
    fn failed_first_write_changes_nothing() {
        let (t, wt, change) = planned(&[(0, 1), (1, 1)], None, &[(0, 3), (1, 2)]);
        let node0 = t.path().join(WI_DIR).join("node0");
        std::fs::remove_file(&node0).unwrap();
        std::fs::create_dir(&node0).unwrap();
        let e = wt.apply(&change).unwrap_err();
        assert!(e.to_string().contains("nothing had been written"), "{e}");
        assert_eq!(weight_in(&t, 1), "1");
    }

    #[test]
    fn auto_can_be_switched_back_on() {
        let t = table(&[(0, 3), (1, 1)], Some(("auto", "false\n")));
        let wt = WeightTable::read(t.path()).unwrap();
        let change = wt.plan_auto().unwrap();
        assert!(!change.is_noop() && change.turns_auto_on());
        assert_eq!(change.undo_spec(), "node0=3,node1=1");
        wt.apply(&change).unwrap();
        assert_eq!(t.read(&format!("{WI_DIR}/auto")).trim(), "1");
        // Already on: nothing to do.
        let t = table(&[(0, 3)], Some(("auto", "true\n")));
        assert!(WeightTable::read(t.path())
            .unwrap()
            .plan_auto()
            .unwrap()
            .is_noop());
        // No switch before 6.16.
        let t = table(&[(0, 3)], None);
        let e = WeightTable::read(t.path())
            .unwrap()
            .plan_auto()
            .unwrap_err();
        assert_eq!(e.class(), Class::Unsupported);
        assert!(e.to_string().contains("6.16"), "{e}");
    }

    #[test]
    fn permission_error_says_root() {
        let e = ControlError::NeedsRoot {
            path: PathBuf::from("/sys/kernel/mm/mempolicy/weighted_interleave/node0"),
        };
        assert_eq!(e.class(), Class::Permission);
        assert!(e.to_string().contains("needs root (try sudo)"));
    }

    #[test]
    fn temporary_weights_hold_a_change_and_put_the_original_back_once() {
        let dir = table(&[(0, 1), (1, 1)], Some(("auto", "1\n")));
        let mut g = TemporaryWeights::read(dir.path()).unwrap();
        assert_eq!(g.plan(&[(0, 3)]).unwrap().changed().count(), 1);
        assert_eq!(weight_in(&dir, 0), "1", "planning writes nothing");
        let a = g.set(&[(0, 3), (1, 1)]).unwrap();
        assert_eq!(a.to_string(), "node0 1 -> 3");
        assert_eq!(
            (weight_in(&dir, 0), weight_in(&dir, 1)),
            ("3".into(), "1".into())
        );
        // A second change is against the table now; restoring goes back to before the first.
        let a = g.set(&[(0, 2), (1, 1)]).unwrap();
        assert_eq!(a.to_string(), "node0 3 -> 2");
        assert_eq!(a.against_original.undo_spec(), "node0=1");
        let r = g.restore().unwrap();
        assert!(r.complete());
        assert_eq!(r.to_string(), "node0 2 -> 1; auto switched back on");
        assert_eq!(weight_in(&dir, 0), "1");
        assert_eq!(dir.read(&format!("{WI_DIR}/auto")).trim(), "1");
        assert!(g.restore().is_none(), "restored once");

        // Dropped without restoring: the table goes back all the same.
        let mut g = TemporaryWeights::read(dir.path()).unwrap();
        g.set(&[(1, 5)]).unwrap();
        assert_eq!(weight_in(&dir, 1), "5");
        drop(g);
        assert_eq!(weight_in(&dir, 1), "1");

        // Someone else changed a node meanwhile: left as found, and said.
        let mut g = TemporaryWeights::read(dir.path()).unwrap();
        g.set(&[(1, 5)]).unwrap();
        dir.write(&format!("{WI_DIR}/node1"), "9\n");
        let r = g.restore().unwrap();
        assert!(!r.complete());
        assert_eq!(r.report.left_alone, vec![(1, 9)]);
    }
}
