//! `cxltier touch SIZE`: allocate, touch, and report where the pages landed.

use crate::error::{CliError, CliResult};
use crate::output::{json_line, print_json, Table};
use cxltier_control::placement::{self, PlacementReport};
use cxltier_tierd::workload::{self, ChaseSummary, HotSet, HotSetSummary, StreamSummary};
use cxltier_tierd::TierdError;
use cxltier_topo::format_bytes;
use cxltier_topo::size::parse_size;
use serde::Serialize;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// The long help: what the command does, exactly.
const LONG_HELP: &str = "\
Maps SIZE bytes of anonymous memory, writes every page once in address order under the memory
policy cxltier runs with (start it under one with `cxltier run ... -- cxltier touch SIZE`), then
asks the kernel where each page is (move_pages(2) in query mode). Transparent huge pages are
disabled for the memory (MADV_NOHUGEPAGE) unless --huge, so that each base page is placed on its
own: a huge page lands whole on one node and would skew the counts. Without --huge they are
disabled for the whole process too (PR_SET_THP_DISABLE, then the program runs itself again with the
same pid and arguments), so that its own heap holds no huge page either.

SIZE: bytes (4096), or a number with a unit: 64K, 64M, 1G, 64MiB, 1.5G (K/M/G/T and
KiB/MiB/GiB/TiB are powers of 1024; KB/MB/GB/TB powers of 1000).

With --hot HOT the memory becomes a workload whose hot set moves: after touching every page it
keeps writing the pages of one window of HOT bytes, and every --shift-every seconds the window
moves to the next HOT bytes (wrapping around), for --duration seconds or until SIGINT or SIGTERM.
Every --report-every seconds it prints which window is hot and on which node its pages are (with
--json, one JSON object per line), and at the end, however it ends, it checks that every page holds
what was last written to it (exit status 1 if not): a test workload for `cxltier tierd`.

With --stream or --chase the memory becomes a timed loop for footprint sweeps (how a workload slows
down as its memory spills from DRAM to CXL and swap): --stream fills it with a pattern and reads it
over and over in address order (bandwidth-bound), --chase makes it a pointer chase through every
64-byte line in an order the CPU cannot prefetch (latency-bound, as multichase). Both print a
`ready` line once the memory is written (the moment to apply a limit or start `cxltier tierd`),
run --warmup seconds and then --duration seconds (or until SIGINT or SIGTERM), and report the
measured period's rate (bytes_per_second, ns_per_step) and a check of their memory: every whole
stream pass must sum to the pattern's sum, and every line of the chase must still hold its
successor (exit status 1 if not).";

/// Allocate and touch memory under the current policy and report which node each page landed on.
#[derive(clap::Args)]
#[command(after_long_help = LONG_HELP)]
pub struct Args {
    /// How much memory to touch: 4096, 64K, 64M, 1G, 64MiB ...
    #[arg(value_name = "SIZE", value_parser = parse_size)]
    size: u64,
    /// Print JSON for scripts
    #[arg(long)]
    json: bool,
    /// Keep the memory mapped for SECONDS after reporting (to inspect it, e.g. with `cxltier show --pid`)
    #[arg(long, value_name = "SECONDS")]
    hold: Option<f64>,
    /// Allow transparent huge pages (MADV_HUGEPAGE) instead of forbidding them
    #[arg(long)]
    huge: bool,
    /// Keep writing a window of this many bytes (a hot set that moves; see --help)
    #[arg(long, value_name = "SIZE", conflicts_with = "hold", value_parser = parse_size)]
    hot: Option<u64>,
    /// With --hot: move the hot window every SECONDS
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, requires = "hot")]
    shift_every: f64,
    /// With --hot, --stream or --chase: run this long (or until SIGINT or SIGTERM); with
    /// --stream or --chase, after --warmup
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    duration: f64,
    /// With --stream or --chase: run this long before the measured period
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0)]
    warmup: f64,
    /// With --hot: report every SECONDS
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0, requires = "hot")]
    report_every: f64,
    /// Read the memory over and over for --duration seconds (a bandwidth-bound loop; with
    /// --progress-file, the progress signal for `tierd --tune`)
    #[arg(long, conflicts_with_all = ["hold", "huge", "hot"])]
    stream: bool,
    /// Chase pointers through the memory for --duration seconds (a latency-bound loop)
    #[arg(long, conflicts_with_all = ["hold", "huge", "hot", "stream"])]
    chase: bool,
    /// With --stream: the file that holds the bytes read so far
    #[arg(long, value_name = "FILE", requires = "stream")]
    progress_file: Option<std::path::PathBuf>,
    /// With --stream: allocate and write a fresh buffer of SIZE once --fresh-when's file exists,
    /// and print where its pages landed (where the process's new allocations go)
    #[arg(long, value_name = "SIZE", requires_all = ["stream", "fresh_when"], value_parser = parse_size)]
    fresh: Option<u64>,
    /// With --fresh: the file whose appearance triggers the fresh buffer
    #[arg(long, value_name = "FILE", requires = "fresh")]
    fresh_when: Option<std::path::PathBuf>,
}

