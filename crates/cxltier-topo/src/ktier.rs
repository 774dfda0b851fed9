//! The kernel's own tiering: NUMA balancing's mode, demotion, and the kernel's counters of the pages
//! it promoted, demoted and migrated.
//!
//! Linux moves pages between memory tiers by itself when told to:
//!
//! - `kernel.numa_balancing` (`proc/sys/kernel/numa_balancing`) is a bit mask: bit 0
//!   (`NUMA_BALANCING_NORMAL`) moves pages toward the node of the CPU that touches them; bit 1
//!   (`NUMA_BALANCING_MEMORY_TIERING`, Linux 6.0+) promotes hot pages from nodes below the top
//!   tier to it;
//! - `demotion_enabled` (`sys/kernel/mm/numa/demotion_enabled`, Linux 5.15+) makes reclaim move
//!   cold pages of a tier to the next slower one instead of dropping or swapping them.
//!
//! Which nodes each mechanism works on follows `mm/memory-tiers.c` (`establish_demotion_targets`):
//! every memory node in a tier above the slowest has demotion targets; the top tiers are all tiers
//! up to and including the slowest one holding a node with CPUs, and pages on nodes below them are
//! candidates for promotion. Both move only pages whose memory policy lets them: reclaim demotes
//! whatever the policy, but NUMA balancing moves only pages under the default policy (or `bind`
//! with `MPOL_F_NUMA_BALANCING`): `mpol_misplaced` ignores pages without `MPOL_F_MOF`, which
//! interleaved pages never have.
//!
//! Absent files mean the kernel does not support the feature (or the recorded tree lacks them) and
//! come back as `None`, never as an error.

use serde::Serialize;
use std::collections::BTreeMap;

use crate::nodelist;
use crate::sysfs::{parse_bool, Sysfs};
use crate::{Node, Topology};

/// `kernel.numa_balancing`, relative to the root.
pub const NUMA_BALANCING: &str = "proc/sys/kernel/numa_balancing";
/// The demotion switch, relative to the root.
pub const DEMOTION_ENABLED: &str = "sys/kernel/mm/numa/demotion_enabled";
/// The kernel's event counters, relative to the root.
pub const VMSTAT: &str = "proc/vmstat";

/// `/proc/vmstat` counters about tiering: promotion, demotion, NUMA balancing and migration.
const COUNTER_PREFIXES: [&str; 4] = ["pgpromote_", "pgdemote_", "numa_", "pgmigrate_"];

/// Bits of `kernel.numa_balancing` (`include/linux/sched/sysctl.h`).
const NUMA_BALANCING_NORMAL: u32 = 1;
const NUMA_BALANCING_MEMORY_TIERING: u32 = 2;

/// The kernel's own tiering state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KernelTiering {
    /// `kernel.numa_balancing`; `None` when the kernel has no NUMA balancing
    /// (`CONFIG_NUMA_BALANCING`) or the recorded tree has no `proc/`.
    pub numa_balancing: Option<NumaBalancing>,
    /// `demotion_enabled`; `None` before Linux 5.15 or without `CONFIG_MIGRATION`.
    pub demotion_enabled: Option<bool>,
    /// `/proc/vmstat` counters named `pgpromote_*`, `pgdemote_*`, `numa_*` and `pgmigrate_*`, as
    /// this kernel has them; `None` when there is no `/proc/vmstat`.
    pub counters: Option<BTreeMap<String, u64>>,
}

/// NUMA balancing's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NumaBalancing {
    /// The sysctl's value.
    pub value: u32,
    /// `off`, `normal`, `memory-tiering` or `normal+memory-tiering`.
    pub mode: &'static str,
    /// Bit 0: pages move toward the node of the CPU that touches them.
    pub normal: bool,
    /// Bit 1: hot pages are promoted from slower tiers to the top tier.
    pub memory_tiering: bool,
}

