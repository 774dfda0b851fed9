//! `cxltier serve`: the tiered object store over the Redis protocol.

use cxltier_server::limits::OpenFilesLimit;
use cxltier_server::{OutputBufferLimit, ServerConfig, StoreOptions};
use cxltier_store::{Durability, SsdSpec};
use cxltier_topo::size::{parse_size, SizeError};

use crate::error::{CliError, CliResult};

const LONG_HELP: &str = "\
Tiers: every object lives in exactly one memory tier, DRAM or CXL, or only on NVMe. New and hot
objects are in DRAM; colder ones are demoted to CXL, then to NVMe (written back first, so demotion
never drops data); an object read from NVMe is admitted to memory if the frequency sketch rates it
above what it would displace (scans do not flush the hot set). The index is counted inside the
DRAM budget. Without a CPU-less memory node, the CXL tier is a second arena on the DRAM node
(reported as cxl_emulated_on_dram in INFO tiers).

NVMe: --ssd PATH:SIZE is a file (created and preallocated) or a block device, opened with O_DIRECT
and driven by io_uring, log-structured with segment cleaning.

Durability: none (write-back: a crash loses what was not yet demoted), everysec (the log is synced
at least once a second: a crash loses at most about a second), always (no write is acknowledged
before its record is on disk; writes of one event-loop turn share one fdatasync). Restarting with
the same --ssd recovers the store.

Commands: see docs/server.md; SCANRANGE start count is the ordered range scan of YCSB workload E.
INFO tiers shows the per-tier statistics.

Recovery: a restart replays the log, stepping over records that fail their checksum to the next
valid one. Bytes it cannot read that may have held acknowledged writes (a damaged record with
valid ones after it, a damaged segment, a truncated file) refuse the start (exit 1) with the
ranges named, and nothing is written; --recover-anyway starts anyway, serving what is readable,
and reports the ranges and the keys that may be stale on stderr and in INFO (recovery_*). A write
torn by a crash at the end of the newest segment is expected, reported, and left on disk. `cxltier
store check PATH` verifies a log offline.

Poison: the server follows --quarantine-file (polled every 100 ms). For each poisoned range added
to it, objects whose memory copy overlaps the range are served from their NVMe copy when it is
current, or else removed and named on stderr as lost; the OS pages holding the range are never
used again. INFO poison shows the counts and the retired bytes per tier. Stop with SIGINT, SIGTERM or SHUTDOWN.";

