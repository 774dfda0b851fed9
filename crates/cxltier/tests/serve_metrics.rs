//! `cxltier serve --metrics-addr`: the Prometheus exposition scraped over HTTP from a real
//! server with an NVMe tier, its figures checked against what the test did, and
//! `promtool check metrics` run on it (a failure when promtool finds a problem; without
//! promtool a loud warning, or a failure under CXLTIER_REQUIRE_PROMTOOL=1).

mod common;
mod util;
use common::{free_port, ServerChild, GUARD};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use cxltier_resp::{Client, Reply};

const BIN: &str = env!("CARGO_BIN_EXE_cxltier");

/// A server child with its metrics address, killed when the test ends.
struct Server {
    server: ServerChild,
    metrics: String,
    _dir: tempfile::TempDir,
}

impl Server {
    /// `cxltier serve ARGS` with metrics on a port of their own (both ports again if either
    /// was taken meanwhile), run in a directory of its own.
    fn start(args: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let metrics = std::cell::RefCell::new(String::new());
        let server = ServerChild::start("cxltier serve", None, |port| {
            let addr = format!("127.0.0.1:{}", free_port());
            let mut c = common::cxltier_serve(BIN, port, args);
            c.args(["--metrics-addr", &addr]).current_dir(dir.path());
            *metrics.borrow_mut() = addr;
            c
        });
        Server {
            server,
            metrics: metrics.into_inner(),
            _dir: dir,
        }
    }
}

/// `METHOD PATH` over HTTP/1.1: the status line and the body.
fn http(addr: &str, method: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(GUARD)).unwrap();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("a whole response");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// A sample's value: the line that starts with `series ` (name and labels as written).
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

