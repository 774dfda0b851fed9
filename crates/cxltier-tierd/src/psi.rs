//! Memory pressure (PSI) and the SLA controller that sets how much tierd pages out.
//!
//! The stall percentage of an interval is the growth of the `some` line's `total` (microseconds
//! during which at least one task waited for memory) over the interval's wall time: exact for the
//! interval, where the `avg10` figures are decaying estimates over 10 s. The controller is TMO's
//! senpai rule on the pageout amount: below the goal, the allowance grows in proportion to the
//! headroom left; above it, it shrinks in proportion to the overshoot, so offloading goes only as
//! far as the workload tolerates.

use crate::TierdError;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The cumulative stall counters of one `memory.pressure` / `/proc/pressure/memory` file, in µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PressureTotals {
    pub some_us: u64,
    pub full_us: u64,
}

/// Parse a PSI file's `total=` counters.
pub fn parse_pressure(text: &str) -> Option<PressureTotals> {
    let mut some = None;
    let mut full = None;
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let kind = f.next();
        let total = f
            .find_map(|kv| kv.strip_prefix("total="))
            .and_then(|v| v.parse::<u64>().ok());
        match kind {
            Some("some") => some = total,
            Some("full") => full = total,
            _ => {}
        }
    }
    Some(PressureTotals {
        some_us: some?,
        // Older kernels have no `full` line for the system file's CPU; memory always has it.
        full_us: full.unwrap_or(0),
    })
}

/// Percent of `elapsed_us` that the counters grew by: `(some, full)`.
pub fn stall_percent(before: PressureTotals, after: PressureTotals, elapsed_us: u64) -> (f64, f64) {
    if elapsed_us == 0 {
        return (0.0, 0.0);
    }
    let pct = |a: u64, b: u64| (b.saturating_sub(a) as f64 / elapsed_us as f64 * 100.0).min(100.0);
    (
        pct(before.some_us, after.some_us),
        pct(before.full_us, after.full_us),
    )
}

/// The cgroup v2 directory of process `pid` (under `sys_root`'s `sys/fs/cgroup`), when it is in
/// a cgroup v2 hierarchy mounted there.
pub fn cgroup_dir_of(sys_root: &Path, proc_root: &Path, pid: u32) -> Option<PathBuf> {
    let cgroup = fs::read_to_string(proc_root.join(format!("{pid}/cgroup"))).ok()?;
    let path = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = sys_root
        .join("sys/fs/cgroup")
        .join(path.trim_start_matches('/'));
    dir.is_dir().then_some(dir)
}

/// The PSI file for a memory-mode target: the `memory.pressure` of `memcg` (the `--cgroup`
/// whose limits tierd set) when given, else of process `pid`'s cgroup v2, else the system-wide
/// `/proc/pressure/memory`.
pub fn pressure_file(
    sys_root: &Path,
    proc_root: &Path,
    pid: u32,
    memcg: Option<&Path>,
) -> Result<PathBuf, TierdError> {
    if let Some(dir) = memcg {
        let file = dir.join("memory.pressure");
        if file.exists() {
            return Ok(file);
        }
    }
    if let Some(dir) = cgroup_dir_of(sys_root, proc_root, pid) {
        let file = dir.join("memory.pressure");
        if file.exists() {
            return Ok(file);
        }
    }
    let system = proc_root.join("pressure/memory");
    if system.exists() {
        Ok(system)
    } else {
        Err(TierdError::Unsupported(format!(
            "--max-stall-pct needs pressure stall information: neither the target's cgroup v2 \
             memory.pressure nor {} exists; boot with psi=1 (CONFIG_PSI)",
            system.display()
        )))
    }
}

/// Reads one PSI file interval after interval.
#[derive(Debug)]
pub struct PressureReader {
    path: PathBuf,
    last: Option<(Instant, PressureTotals)>,
}

