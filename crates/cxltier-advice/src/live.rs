//! A profile of the live machine, built from the firmware's performance tables (HMAT, or CDAT for CXL
//! devices) as the kernel shows them in `nodeN/access0/initiators/`.
//!
//! Firmware gives a read and a write bandwidth and latency per node; a profile wants peak bandwidth per
//! read:write mix. A mix with read fraction `r` is taken to run at `1 / (r/B_read + (1-r)/B_write)`
//! (time per byte adds up), and idle latency is the read latency. The probe replaces these estimates
//! with measurements.

use crate::AdviceError;
use cxltier_profile::{Mix, MixBandwidth, Platform, Profile, Tier, TierKind};
use cxltier_topo::Topology;
use std::path::Path;

/// The live machine (`/`) as a profile, or why it cannot be one.
pub fn live_profile() -> Result<Profile, AdviceError> {
    let topo = Topology::discover(Path::new("/")).map_err(AdviceError::TopologyUnreadable)?;
    profile_from_topology(&topo)
}

/// The kernel reports HMAT/CDAT bandwidth in MiB/s (Documentation/admin-guide/mm/numaperf.rst);
/// profiles use GB/s (10^9 B/s), as MLC and STREAM do.
fn mib_per_s_to_gbps(mib_per_s: u64) -> f64 {
    mib_per_s as f64 * 1_048_576.0 / 1e9
}

/// Build a profile from a discovered topology: one tier per group of the topology's tier order, with
/// the nodes' firmware figures. Fails when there are fewer than two memory tiers or a tier's nodes lack
/// firmware performance figures.
pub fn profile_from_topology(topo: &Topology) -> Result<Profile, AdviceError> {
    let groups: Vec<Vec<u32>> = topo
        .tier_order()
        .groups
        .iter()
        .map(|g| {
            g.iter()
                .copied()
                .filter(|&n| topo.node(n).is_some_and(|node| node.has_memory()))
                .collect::<Vec<u32>>()
        })
        .filter(|g| !g.is_empty())
        .collect();
    if groups.len() < 2 {
        let nodes: Vec<String> = topo.memory_nodes().map(|n| n.id.to_string()).collect();
        return Err(AdviceError::SingleTier {
            nodes: nodes.join(","),
        });
    }
    let mut tiers: Vec<Tier> = Vec::new();
    for group in &groups {
        let (mut read_gbps, mut write_gbps, mut latency_sum, mut capacity) = (0.0, 0.0, 0.0, 0u64);
        for &id in group {
            let node = topo.node(id).expect("grouped nodes exist");
            let perf = node
                .hmat
                .access0
                .as_ref()
                .map(|a| a.perf)
                .filter(|p| p.read_bandwidth_mbps.is_some() && p.read_latency_ns.is_some())
                .ok_or(AdviceError::NoFirmwareFigures { node: id })?;
            let read = mib_per_s_to_gbps(perf.read_bandwidth_mbps.unwrap_or_default());
            read_gbps += read;
            write_gbps += perf.write_bandwidth_mbps.map_or(read, mib_per_s_to_gbps);
            latency_sum += perf.read_latency_ns.unwrap_or_default() as f64;
            capacity += node.mem_total_bytes;
        }
        let first = topo.node(group[0]).expect("grouped nodes exist");
        let kind = TierKind::for_node_kind(first.kind.as_str());
        let mut name = kind.as_str().to_string();
        if tiers.iter().any(|t| t.name == name) {
            name = format!(
                "{name}-n{}",
                group
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join("-")
            );
        }
        let bandwidth = Mix::common()
            .iter()
            .map(|&mix| {
                let r = mix.read_fraction();
                MixBandwidth {
                    mix,
                    gbps: 1.0 / (r / read_gbps + (1.0 - r) / write_gbps),
                }
            })
            .collect();
        tiers.push(Tier {
            name,
            kind,
            nodes: group.clone(),
            capacity_bytes: capacity,
            idle_latency_ns: latency_sum / group.len() as f64,
            bandwidth,
            firmware_bandwidth_gbps: Some(read_gbps.min(write_gbps)),
            loaded_latency: Vec::new(),
        });
    }
    Profile::from_parts(
        "live",
        "this machine, from firmware performance tables",
        &format!(
            "firmware HMAT/CDAT figures via sysfs; tiers by {}",
            topo.tier_order().basis.as_str()
        ),
        "live:/sys",
        Platform {
            cores: None,
            line_bytes: 64,
        },
        tiers,
    )
    .map_err(AdviceError::Profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Topology {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../cxltier-topo/tests/fixtures")
            .join(name);
        Topology::discover(&root).expect("fixture")
    }

    #[test]
    fn hmat_lab_machine_becomes_a_two_tier_profile() {
        let p = profile_from_topology(&fixture("lab-hmat")).unwrap();
        assert_eq!(p.tiers.len(), 2);
        assert_eq!(
            (p.tiers[0].nodes.clone(), p.tiers[1].nodes.clone()),
            (vec![0], vec![1])
        );
        assert_eq!(
            (p.tiers[0].idle_latency_ns, p.tiers[1].idle_latency_ns),
            (100.0, 250.0)
        );
        assert_eq!(p.tiers[0].kind, TierKind::Dram);
        // HMAT gives 102400 and 40960 MiB/s for reads and writes alike: every mix gets that figure.
        // QEMU was told 100G and 40G (GiB/s): 107.37 and 42.95 GB/s.
        assert!((p.tiers[0].peak_bandwidth(Mix::READ_ONLY) - 107.374_182_4).abs() < 1e-6);
        assert!((p.tiers[1].peak_bandwidth("1:1".parse().unwrap()) - 42.949_672_96).abs() < 1e-6);
        assert!((p.tiers[1].firmware_bandwidth() - 42.949_672_96).abs() < 1e-6);
    }

    #[test]
    fn tiers_without_firmware_figures_are_refused() {
        let e = profile_from_topology(&fixture("lab-cxl"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("has no firmware (HMAT/CDAT)"), "{e}");
        let e = profile_from_topology(&fixture("this-host"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("single memory tier"), "{e}");
    }
}
