//! Running the kernels on pinned threads: bandwidth per mix, and the loaded-latency sweep.

use crate::chase;
use crate::host::pin_current_thread;
use crate::kernels::{spin, Accounting, Shape, Streams, STEP_UNITS, STREAMS};
use crate::ProbeError;
use cxltier_profile::Mix;
use serde::Serialize;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A counter on its own cache lines (128 bytes: the adjacent-line prefetcher pairs lines), so that
/// threads updating their counters do not slow each other down.
#[repr(align(128))]
#[derive(Default)]
struct Counter(AtomicU64);

/// Shared state of a set of traffic generators.
pub struct Control {
    stop: AtomicBool,
    /// Injected delay per line, in [`spin`] iterations; 0 runs flat out.
    delay: AtomicU64,
    ready: AtomicUsize,
    unpinned: AtomicUsize,
    counters: Vec<Counter>,
}

impl Control {
    /// Units of the mix done so far by all generators.
    pub fn units(&self) -> u64 {
        self.counters
            .iter()
            .map(|c| c.0.load(Ordering::Relaxed))
            .sum()
    }

    pub fn set_delay(&self, d: u64) {
        self.delay.store(d, Ordering::Relaxed);
    }

    /// Generators that could not be pinned to their CPU.
    pub fn unpinned(&self) -> usize {
        self.unpinned.load(Ordering::Relaxed)
    }
}

/// Cut `buf` into `n` slices of whole 4 KiB pages.
fn slices(buf: &mut [u64], n: usize) -> Vec<&mut [u64]> {
    let per = buf.len() / n / 512 * 512;
    buf.chunks_mut(per.max(512)).take(n).collect()
}

