//! `cxltier ycsb load|run`: YCSB's core workloads against a Redis-protocol or memcached server.

use std::io::IsTerminal;
use std::time::Duration;

use std::sync::Arc;

use cxltier_ycsb::oracle::{BoundDraws, PageLayout};
use cxltier_ycsb::{
    check_load_generation, DataSet, Distribution, Phase, ProgressHook, Protocol, RunConfig,
    ScanMethod,
};

use crate::error::{Class, CliError, CliResult};
use crate::output::{print_json, Table};

const LONG_HELP: &str = "\
Semantics are YCSB 0.17.0's CoreWorkload: workloads A (50% read, 50% update), B (95/5), C (read
only), D (95% read, 5% insert, latest distribution), E (95% scan of up to 100 records, 5% insert),
F (50% read, 50% read-modify-write); keys \"user\" + FNV-64 hash of the key number (hashed insert
order); scrambled zipfian (constant 0.99 over 10^10 ranks hashed onto the keys), latest, uniform
and hotspot choosers; updates write one field, reads read all.

Over RESP a record is a hash: insert HSET (plus ZADD _indices for servers without SCANRANGE, as
YCSB's Redis binding does), read HGETALL, update HSET of one field, scan SCANRANGE against
cxltier or ZRANGEBYSCORE + HGETALL against Redis. Over memcache a record is one JSON value (as
YCSB's memcached binding stores it); workload E needs RESP.

Load generation: --threads threads, each with --connections connections, each with up to
--pipeline requests in flight. With --target the driver runs open loop: operations are scheduled
at the target rate and latency counts from each operation's intended start, so a stalled server
shows in the percentiles (coordinated omission corrected). Without --target it runs as fast as the
window allows and latency counts from sending. Reads are verified (field count and lengths).

Run `load` first with the same --records, then `run`.

`hit-bound` needs no server: it draws the workload's key choices (--draws of them) and prints,
for each --cache-objects size, the share that falls on the most requested keys: no cache of that
many objects can hit more often on this workload, so a store's memory hit ratio is read against
it.

`page-bound` is the same for a page-level tier (swap, `cxltier tierd` in memory mode): for each
--cache-pages size, the fewest page faults per operation any policy keeping that many pages can
have, and LRU's, with the records laid out as --page-layout says (each region of the allocator
filled in load order). A tier that sees pages cannot beat it, whatever it predicts.";

/// The wire protocol (`cxltier_ycsb::Protocol`).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ProtocolArg {
    /// Redis protocol; records are hashes.
    Resp,
    /// memcached text protocol; a record is one JSON value.
    Memcache,
}

impl From<ProtocolArg> for Protocol {
    fn from(p: ProtocolArg) -> Protocol {
        match p {
            ProtocolArg::Resp => Protocol::Resp,
            ProtocolArg::Memcache => Protocol::Memcache,
        }
    }
}

/// How to scan over RESP (`cxltier_ycsb::ScanMethod`).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ScanArg {
    /// Decide from the server's INFO (cxltier: scanrange, else zset).
    Auto,
    /// cxltier's `SCANRANGE start count`.
    Scanrange,
    /// YCSB's Redis binding: a sorted set `_indices` scored by the key's Java hashCode.
    Zset,
}

impl From<ScanArg> for ScanMethod {
    fn from(s: ScanArg) -> ScanMethod {
        match s {
            ScanArg::Auto => ScanMethod::Auto,
            ScanArg::Scanrange => ScanMethod::Scanrange,
            ScanArg::Zset => ScanMethod::Zset,
        }
    }
}

/// `requestdistribution` (`cxltier_ycsb::Distribution`).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum DistributionArg {
    Zipfian,
    Latest,
    Uniform,
    Hotspot,
}

impl From<DistributionArg> for Distribution {
    fn from(d: DistributionArg) -> Distribution {
        match d {
            DistributionArg::Zipfian => Distribution::Zipfian,
            DistributionArg::Latest => Distribution::Latest,
            DistributionArg::Uniform => Distribution::Uniform,
            DistributionArg::Hotspot => Distribution::Hotspot,
        }
    }
}

