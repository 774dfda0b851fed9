//! Sampling the kernel's tiering counters (`/proc/vmstat`) at a fixed interval, with their rates
//! per second between samples: `cxltier topo --watch`.

use crate::ktier::{counter_rates, read_counters, VMSTAT};
use crate::sysfs::Sysfs;
use crate::TopoError;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

/// One sample of the kernel's tiering counters; its fields are those of a `--watch --json` line.
#[derive(Debug, Clone, Serialize)]
pub struct CounterSample {
    /// Seconds since the Unix epoch when the sample was taken.
    pub time_unix_s: f64,
    /// Seconds since the previous sample (`null` on the first).
    pub interval_s: Option<f64>,
    pub counters: BTreeMap<String, u64>,
    /// Counters' increase per second since the previous sample (`null` on the first).
    pub rates_per_s: Option<BTreeMap<String, f64>>,
    /// The previous sample's counters (`None` on the first), for showing what changed.
    #[serde(skip)]
    pub previous: Option<BTreeMap<String, u64>>,
}

/// The samples of a watch, as an iterator: the first (counters only) at once, then one every
/// interval (sleeping to the next tick; rates use the time that really passed), until `count`
/// samples with rates were taken (without one, forever). It ends after an error.
pub struct CounterSamples {
    root: PathBuf,
    interval: Duration,
    count: Option<u64>,
    first: Option<BTreeMap<String, u64>>,
    last: Option<(BTreeMap<String, u64>, Instant)>,
    taken: u64,
    failed: bool,
}

impl CounterSamples {
    /// Samples of the counters below `root` every `interval`.
    pub fn new(root: impl Into<PathBuf>, interval: Duration) -> CounterSamples {
        CounterSamples {
            root: root.into(),
            interval,
            count: None,
            first: None,
            last: None,
            taken: 0,
            failed: false,
        }
    }

    /// Stop after this many samples with rates (`None`: never).
    pub fn count(mut self, count: Option<u64>) -> Self {
        self.count = count;
        self
    }

    /// The first sample's counters, already read (by discovery); otherwise they are read.
    pub fn starting_from(mut self, counters: Option<BTreeMap<String, u64>>) -> Self {
        self.first = counters;
        self
    }

    fn read(&self) -> Result<BTreeMap<String, u64>, TopoError> {
        match read_counters(&Sysfs::new(&self.root)) {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Err(TopoError::NoCounters {
                path: self.root.join(VMSTAT),
            }),
            Err(e) => Err(TopoError::Counters(e)),
        }
    }

    fn sample(&mut self) -> Result<CounterSample, TopoError> {
        let Some((before, at)) = self.last.take() else {
            let counters = match self.first.take() {
                Some(c) => c,
                None => self.read()?,
            };
            self.last = Some((counters.clone(), Instant::now()));
            return Ok(CounterSample {
                time_unix_s: unix_now(),
                interval_s: None,
                counters,
                rates_per_s: None,
                previous: None,
            });
        };
        std::thread::sleep(self.interval.saturating_sub(at.elapsed()));
        let now = self.read()?;
        let seconds = at.elapsed().as_secs_f64();
        self.last = Some((now.clone(), Instant::now()));
        self.taken += 1;
        Ok(CounterSample {
            time_unix_s: unix_now(),
            interval_s: Some(seconds),
            rates_per_s: Some(counter_rates(&before, &now, seconds)),
            counters: now,
            previous: Some(before),
        })
    }
}

impl Iterator for CounterSamples {
    type Item = Result<CounterSample, TopoError>;

    fn next(&mut self) -> Option<Self::Item> {
        let started = self.last.is_some();
        if self.failed || (started && self.count.is_some_and(|n| self.taken >= n)) {
            return None;
        }
        let sample = self.sample();
        self.failed = sample.is_err();
        Some(sample)
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmstat(root: &std::path::Path, pgpromote_success: u64) {
        std::fs::create_dir_all(root.join("proc")).unwrap();
        std::fs::write(
            root.join(VMSTAT),
            format!("nr_free_pages 1\npgpromote_success {pgpromote_success}\n"),
        )
        .unwrap();
    }

    #[test]
    fn the_first_sample_has_counters_only_and_the_count_bounds_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        vmstat(dir.path(), 5);
        let samples: Vec<CounterSample> = CounterSamples::new(dir.path(), Duration::ZERO)
            .count(Some(2))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(samples.len(), 3);
        assert!(samples[0].rates_per_s.is_none() && samples[0].previous.is_none());
        assert_eq!(samples[0].counters["pgpromote_success"], 5);
        assert!(samples[2].rates_per_s.is_some() && samples[2].previous.is_some());
    }

    #[test]
    fn a_missing_vmstat_is_one_error_that_ends_the_samples() {
        let dir = tempfile::tempdir().unwrap();
        let mut samples = CounterSamples::new(dir.path(), Duration::ZERO);
        assert!(matches!(
            samples.next(),
            Some(Err(TopoError::NoCounters { .. }))
        ));
        assert!(samples.next().is_none());
    }
}