impl NumaBalancing {
    fn from_value(value: u32) -> NumaBalancing {
        let normal = value & NUMA_BALANCING_NORMAL != 0;
        let memory_tiering = value & NUMA_BALANCING_MEMORY_TIERING != 0;
        let mode = match (normal, memory_tiering) {
            (false, false) => "off",
            (true, false) => "normal",
            (false, true) => "memory-tiering",
            (true, true) => "normal+memory-tiering",
        };
        NumaBalancing {
            value,
            mode,
            normal,
            memory_tiering,
        }
    }

    /// Whether any mode is on.
    pub fn is_on(&self) -> bool {
        self.normal || self.memory_tiering
    }
}

/// Read the kernel's tiering state below the root `fs`. Garbled files become warnings.
pub(crate) fn read(fs: &Sysfs, warnings: &mut Vec<String>) -> KernelTiering {
    let numa_balancing = match fs.parse_opt(NUMA_BALANCING, "a number from 0 to 3", |t| {
        t.parse::<u32>().ok().filter(|v| *v <= 3)
    }) {
        Ok(v) => v.map(NumaBalancing::from_value),
        Err(e) => {
            warnings.push(e.to_string());
            None
        }
    };
    let demotion_enabled = match fs.parse_opt(DEMOTION_ENABLED, "true or false", parse_bool) {
        Ok(v) => v,
        Err(e) => {
            warnings.push(e.to_string());
            None
        }
    };
    let counters = match read_counters(fs) {
        Ok(c) => c,
        Err(e) => {
            warnings.push(e);
            None
        }
    };
    KernelTiering {
        numa_balancing,
        demotion_enabled,
        counters,
    }
}

/// The tiering counters of `/proc/vmstat` below the root: `Ok(None)` without the file; lines that
/// are not `name number` are an error naming the line.
pub(crate) fn read_counters(fs: &Sysfs) -> Result<Option<BTreeMap<String, u64>>, String> {
    let text = match fs.read_opt(VMSTAT) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let mut counters = BTreeMap::new();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(name), Some(value), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!(
                "{}: unexpected line {line:?}: expected a counter name and a number",
                fs.display(VMSTAT)
            ));
        };
        if !COUNTER_PREFIXES.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let value = value.parse::<u64>().map_err(|_| {
            format!(
                "{}: unexpected line {line:?}: expected a counter name and a number",
                fs.display(VMSTAT)
            )
        })?;
        counters.insert(name.to_string(), value);
    }
    Ok(Some(counters))
}

/// `node(s) 0-1`, or `none`.
pub fn nodes_in_words(nodes: &[u32]) -> String {
    if nodes.is_empty() {
        "none".to_string()
    } else {
        format!("node(s) {}", nodelist::format(nodes))
    }
}

/// Per-second rates of the counters between two samples `seconds` apart. A counter missing from
/// either sample has no rate; one that went down (the kernel never does that; a replaced
/// recording may) counts as 0.
pub fn counter_rates(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    seconds: f64,
) -> BTreeMap<String, f64> {
    if !(seconds.is_finite() && seconds > 0.0) {
        return BTreeMap::new();
    }
    after
        .iter()
        .filter_map(|(name, &now)| {
            let then = *before.get(name)?;
            Some((name.clone(), now.saturating_sub(then) as f64 / seconds))
        })
        .collect()
}

/// The memory nodes whose pages the kernel itself may move, by mechanism, given the current
/// settings (a mechanism that is off moves nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KernelMoves {
    /// NUMA balancing's normal mode: pages on these nodes move toward the node of the CPU that
    /// touches them (every memory node, when there are two or more).
    pub balancing_from: Vec<u32>,
    /// Memory-tiering mode: hot pages on these nodes (below the top tiers) are promoted.
    pub promotion_from: Vec<u32>,
    /// Demotion: reclaim moves cold pages from these nodes (every tier but the slowest) down.
    pub demotion_from: Vec<u32>,
    /// Whether the kernel shows its memory tiers; without them every memory node is assumed to
    /// take part.
    pub tiers_known: bool,
}

impl KernelMoves {
    /// Whether the kernel moves pages by itself at all.
    pub fn any(&self) -> bool {
        !(self.balancing_from.is_empty()
            && self.promotion_from.is_empty()
            && self.demotion_from.is_empty())
    }
}

