//! Online interleave tuning for a bandwidth-bound target: find the share of its pages on the fast
//! tier that gives the most progress, measured from a signal the user names (a counter in a file,
//! or a command that prints one), by moving the target's pages between tiers.
//!
//! The search ([`Tuner`]) is a hill climb over shares in tenths (0%, 10%, ... 100% on the fast
//! tier) from a starting share (the planner's choice): measure the neighbours two tenths away, move
//! to the best one if it beats the current share by more than a noise margin, then look one tenth
//! away; at a local peak, also look at the two ends (all fast, all slow), which a climb across a
//! plateau would never reach, and climb on from one that is better. Stop when nothing beats the
//! current share. Every share is measured at most once and each move strictly raises the measured
//! throughput, so it ends, and it never returns to a share it left: no oscillation.
//!
//! [`Continuous`] keeps going after that: it watches the throughput at the chosen share and climbs
//! again from there when it moves for several windows in a row (see [`Watch`] for the rule that
//! keeps a steady load from ever being re-tuned).

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
pub enum ProgressSignal {
    /// A file holding a number that grows with work done (bytes processed, operations ...).
    File(PathBuf),
    /// A shell command that prints such a number.
    Command(String),
}

/// As written: `file:PATH` or `cmd:COMMAND`.
impl std::fmt::Display for ProgressSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProgressSignal::File(path) => write!(f, "file:{}", path.display()),
            ProgressSignal::Command(c) => write!(f, "cmd:{c}"),
        }
    }
}

impl ProgressSignal {
    /// `file:PATH` or `cmd:COMMAND`.
    pub fn parse(spec: &str) -> Result<ProgressSignal, TierdError> {
        let bad = || TierdError::Setting {
            setting: "--progress",
            message: format!(
                "{spec:?}: expected file:PATH (a file holding a growing counter) or cmd:COMMAND (a \
                 command printing one)"
            ),
        };
        match spec.split_once(':') {
            Some(("file", p)) if !p.is_empty() => Ok(ProgressSignal::File(PathBuf::from(p))),
            Some(("cmd", c)) if !c.trim().is_empty() => Ok(ProgressSignal::Command(c.to_string())),
            _ => Err(bad()),
        }
    }

