//! What each NUMA node's memory is, and why we think so.
//!
//! Linux does not say what technology backs a node. We combine what it does say, strongest evidence
//! first, and record every fact we used as a sentence so a person can weigh it:
//!
//! 1. **No memory.** A node without memory is `cpu-only` if it has CPUs, else `empty` (for example a
//!    node that only holds a generic initiator, or whose CXL memory is not onlined).
//! 2. **CPUs.** A node with CPUs and memory is `dram`: the memory next to CPUs is their local DRAM on
//!    every platform Linux runs on. (Firmware that interleaves CXL into a CPU node's memory makes it
//!    a mix; we say so in the evidence when a CXL region maps into such a node.)
//! 3. **A dax device or CXL region names the node.** For a CPU-less node, the memory's provenance is
//!    the strongest evidence there is: a CXL `ram` region whose dax device the kernel onlined into the
//!    node (or whose address range lies in the node's memory blocks) makes it `cxl`; a CXL `pmem`
//!    region or an NVDIMM region onlined the same way makes it `pmem` (persistent media: slower than
//!    either DRAM or CXL DRAM, whatever the link).
//! 4. **HBM.** A CPU-less node whose HMAT read bandwidth is at least [`HBM_MIN_BANDWIDTH_RATIO`] times
//!    the best DRAM node's and whose read latency is at most [`HBM_MAX_LATENCY_RATIO`] times the best
//!    DRAM node's is `hbm`. High-bandwidth memory in flat mode (Xeon Max, for example) is the only
//!    memory-only technology that is several times faster than DRAM in bandwidth at similar latency;
//!    CXL and persistent memory have less bandwidth than a socket's DRAM and roughly twice its latency
//!    or more. Without HMAT figures HBM cannot be told apart, and this rule does not fire.
//! 5. **As fast as DRAM.** A CPU-less node with nothing above pointing elsewhere is `dram` when it
//!    is as fast as DRAM: when HMAT gives figures for it and for DRAM, a read latency within
//!    [`DRAM_LATENCY_RATIO`] of DRAM's and at least [`DRAM_BANDWIDTH_RATIO`] of its bandwidth; without
//!    figures, when the kernel puts it in the fastest memory tier together with a DRAM node (the kernel
//!    tiers memory lower when firmware figures or the way it was onlined, dax/kmem, say it is slower).
//!    HMAT decides over the tier because kernels before 6.10 put all memory present at boot in the
//!    DRAM tier whatever HMAT says. The tier-only case is the weakest rule, and its evidence says so:
//!    HBM or CXL memory that firmware onlined as plain RAM without describing it looks the same.
//! 6. Anything else CPU-less is `memory-only`: memory of unknown technology, with the facts we have
//!    (slower tier, HMAT figures relative to DRAM, specific-purpose memory) in the evidence. A slower
//!    memory tier alone does not make a node CXL: persistent memory, far memory of a memory-side cache,
//!    or a hypervisor's memory-only node land there too.

use serde::Serialize;

use crate::cxl::{Cxl, DaxDevice, DaxMode, DaxSource};
use crate::node::{memory_side_cache_bytes, MemoryBlocks, Node};
use crate::sysfs::Sysfs;
use crate::{format_bytes, nodelist};

/// What a node's memory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeKind {
    /// Local DRAM of a socket (or memory the kernel rates as fast as it).
    Dram,
    /// CXL-attached memory (a CXL region's memory onlined into this node).
    Cxl,
    /// Persistent memory used as RAM (NVDIMM or CXL persistent region through dax/kmem).
    Pmem,
    /// High-bandwidth memory in flat mode.
    Hbm,
    /// CPU-less memory of unknown technology.
    MemoryOnly,
    /// CPUs but no memory.
    CpuOnly,
    /// Neither CPUs nor memory.
    Empty,
}

impl NodeKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            NodeKind::Dram => "dram",
            NodeKind::Cxl => "cxl",
            NodeKind::Pmem => "pmem",
            NodeKind::Hbm => "hbm",
            NodeKind::MemoryOnly => "memory-only",
            NodeKind::CpuOnly => "cpu-only",
            NodeKind::Empty => "empty",
        }
    }
}