/// Run `threads` generators of `shape` traffic over `buf` (each on its own slice, pinned to
/// `cpus[i % len]`), call `driver` once they all run, then stop them.
fn with_generators<R: Send>(
    buf: &mut [u64],
    cpus: &[u32],
    threads: usize,
    shape: Shape,
    initial_delay: u64,
    driver: impl FnOnce(&Control) -> R + Send,
) -> Result<R, ProbeError> {
    let ctl = Control {
        stop: AtomicBool::new(false),
        delay: AtomicU64::new(initial_delay),
        ready: AtomicUsize::new(0),
        unpinned: AtomicUsize::new(0),
        counters: (0..threads).map(|_| Counter::default()).collect(),
    };
    let parts = slices(buf, threads);
    if parts.len() < threads || parts.iter().any(|p| too_small(p.len(), shape)) {
        return Err(ProbeError::BufferTooSmall {
            bytes: (buf_len_words(&parts) * 8) as u64,
            threads,
            min: crate::size::short((Streams::min_words(shape) * 8) as u64),
        });
    }
    let lines_per_unit = shape.lines();
    std::thread::scope(|s| {
        let ctl = &ctl;
        let mut handles = Vec::new();
        for (i, part) in parts.into_iter().enumerate() {
            let cpu = cpus[i % cpus.len()];
            handles.push(s.spawn(move || {
                if !pin_current_thread(cpu) {
                    ctl.unpinned.fetch_add(1, Ordering::Relaxed);
                }
                let mut streams = Streams::new(part, shape).expect("checked above");
                ctl.ready.fetch_add(1, Ordering::SeqCst);
                let mut units = 0u64;
                let mut sink = 0u64;
                while !ctl.stop.load(Ordering::Relaxed) {
                    let delay = ctl.delay.load(Ordering::Relaxed);
                    if delay == 0 {
                        sink ^= streams.step(STEP_UNITS);
                        units += Streams::units_per_step(STEP_UNITS);
                    } else {
                        sink ^= streams.step(1);
                        units += Streams::units_per_step(1);
                        sink ^= spin(delay * lines_per_unit * STREAMS as u64);
                    }
                    ctl.counters[i].0.store(units, Ordering::Relaxed);
                }
                streams.finish();
                black_box(sink);
            }));
        }
        while ctl.ready.load(Ordering::SeqCst) < threads {
            if handles.iter().any(|h| h.is_finished()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let result = driver(ctl);
        ctl.stop.store(true, Ordering::SeqCst);
        let mut failed = None;
        for h in handles {
            if let Err(e) = h.join() {
                failed = Some(panic_text(&e));
            }
        }
        match failed {
            Some(why) => Err(ProbeError::Thread(why)),
            None => Ok(result),
        }
    })
}

fn buf_len_words(parts: &[&mut [u64]]) -> usize {
    parts.iter().map(|p| p.len()).sum()
}

fn panic_text(e: &Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| e.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panicked".into())
}

/// Whether a slice of `words` is too small for one full step of `shape`.
fn too_small(words: usize, shape: Shape) -> bool {
    words < Streams::min_words(shape)
}

/// Bandwidth of one mix.
#[derive(Debug, Clone, Serialize)]
pub struct Bandwidth {
    pub mix: Mix,
    pub threads: usize,
    /// Bytes the threads asked to read and write, per second (GB = 10^9 B), median of the windows.
    pub requested_gbps: f64,
    /// Bytes the memory moved, per second: requested plus one RFO read per line written with a
    /// regular store.
    pub traffic_gbps: f64,
    /// Memory reads (RFO included) and writes per second.
    pub traffic_read_gbps: f64,
    pub traffic_write_gbps: f64,
    /// Memory traffic per requested byte (1.5 for 1:1 with regular stores).
    pub traffic_per_requested_byte: f64,
    /// Requested GB/s of each measurement window, in order.
    pub windows_requested_gbps: Vec<f64>,
    /// The best window's requested GB/s (the statistic STREAM reports as "best rate").
    pub best_requested_gbps: f64,
    /// (max - min) / median of the windows, percent.
    pub spread_pct: f64,
    /// Threads the kernel would not pin to their CPU.
    pub unpinned_threads: usize,
}

/// Measure `mix` with `threads` generators over `buf`: warm up, then `windows` windows of
/// `window` each; the figure is the median window.
pub fn bandwidth(
    buf: &mut [u64],
    cpus: &[u32],
    threads: usize,
    mix: Mix,
    warmup: Duration,
    windows: usize,
    window: Duration,
) -> Result<Bandwidth, ProbeError> {
    let shape = Shape::of(mix);
    let acc = Accounting::per_unit(shape);
    let (rates, unpinned) = with_generators(buf, cpus, threads, shape, 0, |ctl| {
        std::thread::sleep(warmup);
        let mut rates = Vec::with_capacity(windows);
        let mut t0 = Instant::now();
        let mut u0 = ctl.units();
        for _ in 0..windows.max(1) {
            std::thread::sleep(window);
            let u1 = ctl.units();
            let t1 = Instant::now();
            let secs = (t1 - t0).as_secs_f64();
            rates.push((u1 - u0) as f64 / secs);
            t0 = t1;
            u0 = u1;
        }
        (rates, ctl.unpinned())
    })?;
    let units_per_s = chase::median(&rates);
    let gbps = |bytes_per_unit: u64| units_per_s * bytes_per_unit as f64 / 1e9;
    let windows_requested: Vec<f64> = rates
        .iter()
        .map(|r| r * acc.requested() as f64 / 1e9)
        .collect();
    let (lo, hi) = windows_requested
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        });
    let requested = gbps(acc.requested());
    Ok(Bandwidth {
        mix,
        threads,
        requested_gbps: requested,
        traffic_gbps: gbps(acc.traffic()),
        traffic_read_gbps: gbps(acc.traffic_read),
        traffic_write_gbps: gbps(acc.traffic_write),
        traffic_per_requested_byte: acc.traffic_ratio(),
        windows_requested_gbps: windows_requested,
        best_requested_gbps: hi,
        spread_pct: if requested > 0.0 {
            (hi - lo) / requested * 100.0
        } else {
            0.0
        },
        unpinned_threads: unpinned,
    })
}

/// One point of a loaded-latency curve.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LoadedPoint {
    /// Injected delay per line in the traffic generators (spin iterations).
    pub delay: u64,
    /// Latency of the chasing thread's loads meanwhile, ns.
    pub latency_ns: f64,
    /// Requested GB/s of generators and chase together.
    pub requested_gbps: f64,
    /// Memory traffic GB/s of generators and chase together (RFO included).
    pub traffic_gbps: f64,
    /// The chasing thread's own share of both (one line per load).
    pub chase_gbps: f64,
    /// Share of the window the chasing thread was on its CPU, percent.
    pub on_cpu_pct: f64,
}

