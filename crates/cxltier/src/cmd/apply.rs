//! `cxltier apply`: write the kernel's global weighted-interleave table.

use crate::error::{CliError, CliResult};
use crate::output::{print_json, Table};
use cxltier_control::policy::assign_weights;
use cxltier_control::weights::{AutoChange, NodeWeight, WeightChange, WeightTable, WeightsSpec};
use cxltier_control::ControlError;
use cxltier_topo::{Placement, Topology};
use serde::Serialize;
use std::path::{Path, PathBuf};
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

/// The (node, weight) pairs asked for with --weights.
fn requested(args: &Args, root: &Path) -> Result<Vec<(u32, u32)>, CliError> {
    let spec: WeightsSpec = args
        .weights
        .as_deref()
        .unwrap_or_default()
        .parse()
        .map_err(CliError::classified)?;
    match &spec {
        WeightsSpec::PerNode(pairs) => Ok(pairs.clone()),
        WeightsSpec::InTierOrder(_) => {
            let topo = Topology::discover(root)
                .map_err(|e| CliError::classified(ControlError::Topology(e)))?;
            assign_weights(&spec, None, &topo).map_err(CliError::classified)
        }
    }
}

#[derive(Serialize)]
struct Report<'a> {
    table: String,
    dry_run: bool,
    changed: bool,
    /// Each node's weights, by node: `{"<node>": {...}}` as every per-node figure.
    nodes: std::collections::BTreeMap<u32, NodeJson>,
    auto: Option<AutoChange>,
    undo: Option<String>,
    /// The kernel's own tiering moving pages of the interleaved nodes, with the setting to change.
    warnings: Vec<String>,
    #[serde(skip)]
    change: &'a WeightChange,
}

#[derive(Serialize)]
struct NodeJson {
    old: u8,
    new: u8,
    changed: bool,
}

impl From<&NodeWeight> for NodeJson {
    fn from(n: &NodeWeight) -> Self {
        NodeJson {
            old: n.old,
            new: n.new,
            changed: n.changed(),
        }
    }
}

/// How to write a spec back on the command line.
pub(crate) fn undo_command(change: &WeightChange, root: Option<&Path>) -> String {
    let mut cmd = match change.auto {
        Some(AutoChange {
            old: true,
            new: false,
        }) => "cxltier apply --auto".to_string(),
        _ => format!("cxltier apply --weights {}", change.undo_spec()),
    };
    if let Some(r) = root {
        cmd.push_str(&format!(" --sysfs-root {}", r.display()));
    }
    cmd
}

/// Describe the auto switch's change in words.
pub(crate) fn auto_words(auto: AutoChange) -> String {
    let on = |b: bool| if b { "on" } else { "off" };
    if auto.old == auto.new {
        format!("auto: {} (unchanged)", on(auto.old))
    } else {
        format!(
            "auto: {} -> {}{}",
            on(auto.old),
            on(auto.new),
            if auto.new {
                ""
            } else {
                " (a manual weight switches the kernel's automatic weights off)"
            }
        )
    }
}

/// Warnings when the kernel's own tiering can move pages that weighted interleave places on
/// `nodes`. A tree that cannot be discovered (a scratch tree holding only the weight table) gives
/// none: there is nothing to judge by.
pub(crate) fn kernel_tiering_warnings(root: &Path, nodes: &[u32]) -> Vec<String> {
    match Topology::discover(root) {
        Ok(topo) => topo.kernel_tiering_warnings(nodes, Placement::WeightedInterleave),
        Err(_) => Vec::new(),
    }
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
        let pairs = requested(&args, &root)?;
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
            undo_command(&change, args.sysfs_root.as_deref())
        );
    }
    // With auto switched on, the kernel chose the new weights: show them.
    let mut shown = change.clone();
    if change.turns_auto_on() && !args.dry_run {
        if let Ok(now) = WeightTable::read(&root) {
            for n in &mut shown.nodes {
                n.new = now.weight(n.node).unwrap_or(n.new);
            }
        }
    }

    let report = Report {
        table: table.dir().display().to_string(),
        dry_run: args.dry_run,
        changed: writes,
        nodes: shown
            .nodes
            .iter()
            .map(|n| (n.node, NodeJson::from(n)))
            .collect(),
        auto: change.auto,
        undo: writes.then(|| undo_command(&change, args.sysfs_root.as_deref())),
        warnings,
        change: &shown,
    };
    if args.json {
        print_json("apply", &report)?;
    } else {
        print!("{}", render(&report));
    }
    Ok(ExitCode::SUCCESS)
}

fn render(r: &Report) -> String {
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
    for n in &r.change.nodes {
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
        out.push_str(&auto_words(auto));
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