impl std::fmt::Display for NodeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// HBM: at least this many times the best DRAM node's HMAT read bandwidth. HBM2e stacks deliver
/// 3-4x a socket's DDR bandwidth; CXL and PMEM deliver less than DDR.
pub const HBM_MIN_BANDWIDTH_RATIO: f64 = 2.0;
/// HBM: at most this many times the best DRAM node's HMAT read latency. HBM's idle latency is
/// within about 20% of DDR's; CXL's is about 2x.
pub const HBM_MAX_LATENCY_RATIO: f64 = 1.5;
/// DRAM-like (rule 5, when HMAT has figures): at most this many times DRAM's HMAT read latency.
pub const DRAM_LATENCY_RATIO: f64 = 1.2;
/// DRAM-like (rule 5, when HMAT has figures): at least this fraction of DRAM's HMAT read bandwidth.
pub const DRAM_BANDWIDTH_RATIO: f64 = 0.8;

pub(crate) fn classify(
    nodes: &mut [Node],
    cxl: &Cxl,
    dax: &[DaxDevice],
    blocks: &MemoryBlocks,
    fs: &Sysfs,
) {
    // The reference DRAM: nodes with CPUs and memory.
    let dram: Vec<&Node> = nodes
        .iter()
        .filter(|n| n.has_cpus() && n.has_memory())
        .collect();
    let fastest_tier = nodes
        .iter()
        .filter(|n| n.has_memory())
        .filter_map(|n| n.memory_tier)
        .min();
    let dram_tiers: Vec<u32> = {
        let mut t: Vec<u32> = dram.iter().filter_map(|d| d.memory_tier).collect();
        t.sort_unstable();
        t.dedup();
        t
    };
    // Best (lowest) DRAM latency and best (highest) DRAM bandwidth, with the node that has it.
    let dram_lat = dram
        .iter()
        .filter_map(|d| d.read_latency_ns().map(|l| (l, d.id)))
        .min();
    let dram_bw = dram
        .iter()
        .filter_map(|d| d.read_bandwidth_mbps().map(|b| (b, d.id)))
        .max();

    for node in nodes.iter_mut() {
        let mut ev = Vec::new();
        let id = node.id;
        let hmat_line = hmat_summary(node, dram_lat, dram_bw);
        let tier_line = node.memory_tier.map(|t| {
            let others: &[u32] = if node.has_cpus() { &[] } else { &dram_tiers };
            tier_summary(t, fastest_tier, others)
        });
        let cache = memory_side_cache_bytes(fs, id);

        // Sources naming this node: dax devices onlined into it, CXL regions that became it.
        let onlined: Vec<&DaxDevice> = dax
            .iter()
            .filter(|d| d.target_node == Some(id) && d.mode == DaxMode::SystemRam)
            .collect();
        let regions: Vec<_> = cxl.regions.iter().filter(|r| r.node == Some(id)).collect();
        let devdax: Vec<&DaxDevice> = dax
            .iter()
            .filter(|d| d.target_node == Some(id) && d.mode != DaxMode::SystemRam)
            .collect();

        // Rule 1: no memory.
        if !node.has_memory() {
            if node.has_cpus() {
                ev.push(format!(
                    "has CPUs {} but no memory",
                    nodelist::format(&node.cpus)
                ));
                node.kind = NodeKind::CpuOnly;
            } else {
                ev.push("no CPUs and no memory online".to_string());
                node.kind = NodeKind::Empty;
            }
            for d in devdax {
                ev.push(format!(
                    "{} ({}, {}) targets this node but is not onlined as system RAM; `daxctl reconfigure-device -m system-ram {}` would online it",
                    d.name,
                    dax_origin(d),
                    d.mode.as_str(),
                    d.name
                ));
            }
            node.evidence = ev;
            continue;
        }

        let region_lines: Vec<String> = regions
            .iter()
            .map(|r| {
                let how = match r.node_source.as_deref() {
                    Some("dax") => format!(
                        "onlined into this node by {} (kmem)",
                        if r.dax.is_empty() { "its dax device".to_string() } else { r.dax.join(", ") }
                    ),
                    _ => match (r.resource, blocks.node_for_range(r.resource.unwrap_or(0), r.size_bytes)) {
                        (Some(start), Some((_, n, total))) => format!(
                            "its address range {start:#x}-{:#x} lies in this node's memory ({n} of {total} memory blocks)",
                            start.saturating_add(r.size_bytes.saturating_sub(1))
                        ),
                        _ => "mapped into this node".to_string(),
                    },
                };
                let devs = if r.memdevs.is_empty() { String::new() } else { format!(" on {}", r.memdevs.join(", ")) };
                format!("CXL {} ({}, {}{devs}): {how}", r.name, r.mode, format_bytes(r.size_bytes))
            })
            .collect();

        // Rule 2: CPUs.
        if node.has_cpus() {
            node.kind = NodeKind::Dram;
            ev.push(format!("has CPUs {}", nodelist::format(&node.cpus)));
            ev.extend(tier_line);
            ev.extend(hmat_line);
            for line in region_lines {
                ev.push(format!(
                    "{line}: this node mixes CPU-local memory with CXL memory"
                ));
            }
            node.evidence = ev;
            continue;
        }
        ev.push("no CPUs".to_string());

        // Rule 3: provenance.
        let pmem_region = regions.iter().any(|r| r.mode == "pmem");
        let ram_region = regions.iter().any(|r| r.mode != "pmem");
        let nvdimm: Vec<&&DaxDevice> = onlined
            .iter()
            .filter(|d| d.source == DaxSource::Nvdimm)
            .collect();
        let hmem: Vec<&&DaxDevice> = onlined
            .iter()
            .filter(|d| d.source == DaxSource::Hmem)
            .collect();
        let kind = if pmem_region && !ram_region {
            ev.extend(
                region_lines
                    .iter()
                    .map(|l| format!("{l}; persistent memory")),
            );
            Some(NodeKind::Pmem)
        } else if !regions.is_empty() {
            ev.extend(region_lines.iter().cloned());
            Some(NodeKind::Cxl)
        } else if !nvdimm.is_empty() {
            for d in &nvdimm {
                ev.push(format!(
                    "{} on NVDIMM {} (persistent memory) is onlined into this node by kmem",
                    d.name,
                    d.region.as_deref().unwrap_or("region")
                ));
            }
            Some(NodeKind::Pmem)
        } else {
            None
        };
        let kind = kind.or_else(|| {
            for d in &hmem {
                ev.push(format!(
                    "{} is specific-purpose memory (EFI_MEMORY_SP, claimed by dax_hmem) onlined into this node by kmem: firmware set it apart, as it does for CXL and HBM",
                    d.name
                ));
            }
            // Rule 4: HBM.
            let hbm = match (node.read_bandwidth_mbps(), dram_bw) {
                (Some(bw), Some((dbw, _))) => {
                    let bw_ok = bw as f64 >= HBM_MIN_BANDWIDTH_RATIO * dbw as f64;
                    let lat_ok = match (node.read_latency_ns(), dram_lat) {
                        (Some(l), Some((dl, _))) => l as f64 <= HBM_MAX_LATENCY_RATIO * dl as f64,
                        _ => false,
                    };
                    bw_ok && lat_ok
                }
                _ => false,
            };
            ev.extend(tier_line.clone());
            ev.extend(hmat_line.clone());
            if hbm {
                ev.push(format!(
                    "HMAT bandwidth at least {HBM_MIN_BANDWIDTH_RATIO}x DRAM's at no more than {HBM_MAX_LATENCY_RATIO}x its latency: only high-bandwidth memory looks like that"
                ));
                return Some(NodeKind::Hbm);
            }
            // Rule 5: as fast as DRAM. HMAT figures, where both sides have them, decide; else the
            // kernel's tier does (it places memory by firmware figures or by how it was onlined).
            let hmat_verdict = match (node.read_latency_ns(), dram_lat, node.read_bandwidth_mbps(), dram_bw) {
                (Some(l), Some((dl, _)), Some(b), Some((db, _))) => Some(
                    l as f64 <= DRAM_LATENCY_RATIO * dl as f64 && b as f64 >= DRAM_BANDWIDTH_RATIO * db as f64,
                ),
                (Some(l), Some((dl, _)), _, _) => Some(l as f64 <= DRAM_LATENCY_RATIO * dl as f64),
                _ => None,
            };
            let same_tier_as_dram = match (node.memory_tier, fastest_tier) {
                (Some(t), Some(f)) => t == f && dram_tiers.contains(&t),
                _ => false,
            };
            let like_dram = hmat_verdict.unwrap_or(same_tier_as_dram);
            if hmat_verdict == Some(false) && same_tier_as_dram {
                ev.push(
                    "the kernel puts it in DRAM's tier, but HMAT says it is slower (kernels before 6.10 tier memory present at boot as DRAM regardless of HMAT)"
                        .to_string(),
                );
            }
            if hmem.is_empty() && like_dram {
                ev.push(
                    if hmat_verdict.is_some() {
                        "no CXL region or dax device maps to it, and HMAT rates it as fast as DRAM: taken as DRAM without local CPUs"
                    } else {
                        "no CXL region or dax device maps to it, and the kernel puts it in DRAM's tier: taken as DRAM without local CPUs (weak: HBM or CXL memory onlined by firmware without performance figures looks the same)"
                    }
                    .to_string(),
                );
                return Some(NodeKind::Dram);
            }
            if hmem.is_empty() {
                ev.push("no CXL region or dax device maps to it: technology unknown".to_string());
            }
            Some(NodeKind::MemoryOnly)
        });
        let kind = kind.unwrap_or(NodeKind::MemoryOnly);
        if matches!(kind, NodeKind::Cxl | NodeKind::Pmem) {
            ev.extend(tier_line);
            ev.extend(hmat_line);
        }
        if let Some(bytes) = cache {
            ev.push(format!(
                "HMAT describes a {} memory-side cache in front of it: it is far memory behind a cache (e.g. HBM cache mode or PMem memory mode)",
                format_bytes(bytes)
            ));
        }
        node.kind = kind;
        node.evidence = ev;
    }
}