    /// The counter's current value.
    pub fn read(&self) -> Result<f64, TierdError> {
        let (text, origin) = match self {
            ProgressSignal::File(p) => (
                std::fs::read_to_string(p).map_err(|e| TierdError::io("cannot read", p, e))?,
                p.clone(),
            ),
            ProgressSignal::Command(c) => {
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
                    // A local peak. Before stopping, look at the two ends (all fast, all slow),
                    // which a climb across a plateau never reaches; climb on from a better one.
                    if let Some(&end) = [10, 0].iter().find(|e| !self.measured.contains_key(e)) {
                        return Some(end);
                    }
                    match [10, 0]
                        .iter()
                        .map(|e| (*e, self.measured[e]))
                        .filter(|(e, _)| *e != c)
                        .max_by(|a, b| a.1.total_cmp(&b.1))
                    {
                        Some((e, v)) if v > here * (1.0 + self.margin) => self.current = e,
                        _ => {
                            self.done = true;
                            return None;
                        }
                    }
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

/// The weighted-interleave weights (fast node, slow node) that give a new allocation the share
/// `tenths`/10 on the fast node: the ratio in lowest terms (7 tenths: 7:3, 5 tenths: 1:1). The
/// kernel's weights run from 1 to 255 and cannot be 0, so all-fast is 255:1 and all-slow 1:255,
/// the nearest the table can hold (99.6% and 0.4%).
pub fn split_weights(tenths: u32) -> (u32, u32) {
    match tenths.min(10) {
        0 => (1, 255),
        10 => (255, 1),
        k => {
            let g = gcd(k, 10 - k);
            (k / g, (10 - k) / g)
        }
    }
}

/// The order in which a sweep of `splits` over `rounds` rounds measures them: every split once per
/// round, the list forwards in even rounds and backwards in odd ones (A B, B A, A B ... for two
/// splits). Measuring the splits alternately, each one as often first as last, makes a load that
/// drifts during the sweep weigh on all of them alike instead of on whichever came later.
pub fn sweep_order(splits: &[u32], rounds: u32) -> Vec<(u32, u32)> {
    let mut order = Vec::with_capacity(splits.len() * rounds as usize);
    for round in 0..rounds {
        if round % 2 == 0 {
            order.extend(splits.iter().map(|&s| (round, s)));
        } else {
            order.extend(splits.iter().rev().map(|&s| (round, s)));
        }
    }
    order
}

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Whether a converged split still holds, from the throughput measured there window after window.
///
/// The first `windows` measurements after convergence set the baseline (their median: one odd
/// window does not set it). After that a re-tune is called for only when `windows` measurements in
/// a row all differ from the baseline by more than `threshold` (0.10: 10%) *in the same
/// direction*. Noise that stays within half the threshold of the true level can never do that (the
/// baseline and each window are then both within it), so a steady load is never re-tuned.
#[derive(Debug, Clone)]
pub struct Watch {
    threshold: f64,
    windows: u32,
    calibration: Vec<f64>,
    baseline: Option<f64>,
    /// Consecutive windows beyond the threshold: positive above the baseline, negative below.
    streak: i32,
}

/// What [`Watch::observe`] concludes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Still setting the baseline.
    Calibrating,
    /// Within the threshold, or not yet for long enough.
    Hold,
    /// Throughput moved for `windows` windows in a row: search again from the current split.
    Retune,
}

impl Watch {
    /// A watch over `windows` windows (at least 1) with a relative `threshold`.
    pub fn new(threshold: f64, windows: u32) -> Watch {
        Watch {
            threshold,
            windows: windows.max(1),
            calibration: Vec::new(),
            baseline: None,
            streak: 0,
        }
    }

    /// The baseline, once set.
    pub fn baseline(&self) -> Option<f64> {
        self.baseline
    }

    /// Consecutive windows beyond the threshold (negative: below the baseline).
    pub fn streak(&self) -> i32 {
        self.streak
    }

    /// Take one window's throughput.
    pub fn observe(&mut self, throughput: f64) -> Verdict {
        let Some(base) = self.baseline else {
            self.calibration.push(throughput);
            if self.calibration.len() as u32 >= self.windows {
                let mut v = self.calibration.clone();
                v.sort_by(f64::total_cmp);
                self.baseline = Some(v[v.len() / 2]);
            }
            return Verdict::Calibrating;
        };
        let change = if base > 0.0 {
            throughput / base - 1.0
        } else {
            f64::INFINITY
        };
        self.streak = if change > self.threshold {
            self.streak.max(0) + 1
        } else if change < -self.threshold {
            self.streak.min(0) - 1
        } else {
            0
        };
        if self.streak.unsigned_abs() >= self.windows {
            Verdict::Retune
        } else {
            Verdict::Hold
        }
    }
}

/// Continuous tuning: a [`Tuner`] climb, then a [`Watch`] at the split it chose, and a new climb
/// from that split whenever the watch calls for one. A pure state machine: the caller measures
/// what [`Continuous::next_step`] asks for and gives the result to [`Continuous::record`].
#[derive(Debug, Clone)]
pub struct Continuous {
    margin: f64,
    threshold: f64,
    windows: u32,
    phase: Phase,
    split: u32,
    climb_start: u32,
    retunes: u32,
}

#[derive(Debug, Clone)]
enum Phase {
    Climbing(Tuner),
    Watching(Watch),
}

/// What to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Move the target to this split (tenths on the fast tier) and measure it.
    Measure(u32),
    /// The climb ended here: leave the target at this split (and set the weights for it).
    Converged {
        split: u32,
        throughput: Option<f64>,
        measured: BTreeMap<u32, f64>,
    },
    /// Measure the current split again, without moving anything.
    Watch(u32),
}

impl Continuous {
    /// Climb from `start` tenths with the tuner's `margin`, then watch with `threshold` over
    /// `windows` windows.
    pub fn new(start: u32, margin: f64, threshold: f64, windows: u32) -> Continuous {
        Continuous {
            margin,
            threshold,
            windows,
            phase: Phase::Climbing(Tuner::new(start, margin)),
            split: start.min(10),
            climb_start: start.min(10),
            retunes: 0,
        }
    }

    /// What to measure next.
    pub fn next_step(&mut self) -> Next {
        match &mut self.phase {
            Phase::Climbing(t) => match t.next_split() {
                Some(k) => Next::Measure(k),
                None => {
                    let (split, throughput) = t.current();
                    let measured = t.measured().clone();
                    self.split = split;
                    self.phase = Phase::Watching(Watch::new(self.threshold, self.windows));
                    Next::Converged {
                        split,
                        throughput,
                        measured,
                    }
                }
            },
            Phase::Watching(_) => Next::Watch(self.split),
        }
    }

    /// Record the throughput measured at `split`. While watching, says what the watch concluded;
    /// a [`Verdict::Retune`] starts a new climb from the current split.
    pub fn record(&mut self, split: u32, throughput: f64) -> Option<Verdict> {
        match &mut self.phase {
            Phase::Climbing(t) => {
                t.record(split, throughput);
                None
            }
            Phase::Watching(w) => {
                let v = w.observe(throughput);
                if v == Verdict::Retune {
                    self.retunes += 1;
                    self.climb_start = self.split;
                    self.phase = Phase::Climbing(Tuner::new(self.split, self.margin));
                }
                Some(v)
            }
        }
    }

    /// Where the current (or last) climb started.
    pub fn climb_start(&self) -> u32 {
        self.climb_start
    }

    /// The split chosen by the last climb (the start before the first one ends).
    pub fn split(&self) -> u32 {
        self.split
    }

    /// How many climbs were started after the first.
    pub fn retunes(&self) -> u32 {
        self.retunes
    }

    /// The watch's baseline and streak, while watching.
    pub fn watch(&self) -> Option<(Option<f64>, i32)> {
        match &self.phase {
            Phase::Watching(w) => Some((w.baseline(), w.streak())),
            Phase::Climbing(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    #[test]
    fn a_progress_signal_is_said_as_it_was_written() {
        for spec in ["file:/run/progress", "cmd:  cat /run/ops"] {
            assert_eq!(ProgressSignal::parse(spec).unwrap().to_string(), spec);
        }
    }
    #[test]
    fn sweep_rounds_alternate_and_medians_ignore_one_odd_window() {
        assert_eq!(
            sweep_order(&[7, 10], 3),
            vec![(0, 7), (0, 10), (1, 10), (1, 7), (2, 7), (2, 10)]
        );
        assert_eq!(sweep_order(&[10, 5, 0], 1), vec![(0, 10), (0, 5), (0, 0)]);
        assert!(sweep_order(&[3], 0).is_empty());
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 100.0, 1.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        // One window spoiled by a burst of host load does not move the median.
        assert_eq!(median(&[10.0, 10.5, 1.0, 9.5, 10.2]), Some(10.0));
    }

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
        assert!(visited.len() <= 7, "{visited:?}");
    }

    #[test]
    fn a_plateau_does_not_hide_a_better_end() {
        // Mixed splits all alike, one end far better (as when interleaving pages over two
        // backing memories costs the emulator more than either alone).
        let f = |k: u32| match k {
            0 => 160.0,
            1 => 150.0,
            _ => 110.0,
        };
        for start in 2..=9 {
            let (end, visited) = climb(start, f);
            assert_eq!(end, 0, "from {start}: {visited:?}");
        }
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
        assert_eq!(
            ProgressSignal::parse(&spec).unwrap().read().unwrap(),
            1234.0
        );
        assert_eq!(
            ProgressSignal::parse("cmd:echo 42")
                .unwrap()
                .read()
                .unwrap(),
            42.0
        );
        assert!(ProgressSignal::parse("cmd:echo none")
            .unwrap()
            .read()
            .is_err());
        assert!(ProgressSignal::parse("http://x").is_err());
        assert!(ProgressSignal::parse("file:").is_err());
        // A counter that does not move is refused rather than measured as zero.
        let file = ProgressSignal::parse(&spec).unwrap();
        let e = file
            .rate(Duration::from_millis(20))
            .unwrap_err()
            .to_string();
        assert!(e.contains("stayed at 1234"), "{e}");
    }

    #[test]
    fn split_weights_are_the_ratio_in_lowest_terms() {
        assert_eq!(split_weights(7), (7, 3));
        assert_eq!(split_weights(5), (1, 1));
        assert_eq!(split_weights(8), (4, 1));
        assert_eq!(split_weights(6), (3, 2));
        assert_eq!(split_weights(10), (255, 1));
        assert_eq!(split_weights(0), (1, 255));
    }

    #[test]
    fn the_watch_needs_consecutive_windows_in_one_direction() {
        let mut w = Watch::new(0.10, 3);
        for x in [100.0, 80.0, 120.0] {
            assert_eq!(w.observe(x), Verdict::Calibrating);
        }
        assert_eq!(
            w.baseline(),
            Some(100.0),
            "the median, not the mean or the last"
        );
        // Alternating far above and far below: never three in a row in one direction.
        for x in [130.0, 70.0, 130.0, 70.0, 130.0, 70.0] {
            assert_eq!(w.observe(x), Verdict::Hold);
        }
        assert_eq!(w.observe(105.0), Verdict::Hold);
        assert_eq!(w.observe(80.0), Verdict::Hold);
        assert_eq!(w.observe(85.0), Verdict::Hold);
        assert_eq!(
            w.observe(105.0),
            Verdict::Hold,
            "within 10%: the streak ends"
        );
        for _ in 0..2 {
            assert_eq!(w.observe(50.0), Verdict::Hold);
        }
        assert_eq!(w.observe(50.0), Verdict::Retune);
    }
}
