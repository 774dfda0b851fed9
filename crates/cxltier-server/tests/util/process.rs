//! Server processes on ports of their own ([`ServerChild`]): redis-server, which tests compare
//! with ([`redis`]), and, in the CLI's tests, `cxltier serve`.
//!
//! A port picked free can be taken before the child binds it: by another test's server, or
//! for a moment by a listener that is already closed in this process but still open in a child
//! that a parallel test forked and has not yet exec'd. A connection to that second one is
//! accepted by the kernel and then reset. So a test trusts a port only once `INFO server`
//! answers there with its own child's `process_id`, and treats a refused, reset or closed
//! connection as "not up yet".

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use super::{need, Conn};

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

/// Only a guard against a hang while a server starts: nothing is timed.
const START_GUARD: Duration = Duration::from_secs(30);

/// A server child (cxltier serve, redis-server) on a port of its own, killed when the test
/// ends, passed or not.
pub struct ServerChild {
    /// What it is, for messages: `cxltier serve`, `redis-server`.
    pub name: String,
    pub child: std::process::Child,
    pub port: u16,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl ServerChild {
    /// Start `command(port)` on a free port, again on another if the port was taken before the
    /// child bound it: the child answering must be this one (INFO's `process_id`, after
    /// `AUTH password` when the server asks for one).
    pub fn start(
        name: &str,
        password: Option<&str>,
        command: impl Fn(u16) -> std::process::Command,
    ) -> ServerChild {
        ServerChild::launch(name, password, command, false).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`ServerChild::start`] with the child's stderr kept (for [`ServerChild::stop`]): when
    /// the child exits before it answers, for another reason than a port taken meanwhile,
    /// `Err` with its stderr.
    pub fn try_start_logged(
        name: &str,
        password: Option<&str>,
        command: impl Fn(u16) -> std::process::Command,
    ) -> Result<ServerChild, String> {
        ServerChild::launch(name, password, command, true)
    }

    fn launch(
        name: &str,
        password: Option<&str>,
        command: impl Fn(u16) -> std::process::Command,
        keep_stderr: bool,
    ) -> Result<ServerChild, String> {
        use std::process::Stdio;
        for _ in 0..5 {
            let port = free_port();
            let child = command(port)
                .stdout(Stdio::null())
                .stderr(if keep_stderr {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
            let mut s = ServerChild {
                name: name.to_string(),
                child,
                port,
                addr: format!("127.0.0.1:{port}"),
            };
            let t = std::time::Instant::now();
            while t.elapsed() < START_GUARD {
                if s.child.try_wait().unwrap().is_some() {
                    let err = s.stderr();
                    // A port taken before the child bound it: another port. Anything else is
                    // the child's own failure, for the test to see.
                    if keep_stderr && !err.contains("cannot listen") {
                        return Err(err);
                    }
                    break;
                }
                match who_answers(&s.addr, password, s.child.id(), START_GUARD) {
                    Answer::Ours => return Ok(s),
                    Answer::Other => break,
                    Answer::Nothing => {}
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
        Err(format!("{name} did not come up on five free ports"))
    }

    /// A new connection (not authenticated).
    pub fn client(&self) -> Conn {
        Conn::connect(&self.addr)
    }

    /// What the child wrote on stderr, when it was kept, up to its end (call once it exited).
    pub fn stderr(&mut self) -> String {
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        err
    }

    /// SHUTDOWN (sent again until the server exits: one that arrives while the server is full
    /// is refused like any other client); its exit status and stderr.
    pub fn stop(mut self) -> (std::process::ExitStatus, String) {
        let t = std::time::Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(t.elapsed() < START_GUARD, "{} did not stop", self.name);
            if let Ok(mut c) = cxltier_resp::Client::connect_timeout(&self.addr, START_GUARD) {
                // SHUTDOWN closes the connection without a reply.
                let _ = c.call(&[b"SHUTDOWN"]);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        (status, self.stderr())
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

/// redis-server, which a test compares with: the test fails, saying how to install it, when it
/// is missing.
pub fn redis() -> ServerChild {
    need("redis-server");
    ServerChild::start("redis-server", None, redis_server)
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `redis-server` (Debian's 7.0, installed by scripts/peers) on `port`, without persistence.
/// Fails the test, saying how to install it, when it is missing: every test command installs it.
pub fn redis_server(port: u16) -> std::process::Command {
    need("redis-server");
    let mut c = std::process::Command::new("redis-server");
    c.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"]);
    c
}

/// A redis-server replica of the server listening on `primary_port`, its files in `dir`, once
/// its link is up: the child (killed when dropped) and a connection to it.
pub fn redis_replica(primary_port: &str, dir: &std::path::Path) -> (ServerChild, Conn) {
    let replica = ServerChild::start("redis-server replica", None, |port| {
        let mut c = redis_server(port);
        c.args(["--replicaof", "127.0.0.1", primary_port])
            .arg("--dir")
            .arg(dir);
        c
    });
    use super::ReplyExt;
    let mut r = replica.client();
    super::wait_until("the replica's link is up", || {
        r.call(&["INFO", "replication"])
            .text()
            .contains("master_link_status:up")
    });
    (replica, r)
}