fn dax_origin(d: &DaxDevice) -> String {
    match (d.source, &d.region) {
        (DaxSource::Cxl, Some(r)) => format!("CXL {r}"),
        (DaxSource::Nvdimm, Some(r)) => format!("NVDIMM {r}"),
        (s, _) => s.as_str().to_string(),
    }
}

fn tier_summary(tier: u32, fastest: Option<u32>, dram_tiers: &[u32]) -> String {
    let dram = if dram_tiers.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = dram_tiers.iter().map(u32::to_string).collect();
        format!(" (DRAM with CPUs is in tier {})", list.join(", "))
    };
    match fastest {
        Some(f) if f == tier => format!("in memory tier {tier}, the fastest{dram}"),
        // Memory onlined through dax/kmem without HMAT/CDAT figures gets five times DRAM's abstract
        // distance: 2880, tier 22 (MEMTIER_DEFAULT_DAX_ADISTANCE in drivers/dax/kmem.c).
        _ if tier == 22 => format!(
            "in slower memory tier {tier}{dram}: where the kernel puts memory onlined from a dax device without firmware performance figures"
        ),
        _ => format!("in slower memory tier {tier}{dram}"),
    }
}

fn hmat_summary(
    node: &Node,
    dram_lat: Option<(u64, u32)>,
    dram_bw: Option<(u64, u32)>,
) -> Option<String> {
    let a = node.hmat.access0.as_ref()?;
    let mut parts = Vec::new();
    let rel = |v: u64, r: Option<(u64, u32)>| match r {
        Some((d, n)) if n != node.id && d > 0 => format!(" ({:.1}x node {n})", v as f64 / d as f64),
        _ => String::new(),
    };
    if let Some(l) = a.perf.read_latency_ns {
        parts.push(format!("read latency {l} ns{}", rel(l, dram_lat)));
    }
    if let Some(b) = a.perf.read_bandwidth_mbps {
        parts.push(format!("read bandwidth {b} MB/s{}", rel(b, dram_bw)));
    }
    if parts.is_empty() {
        return None;
    }
    let from = if a.initiators.is_empty() {
        String::new()
    } else {
        format!(" from node {}", nodelist::format(&a.initiators))
    };
    Some(format!("HMAT{from}: {}", parts.join(", ")))
}
