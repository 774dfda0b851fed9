//! `cxltier serve`: the tiered object store over the Redis protocol.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use cxltier_control::size::parse_size;
use cxltier_server::{ServerConfig, ServerError};
use cxltier_store::{Durability, SsdSpec, StoreBuilder, StoreError};
use cxltier_topo::format_bytes;

use crate::cmd::apply::control_error;
use crate::error::{CliError, CliResult, Kind};

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
    /// Address to listen on (loopback by default; other addresses expose the store to the network)
    #[arg(long, default_value = "127.0.0.1:6379", value_name = "ADDR:PORT")]
    bind: String,
    /// DRAM budget, index included: 256M, 4G ...
    #[arg(long, default_value = "256M", value_name = "SIZE")]
    dram: String,
    /// CXL budget (0: no CXL tier)
    #[arg(long, default_value = "0", value_name = "SIZE")]
    cxl: String,
    /// The NVMe tier: a file or block device, PATH[:SIZE]
    #[arg(long, value_name = "PATH[:SIZE]")]
    ssd: Option<String>,
    /// none, everysec or always (default: everysec with --ssd, none without)
    #[arg(long, value_name = "MODE")]
    durability: Option<String>,
    /// Require AUTH with this password
    #[arg(long, value_name = "PASSWORD")]
    requirepass: Option<String>,
    /// NUMA node of the DRAM arena (default 0)
    #[arg(long, value_name = "NODE")]
    dram_node: Option<u32>,
    /// NUMA node of the CXL arena (default: the first CPU-less memory node)
    #[arg(long, value_name = "NODE")]
    cxl_node: Option<u32>,
    /// Largest value accepted
    #[arg(long, default_value = "1M", value_name = "SIZE")]
    max_object: String,
    /// Most object reads at the NVMe device at once (1-256); more wait in the server and begin as
    /// earlier ones finish. Raise it for a drive that reads faster with deeper queues
    #[arg(long, default_value_t = cxltier_store::DEFAULT_NVME_QUEUE_DEPTH, value_name = "N")]
    nvme_queue_depth: u32,
    /// Most connections at once
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    max_clients: usize,
    /// Follow this file of poisoned physical ranges (written by `cxltier ras --watch
    /// --quarantine`; missing: nothing quarantined): objects on them are restored from NVMe or
    /// reported lost, and their memory is never used again (needs root to map the ranges)
    #[arg(long, value_name = "PATH", default_value = cxltier_ras::quarantine::DEFAULT_PATH)]
    quarantine_file: std::path::PathBuf,
    /// Start even when the NVMe log is damaged (bytes recovery cannot read, which may have held
    /// acknowledged writes): serve what is readable, and report the damaged ranges and the keys
    /// that may be stale. Without it such a start is refused and nothing is written
    #[arg(long)]
    recover_anyway: bool,
}

pub(crate) fn store_error(e: StoreError) -> CliError {
    let kind = match &e {
        StoreError::Config(_) | StoreError::TooLarge { .. } => Kind::BadInput,
        StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
            Kind::Permission
        }
        _ => Kind::Runtime,
    };
    CliError::new(kind, e.to_string())
}

