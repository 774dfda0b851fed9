//! The latency monitor (Redis 7.0's `latency.c`) and per-command latency tracking: the events
//! whose latency reached `latency-monitor-threshold` ms ("command", "fast-command"), each a
//! series of the last 160 seconds that had one (samples of one second merged, the highest kept),
//! and each command's (and subcommand's: `client|id`) histogram of run times in power-of-two
//! buckets from 1 µs, as Redis's hdr_histogram is read by LATENCY HISTOGRAM.

use std::collections::{BTreeMap, HashMap, VecDeque};

/// Samples kept per event (Redis's LATENCY_TS_LEN).
pub const SAMPLES: usize = 160;

/// One event's samples, oldest first: (Unix time in seconds, latency in ms), and its all-time
/// highest latency.
#[derive(Debug, Default, Clone)]
pub struct Series {
    pub samples: VecDeque<(u64, u64)>,
    pub max: u64,
}

/// A command's run times: how many, and how many fell in each bucket (bucket `k` holds the
/// times up to `1024 << k` ns).
#[derive(Debug, Clone)]
pub struct Histogram {
    pub calls: u64,
    buckets: [u64; 48],
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            calls: 0,
            buckets: [0; 48],
        }
    }
}

impl Histogram {
    pub fn record(&mut self, ns: u64) {
        let k = if ns <= 1024 {
            0
        } else {
            (64 - ((ns - 1) / 1024).leading_zeros()) as usize
        };
        self.buckets[k.min(self.buckets.len() - 1)] += 1;
        self.calls += 1;
    }

    /// LATENCY HISTOGRAM's `histogram_usec`: each bucket that holds a time, as (its upper
    /// bound in µs, the count of times up to it).
    pub fn cdf(&self) -> Vec<(u64, u64)> {
        let mut total = 0;
        let mut out = Vec::new();
        for (k, &n) in self.buckets.iter().enumerate() {
            if n > 0 {
                total += n;
                out.push(((1024u64 << k) / 1000, total));
            }
        }
        out
    }
}

impl Histogram {
    /// The run time, in µs, that `pct` percent of the runs took at most: the upper bound of the
    /// bucket that reaches it (0 without runs).
    pub fn percentile_us(&self, pct: f64) -> f64 {
        let wanted = ((pct / 100.0) * self.calls as f64).ceil().max(1.0) as u64;
        let mut total = 0;
        for (k, &n) in self.buckets.iter().enumerate() {
            total += n;
            if total >= wanted {
                return (1024u64 << k) as f64 / 1000.0;
            }
        }
        0.0
    }
}

/// `latency-tracking-info-percentiles`' value as numbers; `None` unless each is a number from 0
/// to 100.
pub fn parse_percentiles(text: &str) -> Option<Vec<f64>> {
    text.split_ascii_whitespace()
        .map(|p| p.parse::<f64>().ok().filter(|p| (0.0..=100.0).contains(p)))
        .collect()
}

/// INFO latencystats' line of one command: `latency_percentiles_usec_set:p50=1.024,p99=...`.
pub fn info_line(key: CommandKey, h: &Histogram, percentiles: &[f64]) -> String {
    let figures: Vec<String> = percentiles
        .iter()
        .map(|&p| format!("p{p}={:.3}", h.percentile_us(p)))
        .collect();
    format!(
        "latency_percentiles_usec_{}:{}\r\n",
        full_name(key),
        figures.join(",")
    )
}

/// A command's histogram key: its table name and subcommand (as `SUBCOMMANDS` spells it).
pub type CommandKey = (&'static str, Option<&'static str>);

#[derive(Debug, Default)]
pub struct Latency {
    events: BTreeMap<String, Series>,
    histograms: HashMap<CommandKey, Histogram>,
}

impl Latency {
    /// Add a sample of `event` at `now` (Unix seconds): a sample of the same second as the last
    /// keeps the higher latency; beyond [`SAMPLES`] the oldest goes.
    pub fn add_sample(&mut self, event: &str, now: u64, ms: u64) {
        let s = self.events.entry(event.to_string()).or_default();
        s.max = s.max.max(ms);
        if let Some(last) = s.samples.back_mut() {
            if last.0 == now {
                last.1 = last.1.max(ms);
                return;
            }
        }
        s.samples.push_back((now, ms));
        if s.samples.len() > SAMPLES {
            s.samples.pop_front();
        }
    }

