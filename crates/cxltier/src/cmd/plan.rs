use crate::error::{CliError, CliResult};

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CliResult {
    Err(CliError::runtime("not implemented yet"))
}

/// The planner's recommended weights for `mix` (e.g. "R", "2:1", "W5") on the live machine,
/// as (NUMA node id, weight) pairs, fastest tier first. Used by `apply --plan` and `run --plan`.
/// Fails with a bad-input error for an unparsable mix and an unsupported error when the machine
/// has fewer than two memory tiers with known performance.
pub fn planned_node_weights(mix: &str) -> Result<Vec<(u32, u32)>, CliError> {
    let _ = mix;
    Err(CliError::runtime("not implemented yet"))
}
