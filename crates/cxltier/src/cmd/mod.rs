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
    cxltier_quarantine::check_path(path).map_err(crate::error::CliError::classified)
}

/// `--metrics-addr ADDR:PORT` of `cxltier COMMAND`: checked, bound (a warning on stderr when
/// it is not loopback) and served on a background thread; `None` without the flag. The caller
/// publishes into what it returns.
pub(crate) fn serve_metrics(
    command: &str,
    addr: Option<&str>,
) -> Result<Option<cxltier_metrics::Published>, crate::error::CliError> {
    let Some(text) = addr else { return Ok(None) };
    let addr = cxltier_metrics::parse_addr(text).map_err(crate::error::CliError::classified)?;
    if !cxltier_metrics::is_loopback(&addr) {
        eprintln!("cxltier {command}: warning: metrics are served on {addr}, which is not loopback: anyone who can reach it can read them");
    }
    let published = cxltier_metrics::Published::new();
    let bound = cxltier_metrics::serve(&addr.to_string(), published.clone())
        .map_err(crate::error::CliError::classified)?;
    eprintln!("cxltier {command}: Prometheus metrics on http://{bound}/metrics");
    Ok(Some(published))
}

/// A flag set by SIGINT or SIGTERM: a long-running command (serve, tierd, touch) stops at its
/// next look, as at its end (undoing what it set, closing its store, with its final check).
pub(crate) fn stop_flag(
) -> Result<std::sync::Arc<std::sync::atomic::AtomicBool>, crate::error::CliError> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, std::sync::Arc::clone(&stop)).map_err(|e| {
            crate::error::CliError::runtime(format!("cannot install a signal handler: {e}"))
        })?;
    }
    Ok(stop)
}

/// Whether this process runs with effective uid 0 (the `Uid:` line of /proc/self/status: real,
/// effective, saved, filesystem).
pub(crate) fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}
