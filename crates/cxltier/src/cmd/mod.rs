//! One module per subcommand. Each defines `Args` (its clap arguments) and `run(Args)`.

pub mod apply;
pub mod completions;
pub mod man;
pub mod plan;
pub mod probe;
pub mod qsim;
pub mod ras;
pub mod run;
pub mod serve;
pub mod show;
pub mod store;
pub mod tierd;
pub mod topo;
pub mod touch;
pub mod ycsb;

/// A `--quarantine-file` must be a file (it may not exist yet); a directory is refused before
/// anything runs. The one argument check `ras`, `serve` and `tierd` share.
pub(crate) fn check_quarantine_file(path: &std::path::Path) -> Result<(), crate::error::CliError> {
    if path.is_dir() {
        return Err(crate::error::CliError::bad_input(format!(
            "--quarantine-file {} is a directory",
            path.display()
        ))
        .with_hint(format!(
            "give a file, e.g. the default {}",
            cxltier_quarantine::DEFAULT_PATH
        )));
    }
    Ok(())
}