/// How the pages a command places are placed: this decides which kernel mechanisms can move them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Pages under the default policy, placed by moving them (`move_pages`): NUMA balancing (both
    /// modes) and demotion can move them again.
    Moved,
    /// Pages allocated under weighted interleave: NUMA balancing leaves them alone (interleave
    /// policies lack `MPOL_F_MOF`), demotion does not.
    WeightedInterleave,
}

impl Topology {
    /// Which memory nodes the kernel's own tiering may move pages from (see [`KernelMoves`]).
    pub fn kernel_moves(&self) -> KernelMoves {
        let k = &self.kernel_tiering;
        let memory: Vec<&Node> = self.memory_nodes().collect();
        if memory.len() < 2 {
            return KernelMoves {
                tiers_known: !self.memory_tiers.is_empty(),
                ..KernelMoves::default()
            };
        }
        let all: Vec<u32> = memory.iter().map(|n| n.id).collect();
        let is_memory = |id: &u32| all.contains(id);
        // The kernel's tiers, fastest first, holding only memory nodes, empty ones dropped.
        let tiers: Vec<Vec<u32>> = {
            let mut t: Vec<_> = self.memory_tiers.iter().collect();
            t.sort_by_key(|t| t.id);
            t.iter()
                .map(|t| {
                    t.nodes
                        .iter()
                        .copied()
                        .filter(is_memory)
                        .collect::<Vec<_>>()
                })
                .filter(|n| !n.is_empty())
                .collect()
        };
        let tiers_known = !tiers.is_empty();
        let balancing = k.numa_balancing.unwrap_or(NumaBalancing::from_value(0));
        let balancing_from = if balancing.normal {
            all.clone()
        } else {
            Vec::new()
        };
        let promotion_from = if !balancing.memory_tiering {
            Vec::new()
        } else if tiers_known {
            // Top tiers: up to and including the slowest tier with a CPU node.
            let has_cpus = |t: &Vec<u32>| {
                t.iter()
                    .any(|id| self.node(*id).is_some_and(|n| n.has_cpus()))
            };
            let top = tiers.iter().rposition(has_cpus).unwrap_or(0);
            tiers.iter().skip(top + 1).flatten().copied().collect()
        } else {
            memory
                .iter()
                .filter(|n| !n.has_cpus())
                .map(|n| n.id)
                .collect()
        };
        let demotion_from = if k.demotion_enabled != Some(true) {
            Vec::new()
        } else if tiers_known {
            tiers
                .iter()
                .take(tiers.len().saturating_sub(1))
                .flatten()
                .copied()
                .collect()
        } else {
            all.clone()
        };
        let sorted = |mut v: Vec<u32>| {
            v.sort_unstable();
            v
        };
        KernelMoves {
            balancing_from: sorted(balancing_from),
            promotion_from: sorted(promotion_from),
            demotion_from: sorted(demotion_from),
            tiers_known,
        }
    }

    /// What NUMA balancing does on this machine, in words: its mode and setting, and which nodes
    /// it moves pages from; `None` when the kernel has no NUMA balancing.
    pub fn numa_balancing_summary(&self) -> Option<String> {
        let b = self.kernel_tiering.numa_balancing?;
        let moves = self.kernel_moves();
        let mut out = format!("{} (kernel.numa_balancing = {})", b.mode, b.value);
        if b.normal {
            out.push_str(&match moves.balancing_from.as_slice() {
                [] => "; nothing to move between (one memory node)".to_string(),
                from => format!(
                    "; moves pages toward the CPU that touches them on {}",
                    nodes_in_words(from)
                ),
            });
        }
        if b.memory_tiering {
            out.push_str(&match moves.promotion_from.as_slice() {
                [] => "; nothing to promote (no memory below the top tier)".to_string(),
                from => format!("; promotes hot pages from {}", nodes_in_words(from)),
            });
        }
        Some(out)
    }

