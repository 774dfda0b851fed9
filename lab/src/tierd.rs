//! Host-side checks of `cxltier tierd` (lab/checks/tierd.sh sends the data): the moving hot set
//! reaches node0 while it is hot under a DRAM budget smaller than the footprint, migrations
//! stay within the rate limit and the budget, an untargeted process is never touched, `show --pid`
//! sees the moves, and the workload's memory is intact.

use crate::Report;
use serde_json::Value;

/// The workload's window period (lab/checks/tierd.sh: --shift-every 10).
const SHIFT_S: f64 = 10.0;
/// The workload's mapping and tierd's budget (8M, --dram-budget 3M).
const FOOTPRINT: u64 = 8 << 20;
const BUDGET: u64 = 3 << 20;

fn record(report: &mut Report, name: &str, f: impl FnOnce(&Report) -> Result<String, String>) {
    let (pass, detail) = match f(report) {
        Ok(d) => (true, d),
        Err(d) => (false, d),
    };
    report.check(name, pass, detail);
}

/// The JSON objects of a data block with one per line (other lines are ignored).
fn lines(report: &Report, name: &str) -> Result<Vec<Value>, String> {
    let text = report.data(name)?;
    let v: Vec<Value> = text
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    if v.is_empty() {
        return Err(format!(
            "data '{name}' has no JSON lines: {}",
            text.chars().take(160).collect::<String>()
        ));
    }
    Ok(v)
}

fn one(report: &Report, name: &str) -> Result<Value, String> {
    let text = report.data(name)?;
    serde_json::from_str(text.trim()).map_err(|e| {
        format!(
            "data '{name}' is not JSON ({e}): {}",
            text.chars().take(160).collect::<String>()
        )
    })
}

fn f(v: &Value, key: &str) -> Result<f64, String> {
    v[key]
        .as_f64()
        .ok_or_else(|| format!("no number '{key}' in {}", brief(v)))
}

fn brief(v: &Value) -> String {
    v.to_string().chars().take(200).collect()
}

/// The share of the hot window on node0 in a workload report.
fn hot_on_node0(r: &Value) -> Result<f64, String> {
    let pages = f(r, "hot_pages")?;
    let on0 = r["hot_pages_per_node"]["0"].as_f64().unwrap_or(0.0);
    if pages <= 0.0 {
        return Err(format!("no hot pages in {}", brief(r)));
    }
    Ok(on0 / pages)
}

/// Resident bytes on `node` of the process's anonymous mapping of exactly `size` bytes.
fn mapping_on(show: &Value, size: u64, node: &str) -> Result<u64, String> {
    let maps = show["mappings"]
        .as_array()
        .ok_or_else(|| format!("show JSON has no mappings: {}", brief(show)))?;
    let m = maps
        .iter()
        .find(|m| {
            let start = m["start"]
                .as_str()
                .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok());
            let end = m["end"]
                .as_str()
                .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok());
            m["kind"] == "anon" && matches!((start, end), (Some(a), Some(b)) if b - a == size)
        })
        .ok_or_else(|| format!("show JSON has no anonymous mapping of {size} bytes"))?;
    Ok(m["bytes_per_node"][node].as_u64().unwrap_or(0))
}

/// How one tierd run used its migration rate limit, from its running reports.
struct RateUse {
    /// Bytes moved in all.
    moved: f64,
    /// The limit, bytes per second.
    rate: f64,
    /// The bucket's capacity: bytes that may move beyond rate x span.
    capacity: f64,
    /// The worst span: most bytes moved beyond rate x span.
    worst: f64,
    /// Page moves the limit held back.
    held: f64,
}

