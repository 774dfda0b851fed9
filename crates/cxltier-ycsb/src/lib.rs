//! A YCSB driver faithful to YCSB 0.17.0's CoreWorkload, built to keep many requests in flight.
//!
//! - [`generator`]: YCSB's generators (FNV-64 key hashing, scrambled zipfian over 10^10 ranks,
//!   skewed-latest, uniform, hotspot, discrete), same arithmetic as the Java classes;
//! - [`workload`]: the A–F mixes and per-thread key, operation and value choice;
//! - [`protocol`]: memcached's text protocol (RESP is `cxltier_resp`'s: its encoder, decoder
//!   and the setup connection's client);
//! - [`oracle`]: the best hit ratio a cache of K objects can reach on a workload's key choices,
//!   and the fewest page faults of a page-level tier, as reports ([`oracle::BoundDraws`]);
//! - [`text`]: YCSB 0.17.0's text report and status line, byte for byte;
//! - [`runner`]: threads × pipelined connections, open loop at a target rate with latency from
//!   the intended start (coordinated omission corrected), HDR histograms per operation.

// A library reports through its return values and sinks; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod generator;
pub mod oracle;
pub mod protocol;
pub mod runner;
pub mod text;
pub mod workload;

use std::sync::Arc;

pub use runner::{
    check_load_generation, hdr_log_file, run, AckHook, HdrLogSink, Interval, IntervalHook,
    OpReport, Phase, ProgressHook, Protocol, Report, RunConfig, ScanMethod,
};
pub use workload::{Distribution, Op, Shared, Spec};

/// The driver's errors.
#[derive(Debug, thiserror::Error)]
pub enum YcsbError {
    #[error("{0}")]
    BadInput(String),
    /// Bad input with a hint of what to give instead.
    #[error("{message}")]
    Usage { message: String, hint: String },
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Server(String),
}

impl cxltier_error::Classify for YcsbError {
    fn class(&self) -> cxltier_error::Class {
        match self {
            YcsbError::BadInput(_) | YcsbError::Usage { .. } => cxltier_error::Class::BadInput,
            YcsbError::Connect { .. } | YcsbError::Server(_) => cxltier_error::Class::Runtime,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            YcsbError::Connect { addr, .. } => Some(format!(
                "is a server listening on {addr}? start one with `cxltier serve --bind {addr}` (or redis-server / memcached)"
            )),
            YcsbError::Usage { hint, .. } => Some(hint.clone()),
            _ => None,
        }
    }
}

/// YCSB's core workload `a` to `f`, named by its letter (as `--workload` gives it).
pub fn core_workload(text: &str) -> Result<Spec, YcsbError> {
    let name = text.trim();
    let letter = name.chars().next().filter(|_| name.len() == 1);
    letter.and_then(Spec::core).ok_or_else(|| YcsbError::Usage {
        message: format!("unknown workload {text:?}"),
        hint: "use one of YCSB's core workloads: a, b, c, d, e, f".into(),
    })
}

/// A seed for a run that was given none (YCSB draws a new one each run): the clock's
/// nanoseconds mixed with the process id.
pub fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (nanos ^ (u64::from(std::process::id()) << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The records a load writes and a run reads: YCSB's recordcount, insertstart, fieldcount,
/// fieldlength and dataintegrity.
#[derive(Debug, Clone, Copy)]
pub struct DataSet {
    pub records: u64,
    pub insert_start: u64,
    pub field_count: usize,
    pub field_length: usize,
    pub data_integrity: bool,
}

/// The shared state of a load or run of `spec` over `data`, planning `operations` operations.
pub fn shared(
    spec: Spec,
    phase: Phase,
    data: DataSet,
    operations: u64,
) -> Result<Arc<Shared>, YcsbError> {
    let DataSet {
        records,
        insert_start,
        field_count,
        field_length,
        data_integrity,
    } = data;
    if records == 0 {
        return Err(YcsbError::BadInput("--records must be at least 1".into()));
    }
    if field_count == 0 || field_length == 0 {
        return Err(YcsbError::BadInput(
            "--field-count and --field-length must be at least 1".into(),
        ));
    }
    if records > i32::MAX as u64 {
        return Err(YcsbError::BadInput(format!(
            "--records {records}: YCSB's key choosers work in 32-bit key numbers; use at most {}",
            i32::MAX
        )));
    }
    // During a load, inserts count from insert_start; during a run, new keys follow the records.
    let first_insert = match phase {
        Phase::Load => insert_start,
        Phase::Run => insert_start + records,
    };
    Ok(Arc::new(Shared {
        spec,
        record_count: records,
        insert_start,
        field_count,
        field_length,
        zero_padding: 1,
        operation_count: operations,
        inserts: generator::AckCounter::new(first_insert),
        data_integrity,
    }))
}
