//! A workload whose hot set moves: `cxltier touch SIZE --hot HOT --shift-every SECONDS`.
//!
//! It maps SIZE bytes (no transparent huge pages, so each base page can move on its own), writes
//! every page once, then keeps writing the pages of one window of HOT bytes; every `shift_every`
//! the window moves to the next HOT bytes (wrapping around). It reports at a fixed period which
//! window is hot and on which node its pages are (`move_pages` in query mode), and at the end checks
//! that every page still holds what was last written to it: moving pages must never change them.

use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cxltier_sys::{query_pages, Advice, Mapping, PageStatus};

use crate::TierdError;

/// The workload's shape.
#[derive(Debug, Clone)]
pub struct HotSet {
    pub bytes: u64,
    pub hot_bytes: u64,
    pub shift_every: Duration,
    pub duration: Duration,
    pub report_every: Duration,
    /// Pause between passes over the hot window, leaving CPU time to others.
    pub pause: Duration,
    /// Transparent huge pages allowed (MADV_HUGEPAGE) instead of forbidden: a huge page is
    /// placed and moved whole, the case of a target whose hot memory is in huge pages.
    pub huge: bool,
}

/// A periodic report.
#[derive(Debug, Clone, Serialize)]
pub struct HotSetReport {
    pub pid: u32,
    pub t_s: f64,
    /// Index of the hot window, and the time it became hot.
    pub window: u64,
    pub window_since_s: f64,
    pub hot_start: usize,
    pub hot_pages: u64,
    /// The hot window's pages per node (`hot_pages_per_node` in JSON: the unit is in the name).
    #[serde(rename = "hot_pages_per_node")]
    pub hot_nodes: BTreeMap<u32, u64>,
    /// All pages per node (`pages_per_node` in JSON).
    #[serde(rename = "pages_per_node")]
    pub nodes: BTreeMap<u32, u64>,
    pub passes: u64,
}

/// The final report.
#[derive(Debug, Clone, Serialize)]
pub struct HotSetSummary {
    pub pid: u32,
    pub done: bool,
    pub pages: u64,
    /// Pages that held something other than what was last written to them.
    pub corrupt_pages: u64,
    pub intact: bool,
    pub passes: u64,
}

const MARKER: u64 = 0x6378_6c74_6965_7200;

fn nodes_of(addrs: &[usize]) -> Result<BTreeMap<u32, u64>, TierdError> {
    let mut out = BTreeMap::new();
    for chunk in addrs.chunks(1 << 16) {
        for s in query_pages(None, chunk)? {
            if let PageStatus::Node(n) = s {
                *out.entry(n).or_insert(0) += 1;
            }
        }
    }
    Ok(out)
}

impl HotSet {
    /// Check the shape.
    pub fn validate(&self) -> Result<(), TierdError> {
        let page = cxltier_sys::page_size() as u64;
        let bad = |setting, message: String| Err(TierdError::Setting { setting, message });
        if self.hot_bytes < page || self.hot_bytes > self.bytes {
            return bad(
                "--hot",
                format!(
                    "{} bytes: expected at least one page ({page}) and at most SIZE ({})",
                    self.hot_bytes, self.bytes
                ),
            );
        }
        if self.shift_every.is_zero() || self.report_every.is_zero() {
            return bad(
                "--shift-every/--report-every",
                "expected a number of seconds above 0".into(),
            );
        }
        Ok(())
    }

