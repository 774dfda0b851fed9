//! YCSB 0.17.0's text output, byte for byte where the data allows: the report of
//! `TextMeasurementsExporter` (`[OVERALL], RunTime(ms), ...`, then per operation what
//! `OneMeasurementHdrHistogram.exportMeasurements` writes with the default
//! `hdrhistogram.percentiles=95,99`) and the status line of `StatusThread` (`-s`).
//!
//! Left out because a JVM has them and this driver does not: the `TOTAL_GCS_*`/`TOTAL_GC_TIME*`
//! lines. Failed operations count in `Return=ERROR`; their latencies (YCSB's `READ-FAILED`
//! measurement) are not recorded.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::runner::{Interval, Report};

/// Java's `Double.toString`: the shortest digits that read back as the same double, with at
/// least one digit after the point, and computerized scientific notation (`1.0E7`, `1.5E-4`)
/// outside [10^-3, 10^7).
pub fn java_double(d: f64) -> String {
    if d.is_nan() {
        return "NaN".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let a = d.abs();
    if (1e-3..1e7).contains(&a) {
        let s = format!("{d}");
        if s.contains('.') {
            s
        } else {
            s + ".0"
        }
    } else {
        let s = format!("{d:e}");
        let (mantissa, exponent) = s.split_once('e').expect("{:e} has an exponent");
        let mantissa = if mantissa.contains('.') {
            mantissa.to_string()
        } else {
            format!("{mantissa}.0")
        };
        format!("{mantissa}E{exponent}")
    }
}

/// Java's `new DecimalFormat("#.##").format(d)`: at most two decimals, rounded half-even on the
/// double's exact value, no trailing zeros, no point for a whole number.
pub fn decimal_2(d: f64) -> String {
    let s = format!("{d:.2}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// Java's `ordinal` in `OneMeasurementHdrHistogram`: 95 → "95th", 99.9 → "99.9".
fn ordinal(p: f64) -> String {
    if p.fract() != 0.0 {
        return java_double(p);
    }
    let j = p as i64;
    let suffixes = ["th", "st", "nd", "rd", "th", "th", "th", "th", "th", "th"];
    match j % 100 {
        11..=13 => format!("{j}th"),
        _ => format!("{j}{}", suffixes[(j % 10) as usize]),
    }
}

/// The report as YCSB prints it at the end of a run (`[SECTION], metric, value` lines).
pub fn report(r: &Report) -> String {
    let mut out = String::new();
    let run_time_ms = (r.run_time_s * 1000.0) as u64;
    let _ = writeln!(out, "[OVERALL], RunTime(ms), {run_time_ms}");
    // Client.java: 1000.0 * opcount / runtime, with the runtime in whole milliseconds; its
    // opcount counts the operations that failed too.
    let throughput = 1000.0 * (r.operations + r.errors) as f64 / run_time_ms as f64;
    let _ = writeln!(
        out,
        "[OVERALL], Throughput(ops/sec), {}",
        java_double(throughput)
    );
    for o in &r.per_operation {
        let name = o.operation;
        let _ = writeln!(out, "[{name}], Operations, {}", o.count);
        let _ = writeln!(
            out,
            "[{name}], AverageLatency(us), {}",
            java_double(o.avg_us)
        );
        let _ = writeln!(out, "[{name}], MinLatency(us), {}", o.min_us);
        let _ = writeln!(out, "[{name}], MaxLatency(us), {}", o.max_us);
        for (p, v) in [(95.0, o.p95_us), (99.0, o.p99_us)] {
            let _ = writeln!(out, "[{name}], {}PercentileLatency(us), {v}", ordinal(p));
        }
        // YCSB's CoreWorkload times a read-modify-write itself and reports no status for it.
        if name != "READ-MODIFY-WRITE" {
            if o.count > 0 {
                let _ = writeln!(out, "[{name}], Return=OK, {}", o.count);
            }
            if o.errors > 0 {
                let _ = writeln!(out, "[{name}], Return=ERROR, {}", o.errors);
            }
        }
    }
    out
}

/// A civil date and time (UTC) as Java's `SimpleDateFormat("yyyy-MM-dd HH:mm:ss:SSS")` prints it.
pub fn timestamp(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}:{:03}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// YCSB's `RemainingFormatter.format`, quirks included (the minutes are subtracted wrongly, but
/// seconds only print when nothing else did, and always as "seconds").
fn remaining(mut seconds: i64) -> String {
    let mut time = String::new();
    let days = seconds / 86_400;
    if days > 0 {
        let _ = write!(time, "{days}{}", if days == 1 { " day " } else { " days " });
        seconds -= days * 86_400;
    }
    let hours = seconds / 3600;
    if hours > 0 {
        let _ = write!(
            time,
            "{hours}{}",
            if hours == 1 { " hour " } else { " hours " }
        );
        seconds -= hours * 3600;
    }
    if days < 1 {
        let minutes = seconds / 60;
        if minutes > 0 {
            let _ = write!(
                time,
                "{minutes}{}",
                if minutes == 1 {
                    " minute "
                } else {
                    " minutes "
                }
            );
        }
    }
    if time.is_empty() {
        let _ = write!(time, "{seconds} seconds ");
    }
    time
}

/// YCSB's status line for an interval (`StatusThread.computeStats`), stamped `now`.
pub fn status_line(iv: &Interval, now: SystemTime) -> String {
    // StatusThread works in whole milliseconds of the wall clock.
    let interval_ms = iv.end.as_millis() as i64;
    let since_last_ms = interval_ms - iv.start.as_millis() as i64;
    let throughput = 1000.0 * iv.done as f64 / interval_ms as f64;
    let current = 1000.0 * iv.done.saturating_sub(iv.done_at_start) as f64 / since_last_ms as f64;
    // Java's (long) Math.ceil(x): NaN is 0, infinities saturate.
    let est = (iv.todo as f64 / throughput).ceil();
    let est = if est.is_nan() { 0 } else { est as i64 };
    let mut msg = format!(
        "{} {} sec: {} operations; ",
        timestamp(now),
        interval_ms / 1000,
        iv.done
    );
    if iv.done != 0 {
        let _ = write!(msg, "{} current ops/sec; ", decimal_2(current));
    }
    if iv.todo != 0 {
        let _ = write!(msg, "est completion in {}", remaining(est));
    }
    for (name, h) in &iv.per_operation {
        let _ = write!(
            msg,
            "[{name}: Count={}, Max={}, Min={}, Avg={}, 90={}, 99={}, 99.9={}, 99.99={}] ",
            h.len(),
            h.max(),
            h.min(),
            decimal_2(h.mean()),
            h.value_at_quantile(0.90),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.value_at_quantile(0.9999),
        );
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{OpReport, Phase, Protocol};

    fn op(name: &'static str, count: u64, errors: u64) -> OpReport {
        OpReport {
            operation: name,
            count,
            errors,
            ops_per_sec: 0.0,
            avg_us: 412.73125,
            p50_us: 380,
            p90_us: 600,
            p95_us: 711,
            p99_us: 1023,
            p999_us: 2047,
            max_us: 15_999,
            min_us: 97,
        }
    }

    #[test]
    fn a_known_report_renders_as_ycsb_prints_it() {
        let r = Report {
            phase: Phase::Run,
            workload: 'f',
            protocol: Protocol::Resp,
            addr: "127.0.0.1:6379".into(),
            threads: 1,
            connections: 8,
            pipeline: 16,
            target_ops_per_sec: None,
            seed: 1,
            // Completed: 14,997 reads and 15,000 read-modify-writes; 3 reads failed.
            operations: 29_997,
            run_time_s: 2.5419,
            throughput_ops_per_sec: 0.0,
            errors: 3,
            verify_errors: 0,
            first_error: None,
            latency_from: "send",
            per_operation: vec![op("READ", 14_997, 3), op("READ-MODIFY-WRITE", 15_000, 0)],
        };
        assert_eq!(
            report(&r),
            "[OVERALL], RunTime(ms), 2541\n\
             [OVERALL], Throughput(ops/sec), 11806.37544273908\n\
             [READ], Operations, 14997\n\
             [READ], AverageLatency(us), 412.73125\n\
             [READ], MinLatency(us), 97\n\
             [READ], MaxLatency(us), 15999\n\
             [READ], 95thPercentileLatency(us), 711\n\
             [READ], 99thPercentileLatency(us), 1023\n\
             [READ], Return=OK, 14997\n\
             [READ], Return=ERROR, 3\n\
             [READ-MODIFY-WRITE], Operations, 15000\n\
             [READ-MODIFY-WRITE], AverageLatency(us), 412.73125\n\
             [READ-MODIFY-WRITE], MinLatency(us), 97\n\
             [READ-MODIFY-WRITE], MaxLatency(us), 15999\n\
             [READ-MODIFY-WRITE], 95thPercentileLatency(us), 711\n\
             [READ-MODIFY-WRITE], 99thPercentileLatency(us), 1023\n"
        );
    }

    #[test]
    fn doubles_print_as_java_prints_them() {
        for (d, java) in [
            (100.0, "100.0"),
            (0.5, "0.5"),
            (1234.5678, "1234.5678"),
            (9_999_999.0, "9999999.0"),
            (1e7, "1.0E7"),
            (12_345_678.9, "1.23456789E7"),
            (0.001, "0.001"),
            (0.00015, "1.5E-4"),
            (0.0, "0.0"),
            (f64::INFINITY, "Infinity"),
            (f64::NAN, "NaN"),
        ] {
            assert_eq!(java_double(d), java, "{d}");
        }
        for (d, java) in [
            (412.73125, "412.73"),
            (0.125, "0.12"),
            (0.375, "0.38"),
            (7.0, "7"),
            (7.1, "7.1"),
            (0.0, "0"),
        ] {
            assert_eq!(decimal_2(d), java, "{d}");
        }
        assert_eq!(ordinal(95.0), "95th");
        assert_eq!(ordinal(99.9), "99.9");
        assert_eq!(ordinal(11.0), "11th");
        assert_eq!(ordinal(21.0), "21st");
    }

    #[test]
    fn status_lines_match_ycsb() {
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        for v in 1..=1000 {
            h.record(v).unwrap();
        }
        let at = UNIX_EPOCH + Duration::from_millis(1_764_142_215_042);
        let iv = Interval {
            run_start: at,
            start: Duration::from_millis(10_003),
            end: Duration::from_millis(20_004),
            done_at_start: 2000,
            done: 3000,
            todo: 7000,
            last: false,
            per_operation: vec![("UPDATE", h)],
        };
        assert_eq!(
            status_line(&iv, at),
            "2025-11-26 07:30:15:042 20 sec: 3000 operations; 99.99 current ops/sec; \
             est completion in 47 seconds [UPDATE: Count=1000, Max=1000, Min=1, Avg=500.5, \
             90=900, 99=990, 99.9=999, 99.99=1000] "
        );
        let first = Interval {
            run_start: at,
            start: Duration::ZERO,
            end: Duration::ZERO,
            done_at_start: 0,
            done: 0,
            todo: 10_000,
            last: false,
            per_operation: vec![],
        };
        assert_eq!(
            status_line(&first, at),
            "2025-11-26 07:30:15:042 0 sec: 0 operations; est completion in 0 seconds "
        );
        assert_eq!(remaining(3 * 86_400 + 7200 + 5), "3 days 2 hours ");
        assert_eq!(remaining(3725), "1 hour 2 minutes ");
        assert_eq!(remaining(61), "1 minute ");
    }
}
