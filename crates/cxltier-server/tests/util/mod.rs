//! What the server's tests share: a server running in the test's own process on a port of its
//! own, clients connected to it, and assertions on their replies.
//!
//! [`ServerBuilder`] opens a store (DRAM, and an NVMe log file when asked) and serves it with
//! `cxltier_server::serve_on` on a thread; the listener is bound to 127.0.0.1:0 before the
//! thread starts, so the port is the test's alone and a connection made at once is accepted.
//! Dropping the [`Server`] sets its stop flag and joins the thread (the store is closed then),
//! so a test may open the same files again to check what a restart finds.
//!
//! Server processes ([`process`]: redis-server, which tests compare with, on a port of its own)
//! live here too. The process-level tests of the CLI (signals, kill -9, flags, exit codes,
//! stderr) use this module as well, for its clients, reply assertions and process launcher,
//! beside their own start of `cxltier serve`.

// Each test binary uses the part it needs.
#![allow(dead_code)]

mod process;
#[allow(unused_imports)]
pub use process::*;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use cxltier_resp::{Client, Reply};
use cxltier_server::{OutputBufferLimit, ServerConfig, ServerError, StoreOptions};
use cxltier_store::{Durability, SsdSpec};

/// A server of `dram` over an NVMe log of `nvme`, in a file of its own: the file is returned
/// with the server, to be kept while it runs.
pub fn over_nvme(dram: &str, nvme: &str) -> (cxltier_store::testing::TempFile, Server) {
    let log = temp("nvme");
    let s = Server::builder().dram(dram).ssd(&log, nvme).start();
    (log, s)
}

/// Only a guard against a hang: nothing is timed by it.
pub const GUARD: Duration = Duration::from_secs(30);

/// The options tests start servers with (the `cxltier serve` flags of the same names); the
/// defaults are the CLI's.
#[derive(Debug, Clone)]
pub struct ServerBuilder {
    dram: u64,
    ssd: Option<SsdSpec>,
    durability: Option<Durability>,
    requirepass: Option<String>,
    acl_file: Option<std::path::PathBuf>,
    databases: usize,
    max_object: usize,
    max_clients: usize,
    client_query_buffer_limit: usize,
    client_output_buffer_limit: OutputBufferLimit,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        ServerBuilder {
            dram: 256 << 20,
            ssd: None,
            durability: None,
            requirepass: None,
            acl_file: None,
            databases: cxltier_server::db::DEFAULT_DATABASES,
            max_object: 512 << 20,
            max_clients: 10_000,
            client_query_buffer_limit: cxltier_server::DEFAULT_QUERY_BUFFER_LIMIT,
            client_output_buffer_limit: OutputBufferLimit::default(),
        }
    }
}

/// A size as the CLI's flags give it (`8M`, `64k`, `1G`).
fn size(text: &str) -> u64 {
    cxltier_topo::size::parse_size(text).unwrap_or_else(|e| panic!("size {text:?}: {e}"))
}

impl ServerBuilder {
    /// `--dram SIZE`.
    pub fn dram(mut self, size_text: &str) -> Self {
        self.dram = size(size_text);
        self
    }
    /// `--ssd PATH:SIZE`: the NVMe tier in a log file (created when missing).
    pub fn ssd(mut self, path: &Path, size_text: &str) -> Self {
        self.ssd = Some(SsdSpec {
            path: path.to_path_buf(),
            capacity: Some(size(size_text)),
        });
        self
    }
    /// `--ssd PATH`: the NVMe tier in a log file that exists, at its size.
    pub fn ssd_file(mut self, path: &Path) -> Self {
        self.ssd = Some(SsdSpec {
            path: path.to_path_buf(),
            capacity: None,
        });
        self
    }
    /// `--durability none|everysec|always` (default: everysec with an NVMe tier, none without).
    pub fn durability(mut self, mode: &str) -> Self {
        self.durability = Some(mode.parse().expect("a durability mode"));
        self
    }
    /// `--acl-file PATH`.
    pub fn acl_file(mut self, path: &Path) -> Self {
        self.acl_file = Some(path.to_path_buf());
        self
    }
    /// `--requirepass PASSWORD`.
    pub fn requirepass(mut self, password: &str) -> Self {
        self.requirepass = Some(password.to_string());
        self
    }
    /// `--databases N`.
    pub fn databases(mut self, n: usize) -> Self {
        self.databases = n;
        self
    }
    /// `--max-object SIZE`.
    pub fn max_object(mut self, size_text: &str) -> Self {
        self.max_object = size(size_text) as usize;
        self
    }
    /// `--max-clients N`.
    pub fn max_clients(mut self, n: usize) -> Self {
        self.max_clients = n;
        self
    }
    /// `--client-query-buffer-limit BYTES`.
    pub fn client_query_buffer_limit(mut self, text: &str) -> Self {
        self.client_query_buffer_limit =
            cxltier_server::parse_memory(text).expect("a size in bytes");
        self
    }
    /// `--client-output-buffer-limit "HARD SOFT SECONDS"`.
    pub fn client_output_buffer_limit(mut self, text: &str) -> Self {
        self.client_output_buffer_limit = text.parse().expect("hard soft seconds");
        self
    }

