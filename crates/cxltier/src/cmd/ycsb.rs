use crate::error::{CliError, CliResult};

/// Load and run YCSB workloads A-F against a Redis-protocol or memcached server
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CliResult {
    Err(CliError::runtime("not implemented yet"))
}
