//! `cxltier apply`: write the kernel's global weighted-interleave table.

use crate::error::{CliError, CliResult};
use crate::output::{print_json, Table};
use cxltier_control::weights::{kernel_tiering_warnings, ChangeReport, WeightTable, WeightsSpec};
use std::path::PathBuf;
use std::process::ExitCode;

/// The long help: what the command does, exactly.
const LONG_HELP: &str = "\
Linux keeps one weighted-interleave table for the whole system
(/sys/kernel/mm/mempolicy/weighted_interleave/nodeN, Linux 6.9+): every process that uses the
weighted-interleave policy (`cxltier run --weights`, `numactl --weighted-interleave`) allocates by
it. This command changes that system-wide setting until it is changed again or the machine
reboots, and says so on stderr.

Everything is validated before the first write (unknown node, weight 0 or above 255, malformed
spec, kernel without weighted interleave: nothing is changed). Only nodes whose weight differs are
written; if a write fails partway, the weights already written are put back. On kernels with the
`auto` switch (6.16+), writing a weight turns the kernel's automatic weights off; the output shows
it, and --auto switches them back on. The output ends with the command that undoes the change.
--dry-run shows the change and writes nothing (no root needed).";

/// Write the kernel's global weighted-interleave table (needs root).
#[derive(clap::Args)]
#[command(
    after_long_help = LONG_HELP,
    group(
        clap::ArgGroup::new("what")
            .required(true)
            .args(["weights", "plan", "auto"])
    )
)]
pub struct Args {
    /// Weights per node, node0=3,node1=1 (or in tier order, fastest first: 3:1)
    #[arg(long, value_name = "SPEC")]
    weights: Option<String>,
    /// Apply the planner's recommended weights for MIX on this machine (R, 3:1, 2:1, 1:1, 2:1nt, W2 ...)
    #[arg(long, value_name = "MIX")]
    plan: Option<String>,
    /// Switch the kernel's automatic weights (derived from firmware bandwidth) back on (Linux 6.16+)
    #[arg(long)]
    auto: bool,
    /// Show what would change and write nothing (needs no root)
    #[arg(long)]
    dry_run: bool,
    /// Print JSON for scripts
    #[arg(long)]
    json: bool,
    /// Read and write the table below DIR instead of / (a recorded or scratch sysfs tree)
    #[arg(long, value_name = "DIR")]
    sysfs_root: Option<PathBuf>,
}

pub fn run(args: Args) -> CliResult {
    let root = args
        .sysfs_root
        .clone()
        .unwrap_or_else(|| PathBuf::from("/"));
    let table = WeightTable::read(&root).map_err(CliError::classified)?;
    let change = if args.auto {
        table.plan_auto().map_err(CliError::classified)?
    } else if let Some(mix) = &args.plan {
        let advice = crate::cmd::plan::planned_advice(mix)?;
        table
            .plan_advice(&advice.pairs, advice.keep_auto)
            .map_err(CliError::classified)?
    } else {
        let spec: WeightsSpec = args
            .weights
            .as_deref()
            .unwrap_or_default()
            .parse()
            .map_err(CliError::classified)?;
        let pairs = spec.node_pairs(&root).map_err(CliError::classified)?;
        table.plan(&pairs).map_err(CliError::classified)?
    };
    let writes = !change.is_noop();
    // Every node in the table takes pages (weights are 1 to 255) from a process interleaving over it.
    let interleaved: Vec<u32> = change.nodes.iter().map(|n| n.node).collect();
    let warnings = kernel_tiering_warnings(&root, &interleaved);
    for w in &warnings {
        eprintln!("cxltier apply: warning: {w}");
    }

    if writes && !args.dry_run {
        table.apply(&change).map_err(CliError::classified)?;
        eprintln!(
            "cxltier: changed a system-wide setting: the kernel's weighted-interleave table in {} \
             applies to every process using weighted interleave, until changed again or reboot \
             (undo: {})",
            table.dir().display(),
            change.undo_command(args.sysfs_root.as_deref())
        );
    }
    let report = ChangeReport::new(
        &table,
        &change,
        args.dry_run,
        args.sysfs_root.as_deref(),
        warnings,
    );
    if args.json {
        print_json("apply", &report)?;
    } else {
        print!("{}", render(&report));
    }
    Ok(ExitCode::SUCCESS)
}

fn render(r: &ChangeReport) -> String {
    let mut out = String::new();
    let status = match (r.changed, r.dry_run) {
        (false, _) => "nothing to change",
        (true, true) => "dry run: nothing written",
        (true, false) => "written",
    };
    out.push_str(&format!(
        "weighted-interleave table {}: {status}\n",
        r.table
    ));
    let mut t = Table::new(["node", "old", "new", ""]);
    for n in &r.shown.nodes {
        t.row([
            n.node.to_string(),
            n.old.to_string(),
            n.new.to_string(),
            if n.changed() {
                if r.dry_run {
                    "would change".to_string()
                } else {
                    "changed".to_string()
                }
            } else {
                String::new()
            },
        ]);
    }
    out.push_str(&t.render());
    if let Some(auto) = r.auto {
        out.push_str(&auto.describe());
        out.push('\n');
        if auto.new && !auto.old && r.dry_run {
            out.push_str("(the kernel recomputes every weight from firmware bandwidth figures)\n");
        }
    }
    if let (Some(undo), false) = (&r.undo, r.dry_run) {
        out.push_str(&format!("undo: {undo}\n"));
    }
    out
}
