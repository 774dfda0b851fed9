//! Driving the load: threads, each with several pipelined connections, open loop at a target rate
//! (latency measured from each operation's intended start: coordinated-omission corrected) or as
//! fast as the in-flight window allows.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::generator::java_string_hash;
use crate::protocol::{parse_mc, McReply};
use crate::workload::{deterministic_value, Op, Shared, ThreadGen};
use crate::YcsbError;
use cxltier_resp::{parse_reply, write_command, Client, Reply, RespError};

/// The wire protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Redis protocol; records are hashes.
    Resp,
    /// memcached text protocol; a record is one JSON value.
    Memcache,
}

impl Protocol {
    /// Where its servers listen unless told otherwise: Redis's port, or memcached's.
    pub fn default_addr(self) -> &'static str {
        match self {
            Protocol::Resp => "127.0.0.1:6379",
            Protocol::Memcache => "127.0.0.1:11211",
        }
    }
}

/// Refuse a load generator that cannot run: no thread, connection or request in flight, a
/// target rate that is not a positive number, or a status interval that is not a positive
/// number of seconds.
pub fn check_load_generation(
    threads: usize,
    connections: usize,
    pipeline: usize,
    target: Option<f64>,
    status_interval_seconds: f64,
) -> Result<(), YcsbError> {
    if threads == 0 || connections == 0 || pipeline == 0 {
        return Err(YcsbError::BadInput(
            "--threads, --connections and --pipeline must be at least 1".into(),
        ));
    }
    if target.is_some_and(|t| !(t > 0.0 && t.is_finite())) {
        return Err(YcsbError::BadInput(
            "--target must be a positive number of operations per second".into(),
        ));
    }
    if !(status_interval_seconds > 0.0 && status_interval_seconds.is_finite()) {
        return Err(YcsbError::Usage {
            message: format!(
                "--status-interval {status_interval_seconds}: must be a positive number of seconds"
            ),
            hint: "YCSB's default is 10".into(),
        });
    }
    Ok(())
}

/// How to scan over RESP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanMethod {
    /// Decide from the server's INFO (cxltier: scanrange, else zset).
    Auto,
    /// cxltier's `SCANRANGE start count`.
    Scanrange,
    /// YCSB's Redis binding: a sorted set `_indices` scored by the key's Java hashCode.
    Zset,
}

/// Load (insert every record) or run (the workload's mix).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Load,
    Run,
}

/// A record's fields.
pub type Fields = Vec<(String, Vec<u8>)>;

/// Called with each acknowledged insert: key and the record's fields.
pub type AckHook = Arc<dyn Fn(&str, &[(String, Vec<u8>)]) + Send + Sync>;

/// Called about every 200 ms, from the thread that called [`run`], with the operations done so
/// far (of [`RunConfig::operations`]): for a caller that shows progress.
pub type ProgressHook = Arc<dyn Fn(u64) + Send + Sync>;

/// Called every [`RunConfig::interval_period`], from the thread that called [`run`], with the
/// latencies of the interval just ended: for a caller that prints a status line (YCSB's `-s`).
pub type IntervalHook = Arc<dyn Fn(&Interval) + Send + Sync>;

/// Where [`run`] writes an HdrHistogram interval log (shared so that [`RunConfig`] stays `Clone`).
pub type HdrLogSink = Arc<Mutex<dyn Write + Send>>;

/// An interval log written to a new file at `path` (`--hdr-log`), buffered.
pub fn hdr_log_file(path: &std::path::Path) -> Result<HdrLogSink, YcsbError> {
    let file = std::fs::File::create(path).map_err(|e| YcsbError::Usage {
        message: format!("--hdr-log {}: {e}", path.display()),
        hint: "give a path in a directory that exists and can be written".into(),
    })?;
    Ok(Arc::new(Mutex::new(io::BufWriter::new(file))))
}

/// One interval of a run: what a status line and an interval log are made of.
#[derive(Debug, Clone)]
pub struct Interval {
    /// When the run started (wall clock).
    pub run_start: std::time::SystemTime,
    /// From the run's start to the interval's start.
    pub start: Duration,
    /// From the run's start to the interval's end.
    pub end: Duration,
    /// Operations done from the run's start to the interval's start.
    pub done_at_start: u64,
    /// Operations done from the run's start to the interval's end.
    pub done: u64,
    /// Operations still to do then (0 once the run stops).
    pub todo: u64,
    /// The last interval: the run is over.
    pub last: bool,
    /// The latencies (µs) of each operation seen so far in the run, of this interval only;
    /// in YCSB's order of names ([`Op::ALL`]).
    pub per_operation: Vec<(&'static str, Histogram<u64>)>,
}

/// How to drive the server.
#[derive(Clone)]
pub struct RunConfig {
    pub addr: String,
    pub protocol: Protocol,
    pub scan: ScanMethod,
    pub phase: Phase,
    pub threads: usize,
    /// Connections per thread.
    pub connections: usize,
    /// Requests in flight per connection.
    pub pipeline: usize,
    /// Operations per second, all threads together (open loop); None: as fast as possible.
    pub target: Option<f64>,
    /// Operations to do (load: records to insert).
    pub operations: u64,
    /// Stop after this long even if operations remain.
    pub max_time: Option<Duration>,
    pub password: Option<String>,
    pub seed: u64,
    pub on_ack: Option<AckHook>,
    /// Told the operations done as the run goes (the driver itself draws nothing).
    pub on_progress: Option<ProgressHook>,
    /// Open loop: the shortest time between two wake-ups to send operations that have come
    /// due (those due in between go out together, late by up to this much, which their
    /// latency includes). Fewer wake-ups leave more of the CPU to the server under test.
    pub send_interval: Duration,
    /// How often [`RunConfig::on_interval`] is told and [`RunConfig::hdr_log`] gets an interval
    /// (YCSB's status.interval, 10 s).
    pub interval_period: Duration,
    /// Told each interval's latencies (YCSB's status thread).
    pub on_interval: Option<IntervalHook>,
    /// An HdrHistogram interval log: per interval, one histogram of all operations (untagged)
    /// and one per operation tagged with its name.
    pub hdr_log: Option<HdrLogSink>,
}

/// The poll token of the open-loop timer.
const TIMER: Token = Token(usize::MAX);

/// One operation type's results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OpReport {
    pub operation: &'static str,
    pub count: u64,
    pub errors: u64,
    pub ops_per_sec: f64,
    pub avg_us: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    /// The lowest latency recorded (0 when none completed).
    pub min_us: u64,
}

