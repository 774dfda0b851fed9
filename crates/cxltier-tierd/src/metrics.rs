//! Prometheus text for the latest reports, and a small HTTP listener that serves it.
//!
//! The listener answers every request on its socket with the current text (`GET /metrics` is what
//! Prometheus sends); it runs on its own thread for as long as the process lives.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::engine::{NodeStats, Status, TargetReport};
use crate::TierdError;

/// The text every scrape returns; update it after each interval.
pub type Shared = Arc<Mutex<String>>;

/// A metric's name, its help text, and how to read it from a node's figures.
type NodeMetric = (&'static str, &'static str, fn(&NodeStats) -> u64);
/// ... from a target's report.
type TargetMetric = (&'static str, &'static str, fn(&TargetReport) -> u64);

/// Render the reports (the latest one per target) in Prometheus' text format 0.0.4.
pub fn prometheus(reports: &[TargetReport]) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: &mut dyn FnMut(&mut String)| {
        let _ = writeln!(out, "# HELP cxltier_tierd_{name} {help}");
        let _ = writeln!(out, "# TYPE cxltier_tierd_{name} {kind}");
        samples(&mut out);
    };
    family(
        "target_running",
        "gauge",
        "1 while the target runs, 0 once it exited or left the cgroup.",
        &mut |o| {
            for r in reports {
                let _ = writeln!(
                    o,
                    "cxltier_tierd_target_running{{pid=\"{}\"}} {}",
                    r.pid,
                    u8::from(r.status == Status::Running)
                );
            }
        },
    );
    let per_node: [NodeMetric; 5] = [
        (
            "resident_bytes",
            "Resident private anonymous bytes of the target on the node.",
            |n| n.resident_bytes,
        ),
        ("hot_bytes", "Bytes the policy counts as hot.", |n| {
            n.hot_bytes
        }),
        ("warm_bytes", "Bytes neither hot nor cold.", |n| {
            n.warm_bytes
        }),
        ("cold_bytes", "Bytes the policy counts as cold.", |n| {
            n.cold_bytes
        }),
        ("moved_in_pages", "Pages moved onto the node so far.", |n| {
            n.moved_in_pages
        }),
    ];
    for (name, help, get) in per_node {
        family(name, "gauge", help, &mut |o| {
            for r in reports {
                for (node, n) in &r.nodes {
                    let _ = writeln!(
                        o,
                        "cxltier_tierd_{name}{{pid=\"{}\",node=\"{node}\",tier=\"{}\"}} {}",
                        r.pid,
                        n.tier,
                        get(n)
                    );
                }
            }
        });
    }
    family("access_bytes", "gauge", "Bytes by access frequency: the percentage of the access source's samples that saw the page accessed (DAMON: its region; idle-page: its last intervals), in buckets of 10.", &mut |o| {
        for r in reports {
            for (node, n) in &r.nodes {
                for (i, b) in n.access_histogram_bytes.iter().enumerate() {
                    let _ = writeln!(o, "cxltier_tierd_access_bytes{{pid=\"{}\",node=\"{node}\",access_percent=\"{}-{}\"}} {b}", r.pid, i * 10, i * 10 + 10);
                }
            }
        }
    });
    let totals: [TargetMetric; 4] = [
        (
            "promoted_pages_total",
            "Pages moved to the fast tier.",
            |r| r.total.promoted_pages,
        ),
        (
            "demoted_pages_total",
            "Pages moved off the fast tier.",
            |r| r.total.demoted_pages,
        ),
        ("migrated_bytes_total", "Bytes moved.", |r| {
            r.total.migrated_bytes
        }),
        (
            "failed_pages_total",
            "Moves the kernel did not make (tried again later).",
            |r| r.total.failed_pages,
        ),
    ];
    for (name, help, get) in totals {
        family(name, "counter", help, &mut |o| {
            for r in reports {
                let _ = writeln!(o, "cxltier_tierd_{name}{{pid=\"{}\"}} {}", r.pid, get(r));
            }
        });
    }
    family(
        "failures_total",
        "counter",
        "Failed moves by the kernel's per-page error.",
        &mut |o| {
            for r in reports {
                for (why, n) in &r.total.failures {
                    let _ = writeln!(
                        o,
                        "cxltier_tierd_failures_total{{pid=\"{}\",error=\"{why}\"}} {n}",
                        r.pid
                    );
                }
            }
        },
    );
    out
}

/// Whether an address is loopback (tierd binds there unless told otherwise).
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// Listen on `addr` and serve `shared` to every connection, on a background thread. Returns the
/// bound address (port 0 picks a free port).
pub fn serve(addr: &str, shared: Shared) -> Result<SocketAddr, TierdError> {
    let listener = TcpListener::bind(addr).map_err(|source| TierdError::Listen {
        addr: addr.to_string(),
        source,
    })?;
    let local = listener.local_addr().map_err(|source| TierdError::Listen {
        addr: addr.to_string(),
        source,
    })?;
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            // Read the request head; its content does not matter.
            let mut buf = [0u8; 2048];
            let _ = stream.read(&mut buf);
            let body = shared.lock().map(|s| s.clone()).unwrap_or_default();
            let _ = write!(
                stream,
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{IntervalStats, NodeStats, Totals};
    use std::collections::BTreeMap;

    fn report() -> TargetReport {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            0,
            NodeStats {
                tier: "fast",
                resident_bytes: 8192,
                hot_bytes: 4096,
                ..Default::default()
            },
        );
        let mut total = Totals {
            promoted_pages: 3,
            migrated_bytes: 12288,
            ..Default::default()
        };
        total.failures.insert("EBUSY".into(), 2);
        TargetReport {
            t_s: 1.0,
            pid: 42,
            status: Status::Running,
            source: "damon",
            dry_run: false,
            regions: 10,
            page_size: 4096,
            dram_budget_bytes: None,
            fast_bytes: 8192,
            nodes,
            interval: IntervalStats::default(),
            total,
            retry_pending: 0,
            rate_limit_bytes_per_s: 1e6,
            rate_limit_bound_bytes: 2e6,
        }
    }

    #[test]
    fn text_has_help_type_and_labelled_samples() {
        let text = prometheus(&[report()]);
        assert!(text.contains("# TYPE cxltier_tierd_resident_bytes gauge"));
        assert!(
            text.contains("cxltier_tierd_resident_bytes{pid=\"42\",node=\"0\",tier=\"fast\"} 8192")
        );
        assert!(text.contains("cxltier_tierd_promoted_pages_total{pid=\"42\"} 3"));
        assert!(text.contains("cxltier_tierd_failures_total{pid=\"42\",error=\"EBUSY\"} 2"));
        assert!(text.contains("cxltier_tierd_target_running{pid=\"42\"} 1"));
    }

    #[test]
    fn the_listener_serves_the_current_text_on_loopback() {
        let shared: Shared = Arc::new(Mutex::new("first\n".into()));
        let addr = serve("127.0.0.1:0", shared.clone()).unwrap();
        assert!(is_loopback(&addr));
        let get = || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        assert!(get().ends_with("\r\n\r\nfirst\n"));
        *shared.lock().unwrap() = "second\n".into();
        let second = get();
        assert!(second.starts_with("HTTP/1.0 200 OK"), "{second}");
        assert!(second.ends_with("second\n"));
        assert!(serve("127.0.0.1:0", shared).is_ok());
        assert!(matches!(
            serve("256.0.0.1:1", Arc::default()),
            Err(TierdError::Listen { .. })
        ));
    }
}
