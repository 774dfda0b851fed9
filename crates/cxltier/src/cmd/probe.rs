//! `cxltier probe`: measure each memory tier like Intel MLC does, and write a profile.

use crate::error::{CliError, CliResult};
use crate::output::{print_json, Table};
use crate::plot::{line_plot, Series};
use cxltier_probe::host::Host;
use cxltier_probe::report::{Curve, Report, TargetReport, Written};
use cxltier_probe::{plan, profile, Config, ProbeError};
use cxltier_topo::size::Size;
use cxltier_topo::{format_bytes, Topology};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Measure each memory tier like Intel MLC: idle latency, bandwidth per mix, loaded latency.
///
/// For each NUMA node (all memory nodes by default), two buffers are bound to the node with
/// mbind(MPOL_BIND) before first touch, on huge pages where the kernel gives them, and their
/// placement is verified with move_pages. Idle latency is a dependent pointer chase through a random
/// cycle over every cache line of the chase buffer (median of several runs). Bandwidth is measured
/// per read:write mix with one pinned thread per CPU of the node's socket (or --threads), each on its
/// own slice, with wide vector loads and stores chosen for the CPU; non-temporal mixes (2:1nt) use
/// streaming stores. Both requested bytes and memory traffic (read-for-ownership included) are
/// reported: see docs/probe.md.
///
/// --loaded-latency adds MLC-style loaded-latency curves: one thread chases pointers while the
/// others make traffic, throttled by an injected delay swept from long to none. With --weights and
/// two or more --nodes, a buffer interleaved over those nodes (MPOL_WEIGHTED_INTERLEAVE; the kernel's
/// global weights are set for its allocation and restored right after, which needs root) is
/// measured too, so DRAM alone and DRAM+CXL curves land on one plot (--svg).
///
/// --out writes a profile that `cxltier plan --profile` and `cxltier topo --profile` read.
#[derive(clap::Args)]
#[command(long_about)]
pub struct Args {
    /// NUMA nodes to probe, e.g. 0,1 (default: every node with memory)
    #[arg(long, value_name = "LIST")]
    nodes: Option<String>,
    /// Read:write mixes to measure: R, A:B (3:1, 2:1, 1:1), A:Bnt for non-temporal stores, or W2, W3, W5, W10
    #[arg(long, value_name = "LIST", default_value = "R,3:1,2:1,1:1,2:1nt")]
    mixes: String,
    /// Threads per node (default: every CPU of the node, or of the nearest node with CPUs)
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Size of each of the two buffers per node, e.g. 2G (default: 4x the last-level cache, at least 256M)
    #[arg(long, value_name = "SIZE", value_parser = Size::parse)]
    buffer: Option<Size>,
    /// Seconds per bandwidth measurement, and for the idle-latency runs together
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0)]
    duration: f64,
    /// Also measure loaded-latency curves (latency while other threads make traffic)
    #[arg(long)]
    loaded_latency: bool,
    /// Also probe a buffer interleaved over --nodes with these weighted-interleave weights, e.g. 3:1
    #[arg(long, value_name = "W:W", requires = "nodes")]
    weights: Option<String>,
    /// Idle-latency runs per node (the median is reported)
    #[arg(long, value_name = "N", default_value_t = 7)]
    runs: usize,
    /// Use base pages only (no transparent huge pages)
    #[arg(long)]
    no_huge_pages: bool,
    /// Write the results as a profile (TOML) for `cxltier plan --profile`
    #[arg(long, value_name = "PROFILE.toml")]
    out: Option<PathBuf>,
    /// Name of the profile written with --out (default: probe-HOSTNAME)
    #[arg(long, value_name = "NAME", requires = "out")]
    name: Option<String>,
    /// Print JSON for scripts
    #[arg(long)]
    json: bool,
    /// Write SVG plots (bandwidth per mix; loaded-latency curves) into this directory
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
}