/// A seed as a decimal string (see [`Report::seed`]).
fn seed_string<S: serde::Serializer>(seed: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(seed)
}

/// The whole run's results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub phase: Phase,
    pub workload: char,
    pub protocol: Protocol,
    pub addr: String,
    pub threads: usize,
    pub connections: usize,
    pub pipeline: usize,
    pub target_ops_per_sec: Option<f64>,
    /// The seed of the key and operation choices (run again with it to replay them). A decimal
    /// string in JSON: seeds use all 64 bits, and JSON readers that hold numbers as doubles round
    /// those above 2^53, so `--seed` would replay another run.
    #[serde(serialize_with = "seed_string")]
    pub seed: u64,
    pub operations: u64,
    pub run_time_s: f64,
    pub throughput_ops_per_sec: f64,
    pub errors: u64,
    pub verify_errors: u64,
    pub first_error: Option<String>,
    /// Latencies measured from the intended start time (open loop) or from sending (closed loop).
    pub latency_from: &'static str,
    pub per_operation: Vec<OpReport>,
}

/// A latency histogram in µs: 1 µs to a minute at 3 significant digits (YCSB's `Recorder(3)`).
fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

/// A driver thread's latencies of the current interval, taken by the thread that called [`run`]
/// at each interval's end (the lock is uncontended in between).
type IntervalSlot = Arc<Mutex<Vec<Histogram<u64>>>>;

struct Counters {
    hist: Vec<Histogram<u64>>,
    /// Where each latency is also recorded when intervals are reported.
    interval: Option<IntervalSlot>,
    errors: Vec<u64>,
    verify_errors: u64,
    first_error: Option<String>,
}

impl Counters {
    fn new(interval: Option<IntervalSlot>) -> Counters {
        Counters {
            hist: (0..Op::ALL.len()).map(|_| latency_histogram()).collect(),
            interval,
            errors: vec![0; Op::ALL.len()],
            verify_errors: 0,
            first_error: None,
        }
    }
    fn error(&mut self, op: Op, msg: String) {
        self.errors[op.index()] += 1;
        self.first_error.get_or_insert(msg);
    }
}

/// What a request in flight is waiting for.
#[derive(Debug)]
enum Step {
    /// The op completes with this reply.
    Final,
    /// An insert: acknowledge the key number when it completes.
    Insert { keynum: u64, fields: Option<Fields> },
    /// RMW: the read came back; then write one field.
    RmwRead { key: String },
    /// Redis scan: the index range came back; then read each record.
    ScanIndex,
    /// Read after a scan's index lookup (one of `left`).
    Ignore,
}

struct InFlight {
    op: Op,
    intended: Instant,
    step: Step,
    /// Replies still to come for this step (the last one completes it).
    replies: u32,
    /// Verify a HGETALL-like reply: its shape, and with data integrity on, the values of this key.
    verify: Option<String>,
}

struct Conn {
    stream: TcpStream,
    out: Vec<u8>,
    input: Vec<u8>,
    inflight: VecDeque<InFlight>,
}

fn resolve(addr: &str) -> Result<SocketAddr, YcsbError> {
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| YcsbError::BadInput(format!("--addr {addr}: not a HOST:PORT that resolves")))
}

/// A failure of the setup connection, as the driver reports it.
fn setup_error(e: RespError) -> YcsbError {
    match e {
        RespError::Resolve { addr } => {
            YcsbError::BadInput(format!("--addr {addr}: not a HOST:PORT that resolves"))
        }
        RespError::Connect { addr, source } => YcsbError::Connect { addr, source },
        e => YcsbError::Server(e.to_string()),
    }
}

/// Decide how to scan and check the server answers (and accepts the password).
pub fn probe_server(cfg: &RunConfig) -> Result<ScanMethod, YcsbError> {
    if cfg.protocol == Protocol::Memcache {
        let sa = resolve(&cfg.addr)?;
        std::net::TcpStream::connect_timeout(&sa, Duration::from_secs(5)).map_err(|e| {
            YcsbError::Connect {
                addr: cfg.addr.clone(),
                source: e,
            }
        })?;
        return Ok(ScanMethod::Zset);
    }
    let mut c = Client::connect_timeout(&cfg.addr, Duration::from_secs(5)).map_err(setup_error)?;
    // Connecting waits 5 s; the replies, which may follow a server's start, 30.
    c.set_timeout(Duration::from_secs(30))
        .map_err(setup_error)?;
    if let Some(pw) = &cfg.password {
        if let Reply::Error(e) = c.call(&[b"AUTH", pw.as_bytes()]).map_err(setup_error)? {
            return Err(YcsbError::Server(format!("AUTH failed: {e}")));
        }
    }
    let info = match c.call(&[b"INFO", b"server"]).map_err(setup_error)? {
        Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        Reply::Error(e) if e.starts_with("NOAUTH") => {
            return Err(YcsbError::Server(format!(
                "{e}: give the password with --password"
            )))
        }
        other => return Err(YcsbError::Server(format!("INFO answered {other:?}"))),
    };
    Ok(match cfg.scan {
        ScanMethod::Auto if info.contains("cxltier_version:") => ScanMethod::Scanrange,
        ScanMethod::Auto => ScanMethod::Zset,
        m => m,
    })
}