impl RateUse {
    fn of(reports: &[Value]) -> Result<Self, String> {
        // (t_s, cumulative bytes moved), starting from nothing at 0.
        let mut points = vec![(0.0, 0.0)];
        let (mut rate, mut capacity, mut held) = (0.0, 0.0, 0.0);
        for l in reports.iter().filter(|l| l["status"] == "running") {
            let t = f(l, "t_s")?;
            rate = f(l, "rate_limit_bytes_per_s")?;
            capacity = f(l, "rate_limit_bound_bytes")? - rate * t;
            held += l["interval"]["held_by_rate"].as_f64().unwrap_or(0.0);
            points.push((
                t,
                l["total"]["migrated_bytes"]
                    .as_f64()
                    .ok_or("no total.migrated_bytes")?,
            ));
        }
        if points.len() < 2 {
            return Err("no running report".into());
        }
        let mut worst = f64::MIN;
        for (i, a) in points.iter().enumerate() {
            for b in &points[i + 1..] {
                worst = worst.max((b.1 - a.1) - rate * (b.0 - a.0));
            }
        }
        let moved = points.last().map_or(0.0, |p| p.1);
        Ok(Self {
            moved,
            rate,
            capacity,
            worst,
            held,
        })
    }

    /// No span moved more than rate x span plus the bucket's capacity.
    fn within(&self) -> bool {
        self.worst <= self.capacity + 1.0
    }
}

impl std::fmt::Display for RateUse {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            out,
            "{} bytes moved at {} B/s, worst span {:.0} bytes beyond rate x span (bucket {:.0}), {} page moves held back",
            self.moved, self.rate, self.worst, self.capacity, self.held
        )
    }
}

