//! `cxltier show --pid PID`: where a process's resident memory lives.

use crate::error::{CliError, CliResult};
use crate::output::{print_json, Table};
use cxltier_control::placement::{self, MappingPlacement, ProcessPlacement};
use cxltier_topo::{format_bytes, nodelist};
use std::process::ExitCode;

/// The long help: what the command does, exactly.
const LONG_HELP: &str = "\
Reads /proc/PID/numa_maps (and /proc/PID/maps for end addresses): resident bytes per NUMA node
in total, and per mapping with its kind (anon, heap, stack, file, special), its memory policy and
its bytes on each node. Sizes in the tables are MiB. Another user's process needs root. The
policy column is the policy the kernel reports for the mapping: its own (set with mbind) or, on
recent kernels, the process's (set with `cxltier run`). A policy decides where pages go when they
are first touched; the bytes per node show where they are now.";

/// Show where a process's resident memory lives, per node and per mapping.
#[derive(clap::Args)]
#[command(after_long_help = LONG_HELP)]
pub struct Args {
    /// The process to inspect
    #[arg(long, value_name = "PID")]
    pid: u32,
    /// Also list mappings with nothing resident
    #[arg(long)]
    all: bool,
    /// Print JSON for scripts
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CliResult {
    let p = placement::show(args.pid).map_err(CliError::classified)?;
    if args.json {
        print_json("show", &p)?;
    } else {
        print!("{}", render(&p, args.all));
    }
    Ok(ExitCode::SUCCESS)
}

fn mib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / (1u64 << 20) as f64)
}

fn policy(m: &MappingPlacement) -> String {
    let mut s = m.policy.clone();
    for f in &m.policy_flags {
        s.push('=');
        s.push_str(f);
    }
    if !m.policy_nodes.is_empty() {
        s.push(':');
        s.push_str(&nodelist::format(&m.policy_nodes));
    }
    s
}

fn render(p: &ProcessPlacement, all: bool) -> String {
    let mut out = format!(
        "process {} ({}): {} resident on {} node(s)\n\n",
        p.pid,
        p.command,
        format_bytes(p.total_bytes),
        p.nodes.values().filter(|&&b| b > 0).count()
    );
    let mut t = Table::new(["node", "MiB", "percent"]);
    for (&node, &bytes) in &p.nodes {
        t.row([
            node.to_string(),
            mib(bytes),
            format!("{:.1}%", p.percent(node)),
        ]);
    }
    t.row(["total".to_string(), mib(p.total_bytes), String::new()]);
    out.push_str(&t.render());
    out.push('\n');

    let nodes: Vec<u32> = p.nodes.keys().copied().collect();
    let mut header = vec!["mapping".to_string(), "kind".into(), "policy".into()];
    header.extend(nodes.iter().map(|n| format!("N{n} MiB")));
    header.push("total MiB".into());
    header.push("name".into());
    let mut t = Table::new(header);
    let mut hidden = 0;
    for m in &p.mappings {
        if m.bytes == 0 && !all {
            hidden += 1;
            continue;
        }
        let range = match m.end {
            Some(end) => format!("{:x}-{end:x}", m.start),
            None => format!("{:x}", m.start),
        };
        let mut row = vec![range, m.kind.as_str().to_string(), policy(m)];
        row.extend(
            nodes
                .iter()
                .map(|n| mib(m.nodes.get(n).copied().unwrap_or(0))),
        );
        row.push(mib(m.bytes));
        let mut name = m.name.clone().unwrap_or_default();
        if m.huge {
            name.push_str(" (hugetlb)");
        }
        row.push(name);
        t.row(row);
    }
    out.push_str(&t.render());
    if hidden > 0 {
        out.push_str(&format!(
            "({hidden} mapping(s) with nothing resident not shown; --all lists them)\n"
        ));
    }
    out
}