fn seconds(flag: &str, s: f64) -> Result<Duration, CliError> {
    workload::period(flag, s).map_err(CliError::classified)
}

fn warmup(args: &Args) -> Result<Duration, CliError> {
    workload::warmup(args.warmup).map_err(CliError::classified)
}

/// Print the `ready` line (the workload's memory is written) at once: a script waits for it.
fn print_ready(json: bool, r: &workload::Ready) {
    let line = if json {
        json_line("touch", "ready", r).unwrap_or_default()
    } else {
        format!(
            "ready: pid {}, {} written in {:.2} s",
            r.pid,
            format_bytes(r.bytes),
            r.init_seconds
        )
    };
    println!("{line}");
    let _ = std::io::stdout().flush();
}

/// Print a workload's last line (JSON, or `text` for people), then its memory's check as the
/// exit status.
fn finish<S: Serialize>(
    json: bool,
    event: &str,
    summary: Result<S, TierdError>,
    text: impl FnOnce(&S) -> String,
    check: impl FnOnce(&S) -> Result<(), TierdError>,
) -> CliResult {
    let summary = summary.map_err(CliError::classified)?;
    if json {
        println!("{}", json_line("touch", event, &summary)?);
    } else {
        println!("{}", text(&summary));
    }
    check(&summary).map_err(CliError::classified)?;
    Ok(ExitCode::SUCCESS)
}

fn stream(args: &Args, bytes: u64) -> CliResult {
    let s = workload::Stream {
        bytes,
        warmup: warmup(args)?,
        duration: seconds("--duration", args.duration)?,
        progress_file: args.progress_file.clone(),
        fresh: args
            .fresh
            .map(|size| (size, args.fresh_when.clone().expect("clap requires it"))),
    };
    let stop = crate::cmd::stop_flag()?;
    let json = args.json;
    let summary = s.run(
        &stop,
        |r| print_ready(json, r),
        |f| {
            if json {
                if let Ok(line) = json_line("touch", "fresh_buffer", f) {
                    println!("{line}");
                }
            } else {
                let nodes: Vec<String> = f
                    .nodes
                    .iter()
                    .map(|(n, p)| format!("node{n} {p}"))
                    .collect();
                println!("fresh buffer: {} pages: {}", f.pages, nodes.join(", "));
            }
        },
    );
    let text = |summary: &StreamSummary| {
        let verdict = if summary.intact {
            "every pass intact".to_string()
        } else {
            format!("{} passes with a wrong sum", summary.bad_passes)
        };
        format!(
            "read {} bytes in {:.1} s; after the warmup {}/s over {:.1} s; {} passes, {verdict}",
            summary.bytes_read,
            summary.seconds,
            format_bytes(summary.bytes_per_second as u64),
            summary.measured_seconds,
            summary.passes,
        )
    };
    finish(json, "stream_summary", summary, text, StreamSummary::check)
}

fn chase(args: &Args, bytes: u64) -> CliResult {
    let c = workload::Chase {
        bytes,
        warmup: warmup(args)?,
        duration: seconds("--duration", args.duration)?,
    };
    let stop = crate::cmd::stop_flag()?;
    let json = args.json;
    let summary = c.run(&stop, |r| print_ready(json, r));
    let text = |summary: &ChaseSummary| {
        format!(
            "{} steps through {} lines in {:.1} s; after the warmup {:.1} ns per step over {:.1} s; {}",
            summary.steps,
            summary.lines,
            summary.seconds,
            summary.ns_per_step,
            summary.measured_seconds,
            if summary.intact {
                "the chain is intact"
            } else {
                "the chain is BROKEN"
            }
        )
    };
    finish(json, "chase_summary", summary, text, ChaseSummary::check)
}

