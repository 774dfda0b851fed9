//! `cxltier topo`: show the memory tiers of this machine (or of a recorded sysfs tree, or of a
//! platform profile).

use crate::error::{CliError, CliResult};
use crate::output::{json_line, print_json, Table};
use cxltier_advice::ProfileChoice;
use cxltier_profile::Profile;
use cxltier_topo::{format_bytes, nodelist, nodes_in_words, CounterSamples, NodeKind, Topology};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Show the memory tiers: NUMA nodes, HMAT figures, kernel memory tiers, CXL devices, NVMe, and
/// the kernel's own tiering (NUMA balancing, demotion, their counters).
///
/// Each memory node is classified (dram, cxl, pmem, hbm, memory-only) with the evidence for it.
/// With --profile, shows a platform profile's tiers instead of the live machine. With --watch S,
/// then samples the kernel's promotion, demotion, NUMA balancing and migration counters
/// (/proc/vmstat) every S seconds and prints their rates per second (with --json: one JSON object
/// per line per sample, the first with the counters only).
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
    /// Then sample the kernel's tiering counters every SECONDS and print their rates per second
    #[arg(long, value_name = "SECONDS", conflicts_with = "profile")]
    watch: Option<f64>,
    /// With --watch: stop after this many samples with rates (default: until interrupted)
    #[arg(long, value_name = "N", requires = "watch")]
    count: Option<u64>,
}

pub fn run(args: Args) -> CliResult {
    if let Some(spec) = &args.profile {
        return show_profile(spec, args.json);
    }
    let root = args
        .sysfs_root
        .clone()
        .unwrap_or_else(|| PathBuf::from("/"));
    let interval = match args.watch {
        Some(s) if !(s.is_finite() && s > 0.0 && s <= 86400.0) => {
            return Err(CliError::bad_input(format!(
                "--watch {s}: expected a number of seconds above 0 (at most a day), e.g. --watch 1"
            )))
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    // A tree named with --sysfs-root that is not one is the user's mistake, not the machine's.
    let topo = Topology::discover(&root)
        .map_err(|e| match args.sysfs_root {
            Some(_) => e.below_named_root(),
            None => e,
        })
        .map_err(CliError::classified)?;
    match interval {
        // With --json, --watch prints samples only: one JSON object per line.
        Some(_) if args.json => {}
        _ if args.json => print_json("topo", &topo)?,
        _ => print!("{}", render(&topo, args.sysfs_root.as_deref())),
    }
    if let Some(interval) = interval {
        watch(&root, &topo, interval, args.count, args.json)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--watch`: sample the counters every `interval`, printing rates per second between samples.
fn watch(
    root: &Path,
    topo: &Topology,
    interval: Duration,
    count: Option<u64>,
    json: bool,
) -> Result<(), CliError> {
    let samples = CounterSamples::new(root, interval)
        .count(count)
        .starting_from(topo.kernel_tiering.counters.clone());
    let mut out = std::io::stdout().lock();
    for sample in samples {
        let sample = sample.map_err(CliError::classified)?;
        match (&sample.previous, &sample.rates_per_s, sample.interval_s) {
            _ if json => writeln!(out, "{}", json_line("topo", "sample", &sample)?)?,
            (Some(before), Some(rates), Some(seconds)) => write!(
                out,
                "{}",
                render_rates(before, &sample.counters, rates, seconds)
            )?,
            _ => writeln!(
                out,
                "\nwatching the kernel's tiering counters every {:.1} s (Ctrl-C stops)",
                interval.as_secs_f64()
            )?,
        }
        out.flush()?;
    }
    Ok(())
}

/// The counters that changed over one `--watch` interval, with their rates.
fn render_rates(
    before: &BTreeMap<String, u64>,
    now: &BTreeMap<String, u64>,
    rates: &BTreeMap<String, f64>,
    seconds: f64,
) -> String {
    let mut out = format!("\nover {seconds:.1} s:\n");
    let mut t = Table::new(["counter", "value", "change", "per second"]);
    for (name, rate) in rates {
        let (then, value) = (before[name], now[name]);
        if value != then {
            t.row([
                name.clone(),
                value.to_string(),
                format!("{:+}", value as i128 - then as i128),
                format!("{rate:.1}"),
            ]);
        }
    }
    if t.is_empty() {
        out.push_str("  no counter changed\n");
    } else {
        out.push_str(&t.render());
    }
    out
}

fn dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".to_string())
}

/// Names separated by commas, or `-` for none.
fn joined(names: &[String]) -> String {
    dash((!names.is_empty()).then(|| names.join(",")))
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
                joined(&d.regions),
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
                    joined(&g.memdevs),
                    joined(&g.dax),
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

    out.push_str(&format!(
        "\nweighted interleave: {}\n",
        t.weighted_interleave.summary()
    ));

    out.push_str(&render_kernel_tiering(t));

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
            let ns: Vec<String> = c.namespaces.iter().map(|n| n.to_string()).collect();
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

/// The kernel's own tiering: what is on, which nodes it moves pages from, and its counters.
fn render_kernel_tiering(t: &Topology) -> String {
    const UNSUPPORTED: &str = "not supported by this kernel (or not in the recorded tree)";
    let k = &t.kernel_tiering;
    let mut out = String::from("\nkernel tiering:\n");
    out.push_str("  NUMA balancing: ");
    out.push_str(&t.numa_balancing_summary().unwrap_or(UNSUPPORTED.into()));
    out.push_str("\n  demotion: ");
    out.push_str(&t.demotion_summary().unwrap_or(UNSUPPORTED.into()));
    out.push_str("\n  memory tiers: ");
    if t.memory_tiers.is_empty() {
        out.push_str("none shown (Linux 6.1 or later shows them)");
    } else {
        let tiers: Vec<String> = t
            .memory_tiers
            .iter()
            .map(|m| {
                let mut s = format!("memory_tier{} = {}", m.id, nodes_in_words(&m.nodes));
                if let Some(d) = m.abstract_distance {
                    s.push_str(&format!(" (abstract distance {d})"));
                }
                s
            })
            .collect();
        out.push_str(&tiers.join("; "));
        if t.memory_tiers.len() > 1 {
            out.push_str(" (fastest first)");
        }
    }
    out.push('\n');
    match &k.counters {
        None => out.push_str(&format!("  counters (/proc/vmstat): {UNSUPPORTED}\n")),
        Some(c) if c.is_empty() => {
            out.push_str("  counters (/proc/vmstat): none about promotion, demotion or NUMA\n")
        }
        Some(c) => {
            out.push_str("  counters (/proc/vmstat, since boot; rates with --watch S):\n");
            let mut table = Table::new(["counter", "value"]);
            for (name, value) in c {
                table.row([name.clone(), value.to_string()]);
            }
            for line in table.render().lines() {
                out.push_str(&format!("    {line}\n"));
            }
        }
    }
    out
}

fn show_profile(spec: &str, json: bool) -> CliResult {
    let profile = ProfileChoice::load(Some(spec))
        .map_err(CliError::classified)?
        .profile;
    if json {
        print_json("topo", &profile)?;
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
    // One column per mix any tier lists.
    let mixes = p.bandwidth_mixes();
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