/// Run a load or a run phase to completion.
pub fn run(cfg: &RunConfig, shared: Arc<Shared>) -> Result<Report, YcsbError> {
    let scan = probe_server(cfg)?;
    if cfg.protocol == Protocol::Memcache && shared.spec.scan > 0.0 && cfg.phase == Phase::Run {
        return Err(YcsbError::BadInput(
            "workload e scans, and memcached has no scan: run workload e with --protocol resp"
                .into(),
        ));
    }
    let remaining = Arc::new(AtomicU64::new(cfg.operations));
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let results = Arc::new(Mutex::new(Vec::new()));
    let slots: Option<Vec<IntervalSlot>> = (cfg.on_interval.is_some() || cfg.hdr_log.is_some())
        .then(|| {
            (0..cfg.threads)
                .map(|_| {
                    Arc::new(Mutex::new(
                        Op::ALL.iter().map(|_| latency_histogram()).collect(),
                    ))
                })
                .collect()
        });
    let start = Instant::now();
    let mut intervals = slots
        .clone()
        .map(|slots| Intervals::begin(cfg, slots, start))
        .transpose()?;
    if let Some(iv) = intervals.as_mut() {
        // YCSB's status thread reports once as the run starts: before the drivers start, so
        // that the line is the same however fast the first operations come back.
        iv.report(cfg, &done, false)?;
    }
    std::thread::scope(|s| -> Result<(), YcsbError> {
        let mut handles = Vec::new();
        for t in 0..cfg.threads {
            let (remaining, done, stop, results, shared) = (
                remaining.clone(),
                done.clone(),
                stop.clone(),
                results.clone(),
                shared.clone(),
            );
            let slot = slots.as_ref().map(|s| s[t].clone());
            handles.push(s.spawn(move || -> Result<(), YcsbError> {
                let gen = ThreadGen::new(shared, cfg.seed.wrapping_add(t as u64 * 0x9e37_79b9));
                let counters = drive(
                    cfg,
                    scan,
                    gen,
                    Shares {
                        remaining: &remaining,
                        done: &done,
                        stop: &stop,
                    },
                    start,
                    Counters::new(slot),
                )?;
                results.lock().expect("results lock").push(counters);
                Ok(())
            }));
        }
        if cfg.on_progress.is_some() || intervals.is_some() {
            while handles.iter().any(|h| !h.is_finished()) {
                let d = done.load(Ordering::Relaxed);
                if let Some(hook) = &cfg.on_progress {
                    hook(d);
                }
                if let Some(iv) = intervals.as_mut() {
                    if iv.due() {
                        iv.report(cfg, &done, false)?;
                    }
                }
                std::thread::sleep(Duration::from_millis(200).min(cfg.interval_period));
            }
            if let Some(hook) = &cfg.on_progress {
                hook(done.load(Ordering::Relaxed));
            }
        }
        let mut first = Ok(());
        for h in handles {
            let r = h
                .join()
                .unwrap_or_else(|_| Err(YcsbError::Server("a driver thread panicked".into())));
            if r.is_err() && first.is_ok() {
                stop.store(true, Ordering::Relaxed);
                first = r;
            }
        }
        first
    })?;
    let elapsed = start.elapsed().as_secs_f64();
    if let Some(iv) = intervals.as_mut() {
        // The stretch since the last interval, as YCSB's final status line and export do.
        iv.report(cfg, &done, true)?;
    }
    let mut all = Counters::new(None);
    for c in results.lock().expect("results lock").drain(..) {
        for (a, b) in all.hist.iter_mut().zip(&c.hist) {
            a.add(b).expect("same bounds");
        }
        for (a, b) in all.errors.iter_mut().zip(&c.errors) {
            *a += b;
        }
        all.verify_errors += c.verify_errors;
        if all.first_error.is_none() {
            all.first_error = c.first_error;
        }
    }
    let mut per_operation = Vec::new();
    let mut total = 0;
    for op in Op::ALL {
        let h = &all.hist[op.index()];
        let errors = all.errors[op.index()];
        if h.is_empty() && errors == 0 {
            continue;
        }
        total += h.len();
        per_operation.push(OpReport {
            operation: op.name(),
            count: h.len(),
            errors,
            ops_per_sec: h.len() as f64 / elapsed,
            avg_us: h.mean(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p95_us: h.value_at_quantile(0.95),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            min_us: h.min(),
        });
    }
    Ok(Report {
        phase: cfg.phase,
        workload: shared.spec.name,
        protocol: cfg.protocol,
        addr: cfg.addr.clone(),
        threads: cfg.threads,
        connections: cfg.connections,
        pipeline: cfg.pipeline,
        target_ops_per_sec: cfg.target,
        seed: cfg.seed,
        operations: total,
        run_time_s: elapsed,
        throughput_ops_per_sec: total as f64 / elapsed,
        errors: all.errors.iter().sum(),
        verify_errors: all.verify_errors,
        first_error: all.first_error,
        latency_from: if cfg.target.is_some() {
            "intended start (open loop)"
        } else {
            "send"
        },
        per_operation,
    })
}

/// The interval reporting of a run: takes the driver threads' interval histograms each period,
/// tells the hook and writes the log.
struct Intervals {
    slots: Vec<IntervalSlot>,
    run_start: Instant,
    run_start_wall: std::time::SystemTime,
    last_end: Duration,
    last_done: u64,
    period: Duration,
    /// The operations that have completed at least once (YCSB reports a measurement from its
    /// first value on).
    seen: [bool; 5],
    log: Option<HdrLogSink>,
    serializer: hdrhistogram::serialization::V2DeflateSerializer,
}

impl Intervals {
    fn begin(
        cfg: &RunConfig,
        slots: Vec<IntervalSlot>,
        start: Instant,
    ) -> Result<Intervals, YcsbError> {
        let run_start_wall = std::time::SystemTime::now();
        let mut serializer = hdrhistogram::serialization::V2DeflateSerializer::new();
        if let Some(log) = &cfg.hdr_log {
            let mut guard = log.lock().expect("hdr log lock");
            let mut w: &mut (dyn Write + Send) = &mut *guard;
            let names: Vec<&str> = Op::ALL.iter().map(|o| o.name()).collect();
            // The header HdrHistogram's Java HistogramLogWriter writes (as YCSB's
            // hdrhistogram.fileoutput does), then the start time through the crate's builder.
            let header = format!(
                "#[Logging for: {}; untagged: all operations]\n#[Histogram log format version 1.3]\n",
                names.join(", ")
            );
            w.write_all(header.as_bytes()).map_err(hdr_log_error)?;
            hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder::new()
                .with_start_time(run_start_wall)
                .with_max_value_divisor(MAX_VALUE_DIVISOR)
                .begin_log_with(&mut w, &mut serializer)
                .map_err(hdr_log_error)?;
            w.write_all(
                b"\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n",
            )
            .map_err(hdr_log_error)?;
            w.flush().map_err(hdr_log_error)?;
        }
        Ok(Intervals {
            slots,
            run_start: start,
            run_start_wall,
            last_end: Duration::ZERO,
            last_done: 0,
            period: cfg.interval_period,
            seen: [false; 5],
            log: cfg.hdr_log.clone(),
            serializer,
        })
    }

    fn due(&self) -> bool {
        self.run_start.elapsed() >= self.last_end + self.period
    }

    /// Take the interval's histograms from every driver thread, tell the hook, log them.
    /// `done` counts the run's operations; a driver counts each before its latency enters
    /// the interval's histograms, and it is read after they are taken, so the line never shows
    /// more latencies than operations. The last interval (`last`) has nothing left to do.
    fn report(&mut self, cfg: &RunConfig, done: &AtomicU64, last: bool) -> Result<(), YcsbError> {
        let end = self.run_start.elapsed();
        let mut merged: Vec<Histogram<u64>> = Op::ALL.iter().map(|_| latency_histogram()).collect();
        for slot in &self.slots {
            let mut hists = slot.lock().expect("interval lock");
            for (m, h) in merged.iter_mut().zip(hists.iter_mut()) {
                m.add(&*h).expect("same bounds");
                h.reset();
            }
        }
        let done = done.load(Ordering::Relaxed);
        let todo = if last {
            0
        } else {
            cfg.operations.saturating_sub(done)
        };
        for (seen, h) in self.seen.iter_mut().zip(&merged) {
            *seen |= !h.is_empty();
        }
        let per_operation: Vec<(&'static str, Histogram<u64>)> = Op::ALL
            .iter()
            .zip(merged)
            .zip(self.seen)
            .filter(|(_, seen)| *seen)
            .map(|((op, h), _)| (op.name(), h))
            .collect();
        let interval = Interval {
            run_start: self.run_start_wall,
            start: self.last_end,
            end,
            done_at_start: self.last_done,
            done,
            todo,
            last,
            per_operation,
        };
        if let (Some(log), false) = (&self.log, interval.per_operation.is_empty()) {
            // Java's HistogramLogWriter prints each interval's max divided by 10^6; the crate's
            // writer does so only after announcing the divisor in a comment, which the header
            // already holds: each interval is written to a buffer and that comment dropped.
            let mut buf = Vec::new();
            {
                let mut writer =
                    hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder::new()
                        .with_max_value_divisor(MAX_VALUE_DIVISOR)
                        .begin_log_with(&mut buf, &mut self.serializer)
                        .map_err(hdr_log_error)?;
                let length = end.saturating_sub(self.last_end);
                let mut all = latency_histogram();
                for (_, h) in &interval.per_operation {
                    all.add(h).expect("same bounds");
                }
                writer
                    .write_histogram(&all, self.last_end, length, None)
                    .map_err(|e| hdr_log_error(format!("{e:?}")))?;
                for (name, h) in &interval.per_operation {
                    let tag = hdrhistogram::serialization::interval_log::Tag::new(name);
                    writer
                        .write_histogram(h, self.last_end, length, tag)
                        .map_err(|e| hdr_log_error(format!("{e:?}")))?;
                }
            }
            let body = match buf.strip_prefix(b"#[MaxValueDivisor".as_slice()) {
                Some(rest) => &rest[rest.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1)..],
                None => &buf[..],
            };
            let mut w = log.lock().expect("hdr log lock");
            w.write_all(body).map_err(hdr_log_error)?;
            w.flush().map_err(hdr_log_error)?;
        }
        if let Some(hook) = &cfg.on_interval {
            hook(&interval);
        }
        self.last_end = end;
        self.last_done = done;
        Ok(())
    }
}

/// The divisor of each interval's max in the log: Java's HistogramLogWriter default.
const MAX_VALUE_DIVISOR: f64 = 1_000_000.0;

fn hdr_log_error(e: impl std::fmt::Display) -> YcsbError {
    YcsbError::Server(format!("cannot write the HdrHistogram log: {e}"))
}

fn connect(cfg: &RunConfig, poll: &Poll, token: usize) -> Result<Conn, YcsbError> {
    let sa = resolve(&cfg.addr)?;
    let std_stream =
        std::net::TcpStream::connect_timeout(&sa, Duration::from_secs(5)).map_err(|e| {
            YcsbError::Connect {
                addr: cfg.addr.clone(),
                source: e,
            }
        })?;
    std_stream.set_nodelay(true).ok();
    std_stream
        .set_nonblocking(true)
        .map_err(|e| YcsbError::Connect {
            addr: cfg.addr.clone(),
            source: e,
        })?;
    let mut stream = TcpStream::from_std(std_stream);
    poll.registry()
        .register(
            &mut stream,
            Token(token),
            Interest::READABLE | Interest::WRITABLE,
        )
        .map_err(|e| YcsbError::Connect {
            addr: cfg.addr.clone(),
            source: e,
        })?;
    let mut conn = Conn {
        stream,
        out: Vec::with_capacity(64 << 10),
        input: Vec::with_capacity(64 << 10),
        inflight: VecDeque::new(),
    };
    if let (Some(pw), Protocol::Resp) = (&cfg.password, cfg.protocol) {
        write_command(&mut conn.out, &[b"AUTH", pw.as_bytes()]);
        conn.inflight.push_back(InFlight {
            op: Op::Read,
            intended: Instant::now(),
            step: Step::Ignore,
            replies: 1,
            verify: None,
        });
    }
    Ok(conn)
}

/// Encode a full record as the protocol stores it; returns the fields when a hook wants them.
fn insert_request(
    conn: &mut Conn,
    gen: &mut ThreadGen,
    key: &str,
    scan: ScanMethod,
    proto: Protocol,
    keep: bool,
) -> (u32, Option<Fields>) {
    let n = gen.shared().field_count;
    let mut fields: Vec<(String, Vec<u8>)> = Vec::with_capacity(n);
    for i in 0..n {
        let field = format!("field{i}");
        let mut v = Vec::new();
        gen.field_value(key, &field, &mut v);
        fields.push((field, v));
    }
    let replies = match proto {
        Protocol::Resp => {
            let mut args: Vec<&[u8]> = Vec::with_capacity(2 + 2 * n);
            args.push(b"HSET");
            args.push(key.as_bytes());
            for (f, v) in &fields {
                args.push(f.as_bytes());
                args.push(v);
            }
            write_command(&mut conn.out, &args);
            if scan == ScanMethod::Zset {
                let score = java_string_hash(key).to_string();
                write_command(
                    &mut conn.out,
                    &[b"ZADD", b"_indices", score.as_bytes(), key.as_bytes()],
                );
                2
            } else {
                1
            }
        }
        Protocol::Memcache => {
            let json = record_json(&fields);
            conn.out
                .extend_from_slice(format!("set {key} 0 0 {}\r\n", json.len()).as_bytes());
            conn.out.extend_from_slice(&json);
            conn.out.extend_from_slice(b"\r\n");
            1
        }
    };
    (replies, keep.then_some(fields))
}

/// YCSB's memcached binding stores the field map as a JSON object.
fn record_json(fields: &[(String, Vec<u8>)]) -> Vec<u8> {
    let map: serde_json::Map<String, serde_json::Value> = fields
        .iter()
        .map(|(f, v)| {
            (
                f.clone(),
                serde_json::Value::String(String::from_utf8_lossy(v).into_owned()),
            )
        })
        .collect();
    serde_json::to_vec(&map).expect("a map of strings serialises")
}

fn issue(
    cfg: &RunConfig,
    scan: ScanMethod,
    gen: &mut ThreadGen,
    conn: &mut Conn,
    intended: Instant,
) {
    let op = match cfg.phase {
        Phase::Load => Op::Insert,
        Phase::Run => gen.next_op(),
    };
    let proto = cfg.protocol;
    match op {
        Op::Insert => {
            let keynum = gen.shared().inserts.next_value();
            let key = gen.key(keynum as i64);
            let (replies, fields) =
                insert_request(conn, gen, &key, scan, proto, cfg.on_ack.is_some());
            conn.inflight.push_back(InFlight {
                op,
                intended,
                step: Step::Insert { keynum, fields },
                replies,
                verify: None,
            });
        }
        Op::Read | Op::ReadModifyWrite => {
            let keynum = gen.next_keynum();
            let key = gen.key(keynum);
            let key_for_verify = key.clone();
            match proto {
                Protocol::Resp => write_command(&mut conn.out, &[b"HGETALL", key.as_bytes()]),
                Protocol::Memcache => conn
                    .out
                    .extend_from_slice(format!("get {key}\r\n").as_bytes()),
            }
            let step = if op == Op::Read {
                Step::Final
            } else {
                Step::RmwRead { key }
            };
            conn.inflight.push_back(InFlight {
                op,
                intended,
                step,
                replies: 1,
                verify: Some(key_for_verify),
            });
        }
        Op::Update => {
            let keynum = gen.next_keynum();
            let key = gen.key(keynum);
            update_request(conn, gen, &key, proto);
            conn.inflight.push_back(InFlight {
                op,
                intended,
                step: Step::Final,
                replies: 1,
                verify: None,
            });
        }
        Op::Scan => {
            let keynum = gen.next_keynum();
            let key = gen.key(keynum);
            let len = gen.scan_length().to_string();
            let step = match scan {
                ScanMethod::Zset => {
                    let score = java_string_hash(&key).to_string();
                    write_command(
                        &mut conn.out,
                        &[
                            b"ZRANGEBYSCORE",
                            b"_indices",
                            score.as_bytes(),
                            b"+inf",
                            b"LIMIT",
                            b"0",
                            len.as_bytes(),
                        ],
                    );
                    Step::ScanIndex
                }
                _ => {
                    write_command(
                        &mut conn.out,
                        &[b"SCANRANGE", key.as_bytes(), len.as_bytes()],
                    );
                    Step::Final
                }
            };
            conn.inflight.push_back(InFlight {
                op,
                intended,
                step,
                replies: 1,
                verify: None,
            });
        }
    }
}

fn update_request(conn: &mut Conn, gen: &mut ThreadGen, key: &str, proto: Protocol) {
    match proto {
        Protocol::Resp => {
            let f = format!("field{}", gen.field());
            let mut v = Vec::new();
            gen.field_value(key, &f, &mut v);
            write_command(&mut conn.out, &[b"HSET", key.as_bytes(), f.as_bytes(), &v]);
        }
        Protocol::Memcache => {
            // memcached cannot change one field of a JSON value: the whole record is written
            // (YCSB's binding replaces the value with the updated fields only, which would shrink
            // the record and make later reads return fewer fields).
            let _ = insert_request(conn, gen, key, ScanMethod::Scanrange, proto, false);
        }
    }
}

fn bulk(r: &Reply) -> Option<&[u8]> {
    match r {
        Reply::Bulk(b) => Some(b.as_slice()),
        _ => None,
    }
}

/// Check a read's reply: a full record of field names and values; with data integrity on, every
/// value must be exactly the one YCSB's `buildDeterministicValue` gives for the key and field.
fn verify_record<'a>(
    key: &str,
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    gen: &ThreadGen,
) -> bool {
    let shared = gen.shared();
    let mut n = 0;
    for (name, value) in fields {
        n += 1;
        if value.len() != shared.field_length {
            return false;
        }
        if shared.data_integrity {
            let Ok(name) = std::str::from_utf8(name) else {
                return false;
            };
            if value != deterministic_value(key, name, shared.field_length).as_slice() {
                return false;
            }
        }
    }
    n == shared.field_count
}

