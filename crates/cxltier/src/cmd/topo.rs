//! `cxltier topo`: show the memory tiers of this machine (or of a recorded sysfs tree, or of a
//! platform profile).

use crate::error::{Class, CliError, CliResult};
use crate::output::{print_json, Table};
use cxltier_profile::{Mix, Profile};
use cxltier_topo::{format_bytes, nodelist, NodeKind, TopoError, Topology};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Show the memory tiers: NUMA nodes, HMAT figures, kernel memory tiers, CXL devices, NVMe.
///
/// Each memory node is classified (dram, cxl, pmem, hbm, memory-only) with the evidence for it.
/// With --profile, shows a platform profile's tiers instead of the live machine.
#[derive(clap::Args)]
#[command(long_about)]
pub struct Args {
    /// Read sysfs below DIR instead of / (a recorded tree: DIR/sys/devices/system/node, ...)
    #[arg(long, value_name = "DIR", conflicts_with = "profile")]
    sysfs_root: Option<PathBuf>,
    /// Show this platform profile's tiers: a built-in name or a path to a profile TOML file
    #[arg(long, value_name = "NAME|PATH")]
    profile: Option<String>,
    /// Print JSON for scripts
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CliResult {
    if let Some(spec) = &args.profile {
        return show_profile(spec, args.json);
    }
    let root = args
        .sysfs_root
        .clone()
        .unwrap_or_else(|| PathBuf::from("/"));
    let topo = Topology::discover(&root).map_err(|e| topo_error(e, args.sysfs_root.is_some()))?;
    if args.json {
        print_json(&topo)?;
    } else {
        print!("{}", render(&topo, args.sysfs_root.as_deref()));
    }
    Ok(ExitCode::SUCCESS)
}

/// The library's classification, except that a tree named with `--sysfs-root` that is not one
/// (no node directory, no nodes, garbled files) is the user's mistake, not the machine's.
fn topo_error(err: TopoError, explicit_root: bool) -> CliError {
    match err {
        TopoError::NoNodes { path } if explicit_root => CliError::bad_input(format!(
            "{} does not exist: the --sysfs-root directory is not a recorded sysfs tree",
            path.display()
        ))
        .with_hint(
            "pass the directory that contains sys/ (record one with crates/cxltier-topo/tests/fixtures/record.sh), or omit --sysfs-root for this machine",
        ),
        TopoError::NoNodeEntries { .. } | TopoError::Garbled { .. } if explicit_root => {
            CliError::classified(err).with_class(Class::BadInput)
        }
        _ => CliError::classified(err),
    }
}

fn dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".to_string())
}