    /// Open the store and serve it; panics when the store does not open.
    pub fn start(self) -> Server {
        self.try_start()
            .unwrap_or_else(|e| panic!("the server did not start: {e}"))
    }

    /// Open the store and serve it, or say why the store did not open.
    pub fn try_start(self) -> Result<Server, String> {
        // As `cxltier serve` opens it; the nodes are the store's defaults (node 0).
        let store = StoreOptions {
            dram: self.dram,
            ssd: self.ssd.clone(),
            durability: self.durability,
            max_object: self.max_object,
            ..StoreOptions::default()
        }
        .open()
        .map_err(|e| e.to_string())?;
        // Where `cxltier serve` keeps a replica's snapshot: beside the log file, now that it exists.
        let snapshot_dir = self.ssd.as_ref().and_then(SsdSpec::file_dir);
        let listener = cxltier_server::bind("127.0.0.1:0".parse().expect("an address"))
            .map_err(|e| e.to_string())?;
        let bind = listener.local_addr().map_err(|e| e.to_string())?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = Arc::clone(&log);
        let cfg = ServerConfig {
            bind,
            requirepass: self.requirepass,
            max_clients: self.max_clients,
            quarantine_file: None,
            client_query_buffer_limit: self.client_query_buffer_limit,
            client_output_buffer_limit: self.client_output_buffer_limit,
            databases: self.databases,
            log: cxltier_server::LogSink::new(move |line| {
                lines.lock().unwrap().push(line.to_string())
            }),
            snapshot_dir,
            metrics: None,
            settings: Vec::new(),
            acl_file: self.acl_file,
            users: Vec::new(),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("cxltier-server".into())
            .spawn(move || cxltier_server::serve_on(listener, cfg, store, flag))
            .map_err(|e| e.to_string())?;
        Ok(Server {
            addr: bind.to_string(),
            stop,
            thread: Some(thread),
            log,
        })
    }
}

/// A server serving on its own thread until dropped (or [`Server::stop`]ped).
pub struct Server {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), ServerError>>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// A server with the CLI's defaults.
    pub fn start() -> Server {
        ServerBuilder::default().start()
    }

    /// A server with options.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// A new connection (not authenticated).
    pub fn client(&self) -> Conn {
        Conn::connect(&self.addr)
    }

    /// A bare socket, for bytes no client would send, with [`GUARD`] as its read timeout.
    pub fn raw(&self) -> std::net::TcpStream {
        let s = std::net::TcpStream::connect(&self.addr).unwrap_or_else(|e| panic!("{e}"));
        s.set_read_timeout(Some(GUARD))
            .unwrap_or_else(|e| panic!("{e}"));
        s
    }

    /// The port, as redis-cli and redis-benchmark take it.
    pub fn port(&self) -> String {
        self.addr.rsplit(':').next().unwrap_or_default().to_string()
    }

    /// The lines the server logged so far (what `cxltier serve` prints on stderr after its
    /// prefix).
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Stop the server, wait for its store to close, and return its lines.
    pub fn stop(mut self) -> Vec<String> {
        self.halt();
        self.log()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => panic!("the server failed: {e}"),
                Err(_) if std::thread::panicking() => {}
                Err(_) => panic!("the server's thread panicked"),
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The test failed: stop the server without a second panic over its outcome.
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        } else {
            self.halt();
        }
    }
}

/// A client whose connection failures (a timeout, a close, a malformed reply) fail the test;
/// everything else of [`Client`] through `Deref`.
pub struct Conn(pub Client);

