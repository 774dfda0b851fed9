//! The latest exposition, and a small HTTP listener that serves it.
//!
//! The listener runs on its own thread and handles one connection at a time: it reads the
//! request head (bounded, through partial reads and EINTR, with a timeout so a silent client
//! cannot hold it), answers `GET`/`HEAD /metrics` with the published text, 404 for other paths,
//! 405 for other methods and 431 for a head over [`MAX_HEAD`] bytes, and closes. Publishing
//! swaps a reference under a lock held for no more than that, so the owner's loop never waits
//! for a scrape.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cxltier_error::{Class, Classify};

/// The text every scrape returns: its owner replaces it whole with [`Published::publish`].
/// Clones share it.
#[derive(Debug, Clone, Default)]
pub struct Published {
    text: Arc<Mutex<Arc<str>>>,
}

impl Published {
    pub fn new() -> Published {
        Published::default()
    }

    /// Make `text` what the next scrape returns.
    pub fn publish(&self, text: String) {
        let text: Arc<str> = text.into();
        // A panic elsewhere while holding the lock leaves a whole `Arc` behind: still usable.
        *self.text.lock().unwrap_or_else(|e| e.into_inner()) = text;
    }

    /// The text published last (empty before the first).
    pub fn text(&self) -> Arc<str> {
        self.text.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The metrics listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// `--metrics-addr` is not an address and port.
    #[error("--metrics-addr {0}: expected ADDRESS:PORT")]
    BadAddress(String),
    #[error("cannot listen for metrics on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
}

impl Classify for MetricsError {
    fn class(&self) -> Class {
        Class::BadInput
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            MetricsError::BadAddress(_) => {
                "e.g. --metrics-addr 127.0.0.1:9464 (an IPv6 address in brackets: [::1]:9464)"
                    .into()
            }
            MetricsError::Listen { .. } => {
                "pick a free loopback port, e.g. --metrics-addr 127.0.0.1:9464".into()
            }
        })
    }
}

/// `--metrics-addr ADDRESS:PORT` (an IPv6 address in brackets).
pub fn parse_addr(text: &str) -> Result<SocketAddr, MetricsError> {
    text.parse()
        .map_err(|_| MetricsError::BadAddress(text.to_string()))
}

/// Whether an address is loopback (the listeners bind there unless told otherwise).
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// Listen on `addr` and serve `published` on a background thread for as long as the process
/// lives. Returns the bound address (port 0 picks a free port).
pub fn serve(addr: &str, published: Published) -> Result<SocketAddr, MetricsError> {
    let listen_error = |source| MetricsError::Listen {
        addr: addr.to_string(),
        source,
    };
    let listener = TcpListener::bind(addr).map_err(listen_error)?;
    let local = listener.local_addr().map_err(listen_error)?;
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            // `incoming` yields accept's errors (EINTR, a connection reset before it was
            // accepted, descriptors running out) one by one; each is skipped.
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                // A client that sends nothing, or reads nothing, is given up on: the next
                // scrape must not wait behind it for long.
                let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
                let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
                let _ = answer(&mut stream, &published);
            }
        })
        .map_err(listen_error)?;
    Ok(local)
}

/// How long one connection may take to send its head or read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// The most bytes of a request head read; a longer one is answered 431.
pub const MAX_HEAD: usize = 8192;

/// Read the request head (to the blank line that ends it, EOF, or [`MAX_HEAD`] bytes) and write
/// the response. The head may come in several pieces and a read may be interrupted (EINTR):
/// both are read on. Answering before the whole head was read and closing with the rest unread
/// makes the kernel reset the connection, and the client may lose the response.
fn answer(stream: &mut (impl Read + Write), published: &Published) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let complete = loop {
        if let Some(end) = head_end(&head) {
            head.truncate(end);
            break true;
        }
        if head.len() >= MAX_HEAD {
            break false;
        }
        let room = (MAX_HEAD - head.len()).min(buf.len());
        match stream.read(&mut buf[..room]) {
            Ok(0) => break !head.is_empty(),
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    };
    if head.is_empty() {
        return Ok(());
    }
    let response = if complete {
        respond(&head, published)
    } else {
        status(
            431,
            "Request Header Fields Too Large",
            "request head over 8192 bytes\n",
        )
    };
    // write_all retries on EINTR and goes on after a short write.
    stream.write_all(&response)?;
    stream.flush()
}

/// Where the head's blank line ends (CRLF CRLF, or LF LF from a lenient client).
fn head_end(head: &[u8]) -> Option<usize> {
    let crlf = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4);
    let lf = head.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn respond(head: &[u8], published: &Published) -> Vec<u8> {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" && method != "HEAD" {
        return status(405, "Method Not Allowed", "only GET and HEAD are served\n");
    }
    if path != "/metrics" {
        return status(404, "Not Found", "metrics are at /metrics\n");
    }
    let text = published.text();
    let mut out = format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        text.len()
    )
    .into_bytes();
    if method == "GET" {
        out.extend_from_slice(text.as_bytes());
    }
    out
}