/// Serve the tiered object store (DRAM, CXL, NVMe) over the Redis protocol
#[derive(clap::Args)]
#[command(after_long_help = LONG_HELP)]
pub struct Args {
    /// Address to listen on (loopback by default; other addresses expose the store to the network).
    /// Port 0: the kernel picks a free one, said in the "listening on" line [default:
    /// 127.0.0.1:6379, or the --config file's bind and port]
    #[arg(long, value_name = "ADDR:PORT")]
    bind: Option<String>,
    /// A Redis configuration file (redis.conf, as `redis-server FILE` reads it): its port,
    /// bind, requirepass, databases, maxclients, client limits, dir, logfile and pidfile, and
    /// every other Redis parameter it sets, applied with CONFIG SET's checks before the first
    /// client (immutable ones included). A directive Redis does not know, or that cxltier
    /// cannot honour (daemonize yes, rename-command, loadmodule), refuses the start, naming the
    /// line. A flag given here wins over the file
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// DRAM budget, index included: 256M, 4G ...
    #[arg(long, default_value = "256M", value_name = "SIZE", value_parser = parse_size)]
    dram: u64,
    /// CXL budget (0: no CXL tier)
    #[arg(long, default_value = "0", value_name = "SIZE", value_parser = cxl_budget)]
    cxl: u64,
    /// The NVMe tier: a file or block device, PATH[:SIZE]
    #[arg(long, value_name = "PATH[:SIZE]")]
    ssd: Option<String>,
    /// none, everysec or always (default: everysec with --ssd, none without)
    #[arg(long, value_name = "MODE")]
    durability: Option<String>,
    /// Require AUTH with this password
    #[arg(long, value_name = "PASSWORD")]
    requirepass: Option<String>,
    /// The ACL file (Redis's aclfile: a `user NAME RULES...` line each): its users are
    /// loaded at start, and ACL LOAD and ACL SAVE read and write it
    #[arg(long, value_name = "PATH")]
    acl_file: Option<std::path::PathBuf>,
    /// NUMA node of the DRAM arena (default 0)
    #[arg(long, value_name = "NODE")]
    dram_node: Option<u32>,
    /// NUMA node of the CXL arena (default: the first CPU-less memory node)
    #[arg(long, value_name = "NODE")]
    cxl_node: Option<u32>,
    /// Largest value accepted, up to 512M (Redis's proto-max-bulk-len). Values over 1M are kept
    /// in pieces of 64K, so they need no larger slab pages or log records
    #[arg(long, default_value = "512M", value_name = "SIZE", value_parser = parse_size)]
    max_object: u64,
    /// Most object reads at the NVMe device at once (1-256); more wait in the server and begin as
    /// earlier ones finish. Raise it for a drive that reads faster with deeper queues
    #[arg(long, default_value_t = cxltier_store::DEFAULT_NVME_QUEUE_DEPTH, value_name = "N")]
    nvme_queue_depth: u32,
    /// Most connections at once; lowered (with a message) to what the open-file limit allows,
    /// after raising the soft limit as far as the hard limit lets it
    /// [default: 10000]
    #[arg(long, value_name = "N")]
    max_clients: Option<usize>,
    /// Databases clients may SELECT (1-254; Redis's `databases`). A store keeps the databases
    /// it was written with: restarting it with fewer than hold keys (or were swapped) is refused
    /// [default: 16]
    #[arg(long, value_name = "N")]
    databases: Option<usize>,
    /// Most bytes of one connection's input held: past it, the connection is not read until
    /// its queued commands have run; a single command longer than this closes the connection.
    /// The bulk data of the command being received count on top of it, up to one bulk of
    /// --max-object (a limit, not an allocation: buffers grow with what a client sends)
    /// [default: 64mb]
    #[arg(long, value_name = "BYTES")]
    client_query_buffer_limit: Option<String>,
    /// "HARD SOFT SECONDS", as Redis's client-output-buffer-limit normal: at SOFT bytes of
    /// replies a client has not read, its commands wait until it reads; over HARD, or over SOFT
    /// for SECONDS (0: no time limit), it is disconnected
    /// [default: "64mb 4mb 60"]
    #[arg(long, value_name = "\"HARD SOFT SECONDS\"")]
    client_output_buffer_limit: Option<String>,
    /// Follow this file of poisoned physical ranges (written by `cxltier ras --watch
    /// --quarantine`; missing: nothing quarantined): objects on them are restored from NVMe or
    /// reported lost, and their memory is never used again (needs root to map the ranges)
    #[arg(long, value_name = "PATH", default_value = cxltier_quarantine::DEFAULT_PATH)]
    quarantine_file: std::path::PathBuf,
    /// Start even when the NVMe log is damaged (bytes recovery cannot read, which may have held
    /// acknowledged writes): serve what is readable, and report the damaged ranges and the keys
    /// that may be stale. Without it such a start is refused and nothing is written
    #[arg(long)]
    recover_anyway: bool,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics (e.g. 127.0.0.1:9121): tiers,
    /// hits and misses, commands and their latency, clients, NVMe I/O, memory (docs/server.md)
    #[arg(long, value_name = "ADDR:PORT")]
    metrics_addr: Option<String>,
}

/// `--cxl SIZE`, where 0 (or nothing) means no CXL tier.
fn cxl_budget(text: &str) -> Result<u64, SizeError> {
    match text.trim() {
        "0" | "" => Ok(0),
        text => parse_size(text),
    }
}

/// An I/O error on a path the configuration file named: a permission problem or a runtime one.
fn io_error(e: &std::io::Error, message: String) -> CliError {
    let class = if e.kind() == std::io::ErrorKind::PermissionDenied {
        crate::error::Class::Permission
    } else {
        crate::error::Class::Runtime
    };
    CliError::new(class, message)
}

/// Where `cxltier serve` says what it does: standard error, or where a configuration file's
/// `logfile` says (standard output for `""`, as Redis; else appended to the file).
#[derive(Clone)]
enum Log {
    Stderr,
    Stdout,
    File(std::sync::Arc<std::sync::Mutex<std::fs::File>>),
}

