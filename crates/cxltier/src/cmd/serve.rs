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
    /// Port 0: the kernel picks a free one, said in the "listening on" line
    #[arg(long, default_value = "127.0.0.1:6379", value_name = "ADDR:PORT")]
    bind: String,
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
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    max_clients: usize,
    /// Databases clients may SELECT (1-254; Redis's `databases`). A store keeps the databases
    /// it was written with: restarting it with fewer than hold keys (or were swapped) is refused
    #[arg(long, default_value_t = cxltier_server::db::DEFAULT_DATABASES, value_name = "N")]
    databases: usize,
    /// Most bytes of one connection's input held: past it, the connection is not read until
    /// its queued commands have run; a single command longer than this closes the connection.
    /// The bulk data of the command being received count on top of it, up to one bulk of
    /// --max-object (a limit, not an allocation: buffers grow with what a client sends)
    #[arg(long, default_value = "64mb", value_name = "BYTES")]
    client_query_buffer_limit: String,
    /// "HARD SOFT SECONDS", as Redis's client-output-buffer-limit normal: at SOFT bytes of
    /// replies a client has not read, its commands wait until it reads; over HARD, or over SOFT
    /// for SECONDS (0: no time limit), it is disconnected
    #[arg(
        long,
        default_value = "64mb 4mb 60",
        value_name = "\"HARD SOFT SECONDS\""
    )]
    client_output_buffer_limit: String,
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

/// `--max-clients` fitted to the open-file limit (raised as far as the hard limit lets it);
/// stderr says when fewer clients are served.
fn fit_max_clients(wanted: usize) -> Result<usize, CliError> {
    let fit = cxltier_server::limits::fit_max_clients(wanted).map_err(CliError::classified)?;
    if let Some(OpenFilesLimit { soft, hard, needed }) = fit.reduced {
        eprintln!(
            "cxltier serve: maxclients reduced to {}: the open-file limit is {soft} (hard limit {hard}) and {wanted} clients need {needed}; raise it with ulimit -n (or LimitNOFILE= in a systemd unit) to serve more",
            fit.max_clients
        );
    }
    Ok(fit.max_clients)
}

pub fn run(args: Args) -> CliResult {
    crate::cmd::check_quarantine_file(&args.quarantine_file)?;
    let bind = cxltier_server::parse_bind(&args.bind).map_err(CliError::classified)?;
    let query_limit = cxltier_server::parse_query_buffer_limit(&args.client_query_buffer_limit)
        .map_err(CliError::classified)?;
    let output_limit: OutputBufferLimit = args
        .client_output_buffer_limit
        .parse()
        .map_err(|e: String| CliError::bad_input(format!("--{e}")))?;
    let max_clients = fit_max_clients(args.max_clients.max(1))?;
    cxltier_server::db::check_count(args.databases)
        .map_err(|e| CliError::bad_input(e).with_hint("Redis's default is 16"))?;
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
        eprintln!(
            "cxltier serve: warning: listening on {bound}, reachable from the network{}",
            if args.requirepass.is_none() {
                ", with no password (add --requirepass)"
            } else {
                ""
            }
        );
    }
    report_recovery(&store);
    let stats = store.stats();
    let tiers = stats.tier_lines(
        ssd.as_ref().map(|s| s.path.as_path()),
        args.nvme_queue_depth,
    );
    eprintln!(
        "cxltier serve: listening on {bound}; {}; durability {}; {} keys recovered",
        tiers.join(", "),
        stats.durability,
        store.recovered_keys()
    );
    eprintln!(
        "cxltier serve: following the quarantine file {} (poisoned ranges; missing: none)",
        args.quarantine_file.display()
    );
    let stop = crate::cmd::stop_flag()?;
    let cfg = ServerConfig {
        bind,
        requirepass: args.requirepass,
        max_clients,
        quarantine_file: Some(args.quarantine_file),
        client_query_buffer_limit: query_limit,
        client_output_buffer_limit: output_limit,
        databases: args.databases,
        log: cxltier_server::LogSink::new(|line| eprintln!("cxltier serve: {line}")),
        // A replica's snapshot is written next to a --ssd file (not on a block device's
        // directory, /dev); without one it is kept in memory.
        snapshot_dir: ssd.as_ref().and_then(SsdSpec::file_dir),
        metrics,
        acl_file: args.acl_file,
    };
    cxltier_server::serve_on(listener, cfg, store, stop).map_err(CliError::classified)?;
    eprintln!("cxltier serve: stopped; the store is closed");
    Ok(std::process::ExitCode::SUCCESS)
}

/// Say on stderr what recovery could not read (with --recover-anyway) and what a crash tore.
fn report_recovery(store: &cxltier_store::Store) {
    for note in store.recovery().notes() {
        eprintln!("cxltier serve: recovery: {note}");
    }
}