fn moving_hot_set(args: &Args, bytes: u64, hot_bytes: u64) -> CliResult {
    let w = HotSet {
        bytes,
        hot_bytes,
        shift_every: seconds("--shift-every", args.shift_every)?,
        duration: seconds("--duration", args.duration)?,
        report_every: seconds("--report-every", args.report_every)?,
        pause: Duration::from_millis(1),
        huge: args.huge,
    };
    w.validate().map_err(CliError::classified)?;
    let stop = crate::cmd::stop_flag()?;
    let json = args.json;
    let summary = w.run(&stop, |r| {
        let line = if json {
            json_line("touch", "hot_set", r).unwrap_or_default()
        } else {
            let on: Vec<String> = r
                .hot_nodes
                .iter()
                .map(|(n, p)| format!("node{n} {p}"))
                .collect();
            format!(
                "{:6.1}s window {} ({} pages at {:#x}): {}",
                r.t_s,
                r.window,
                r.hot_pages,
                r.hot_start,
                on.join(", ")
            )
        };
        println!("{line}");
        let _ = std::io::stdout().flush();
    });
    let text = |summary: &HotSetSummary| {
        let verdict = if summary.intact {
            "every page intact".to_string()
        } else {
            format!("{} pages CORRUPT", summary.corrupt_pages)
        };
        format!(
            "done: {} pages, {} passes, {verdict}",
            summary.pages, summary.passes
        )
    };
    finish(json, "hot_set_summary", summary, text, HotSetSummary::check)
}

#[derive(Serialize)]
struct Report<'a> {
    pid: u32,
    #[serde(flatten)]
    placement: &'a PlacementReport,
}

pub fn run(args: Args) -> CliResult {
    let bytes = args.size;
    if !args.huge {
        without_huge_pages()?;
    }
    if let Some(hot) = args.hot {
        return moving_hot_set(&args, bytes, hot);
    }
    if args.stream {
        return stream(&args, bytes);
    }
    if args.chase {
        return chase(&args, bytes);
    }
    let hold = match args.hold {
        Some(s) if !(s.is_finite() && s >= 0.0) => {
            return Err(CliError::bad_input(format!(
                "--hold {s}: expected a number of seconds, 0 or more"
            )))
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    let touched = placement::touch(bytes, args.huge).map_err(CliError::classified)?;
    let p = &touched.placement;
    if args.json {
        print_json(
            "touch",
            &Report {
                pid: std::process::id(),
                placement: p,
            },
        )?;
    } else {
        print!("{}", render(p));
    }
    if let Some(hold) = hold {
        std::io::stdout().flush()?;
        std::thread::sleep(hold);
    }
    drop(touched);
    Ok(ExitCode::SUCCESS)
}

fn render(p: &PlacementReport) -> String {
    let policy =
        cxltier_control::placement::policy_text(&p.policy, &p.policy_flags, &p.policy_nodes);
    let mut out = format!(
        "touched {} ({} pages of {}) under policy {policy}{}\n",
        format_bytes(p.bytes),
        p.pages,
        format_bytes(p.page_size),
        if p.huge {
            ", transparent huge pages allowed"
        } else {
            ""
        }
    );
    let mut t = Table::new(["node", "pages", "bytes", "percent"]);
    for (&node, &pages) in &p.nodes {
        t.row([
            node.to_string(),
            pages.to_string(),
            (pages * p.page_size).to_string(),
            format!("{:.1}%", p.percent(node)),
        ]);
    }
    out.push_str(&t.render());
    if p.failed > 0 {
        let why: Vec<String> = p.failures.iter().map(|(e, n)| format!("{n} {e}")).collect();
        out.push_str(&format!(
            "failed: {} page(s) not placed ({})\n",
            p.failed,
            why.join(", ")
        ));
    }
    out
}

/// Disable transparent huge pages for the whole process ([`workload::without_huge_pages`]: the
/// program runs itself again), or say that the kernel refuses and go on.
fn without_huge_pages() -> Result<(), CliError> {
    if let Some(e) = workload::without_huge_pages().map_err(CliError::classified)? {
        crate::error::write_stderr(&format!(
            "cxltier touch: warning: transparent huge pages stay allowed for this process's heap: {e}\n"
        ));
    }
    Ok(())
}