impl Log {
    fn open(log_file: Option<&Option<std::path::PathBuf>>) -> Result<Log, CliError> {
        Ok(match log_file {
            None => Log::Stderr,
            Some(None) => Log::Stdout,
            Some(Some(path)) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| {
                        io_error(&e, format!("opening the logfile {}: {e}", path.display()))
                            .with_hint("fix the logfile line of the configuration file (\"\" logs to standard output)")
                    })?;
                Log::File(std::sync::Arc::new(std::sync::Mutex::new(file)))
            }
        })
    }

    fn say(&self, line: &str) {
        use std::io::Write as _;
        match self {
            Log::Stderr => eprintln!("cxltier serve: {line}"),
            Log::Stdout => println!("cxltier serve: {line}"),
            Log::File(f) => {
                let mut f = f.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                // A full disk must not stop the server: the line is lost, the store is not.
                let _ = writeln!(f, "cxltier serve: {line}");
            }
        }
    }
}

/// `--max-clients` fitted to the open-file limit (raised as far as the hard limit lets it);
/// the log says when fewer clients are served.
fn fit_max_clients(wanted: usize, log: &Log) -> Result<usize, CliError> {
    let fit = cxltier_server::limits::fit_max_clients(wanted).map_err(CliError::classified)?;
    if let Some(OpenFilesLimit { soft, hard, needed }) = fit.reduced {
        log.say(&format!(
            "maxclients reduced to {}: the open-file limit is {soft} (hard limit {hard}) and {wanted} clients need {needed}; raise it with ulimit -n (or LimitNOFILE= in a systemd unit) to serve more",
            fit.max_clients
        ));
    }
    Ok(fit.max_clients)
}

