//! Prometheus text for the latest reports, and a small HTTP listener that serves it.
//!
//! The listener answers every request on its socket with the current text (`GET /metrics` is what
//! Prometheus sends); it runs on its own thread for as long as the process lives.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::engine::{IntervalReport, NodeStats, Status};
use crate::TierdError;

/// The text every scrape returns; update it after each interval.
pub type Shared = Arc<Mutex<String>>;

/// A metric's name, its help text, and how to read it from a node's figures.
type NodeMetric = (&'static str, &'static str, fn(&NodeStats) -> u64);
/// ... from a target's report.
type TargetMetric = (&'static str, &'static str, fn(&IntervalReport) -> u64);

/// Render the reports (the latest one per target) in Prometheus' text format 0.0.4.
pub fn prometheus(reports: &[IntervalReport]) -> String {
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
        // `incoming` yields accept's errors (EINTR, a connection reset before it was accepted,
        // descriptors running out) one by one; each is skipped and the listener goes on.
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            let body = shared.lock().map(|s| s.clone()).unwrap_or_default();
            let _ = answer(&mut stream, &body);
        }
    });
    Ok(local)
}

/// The most of a request head read before answering; the head's content does not matter.
const MAX_HEAD: usize = 8192;

/// Reads the request head (up to the blank line that ends it, EOF, or [`MAX_HEAD`] bytes), then
/// writes the response. The head may come in several pieces and a read may be interrupted
/// (EINTR): both are read on. Answering after the first piece and closing with the rest unread
/// makes the kernel reset the connection, and the client may lose the response.
fn answer(stream: &mut (impl Read + Write), body: &str) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n")
        && !head.windows(2).any(|w| w == b"\n\n")
        && head.len() < MAX_HEAD
    {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    // write_all retries on EINTR and goes on after a short write.
    stream.write_all(
        format!(
            "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{IntervalStats, NodeStats, Totals};
    use std::collections::BTreeMap;

    fn report() -> IntervalReport {
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
        IntervalReport {
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

    /// A client whose request head arrives in pieces, with reads interrupted in between: the
    /// answer comes only after the whole head was read. (A stream that yields EINTR on demand:
    /// a real socket cannot be made to, deterministically.)
    struct Trickle {
        input: Vec<Vec<u8>>,
        interrupt_next: bool,
        written: Vec<u8>,
        answered_with_unread_input: bool,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if std::mem::replace(&mut self.interrupt_next, false) {
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            self.interrupt_next = true;
            if self.input.is_empty() {
                return Ok(0);
            }
            let piece = self.input.remove(0);
            buf[..piece.len()].copy_from_slice(&piece);
            Ok(piece.len())
        }
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if !self.input.is_empty() {
                self.answered_with_unread_input = true;
            }
            // Short writes: at most 7 bytes at a time.
            let n = buf.len().min(7);
            self.written.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_answer_waits_for_the_whole_head_through_eintr_and_short_io() {
        let mut t = Trickle {
            input: vec![
                b"GET /metrics HTTP/1.0\r\n".to_vec(),
                b"Host: x\r\n".to_vec(),
                b"\r\n".to_vec(),
            ],
            interrupt_next: true,
            written: Vec::new(),
            answered_with_unread_input: false,
        };
        answer(&mut t, "body\n").unwrap();
        assert!(t.input.is_empty(), "the head was not read to its end");
        assert!(!t.answered_with_unread_input);
        let text = String::from_utf8(t.written).unwrap();
        assert!(text.starts_with("HTTP/1.0 200 OK\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nbody\n"), "{text}");
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