/// Sweep `delays` (in order) with `threads - 1` generators of `mix` on `traffic` while one thread
/// chases pointers through `chase_buf` from word `pos`; `on_point` is called after each point.
#[allow(clippy::too_many_arguments)]
pub fn loaded_sweep(
    chase_buf: &[u64],
    pos: &mut usize,
    traffic: &mut [u64],
    cpus: &[u32],
    threads: usize,
    mix: Mix,
    delays: &[u64],
    settle: Duration,
    point_time: Duration,
    on_point: &(dyn Fn(usize) + Sync),
) -> Result<Vec<LoadedPoint>, ProbeError> {
    let shape = Shape::of(mix);
    let acc = Accounting::per_unit(shape);
    let chase_cpu = cpus[0];
    // Generators on the other CPUs; with a single CPU they share it with the chase.
    let gen_cpus: Vec<u32> = if cpus.len() > 1 {
        cpus[1..].to_vec()
    } else {
        cpus.to_vec()
    };
    let generators = threads.saturating_sub(1).max(1);
    let first = delays.first().copied().unwrap_or(0);
    let start_pos = *pos;
    let (points, end_pos) =
        with_generators(traffic, &gen_cpus, generators, shape, first, |ctl| {
            std::thread::scope(|s| {
                s.spawn(|| {
                    pin_current_thread(chase_cpu);
                    let mut p = start_pos;
                    let mut points = Vec::with_capacity(delays.len());
                    for (i, &d) in delays.iter().enumerate() {
                        ctl.set_delay(d);
                        chase::timed(chase_buf, &mut p, settle);
                        let u0 = ctl.units();
                        let run = chase::timed(chase_buf, &mut p, point_time);
                        let u1 = ctl.units();
                        let secs = run.elapsed.as_secs_f64();
                        let units = (u1 - u0) as f64;
                        let chase_bytes = run.loads as f64 * chase::LINE as f64;
                        points.push(LoadedPoint {
                            delay: d,
                            latency_ns: run.ns_per_load(),
                            requested_gbps: (units * acc.requested() as f64 + chase_bytes)
                                / secs
                                / 1e9,
                            traffic_gbps: (units * acc.traffic() as f64 + chase_bytes) / secs / 1e9,
                            chase_gbps: chase_bytes / secs / 1e9,
                            on_cpu_pct: run.on_cpu() * 100.0,
                        });
                        on_point(i);
                    }
                    (points, p)
                })
                .join()
                .map_err(|e| ProbeError::Thread(panic_text(&e)))
            })
        })??;
    *pos = end_pos;
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus() -> Vec<u32> {
        crate::host::allowed_cpus()
    }

    #[test]
    fn measures_bandwidth_of_each_kind_of_mix() {
        let mut buf = vec![1u64; 4 << 20];
        for m in ["R", "1:1", "2:1nt"] {
            let mix: Mix = m.parse().unwrap();
            let b = bandwidth(
                &mut buf,
                &cpus(),
                2,
                mix,
                Duration::from_millis(10),
                3,
                Duration::from_millis(50),
            )
            .unwrap();
            // On a loaded machine a generator thread can go a whole window without finishing a
            // unit, so the median window may read zero: the kernels ran if any window saw work.
            assert!(b.best_requested_gbps > 0.0, "{m}: {b:?}");
            assert_eq!(b.windows_requested_gbps.len(), 3);
            let ratio = b.traffic_gbps / b.requested_gbps;
            assert!((ratio - b.traffic_per_requested_byte).abs() < 1e-9);
        }
    }

    #[test]
    fn too_small_a_buffer_is_refused() {
        let mut buf = vec![1u64; 1000];
        let e = bandwidth(
            &mut buf,
            &cpus(),
            4,
            Mix::READ_ONLY,
            Duration::ZERO,
            1,
            Duration::from_millis(1),
        )
        .unwrap_err();
        assert!(matches!(e, ProbeError::BufferTooSmall { .. }), "{e}");
    }

    #[test]
    fn sweeps_delays_with_a_chasing_thread() {
        let mut chase_buf = vec![0u64; 1 << 18];
        let mut pos = chase::build(&mut chase_buf, 1).unwrap();
        let mut traffic = vec![1u64; 1 << 20];
        let done = AtomicUsize::new(0);
        let pts = loaded_sweep(
            &chase_buf,
            &mut pos,
            &mut traffic,
            &cpus(),
            2,
            "2:1".parse().unwrap(),
            &[100_000, 10, 0],
            Duration::from_millis(5),
            Duration::from_millis(100),
            &|_| {
                done.fetch_add(1, Ordering::Relaxed);
            },
        )
        .unwrap();
        assert_eq!(pts.len(), 3);
        assert_eq!(done.load(Ordering::Relaxed), 3);
        assert_eq!(pts[0].delay, 100_000);
        assert!(pts
            .iter()
            .all(|p| p.latency_ns > 0.0 && p.traffic_gbps > 0.0));
        // That less delay gives more traffic is a measurement, not an invariant: on a loaded
        // machine the generators may get no CPU in a window. `bench/probe` shows the curve.
        assert!(
            pts.iter().all(|p| p.requested_gbps >= p.chase_gbps),
            "{pts:?}"
        );
    }
}