    /// What demotion does on this machine, in words; `None` when the kernel has no demotion
    /// switch.
    pub fn demotion_summary(&self) -> Option<String> {
        Some(match self.kernel_tiering.demotion_enabled? {
            false => "off (demotion_enabled = false)".to_string(),
            true => match self.kernel_moves().demotion_from.as_slice() {
                [] => "on (demotion_enabled = true); nothing to demote to (one memory tier)"
                    .to_string(),
                from => format!(
                    "on (demotion_enabled = true); reclaim demotes cold pages from {}",
                    nodes_in_words(from)
                ),
            },
        })
    }

    /// Warnings, one sentence each, when the kernel's own tiering can move pages that a command
    /// places on `nodes`, naming the setting that stops it. Empty when nothing overlaps.
    pub fn kernel_tiering_warnings(&self, nodes: &[u32], placement: Placement) -> Vec<String> {
        let moves = self.kernel_moves();
        let overlap = |from: &[u32]| -> Vec<u32> {
            let mut v: Vec<u32> = nodes.iter().copied().filter(|n| from.contains(n)).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let assumed = if moves.tiers_known {
            ""
        } else {
            " (this kernel does not show its memory tiers, so every memory node is assumed to take part)"
        };
        let mut warnings = Vec::new();
        if placement == Placement::Moved {
            let value = self
                .kernel_tiering
                .numa_balancing
                .map(|b| b.value)
                .unwrap_or(0);
            let balanced = overlap(&moves.balancing_from);
            let promoted = overlap(&moves.promotion_from);
            let mut what = Vec::new();
            if !balanced.is_empty() {
                what.push(format!(
                    "moves pages on node(s) {} toward the node of the CPU that touches them",
                    nodelist::format(&balanced)
                ));
            }
            if !promoted.is_empty() {
                what.push(format!(
                    "promotes hot pages on node(s) {} to the top tier",
                    nodelist::format(&promoted)
                ));
            }
            if !what.is_empty() {
                warnings.push(format!(
                    "the kernel's NUMA balancing (kernel.numa_balancing = {value}) {}, undoing this \
                     placement{assumed}; turn it off with `sysctl kernel.numa_balancing=0`",
                    what.join(" and ")
                ));
            }
        }
        let demoted = overlap(&moves.demotion_from);
        if !demoted.is_empty() {
            warnings.push(format!(
                "the kernel demotes cold pages on node(s) {} to slower memory when they run short \
                 (/{DEMOTION_ENABLED} = true), undoing this placement{assumed}; turn it off with \
                 `echo false > /{DEMOTION_ENABLED}`",
                nodelist::format(&demoted)
            ));
        }
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::Path;

    /// A scratch tree: node0 (DRAM, CPUs 0-1) in memory tier 4, node1 (CPU-less) in tier 22, and
    /// node2 (CPU-less) in tier 22 too unless `tiers` is false (then no memory_tiering directory).
    fn tree(tiers: bool) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        for (id, cpus) in [(0, "0-1"), (1, ""), (2, "")] {
            let dir = root.join(format!("sys/devices/system/node/node{id}"));
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("cpulist"), format!("{cpus}\n")).unwrap();
            fs::write(
                dir.join("meminfo"),
                format!("Node {id} MemTotal: 1048576 kB\nNode {id} MemFree: 524288 kB\n"),
            )
            .unwrap();
        }
        if tiers {
            for (tier, nodes) in [(4, "0"), (22, "1-2")] {
                let dir = root.join(format!(
                    "sys/devices/virtual/memory_tiering/memory_tier{tier}"
                ));
                fs::create_dir_all(&dir).unwrap();
                fs::write(dir.join("nodelist"), format!("{nodes}\n")).unwrap();
            }
        }
        tmp
    }

    fn set(root: &Path, numa_balancing: Option<&str>, demotion: Option<&str>) {
        let nb = root.join(NUMA_BALANCING);
        let de = root.join(DEMOTION_ENABLED);
        fs::create_dir_all(nb.parent().unwrap()).unwrap();
        fs::create_dir_all(de.parent().unwrap()).unwrap();
        let _ = fs::remove_file(&nb);
        let _ = fs::remove_file(&de);
        if let Some(v) = numa_balancing {
            fs::write(nb, format!("{v}\n")).unwrap();
        }
        if let Some(v) = demotion {
            fs::write(de, format!("{v}\n")).unwrap();
        }
    }