/// Scrape until `ready` holds of the text (the loop publishes about once a second).
fn scrape_until(s: &Server, ready: impl Fn(&str) -> bool) -> String {
    let t = Instant::now();
    loop {
        let (status, body) = http(&s.metrics, "GET", "/metrics");
        assert_eq!(status, "HTTP/1.0 200 OK");
        if ready(&body) {
            return body;
        }
        assert!(t.elapsed() < GUARD, "the metrics never got there:\n{body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_exposition_counts_what_clients_did_and_passes_promtool() {
    let s = Server::start(&[
        "--dram",
        "8M",
        "--ssd",
        "store.log:64M",
        "--durability",
        "always",
    ]);
    let mut c = Client::connect(&s.server.addr).unwrap();
    let value_bytes = vec![b'v'; 1000];
    for i in 0..200 {
        let key = format!("key:{i}");
        assert_eq!(
            c.call(&[b"SET", key.as_bytes(), &value_bytes]).unwrap(),
            Reply::Simple("OK".into())
        );
    }
    for i in 0..50 {
        let key = format!("key:{i}");
        assert!(matches!(
            c.call(&[b"GET", key.as_bytes()]).unwrap(),
            Reply::Bulk(_)
        ));
    }
    assert_eq!(c.call(&[b"GET", b"absent"]).unwrap(), Reply::NullBulk);
    // Twice the DRAM budget in big values: the first ones go down to NVMe, and reading one
    // back reads the device.
    let big = vec![b'b'; 512 << 10];
    for i in 0..32 {
        let key = format!("big:{i}");
        assert_eq!(
            c.call(&[b"SET", key.as_bytes(), &big]).unwrap(),
            Reply::Simple("OK".into())
        );
    }
    assert_eq!(c.call(&[b"GET", b"big:0"]).unwrap(), Reply::Bulk(big));
    // An error reply counts as a failed call.
    assert!(matches!(
        c.call(&[b"INCR", b"key:0"]).unwrap(),
        Reply::Error(_)
    ));
    let text = scrape_until(&s, |t| {
        t.contains("cxltier_serve_commands_total{cmd=\"incr\"} 1")
    });
    assert_eq!(
        value(&text, "cxltier_serve_commands_total{cmd=\"set\"}"),
        232.0
    );
    assert_eq!(
        value(&text, "cxltier_serve_commands_total{cmd=\"get\"}"),
        52.0
    );
    assert_eq!(
        value(&text, "cxltier_serve_commands_failed_total{cmd=\"incr\"}"),
        1.0
    );
    assert_eq!(value(&text, "cxltier_serve_keyspace_hits_total"), 51.0);
    assert_eq!(value(&text, "cxltier_serve_keyspace_misses_total"), 1.0);
    assert_eq!(value(&text, "cxltier_serve_keys"), 232.0);
    assert_eq!(value(&text, "cxltier_serve_connected_clients"), 1.0);
    assert!(value(&text, "cxltier_serve_command_duration_seconds_count") >= 285.0);
    assert_eq!(
        value(
            &text,
            "cxltier_serve_command_duration_seconds_bucket{le=\"+Inf\"}"
        ),
        value(&text, "cxltier_serve_command_duration_seconds_count")
    );
    // Every object is in exactly one place: the tiers' objects add up to the keys.
    let objects: f64 = ["dram", "cxl", "nvme"]
        .iter()
        .filter(|t| text.contains(&format!("cxltier_serve_tier_objects{{tier=\"{t}\"}}")))
        .map(|t| {
            value(
                &text,
                &format!("cxltier_serve_tier_objects{{tier=\"{t}\"}}"),
            )
        })
        .sum();
    assert_eq!(objects, 232.0, "{text}");
    assert!(value(&text, "cxltier_serve_tier_objects{tier=\"nvme\"}") >= 1.0);
    // Slots hold key, value and header: at least the values' bytes of what DRAM holds.
    assert!(
        value(&text, "cxltier_serve_tier_used_bytes{tier=\"dram\"}")
            >= value(&text, "cxltier_serve_tier_objects{tier=\"dram\"}") * 1000.0
    );
    // Every write went to the log (durability always): its live records hold every value.
    assert!(value(&text, "cxltier_serve_nvme_live_bytes") >= (200 * 1000 + (32 << 19)) as f64);
    assert!(
        value(&text, "cxltier_serve_nvme_reads_total") >= 1.0,
        "{text}"
    );
    assert!(value(&text, "cxltier_serve_nvme_read_bytes_total") >= (512 << 10) as f64);
    assert!(
        value(
            &text,
            "cxltier_serve_nvme_read_latency_seconds{percentile=\"100\"}"
        ) > 0.0
    );
    // --durability always: every write reached the device before its reply.
    assert!(value(&text, "cxltier_serve_nvme_written_bytes_total") >= 200.0 * 1000.0);
    assert!(value(&text, "cxltier_serve_nvme_writes_total") >= 1.0);
    assert!(
        value(&text, "cxltier_serve_used_memory_bytes")
            <= value(&text, "cxltier_serve_maxmemory_bytes")
    );
    assert!(text.contains("cxltier_serve_config_info{durability=\"always\","));
    assert!(text.contains(&format!(
        "cxltier_build_info{{version=\"{}\"",
        env!("CARGO_PKG_VERSION")
    )));
    cxltier_metrics::promtool::assert_clean("serve's exposition", &text);
    // The dashboard in docs/ asks for names the server has.
    let dashboard = include_str!("../../../docs/grafana-cxltier.json");
    for name in metric_names(dashboard, "cxltier_serve_") {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(&name);
        assert!(
            text.contains(&format!("# TYPE {family} ")),
            "docs/grafana-cxltier.json asks for {name}, which serve does not have"
        );
    }

    // CONFIG RESETSTAT zeroes the counters, the histogram with them.
    assert_eq!(
        c.call(&[b"CONFIG", b"RESETSTAT"]).unwrap(),
        Reply::Simple("OK".into())
    );
    let text = scrape_until(&s, |t| !t.contains("{cmd=\"set\"}"));
    assert!(value(&text, "cxltier_serve_command_duration_seconds_count") <= 1.0);
    assert_eq!(value(&text, "cxltier_serve_keyspace_hits_total"), 0.0);
}

/// The distinct `prefix...` metric names in `text`.
fn metric_names(text: &str, prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .match_indices(prefix)
        .map(|(i, _)| {
            text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn only_metrics_is_served_and_a_bad_address_is_refused() {
    let s = Server::start(&[]);
    let (status, body) = http(&s.metrics, "GET", "/");
    assert_eq!(status, "HTTP/1.0 404 Not Found");
    assert!(body.contains("/metrics"), "{body}");
    let (status, body) = http(&s.metrics, "HEAD", "/metrics");
    assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.0 200 OK", ""));
    let (status, _) = http(&s.metrics, "DELETE", "/metrics");
    assert_eq!(status, "HTTP/1.0 405 Method Not Allowed");

    let serve = |metrics| ["serve", "--bind", "127.0.0.1:0", "--metrics-addr", metrics];
    util::fails(
        &serve("localhost"),
        2,
        "--metrics-addr localhost: expected ADDRESS:PORT",
    );
    // The metrics port taken (by the running server's): refused before the store opens.
    util::fails(
        &serve(&s.metrics),
        2,
        &format!("cannot listen for metrics on {}", s.metrics),
    );
}
