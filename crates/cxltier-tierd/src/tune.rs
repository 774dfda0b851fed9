//! Online interleave tuning for a bandwidth-bound target: find the share of its pages on the fast
//! tier that gives the most progress, measured from a signal the user names (a counter in a file,
//! or a command that prints one), by moving the target's pages between tiers.
//!
//! The search ([`Tuner`]) is a hill climb over shares in tenths (0%, 10%, ... 100% on the fast
//! tier) from a starting share (the planner's choice): measure the neighbours two tenths away, move
//! to the best one if it beats the current share by more than a noise margin, then look one tenth
//! away, and stop when no neighbour beats the current share. Every share is measured at most once
//! and each move strictly raises the measured throughput, so it ends, and it never returns to a
//! share it left: no oscillation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cxltier_sys::{move_pages, query_pages, PageStatus};

use crate::engine::Tiers;
use crate::procfs;
use crate::TierdError;

/// Where progress is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// A file holding a number that grows with work done (bytes processed, operations ...).
    File(PathBuf),
    /// A shell command that prints such a number.
    Command(String),
}

impl Progress {
    /// `file:PATH` or `cmd:COMMAND`.
    pub fn parse(spec: &str) -> Result<Progress, TierdError> {
        let bad = || TierdError::Setting {
            setting: "--progress",
            message: format!(
                "{spec:?}: expected file:PATH (a file holding a growing counter) or cmd:COMMAND (a \
                 command printing one)"
            ),
        };
        match spec.split_once(':') {
            Some(("file", p)) if !p.is_empty() => Ok(Progress::File(PathBuf::from(p))),
            Some(("cmd", c)) if !c.trim().is_empty() => Ok(Progress::Command(c.to_string())),
            _ => Err(bad()),
        }
    }

    /// The counter's current value.
    pub fn read(&self) -> Result<f64, TierdError> {
        let (text, origin) = match self {
            Progress::File(p) => (
                std::fs::read_to_string(p).map_err(|e| TierdError::io("cannot read", p, e))?,
                p.clone(),
            ),
            Progress::Command(c) => {
                let out = Command::new("sh")
                    .arg("-c")
                    .arg(c)
                    .output()
                    .map_err(|e| TierdError::io("cannot run", PathBuf::from(c), e))?;
                (
                    String::from_utf8_lossy(&out.stdout).into_owned(),
                    PathBuf::from(c),
                )
            }
        };
        text.split_whitespace()
            .next()
            .and_then(|w| w.parse::<f64>().ok())
            .filter(|v| v.is_finite())
            .ok_or_else(|| TierdError::Parse {
                path: origin,
                content: text.chars().take(80).collect(),
                why: "the progress signal must start with a number".into(),
            })
    }