    pub fn events(&self) -> impl Iterator<Item = (&str, &Series)> {
        self.events.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn series(&self, event: &[u8]) -> Option<&Series> {
        self.events.get(std::str::from_utf8(event).ok()?)
    }

    /// LATENCY RESET: the events named (all without a name); how many there were.
    pub fn reset(&mut self, events: &[&[u8]]) -> usize {
        if events.is_empty() {
            let n = self.events.len();
            self.events.clear();
            return n;
        }
        events
            .iter()
            .filter(|e| {
                std::str::from_utf8(e)
                    .ok()
                    .and_then(|e| self.events.remove(e))
                    .is_some()
            })
            .count()
    }

    pub fn record(&mut self, key: CommandKey, ns: u64) {
        self.histograms.entry(key).or_default().record(ns);
    }

    pub fn histogram(&self, key: CommandKey) -> Option<&Histogram> {
        self.histograms.get(&key)
    }

    /// Every command's histogram, sorted by name then subcommand.
    pub fn histograms(&self) -> Vec<(CommandKey, &Histogram)> {
        let mut all: Vec<_> = self.histograms.iter().map(|(k, h)| (*k, h)).collect();
        all.sort_by_key(|(k, _)| *k);
        all
    }

    /// CONFIG RESETSTAT: the histograms start again (the events stay, as in Redis).
    pub fn reset_histograms(&mut self) {
        self.histograms.clear();
    }
}

/// The name LATENCY HISTOGRAM gives a command: `set`, `client|id`.
pub fn full_name((name, sub): CommandKey) -> String {
    match sub {
        Some(s) => format!("{}|{}", name.to_ascii_lowercase(), s),
        None => name.to_ascii_lowercase(),
    }
}

/// LATENCY DOCTOR's report, in the words of Redis's when there is nothing to say, and a line of
/// figures per event otherwise.
pub fn doctor(latency: &Latency, threshold_ms: i64) -> String {
    if latency.events.is_empty() && threshold_ms == 0 {
        return "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n".into();
    }
    if latency.events.is_empty() {
        return "Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n".into();
    }
    let mut report = String::from(
        "Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n",
    );
    for (i, (event, s)) in latency.events.iter().enumerate() {
        let n = s.samples.len().max(1) as u64;
        let avg = s.samples.iter().map(|x| x.1).sum::<u64>() / n;
        let mad = s.samples.iter().map(|x| x.1.abs_diff(avg)).sum::<u64>() / n;
        let period = match (s.samples.front(), s.samples.back()) {
            (Some(a), Some(b)) => (b.0 - a.0) as f64 / n as f64,
            _ => 0.0,
        };
        report.push_str(&format!(
            "{}. {event}: {} latency spikes (average {avg}ms, mean deviation {mad}ms, period {period:.2} sec). Worst all time event {}ms.\n",
            i + 1,
            s.samples.len(),
            s.max
        ));
    }
    report.push_str("\nI have a few advices for you:\n\n- Check your Slow Log to understand what are the commands you are running which are too slow to execute. Please check https://redis.io/commands/slowlog for more information.\n");
    report
}

/// LATENCY GRAPH's text: Redis's header, then a column of `#` per sample, scaled to 4 rows, with
/// how long ago each sample was below it.
pub fn graph(event: &str, s: &Series, now: u64) -> String {
    let min = s.samples.iter().map(|x| x.1).min().unwrap_or(0);
    let max = s.samples.iter().map(|x| x.1).max().unwrap_or(0);
    let mut g = format!(
        "{event} - high {max} ms, low {min} ms (all time high {} ms)\n{}\n",
        s.max,
        "-".repeat(80)
    );
    let shown: Vec<&(u64, u64)> = s.samples.iter().rev().take(80).rev().collect();
    for row in (1..=4u64).rev() {
        let line: String = shown
            .iter()
            .map(|x| {
                let h = if max == 0 { 0 } else { (x.1 * 4).div_ceil(max) };
                if h >= row {
                    '#'
                } else {
                    ' '
                }
            })
            .collect();
        g.push_str(line.trim_end());
        g.push('\n');
    }
    g.push('\n');
    for x in shown {
        let ago = now.saturating_sub(x.0);
        let label = match ago {
            a if a < 60 => format!("{a}s"),
            a if a < 3600 => format!("{}m", a / 60),
            a if a < 86400 => format!("{}h", a / 3600),
            a => format!("{}d", a / 86400),
        };
        g.push_str(&label);
        g.push(' ');
    }
    g.push('\n');
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_of_one_second_merge_and_the_series_is_capped() {
        let mut l = Latency::default();
        l.add_sample("command", 100, 5);
        l.add_sample("command", 100, 9);
        l.add_sample("command", 100, 3);
        let s = l.series(b"command").unwrap();
        assert_eq!(s.samples, [(100, 9)]);
        for t in 0..200 {
            l.add_sample("command", 200 + t, 1);
        }
        let s = l.series(b"command").unwrap();
        assert_eq!(s.samples.len(), SAMPLES);
        assert_eq!(s.max, 9);
        assert_eq!(l.reset(&[b"nope"]), 0);
        assert_eq!(l.reset(&[b"command"]), 1);
        assert!(l.series(b"command").is_none());
        assert!(doctor(&l, 0).starts_with("I'm sorry, Dave"));
        l.add_sample("fast-command", 5, 2);
        assert!(doctor(&l, 10).contains("1. fast-command: 1 latency spikes"));
        assert!(graph("fast-command", l.series(b"fast-command").unwrap(), 7)
            .starts_with("fast-command - high 2 ms, low 2 ms (all time high 2 ms)\n"));
    }

    #[test]
    fn histograms_count_runs_in_power_of_two_buckets_from_a_microsecond() {
        let mut h = Histogram::default();
        for ns in [1, 1024, 1025, 2048, 5000, 1_000_000_000, u64::MAX] {
            h.record(ns);
        }
        assert_eq!(h.calls, 7);
        let cdf = h.cdf();
        assert_eq!(cdf[0], (1, 2), "up to 1024 ns");
        assert_eq!(cdf[1], (2, 4), "up to 2048 ns");
        assert_eq!(cdf[2], (8, 5), "5000 ns: up to 8192");
        assert_eq!(cdf.last().unwrap().1, 7);
        assert_eq!(h.percentile_us(50.0), 2.048);
        assert_eq!(
            info_line(("CLIENT", Some("id")), &h, &[50.0, 99.9]),
            format!(
                "latency_percentiles_usec_client|id:p50=2.048,p99.9={:.3}\r\n",
                h.percentile_us(99.9)
            )
        );
        assert_eq!(
            parse_percentiles("50 99 99.9"),
            Some(vec![50.0, 99.0, 99.9])
        );
        assert_eq!(parse_percentiles(""), Some(vec![]));
        assert_eq!(parse_percentiles("50 101"), None);
        assert_eq!(parse_percentiles("x"), None);
    }

    mod command {
        use crate::testdb::*;

        #[test]
        fn latency_histogram_counts_commands_and_subcommands_since_resetstat() {
            let mut db = Db::new();
            db.cmd("CONFIG RESETSTAT");
            let h = db.cmd("LATENCY HISTOGRAM");
            assert!(
                h.starts_with("*2\r\n$16\r\nconfig|resetstat\r\n*4\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n"),
                "{h}"
            );
            db.cmd("SET a b");
            db.cmd("SET c d");
            db.cmd("CLIENT ID");
            db.cmd("CLIENT LIST");
            let h = db.cmd("LATENCY HISTOGRAM set");
            assert!(
                h.starts_with("*2\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:2\r\n"),
                "{h}"
            );
            let h = db.cmd("LATENCY HISTOGRAM client");
            assert!(h.starts_with("*4\r\n$9\r\nclient|id\r\n"), "{h}");
            assert!(h.contains("$11\r\nclient|list\r\n"), "{h}");
            let h = db.cmd("LATENCY HISTOGRAM client|id blabla");
            assert!(h.starts_with("*2\r\n$9\r\nclient|id\r\n"), "{h}");
            assert_eq!(db.cmd("LATENCY HISTOGRAM blabla"), "*0\r\n");
            db.cmd("HELLO 3");
            assert!(db.cmd("LATENCY HISTOGRAM get").starts_with("%0\r\n"));
            assert!(db
                .cmd("LATENCY HISTOGRAM set")
                .starts_with("%1\r\n$3\r\nset\r\n%2\r\n"));
            db.cmd("CONFIG SET latency-tracking no");
            db.cmd("CONFIG RESETSTAT");
            db.cmd("SET a b");
            assert_eq!(db.cmd("LATENCY HISTOGRAM"), "%0\r\n");
        }

        #[test]
        fn latency_events_are_sampled_over_the_threshold_and_reset() {
            let mut db = Db::new();
            assert_eq!(db.cmd("LATENCY LATEST"), "*0\r\n");
            assert_eq!(db.cmd("LATENCY HISTORY command"), "*0\r\n");
            assert!(db.cmd("LATENCY DOCTOR").contains("I'm sorry, Dave"));
            assert_eq!(
                db.cmd("LATENCY GRAPH command"),
                "-ERR No samples available for event 'command'\r\n"
            );
            // A slow command: its time is known at the next command's start. The threshold is
            // far above what this test's own commands take on a loaded machine (at 1 ms one of
            // them was a second spike).
            db.info
                .knobs
                .store("latency-monitor-threshold", "250".into());
            db.info
                .observe_latency(("DEBUG", None), false, 300_000, 1_700_000_000_000_000);
            db.info
                .observe_latency(("GET", None), true, 500, 1_700_000_000_000_000);
            let latest = db.cmd("LATENCY LATEST");
            assert_eq!(
                latest,
                "*1\r\n*4\r\n$7\r\ncommand\r\n:1700000000\r\n:300\r\n:300\r\n"
            );
            assert_eq!(
                db.cmd("LATENCY HISTORY command"),
                "*1\r\n*2\r\n:1700000000\r\n:300\r\n"
            );
            assert!(db
                .cmd("LATENCY DOCTOR")
                .contains("1. command: 1 latency spikes"));
            assert!(db
                .cmd("LATENCY GRAPH command")
                .contains("command - high 300 ms"));
            assert_eq!(db.cmd("LATENCY RESET blabla"), ":0\r\n");
            assert_eq!(db.cmd("LATENCY RESET"), ":1\r\n");
            assert_eq!(db.cmd("LATENCY LATEST"), "*0\r\n");
            assert_eq!(
                db.cmd("LATENCY HELP xxx"),
                "-ERR wrong number of arguments for 'latency|help' command\r\n"
            );
            assert_eq!(
                db.cmd("LATENCY nope"),
                "-ERR unknown subcommand 'nope'. Try LATENCY HELP.\r\n"
            );
            assert!(db
                .cmd("LATENCY HELP")
                .starts_with("*17\r\n+LATENCY <subcommand>"));
            assert!(db
                .cmd("CONFIG GET latency-tracking*")
                .contains("50 99 99.9"));
        }

        #[test]
        fn info_latencystats_gives_each_commands_percentiles() {
            let mut db = Db::new();
            db.cmd("CONFIG RESETSTAT");
            db.cmd("SET a b");
            let text = db.cmd("INFO latencystats");
            assert!(text.contains("# Latencystats\r\n"), "{text}");
            let line = text
                .split("\r\n")
                .find(|l| l.starts_with("latency_percentiles_usec_set:"))
                .unwrap_or_else(|| panic!("{text}"));
            let fields: Vec<&str> = line.split(':').nth(1).unwrap().split(',').collect();
            assert_eq!(fields.len(), 3);
            assert!(
                fields[0].starts_with("p50=") && fields[2].starts_with("p99.9="),
                "{line}"
            );
            assert!(text.contains("latency_percentiles_usec_config|resetstat:"));
            assert!(
                !db.cmd("INFO").contains("Latencystats"),
                "not a default section"
            );
            let set = |db: &mut Db, v: &str| {
                let out = db.run(&[
                    b"CONFIG",
                    b"SET",
                    b"latency-tracking-info-percentiles",
                    v.as_bytes(),
                ]);
                String::from_utf8(out).unwrap()
            };
            assert!(set(&mut db, "50 x").contains("Invalid"));
            assert!(db
                .cmd("CONFIG SET latency-tracking maybe")
                .contains("argument must be 'yes' or 'no'"));
            assert!(set(&mut db, "101").contains("[0.0,100.0]"));
            assert_eq!(set(&mut db, "90"), "+OK\r\n");
            assert!(db
                .cmd("INFO latencystats")
                .contains("latency_percentiles_usec_set:p90="));
        }
    }
}
