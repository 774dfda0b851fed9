use crate::error::{CliError, CliResult};

/// Serve the tiered object store (DRAM, CXL, NVMe) over the Redis protocol
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CliResult {
    Err(CliError::runtime("not implemented yet"))
}