pub fn run(args: Args) -> CliResult {
    crate::cmd::ras::check_quarantine_file(&args.quarantine_file)?;
    let bind: SocketAddr = args.bind.parse().map_err(|_| {
        CliError::bad_input(format!("--bind {}: not an ADDRESS:PORT", args.bind))
            .with_hint("for example --bind 127.0.0.1:6379")
    })?;
    let dram = parse_size(&args.dram).map_err(control_error)?;
    let cxl = match args.cxl.trim() {
        "0" | "" => 0,
        text => parse_size(text).map_err(control_error)?,
    };
    let max_object = parse_size(&args.max_object).map_err(control_error)? as usize;
    let ssd: Option<SsdSpec> = args
        .ssd
        .as_deref()
        .map(str::parse)
        .transpose()
        .map_err(CliError::bad_input)?;
    let durability: Durability = match &args.durability {
        Some(d) => d.parse().map_err(CliError::bad_input)?,
        None if ssd.is_some() => Durability::EverySec,
        None => Durability::None,
    };
    let mut builder = StoreBuilder::new()
        .dram(dram)
        .cxl(cxl)
        .durability(durability)
        .max_object(max_object)
        .nvme_queue_depth(args.nvme_queue_depth)
        .recover_anyway(args.recover_anyway);
    if let Some(s) = ssd.clone() {
        builder = builder.ssd(s);
    }
    if let Some(n) = args.dram_node {
        builder = builder.dram_node(n);
    }
    if let Some(n) = args.cxl_node {
        builder = builder.cxl_node(n);
    }
    let store = builder.build().map_err(store_error)?;
    if !bind.ip().is_loopback() {
        eprintln!(
            "cxltier serve: warning: listening on {bind}, reachable from the network{}",
            if args.requirepass.is_none() {
                ", with no password (add --requirepass)"
            } else {
                ""
            }
        );
    }
    report_recovery(&store);
    let stats = store.stats();
    let tiers: Vec<String> = stats
        .tiers
        .iter()
        .map(|t| match (t.tier, t.node) {
            ("cxl", Some(n)) if stats.cxl_emulated_on_dram => format!(
                "cxl {} on node{n} (no CPU-less node: emulated on DRAM)",
                format_bytes(t.capacity_bytes)
            ),
            (name, Some(n)) => format!("{name} {} on node{n}", format_bytes(t.capacity_bytes)),
            (name, None) => format!(
                "{name} {} at {} (up to {} reads at once)",
                format_bytes(t.capacity_bytes),
                ssd.as_ref()
                    .map(|s| s.path.display().to_string())
                    .unwrap_or_default(),
                args.nvme_queue_depth
            ),
        })
        .collect();
    eprintln!(
        "cxltier serve: listening on {bind}; {}; durability {}; {} keys recovered",
        tiers.join(", "),
        stats.durability,
        store.recovered_keys()
    );
    eprintln!(
        "cxltier serve: following the quarantine file {} (poisoned ranges; missing: none)",
        args.quarantine_file.display()
    );
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| CliError::runtime(format!("cannot handle signal {sig}: {e}")))?;
    }
    let cfg = ServerConfig {
        bind,
        requirepass: args.requirepass,
        max_clients: args.max_clients.max(1),
        quarantine_file: Some(args.quarantine_file),
    };
    cxltier_server::serve(cfg, store, stop).map_err(|e| match e {
        ServerError::Bind { .. } => CliError::new(Kind::BadInput, e.to_string()),
        other => CliError::runtime(other.to_string()),
    })?;
    eprintln!("cxltier serve: stopped; the store is closed");
    Ok(std::process::ExitCode::SUCCESS)
}

/// Say on stderr what recovery could not read (with --recover-anyway) and what a crash tore.
fn report_recovery(store: &cxltier_store::Store) {
    let r = store.recovery();
    for d in &r.damaged_ranges {
        eprintln!("cxltier serve: recovery: damaged: {d}");
    }
    if !r.damaged_ranges.is_empty() {
        eprintln!(
            "cxltier serve: recovery: {} range(s), {} bytes could not be read; {} key(s) are served although a newer version or a delete of theirs may be lost (--recover-anyway)",
            r.damaged_ranges.len(),
            r.damaged_bytes,
            r.keys_possibly_stale
        );
    }
    if let Some(t) = &r.torn_tail {
        eprintln!("cxltier serve: recovery: left as it is: {t}");
    }
    if r.headers_repaired > 0 {
        eprintln!(
            "cxltier serve: recovery: {} segment header(s) were damaged; their records told their place, and they are not written to again",
            r.headers_repaired
        );
    }
}