enum Parsed {
    Resp(Reply),
    Mc(McReply),
}

/// What the driver threads of a run share: operations left to start, done, and the stop flag.
struct Shares<'a> {
    remaining: &'a AtomicU64,
    done: &'a AtomicU64,
    stop: &'a AtomicBool,
}

fn drive(
    cfg: &RunConfig,
    scan: ScanMethod,
    mut gen: ThreadGen,
    shares: Shares<'_>,
    start: Instant,
    mut counters: Counters,
) -> Result<Counters, YcsbError> {
    let Shares {
        remaining,
        done,
        stop,
    } = shares;
    let mut poll = Poll::new().map_err(|e| YcsbError::Connect {
        addr: cfg.addr.clone(),
        source: e,
    })?;
    let mut conns: Vec<Conn> = (0..cfg.connections.max(1))
        .map(|i| connect(cfg, &poll, i))
        .collect::<Result<_, _>>()?;
    let mut events = Events::with_capacity(256);
    let interval = cfg
        .target
        .map(|t| Duration::from_secs_f64(cfg.threads as f64 / t));
    // Open loop: a timerfd in the poll set wakes the loop at an operation's intended start to the
    // microsecond (epoll's own timeout is in whole milliseconds, and sleeps get the thread's
    // timer slack on top); replies wake it as before.
    let mut timer = match interval {
        Some(_) => {
            let t = cxltier_sys::timer::Timer::new().map_err(|e| {
                YcsbError::Server(format!("cannot create the open-loop timer: {e}"))
            })?;
            poll.registry()
                .register(&mut SourceFd(&t.fd()), TIMER, Interest::READABLE)
                .map_err(|e| YcsbError::Server(format!("cannot watch the open-loop timer: {e}")))?;
            Some(t)
        }
        None => None,
    };
    // When the timer is due to fire, if it is armed.
    let mut armed_for: Option<Instant> = None;
    let mut next_intended = start;
    let mut rr = 0usize;
    let mut exhausted = false;
    let mut chunk = vec![0u8; 256 << 10];
    let deadline = cfg.max_time.map(|d| start + d);
    loop {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) || stop.load(Ordering::Relaxed) {
            exhausted = true;
        }
        // Issue what is due, while some connection has room in its window. Closed loop fills
        // one connection's window after another (the replies come back in batches). Open loop
        // gives each operation due to the connection with the fewest requests in flight (ties
        // in turn): the server answers a connection's requests in order, so an operation queued
        // behind one that waits for the device waits with it, and the least-loaded connection
        // is the least likely to hold one. (Sending all the operations due at one wake-up on a
        // single connection saved system calls but doubled p99 with 5x the data on NVMe.) Each
        // connection's operations of one wake-up still go out in one write.
        let mut room = true;
        let mut issued = false;
        while !exhausted && (interval.is_none() || next_intended <= now) {
            let n = conns.len();
            let has_room = |i: usize| conns[i].inflight.len() < cfg.pipeline;
            let mut candidates = (0..n).map(|i| (rr + i) % n).filter(|&i| has_room(i));
            let ci = if interval.is_some() {
                candidates.min_by_key(|&i| conns[i].inflight.len())
            } else {
                candidates.next()
            };
            let Some(ci) = ci else {
                room = false;
                break;
            };
            rr = if interval.is_some() { (ci + 1) % n } else { ci };
            issued = true;
            if remaining
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| r.checked_sub(1))
                .is_err()
            {
                exhausted = true;
                break;
            }
            let intended = if interval.is_some() {
                next_intended
            } else {
                now
            };
            issue(cfg, scan, &mut gen, &mut conns[ci], intended);
            if let Some(i) = interval {
                next_intended += i;
            }
        }
        if issued && interval.is_none() {
            rr = (rr + 1) % conns.len();
        }
        for c in conns.iter_mut() {
            if !c.out.is_empty() {
                flush(c).map_err(|e| YcsbError::Server(format!("writing to {}: {e}", cfg.addr)))?;
            }
        }
        if exhausted && conns.iter().all(|c| c.inflight.is_empty()) {
            break;
        }
        let timeout = match (&mut timer, interval) {
            (Some(t), Some(_)) if !exhausted && room => {
                // Wake at the next operation's intended start, but at most once per
                // `send_interval`: the operations due by then go out together (late by up to
                // that much, which their latency, counted from the intended start, includes).
                let wake = next_intended.max(now + cfg.send_interval);
                if armed_for.is_none_or(|a| a > wake) {
                    t.arm(wake.saturating_duration_since(Instant::now()))
                        .map_err(|e| {
                            YcsbError::Server(format!("cannot arm the open-loop timer: {e}"))
                        })?;
                    armed_for = Some(wake);
                }
                deadline.map(|d| d.saturating_duration_since(now))
            }
            // Behind schedule with every window full: the next reply makes room.
            (Some(_), Some(_)) if !exhausted => Some(Duration::from_millis(5)),
            _ => Some(Duration::from_millis(50)),
        };
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(YcsbError::Server(e.to_string()));
            }
        }
        for ev in events.iter() {
            if ev.token() == TIMER {
                if let Some(t) = timer.as_mut() {
                    if t.take_expiry() {
                        armed_for = None;
                    }
                }
                continue;
            }
            let c = &mut conns[ev.token().0];
            if ev.is_readable() {
                read_all(c, &mut chunk)
                    .map_err(|e| YcsbError::Server(format!("reading from {}: {e}", cfg.addr)))?;
                handle_replies(cfg, scan, &mut gen, c, &mut counters, done)?;
            }
        }
    }
    Ok(counters)
}