pub fn run(args: Args) -> CliResult {
    crate::cmd::check_quarantine_file(&args.quarantine_file)?;
    let file = match &args.config {
        Some(path) => cxltier_server::config_file::read(path).map_err(CliError::classified)?,
        None => cxltier_server::config_file::ConfigFile::default(),
    };
    let log = Log::open(file.log_file.as_ref())?;
    if args.config.is_some() {
        // What scripts and test harnesses written for redis-server wait for in its log.
        log.say(&format!(
            "cxltier {} starting, PID: {}",
            env!("CARGO_PKG_VERSION"),
            std::process::id()
        ));
    }
    for warning in &file.warnings {
        log.say(&format!("warning: {warning}"));
    }
    // Redis enters `dir` as it reads the file: relative paths (--ssd, pidfile) are then in it.
    if let Some(dir) = &file.dir {
        std::env::set_current_dir(dir).map_err(|e| {
            io_error(
                &e,
                format!(
                    "entering the configuration file's dir {}: {e}",
                    dir.display()
                ),
            )
            .with_hint("create the directory or fix the dir line")
        })?;
    }
    let bind = match (&args.bind, file.listen_addr()) {
        (Some(text), _) => cxltier_server::parse_bind(text).map_err(CliError::classified)?,
        (None, Some(addr)) => addr,
        (None, None) => std::net::SocketAddr::from(([127, 0, 0, 1], 6379)),
    };
    let query_limit = match (
        &args.client_query_buffer_limit,
        file.client_query_buffer_limit,
    ) {
        (Some(text), _) => {
            cxltier_server::parse_query_buffer_limit(text).map_err(CliError::classified)?
        }
        (None, Some(n)) => n,
        (None, None) => 64 << 20,
    };
    let output_limit: OutputBufferLimit = match (
        &args.client_output_buffer_limit,
        file.client_output_buffer_limit,
    ) {
        (Some(text), _) => text
            .parse()
            .map_err(|e: String| CliError::bad_input(format!("--{e}")))?,
        (None, Some(limit)) => limit,
        (None, None) => OutputBufferLimit::default(),
    };
    let max_clients = fit_max_clients(
        args.max_clients
            .or(file.max_clients)
            .unwrap_or(10_000)
            .max(1),
        &log,
    )?;
    let databases = args
        .databases
        .or(file.databases)
        .unwrap_or(cxltier_server::db::DEFAULT_DATABASES);
    cxltier_server::db::check_count(databases)
        .map_err(|e| CliError::bad_input(e).with_hint("Redis's default is 16"))?;
    let requirepass = args.requirepass.or(file.requirepass);
    // Listen before the store is opened (a port in use need not wait for a recovery) and say
    // so only once it is done.
    let listener = cxltier_server::bind(bind).map_err(CliError::classified)?;
    // The address said is the one bound: with port 0 the kernel picks it (scripts read it here).
    let bound = listener.local_addr().unwrap_or(bind);
    let metrics = crate::cmd::serve_metrics("serve", args.metrics_addr.as_deref())?;
    let (dram, cxl) = (args.dram, args.cxl);
    let max_object = args.max_object as usize;
    let ssd: Option<SsdSpec> = args
        .ssd
        .as_deref()
        .map(str::parse)
        .transpose()
        .map_err(CliError::bad_input)?;
    let durability: Option<Durability> = args
        .durability
        .as_deref()
        .map(str::parse)
        .transpose()
        .map_err(CliError::bad_input)?;
    let store = StoreOptions {
        dram,
        cxl,
        ssd: ssd.clone(),
        durability,
        max_object,
        nvme_queue_depth: Some(args.nvme_queue_depth),
        recover_anyway: args.recover_anyway,
        dram_node: args.dram_node,
        cxl_node: args.cxl_node,
        // Without a node directory the kernel has no NUMA: the store's default, node 0 alone,
        // is then the truth.
        topology: cxltier_topo::Topology::discover(std::path::Path::new("/")).ok(),
    }
    .open()
    .map_err(CliError::classified)?;
    if !bind.ip().is_loopback() {
        log.say(&format!(
            "warning: listening on {bound}, reachable from the network{}",
            if requirepass.is_none() {
                ", with no password (add --requirepass)"
            } else {
                ""
            }
        ));
    }
    report_recovery(&store, &log);
    let stats = store.stats();
    let tiers = stats.tier_lines(
        ssd.as_ref().map(|s| s.path.as_path()),
        args.nvme_queue_depth,
    );
    log.say(&format!(
        "listening on {bound}; {}; durability {}; {} keys recovered",
        tiers.join(", "),
        stats.durability,
        store.recovered_keys()
    ));
    log.say(&format!(
        "following the quarantine file {} (poisoned ranges; missing: none)",
        args.quarantine_file.display()
    ));
    let stop = crate::cmd::stop_flag()?;
    // --acl-file, or the configuration file's `aclfile` (Redis's name for it).
    let acl_file = args.acl_file.or_else(|| {
        file.settings
            .iter()
            .find(|s| s.name == "aclfile" && !s.value.is_empty())
            .map(|s| std::path::PathBuf::from(&s.value))
    });
    let cfg = ServerConfig {
        bind,
        requirepass,
        max_clients,
        quarantine_file: Some(args.quarantine_file),
        client_query_buffer_limit: query_limit,
        client_output_buffer_limit: output_limit,
        databases,
        log: {
            let log = log.clone();
            cxltier_server::LogSink::new(move |line| log.say(line))
        },
        // A replica's snapshot is written next to a --ssd file (not on a block device's
        // directory, /dev); without one it is kept in memory.
        snapshot_dir: ssd.as_ref().and_then(SsdSpec::file_dir),
        metrics,
        settings: file.settings,
        acl_file,
        users: file.users,
    };
    let pid_file = file.pid_file.map(|path| PidFile::write(path, &log));
    let served = cxltier_server::serve_on(listener, cfg, store, stop);
    drop(pid_file);
    served.map_err(CliError::classified)?;
    log.say("stopped; the store is closed");
    Ok(std::process::ExitCode::SUCCESS)
}

/// Say what recovery could not read (with --recover-anyway) and what a crash tore.
fn report_recovery(store: &cxltier_store::Store, log: &Log) {
    for note in store.recovery().notes() {
        log.say(&format!("recovery: {note}"));
    }
}

/// The configuration file's `pidfile`: written once the server listens, removed when it stops
/// (as Redis does). A pid file that cannot be written is said in the log and does not stop the
/// server (Redis only logs it too).
struct PidFile(Option<std::path::PathBuf>);

impl PidFile {
    fn write(path: std::path::PathBuf, log: &Log) -> PidFile {
        match std::fs::write(&path, format!("{}\n", std::process::id())) {
            Ok(()) => PidFile(Some(path)),
            Err(e) => {
                log.say(&format!(
                    "warning: cannot write the pidfile {}: {e}",
                    path.display()
                ));
                PidFile(None)
            }
        }
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if let Some(path) = &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}
