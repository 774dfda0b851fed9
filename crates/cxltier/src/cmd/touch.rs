//! `cxltier touch SIZE`: allocate, touch, and report where the pages landed.

use crate::cmd::apply::control_error;
use crate::error::{CliError, CliResult};
use crate::output::{print_json, Table};
use cxltier_control::placement::{self, Placement};
use cxltier_control::size::parse_size;
use cxltier_topo::{format_bytes, nodelist};
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
own: a huge page lands whole on one node and would skew the counts.

SIZE: bytes (4096), or a number with a unit: 64K, 64M, 1G, 64MiB, 1.5G (K/M/G/T and
KiB/MiB/GiB/TiB are powers of 1024; KB/MB/GB/TB powers of 1000).";

/// Allocate and touch memory under the current policy and report which node each page landed on.
#[derive(clap::Args)]
#[command(after_long_help = LONG_HELP)]
pub struct Args {
    /// How much memory to touch: 4096, 64K, 64M, 1G, 64MiB ...
    #[arg(value_name = "SIZE")]
    size: String,
    /// Print JSON for scripts
    #[arg(long)]
    json: bool,
    /// Keep the memory mapped for SECONDS after reporting (to inspect it, e.g. with `cxltier show --pid`)
    #[arg(long, value_name = "SECONDS")]
    hold: Option<f64>,
    /// Allow transparent huge pages (MADV_HUGEPAGE) instead of forbidding them
    #[arg(long)]
    huge: bool,
}

#[derive(Serialize)]
struct Report<'a> {
    pid: u32,
    #[serde(flatten)]
    placement: &'a Placement,
}

pub fn run(args: Args) -> CliResult {
    let bytes = parse_size(&args.size).map_err(control_error)?;
    let hold = match args.hold {
        Some(s) if !(s.is_finite() && s >= 0.0) => {
            return Err(CliError::bad_input(format!(
                "--hold {s}: expected a number of seconds, 0 or more"
            )))
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    let touched = placement::touch(bytes, args.huge).map_err(control_error)?;
    let p = &touched.placement;
    if args.json {
        print_json(&Report {
            pid: std::process::id(),
            placement: p,
        })?;
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

fn render(p: &Placement) -> String {
    let mut policy = p.policy.clone();
    for f in &p.policy_flags {
        policy.push('=');
        policy.push_str(f);
    }
    if !p.policy_nodes.is_empty() {
        policy.push(':');
        policy.push_str(&nodelist::format(&p.policy_nodes));
    }
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