    fn discover(root: &Path) -> Topology {
        Topology::discover(root).unwrap()
    }

    /// What the topology warns of kernel tiering for memory on `nodes` placed by `placement`.
    fn warnings(t: &Topology, nodes: &[u32], placement: Placement) -> Vec<String> {
        t.kernel_tiering_warnings(nodes, placement)
    }

    /// [`tree`] with `kernel.numa_balancing` and `demotion_enabled` set, and its topology.
    fn with_settings(
        tiers: bool,
        numa_balancing: &str,
        demotion: &str,
    ) -> (tempfile::TempDir, Topology) {
        let tmp = tree(tiers);
        set(tmp.path(), Some(numa_balancing), Some(demotion));
        let t = discover(tmp.path());
        (tmp, t)
    }

    #[test]
    fn absent_files_are_unsupported_not_errors() {
        let tmp = tree(true);
        let t = discover(tmp.path());
        assert_eq!(t.kernel_tiering, KernelTiering::default());
        assert!(t.warnings.is_empty(), "{:?}", t.warnings);
        assert!(!t.kernel_moves().any());
        assert!(warnings(&t, &[0, 1, 2], Placement::Moved).is_empty());
    }

    #[test]
    fn every_numa_balancing_mode() {
        let tmp = tree(true);
        for (value, mode, normal, tiering) in [
            ("0", "off", false, false),
            ("1", "normal", true, false),
            ("2", "memory-tiering", false, true),
            ("3", "normal+memory-tiering", true, true),
        ] {
            set(tmp.path(), Some(value), Some("false"));
            let t = discover(tmp.path());
            let nb = t.kernel_tiering.numa_balancing.unwrap();
            assert_eq!(
                (nb.mode, nb.normal, nb.memory_tiering),
                (mode, normal, tiering)
            );
            assert_eq!(t.kernel_tiering.demotion_enabled, Some(false));
            let moves = t.kernel_moves();
            assert_eq!(
                moves.balancing_from,
                if normal { vec![0, 1, 2] } else { vec![] }
            );
            // Node 0 has CPUs: its tier is the top tier, promotion comes from the tier below.
            assert_eq!(
                moves.promotion_from,
                if tiering { vec![1, 2] } else { vec![] }
            );
            assert!(moves.demotion_from.is_empty());
            let w = warnings(&t, &[0, 1], Placement::Moved);
            if value == "0" {
                assert!(w.is_empty(), "{w:?}");
            } else {
                assert_eq!(w.len(), 1, "{w:?}");
                assert!(w[0].contains(&format!("kernel.numa_balancing = {value}")));
                assert!(
                    w[0].contains("`sysctl kernel.numa_balancing=0`"),
                    "{}",
                    w[0]
                );
                assert_eq!(w[0].contains("promotes hot pages on node(s) 1"), tiering);
            }
            // Interleaved pages are not NUMA balancing's to move.
            assert!(warnings(&t, &[0, 1], Placement::WeightedInterleave).is_empty());
        }
    }