impl PressureReader {
    pub fn new(path: PathBuf) -> PressureReader {
        PressureReader { path, last: None }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stall percentages `(some, full)` since the previous call (`None` the first time).
    pub fn sample(&mut self) -> Result<Option<(f64, f64)>, TierdError> {
        let text =
            fs::read_to_string(&self.path).map_err(|e| TierdError::io("reading", &self.path, e))?;
        let now = Instant::now();
        let totals = parse_pressure(&text).ok_or_else(|| TierdError::Parse {
            path: self.path.clone(),
            content: text.chars().take(200).collect(),
            why: "no `some ... total=N` line".into(),
        })?;
        let out = self.last.map(|(at, before)| {
            stall_percent(
                before,
                totals,
                now.saturating_duration_since(at).as_micros() as u64,
            )
        });
        self.last = Some((now, totals));
        Ok(out)
    }
}

/// How fast the allowance grows with full headroom: this share of the maximum per interval.
const GROW_SHARE: f64 = 0.25;
/// How far one interval at twice the goal or more cuts it: by half.
const MAX_CUT: f64 = 0.5;

/// The SLA controller's rule, a pure function: the next interval's pageout allowance (pages)
/// from the current one, the stall measured and the goal. Stall at the goal keeps the allowance;
/// below it, it grows by `GROW_SHARE * max * (1 - stall/goal)`; above it, it shrinks by
/// `MAX_CUT * min(1, stall/goal - 1)` of itself. The result stays within `0..=max`.
pub fn next_allowance(current: u64, stall_pct: f64, goal_pct: f64, max: u64) -> u64 {
    let current = current.min(max) as f64;
    let next = if !stall_pct.is_finite() || goal_pct <= 0.0 {
        0.0
    } else if stall_pct <= goal_pct {
        let headroom = 1.0 - stall_pct / goal_pct;
        current + GROW_SHARE * max as f64 * headroom
    } else {
        let over = (stall_pct / goal_pct - 1.0).min(1.0);
        current * (1.0 - MAX_CUT * over)
    };
    (next.round().max(0.0) as u64).min(max)
}

/// What the SLA loop holds the offloading to.
#[derive(Debug, Clone)]
pub enum SlaGoal {
    /// PSI `some` of the target's cgroup (or the system's) at most this percent of wall time.
    Stall { max_pct: f64 },
    /// The workload's own progress (a counter, as for the tuner) at most this percent below the
    /// best rate it has shown in the run.
    Slowdown {
        max_pct: f64,
        progress: crate::tune::ProgressSignal,
    },
}

impl SlaGoal {
    pub fn max_pct(&self) -> f64 {
        match self {
            SlaGoal::Stall { max_pct } | SlaGoal::Slowdown { max_pct, .. } => *max_pct,
        }
    }
}

/// How far below its best a rate is, in percent (0 at or above it, or with no best yet).
pub fn slowdown_pct(rate: f64, best: f64) -> f64 {
    if best > 0.0 && rate.is_finite() {
        ((1.0 - rate / best) * 100.0).clamp(0.0, 100.0)
    } else {
        0.0
    }
}

/// The workload's progress rate per interval against the best rate seen: the SLA's measure when
/// the goal is a slowdown. The counter is read once per interval (no waiting for it to change,
/// as the tuner does): an interval in which it did not move reads as a rate of 0, a full
/// slowdown, which is what a workload stalled on its faults looks like.
#[derive(Debug)]
pub struct ProgressSlowdown {
    signal: crate::tune::ProgressSignal,
    last: Option<(Instant, f64)>,
    best_rate: f64,
}

impl ProgressSlowdown {
    pub fn new(signal: crate::tune::ProgressSignal) -> ProgressSlowdown {
        ProgressSlowdown {
            signal,
            last: None,
            best_rate: 0.0,
        }
    }

