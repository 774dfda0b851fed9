//! What the socket tests share: finding out whether the process answering on a port is the
//! server a test has just started.
//!
//! A port picked free can be taken before the child binds it: by another test's server, or
//! for a moment by a listener that is already closed in this process but still open in a child
//! that a parallel test forked and has not yet exec'd. A connection to that second one is
//! accepted by the kernel and then reset. So a test trusts a port only once `INFO server`
//! answers there with its own child's `process_id`, and treats a refused, reset or closed
//! connection as "not up yet".

// Each test binary uses the part it needs.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// A port that was free a moment ago (see the module's note on why that is not enough).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Who answered `INFO server` on a port.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// The child with the pid asked about.
    Ours,
    /// Another server: the child lost the port (it exits) and must start on another.
    Other,
    /// Nothing yet: refused, reset, closed or silent. Ask again.
    Nothing,
}

/// Ask whatever listens on `addr` for `INFO server` (after `AUTH password` when given) and
/// compare its `process_id` with `pid`. Waits for the reply at most `patience` (a server
/// listens before it has opened its store, and answers once it has).
pub fn who_answers(addr: &str, password: Option<&str>, pid: u32, patience: Duration) -> Answer {
    let mut request = Vec::new();
    if let Some(pw) = password {
        request
            .extend_from_slice(format!("*2\r\n$4\r\nAUTH\r\n${}\r\n{pw}\r\n", pw.len()).as_bytes());
    }
    request.extend_from_slice(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n");
    answer_of(addr, &request, "process_id:", pid, patience)
}

/// [`who_answers`] for memcached: its `stats` reply's `STAT pid` line.
pub fn memcached_answers(addr: &str, pid: u32, patience: Duration) -> Answer {
    answer_of(addr, b"stats\r\n", "STAT pid ", pid, patience)
}

/// Send `request` and compare the number after `field` in the reply with `pid`.
fn answer_of(addr: &str, request: &[u8], field: &str, pid: u32, patience: Duration) -> Answer {
    match reply_through(addr, request, field.as_bytes(), patience) {
        None => Answer::Nothing,
        Some(text) if text.contains(&format!("{field}{pid}\r\n")) => Answer::Ours,
        Some(_) => Answer::Other,
    }
}

/// The reply to `request` up to the end of the line holding `field`, or `None` when the
/// connection is refused, reset, closed or times out first.
fn reply_through(addr: &str, request: &[u8], field: &[u8], patience: Duration) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(patience)).ok()?;
    // write_all goes on after a partial write and retries on EINTR.
    s.write_all(request).ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(at) = got.windows(field.len()).position(|w| w == field) {
            if got[at..].windows(2).any(|w| w == b"\r\n") {
                // The rest of the reply is not needed: the connection closes here.
                return Some(String::from_utf8_lossy(&got).into_owned());
            }
        }
        match s.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        // A reply without the field (an error, a server that is not Redis-like) ends with
        // its line: more than a few kilobytes without it is not the reply looked for.
        if got.len() > 64 * 1024 {
            return Some(String::from_utf8_lossy(&got).into_owned());
        }
    }
}