    /// Wait until the counter changes (a publisher updates it now and then: timing from the
    /// moment it changes, not from whenever we happened to read it, keeps the staleness of the
    /// counter out of the rate). Gives the new value and when it was seen.
    fn next_change(&self, limit: Duration) -> Result<(f64, Instant), TierdError> {
        let first = self.read()?;
        let since = Instant::now();
        loop {
            let v = self.read()?;
            if v != first {
                return Ok((v, Instant::now()));
            }
            if since.elapsed() > limit {
                return Err(TierdError::Setting {
                    setting: "--progress",
                    message: format!(
                        "the progress signal stayed at {first} for {:.1} s: is the target making progress, and does the signal count it?",
                        limit.as_secs_f64()
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Progress per second over about `window`, between two changes of the counter.
    pub fn rate(&self, window: Duration) -> Result<f64, TierdError> {
        let limit = window.max(Duration::from_secs(2));
        let (a, t) = self.next_change(limit)?;
        std::thread::sleep(window);
        let (b, t2) = self.next_change(limit)?;
        let dt = t2.duration_since(t).as_secs_f64();
        if b < a {
            return Err(TierdError::Setting {
                setting: "--progress",
                message: format!(
                    "the counter went down ({a} to {b}): give a counter that only grows"
                ),
            });
        }
        Ok((b - a) / dt)
    }
}

/// What [`apply_split`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SplitOutcome {
    pub resident_pages: u64,
    pub fast_pages: u64,
    pub moved_pages: u64,
    pub failed_pages: u64,
}

/// Which of `n` pages go to the fast tier for a share of `tenths`/10, spread evenly (page j goes
/// fast when the running count of fast pages steps up at j).
pub fn fast_pattern(n: usize, tenths: u32) -> impl Iterator<Item = bool> {
    let t = tenths.min(10) as usize;
    (0..n).map(move |j| (j + 1) * t / 10 > j * t / 10)
}

/// Move the target's resident private anonymous pages so that `tenths`/10 of them are on the fast
/// tier, spread evenly over its address space. Pages the kernel does not move stay where they are
/// (counted in `failed_pages`).
pub fn apply_split(
    proc_root: &Path,
    pid: u32,
    tiers: &Tiers,
    tenths: u32,
) -> Result<SplitOutcome, TierdError> {
    let page = cxltier_sys::page_size();
    let ranges = procfs::movable_ranges(proc_root, pid)?;
    let addrs: Vec<usize> = ranges
        .iter()
        .flat_map(|r| (r.start..r.end).step_by(page))
        .collect();
    let mut resident = Vec::new();
    for chunk in addrs.chunks(1 << 16) {
        for (a, s) in chunk.iter().zip(query_pages(Some(pid), chunk)?) {
            if let PageStatus::Node(n) = s {
                resident.push((*a, n));
            }
        }
    }
    let fast = tiers.fast[0];
    let slow = tiers.slow[0];
    let mut moves: Vec<(usize, u32)> = Vec::new();
    let mut out = SplitOutcome {
        resident_pages: resident.len() as u64,
        ..Default::default()
    };
    for ((addr, node), want_fast) in resident.iter().zip(fast_pattern(resident.len(), tenths)) {
        let is_fast = tiers.fast.contains(node);
        if want_fast != is_fast {
            moves.push((*addr, if want_fast { fast } else { slow }));
        }
        if is_fast {
            out.fast_pages += 1;
        }
    }
    for chunk in moves.chunks(1 << 16) {
        let a: Vec<usize> = chunk.iter().map(|m| m.0).collect();
        let n: Vec<u32> = chunk.iter().map(|m| m.1).collect();
        let moved = move_pages(Some(pid), &a, &n, false)?;
        for (m, s) in chunk.iter().zip(moved.status) {
            if s == PageStatus::Node(m.1) {
                out.moved_pages += 1;
                if m.1 == fast {
                    out.fast_pages += 1;
                } else {
                    out.fast_pages -= 1;
                }
            } else {
                out.failed_pages += 1;
            }
        }
    }
    Ok(out)
}

/// The hill climb (see the module documentation).
#[derive(Debug, Clone)]
pub struct Tuner {
    measured: BTreeMap<u32, f64>,
    current: u32,
    step: u32,
    margin: f64,
    done: bool,
}

impl Tuner {
    /// Start at `start` tenths; a neighbour must beat the current share by more than `margin`
    /// (0.02: 2%) to be taken.
    pub fn new(start: u32, margin: f64) -> Tuner {
        Tuner {
            measured: BTreeMap::new(),
            current: start.min(10),
            step: 2,
            margin,
            done: false,
        }
    }

    /// The next share to measure, or `None` once converged.
    pub fn next_split(&mut self) -> Option<u32> {
        if self.done {
            return None;
        }
        if !self.measured.contains_key(&self.current) {
            return Some(self.current);
        }
        loop {
            let c = self.current;
            let neighbours: Vec<u32> = [c.checked_sub(self.step), Some(c + self.step)]
                .into_iter()
                .flatten()
                .filter(|&k| k <= 10)
                .collect();
            if let Some(&k) = neighbours.iter().find(|k| !self.measured.contains_key(k)) {
                return Some(k);
            }
            let here = self.measured[&c];
            let best = neighbours
                .iter()
                .map(|k| (*k, self.measured[k]))
                .max_by(|a, b| a.1.total_cmp(&b.1));
            match best {
                Some((k, v)) if v > here * (1.0 + self.margin) => self.current = k,
                _ if self.step > 1 => self.step = 1,
                _ => {
                    self.done = true;
                    return None;
                }
            }
        }
    }

    /// Record the throughput measured at `tenths`.
    pub fn record(&mut self, tenths: u32, throughput: f64) {
        self.measured.insert(tenths, throughput);
    }

    /// The share the search stands on and its throughput.
    pub fn current(&self) -> (u32, Option<f64>) {
        (self.current, self.measured.get(&self.current).copied())
    }

    /// Everything measured, by share.
    pub fn measured(&self) -> &BTreeMap<u32, f64> {
        &self.measured
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    fn climb(start: u32, f: impl Fn(u32) -> f64) -> (u32, Vec<u32>) {
        let mut t = Tuner::new(start, 0.02);
        let mut visited = Vec::new();
        while let Some(k) = t.next_split() {
            assert!(!visited.contains(&k), "measured {k} twice: {visited:?}");
            visited.push(k);
            t.record(k, f(k));
            assert!(visited.len() <= 11);
        }
        (t.current().0, visited)
    }

    #[test]
    fn climbs_to_the_peak_of_a_unimodal_curve() {
        // Peak at 7 tenths (like 2:1 .. 3:1 on a real platform).
        let f = |k: u32| 100.0 - 5.0 * (k as f64 - 7.0).powi(2);
        for start in 0..=10 {
            let (end, visited) = climb(start, f);
            assert_eq!(end, 7, "from {start}: {visited:?}");
        }
        // A flat top: the search may stop short of the peak, but never more than the margin below
        // what it has measured next to it.
        let flat = |k: u32| 100.0 - (k as f64 - 7.0).powi(2);
        for start in 0..=10 {
            let (end, visited) = climb(start, flat);
            assert!(
                flat(end) * 1.02 >= 100.0,
                "from {start}: ended at {end}, {visited:?}"
            );
        }
        // All DRAM is best (as when the slow tier is emulated access by access).
        let (end, _) = climb(7, |k| k as f64 * 10.0 + 1.0);
        assert_eq!(end, 10);
    }

    #[test]
    fn a_flat_curve_keeps_the_start_and_stops() {
        let (end, visited) = climb(7, |k| 100.0 + (k % 2) as f64 * 0.5);
        assert_eq!(end, 7);
        assert!(visited.len() <= 5, "{visited:?}");
    }

    #[test]
    fn the_pattern_spreads_the_share_evenly() {
        let p: Vec<bool> = fast_pattern(10, 7).collect();
        assert_eq!(p.iter().filter(|b| **b).count(), 7);
        assert_eq!(fast_pattern(1000, 3).filter(|b| *b).count(), 300);
        assert!(fast_pattern(5, 0).all(|b| !b));
        assert!(fast_pattern(5, 10).all(|b| b));
        // No long runs: at 5 tenths, every other page.
        let half: Vec<bool> = fast_pattern(6, 5).collect();
        assert_eq!(half, vec![false, true, false, true, false, true]);
    }

    #[test]
    fn progress_signals_from_files_and_commands() {
        let dir = TempDir::new("progress");
        dir.write("count", "1234 bytes\n");
        let spec = format!("file:{}", dir.path().join("count").display());
        assert_eq!(Progress::parse(&spec).unwrap().read().unwrap(), 1234.0);
        assert_eq!(
            Progress::parse("cmd:echo 42").unwrap().read().unwrap(),
            42.0
        );
        assert!(Progress::parse("cmd:echo none").unwrap().read().is_err());
        assert!(Progress::parse("http://x").is_err());
        assert!(Progress::parse("file:").is_err());
        // A counter that does not move is refused rather than measured as zero.
        let file = Progress::parse(&spec).unwrap();
        let e = file
            .rate(Duration::from_millis(20))
            .unwrap_err()
            .to_string();
        assert!(e.contains("stayed at 1234"), "{e}");
    }
}