    /// Run for `duration`, or until `stop` is set (a signal handler's flag: a check that stops
    /// the workload once it has seen what it needs, not after a guessed time), calling `report`
    /// periodically; returns the final check, which runs either way.
    pub fn run(
        &self,
        stop: &AtomicBool,
        mut report: impl FnMut(&HotSetReport),
    ) -> Result<HotSetSummary, TierdError> {
        self.validate()?;
        let page = cxltier_sys::page_size();
        let len = usize::try_from(self.bytes).map_err(|_| TierdError::Setting {
            setting: "SIZE",
            message: "larger than the address space".into(),
        })?;
        let mut m = Mapping::anonymous(len)?;
        m.advise(if self.huge {
            Advice::HugePage
        } else {
            Advice::NoHugePage
        })?;
        let pages = len / page;
        let hot_pages = (self.hot_bytes as usize / page).max(1);
        let windows = pages.div_ceil(hot_pages).max(1);
        let base = m.addr();
        let all: Vec<usize> = (0..pages).map(|i| base + i * page).collect();
        // Each page: a marker with its index at offset 0, and a counter at offset 64 that holds
        // the number of the last pass that wrote it.
        let mut last = vec![0u64; pages];
        {
            let mem = m.as_mut_slice();
            for i in 0..pages {
                let at = i * page;
                mem[at..at + 8].copy_from_slice(&(MARKER ^ i as u64).to_ne_bytes());
                mem[at + 64..at + 72].copy_from_slice(&0u64.to_ne_bytes());
            }
        }
        let pid = std::process::id();
        let start = Instant::now();
        let mut next_report = Duration::ZERO;
        let mut passes = 0u64;
        loop {
            let t = start.elapsed();
            if t >= self.duration || stop.load(Ordering::Relaxed) {
                break;
            }
            let window = (t.as_secs_f64() / self.shift_every.as_secs_f64()) as u64;
            let first = (window as usize % windows) * hot_pages;
            let end = (first + hot_pages).min(pages);
            passes += 1;
            let mem = m.as_mut_slice();
            for (i, l) in last.iter_mut().enumerate().take(end).skip(first) {
                let at = i * page + 64;
                mem[at..at + 8].copy_from_slice(&passes.to_ne_bytes());
                *l = passes;
            }
            std::hint::black_box(&mut *mem);
            if t >= next_report {
                next_report = t + self.report_every;
                report(&HotSetReport {
                    pid,
                    t_s: t.as_secs_f64(),
                    window,
                    window_since_s: window as f64 * self.shift_every.as_secs_f64(),
                    hot_start: base + first * page,
                    hot_pages: (end - first) as u64,
                    hot_nodes: nodes_of(&all[first..end])?,
                    nodes: nodes_of(&all)?,
                    passes,
                });
            }
            if !self.pause.is_zero() {
                std::thread::sleep(self.pause);
            }
        }
        let mem = m.as_slice();
        let mut corrupt = 0;
        for (i, &l) in last.iter().enumerate() {
            let at = i * page;
            let marker = u64::from_ne_bytes(mem[at..at + 8].try_into().expect("8 bytes"));
            let count = u64::from_ne_bytes(mem[at + 64..at + 72].try_into().expect("8 bytes"));
            if marker != MARKER ^ i as u64 || count != l {
                corrupt += 1;
            }
        }
        Ok(HotSetSummary {
            pid,
            done: true,
            pages: pages as u64,
            corrupt_pages: corrupt,
            intact: corrupt == 0,
            passes,
        })
    }
}

impl HotSetSummary {
    /// The end-of-run check: an error unless every page held what was last written to it.
    pub fn check(&self) -> Result<(), TierdError> {
        if self.intact {
            return Ok(());
        }
        Err(TierdError::Corrupt(format!(
            "{} of {} pages did not hold what was last written to them",
            self.corrupt_pages, self.pages
        )))
    }
}

impl StreamSummary {
    /// The end-of-run check: an error unless every whole pass summed to the pattern's sum.
    pub fn check(&self) -> Result<(), TierdError> {
        intact_or_error(self.intact, || {
            format!("{} passes had a wrong sum", self.bad_passes)
        })
    }
}

impl ChaseSummary {
    /// The end-of-run check: an error unless every line still holds its successor.
    pub fn check(&self) -> Result<(), TierdError> {
        intact_or_error(self.intact, || {
            "a line of the chase no longer holds its successor".to_string()
        })
    }
}

fn intact_or_error(intact: bool, what: impl FnOnce() -> String) -> Result<(), TierdError> {
    if intact {
        return Ok(());
    }
    Err(TierdError::Corrupt(format!(
        "the memory did not hold what was written to it: {}",
        what()
    )))
}

/// A run's length in seconds, from the flag `flag` (above 0).
pub fn period(flag: &str, seconds: f64) -> Result<Duration, TierdError> {
    if seconds.is_finite() && seconds > 0.0 {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        Err(TierdError::invalid(format!(
            "{flag} {seconds}: expected a number of seconds above 0"
        )))
    }
}