impl Conn {
    /// Connect to `addr`, with [`GUARD`] as the timeout of every read and write.
    pub fn connect(addr: &str) -> Conn {
        Conn(Client::connect_timeout(addr, GUARD).unwrap_or_else(|e| panic!("{e}")))
    }
    /// Send a command and read its reply.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Reply {
        self.send(args);
        self.read()
    }
    /// [`Conn::call`] for arguments of mixed kinds (`&[b"SET", key.as_bytes(), &value]`), which
    /// only a slice of byte slices takes as they are written.
    pub fn call_bytes(&mut self, args: &[&[u8]]) -> Reply {
        self.call(args)
    }
    /// The reply to a command given as space-separated words.
    pub fn call_line(&mut self, line: &str) -> Reply {
        let args: Vec<&str> = line.split(' ').collect();
        self.call(&args)
    }
    /// Send a command, not reading its reply.
    pub fn send<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        let args: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
        self.0.send(&args).unwrap_or_else(|e| panic!("{e}"))
    }
    /// [`Conn::send`] for arguments of mixed kinds (see [`Conn::call_bytes`]).
    pub fn send_bytes(&mut self, args: &[&[u8]]) {
        self.send(args)
    }
    /// Read one reply.
    pub fn read(&mut self) -> Reply {
        self.0.read().unwrap_or_else(|e| panic!("{e}"))
    }
    /// Send a command given as space-separated words, not reading its reply.
    pub fn send_line(&mut self, line: &str) {
        let args: Vec<&str> = line.split(' ').collect();
        self.send(&args);
    }
    /// The reply to a command given as space-separated words, as the text the server sent.
    pub fn cmd(&mut self, line: &str) -> String {
        let args: Vec<&str> = line.split(' ').collect();
        self.call_text(&args)
    }
    /// Run a script of lines, each with the reply it must get (as the text the server sent), in
    /// order; a wrong reply fails naming its line and its place.
    pub fn replies(&mut self, script: &[(&str, &str)]) {
        for (i, (line, want)) in script.iter().enumerate() {
            assert_eq!(self.cmd(line), *want, "line {i} of the script: {line}");
        }
    }
    /// Run a script of lines, each with the start its reply must have (as the text the server
    /// sent: `-NOAUTH` is an error whose message starts with NOAUTH).
    pub fn replies_starting(&mut self, script: &[(&str, &str)]) {
        for (i, (line, start)) in script.iter().enumerate() {
            let got = self.cmd(line);
            assert!(
                got.starts_with(start),
                "line {i} of the script: {line}: {got:?} does not start with {start:?}"
            );
        }
    }
    /// The reply to a command given as its arguments (which may hold spaces), as the text the
    /// server sent.
    pub fn call_text<A: AsRef<[u8]>>(&mut self, args: &[A]) -> String {
        self.send(args);
        self.read_text()
    }
    /// The next reply as the text the server sent.
    pub fn read_text(&mut self) -> String {
        let mut out = Vec::new();
        self.0.read_raw(&mut out).unwrap_or_else(|e| panic!("{e}"));
        String::from_utf8(out).expect("a reply in UTF-8")
    }
    /// Everything the server sends until it closes the connection.
    pub fn read_to_close(&mut self) -> Vec<u8> {
        self.0.read_to_close().unwrap_or_else(|e| panic!("{e}"))
    }
}

impl std::ops::Deref for Conn {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.0
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.0
    }
}

/// Panicking accessors for replies a test expects to have a shape.
pub trait ReplyExt {
    /// A scalar reply as text.
    fn text(&self) -> String;
    /// The items of an array, set or push.
    fn items(&self) -> &[Reply];
    /// A map's value for a key given as text.
    fn get(&self, key: &str) -> Option<&Reply>;
}

impl ReplyExt for Reply {
    fn text(&self) -> String {
        self.as_text()
            .unwrap_or_else(|| panic!("{self:?} is not text"))
    }
    fn items(&self) -> &[Reply] {
        self.as_items()
            .unwrap_or_else(|| panic!("{self:?} is not an array"))
    }
    fn get(&self, key: &str) -> Option<&Reply> {
        match self {
            Reply::Map(_) => self.field(key),
            other => panic!("{other:?} is not a map"),
        }
    }
}

/// A bulk string reply of `s`.
pub fn bulk(s: &str) -> Reply {
    Reply::bulk(s)
}

/// A number field of `INFO section`.
pub fn info_field(c: &mut Conn, section: &str, name: &str) -> String {
    let text = c.call(&["INFO", section]).text();
    let prefix = format!("{name}:");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("INFO {section} has no {name}: {text}"))
        .trim()
        .to_string()
}

/// A number field of `INFO section`.
pub fn info_number(c: &mut Conn, section: &str, name: &str) -> u64 {
    let text = info_field(c, section, name);
    text.parse()
        .unwrap_or_else(|_| panic!("INFO {section} {name}: {text} is not a number"))
}

/// A command as a client sends it: an array of bulk strings.
pub fn request(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    cxltier_resp::write_command(&mut out, args);
    out
}

/// Wait until `done` (checked every few milliseconds), or fail saying `what` after the guard.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < GUARD, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Wait until INFO says `n` clients are blocked.
pub fn wait_blocked(c: &mut Conn, n: usize) {
    let want = format!("blocked_clients:{n}\r\n");
    wait_until(&want, || c.cmd("INFO clients").contains(&want));
}

/// SCRIPT KILL from `killer` is answered OK, and `runner`, whose script it was, is told so.
pub fn kill_script(killer: &mut Conn, runner: &mut Conn) {
    assert_eq!(killer.call_text(&["SCRIPT", "KILL"]), "+OK\r\n");
    let killed = runner.read_text();
    assert!(
        killed.starts_with("-ERR Script killed by user with SCRIPT KILL..."),
        "{killed}"
    );
}