fn status(code: u16, reason: &str, body: &str) -> Vec<u8> {
    let allow = if code == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    format!(
        "HTTP/1.0 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n{allow}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client whose request head arrives in pieces, with reads interrupted in between: the
    /// answer comes only after the whole head was read. (A stream that yields EINTR on demand:
    /// a real socket cannot be made to, deterministically.)
    struct Trickle {
        input: Vec<Vec<u8>>,
        interrupt_next: bool,
        written: Vec<u8>,
        answered_with_unread_input: bool,
        most_asked: usize,
    }

    impl Trickle {
        fn new(input: Vec<Vec<u8>>) -> Trickle {
            Trickle {
                input,
                interrupt_next: true,
                written: Vec::new(),
                answered_with_unread_input: false,
                most_asked: 0,
            }
        }
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if std::mem::replace(&mut self.interrupt_next, false) {
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            self.interrupt_next = true;
            self.most_asked = self.most_asked.max(buf.len());
            if self.input.is_empty() {
                return Ok(0);
            }
            let mut piece = self.input.remove(0);
            if piece.len() > buf.len() {
                self.input.insert(0, piece.split_off(buf.len()));
            }
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

    fn published(text: &str) -> Published {
        let p = Published::new();
        p.publish(text.into());
        p
    }

    #[test]
    fn the_answer_waits_for_the_whole_head_through_eintr_and_short_io() {
        let mut t = Trickle::new(vec![
            b"GET /metrics HTTP/1.1\r\n".to_vec(),
            b"Host: x\r\n".to_vec(),
            b"\r\n".to_vec(),
        ]);
        answer(&mut t, &published("body\n")).unwrap();
        assert!(t.input.is_empty(), "the head was not read to its end");
        assert!(!t.answered_with_unread_input);
        let text = String::from_utf8(t.written).unwrap();
        assert!(text.starts_with("HTTP/1.0 200 OK\r\n"), "{text}");
        assert!(text.contains("Content-Length: 5\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nbody\n"), "{text}");
    }

    #[test]
    fn other_paths_methods_and_oversized_heads_are_refused() {
        let ask = |request: Vec<u8>| {
            let mut t = Trickle::new(vec![request]);
            answer(&mut t, &published("secret\n")).unwrap();
            (String::from_utf8(t.written).unwrap(), t.most_asked)
        };
        let (text, _) = ask(b"GET / HTTP/1.1\r\n\r\n".to_vec());
        assert!(text.starts_with("HTTP/1.0 404 Not Found\r\n"), "{text}");
        assert!(!text.contains("secret"));
        let (text, _) = ask(b"GET /metricsx HTTP/1.1\r\n\r\n".to_vec());
        assert!(text.starts_with("HTTP/1.0 404 "), "{text}");
        let (text, _) = ask(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n".to_vec());
        assert!(text.ends_with("secret\n"), "{text}");
        let (text, _) = ask(b"HEAD /metrics HTTP/1.1\r\n\r\n".to_vec());
        assert!(
            text.starts_with("HTTP/1.0 200 OK") && text.ends_with("\r\n\r\n"),
            "{text}"
        );
        assert!(text.contains("Content-Length: 7\r\n"), "{text}");
        let (text, _) = ask(b"POST /metrics HTTP/1.1\r\n\r\n".to_vec());
        assert!(text.starts_with("HTTP/1.0 405 "), "{text}");
        assert!(text.contains("Allow: GET, HEAD\r\n"), "{text}");
        // A head that never ends: read up to the bound, no further, and refused.
        let mut huge = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        huge.resize(100_000, b'a');
        let mut t = Trickle::new(vec![huge]);
        answer(&mut t, &published("secret\n")).unwrap();
        let text = String::from_utf8(t.written).unwrap();
        assert!(text.starts_with("HTTP/1.0 431 "), "{text}");
        assert!(!t.input.is_empty(), "read past the bound");
        assert!(t.most_asked <= 1024);
    }

    #[test]
    fn the_listener_serves_the_current_text_on_loopback() {
        let p = published("first\n");
        let addr = serve("127.0.0.1:0", p.clone()).unwrap();
        assert!(is_loopback(&addr));
        let get = |path: &str| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        assert!(get("/metrics").ends_with("\r\n\r\nfirst\n"));
        p.publish("second\n".into());
        let second = get("/metrics");
        assert!(second.starts_with("HTTP/1.0 200 OK"), "{second}");
        assert!(second.ends_with("second\n"));
        assert!(get("/other").starts_with("HTTP/1.0 404"));
        // A client that connects and says nothing does not stop the next scrape for long.
        let _silent = std::net::TcpStream::connect(addr).unwrap();
        let started = std::time::Instant::now();
        assert!(get("/metrics").ends_with("second\n"));
        // The bound, with room for a loaded machine: without the timeout this would hang.
        assert!(started.elapsed() < IO_TIMEOUT + Duration::from_secs(10));
        let err = serve("256.0.0.1:1", Published::new()).unwrap_err();
        assert_eq!(err.class(), Class::BadInput);
        assert!(err.to_string().contains("256.0.0.1:1"), "{err}");
    }
}
