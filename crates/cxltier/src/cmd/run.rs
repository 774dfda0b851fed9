//! `cxltier run`: run a command under a memory policy.

use crate::error::{CliError, CliResult};
use cxltier_control::launch::{
    exec_under, require_weighted_interleave, run_with_weights, WeightsRunSink,
};
use cxltier_control::policy::{resolve, PolicySpec};
use cxltier_control::weights::{Applied, Restored, TemporaryWeights, WeightsSpec};
use cxltier_control::ControlError;
use cxltier_sys::Mode;
use cxltier_topo::{nodelist, Topology};
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The long help: what the command does, exactly.
const LONG_HELP: &str = "\
Like numactl: the policy is set on cxltier's own thread, and CMD inherits it.

With --interleave, --bind and --preferred, and with --weights/--plan when the kernel's table
already holds the requested weights, cxltier sets the policy and execs CMD: CMD replaces cxltier
(same pid; its exit status and signals are its own). Nothing system-wide changes and no root is
needed.

Weighted interleave uses ONE global weight table: Linux keeps a single table for the whole
system (/sys/kernel/mm/mempolicy/weighted_interleave/nodeN), read at every allocation by every
process that uses weighted interleave. When --weights or --plan ask for weights the table does
not hold, cxltier needs root and does exactly this:

  1. validates everything, then writes the requested weights of those nodes only (no other node
     is touched), saying so on stderr with the command that undoes it;

  2. starts CMD as its child under MPOL_WEIGHTED_INTERLEAVE over those nodes and waits for it,
     forwarding SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to cxltier (Ctrl-C on the terminal
     reaches CMD directly);

  3. when CMD has exited, writes the previous weights back, except for a node whose weight
     someone else changed during the run (left as found, with a warning), and, on kernels with
     the `auto` switch (6.16+) when it was on before, switches it back on (the kernel then
     recomputes its weights);

  4. exits with CMD's exit status, or dies by the signal that killed CMD.

While CMD runs, every other process that uses weighted interleave allocates by the new weights
too. If cxltier itself is killed with SIGKILL, the table keeps the new weights: put them back
with the undo command printed at the start.

Weights are written in tier order, fastest first: `--weights 3:1` gives 3 to the DRAM nodes and 1
to the CXL nodes (one weight per tier, or one per node), over --nodes or every memory node;
`--weights node0=3,node2=1` names the nodes itself. Exit status: CMD's; 2 for bad input (unknown
node, node without memory, wrong number of weights), 3 without the root a table change needs,
4 when the kernel lacks the policy, 127 when CMD is not found, 126 when it cannot be executed.";

/// Run a command under a memory policy (weighted interleave, interleave, bind, preferred).
#[derive(clap::Args)]
#[command(
    after_help = "Weighted interleave uses the kernel's ONE global weight table; --help says exactly \
                  what run does to it.",
    after_long_help = LONG_HELP,
    group(
        clap::ArgGroup::new("policy")
            .required(true)
            .args(["weights", "plan", "interleave", "bind", "preferred"])
    )
)]
pub struct Args {
    /// Weighted interleave: 3:1 in tier order, fastest first (over --nodes or every memory node), or node0=3,node1=1
    #[arg(long, value_name = "SPEC")]
    weights: Option<String>,
    /// Weighted interleave with the planner's weights for MIX on this machine (R, 3:1, 2:1, 1:1, 2:1nt, W2 ...)
    #[arg(long, value_name = "MIX", conflicts_with = "nodes")]
    plan: Option<String>,
    /// Interleave pages evenly over --nodes (default: every memory node)
    #[arg(long)]
    interleave: bool,
    /// Allocate only on NODES, e.g. 0 or 0-1,3
    #[arg(long, value_name = "NODES", conflicts_with = "nodes")]
    bind: Option<String>,
    /// Prefer NODE; several nodes (1,2) prefer any of them (preferred-many, Linux 5.15+)
    #[arg(long, value_name = "NODE", conflicts_with = "nodes")]
    preferred: Option<String>,
    /// The nodes for --weights in tier order and --interleave, e.g. 0-1,3 (default: every memory node)
    #[arg(long, value_name = "LIST")]
    nodes: Option<String>,
    /// Read and write sysfs below DIR instead of / (tests; the policy itself is the live kernel's)
    #[arg(long, value_name = "DIR", hide = true)]
    sysfs_root: Option<PathBuf>,
    /// The command to run, and its arguments (after --)
    #[arg(
        value_name = "CMD",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<OsString>,
}