    /// The rate since the last read and its slowdown against the best so far (`None` at the
    /// first read). A counter that went backwards (the workload restarted) starts over.
    pub fn sample(&mut self) -> Result<Option<(f64, f64)>, TierdError> {
        let value = self.signal.read()?;
        let now = Instant::now();
        let out = match self.last {
            Some((at, before)) if value >= before => {
                let secs = now.saturating_duration_since(at).as_secs_f64();
                (secs > 0.0).then(|| {
                    let rate = (value - before) / secs;
                    self.best_rate = self.best_rate.max(rate);
                    (rate, slowdown_pct(rate, self.best_rate))
                })
            }
            Some(_) => {
                self.best_rate = 0.0;
                None
            }
            None => None,
        };
        self.last = Some((now, value));
        Ok(out)
    }
}

/// The controller's state over the run.
#[derive(Debug)]
pub struct SlaController {
    pub goal_pct: f64,
    pub allowance_pages: u64,
    pub last_stall: Option<(f64, f64)>,
}

impl SlaController {
    /// Start cautiously: a tenth of the most the rate limit allows, then follow the pressure.
    pub fn new(goal_pct: f64, max_pages: u64) -> SlaController {
        SlaController {
            goal_pct,
            allowance_pages: max_pages / 10,
            last_stall: None,
        }
    }

    /// Take one interval's stall (`None` before the first full interval) and return the next
    /// allowance.
    pub fn update(&mut self, stall: Option<(f64, f64)>, max_pages: u64) -> u64 {
        if let Some(s) = stall {
            self.last_stall = Some(s);
            self.allowance_pages =
                next_allowance(self.allowance_pages, s.0, self.goal_pct, max_pages);
        }
        self.allowance_pages.min(max_pages)
    }
}

/// Where a target's refaults are read: the `memory.stat` of `memcg` (the `--cgroup`) when given,
/// else of process `pid`'s cgroup v2, else the system-wide `/proc/vmstat`. Only the first two
/// count the target's own refaults.
pub fn refault_file(sys_root: &Path, proc_root: &Path, pid: u32, memcg: Option<&Path>) -> PathBuf {
    memcg
        .map(Path::to_path_buf)
        .or_else(|| cgroup_dir_of(sys_root, proc_root, pid))
        .map(|d| d.join("memory.stat"))
        .filter(|f| f.exists())
        .unwrap_or_else(|| proc_root.join("vmstat"))
}

/// Refault counters read once per interval from each file in use: several targets in one
/// cgroup share the file, and its growth, read once.
#[derive(Debug, Default)]
pub struct RefaultCounters {
    last: std::collections::HashMap<PathBuf, u64>,
}

impl RefaultCounters {
    /// Read each of `files` (duplicates read once) and return the growth of each since the
    /// previous read (`None` for a file read for the first time or unreadable). A file not in
    /// `files` this time starts over when it is read again.
    pub fn sample<'a>(
        &mut self,
        files: impl IntoIterator<Item = &'a PathBuf>,
    ) -> std::collections::HashMap<PathBuf, Option<u64>> {
        let mut out = std::collections::HashMap::new();
        for f in files {
            if out.contains_key(f) {
                continue;
            }
            let now = fs::read_to_string(f).ok().and_then(|t| parse_refaults(&t));
            let growth = match (self.last.get(f), now) {
                (Some(&a), Some(b)) => Some(b.saturating_sub(a)),
                _ => None,
            };
            match now {
                Some(n) => {
                    self.last.insert(f.clone(), n);
                }
                None => {
                    self.last.remove(f);
                }
            }
            out.insert(f.clone(), growth);
        }
        // Files no target reads any more (their cgroups emptied or removed) are forgotten.
        self.last.retain(|f, _| out.contains_key(f));
        out
    }
}