    #[test]
    fn demotion_from_every_tier_but_the_slowest() {
        let (_tmp, t) = with_settings(true, "0", "true");
        assert_eq!(t.kernel_tiering.demotion_enabled, Some(true));
        assert_eq!(t.kernel_moves().demotion_from, vec![0]);
        let w = warnings(&t, &[0, 1], Placement::WeightedInterleave);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("node(s) 0 "), "{}", w[0]);
        assert!(
            w[0].contains("`echo false > /sys/kernel/mm/numa/demotion_enabled`"),
            "{}",
            w[0]
        );
        // Nodes of the slowest tier are never demoted from: no overlap, no warning.
        assert!(warnings(&t, &[1, 2], Placement::Moved).is_empty());
    }

    #[test]
    fn without_memory_tiers_every_memory_node_is_assumed() {
        let (_tmp, t) = with_settings(false, "2", "1");
        let moves = t.kernel_moves();
        assert!(!moves.tiers_known);
        assert_eq!(moves.promotion_from, vec![1, 2]);
        assert_eq!(moves.demotion_from, vec![0, 1, 2]);
        let w = warnings(&t, &[0, 2], Placement::Moved);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w.iter().all(|w| w.contains("assumed to take part")));
    }

    #[test]
    fn single_memory_node_has_nothing_to_move_between() {
        let tmp = tree(true);
        for id in [1, 2] {
            fs::write(
                tmp.path()
                    .join(format!("sys/devices/system/node/node{id}/meminfo")),
                format!("Node {id} MemTotal: 0 kB\nNode {id} MemFree: 0 kB\n"),
            )
            .unwrap();
        }
        set(tmp.path(), Some("3"), Some("true"));
        let t = discover(tmp.path());
        assert!(!t.kernel_moves().any());
        assert!(t.kernel_tiering_warnings(&[0], Placement::Moved).is_empty());
    }

    #[test]
    fn garbled_settings_are_warnings() {
        let (_tmp, t) = with_settings(true, "7", "maybe");
        assert_eq!(t.kernel_tiering.numa_balancing, None);
        assert_eq!(t.kernel_tiering.demotion_enabled, None);
        assert_eq!(t.warnings.len(), 2, "{:?}", t.warnings);
        assert!(t.warnings[0].contains("numa_balancing") && t.warnings[0].contains("0 to 3"));
        assert!(t.warnings[1].contains("demotion_enabled"));
    }

    #[test]
    fn vmstat_counters_and_rates() {
        let tmp = tree(true);
        let vmstat = tmp.path().join(VMSTAT);
        fs::create_dir_all(vmstat.parent().unwrap()).unwrap();
        fs::write(
            &vmstat,
            "nr_free_pages 12345\nnuma_hit 100\npgpromote_success 10\npgpromote_candidate 40\n\
             pgdemote_kswapd 5\npgmigrate_success 15\nnuma_pte_updates 7\npgfault 999\n",
        )
        .unwrap();
        let t = discover(tmp.path());
        let c = t.kernel_tiering.counters.clone().unwrap();
        assert_eq!(
            c.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "numa_hit",
                "numa_pte_updates",
                "pgdemote_kswapd",
                "pgmigrate_success",
                "pgpromote_candidate",
                "pgpromote_success"
            ]
        );
        fs::write(
            &vmstat,
            "numa_hit 100\npgpromote_success 30\npgpromote_candidate 40\npgdemote_kswapd 4\n",
        )
        .unwrap();
        let later = Topology::read_kernel_counters(tmp.path()).unwrap().unwrap();
        let r = counter_rates(&c, &later, 2.0);
        assert_eq!(r["pgpromote_success"], 10.0);
        assert_eq!(r["pgpromote_candidate"], 0.0);
        assert_eq!(r["pgdemote_kswapd"], 0.0, "a counter going down is no rate");
        assert!(
            !r.contains_key("pgmigrate_success"),
            "gone from the second sample"
        );
        assert!(counter_rates(&c, &later, 0.0).is_empty());

        fs::write(&vmstat, "pgpromote_success ten\n").unwrap();
        let err = Topology::read_kernel_counters(tmp.path()).unwrap_err();
        assert!(err.contains("pgpromote_success ten"), "{err}");
        let t = discover(tmp.path());
        assert_eq!(t.kernel_tiering.counters, None);
        assert!(t.warnings.iter().any(|w| w.contains("vmstat")));
    }

    #[test]
    fn abstract_distance_where_present() {
        let tmp = tree(true);
        fs::write(
            tmp.path()
                .join("sys/devices/virtual/memory_tiering/memory_tier4/abstract_distance"),
            "576\n",
        )
        .unwrap();
        let t = discover(tmp.path());
        assert_eq!(t.memory_tiers[0].abstract_distance, Some(576));
        assert_eq!(t.memory_tiers[1].abstract_distance, None);
    }
}