/// How the report is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum FormatArg {
    /// A table of operations and percentiles
    Table,
    /// YCSB 0.17's own report lines (`[OVERALL], Throughput(ops/sec), ...`), for its parsers
    Ycsb,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum PhaseArg {
    Load,
    Run,
    /// No server: the best hit ratio caches of --cache-objects keys can reach on this
    /// workload's key choices (the most requested keys always cached)
    HitBound,
    /// No server: the fewest page faults per operation any page-level tier keeping
    /// --cache-pages pages can have on this workload, for the records laid out in memory as
    /// --page-layout says (with LRU's figure beside it)
    PageBound,
}

/// Load and run YCSB workloads A-F against a Redis-protocol or memcached server
#[derive(clap::Args)]
#[command(after_long_help = LONG_HELP)]
pub struct Args {
    /// load (insert the records) or run (the workload's operations)
    #[arg(value_enum)]
    phase: PhaseArg,
    /// Workload: a, b, c, d, e or f
    #[arg(long, default_value = "a")]
    workload: String,
    /// Records in the data set (recordcount)
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Operations to run (operationcount; default: as many as records)
    #[arg(long)]
    ops: Option<u64>,
    /// Stop after this many seconds even if operations remain
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Driver threads
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Connections per thread
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Requests in flight per connection
    #[arg(long, default_value_t = 16)]
    pipeline: usize,
    /// Target operations per second (open loop); default: as fast as possible
    #[arg(long, value_name = "OPS")]
    target: Option<f64>,
    /// Open loop: wake at most every this many microseconds to send what has come due (those
    /// operations go out together, late by up to this much, and their latency includes it)
    #[arg(long, value_name = "US", default_value_t = 50)]
    send_interval_us: u64,
    /// Fields per record
    #[arg(long, default_value_t = 10)]
    field_count: usize,
    /// Bytes per field
    #[arg(long, default_value_t = 100)]
    field_length: usize,
    /// First key number (insertstart)
    #[arg(long, default_value_t = 0)]
    insert_start: u64,
    /// Override the workload's request distribution
    #[arg(long, value_enum, value_name = "DIST")]
    request_distribution: Option<DistributionArg>,
    /// Wire protocol
    #[arg(long, value_enum, default_value = "resp")]
    protocol: ProtocolArg,
    /// Server address (default 127.0.0.1:6379 for resp, 127.0.0.1:11211 for memcache)
    #[arg(long, value_name = "HOST:PORT")]
    addr: Option<String>,
    /// Password for AUTH
    #[arg(long)]
    password: Option<String>,
    /// How to scan over RESP
    #[arg(long, value_enum, default_value = "auto")]
    scan: ScanArg,
    /// YCSB's dataintegrity: values are built from key and field name, and every read checks
    /// every byte it gets back (mismatches count as verify_errors); load and run must both use it
    #[arg(long)]
    data_integrity: bool,
    /// hit-bound: cache sizes in objects (comma-separated)
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    cache_objects: Vec<u64>,
    /// hit-bound, page-bound: key choices to draw
    #[arg(long, default_value_t = 4_000_000)]
    draws: u64,
    /// page-bound: the bytes each record has in each region of memory the allocator fills in
    /// load order, one per size class (read them from Redis's MEMORY MALLOC-STATS: a class's
    /// current regions times its size, over the records)
    #[arg(long, value_delimiter = ',', value_name = "BYTES,...")]
    page_layout: Vec<u64>,
    /// page-bound: resident cache sizes in pages (comma-separated)
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    cache_pages: Vec<u64>,
    /// page-bound: the page size in bytes
    #[arg(long, default_value_t = 4096)]
    page_bytes: u64,
    /// Seed of the key, operation and value choices (default: a new one each run, as YCSB does;
    /// the report gives it, to replay a run). Runs that replay one key sequence warm a cache with
    /// exactly the keys they will ask for.
    #[arg(long)]
    seed: Option<u64>,
    /// Print JSON for scripts
    #[arg(long, conflicts_with = "format")]
    json: bool,
    /// Report format: `ycsb` prints YCSB 0.17's lines, for the parsers and plots that read them
    #[arg(long, value_enum, default_value = "table")]
    format: FormatArg,
    /// Write an HdrHistogram interval log here (one interval per status interval: all operations
    /// untagged, each operation tagged with its name), as YCSB's hdrhistogram.fileoutput does
    #[arg(long, value_name = "FILE")]
    hdr_log: Option<std::path::PathBuf>,
    /// Seconds between status lines (YCSB's status.interval); status lines go to stderr when
    /// stdout is not a terminal, as with YCSB's -s
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    status_interval: f64,
}

