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
    let addr: std::net::SocketAddr = text.parse().map_err(|_| {
        crate::error::CliError::bad_input(format!("--metrics-addr {text}: expected ADDRESS:PORT"))
            .with_hint(
                "e.g. --metrics-addr 127.0.0.1:9464 (an IPv6 address in brackets: [::1]:9464)",
            )
    })?;
    if !cxltier_metrics::is_loopback(&addr) {
        eprintln!("cxltier {command}: warning: metrics are served on {addr}, which is not loopback: anyone who can reach it can read them");
    }
    let published = cxltier_metrics::Published::new();
    let bound = cxltier_metrics::serve(&addr.to_string(), published.clone())
        .map_err(crate::error::CliError::classified)?;
    eprintln!("cxltier {command}: Prometheus metrics on http://{bound}/metrics");
    Ok(Some(published))
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