pub fn run(args: Args) -> CliResult {
    let root = Path::new("/");
    let topo =
        Topology::discover(root).map_err(|e| CliError::classified(ProbeError::Topology(e)))?;
    let config = Config {
        nodes: args.nodes.clone(),
        mixes: args.mixes.clone(),
        threads: args.threads,
        buffer: args.buffer.clone(),
        duration_s: args.duration,
        loaded_latency: args.loaded_latency,
        weights: args.weights.clone(),
        want_profile: args.out.is_some(),
        latency_runs: args.runs,
        huge_pages: !args.no_huge_pages,
    };
    let host = Host::detect(root);
    let plan = plan(&config, &topo, host).map_err(CliError::classified)?;
    // Output paths are checked before measuring, so a typo does not cost a whole probe.
    if let Some(out) = &args.out {
        profile::check_destination(out).map_err(CliError::classified)?;
    }
    if let Some(dir) = &args.svg {
        std::fs::create_dir_all(dir).map_err(|e| {
            CliError::bad_input(format!(
                "--svg {}: cannot create the directory: {e}",
                dir.display()
            ))
        })?;
    }
    cxltier_probe::preflight(&plan, root).map_err(CliError::classified)?;
    for w in &plan.warnings {
        eprintln!("cxltier: warning: {w}");
    }

    let bar = Bar::new(false);
    let report = cxltier_probe::run(&plan, root, &bar).map_err(CliError::classified)?;
    for w in report.warnings.iter().skip(plan.warnings.len()) {
        eprintln!("cxltier: warning: {w}");
    }

    let mut profile_path = None;
    if let Some(out) = &args.out {
        profile::write(&report, args.name.as_deref(), out).map_err(CliError::classified)?;
        profile_path = Some(out.display().to_string());
    }
    let svg = match &args.svg {
        Some(dir) => write_svgs(dir, &report)?,
        None => Vec::new(),
    };

    if args.json {
        print_json(
            "probe",
            &Written {
                report: &report,
                profile: profile_path,
                svg,
            },
        )?;
    } else {
        print!("{}", render(&report));
        if let Some(p) = profile_path {
            let n = report.profile_tiers();
            if n >= 2 {
                println!("\nprofile written to {p} ({n} tiers); use it with `cxltier plan --profile {p}`");
            } else {
                println!(
                    "\nprofile written to {p} (1 tier: `cxltier topo --profile {p}` shows it; planning \
                     needs two or more tiers, so probe a second node too)"
                );
            }
        }
        for s in &svg {
            println!("plot written to {s}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn gb(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn placement_cell(t: &TargetReport) -> String {
    let c = &t.chase_placement;
    if t.weights.is_some() {
        let shares: Vec<String> = c
            .share_per_node
            .iter()
            .map(|(n, s)| format!("n{n} {:.0}%", s * 100.0))
            .collect();
        format!("verified {}", shares.join(" "))
    } else if c.verified && t.traffic_placement.verified {
        format!(
            "verified ({} pages)",
            c.pages_checked + t.traffic_placement.pages_checked
        )
    } else {
        "NOT verified".into()
    }
}

/// The tables for people.
fn render(r: &Report) -> String {
    let mut out = String::new();
    let threads: Vec<String> = r.thread_counts().iter().map(usize::to_string).collect();
    out.push_str(&format!(
        "cxltier probe on {} ({}), Linux {}\n",
        r.host.hostname, r.host.cpu_model, r.host.kernel
    ));
    out.push_str(&format!(
        "{} buffers x2 per target{}, last-level cache {}, {} s per mix, {} thread(s), loads/stores {}, non-temporal stores {}\n\n",
        format_bytes(r.settings.buffer_bytes),
        if r.settings.huge_pages_requested { format!(" (THP {})", r.host.thp_mode) } else { " (base pages)".into() },
        format_bytes(r.host.llc_bytes),
        r.settings.duration_s,
        threads.join("/"),
        r.host.vector_isa,
        r.host.nt_store_isa,
    ));

    out.push_str(&format!(
        "Idle latency: ns per dependent load, median of {} runs\n",
        r.settings.latency_runs
    ));
    let mut t = Table::new([
        "target",
        "kind",
        "cpus",
        "placement",
        "huge pages",
        "latency ns",
        "min",
        "max",
        "spread",
    ]);
    for x in &r.targets {
        t.row([
            x.name.clone(),
            x.kind
                .map(|k| k.as_str().to_string())
                .unwrap_or_else(|| "interleave".into()),
            cxltier_topo::nodelist::format(&x.cpus),
            placement_cell(x),
            x.huge_page_percent()
                .map_or_else(|| "-".into(), |p| format!("{p:.0}%")),
            format!("{:.1}", x.idle_latency.ns),
            format!("{:.1}", x.idle_latency.min_ns),
            format!("{:.1}", x.idle_latency.max_ns),
            format!("{:.1}%", x.idle_latency.spread_pct),
        ]);
    }
    out.push_str(&t.render());

    out.push_str(
        "\nBandwidth: GB/s (10^9 B/s). requested = bytes the threads read and wrote; traffic adds the\n\
         read-for-ownership of each line written with regular stores (non-temporal stores need none)\n",
    );
    let mut t = Table::new([
        "target",
        "mix",
        "threads",
        "requested",
        "traffic",
        "mem read",
        "mem write",
        "spread",
    ]);
    for x in &r.targets {
        for b in &x.bandwidth {
            t.row([
                x.name.clone(),
                b.mix.to_string(),
                b.threads.to_string(),
                gb(b.requested_gbps),
                gb(b.traffic_gbps),
                gb(b.traffic_read_gbps),
                gb(b.traffic_write_gbps),
                format!("{:.1}%", b.spread_pct),
            ]);
        }
    }
    out.push_str(&t.render());

    for x in &r.targets {
        for c in &x.loaded_latency {
            out.push_str(&format!(
                "\nLoaded latency: {}, mix {} ({} traffic thread(s) + 1 chasing)\n",
                x.name,
                c.mix,
                x.threads.saturating_sub(1).max(1)
            ));
            let mut t = Table::new(["delay", "traffic GB/s", "requested GB/s", "latency ns"]);
            for p in &c.points {
                t.row([
                    p.delay.to_string(),
                    gb(p.traffic_gbps),
                    gb(p.requested_gbps),
                    format!("{:.1}", p.latency_ns),
                ]);
            }
            out.push_str(&t.render());
            if x.kind.is_some() && (c.profile.adjusted > 0 || !c.profile.dropped.is_empty()) {
                out.push_str(&format!(
                    "  for the profile: {} points; latency made never to fall with load (isotonic fit, \
                     at least the idle latency): {} moved, by up to {:.1} ns; {} dropped\n",
                    c.profile.points.len(),
                    c.profile.adjusted,
                    c.profile.max_adjust_ns,
                    c.profile.dropped.len()
                ));
            }
        }
    }
    if !r.weight_changes.is_empty() {
        let ch: Vec<String> = r.weight_changes.iter().map(|c| c.to_string()).collect();
        out.push_str(&format!(
            "\nweighted-interleave table set for the interleaved buffer's allocation ({}) and restored\n",
            ch.join(", ")
        ));
    }
    out.push_str(&format!("\nprobe took {:.1} s\n", r.elapsed_s));
    out
}

/// Plots: bandwidth per mix for every target, and one loaded-latency plot per mix with every target's
/// curve (so DRAM alone and DRAM+CXL interleaved share the axes).
fn write_svgs(dir: &Path, r: &Report) -> Result<Vec<String>, CliError> {
    let series = |curves: Vec<Curve>| -> Vec<Series> {
        curves
            .into_iter()
            .map(|c| Series {
                name: c.name,
                points: c.points,
                marked: None,
                labels: Vec::new(),
            })
            .collect()
    };
    let mut written = Vec::new();
    let bandwidth = series(r.bandwidth_curves());
    if !bandwidth.is_empty() {
        let path = dir.join("bandwidth.svg");
        line_plot(
            &path,
            &format!("Memory traffic by read share ({})", r.host.hostname),
            "reads, % of requests",
            "GB/s (memory traffic)",
            &bandwidth,
        )?;
        written.push(path.display().to_string());
    }
    for &mix in &r.settings.mixes {
        let loaded = series(r.loaded_latency_curves(mix));
        if loaded.is_empty() {
            continue;
        }
        let file = mix.to_string().replace(':', "-");
        let path = dir.join(format!("loaded-latency-{file}.svg"));
        line_plot(
            &path,
            &format!("Loaded latency, mix {mix} ({})", r.host.hostname),
            "GB/s (memory traffic)",
            "latency, ns",
            &loaded,
        )?;
        written.push(path.display().to_string());
    }
    Ok(written)
}

/// An indicatif bar on stderr, in tenths of a second of estimated work.
pub struct Bar {
    bar: indicatif::ProgressBar,
}

impl Bar {
    /// A bar on stderr; `hidden` forces it off (it is off anyway when stderr is not a terminal).
    pub fn new(hidden: bool) -> Bar {
        let target = if hidden {
            indicatif::ProgressDrawTarget::hidden()
        } else {
            indicatif::ProgressDrawTarget::stderr()
        };
        let bar = indicatif::ProgressBar::with_draw_target(Some(0), target);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] [{bar:28}] {percent:>3}% (~{eta} left) {msg}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        Bar { bar }
    }
}

impl cxltier_probe::ProgressSink for Bar {
    fn start(&self, total_s: f64) {
        self.bar.set_length((total_s * 10.0).ceil().max(1.0) as u64);
        self.bar
            .enable_steady_tick(std::time::Duration::from_millis(200));
    }
    fn phase(&self, text: &str) {
        self.bar.set_message(text.to_string());
    }
    fn advance(&self, secs: f64) {
        self.bar.inc((secs * 10.0).round() as u64);
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