/// `workingset_refault_anon` from a `/proc/vmstat` (or cgroup v2 `memory.stat`) text: anonymous
/// pages read back from swap soon after they were reclaimed.
pub fn parse_refaults(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        l.strip_prefix("workingset_refault_anon ")
            .and_then(|v| v.trim().parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_are_read_not_the_averages() {
        let t = parse_pressure(
            "some avg10=12.50 avg60=3.00 avg300=1.00 total=37604311\n\
             full avg10=0.00 avg60=0.01 avg300=0.17 total=18478601\n",
        )
        .unwrap();
        assert_eq!(t.some_us, 37604311);
        assert_eq!(t.full_us, 18478601);
        assert_eq!(parse_pressure("garbage\n"), None);
    }

    #[test]
    fn stall_is_the_counter_growth_over_the_interval() {
        let a = PressureTotals {
            some_us: 1_000,
            full_us: 500,
        };
        let b = PressureTotals {
            some_us: 51_000,
            full_us: 10_500,
        };
        // 50 ms of 1 s stalled: 5%; full 1%.
        let (some, full) = stall_percent(a, b, 1_000_000);
        assert!((some - 5.0).abs() < 1e-9 && (full - 1.0).abs() < 1e-9);
        assert_eq!(stall_percent(a, b, 0), (0.0, 0.0));
        // A counter that went backwards (a new cgroup) reads as no stall.
        assert_eq!(stall_percent(b, a, 1_000_000), (0.0, 0.0));
    }

    #[test]
    fn the_controller_grows_below_the_goal_and_cuts_above_it() {
        let max = 1000;
        // No stall: grow by a quarter of the maximum.
        assert_eq!(next_allowance(100, 0.0, 5.0, max), 350);
        // Half the goal: half that step.
        assert_eq!(next_allowance(100, 2.5, 5.0, max), 225);
        // At the goal: hold.
        assert_eq!(next_allowance(400, 5.0, 5.0, max), 400);
        // 50% over the goal: cut by a quarter; twice the goal or more: by half.
        assert_eq!(next_allowance(400, 7.5, 5.0, max), 300);
        assert_eq!(next_allowance(400, 10.0, 5.0, max), 200);
        assert_eq!(next_allowance(400, 90.0, 5.0, max), 200);
        // Bounded by the maximum; never negative.
        assert_eq!(next_allowance(990, 0.0, 5.0, max), max);
        assert_eq!(next_allowance(0, 50.0, 5.0, max), 0);
        assert_eq!(next_allowance(5000, 5.0, 5.0, max), max);
    }

    #[test]
    fn under_steady_pressure_the_controller_settles_where_stall_meets_the_goal() {
        // A workload whose stall grows with the pageout allowance: 1% per 100 pages per interval.
        let stall_of = |pages: u64| pages as f64 / 100.0;
        let mut c = SlaController::new(5.0, 2000);
        let mut allowance = c.update(None, 2000);
        let mut seen = Vec::new();
        for _ in 0..200 {
            allowance = c.update(Some((stall_of(allowance), 0.0)), 2000);
            seen.push(allowance);
        }
        // It ends near 500 pages (5%), and does not swing wider than the cut allows.
        let tail = &seen[150..];
        let (lo, hi) = (*tail.iter().min().unwrap(), *tail.iter().max().unwrap());
        assert!(lo >= 300 && hi <= 700, "{lo}..{hi}");
        let mean = tail.iter().sum::<u64>() as f64 / tail.len() as f64;
        assert!((mean - 500.0).abs() < 150.0, "{mean}");
    }

    #[test]
    fn refaults_are_the_anonymous_ones() {
        let v = "workingset_refault_file 7281904\nworkingset_refault_anon 42\n";
        assert_eq!(parse_refaults(v), Some(42));
        assert_eq!(parse_refaults("nr_free_pages 1\n"), None);
    }

    /// A scratch root whose `proc` holds `files` (path below `proc`, text): the root and `proc`.
    fn proc_with(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let proc = d.path().join("proc");
        for (path, text) in files {
            let path = proc.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        (d, proc)
    }

    #[test]
    fn the_pressure_file_is_the_cgroups_when_it_has_one() {
        let (d, proc) = proc_with(&[
            ("pressure/memory", "some total=1\n"),
            ("7/cgroup", "0::/app.slice/x\n"),
        ]);
        // No such cgroup v2 directory (a v1 host): the system file.
        assert_eq!(
            pressure_file(d.path(), &proc, 7, None).unwrap(),
            proc.join("pressure/memory")
        );
        let cg = d.path().join("sys/fs/cgroup/app.slice/x");
        fs::create_dir_all(&cg).unwrap();
        fs::write(cg.join("memory.pressure"), "some total=1\n").unwrap();
        assert_eq!(
            pressure_file(d.path(), &proc, 7, None).unwrap(),
            cg.join("memory.pressure")
        );
        // The --cgroup whose limits tierd set comes first (the process may sit in a child).
        let memcg = d.path().join("sys/fs/cgroup/app.slice");
        fs::write(memcg.join("memory.pressure"), "some total=1\n").unwrap();
        assert_eq!(
            pressure_file(d.path(), &proc, 7, Some(&memcg)).unwrap(),
            memcg.join("memory.pressure")
        );
        fs::remove_file(memcg.join("memory.pressure")).unwrap();
        fs::remove_file(proc.join("pressure/memory")).unwrap();
        fs::remove_file(cg.join("memory.pressure")).unwrap();
        let e = pressure_file(d.path(), &proc, 7, None).unwrap_err();
        assert!(e.to_string().contains("psi=1"), "{e}");
    }

    #[test]
    fn refaults_are_the_cgroups_and_each_file_is_read_once_per_interval() {
        let (d, proc) = proc_with(&[
            ("vmstat", "workingset_refault_anon 1000\n"),
            ("7/cgroup", "0::/app\n"),
            ("8/cgroup", "0::/other\n"),
        ]);
        let app = d.path().join("sys/fs/cgroup/app");
        fs::create_dir_all(&app).unwrap();
        fs::write(
            app.join("memory.stat"),
            "anon 4096\nworkingset_refault_anon 10\n",
        )
        .unwrap();
        // Pid 7's cgroup has a memory.stat; pid 8's cgroup is not there: the system's.
        let f7 = refault_file(d.path(), &proc, 7, None);
        let f8 = refault_file(d.path(), &proc, 8, None);
        assert_eq!(f7, app.join("memory.stat"));
        assert_eq!(f8, proc.join("vmstat"));
        // The --cgroup given wins over the process's own (deeper) cgroup.
        let memcg = d.path().join("sys/fs/cgroup");
        fs::write(memcg.join("memory.stat"), "workingset_refault_anon 5\n").unwrap();
        assert_eq!(
            refault_file(d.path(), &proc, 7, Some(&memcg)),
            memcg.join("memory.stat")
        );
        let mut c = RefaultCounters::default();
        let first = c.sample([&f7, &f8, &f7]);
        assert_eq!(first.len(), 2);
        assert!(first.values().all(Option::is_none));
        fs::write(app.join("memory.stat"), "workingset_refault_anon 25\n").unwrap();
        fs::write(proc.join("vmstat"), "workingset_refault_anon 1500\n").unwrap();
        let second = c.sample([&f7, &f7, &f8]);
        assert_eq!(second[&f7], Some(15));
        assert_eq!(second[&f8], Some(500));
        // A round without pid 8's file forgets it: its next growth is not over two intervals.
        c.sample([&f7]);
        assert_eq!(c.sample([&f7, &f8])[&f8], None);
    }

    #[test]
    fn slowdown_is_measured_against_the_best_rate_of_the_run() {
        assert!((slowdown_pct(80.0, 100.0) - 20.0).abs() < 1e-9);
        assert_eq!(slowdown_pct(120.0, 100.0), 0.0);
        assert_eq!(slowdown_pct(5.0, 0.0), 0.0, "no best yet");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("progress");
        std::fs::write(&f, "0\n").unwrap();
        let mut meter = ProgressSlowdown::new(crate::tune::ProgressSignal::File(f.clone()));
        assert_eq!(meter.sample().unwrap(), None, "the first read has no rate");
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&f, "1000\n").unwrap();
        let (rate, slow) = meter.sample().unwrap().unwrap();
        assert!(
            rate > 0.0 && slow == 0.0,
            "the first rate is the best: {rate} {slow}"
        );
        // The counter did not move: a full slowdown.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (rate, slow) = meter.sample().unwrap().unwrap();
        assert_eq!((rate, slow), (0.0, 100.0));
        // A counter that went back (the workload restarted) starts over.
        std::fs::write(&f, "10\n").unwrap();
        assert_eq!(meter.sample().unwrap(), None);
        std::fs::write(&f, "bogus\n").unwrap();
        assert!(meter.sample().is_err());
    }
}