fn flush(c: &mut Conn) -> io::Result<()> {
    let mut written = 0;
    while written < c.out.len() {
        match c.stream.write(&c.out[written..]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "connection closed",
                ))
            }
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    c.out.drain(..written);
    Ok(())
}

fn read_all(c: &mut Conn, chunk: &mut [u8]) -> io::Result<()> {
    loop {
        match c.stream.read(chunk) {
            Ok(0) => {
                if c.inflight.is_empty() {
                    return Ok(());
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ));
            }
            Ok(n) => c.input.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

fn record(counters: &mut Counters, op: Op, intended: Instant, done: &AtomicU64) {
    let us = intended.elapsed().as_micros().max(1) as u64;
    counters.hist[op.index()].saturating_record(us);
    // Counted before the interval's histogram takes it: a status line that merges the
    // histograms (under their locks) and then reads the count never shows more latencies than
    // operations ("0 operations" with a READ count was seen at the first line).
    done.fetch_add(1, Ordering::Relaxed);
    if let Some(slot) = &counters.interval {
        slot.lock().expect("interval lock")[op.index()].saturating_record(us);
    }
}

fn handle_replies(
    cfg: &RunConfig,
    scan: ScanMethod,
    gen: &mut ThreadGen,
    c: &mut Conn,
    counters: &mut Counters,
    done: &AtomicU64,
) -> Result<(), YcsbError> {
    let mut at = 0;
    loop {
        let parsed = match cfg.protocol {
            Protocol::Resp => parse_reply(&c.input[at..])
                .map(|o| o.map(|(r, n)| (Parsed::Resp(r), n)))
                .map_err(|e| e.to_string()),
            Protocol::Memcache => {
                parse_mc(&c.input[at..]).map(|o| o.map(|(r, n)| (Parsed::Mc(r), n)))
            }
        }
        .map_err(|e| YcsbError::Server(format!("unreadable reply from {}: {e}", cfg.addr)))?;
        let Some((reply, n)) = parsed else { break };
        at += n;
        let Some(mut f) = c.inflight.pop_front() else {
            return Err(YcsbError::Server("a reply nobody asked for".into()));
        };
        // Errors and verification.
        let mut ok = true;
        match &reply {
            Parsed::Resp(Reply::Error(e)) => {
                counters.error(f.op, e.clone());
                ok = false;
            }
            Parsed::Mc(McReply::Error(e)) => {
                counters.error(f.op, e.clone());
                ok = false;
            }
            Parsed::Resp(r) if f.verify.is_some() => {
                let key = f.verify.as_deref().unwrap_or_default();
                let good = match r {
                    Reply::Array(items) if items.len() % 2 == 0 => {
                        let pairs: Option<Vec<(&[u8], &[u8])>> = items
                            .chunks(2)
                            .map(|p| Some((bulk(&p[0])?, bulk(&p[1])?)))
                            .collect();
                        pairs.is_some_and(|p| verify_record(key, p.into_iter(), gen))
                    }
                    _ => false,
                };
                if !good {
                    counters.verify_errors += 1;
                }
            }
            Parsed::Mc(McReply::Value(v)) if f.verify.is_some() => {
                let key = f.verify.as_deref().unwrap_or_default();
                let good = v.as_ref().is_some_and(|v| {
                    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(v)
                        .is_ok_and(|m| {
                            let pairs: Option<Vec<(&[u8], &[u8])>> = m
                                .iter()
                                .map(|(k, v)| Some((k.as_bytes(), v.as_str()?.as_bytes())))
                                .collect();
                            pairs.is_some_and(|p| verify_record(key, p.into_iter(), gen))
                        })
                });
                if !good {
                    counters.verify_errors += 1;
                }
            }
            _ => {}
        }
        if f.replies > 1 {
            f.replies -= 1;
            c.inflight.push_front(f);
            continue;
        }
        match std::mem::replace(&mut f.step, Step::Final) {
            Step::Final => record(counters, f.op, f.intended, done),
            Step::Ignore => {}
            Step::Insert { keynum, fields } => {
                if ok {
                    gen.shared().inserts.acknowledge(keynum);
                    if let (Some(hook), Some(fields)) = (&cfg.on_ack, fields) {
                        hook(&gen.key(keynum as i64), &fields);
                    }
                }
                record(counters, f.op, f.intended, done);
            }
            Step::RmwRead { key } => {
                update_request(c, gen, &key, cfg.protocol);
                c.inflight.push_back(InFlight {
                    op: f.op,
                    intended: f.intended,
                    step: Step::Final,
                    replies: 1,
                    verify: None,
                });
            }
            Step::ScanIndex => {
                let keys: Vec<Vec<u8>> = match &reply {
                    Parsed::Resp(Reply::Array(items)) => items
                        .iter()
                        .filter_map(|k| match k {
                            Reply::Bulk(b) => Some(b.clone()),
                            _ => None,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                if keys.is_empty() {
                    record(counters, f.op, f.intended, done);
                } else {
                    for k in &keys {
                        write_command(&mut c.out, &[b"HGETALL", k]);
                    }
                    c.inflight.push_back(InFlight {
                        op: f.op,
                        intended: f.intended,
                        step: Step::Final,
                        replies: keys.len() as u32,
                        verify: None,
                    });
                }
            }
        }
        let _ = scan;
    }
    c.input.drain(..at);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that dribbles its replies one byte per write: every read returns a fragment
    /// and the client must keep reading until a whole reply is there.
    #[test]
    fn simple_client_reads_a_reply_sent_one_byte_at_a_time() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_nodelay(true).unwrap();
            let mut req = [0u8; 256];
            for reply in [&b"$11\r\nhello world\r\n"[..], b"*2\r\n:42\r\n+OK\r\n"] {
                let _ = s.read(&mut req).unwrap();
                for b in reply {
                    s.write_all(std::slice::from_ref(b)).unwrap();
                    s.flush().unwrap();
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        let mut c = Client::connect(&addr).unwrap();
        assert_eq!(
            c.call(&[b"GET", b"k"]).unwrap(),
            Reply::Bulk(b"hello world".to_vec())
        );
        assert_eq!(
            c.call(&[b"X"]).unwrap(),
            Reply::Array(vec![Reply::Int(42), Reply::Simple("OK".into())])
        );
        server.join().unwrap();
    }

    /// A memcached stand-in that stores nothing and answers every `set` with `STORED`.
    fn stored_server() -> (String, std::thread::JoinHandle<()>) {
        use std::io::BufRead;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            // The driver's reachability check, then its one connection.
            for _ in 0..2 {
                let (s, _) = listener.accept().unwrap();
                let mut out = s.try_clone().unwrap();
                let mut lines = std::io::BufReader::new(s).lines();
                while let Some(Ok(line)) = lines.next() {
                    if line.starts_with("set ") {
                        let _ = lines.next();
                        out.write_all(b"STORED\r\n").unwrap();
                    }
                }
            }
        });
        (addr, server)
    }

    #[test]
    fn progress_is_reported_to_the_caller_up_to_every_operation() {
        let (addr, server) = stored_server();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let hook: ProgressHook = {
            let seen = seen.clone();
            Arc::new(move |done| seen.lock().unwrap().push(done))
        };
        let cfg = RunConfig {
            addr,
            protocol: Protocol::Memcache,
            scan: ScanMethod::Auto,
            phase: Phase::Load,
            threads: 1,
            connections: 1,
            pipeline: 4,
            target: None,
            operations: 500,
            max_time: None,
            password: None,
            seed: 1,
            on_ack: None,
            on_progress: Some(hook),
            send_interval: Duration::from_micros(50),
            interval_period: Duration::from_secs(10),
            on_interval: None,
            hdr_log: None,
        };
        let data = crate::DataSet {
            records: 500,
            insert_start: 0,
            field_count: 2,
            field_length: 8,
            data_integrity: false,
        };
        let shared =
            crate::shared(crate::Spec::core('a').unwrap(), Phase::Load, data, 500).unwrap();
        let report = run(&cfg, shared).unwrap();
        assert_eq!(report.operations, 500);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.last(), Some(&500), "the last report is the whole run");
        assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
        server.join().unwrap();
    }
}