/// All tierd checks.
pub fn checks(report: &mut Report) {
    // What must always hold: tierd brings a hot set to node0 while it is hot. How fast it gets
    // there is an emulator timing that moves with the host's load (TCG shares two cores with
    // everything else), so it is reported for each window, not judged.
    record(report, "tierd-hot-set-reaches-node0", |r| {
        let times = one(r, "tierd-times")?;
        let start = f(&times, "tierd_start")? - f(&times, "workload_start")?;
        let end = f(&times, "tierd_end")? - f(&times, "workload_start")?;
        let hot = lines(r, "tierd-hot")?;
        let mut reached = 0;
        let mut seen = Vec::new();
        // Every window that became hot while tierd ran, judged over the reports of its hot
        // period (until the next shift or tierd's end).
        let mut window = 1.0;
        while window * SHIFT_S < end {
            let since = window * SHIFT_S;
            if since >= start {
                let of: Vec<&Value> = hot
                    .iter()
                    .filter(|l| l["window"].as_f64() == Some(window))
                    .collect();
                let first = of.iter().find(|l| hot_on_node0(l).is_ok_and(|s| s >= 0.9));
                let peak = of
                    .iter()
                    .filter_map(|l| hot_on_node0(l).ok())
                    .fold(0.0, f64::max);
                match first {
                    Some(l) => {
                        reached += 1;
                        seen.push(format!(
                            "window {window}: >= 90% on node0 {:.1} s after the shift",
                            f(l, "t_s")? - since
                        ));
                    }
                    None => seen.push(format!(
                        "window {window}: at most {:.0}% on node0 ({} reports)",
                        peak * 100.0,
                        of.len()
                    )),
                }
            }
            window += 1.0;
        }
        let detail = format!(
            "{reached} of {} windows reached 90% on node0 while hot (tierd ran {start:.1}..{end:.1} s; emulator times, not judged): {}",
            seen.len(),
            seen.join("; ")
        );
        if reached > 0 {
            Ok(detail)
        } else {
            Err(detail)
        }
    });

    record(report, "tierd-within-rate-limit", |r| {
        // The main run shows the limit kept while tierd chases a hot set; it may never ask for
        // more than the bucket holds. The rate run owes more than the limit can pay, so it also
        // shows that the limit holds moves back.
        let main = RateUse::of(&lines(r, "tierd-json")?)?;
        let rated = RateUse::of(&lines(r, "tierd-rate-json")?)?;
        let detail = format!("main run: {main}; rate run: {rated}");
        if main.within() && rated.within() && rated.moved > 0.0 && rated.held > 0.0 {
            Ok(detail)
        } else {
            Err(detail)
        }
    });

    record(report, "tierd-keeps-dram-budget", |r| {
        let reports = lines(r, "tierd-json")?;
        let last = reports
            .iter()
            .rfind(|l| l["status"] == "running")
            .ok_or("no running report")?;
        let fast = f(last, "fast_bytes")?;
        let detail = format!("last report: {fast} bytes on the fast tier, budget {BUDGET}");
        if fast <= BUDGET as f64 {
            Ok(detail)
        } else {
            Err(detail)
        }
    });

    record(report, "tierd-untargeted-untouched", |r| {
        let before = one(r, "tierd-other-before")?;
        let after = one(r, "tierd-other-after")?;
        let b = mapping_on(&before, 2 << 20, "1")?;
        let a = mapping_on(&after, 2 << 20, "1")?;
        let a0 = mapping_on(&after, 2 << 20, "0")?;
        let detail =
            format!("its 2 MiB on node1: {b} bytes before, {a} after, {a0} on node0 after");
        if b == 2 << 20 && a == b && a0 == 0 {
            Ok(detail)
        } else {
            Err(detail)
        }
    });

    record(report, "tierd-show-reflects-moves", |r| {
        let show = one(r, "tierd-hot-show")?;
        let on0 = mapping_on(&show, FOOTPRINT, "0")?;
        let on1 = mapping_on(&show, FOOTPRINT, "1")?;
        let detail = format!(
            "show --pid: the 8 MiB mapping has {on0} bytes on node0, {on1} on node1 (started 50/50 interleaved; budget {BUDGET})"
        );
        if on0 <= BUDGET && on0 + on1 == FOOTPRINT {
            Ok(detail)
        } else {
            Err(detail)
        }
    });

    record(report, "tierd-soft-dirty-sees-writes", |r| {
        let reports = lines(r, "tierd-json")?;
        let most = reports
            .iter()
            .filter_map(|l| l["nodes"].as_object())
            .map(|nodes| {
                nodes
                    .values()
                    .filter_map(|n| n["written_bytes"].as_u64())
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        let detail =
            format!("most bytes seen written in one interval: {most} (the hot window is 1 MiB)");
        if most > 0 && most <= FOOTPRINT {
            Ok(detail)
        } else {
            Err(detail)
        }
    });

    record(report, "tierd-workload-intact", |r| {
        let hot = lines(r, "tierd-hot")?;
        let done = hot
            .iter()
            .find(|l| l["done"] == true)
            .ok_or("the workload printed no final line")?;
        if done["intact"] == true {
            Ok(format!("{} pages, all intact", done["pages"]))
        } else {
            Err(format!("corrupt: {}", brief(done)))
        }
    });
}

/// The tuner's check (both topologies): what must always hold, whatever the host's load. The tuner
/// converges on a split it measured itself and reports that split's measured throughput; the
/// sweep measures every split it is asked for (`--splits 0,30,60,100`), no other, and names the
/// one it measured fastest. Whether the tuned split is as fast as the sweep's best is a comparison of two noisy
/// emulator measurements: that is `bench/tierd-tuner-vs-sweep`'s question, not the CI gate's.
pub fn tune_checks(report: &mut Report) {
    record(report, "tierd-tuner-converges-on-a-measured-split", |r| {
        let tuned = lines(r, "tierd-tune")?
            .into_iter()
            .find(|l| l["event"] == "tuned")
            .ok_or("the tuner printed no 'tuned' line")?;
        let split = tuned["fast_percent"]
            .as_u64()
            .ok_or("no fast_percent in the tuned line")?;
        let measured = tuned["measured"]
            .as_object()
            .ok_or("no measured points in the tuned line")?;
        let at_split = measured.get(&split.to_string()).and_then(Value::as_f64);
        let detail = format!(
            "tuned to {split}% on the fast tier (from {}%), {} splits measured: {}",
            tuned["start_fast_percent"],
            measured.len(),
            measured
                .iter()
                .map(|(k, v)| format!("{k}% {:.0}/s", v.as_f64().unwrap_or(f64::NAN)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let reported = f(&tuned, "throughput_per_s")?;
        match at_split {
            Some(rate) if split <= 100 && split % 10 == 0 && rate == reported => Ok(detail),
            Some(rate) => Err(format!(
                "{detail}; reported {reported:.0}/s for a split measured at {rate:.0}/s"
            )),
            None => Err(format!("{detail}; the tuned split was never measured")),
        }
    });
    record(
        report,
        "tierd-sweep-measures-every-split-and-names-the-fastest",
        |r| {
            let swept = lines(r, "tierd-sweep")?
                .into_iter()
                .find(|l| l["event"] == "swept")
                .ok_or("the sweep printed no 'swept' line")?;
            let best = swept["fast_percent"]
                .as_u64()
                .ok_or("no fast_percent in the swept line")?;
            let points = swept["measured"]
                .as_object()
                .ok_or("no measured points in the sweep")?;
            let mut keys: Vec<u64> = points.keys().filter_map(|k| k.parse().ok()).collect();
            keys.sort_unstable();
            // The splits lab/checks/tierd.sh asks for (--splits 0,30,60,100): each measured,
            // none other.
            let want: Vec<u64> = vec![0, 30, 60, 100];
            let fastest = points
                .values()
                .filter_map(Value::as_f64)
                .max_by(f64::total_cmp);
            let at_best = points.get(&best.to_string()).and_then(Value::as_f64);
            let detail = format!(
                "best {best}% at {at_best:?}/s; splits measured {keys:?}; fastest {fastest:?}/s"
            );
            // Equal rates are equally the fastest.
            if keys == want && at_best.is_some() && at_best == fastest {
                Ok(detail)
            } else {
                Err(detail)
            }
        },
    );
}

/// The weights for a launched target's new allocations (topology `cxl`, lab/checks/tierd.sh
/// check_tierd_weights): while tierd runs after tuning, the kernel's table holds the tuned ratio,
/// and a buffer the target allocates then lands in that ratio.
pub fn weights_checks(report: &mut Report) {
    let tuned = |r: &Report| -> Result<(Value, u64, u64), String> {
        let tuned = lines(r, "tierd-wi")?
            .into_iter()
            .find(|l| l["event"] == "tuned")
            .ok_or("tierd printed no 'tuned' line")?;
        let w = tuned["weights"]
            .as_array()
            .and_then(|w| Some((w.first()?.as_u64()?, w.get(1)?.as_u64()?)))
            .ok_or_else(|| format!("no weights in the tuned line: {}", brief(&tuned)))?;
        Ok((tuned, w.0, w.1))
    };
    record(report, "tierd-weights-follow-tuned-split", |r| {
        let (line, wf, ws) = tuned(r)?;
        let table = one(r, "tierd-wi-table")?;
        let during = table["during"].as_str().unwrap_or("").trim().to_string();
        let percent = f(&line, "fast_percent")?;
        let ratio = wf as f64 / (wf + ws) as f64 * 100.0;
        let want = format!("node0={wf} node1={ws}");
        let detail = format!(
            "tuned to {percent}% on node0; weights {wf}:{ws} ({ratio:.1}%); the kernel's table while tierd ran: {during}"
        );
        if during == want && (ratio - percent).abs() <= 0.5 {
            Ok(detail)
        } else {
            Err(detail)
        }
    });
    record(report, "tierd-new-pages-follow-weights", |r| {
        let (_, wf, ws) = tuned(r)?;
        let fresh = lines(r, "tierd-wi")?
            .into_iter()
            .find(|l| l["event"] == "fresh_buffer")
            .ok_or("the target printed no fresh_buffer line")?;
        let pages = f(&fresh, "pages")?;
        let on0 = fresh["pages_per_node"]["0"].as_f64().unwrap_or(0.0);
        let on1 = fresh["pages_per_node"]["1"].as_f64().unwrap_or(0.0);
        let want = wf as f64 / (wf + ws) as f64;
        let detail = format!(
            "fresh buffer after tuning: {on0} of {pages} pages on node0, {on1} on node1 ({:.1}%); weights {wf}:{ws} give {:.1}%",
            on0 / pages * 100.0,
            want * 100.0
        );
        if pages > 0.0 && on0 + on1 == pages && (on0 / pages - want).abs() <= 0.02 {
            Ok(detail)
        } else {
            Err(detail)
        }
    });
}