/// The records, as `--records`, `--insert-start`, `--field-count`, `--field-length` and
/// `--data-integrity` give them.
fn data_set(args: &Args) -> DataSet {
    DataSet {
        records: args.records,
        insert_start: args.insert_start,
        field_count: args.field_count,
        field_length: args.field_length,
        data_integrity: args.data_integrity,
    }
}

pub fn run(args: Args) -> CliResult {
    let mut spec = cxltier_ycsb::core_workload(&args.workload).map_err(CliError::classified)?;
    if let Some(d) = args.request_distribution {
        spec.distribution = d.into();
    }
    check_load_generation(
        args.threads,
        args.connections,
        args.pipeline,
        args.target,
        args.status_interval,
    )
    .map_err(CliError::classified)?;
    let protocol = Protocol::from(args.protocol);
    let addr = args
        .addr
        .clone()
        .unwrap_or_else(|| protocol.default_addr().into());
    // The bounds draw the run phase's key choices (no server), from seed 1 unless given, so
    // that a bound is the same each time.
    let bounds = || {
        BoundDraws::new(spec.clone(), data_set(&args))
            .operations(args.ops.unwrap_or(args.records))
            .draws(args.draws)
            .seed(args.seed.unwrap_or(1))
    };
    let phase = match args.phase {
        PhaseArg::Load => Phase::Load,
        PhaseArg::Run => Phase::Run,
        PhaseArg::HitBound => return hit_bound(&args, &bounds()),
        PhaseArg::PageBound => return page_bound(&args, &bounds()),
    };
    if !args.cache_objects.is_empty() {
        return Err(CliError::bad_input("--cache-objects is for `hit-bound`"));
    }
    if !args.cache_pages.is_empty() || !args.page_layout.is_empty() {
        return Err(CliError::bad_input(
            "--cache-pages and --page-layout are for `page-bound`",
        ));
    }
    let operations = match phase {
        Phase::Load => args.records,
        Phase::Run => args.ops.unwrap_or(args.records),
    };
    let shared = cxltier_ycsb::shared(spec, phase, data_set(&args), operations)
        .map_err(CliError::classified)?;
    // A bar for people watching a long run; YCSB's status lines when the output goes to a file
    // or a pipe (a log of the run, as YCSB's -s writes).
    let on_terminal = std::io::stdout().is_terminal();
    let bar =
        (!args.json && on_terminal && std::io::stderr().is_terminal() && operations >= 200_000)
            .then(|| {
                let b = indicatif::ProgressBar::new(operations);
                b.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{prefix} [{bar:30}] {pos}/{len} {per_sec} eta {eta}",
                    )
                    .expect("valid template")
                    .progress_chars("=> "),
                );
                b.set_prefix(if phase == Phase::Load { "load" } else { "run" });
                b
            });
    let hdr_log = args
        .hdr_log
        .as_deref()
        .map(cxltier_ycsb::hdr_log_file)
        .transpose()
        .map_err(CliError::classified)?;
    let on_interval = (!on_terminal).then(|| -> cxltier_ycsb::IntervalHook {
        Arc::new(|iv: &cxltier_ycsb::Interval| {
            eprintln!(
                "{}",
                cxltier_ycsb::text::status_line(iv, std::time::SystemTime::now())
            );
        })
    });
    let cfg = RunConfig {
        addr: addr.clone(),
        protocol,
        scan: args.scan.into(),
        phase,
        threads: args.threads,
        connections: args.connections,
        pipeline: args.pipeline,
        target: args.target,
        operations,
        max_time: args.duration.map(Duration::from_secs_f64),
        password: args.password.clone(),
        seed: args.seed.unwrap_or_else(cxltier_ycsb::fresh_seed),
        on_ack: None,
        on_progress: bar
            .clone()
            .map(|b| -> ProgressHook { Arc::new(move |done| b.set_position(done)) }),
        send_interval: Duration::from_micros(args.send_interval_us),
        interval_period: Duration::from_secs_f64(args.status_interval),
        on_interval,
        hdr_log,
    };
    let report = cxltier_ycsb::run(&cfg, shared);
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let report = report.map_err(CliError::classified)?;
    if args.json {
        print_json("ycsb", &report)?;
    } else if args.format == FormatArg::Ycsb {
        // stdout holds YCSB's lines alone; what replays the run goes to stderr.
        eprintln!(
            "{} workload {} against {}; latency from {}; seed {}",
            if phase == Phase::Load { "load" } else { "run" },
            report.workload,
            report.addr,
            report.latency_from,
            report.seed
        );
        print!("{}", cxltier_ycsb::text::report(&report));
    } else {
        println!(
            "{} workload {} against {} ({:?}): {} operations in {:.2} s, {:.0} ops/s; latency from {}; seed {}",
            if phase == Phase::Load { "load" } else { "run" },
            report.workload,
            report.addr,
            report.protocol,
            report.operations,
            report.run_time_s,
            report.throughput_ops_per_sec,
            report.latency_from,
            report.seed
        );
        let mut t =
            Table::from_header("operation|count|errors|ops/s|avg µs|min|p50|p90|p95|p99|p99.9|max");
        for o in &report.per_operation {
            t.row([
                o.operation.to_string(),
                o.count.to_string(),
                o.errors.to_string(),
                format!("{:.0}", o.ops_per_sec),
                format!("{:.0}", o.avg_us),
                o.min_us.to_string(),
                o.p50_us.to_string(),
                o.p90_us.to_string(),
                o.p95_us.to_string(),
                o.p99_us.to_string(),
                o.p999_us.to_string(),
                o.max_us.to_string(),
            ]);
        }
        print!("{}", t.render());
        if report.verify_errors > 0 {
            println!(
                "verify errors: {} reads returned an incomplete record",
                report.verify_errors
            );
        }
        if let Some(e) = &report.first_error {
            println!("first error: {e}");
        }
    }
    if report.errors > 0 || report.verify_errors > 0 {
        return Err(CliError::new(
            Class::Runtime,
            format!(
                "{} errors and {} verify errors",
                report.errors, report.verify_errors
            ),
        ));
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// `ycsb page-bound`: a table of the fewest page faults per operation by resident size, and
/// LRU's, or the report as JSON.
fn page_bound(args: &Args, draws: &BoundDraws) -> CliResult {
    let layout = PageLayout {
        bytes_per_record: args.page_layout.clone(),
        page_bytes: args.page_bytes,
    };
    let report = draws
        .page_bounds(&layout, &args.cache_pages)
        .map_err(CliError::classified)?;
    if args.json {
        print_json("ycsb page-bound", &report)?;
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let mut t =
        Table::from_header("cache pages|of the pages|best faults/op|LRU faults/op|LRU / best");
    for r in &report.bounds {
        t.row([
            r.cache_pages.to_string(),
            format!("{:.1}%", 100.0 * r.cache_share),
            format!("{:.3}", r.best_faults_per_op),
            format!("{:.3}", r.lru_faults_per_op),
            if r.best_faults_per_op > 0.0 {
                format!("{:.2}", r.lru_faults_per_op / r.best_faults_per_op)
            } else {
                "-".into()
            },
        ]);
    }
    println!(
        "workload {}, {} records on {} pages of {} bytes, {:.2} pages per operation, {} key \
         choices drawn:",
        report.workload,
        report.records,
        report.pages,
        report.page_bytes,
        report.pages_per_op,
        report.draws
    );
    print!("{}", t.render());
    Ok(std::process::ExitCode::SUCCESS)
}

/// `ycsb hit-bound`: a table of the best hit ratio by cache size, or the report as JSON.
fn hit_bound(args: &Args, draws: &BoundDraws) -> CliResult {
    let report = draws
        .hit_bounds(&args.cache_objects)
        .map_err(CliError::classified)?;
    if args.json {
        print_json("ycsb hit-bound", &report)?;
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let mut t = Table::new(["cache objects", "of the records", "best hit ratio"]);
    for r in &report.bounds {
        t.row([
            r.cache_objects.to_string(),
            format!("{:.1}%", 100.0 * r.cache_share),
            format!("{:.1}%", 100.0 * r.best_hit_ratio),
        ]);
    }
    println!(
        "workload {}, {} records, {} key choices drawn:",
        report.workload, report.records, report.draws
    );
    print!("{}", t.render());
    Ok(std::process::ExitCode::SUCCESS)
}