/// The human report, in the manner of `numactl -H` and `cxl list`.
fn render(t: &Topology, root: Option<&Path>) -> String {
    let mut out = String::new();
    if let Some(root) = root {
        out.push_str(&format!("sysfs root: {}\n\n", root.display()));
    }

    let mut nodes = Table::new([
        "node",
        "kind",
        "cpus",
        "total",
        "free",
        "tier",
        "read ns",
        "write ns",
        "read MB/s",
        "write MB/s",
    ]);
    for n in &t.nodes {
        let a = n.hmat.access0.as_ref().map(|a| a.perf).unwrap_or_default();
        let num = |v: Option<u64>| dash(v.map(|v| v.to_string()));
        let cpus = if n.cpus.is_empty() {
            "-".to_string()
        } else {
            nodelist::format(&n.cpus)
        };
        let id = if n.online {
            n.id.to_string()
        } else {
            format!("{} (offline)", n.id)
        };
        nodes.row([
            id,
            n.kind.to_string(),
            cpus,
            format_bytes(n.mem_total_bytes),
            format_bytes(n.mem_free_bytes),
            num(n.memory_tier.map(u64::from)),
            num(a.read_latency_ns),
            num(a.write_latency_ns),
            num(a.read_bandwidth_mbps),
            num(a.write_bandwidth_mbps),
        ]);
    }
    out.push_str(&nodes.render());
    if t.nodes.iter().any(|n| n.hmat.access0.is_some()) {
        out.push_str(
            "(latency and bandwidth: firmware HMAT figures from each node's nearest initiators)\n",
        );
    }

    let groups: Vec<String> = t
        .tier_order
        .groups
        .iter()
        .map(|g| format!("[{}]", nodelist::format(g)))
        .collect();
    if !groups.is_empty() {
        out.push_str(&format!(
            "\ntier order, fastest first: {}  (by {})\n",
            groups.join(" > "),
            t.tier_order.basis.as_str()
        ));
    }

    for n in t
        .nodes
        .iter()
        .filter(|n| n.kind != NodeKind::Dram || n.evidence.iter().any(|e| e.contains("CXL")))
    {
        out.push_str(&format!("\nnode {} is {}:\n", n.id, n.kind));
        for e in &n.evidence {
            out.push_str(&format!("  - {e}\n"));
        }
    }

    out.push('\n');
    if t.cxl.memdevs.is_empty() && t.cxl.regions.is_empty() {
        out.push_str("CXL: no memory devices\n");
    } else {
        let mut m = Table::new([
            "memdev",
            "serial",
            "firmware",
            "ram",
            "pmem",
            "pci address",
            "pci node",
            "region",
            "node",
        ]);
        for d in &t.cxl.memdevs {
            m.row([
                d.name.clone(),
                dash(d.serial.map(|s| format!("{s:#x}"))),
                dash(d.firmware_version.clone()),
                format_bytes(d.ram_bytes),
                format_bytes(d.pmem_bytes),
                dash(d.pci_address.clone()),
                dash(d.numa_node.map(|n| n.to_string())),
                if d.regions.is_empty() {
                    "-".to_string()
                } else {
                    d.regions.join(",")
                },
                dash(d.node.map(|n| n.to_string())),
            ]);
        }
        out.push_str("CXL memory devices:\n");
        out.push_str(&m.render());
        if !t.cxl.regions.is_empty() {
            let mut r = Table::new(["region", "mode", "size", "ways", "memdevs", "dax", "node"]);
            for g in &t.cxl.regions {
                r.row([
                    g.name.clone(),
                    g.mode.clone(),
                    format_bytes(g.size_bytes),
                    dash(g.interleave_ways.map(|w| w.to_string())),
                    if g.memdevs.is_empty() {
                        "-".to_string()
                    } else {
                        g.memdevs.join(",")
                    },
                    if g.dax.is_empty() {
                        "-".to_string()
                    } else {
                        g.dax.join(",")
                    },
                    dash(g.node.map(|n| n.to_string())),
                ]);
            }
            out.push_str("\nCXL regions:\n");
            out.push_str(&r.render());
        } else {
            out.push_str("CXL regions: none (create one with `cxl create-region`)\n");
        }
    }
    let mut d = Table::new(["dax", "source", "region", "mode", "size", "target node"]);
    for x in &t.dax {
        d.row([
            x.name.clone(),
            x.source.as_str().to_string(),
            dash(x.region.clone()),
            x.mode.as_str().to_string(),
            dash(x.size_bytes.map(format_bytes)),
            dash(x.target_node.map(|n| n.to_string())),
        ]);
    }
    if !d.is_empty() {
        out.push_str("\ndax devices:\n");
        out.push_str(&d.render());
    }

    let wi = &t.weighted_interleave;
    out.push('\n');
    if wi.supported {
        let weights: Vec<String> = wi
            .weights
            .iter()
            .map(|(n, w)| format!("node{n}={w}"))
            .collect();
        let auto = match wi.auto {
            Some(true) => "auto (the kernel sets weights from firmware bandwidth)",
            Some(false) => "manual",
            None => "manual (this kernel has no auto mode)",
        };
        out.push_str(&format!(
            "weighted interleave: supported, {auto}; weights: {}\n",
            if weights.is_empty() {
                "none".to_string()
            } else {
                weights.join(" ")
            }
        ));
    } else {
        out.push_str(
            "weighted interleave: not supported by this kernel (needs Linux 6.9 or later)\n",
        );
    }

    out.push('\n');
    if t.nvme.is_empty() {
        out.push_str("NVMe: none\n");
    } else {
        let mut v = Table::new([
            "nvme",
            "model",
            "serial",
            "firmware",
            "transport",
            "address",
            "node",
            "namespaces",
        ]);
        for c in &t.nvme {
            let ns: Vec<String> = c
                .namespaces
                .iter()
                .map(|n| match n.logical_block_size {
                    Some(b) => format!("{} ({}, {b} B blocks)", n.name, format_bytes(n.size_bytes)),
                    None => format!("{} ({})", n.name, format_bytes(n.size_bytes)),
                })
                .collect();
            v.row([
                c.name.clone(),
                dash(c.model.clone()),
                dash(c.serial.clone()),
                dash(c.firmware_rev.clone()),
                dash(c.transport.clone()),
                dash(c.address.clone()),
                dash(c.numa_node.map(|n| n.to_string())),
                if ns.is_empty() {
                    "-".to_string()
                } else {
                    ns.join(", ")
                },
            ]);
        }
        out.push_str("NVMe:\n");
        out.push_str(&v.render());
    }

    if !t.warnings.is_empty() {
        out.push_str("\nwarnings:\n");
        for w in &t.warnings {
            out.push_str(&format!("  - {w}\n"));
        }
    }
    out
}

fn show_profile(spec: &str, json: bool) -> CliResult {
    let profile = Profile::load(spec).map_err(|e| {
        CliError::classified(e)
            .with_hint("fix the profile (format in docs/profiles.md) or name a built-in one, e.g. --profile xeon6-6900p-8xcz122")
    })?;
    if json {
        print_json(&profile)?;
    } else {
        print!("{}", render_profile(&profile));
    }
    Ok(ExitCode::SUCCESS)
}

fn render_profile(p: &Profile) -> String {
    let mut out = format!("profile {} ({})\n{}\n", p.name, p.origin, p.description);
    if !p.source.is_empty() {
        out.push_str(&format!("source: {}\n", p.source));
    }
    // One column per mix any tier lists, in the profile's order.
    let mut mixes: Vec<Mix> = Vec::new();
    for t in &p.tiers {
        for b in &t.bandwidth {
            if !mixes.contains(&b.mix) {
                mixes.push(b.mix);
            }
        }
    }
    // Read-only first, then by falling read share; regular stores before non-temporal ones.
    mixes.sort_by(|a, b| {
        b.read_fraction()
            .total_cmp(&a.read_fraction())
            .then(a.is_non_temporal().cmp(&b.is_non_temporal()))
    });
    let mut header = vec![
        "tier".to_string(),
        "kind".into(),
        "nodes".into(),
        "capacity".into(),
        "idle ns".into(),
    ];
    header.extend(mixes.iter().map(|m| format!("{m} GB/s")));
    let mut table = Table::new(header);
    for t in &p.tiers {
        let mut row = vec![
            t.name.clone(),
            t.kind.as_str().to_string(),
            if t.nodes.is_empty() {
                "-".to_string()
            } else {
                nodelist::format(&t.nodes)
            },
            format_bytes(t.capacity_bytes),
            format!("{:.0}", t.idle_latency_ns),
        ];
        for m in &mixes {
            row.push(match t.bandwidth.iter().find(|b| b.mix == *m) {
                Some(b) => format!("{:.1}", b.gbps),
                None => "-".to_string(),
            });
        }
        table.row(row);
    }
    out.push('\n');
    out.push_str(&table.render());
    out
}