/// Wait until the server answers a new connection BUSY: a script sent before is running past
/// the threshold. A connection made after the script began waits for the threshold, then is
/// answered BUSY; one whose PING the server read before the script's EVAL (a loaded machine
/// may take a while to read it) gets its PONG: then another one is made.
pub fn wait_busy(addr: &str) {
    let t = Instant::now();
    loop {
        let mut probe = Conn::connect(addr);
        let reply = probe.call_text(&["PING"]);
        if reply.starts_with("-BUSY Redis is busy running a script.") {
            return;
        }
        assert_eq!(reply, "+PONG\r\n");
        assert!(t.elapsed() < GUARD, "the script never made the server busy");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Start `script` on a connection of its own and wait until the server answers another
/// connection BUSY (the threshold is 50 ms).
pub fn run_until_busy(addr: &str, admin: &mut Conn, script: &str) -> Conn {
    assert_eq!(
        admin.call_text(&["CONFIG", "SET", "busy-reply-threshold", "50"]),
        "+OK\r\n"
    );
    let mut runner = Conn::connect(addr);
    runner.send(&["EVAL", script, "0"]);
    wait_busy(addr);
    runner
}

/// Write a key of every type in databases 1 and 2 of the server `first`, SWAPDB them, and read
/// back what each database holds: after SWAPDB at once, and after each `restart` (a stop, or a
/// kill -9, and a start on the same NVMe log), through connections `client` makes. Both the
/// in-process server and the `cxltier serve` process run it.
pub fn swapdb_survives<S>(first: S, client: impl Fn(&S) -> Conn, restart: impl Fn(S) -> S) {
    let s = first;
    let mut c = client(&s);
    for (db, tag) in [(1, "one"), (2, "two")] {
        assert_eq!(c.cmd(&format!("SELECT {db}")), "+OK\r\n");
        for line in [
            format!("SET s {tag}"),
            format!("HSET h f {tag}"),
            format!("RPUSH l {tag}"),
            format!("SADD set {tag}"),
            format!("ZADD z 1 {tag}"),
        ] {
            assert!(!c.cmd(&line).starts_with('-'), "{line}");
        }
    }
    assert_eq!(c.cmd("SWAPDB 1 2"), "+OK\r\n");
    let check = |c: &mut Conn| {
        for (db, tag) in [(1, "two"), (2, "one")] {
            c.cmd(&format!("SELECT {db}"));
            let b = format!("$3\r\n{tag}\r\n");
            assert_eq!(c.cmd("GET s"), b, "db {db}");
            assert_eq!(c.cmd("HGET h f"), b);
            assert_eq!(c.cmd("LINDEX l 0"), b);
            assert_eq!(c.cmd("SRANDMEMBER set"), b);
            assert_eq!(c.cmd("ZRANGE z 0 0"), format!("*1\r\n{b}"));
            assert_eq!(c.cmd("DBSIZE"), ":5\r\n");
        }
        c.cmd("SELECT 0");
        assert_eq!(c.cmd("DBSIZE"), ":0\r\n");
    };
    check(&mut c);
    drop(c);
    let s = restart(s);
    check(&mut client(&s));
    // Swapped back, and kept so too.
    let mut c = client(&s);
    assert_eq!(c.cmd("SWAPDB 2 1"), "+OK\r\n");
    c.cmd("SELECT 1");
    assert_eq!(c.cmd("GET s"), "$3\r\none\r\n");
    drop(c);
    let s = restart(s);
    let mut c = client(&s);
    c.cmd("SELECT 1");
    assert_eq!(c.cmd("GET s"), "$3\r\none\r\n");
    c.cmd("SELECT 2");
    assert_eq!(c.cmd("GET s"), "$3\r\ntwo\r\n");
    let info = c.cmd("INFO keyspace");
    assert!(
        info.contains("db1:keys=5,expires=0,avg_ttl=0\r\n"),
        "{info}"
    );
    assert!(
        info.contains("db2:keys=5,expires=0,avg_ttl=0\r\n"),
        "{info}"
    );
    assert!(!info.contains("db0:"), "{info}");
}

/// A tool the test needs (redis-cli, redis-benchmark, redis-server): the test fails, saying
/// how to install it, when it is missing (the project's rule: no skipping).
pub fn need(bin: &str) {
    let found = std::process::Command::new(bin)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{bin} is not installed: run scripts/peers (scripts/test does) and test again"
    );
}

/// A file in a fresh temporary directory, removed with it at the end of the test.
pub fn temp(name: &str) -> cxltier_store::testing::TempFile {
    cxltier_store::testing::temp_file("cxltier-server-test-", name)
}