fn node_list(text: &str) -> Result<Vec<u32>, CliError> {
    nodelist::parse(text).map_err(|e| CliError::classified(ControlError::NodeList(e)))
}

fn request(args: &Args) -> Result<PolicySpec, CliError> {
    let nodes = args.nodes.as_deref().map(node_list).transpose()?;
    if let Some(spec) = &args.weights {
        let weights: WeightsSpec = spec.parse().map_err(CliError::classified)?;
        return Ok(PolicySpec::WeightedInterleave { weights, nodes });
    }
    if let Some(mix) = &args.plan {
        let pairs = crate::cmd::plan::planned_advice(mix)?.pairs;
        return Ok(PolicySpec::WeightedInterleave {
            weights: WeightsSpec::PerNode(pairs),
            nodes: None,
        });
    }
    if let Some(list) = &args.bind {
        return Ok(PolicySpec::Bind {
            nodes: node_list(list)?,
        });
    }
    if let Some(list) = &args.preferred {
        return Ok(PolicySpec::Preferred {
            nodes: node_list(list)?,
        });
    }
    Ok(PolicySpec::Interleave { nodes })
}

/// The exit code for a command that could not be started, as shells and env(1) use them.
fn exec_failure(err: ControlError) -> CliResult {
    let Some(code) = err.exec_status() else {
        return Err(CliError::classified(err));
    };
    let _ = CliError::runtime(err.to_string()).report();
    Ok(ExitCode::from(code))
}

pub fn run(args: Args) -> CliResult {
    let root = args
        .sysfs_root
        .clone()
        .unwrap_or_else(|| PathBuf::from("/"));
    let topo =
        Topology::discover(&root).map_err(|e| CliError::classified(ControlError::Topology(e)))?;
    let req = request(&args)?;
    let resolved = resolve(&req, &topo).map_err(CliError::classified)?;
    let policy = resolved.policy().map_err(CliError::classified)?;

    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);

    if resolved.mode != Mode::WeightedInterleave {
        return exec_failure(exec_under(&policy, &mut cmd));
    }
    let mut weights = TemporaryWeights::read(&root).map_err(CliError::classified)?;
    let change = weights
        .plan(&resolved.weights)
        .map_err(CliError::classified)?;
    require_weighted_interleave().map_err(CliError::classified)?;
    if change.is_noop() {
        return exec_failure(exec_under(&policy, &mut cmd));
    }
    let mut said = TableChange {
        root: args.sysfs_root.as_deref(),
    };
    match run_with_weights(&mut weights, &resolved, &mut cmd, &mut said) {
        Ok(status) => exit_as(status),
        Err(e) => exec_failure(e),
    }
}

/// Exit as CMD did: with its exit status, or by the signal that killed it.
fn exit_as(status: std::process::ExitStatus) -> CliResult {
    if let Some(code) = status.code() {
        return Ok(ExitCode::from(code as u8));
    }
    match status.signal() {
        Some(sig) => cxltier_sys::signal::terminate_by_signal(sig),
        None => Ok(ExitCode::FAILURE),
    }
}

/// Says on stderr what a run does to the weighted-interleave table, with the command that undoes
/// it for a table below `root`.
struct TableChange<'a> {
    root: Option<&'a Path>,
}

impl WeightsRunSink for TableChange<'_> {
    fn weights_set(&mut self, applied: &Applied) {
        eprintln!(
            "cxltier: changed a system-wide setting for this run: the kernel's weighted-interleave \
             table ({}), used by every process with weighted interleave: {applied}",
            applied.dir.display(),
        );
        if let Some(auto) = applied.change.auto.filter(|a| a.old != a.new) {
            eprintln!("cxltier: {}", auto.describe());
        }
        eprintln!(
            "cxltier: the previous weights are restored when the command exits (by hand: {})",
            applied.change.undo_command(self.root)
        );
    }

    fn weights_restored(&mut self, restored: Option<Restored>) {
        let Some(restored) = restored else { return };
        let report = &restored.report;
        if !report.restored.is_empty() {
            eprintln!("cxltier: restored the weighted-interleave table: {restored}");
        }
        for (node, found) in &report.left_alone {
            eprintln!(
                "cxltier: warning: node{node}'s weight was changed to {found} by someone else during \
                 the run; left as found"
            );
        }
        for (path, err) in &report.failed {
            eprintln!(
                "cxltier: error: could not restore {}: {err}; restore by hand: {}",
                path.display(),
                restored.change.undo_command(self.root)
            );
        }
    }
}
