//! `cxltier serve`'s limits as a process: more connections than descriptors (the CLI fits
//! `--max-clients` to the open-file limit), and start-up failures that must say the right
//! thing. (The server's own defences against hostile and careless clients are the server
//! crate's tests.)
//!
//! Every test asserts behaviour and bounds on bytes or counts; waits have generous limits that
//! only guard against a hang.

mod common;
use common::{info_number, Reply, ServerChild, GUARD};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_cxltier");

/// With a low open-file limit, --max-clients is lowered to fit and says so; the connections
/// past it get Redis's error at once instead of hanging in the backlog, and the server keeps
/// serving.
#[test]
fn max_clients_fit_the_open_file_limit() {
    // Through a shell that lowers the limit first.
    let s = ServerChild::try_start_logged("cxltier serve", None, |port| {
        let serve = common::cxltier_serve(BIN, port, &["--max-clients", "1000"]);
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("ulimit -n 64; exec \"$0\" \"$@\"")
            .arg(serve.get_program())
            .args(serve.get_args());
        c
    })
    .unwrap();
    let mut c = s.client();
    assert_eq!(
        c.call(&["CONFIG", "GET", "maxclients"]),
        Reply::Array(vec![
            Reply::Bulk(b"maxclients".to_vec()),
            Reply::Bulk(b"32".to_vec()),
        ])
    );
    // Wait until this is the only client (the start-up check's may not be gone yet).
    let t = Instant::now();
    while info_number(&mut c, "clients", "connected_clients") != 1 {
        assert!(t.elapsed() < GUARD);
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut served = Vec::new();
    let mut refused = 0;
    for _ in 0..40 {
        let mut raw = TcpStream::connect(&s.addr).unwrap();
        raw.set_read_timeout(Some(GUARD)).unwrap();
        raw.write_all(b"PING\r\n").unwrap();
        let mut r = BufReader::new(raw.try_clone().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        match line.as_str() {
            "+PONG\r\n" => served.push(raw),
            l if l.starts_with("-ERR max number of clients reached") => refused += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((served.len(), refused), (31, 9));
    assert_eq!(info_number(&mut c, "stats", "rejected_connections"), 9);
    // One leaves: a newcomer is served.
    served.pop();
    let t = Instant::now();
    while info_number(&mut c, "clients", "connected_clients") != 31 {
        assert!(t.elapsed() < GUARD);
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut last = s.client();
    assert_eq!(last.call(&["PING"]), Reply::Simple("PONG".into()));
    drop((served, last, c));
    let (_, err) = s.stop();
    assert!(err.contains("maxclients reduced to 32"), "{err}");
}

fn serve(args: &[&str]) -> std::process::Output {
    Command::new(BIN).arg("serve").args(args).output().unwrap()
}

/// A port in use is a runtime failure (exit 1) with the hint, and nothing claims to listen.
#[test]
fn a_port_in_use_exits_1_with_the_hint_and_no_listening_line() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let out = serve(&["--bind", &addr]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("in use") && err.contains("--bind 127.0.0.1:PORT"),
        "{err}"
    );
    assert!(!err.contains("listening on"), "{err}");
    // IPv6: the address and the example are written with brackets.
    if let Ok(busy6) = TcpListener::bind("[::1]:0") {
        let addr = busy6.local_addr().unwrap().to_string();
        let out = serve(&["--bind", &addr]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("cannot listen on {addr}")) && err.contains("--bind [::1]:PORT"),
            "{err}"
        );
    }
    let out = serve(&["--bind", "::1:6379"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--bind [::1]:6379"));
    let out = serve(&["--client-output-buffer-limit", "1mb 2mb 0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at most the hard limit"));
}