/// `--warmup` in seconds (0 or more).
pub fn warmup(seconds: f64) -> Result<Duration, TierdError> {
    if seconds.is_finite() && seconds >= 0.0 {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        Err(TierdError::invalid(format!(
            "--warmup {seconds}: expected a number of seconds, 0 or more"
        )))
    }
}

/// Make sure no page of this process is a transparent huge page, not only a workload's memory:
/// an allocator whose arenas are 2 MiB aligned (as mimalloc's are) puts the process's own heap in
/// huge pages, hot ones, and beside them a small DRAM budget under `cxltier tierd` cannot hold the
/// hot window whose moves the workload is there to show. THP is disabled for the process
/// (`PR_SET_THP_DISABLE`) and the program executed again, so that the new image never has a huge
/// page; the pid, the memory policy, the environment and the arguments stay. Returns only when
/// huge pages were already disabled (`Ok(None)`) or the kernel refuses the setting (`Ok(Some)`:
/// the workload goes on with huge pages allowed in its heap, which the caller says).
pub fn without_huge_pages() -> Result<Option<cxltier_sys::SysError>, TierdError> {
    use std::os::unix::process::CommandExt;
    match cxltier_sys::thp::disabled() {
        Ok(true) => return Ok(None),
        Ok(false) => {}
        Err(e) => return Ok(Some(e)),
    }
    cxltier_sys::thp::disable().map_err(|e| TierdError::Exec(e.to_string()))?;
    let mut argv = std::env::args_os();
    let argv0 = argv.next().unwrap_or_else(|| "cxltier".into());
    // The program's own path, not /proc/self/exe: the process's name (comm, what `ps` and
    // `cxltier show` print) comes from the file name executed.
    let exe = std::env::current_exe()
        .map_err(|e| TierdError::Exec(format!("cannot find this program's path: {e}")))?;
    let err = std::process::Command::new(&exe)
        .arg0(argv0)
        .args(argv)
        .exec();
    Err(TierdError::Exec(format!(
        "cannot execute {} again with transparent huge pages disabled: {err}",
        exe.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sixteen pages whose hot window of four moves every 40 ms, for `duration`.
    fn sixteen_pages(duration: Duration) -> HotSet {
        let page = cxltier_sys::page_size() as u64;
        HotSet {
            bytes: 16 * page,
            hot_bytes: 4 * page,
            shift_every: Duration::from_millis(40),
            duration,
            report_every: Duration::from_millis(10),
            pause: Duration::from_millis(1),
            huge: false,
        }
    }

    #[test]
    fn the_window_moves_and_memory_checks_out() {
        let page = cxltier_sys::page_size() as u64;
        let w = sixteen_pages(Duration::from_millis(200));
        let mut windows = Vec::new();
        let s = w
            .run(&AtomicBool::new(false), |r| {
                assert_eq!(r.hot_pages, 4);
                assert_eq!(r.hot_nodes.values().sum::<u64>(), 4);
                assert_eq!(r.nodes.values().sum::<u64>(), 16);
                windows.push(r.window);
            })
            .unwrap();
        assert!(s.intact && s.pages == 16 && s.passes > 0, "{s:?}");
        windows.dedup();
        assert!(windows.len() >= 3, "the hot window moved: {windows:?}");
        let bad = HotSet {
            hot_bytes: 32 * page,
            ..w
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn a_stop_request_ends_the_run_with_the_final_check() {
        // Far longer than any test may take: only the stop request can end this run.
        let w = sixteen_pages(Duration::from_secs(3600));
        let stop = AtomicBool::new(false);
        let mut reports = 0;
        let s = w
            .run(&stop, |_| {
                reports += 1;
                if reports == 3 {
                    stop.store(true, Ordering::Relaxed);
                }
            })
            .unwrap();
        assert_eq!(reports, 3, "no report after the stop request");
        assert!(s.done && s.intact && s.pages == 16, "{s:?}");
    }
}

/// A bandwidth-bound loop: `cxltier touch SIZE --stream`. It fills its buffer with a pattern,
/// then reads the whole buffer over and over in address order. With a progress file it keeps
/// the number of bytes read so far there (rewritten about ten times a second, atomically), the
/// progress signal `tierd --tune` reads. Every whole pass's sum is checked against the pattern's:
/// a page that comes back from swap or another node with other contents is counted.
#[derive(Debug, Clone)]
pub struct Stream {
    pub bytes: u64,
    /// Read for this long before the measured period starts (time for limits and tierd to
    /// settle); the summary's rate covers only the period after it.
    pub warmup: Duration,
    pub duration: Duration,
    pub progress_file: Option<std::path::PathBuf>,
    /// Allocate a fresh buffer of this many bytes once the file exists (checked with each
    /// progress update), for checking where a process's *new* allocations land.
    pub fresh: Option<(u64, std::path::PathBuf)>,
}

/// Where the pages of a fresh buffer landed (allocated, written, then asked with `move_pages`).
#[derive(Debug, Clone, Serialize)]
pub struct FreshBuffer {
    pub event: &'static str,
    pub pid: u32,
    pub bytes: u64,
    pub pages: u64,
    /// Pages per node (`pages_per_node` in JSON: the unit is in the name).
    #[serde(rename = "pages_per_node")]
    pub nodes: std::collections::BTreeMap<u32, u64>,
}

/// A workload's memory is written and its timed part begins: the moment to apply a limit or
/// start `tierd` that the run is to be measured under.
#[derive(Debug, Clone, Serialize)]
pub struct Ready {
    pub pid: u32,
    pub bytes: u64,
    pub init_seconds: f64,
}

/// What [`Stream::run`] did.
#[derive(Debug, Clone, Serialize)]
pub struct StreamSummary {
    pub pid: u32,
    pub bytes: u64,
    pub bytes_read: u64,
    pub seconds: f64,
    /// Bytes read after the warmup, and in how long.
    pub measured_bytes: u64,
    pub measured_seconds: f64,
    pub bytes_per_second: f64,
    pub passes: u64,
    /// Whole passes whose sum was not the pattern's.
    pub bad_passes: u64,
    pub intact: bool,
}

/// The stream's pattern: word `i` holds `i` scrambled (distinct words, so a page swapped for
/// another page changes the sum as surely as a page of zeros does).
fn stream_word(i: u64) -> u64 {
    (i ^ MARKER).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The sum of one pass over `words` words of the pattern.
fn stream_pass_sum(words: u64) -> u64 {
    (0..words).fold(0u64, |s, i| s.wrapping_add(stream_word(i)))
}

/// A timed run's two periods: warmup, then measurement.
struct Periods {
    start: Instant,
    warmup: Duration,
    end: Duration,
    measured: Option<(Instant, u64)>,
}

impl Periods {
    fn new(warmup: Duration, duration: Duration) -> Periods {
        Periods {
            start: Instant::now(),
            warmup,
            end: warmup + duration,
            measured: None,
        }
    }

    /// Look at the clock with the work `done` so far; false once the run is over.
    fn go_on(&mut self, done: u64) -> bool {
        let t = self.start.elapsed();
        if self.measured.is_none() && t >= self.warmup {
            self.measured = Some((Instant::now(), done));
        }
        t < self.end
    }

    /// The work done in the measured period and its length (zero when it never began).
    fn measured(&self, done: u64) -> (u64, f64) {
        match self.measured {
            Some((at, before)) => (done - before, at.elapsed().as_secs_f64()),
            None => (0, 0.0),
        }
    }
}

impl Stream {
    /// Run for `warmup + duration` or until `stop` is set; `on_ready` hears when the buffer is
    /// written, `on_fresh` where the fresh buffer's pages landed.
    pub fn run(
        &self,
        stop: &AtomicBool,
        on_ready: impl FnOnce(&Ready),
        mut on_fresh: impl FnMut(&FreshBuffer),
    ) -> Result<StreamSummary, TierdError> {
        let init = Instant::now();
        let mut m = base_page_mapping(self.bytes, "SIZE")?;
        let len = m.as_slice().len();
        for (i, word) in m.as_mut_slice().chunks_exact_mut(8).enumerate() {
            word.copy_from_slice(&stream_word(i as u64).to_ne_bytes());
        }
        let words = (len / 8) as u64;
        let expected = stream_pass_sum(words);
        let tmp = self.progress_file.as_ref().map(|p| p.with_extension("tmp"));
        let publish = |count: u64| -> Result<(), TierdError> {
            let (Some(file), Some(tmp)) = (&self.progress_file, &tmp) else {
                return Ok(());
            };
            std::fs::write(tmp, format!("{count}\n"))
                .and_then(|()| std::fs::rename(tmp, file))
                .map_err(|e| TierdError::io("cannot write", file, e))
        };
        publish(0)?;
        on_ready(&Ready {
            pid: std::process::id(),
            bytes: self.bytes,
            init_seconds: init.elapsed().as_secs_f64(),
        });
        const CHUNK: usize = 64 << 10;
        let mut periods = Periods::new(self.warmup, self.duration);
        let mut next = Duration::from_millis(100);
        let (mut count, mut passes, mut bad_passes) = (0u64, 0u64, 0u64);
        let mut fresh: Option<Mapping> = None;
        'run: loop {
            let mut sum = 0u64;
            for chunk in m.as_slice().chunks(CHUNK) {
                for word in chunk.chunks_exact(8) {
                    sum = sum.wrapping_add(u64::from_ne_bytes(word.try_into().expect("8 bytes")));
                }
                count += chunk.len() as u64;
                let t = periods.start.elapsed();
                if t >= next {
                    publish(count)?;
                    next = t + Duration::from_millis(100);
                    if let Some((bytes, trigger)) = &self.fresh {
                        if fresh.is_none() && trigger.exists() {
                            let (m, report) = fresh_buffer(*bytes)?;
                            on_fresh(&report);
                            fresh = Some(m);
                        }
                    }
                }
                if !periods.go_on(count) || stop.load(Ordering::Relaxed) {
                    break 'run;
                }
            }
            passes += 1;
            if sum != expected {
                bad_passes += 1;
            }
        }
        publish(count)?;
        let (measured_bytes, measured_seconds) = periods.measured(count);
        Ok(StreamSummary {
            pid: std::process::id(),
            bytes: self.bytes,
            bytes_read: count,
            seconds: periods.start.elapsed().as_secs_f64(),
            measured_bytes,
            measured_seconds,
            bytes_per_second: rate(measured_bytes, measured_seconds),
            passes,
            bad_passes,
            intact: bad_passes == 0,
        })
    }
}

fn rate(done: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        done as f64 / seconds
    } else {
        0.0
    }
}

/// A latency-bound loop: `cxltier touch SIZE --chase`, a pointer chase as multichase's. The
/// buffer is cut into 64-byte lines, each holding the index of the next line to visit; the
/// visiting order is one cycle through every line, in an order that jumps across the whole
/// buffer (a full-period linear congruential sequence over the next power of two, skipping the
/// indices past the end), so each step is a dependent load the CPU cannot prefetch. The buffer is
/// written in address order, never at random: a footprint larger than its memory limit is
/// written at the speed of sequential swap-out. At the end every line must still hold its
/// successor.
#[derive(Debug, Clone)]
pub struct Chase {
    pub bytes: u64,
    pub warmup: Duration,
    pub duration: Duration,
}

/// What [`Chase::run`] did.
#[derive(Debug, Clone, Serialize)]
pub struct ChaseSummary {
    pub pid: u32,
    pub bytes: u64,
    pub lines: u64,
    pub steps: u64,
    pub seconds: f64,
    /// Steps after the warmup, and in how long.
    pub measured_steps: u64,
    pub measured_seconds: f64,
    pub ns_per_step: f64,
    pub steps_per_second: f64,
    /// Every line still holds its successor.
    pub intact: bool,
}

/// The bytes per line of the chase (a cache line).
const CHASE_LINE: usize = 64;

/// The line after `i` in a chase of `lines` lines: the next element of a full-period LCG over
/// `mask + 1` (a power of two at least `lines`) that is below `lines`. The LCG modulo a power
/// of two has full period when the multiplier is 1 mod 4 and the increment odd (Hull-Dobell),
/// so its one cycle, with the indices past the end skipped, is one cycle through every line.
fn chase_next(i: u64, lines: u64, mask: u64) -> u64 {
    let mut x = i;
    loop {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407)
            & mask;
        if x < lines {
            return x;
        }
    }
}

/// Write the chase's lines: each holds its successor.
fn chase_write(mem: &mut [u8], lines: u64, mask: u64) {
    for (i, line) in mem.chunks_exact_mut(CHASE_LINE).enumerate() {
        line[..8].copy_from_slice(&chase_next(i as u64, lines, mask).to_ne_bytes());
    }
}

/// Every line still holds its successor.
fn chase_intact(mem: &[u8], lines: u64, mask: u64) -> bool {
    mem.chunks_exact(CHASE_LINE).enumerate().all(|(i, line)| {
        u64::from_ne_bytes(line[..8].try_into().expect("8 bytes"))
            == chase_next(i as u64, lines, mask)
    })
}

impl Chase {
    /// Run for `warmup + duration` or until `stop` is set; `on_ready` hears when the chain is
    /// written.
    pub fn run(
        &self,
        stop: &AtomicBool,
        on_ready: impl FnOnce(&Ready),
    ) -> Result<ChaseSummary, TierdError> {
        let init = Instant::now();
        let mut m = base_page_mapping(self.bytes, "SIZE")?;
        let len = m.as_slice().len();
        let lines = (len / CHASE_LINE) as u64;
        let mask = lines.next_power_of_two() - 1;
        chase_write(m.as_mut_slice(), lines, mask);
        on_ready(&Ready {
            pid: std::process::id(),
            bytes: self.bytes,
            init_seconds: init.elapsed().as_secs_f64(),
        });
        let mem = m.as_slice();
        let load = |i: u64| -> u64 {
            let at = i as usize * CHASE_LINE;
            // A damaged line may hold anything: keep the walk inside the buffer (the final
            // check reports the damage).
            let next = u64::from_ne_bytes(mem[at..at + 8].try_into().expect("8 bytes"));
            if next < lines {
                next
            } else {
                0
            }
        };
        const BATCH: u64 = 4096;
        let mut periods = Periods::new(self.warmup, self.duration);
        let (mut at, mut steps) = (0u64, 0u64);
        while periods.go_on(steps) && !stop.load(Ordering::Relaxed) {
            for _ in 0..BATCH {
                at = load(at);
            }
            steps += BATCH;
        }
        std::hint::black_box(at);
        let (measured_steps, measured_seconds) = periods.measured(steps);
        let seconds = periods.start.elapsed().as_secs_f64();
        // Every line still holds its successor: checked in address order, not along the chain,
        // so that a footprint mostly in swap is read back at the speed of sequential swap-in.
        // (The successors form one cycle through every line: `chase_next`'s test.)
        let intact = chase_intact(mem, lines, mask);
        Ok(ChaseSummary {
            pid: std::process::id(),
            bytes: self.bytes,
            lines,
            steps,
            seconds,
            measured_steps,
            measured_seconds,
            ns_per_step: if measured_steps > 0 {
                measured_seconds * 1e9 / measured_steps as f64
            } else {
                0.0
            },
            steps_per_second: rate(measured_steps, measured_seconds),
            intact,
        })
    }
}

/// `bytes` of anonymous memory in base pages (no transparent huge pages, so that each page is
/// placed, moved and swapped on its own), at least one page; `setting` names the size in an
/// error.
fn base_page_mapping(bytes: u64, setting: &'static str) -> Result<Mapping, TierdError> {
    let page = cxltier_sys::page_size();
    let len = usize::try_from(bytes)
        .ok()
        .filter(|&l| l >= page)
        .ok_or_else(|| TierdError::Setting {
            setting,
            message: format!("{bytes} bytes: give at least one page ({page})"),
        })?;
    let m = Mapping::anonymous(len)?;
    m.advise(Advice::NoHugePage)?;
    Ok(m)
}

/// Map `bytes`, write every page, and ask where each landed.
fn fresh_buffer(bytes: u64) -> Result<(Mapping, FreshBuffer), TierdError> {
    let page = cxltier_sys::page_size();
    let mut m = base_page_mapping(bytes, "--fresh")?;
    m.write_each(page, 2);
    let addrs: Vec<usize> = m.page_addresses(page).collect();
    let mut nodes = std::collections::BTreeMap::new();
    for s in cxltier_sys::query_pages(None, &addrs)? {
        if let cxltier_sys::PageStatus::Node(n) = s {
            *nodes.entry(n).or_insert(0) += 1;
        }
    }
    let report = FreshBuffer {
        event: "fresh_buffer",
        pid: std::process::id(),
        bytes,
        pages: addrs.len() as u64,
        nodes,
    };
    Ok((m, report))
}

#[cfg(test)]
mod stream_tests {
    use super::*;

    #[test]
    fn the_stream_publishes_a_growing_counter() {
        let dir = std::env::temp_dir().join(format!("cxltier-stream-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("progress");
        let s = Stream {
            bytes: 1 << 20,
            warmup: Duration::ZERO,
            duration: Duration::from_millis(300),
            progress_file: Some(file.clone()),
            fresh: Some((64 << 10, dir.clone())),
        };
        let mut seen = Vec::new();
        let mut ready = None;
        let summary = s
            .run(
                &AtomicBool::new(false),
                |r| ready = Some(r.bytes),
                |f| seen.push(f.clone()),
            )
            .unwrap();
        assert_eq!(ready, Some(1 << 20));
        assert!(summary.intact && summary.bad_passes == 0, "{summary:?}");
        assert_eq!(
            seen.len(),
            1,
            "the trigger exists from the start: one fresh buffer"
        );
        assert_eq!(seen[0].pages, 16);
        assert_eq!(seen[0].nodes.values().sum::<u64>(), 16);
        let published: u64 = std::fs::read_to_string(&file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(published, summary.bytes_read);
        // At least the first chunk is read before the time is looked at; how many passes fit in
        // 300 ms depends on the machine's load (a loaded one managed 3 chunks of 16).
        assert!(summary.bytes_read >= 64 << 10, "{summary:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[cfg(test)]
mod chase_tests {
    use super::*;

    #[test]
    fn the_chase_order_is_one_cycle_through_every_line() {
        for lines in [1u64, 2, 3, 5, 64, 1000, 4096, 5000] {
            let mask = lines.next_power_of_two() - 1;
            let mut seen = vec![false; lines as usize];
            let mut at = 0u64;
            for step in 1..=lines {
                at = chase_next(at, lines, mask);
                assert!(!seen[at as usize], "{lines} lines: line {at} twice");
                seen[at as usize] = true;
                assert_eq!(at == 0, step == lines, "{lines} lines, step {step}");
            }
        }
    }

    #[test]
    fn a_damaged_line_is_found() {
        let lines = 300u64;
        let mask = lines.next_power_of_two() - 1;
        let mut mem = vec![0u8; lines as usize * CHASE_LINE];
        chase_write(&mut mem, lines, mask);
        assert!(chase_intact(&mem, lines, mask));
        mem[CHASE_LINE * 123 + 2] ^= 1;
        assert!(!chase_intact(&mem, lines, mask));
    }

    #[test]
    fn the_chase_and_the_stream_measure_after_their_warmup_and_check_their_memory() {
        let stop = AtomicBool::new(false);
        let c = Chase {
            bytes: 1 << 20,
            warmup: Duration::from_millis(20),
            duration: Duration::from_millis(50),
        };
        let mut ready = false;
        let s = c.run(&stop, |_| ready = true).unwrap();
        assert!(ready && s.intact && s.lines == (1 << 20) / 64, "{s:?}");
        // How much of the run fell in the measured period depends on the machine's load.
        assert!(s.measured_steps <= s.steps, "{s:?}");
        assert_eq!(s.measured_steps > 0, s.ns_per_step > 0.0, "{s:?}");
        let st = Stream {
            bytes: 1 << 20,
            warmup: Duration::from_millis(20),
            duration: Duration::from_millis(50),
            progress_file: None,
            fresh: None,
        };
        let s = st.run(&stop, |_| {}, |_| {}).unwrap();
        assert!(s.intact && s.passes > 0, "{s:?}");
        assert!(s.measured_bytes <= s.bytes_read, "{s:?}");
        // A stop request ends a run at once.
        stop.store(true, Ordering::Relaxed);
        let long = Chase {
            duration: Duration::from_secs(3600),
            ..c
        };
        assert!(long.run(&stop, |_| {}).unwrap().intact);
    }
}
