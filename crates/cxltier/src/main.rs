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

use clap::{CommandFactory, Parser, Subcommand};
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
    Topo(cmd::topo::Args),
    Probe(cmd::probe::Args),
    Plan(cmd::plan::Args),
    Apply(cmd::apply::Args),
    Run(cmd::run::Args),
    Show(cmd::show::Args),
    Touch(cmd::touch::Args),
    Serve(cmd::serve::Args),
    Store(cmd::store::Args),
    Ycsb(cmd::ycsb::Args),
    Tierd(cmd::tierd::Args),
    Qsim(cmd::qsim::Args),
    Ras(cmd::ras::Args),
    Completions(cmd::completions::Args),
    Man(cmd::man::Args),
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
        Command::Serve(args) => cmd::serve::run(args),
        Command::Store(args) => cmd::store::run(args),
        Command::Ycsb(args) => cmd::ycsb::run(args),
        Command::Tierd(args) => cmd::tierd::run(args),
        Command::Qsim(args) => cmd::qsim::run(args),
        Command::Ras(args) => cmd::ras::run(args),
        // Both are generated from the definition above, so they take it whole.
        Command::Completions(args) => cmd::completions::run(args, Cli::command()),
        Command::Man(args) => cmd::man::run(args, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(err) => err.report(),
    }
}
