//! `cxltier`: a thin command line over the cxltier libraries.
//!
//! Each subcommand lives in its own module under `cmd/`, owns its clap arguments, and turns library
//! results into a table for people or stable JSON for scripts. Errors become [`CliError`], which
//! carries the exit code scripts rely on (see `error.rs`).

mod cmd;
mod error;
mod live;
mod output;
mod plot;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

pub use error::CliError;

/// Memory tiering for CXL-era Linux servers.
///
/// Finds the memory tiers (local DRAM, CPU-less CXL nodes, NVMe), predicts what a placement of pages
/// over them delivers, chooses weighted-interleave weights for a workload's read:write mix, applies
/// them, runs programs under a memory policy, and shows where memory really landed.
#[derive(Parser)]
#[command(
    name = "cxltier",
    version,
    propagate_version = true,
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the memory tiers: NUMA nodes, HMAT figures, kernel memory tiers, CXL devices, NVMe
    Topo(cmd::topo::Args),
    /// Measure each memory tier like Intel MLC: idle latency, bandwidth per mix, loaded latency
    Probe(cmd::probe::Args),
    /// Choose weighted-interleave weights for a read:write mix and a goal (the main job)
    Plan(cmd::plan::Args),
    /// Write the kernel's global weighted-interleave table (needs root)
    Apply(cmd::apply::Args),
    /// Run a command under a memory policy (weighted interleave, interleave, bind, preferred)
    Run(cmd::run::Args),
    /// Show where a process's resident memory lives, per node and per mapping
    Show(cmd::show::Args),
    /// Allocate and touch memory under the current policy and report which node each page landed on
    Touch(cmd::touch::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Topo(args) => cmd::topo::run(args),
        Command::Probe(args) => cmd::probe::run(args),
        Command::Plan(args) => cmd::plan::run(args),
        Command::Apply(args) => cmd::apply::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Show(args) => cmd::show::run(args),
        Command::Touch(args) => cmd::touch::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => err.report(),
    }
}
