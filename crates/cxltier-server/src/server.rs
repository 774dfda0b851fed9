//! The event loop: one thread, non-blocking sockets, batches, device reads that overlap.
//!
//! Each turn of the loop reads everything the ready connections sent and parses every complete
//! command (pipelining) onto its connection's queue; collects the NVMe reads that finished;
//! begins, without waiting, the reads the queued commands need, oldest command first, up to the
//! store's NVMe queue depth (one io_uring submission; the rest begin in later turns as room
//! frees); runs, connection by connection and in order, every command whose data is at hand (a
//! command waits only while a read of one of its keys is in flight or not yet begun, and the
//! commands behind it on the same connection wait with it); commits once (group commit: with
//! `--durability always`, no write is acknowledged before its log record is on disk); and only
//! then writes the replies, one `write` per connection. So requests served from memory never wait
//! behind another client's device reads, and the device is kept busy without a queue so deep
//! that reads only wait longer in it.
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cxltier_store::Store;
// Looked up several times per command: foldhash rather than std's SipHash.
use hashbrown::HashMap;
use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::context::{self, ClientMeta, Effect, ServerInfo, Session};
use crate::limits::{OutputBufferLimit, BULK_MARGIN};
use crate::quarantine::QuarantineFollower;
use crate::ratelog::RateLimitedLog;
use crate::resp::{self, reply, Parser};
use crate::table;

const LISTENER: Token = Token(usize::MAX);
/// The store's device-read completion eventfd.
const COMPLETIONS: Token = Token(usize::MAX - 1);
/// Bytes read per `read` call.
const READ_CHUNK: usize = 64 << 10;
/// A connection closed by the server (a protocol error, a limit, QUIT) while its client may
/// still be sending: the socket is kept this long, its output shut, reading and dropping what
/// arrives. Closed with input unread, a socket answers with a reset, which can reach the client
/// before the error line that explains the close and make it lose that line.
const LINGER: Duration = Duration::from_secs(5);
/// The most bytes dropped from one lingering socket, and the most sockets lingering at once
/// (beyond either, the socket is closed at once, as before).
const LINGER_BYTES: usize = 64 << 20;
const LINGER_SOCKETS: usize = 256;

/// A socket in its lingering close.
struct Lingering {
    stream: TcpStream,
    until: Instant,
    left: usize,
}

impl Lingering {
    /// Read and drop what is there; true once the socket is to be closed (the peer closed, an
    /// error, the time or the byte allowance is up).
    fn drain(&mut self, buf: &mut [u8], now: Instant) -> bool {
        loop {
            if now >= self.until || self.left == 0 {
                return true;
            }
            match self.stream.read(buf) {
                Ok(0) => return true,
                Ok(n) => self.left = self.left.saturating_sub(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(_) => return true,
            }
        }
    }
}
/// Most parsed commands waiting on one connection: beyond, nothing more of it is parsed (nor
/// read, once its unparsed input reaches the query buffer limit) until they have run. Deep
/// enough for any pipeline a client benefits from, small enough that a flood of `PING` costs
/// kilobytes, not gigabytes.
const MAX_QUEUED: usize = 1024;
/// Buffers start this big, and are given back down to it when emptied after growing past
/// [`BUFFER_KEEP`] (one big reply must not hold its memory for the connection's life).
const BUFFER_INITIAL: usize = 16 << 10;
const BUFFER_KEEP: usize = 1 << 20;
/// The most input a connection that has not authenticated holds (a password is set): room for
/// one command of the largest kind it may send (10 arguments of 16 KiB, or an inline line of
/// 64 KiB) and more. 10,000 such connections hold at most 2.5 GiB of input, where the query
/// buffer limit would allow 64 MiB each.
const UNAUTHENTICATED_INPUT: usize = 256 << 10;
/// Unread replies of a connection that has not authenticated: its commands stop running past
/// the soft limit, and it is closed at the hard one.
const UNAUTHENTICATED_OUTPUT_SOFT: usize = 64 << 10;
const UNAUTHENTICATED_OUTPUT_HARD: usize = 1 << 20;
/// The default query buffer limit per connection (Redis's 1 GB is for a server of one big
/// client; ours serves thousands).
pub const DEFAULT_QUERY_BUFFER_LIMIT: usize = 64 << 20;
/// How often background work runs at the least.
const TICK: Duration = Duration::from_millis(100);

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub bind: SocketAddr,
    pub requirepass: Option<String>,
    pub max_clients: usize,
    /// Follow this quarantine file (`cxltier ras --watch --quarantine`) and apply the poisoned
    /// ranges appended to it.
    pub quarantine_file: Option<std::path::PathBuf>,
    /// Most bytes of a connection's input held: past it, the connection is not read until its
    /// queued commands have run; one command longer than this closes the connection. Raised to
    /// fit one bulk of proto-max-bulk-len.
    pub client_query_buffer_limit: usize,
    /// Limits on a connection's unread replies.
    pub client_output_buffer_limit: OutputBufferLimit,
    /// Databases clients may select (`--databases`, Redis's `databases`; 16 by default).
    pub databases: usize,
    /// Where the server says what went wrong in the background (a client closed over its
    /// limit, NVMe reads failing, poisoned memory applied); the default drops the lines.
    pub log: crate::ratelog::LogSink,
    /// Where the snapshot for a replica (SYNC/PSYNC) is written before it is sent: the store's
    /// directory; `None` keeps it in memory.
    pub snapshot_dir: Option<std::path::PathBuf>,
    /// Publish the Prometheus exposition here (`--metrics-addr`; served by
    /// `cxltier_metrics::serve`), about once a second; `None`: no metrics.
    pub metrics: Option<cxltier_metrics::Published>,
    /// Redis's parameters from a configuration file (`cxltier serve --config`), applied in
    /// order with CONFIG SET's checks before the first client is served; a refused one stops
    /// the start ([`ServerError::Setting`]).
    pub settings: Vec<crate::config_file::Setting>,
    /// The ACL file (`--acl-file`, Redis's `aclfile`): its users are loaded at start (a file
    /// that does not load stops the start) and ACL LOAD and ACL SAVE read and write it.
    pub acl_file: Option<std::path::PathBuf>,
    /// The configuration file's `user` lines (each the user's name, then its rules), applied
    /// as ACL SETUSER at start.
    pub users: Vec<(Vec<String>, crate::config_file::Origin)>,
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}{hint}")]
    Bind {
        addr: SocketAddr,
        hint: String,
        #[source]
        source: io::Error,
    },
    #[error("event loop: {0}")]
    Io(#[from] io::Error),
    #[error("closing the store: {0}")]
    Store(#[from] cxltier_store::StoreError),
    /// The store's databases do not fit the server's settings (a smaller `--databases` than
    /// the store was written with): what to do is in the message.
    #[error("{0}")]
    Databases(String),
    /// A parameter of the configuration file was refused.
    #[error("{origin}: {name} {value:?}: {why}")]
    Setting {
        origin: crate::config_file::Origin,
        name: String,
        value: String,
        why: String,
    },
    /// The ACL file did not load: every line's error is in the message.
    #[error("{0}")]
    AclFile(String),
    /// The libraries kept in the store (FUNCTION LOAD) did not load again.
    #[error("loading the functions' libraries kept in the store: {0}")]
    Functions(String),
    /// `--bind` is not an address and port.
    #[error("--bind {0}: not an ADDRESS:PORT")]
    BadBind(String),
    /// `--client-query-buffer-limit` is not a size in bytes.
    #[error("--client-query-buffer-limit {0}: not a size in bytes")]
    BadQueryBufferLimit(String),
    /// The open-file limit could not be read.
    #[error("reading the open-file limit: {0}")]
    OpenFilesLimit(String),
    /// The open-file limit leaves no descriptor for a client.
    #[error(
        "the open-file limit is {soft}: too low to serve any client ({} descriptors are kept for the store and the listener)",
        crate::limits::RESERVED_FDS
    )]
    TooFewOpenFiles { soft: u64 },
}

/// `--bind ADDRESS:PORT` (an IPv6 address in brackets).
pub fn parse_bind(text: &str) -> Result<SocketAddr, ServerError> {
    text.parse()
        .map_err(|_| ServerError::BadBind(text.to_string()))
}

/// `--client-query-buffer-limit`: a positive size in Redis's syntax (`64mb`, `1gb`).
pub fn parse_query_buffer_limit(text: &str) -> Result<usize, ServerError> {
    crate::limits::parse_memory(text)
        .filter(|&n| n > 0)
        .ok_or_else(|| ServerError::BadQueryBufferLimit(text.to_string()))
}

impl cxltier_error::Classify for ServerError {
    fn class(&self) -> cxltier_error::Class {
        use cxltier_error::Class;
        match self {
            ServerError::Bind { source, .. } => match source.kind() {
                io::ErrorKind::PermissionDenied => Class::Permission,
                // The address is not one of this host's: the --bind given is wrong.
                io::ErrorKind::AddrNotAvailable => Class::BadInput,
                _ if source.raw_os_error() == Some(libc::EAFNOSUPPORT) => Class::Unsupported,
                // In use and the rest: the address is fine, the host's state is not.
                _ => Class::Runtime,
            },
            ServerError::Databases(_)
            | ServerError::Setting { .. }
            | ServerError::AclFile(_)
            | ServerError::BadBind(_)
            | ServerError::BadQueryBufferLimit(_) => Class::BadInput,
            _ => Class::Runtime,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            ServerError::TooFewOpenFiles { .. } => {
                Some("raise it: ulimit -n 65536 (or LimitNOFILE= in a systemd unit)".into())
            }
            ServerError::BadBind(text) => Some(
                if text.matches(':').count() > 1 && !text.starts_with('[') {
                    "an IPv6 address goes in brackets: --bind [::1]:6379"
                } else {
                    "for example --bind 127.0.0.1:6379, or --bind [::1]:6379 for IPv6"
                }
                .into(),
            ),
            ServerError::BadQueryBufferLimit(_) => Some("for example 64mb, 512mb or 1gb".into()),
            _ => None,
        }
    }
}

struct Conn {
    stream: TcpStream,
    /// Registered for writable events too: only while replies wait for room in the socket.
    /// (Registered for both all the time, every ACK of a reply put the connection on epoll's
    /// ready list, where a later request of it was reported before an earlier one of another
    /// client: arrival order was lost.)
    wants_writable: bool,
    /// For log lines.
    peer: Option<SocketAddr>,
    /// The socket may have bytes not read yet (epoll is edge-triggered: no new event comes for
    /// them, so a connection not read because of its limits is read again once it has room).
    readable: bool,
    /// The command being received, as far as it was parsed.
    parser: Parser,
    /// Parsing stopped with input left (queue full, or one command at a time before AUTH): it
    /// resumes once commands have run, without waiting for an event.
    more: bool,
    /// Since when its unread replies have been at or above the soft limit.
    over_soft_since: Option<Instant>,
    input: Vec<u8>,
    /// Replies; the first `sent` bytes are written already.
    output: Vec<u8>,
    sent: usize,
    session: Session,
    /// Close once the output is written.
    closing: bool,
    /// Peer closed or the socket failed.
    dead: bool,
    /// A protocol error was met: nothing more is parsed.
    broken: bool,
    /// QUIT ran: what is still queued is dropped.
    quit: bool,
    /// Parsed commands not run yet, in order; their ranges index `input`.
    queue: VecDeque<Pending>,
    /// Bytes of `input` parsed onto `queue`.
    parsed: usize,
    /// Parked by a blocking command that found nothing: its commands behind wait.
    parked: Option<Parked>,
    /// Held by CLIENT PAUSE: its next command runs again when the pause ends.
    paused: bool,
    /// The connection is a replica (SYNC/PSYNC): its snapshot, then the write stream.
    replica: Option<ReplicaLink>,
}

/// A replica's connection: the snapshot being sent (after the replies before it), and the
/// stream held until the snapshot is out.
struct ReplicaLink {
    snapshot: Option<SnapshotSend>,
    /// Stream bytes produced while the snapshot is sent: they follow it.
    held: Vec<u8>,
    /// The stream offset up to which it was given the stream.
    fed: u64,
    /// Its snapshot went out whole (it is `online`).
    online: bool,
}

/// A snapshot going out through a socket in pieces: bounded memory whatever its size.
struct SnapshotSend {
    source: crate::context::Snapshot,
    /// Bytes of the snapshot written to the socket.
    sent: u64,
    /// A piece read from the file, and how much of it is written.
    piece: Vec<u8>,
    piece_at: usize,
}

impl SnapshotSend {
    fn remaining(&self) -> u64 {
        self.source.len() - self.sent
    }

    /// Write what the socket takes. `Ok(true)` when all of it is out.
    fn write_to(&mut self, stream: &mut TcpStream) -> io::Result<bool> {
        use std::io::Read as _;
        loop {
            let remaining = self.remaining();
            if remaining == 0 {
                return Ok(true);
            }
            let bytes: &[u8] = match &mut self.source {
                crate::context::Snapshot::Memory(v) => &v[self.sent as usize..],
                crate::context::Snapshot::File(f, _) => {
                    if self.piece_at == self.piece.len() {
                        self.piece.resize(READ_CHUNK, 0);
                        let want = (remaining as usize).min(READ_CHUNK);
                        let n = loop {
                            match f.read(&mut self.piece[..want]) {
                                Ok(n) => break n,
                                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                                Err(e) => return Err(e),
                            }
                        };
                        if n == 0 {
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "the snapshot file ended before its length",
                            ));
                        }
                        self.piece.truncate(n);
                        self.piece_at = 0;
                    }
                    &self.piece[self.piece_at..]
                }
            };
            match stream.write(bytes) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.sent += n as u64;
                    if matches!(self.source, crate::context::Snapshot::File(..)) {
                        self.piece_at += n;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// A blocking command waiting for one of its keys to be written.
struct Parked {
    args: Vec<Vec<u8>>,
    keys: Vec<Vec<u8>>,
    deadline: Option<Instant>,
    /// When it blocked, in the server's order: clients blocked on one key are served first come
    /// first served.
    seq: u64,
    /// WAIT: the stream offset and how many replicas must acknowledge it.
    wait: Option<(u64, u64)>,
}

impl Conn {
    /// The output buffer limits of this connection: Redis's pubsub class once it subscribes.
    fn output_limit(&self, limits: &Limits) -> OutputBufferLimit {
        if self.unauthenticated(limits) {
            // Its replies are NOAUTH lines: a client that does not read them stops being
            // served (and read) after a few thousand, and is closed soon after.
            OutputBufferLimit {
                hard: UNAUTHENTICATED_OUTPUT_HARD.min(limits.output.hard),
                soft: UNAUTHENTICATED_OUTPUT_SOFT.min(limits.output.soft),
                soft_seconds: limits.output.soft_seconds,
            }
        } else if self.replica.is_some() {
            crate::limits::REPLICA_OUTPUT_LIMIT
        } else if self.session.subscribed() {
            crate::limits::PUBSUB_OUTPUT_LIMIT
        } else {
            limits.output
        }
    }

    /// Drop the first `executed` bytes of the input (the commands that ran); what is still
    /// queued moves down with it. After a protocol error, once its reply is queued no more,
    /// the rest of the input goes too.
    fn consume(&mut self, executed: usize) {
        if executed > 0 {
            self.input.drain(..executed);
            self.parsed -= executed;
            for p in &mut self.queue {
                p.end -= executed;
                for r in &mut p.args {
                    *r = r.start - executed..r.end - executed;
                }
            }
        }
        if self.broken && self.queue.is_empty() {
            self.input.clear();
            self.parsed = 0;
        }
    }

    /// A password is set and this connection has not given it.
    fn unauthenticated(&self, limits: &Limits) -> bool {
        limits.password && !self.session.authed
    }

    /// Reply bytes not written to the socket yet (for a replica, the stream held behind its
    /// snapshot too; the snapshot itself is not counted, as Redis counts only the buffer).
    fn unsent(&self) -> usize {
        self.output.len() - self.sent + self.replica.as_ref().map_or(0, |r| r.held.len())
    }

    /// Anything left to write: replies, or a replica's snapshot.
    fn wants_write(&self) -> bool {
        self.unsent() > 0 || self.replica.as_ref().is_some_and(|r| r.snapshot.is_some())
    }
}

/// One parsed command waiting on its connection's queue: its arguments' ranges in the
/// connection's input, and where in the input it ends.
struct Pending {
    args: Vec<std::ops::Range<usize>>,
    /// A protocol error at this point of the stream: reply with it, then close.
    error: Option<String>,
    end: usize,
    /// All its device reads were begun (or found unneeded) in an earlier turn: not looked at
    /// again.
    reads_begun: bool,
    /// When it was parsed, in the server's order: reads begin oldest command first.
    seq: u64,
}

/// Listen on `addr`. Separate from [`serve_on`] so that a caller can say it listens only once
/// it does, and open the store only when the port is its own.
pub fn bind(addr: SocketAddr) -> Result<std::net::TcpListener, ServerError> {
    let example = match addr {
        SocketAddr::V4(a) => format!("{}:PORT", a.ip()),
        SocketAddr::V6(a) => format!("[{}]:PORT", a.ip()),
    };
    let listener = std::net::TcpListener::bind(addr).map_err(|source| ServerError::Bind {
        addr,
        hint: match source.kind() {
            io::ErrorKind::AddrInUse => format!(
                " (the port is in use: stop what listens there, e.g. a redis-server, or pick another with --bind {example})"
            ),
            io::ErrorKind::PermissionDenied => " (ports below 1024 need root: pick a port above 1024)".into(),
            io::ErrorKind::AddrNotAvailable if addr.is_ipv6() => " (no interface has this IPv6 address, or IPv6 is disabled: use [::1] for the loopback, an address `ip -6 addr` lists, or 127.0.0.1)".into(),
            io::ErrorKind::AddrNotAvailable => " (no interface has this address: use 127.0.0.1 or an address of this host)".into(),
            // The kernel has no IPv6 (disabled at boot or built without it).
            _ if source.raw_os_error() == Some(libc::EAFNOSUPPORT) => " (this host has no IPv6: use an IPv4 address such as 127.0.0.1)".into(),
            _ => String::new(),
        },
        source,
    })?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Run the server until SHUTDOWN or until `stop` is set (by a signal handler). Closes the store
/// cleanly on the way out.
pub fn serve(cfg: ServerConfig, store: Store, stop: Arc<AtomicBool>) -> Result<(), ServerError> {
    let listener = bind(cfg.bind)?;
    serve_on(listener, cfg, store, stop)
}

/// [`serve`] on a listener from [`bind`].
pub fn serve_on(
    listener: std::net::TcpListener,
    cfg: ServerConfig,
    mut store: Store,
    stop: Arc<AtomicBool>,
) -> Result<(), ServerError> {
    listener.set_nonblocking(true)?;
    let mut listener = TcpListener::from_std(listener);
    let poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let dbs =
        crate::db::Databases::load(&mut store, cfg.databases).map_err(ServerError::Databases)?;
    let mut scripts = crate::lua::Scripts::default();
    crate::functions::recover(&mut store, &mut scripts).map_err(ServerError::Functions)?;
    let mut info = ServerInfo {
        scripts,
        dbs,
        port: listener.local_addr()?.port(),
        bind: cfg.bind.ip().to_string(),
        requirepass: cfg.requirepass.clone(),
        started: Some(Instant::now()),
        last_save: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        max_object: store.max_object(),
        run_id: run_id(),
        snapshot_dir: cfg.snapshot_dir.clone(),
        ..ServerInfo::default()
    };
    // The configuration file's parameters first (`acl-pubsub-default` decides how the users
    // below start), as Redis reads its whole file before it loads users.
    for s in &cfg.settings {
        crate::dispatch::apply_setting_at_start(&mut store, &mut info, &s.name, &s.value).map_err(
            |why| ServerError::Setting {
                origin: s.origin.clone(),
                name: s.name.clone(),
                value: s.value.clone(),
                why,
            },
        )?;
    }
    // Redis's words, which scripts and test harnesses written for redis-server wait for.
    cfg.log.write("Ready to accept connections");
    // `requirepass` is the default user's password, as in Redis.
    let pass = cfg.requirepass.as_deref().map(str::as_bytes);
    info.acl
        .users_mut()
        .set_default_password(table::COMMANDS.acl(), pass);
    // The ACL file's users, the default one included when it names it (Redis loads it after
    // `requirepass`).
    if let Some(path) = &cfg.acl_file {
        let all_channels = info.config_value("acl-pubsub-default") == "allchannels";
        let next = info.acl.users.next_id();
        let users = crate::acl::load_file(path, table::COMMANDS.acl(), all_channels, next)
            .map_err(ServerError::AclFile)?;
        info.acl.users = Arc::new(users);
        info.knobs
            .store("aclfile", path.to_string_lossy().into_owned());
    }
    // The configuration file's `user` lines (Redis refuses them beside an ACL file).
    if !cfg.users.is_empty() {
        if let Some(path) = &cfg.acl_file {
            return Err(ServerError::AclFile(format!(
                "{}: user lines in the configuration file and an ACL file ({}) at once: Redis refuses this too; keep the users in one of them",
                cfg.users[0].1,
                path.display()
            )));
        }
        let all_channels = info.config_value("acl-pubsub-default") == "allchannels";
        for (words, origin) in &cfg.users {
            let (name, rules) = words.split_first().expect("a user line names its user");
            let rules: Vec<&[u8]> = rules.iter().map(|r| r.as_bytes()).collect();
            info.acl
                .users_mut()
                .set_user(table::COMMANDS.acl(), name.as_bytes(), &rules, all_channels)
                .map_err(|e| ServerError::AclFile(format!("{origin}: user {name}: {e}")))?;
        }
    }
    let max_bulk = store.max_object().saturating_add(BULK_MARGIN);
    let mut limits = Limits {
        password: info.acl.users.auth_required(),
        max_bulk,
        // The bulk data of the command being received come on top (see `input_limit`): a
        // 512 MB SET arrives under the default limit, and a pipeline is held to it.
        query: cfg.client_query_buffer_limit,
        output: cfg.client_output_buffer_limit,
        max_clients: cfg.max_clients,
    };
    info.max_clients = limits.max_clients;
    info.proto_max_bulk_len = limits.max_bulk;
    info.client_query_buffer_limit = limits.query;
    info.client_output_buffer_limit = (
        limits.output.hard,
        limits.output.soft,
        limits.output.soft_seconds,
    );
    let mut log = RateLimitedLog::default().with_sink(cfg.log.clone());
    let mut quarantine = cfg
        .quarantine_file
        .as_ref()
        .map(|p| QuarantineFollower::new(p, &mut info.poison).with_log(cfg.log.clone()));
    let mut metrics = cfg.metrics.clone().map(crate::metrics::Publisher::new);
    let mut conns: HashMap<Token, Conn> = HashMap::new();
    let mut roster = Roster::default();
    let mut events = Events::with_capacity(1024);
    let mut last_tick = Instant::now();
    let mut last_sample = last_tick;
    let mut buf = vec![0u8; READ_CHUNK];
    let mut shutdown = false;

    // Device read completions wake the loop like sockets do (an eventfd the ring signals), for
    // when it has nothing to do but wait: it sleeps in one epoll_wait until a request or a
    // read's data arrives. Blocking in the ring for a completion instead left requests that
    // arrived meanwhile unparsed and their reads unbegun for a read's time.
    if let Some(fd) = store.read_completion_fd() {
        poll.registry()
            .register(&mut SourceFd(&fd), COMPLETIONS, Interest::READABLE)?;
    }
    let net = Rc::new(RefCell::new(Net {
        poll,
        listener,
        next_token: 0,
        spare_fd: std::fs::File::open("/dev/null").ok(),
    }));
    let busy_mode = BusyMode {
        net: net.clone(),
        stop: stop.clone(),
        log: cfg.log.clone(),
    };
    let mut idle = false;
    // Commands parsed so far: each queued command's place in arrival order.
    let mut parsed = 0u64;
    // Reused each turn: the order connections are read and served in (see below).
    let mut order: Vec<(u64, Token)> = Vec::new();
    let mut turn: Vec<Token> = Vec::new();
    let mut seen: hashbrown::HashSet<Token> = hashbrown::HashSet::new();
    let mut looked: Vec<Token> = Vec::new();
    let mut gone: Vec<Token> = Vec::new();
    let mut lingering: Vec<Lingering> = Vec::new();
    while !shutdown && !stop.load(Ordering::Relaxed) {
        // CONFIG SET proto-max-bulk-len and requirepass may have changed them.
        limits.max_bulk = info.proto_max_bulk_len;
        limits.password = info.acl.users.auth_required();
        // With device reads in flight or commands queued, only look at the sockets (the reads
        // are collected and the commands run below) unless the last turn found nothing to do:
        // waking from a sleep costs more than a turn on this path, so the loop keeps its CPU
        // while work is coming in. Connections held back by their limits count too: they go
        // on without a new event (the roster's active ones).
        let busy = !idle && (store.reads_in_flight() > 0 || !roster.active.is_empty());
        let timeout = if busy {
            Duration::ZERO
        } else {
            // A pause's end is a deadline too: the clients it holds run then.
            let pause_end = info
                .pause
                .filter(|_| !info.paused.is_empty())
                .map(|p| p.until);
            let nearest = info
                .blocked
                .iter()
                .filter_map(|id| conns.get(roster.by_id.get(id)?)?.parked.as_ref()?.deadline)
                .chain(pause_end)
                .min()
                .map_or(TICK, |d| d.saturating_duration_since(Instant::now()));
            TICK.saturating_sub(last_tick.elapsed())
                .min(nearest)
                .max(Duration::from_millis(1))
        };
        let had_events = {
            let mut n = net.borrow_mut();
            if let Err(e) = n.poll.poll(&mut events, Some(timeout)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e.into());
            }
            let mut adm = Admissions::start(&info);
            for ev in events.iter() {
                if ev.token() == COMPLETIONS {
                    // The reads are collected below.
                    store.clear_read_signal();
                    continue;
                }
                if ev.token() == LISTENER {
                    accept(&mut n, &mut conns, &mut adm, &mut log);
                    continue;
                }
                if ev.is_writable() {
                    if let Some(c) = conns.get_mut(&ev.token()) {
                        flush(c);
                    }
                }
                if ev.is_readable() || ev.is_read_closed() {
                    if let Some(c) = conns.get_mut(&ev.token()) {
                        c.readable = true;
                    }
                }
            }
            adm.finish(&mut info, &mut roster);
            !events.is_empty()
        };
        wake_paused(&mut info, &mut conns, &mut roster);
        // Read all that is there, from each connection within its limits; parse every complete
        // command onto its connection's queue, up to the queue's limit.
        // In the order epoll reported them (Redis's order), after the connections with
        // commands left from earlier turns (oldest first); then the others with work left
        // (held back by their limits, or just accepted). Commands run in this order too: a
        // client's command that arrived first runs first (a PUNSUBSCRIBE before another
        // client's PUBLISH, a blocking pop before the push that feeds it). Only these are
        // looked at: an idle connection costs a turn nothing.
        order.clear();
        order.extend(
            roster
                .active
                .iter()
                .filter_map(|&t| Some((conns.get(&t)?.queue.front()?.seq, t))),
        );
        order.sort_unstable();
        turn.clear();
        turn.extend(order.iter().map(|&(_, t)| t));
        turn.extend(
            events
                .iter()
                .map(|e| e.token())
                .filter(|t| conns.contains_key(t)),
        );
        turn.extend(roster.active.iter().copied());
        seen.clear();
        turn.retain(|t| seen.insert(*t));
        for &t in &turn {
            let Some(c) = conns.get_mut(&t) else {
                continue;
            };
            if c.readable && has_room(c, &limits) {
                read_all(c, &mut buf, input_limit(c, &limits));
            }
            parse_into_queue(c, &mut parsed, &limits, &mut info, &mut log);
        }
        // Collect the device reads that finished, then begin those the queued commands need, up
        // to the store's NVMe queue depth, oldest command first (collecting first frees room in
        // the queue for this turn). A command is looked at until all its reads have begun: the
        // index lookups this takes are paid once per command unless the queue is full.
        if let Err(e) = store.reap_reads(false) {
            if let Some(line) = log.line(
                "reap",
                Instant::now(),
                &format!("collecting NVMe reads failed (the commands will read one by one): {e}"),
            ) {
                log.emit(&line);
            }
        }
        if store.has_nvme() {
            let mut keys: Vec<(u64, Vec<u8>)> = Vec::new();
            for c in turn.iter().filter_map(|t| conns.get(t)) {
                for p in c.queue.iter().filter(|p| !p.reads_begun) {
                    read_keys(&c.input, &c.session, &info.dbs, &p.args, |k| {
                        keys.push((p.seq, k))
                    });
                }
            }
            if !keys.is_empty() {
                keys.sort_by_key(|&(seq, _)| seq);
                let keys: Vec<&[u8]> = keys.iter().map(|(_, k)| k.as_slice()).collect();
                if let Err(e) = store.start_reads(&keys) {
                    if let Some(line) = log.line(
                        "start-reads",
                        Instant::now(),
                        &format!(
                            "NVMe reads could not begin (the commands will read one by one): {e}"
                        ),
                    ) {
                        log.emit(&line);
                    }
                }
                for &t in &turn {
                    let Some(c) = conns.get_mut(&t) else {
                        continue;
                    };
                    for p in c.queue.iter_mut().filter(|p| !p.reads_begun) {
                        let mut unstarted = false;
                        let exec = read_keys(&c.input, &c.session, &info.dbs, &p.args, |k| {
                            unstarted = unstarted || store.read_unstarted(&k)
                        });
                        // An EXEC is looked at again each turn: the commands queued ahead of
                        // it in the same pipeline join its transaction only as they run.
                        p.reads_begun = !unstarted && !exec;
                    }
                }
            }
        }
        roster.touched.extend(turn.iter().copied());
        let ran = run_ready(
            &mut store,
            &mut info,
            &mut conns,
            &mut roster,
            &turn,
            &mut shutdown,
            &limits,
            &mut log,
            &busy_mode,
        );
        store.end_batch();
        // CLIENT UNPAUSE may have run: the clients it held run in the next turn.
        wake_paused(&mut info, &mut conns, &mut roster);
        deliver_messages(&mut info, &mut conns, &mut roster, &limits, &mut log);
        deliver_monitor_lines(&mut info, &mut conns, &mut roster, &limits, &mut log);
        feed_replicas(&mut info, &mut conns, &mut roster, &mut log);
        // CLIENT KILL: the connections named close once what they were sent is written.
        for id in std::mem::take(&mut info.kill) {
            let Some(&t) = roster.by_id.get(&id) else {
                continue;
            };
            if let Some(c) = conns.get_mut(&t) {
                c.quit = true;
                c.closing = true;
                c.queue.clear();
                roster.touched.insert(t);
            }
        }
        // Replies go out after the commit. A client whose unread replies stay over the soft
        // limit too long is closed; buffers that grew for one big request are given back.
        let now = Instant::now();
        looked.clear();
        if std::mem::take(&mut roster.all) {
            looked.extend(conns.keys().copied());
            roster.touched.clear();
        } else {
            looked.extend(roster.touched.drain());
            looked.extend(roster.over_soft.iter().copied());
        }
        let registry = net.borrow();
        gone.clear();
        for &t in &looked {
            let Some(c) = conns.get_mut(&t) else {
                continue;
            };
            if c.wants_write() {
                flush(c);
            }
            if let Some(link) = c.replica.as_mut() {
                if link.snapshot.is_none() && !link.online {
                    // The snapshot is out: the replica follows the stream from here.
                    link.online = true;
                    if let Some(r) = info.repl.replicas.get_mut(&c.session.id) {
                        r.online = true;
                        r.ack_time = now;
                    }
                }
            }
            watch_writable(c, t, registry.poll.registry());
            info.client_peak_input_buffer = info.client_peak_input_buffer.max(c.input.capacity());
            info.client_peak_output_buffer =
                info.client_peak_output_buffer.max(c.output.capacity());
            check_soft_limit(c, now, &limits, &mut info, &mut log);
            if c.over_soft_since.is_some() {
                roster.over_soft.insert(t);
            } else {
                roster.over_soft.remove(&t);
            }
            if c.output.is_empty() && c.output.capacity() > BUFFER_KEEP {
                c.output = Vec::with_capacity(BUFFER_INITIAL);
            }
            if c.input.len() <= BUFFER_INITIAL && c.input.capacity() > BUFFER_KEEP {
                c.input.shrink_to(BUFFER_INITIAL);
            }
            if c.dead || (c.closing && c.output.is_empty() && c.queue.is_empty()) {
                gone.push(t);
            } else if needs_turn(c, &limits) {
                roster.active.insert(t);
            } else {
                roster.active.remove(&t);
            }
        }
        info.eventloop_cycles += 1;
        info.eventloop_connections_visited += (turn.len() + looked.len()) as u64;
        for t in gone.drain(..) {
            let Some(mut c) = conns.remove(&t) else {
                continue;
            };
            roster.forget(t, c.session.id);
            info.clients.remove(&c.session.id);
            info.blocked.remove(&c.session.id);
            info.paused.remove(&c.session.id);
            info.unwatch(&mut c.session);
            info.drop_subscriptions(&mut c.session);
            info.tracking.disable(c.session.id);
            info.repl.replicas.remove(&c.session.id);
            info.monitors.remove(c.session.id);
            // Closed by the server with the peer still there: linger (its output is shut, so
            // the client sees the end of the replies at once).
            if !c.dead
                && lingering.len() < LINGER_SOCKETS
                && c.stream.shutdown(std::net::Shutdown::Write).is_ok()
            {
                lingering.push(Lingering {
                    stream: c.stream,
                    until: now + LINGER,
                    left: LINGER_BYTES,
                });
            } else {
                let _ = registry.poll.registry().deregister(&mut c.stream);
            }
        }
        if !lingering.is_empty() {
            let now = Instant::now();
            lingering.retain_mut(|l| {
                let close = l.drain(&mut buf, now);
                if close {
                    let _ = registry.poll.registry().deregister(&mut l.stream);
                }
                !close
            });
        }
        drop(registry);
        info.connected_clients = conns.len();
        if let Some(m) = metrics.as_mut().filter(|m| m.due(now)) {
            m.publish(|cost| crate::metrics::render(&store.quick_stats(), &info, cost));
        }
        // Its own clock: background work's tick also runs whenever a turn ran nothing.
        if last_sample.elapsed() >= TICK {
            last_sample = Instant::now();
            info.sample_ops(last_sample);
        }
        if ran == 0 || last_tick.elapsed() >= TICK {
            // The store's active expiry removes keys in tick and nothing else there does:
            // the drop in the key count is what it expired.
            let keys_before = store.len();
            let ticked = store.tick();
            info.expired_keys += keys_before.saturating_sub(store.len());
            // Keys expired in the background are announced (`expired`) at once: a subscriber
            // need not wait for another client's command to hear of them.
            crate::dispatch::announce_expired(&mut store, &mut info, false);
            let events = info.notify.take();
            if !events.is_empty() {
                crate::dispatch::publish(&mut info, &events, None, 2, &mut Vec::new());
            }
            if !events.is_empty() || !info.tracking.clients.is_empty() {
                crate::dispatch::limit_tracking(&mut info);
                deliver_messages(&mut info, &mut conns, &mut roster, &limits, &mut log);
            }
            if let Err(e) = ticked {
                if let Some(line) = log.line(
                    "tick",
                    Instant::now(),
                    &format!("background work failed: {e}"),
                ) {
                    log.emit(&line);
                }
            }
            if let Some(q) = quarantine.as_mut() {
                q.tick(&mut store, &mut info.poison, &info.dbs);
            }
            replication_tick(&mut store, &mut info);
            if !info.migrate_sockets.is_empty() {
                crate::migrate::close_idle(&mut info.migrate_sockets, Instant::now());
            }
            feed_replicas(&mut info, &mut conns, &mut roster, &mut log);
            // What this gave the subscribers and replicas goes out now; the next turn looks
            // at them again (limits, closing).
            for t in &roster.touched {
                if let Some(c) = conns.get_mut(t) {
                    if c.wants_write() {
                        flush(c);
                    }
                }
            }
            last_tick = Instant::now();
        }
        // Nothing could run and nothing arrived: the next poll sleeps until a socket or a
        // device read has something.
        idle = ran == 0 && !had_events;
    }
    for c in conns.values_mut() {
        flush(c);
    }
    store.close()?;
    Ok(())
}

/// Ask for writable events only while replies wait for room in the socket (see
/// [`Conn::wants_writable`]).
fn watch_writable(c: &mut Conn, t: Token, registry: &mio::Registry) {
    let wants = c.wants_write();
    if wants != c.wants_writable {
        let interest = if wants {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        match registry.reregister(&mut c.stream, t, interest) {
            Ok(()) => c.wants_writable = wants,
            // The socket is gone: its next read or write finds out and closes it.
            Err(_) => c.dead = true,
        }
    }
}

/// Whether `c` has work for a later turn that no socket event will announce: queued commands
/// that may run (not parked, replies not held back by the soft limit: those resume at the
/// event that frees them) or input left unread for its limits once there is room.
fn needs_turn(c: &Conn, limits: &Limits) -> bool {
    !c.dead
        && ((c.parked.is_none()
            && !c.paused
            && (!c.queue.is_empty() || c.more)
            && c.unsent() < c.output_limit(limits).soft)
            || (c.readable && has_room(c, limits)))
}

/// Which connections a turn must look at, so that a turn costs what the connections with
/// something to do cost, not what all of them do (thousands may be idle).
#[derive(Default)]
struct Roster {
    /// Session id to token: for the work addressed to a client by id (pub/sub messages,
    /// replicas, parked clients, CLIENT KILL).
    by_id: HashMap<u64, Token>,
    /// Connections with work left for a later turn without a new event ([`needs_turn`]).
    active: hashbrown::HashSet<Token>,
    /// Connections this turn touched: looked at after it (replies flushed, limits checked,
    /// closed when done).
    touched: hashbrown::HashSet<Token>,
    /// Connections whose unread replies are over the soft limit: looked at every turn until
    /// they read them or their time is up.
    over_soft: hashbrown::HashSet<Token>,
    /// Look at every connection after this turn (a busy script served them all).
    all: bool,
}

impl Roster {
    fn forget(&mut self, t: Token, id: u64) {
        self.by_id.remove(&id);
        self.active.remove(&t);
        self.touched.remove(&t);
        self.over_soft.remove(&t);
    }
}

/// 40 hex digits that differ from one start to the next (INFO's run_id): the process id and
/// the start time, hashed.
fn run_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut id = String::with_capacity(40);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let state = std::collections::hash_map::RandomState::new();
    for i in 0..3u64 {
        let mut h = state.build_hasher();
        h.write_u64(now ^ u64::from(std::process::id()) ^ i);
        id.push_str(&format!("{:016x}", h.finish()));
    }
    id.truncate(40);
    id
}

/// A connection's limits, from the server's settings.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// A password is set (`--requirepass`, `CONFIG SET requirepass`): connections that have not
    /// authenticated are held to the unauthenticated limits.
    password: bool,
    max_bulk: usize,
    query: usize,
    output: OutputBufferLimit,
    max_clients: usize,
}

/// Hand the replicas the stream produced since they were last fed (each from the offset it
/// has), after a snapshot still being sent or into its output. A replica whose held stream
/// reaches the hard limit of the replica class is dropped, with a line in the log.
fn feed_replicas(
    info: &mut ServerInfo,
    conns: &mut HashMap<Token, Conn>,
    roster: &mut Roster,
    log: &mut RateLimitedLog,
) {
    if info.repl.want_acks && !info.repl.replicas.is_empty() {
        // WAIT is parked: ask the replicas how far they are (Redis's REPLCONF GETACK *).
        info.repl.want_acks = false;
        info.repl
            .emit_raw(&[b"REPLCONF".to_vec(), b"GETACK".to_vec(), b"*".to_vec()]);
    }
    if info.repl.pending.is_empty() {
        return;
    }
    let pending = std::mem::take(&mut info.repl.pending);
    let offset = info.repl.offset;
    let base = offset - pending.len() as u64;
    let replicas: Vec<Token> = info
        .repl
        .replicas
        .keys()
        .filter_map(|id| roster.by_id.get(id).copied())
        .collect();
    for t in replicas {
        let Some(c) = conns.get_mut(&t) else {
            continue;
        };
        let Some(link) = c.replica.as_mut() else {
            continue;
        };
        if c.dead || link.fed >= offset {
            continue;
        }
        roster.touched.insert(t);
        let bytes = &pending[link.fed.saturating_sub(base) as usize..];
        if link.snapshot.is_some() {
            link.held.extend_from_slice(bytes);
        } else {
            c.output.extend_from_slice(bytes);
        }
        link.fed = offset;
        let hard = crate::limits::REPLICA_OUTPUT_LIMIT.hard;
        if c.unsent() >= hard {
            let text = format!(
                "dropped replica {}: {} bytes of the write stream unsent, over the client-output-buffer-limit replica hard limit of {hard} bytes (the replica must keep up; it can attach again with SYNC/PSYNC)",
                peer(c),
                c.unsent(),
            );
            c.replica = None;
            close_over_limit(c, info, log, &text);
        }
    }
    // The buffer is kept for the next turn's bytes.
    let mut pending = pending;
    pending.clear();
    info.repl.pending = pending;
}

/// The replication work of the loop's tick: keys the store's sampling expired go into the
/// stream, each as its own `del` (Redis's active expiry), and the replicas get a PING every
/// `repl-ping-replica-period` seconds.
fn replication_tick(store: &mut Store, info: &mut ServerInfo) {
    if !info.repl.active {
        return;
    }
    crate::dispatch::drain_expired(store, info, false);
    let period = info.knobs.int("repl-ping-replica-period").max(1) as u64;
    // The first PING comes a period after replication began, as Redis's cron counts.
    let last = *info.repl.last_ping.get_or_insert_with(Instant::now);
    let due = last.elapsed() >= Duration::from_secs(period);
    if due && !info.repl.replicas.is_empty() {
        info.repl.emit_raw(&[b"PING".to_vec()]);
        info.repl.last_ping = Some(Instant::now());
    }
}

/// Move the messages PUBLISH left for other connections into their output buffers, each in its
/// subscriber's protocol. A subscriber whose unread replies reach the pubsub hard limit is
/// closed, as in Redis (its soft limit is checked with the others' after the turn).
fn deliver_messages(
    info: &mut ServerInfo,
    conns: &mut HashMap<Token, Conn>,
    roster: &mut Roster,
    limits: &Limits,
    log: &mut RateLimitedLog,
) {
    deliver_invalidations(info, conns, roster, limits, log);
    if info.pubsub.outbox.is_empty() {
        return;
    }
    let outbox = std::mem::take(&mut info.pubsub.outbox);
    for d in &outbox {
        push_to_client(
            d.to,
            conns,
            roster,
            limits,
            info,
            log,
            &PUBSUB_UNREAD,
            |c| crate::subscriptions::write_message(&mut c.output, c.session.proto, d),
        );
    }
}

/// What a connection closed for unread output had left unread, for the log line.
struct Unread {
    what: &'static str,
    limit: &'static str,
    hint: &'static str,
}

const PUBSUB_UNREAD: Unread = Unread {
    what: "pub/sub messages",
    limit: "pubsub client-output-buffer-limit",
    hint: " (the subscriber must read its messages)",
};
const MONITOR_UNREAD: Unread = Unread {
    what: "MONITOR lines",
    limit: "client-output-buffer-limit",
    hint: " (the monitor must read them)",
};
const INVALIDATIONS_UNREAD: Unread = Unread {
    what: "invalidation messages",
    limit: "client-output-buffer-limit",
    hint: "",
};

/// Append what `write` puts into the output of the live connection whose client id is `id`, and
/// mark it for the turn's writes; one whose unread output then reaches its class's hard limit is
/// closed, as Redis closes it, with a line in the log naming what it left unread.
#[allow(clippy::too_many_arguments)]
fn push_to_client(
    id: u64,
    conns: &mut HashMap<Token, Conn>,
    roster: &mut Roster,
    limits: &Limits,
    info: &mut ServerInfo,
    log: &mut RateLimitedLog,
    unread: &Unread,
    write: impl FnOnce(&mut Conn),
) {
    let Some(&t) = roster.by_id.get(&id) else {
        return;
    };
    let Some(c) = conns.get_mut(&t) else {
        return;
    };
    if c.dead {
        return;
    }
    roster.touched.insert(t);
    write(c);
    let hard = c.output_limit(limits).hard;
    if c.unsent() >= hard {
        let text = format!(
            "closed client {}: {} bytes of {} unread, over the {} hard limit of {hard} bytes{}",
            peer(c),
            c.unsent(),
            unread.what,
            unread.limit,
            unread.hint,
        );
        close_over_limit(c, info, log, &text);
    }
}

/// Append the lines of the commands this turn ran to each MONITOR connection's output; one
/// whose unread output reaches its hard limit is closed, as any client is.
fn deliver_monitor_lines(
    info: &mut ServerInfo,
    conns: &mut HashMap<Token, Conn>,
    roster: &mut Roster,
    limits: &Limits,
    log: &mut RateLimitedLog,
) {
    if info.monitors.is_empty() {
        return;
    }
    let lines = info.monitors.take();
    if lines.is_empty() {
        return;
    }
    for id in info.monitors.ids().to_vec() {
        push_to_client(id, conns, roster, limits, info, log, &MONITOR_UNREAD, |c| {
            c.output.extend_from_slice(&lines)
        });
    }
}

/// Move the client-side caching invalidations of the turn (BCAST's prefixes gathered first)
/// into the output buffers of the connections they go to (the tracking connection or its
/// redirection); they count toward its output buffer limit as pub/sub messages do.
fn deliver_invalidations(
    info: &mut ServerInfo,
    conns: &mut HashMap<Token, Conn>,
    roster: &mut Roster,
    limits: &Limits,
    log: &mut RateLimitedLog,
) {
    if info.tracking.clients.is_empty() {
        info.tracking.outbox.clear();
        return;
    }
    info.tracking.broadcast();
    if info.tracking.outbox.is_empty() {
        return;
    }
    let outbox = std::mem::take(&mut info.tracking.outbox);
    for inv in &outbox {
        let route = info.tracking.route(inv, |id| {
            let c = conns.get(roster.by_id.get(&id)?)?;
            (!c.dead).then_some(crate::tracking::Peer {
                proto: c.session.proto,
                subscribed: c.session.subscribed(),
            })
        });
        let crate::tracking::Route::Send { to, bytes } = route else {
            continue;
        };
        push_to_client(
            to,
            conns,
            roster,
            limits,
            info,
            log,
            &INVALIDATIONS_UNREAD,
            |c| c.output.extend_from_slice(&bytes),
        );
    }
}

/// The keys whose values a queued command reads (from the command table), for the NVMe reads
/// begun before it runs; for EXEC, those of every command its transaction queued, so that a
/// transaction runs only once all its data is at hand. Each key comes as the store keeps it,
/// with the byte of the database the connection has selected. Returns whether it was EXEC.
fn read_keys(
    input: &[u8],
    session: &Session,
    dbs: &crate::db::Databases,
    args: &[std::ops::Range<usize>],
    mut key: impl FnMut(Vec<u8>),
) -> bool {
    let physical = dbs.physical(session.db);
    let mut keyed = |k: &[u8]| key(crate::db::store_key(physical, k));
    let exec = args.len() == 1
        && table::COMMANDS
            .lookup(&input[args[0].clone()])
            .is_some_and(|c| c.has(crate::command::flag::TX_EXEC));
    if exec {
        for queued in session.multi.iter().flatten() {
            table::COMMANDS.for_each_read_key(queued.iter().map(Vec::as_slice), &mut keyed);
        }
    } else {
        table::COMMANDS.for_each_read_key(args.iter().map(|r| &input[r.clone()]), keyed);
    }
    exec
}

/// Whether `c` may be read: its unread replies are under the soft limit and its input under
/// the query buffer limit. Otherwise it is read again once it has room (backpressure: the
/// client's writes wait in the socket buffers).
fn has_room(c: &Conn, limits: &Limits) -> bool {
    !c.dead && c.unsent() < c.output_limit(limits).soft && c.input.len() < input_limit(c, limits)
}

/// The most input `c` may hold: the query buffer limit, and on top of it the bulk data that the
/// command being received announced, up to one bulk of proto-max-bulk-len. Redis's 1 GB limit
/// would let a client pipelining small commands hold 1 GB; this holds it to the limit (64 MB by
/// default) while one value of up to 512 MB still arrives whole.
/// A connection that has not authenticated (a password is set) holds at most
/// [`UNAUTHENTICATED_INPUT`].
fn input_limit(c: &Conn, limits: &Limits) -> usize {
    if c.unauthenticated(limits) {
        return UNAUTHENTICATED_INPUT;
    }
    limits
        .query
        .saturating_add(c.parser.bulk_bytes().min(limits.max_bulk))
}

/// Parse the complete commands of `c`'s input onto its queue, up to [`MAX_QUEUED`] (and one
/// at a time before AUTH, so that the limits of a command are those of its sender's state when
/// it runs). A command longer than the query buffer limit closes the connection.
fn parse_into_queue(
    c: &mut Conn,
    parsed: &mut u64,
    limits: &Limits,
    info: &mut ServerInfo,
    log: &mut RateLimitedLog,
) {
    c.more = false;
    if c.broken || c.quit || c.dead {
        return;
    }
    // CONFIG SET requirepass may set or clear the password while the server runs.
    let unauthenticated = info.acl.users.auth_required() && !c.session.authed;
    let parse_limits = resp::Limits {
        max_bulk: limits.max_bulk,
        unauthenticated,
    };
    let mut at = c.parsed;
    while at < c.input.len() {
        if c.queue.len() >= MAX_QUEUED || (unauthenticated && !c.queue.is_empty()) {
            c.more = true;
            break;
        }
        match parse_next(c, at, parse_limits, parsed, false) {
            Next::Queued(end) => at = end,
            Next::Partial | Next::Garbage => break,
        }
    }
    c.parsed = at;
    if !c.broken && c.queue.is_empty() && c.input.len() - c.parsed >= input_limit(c, limits) {
        // Nothing queued, so nothing will free room: this one command can never be whole.
        info.client_query_buffer_limit_disconnections += 1;
        let text = format!(
            "closed client {}: a command longer than the client-query-buffer-limit of {} bytes",
            peer(c),
            limits.query
        );
        if let Some(line) = log.line("query-limit", Instant::now(), &text) {
            log.emit(&line);
        }
        protocol_error(
            c,
            at,
            *parsed,
            format!(
                "ERR Protocol error: command longer than client-query-buffer-limit ({} bytes)",
                limits.query
            ),
        );
    }
}

/// What [`parse_next`] found at a point of a connection's input.
enum Next {
    /// A whole command, queued; the input position after it.
    Queued(usize),
    /// Not a whole command yet.
    Partial,
    /// Bytes that are no command: the protocol error is queued and the connection closes.
    Garbage,
}

/// Parse the command at `at` of `c`'s input onto its queue, numbered by `parsed` (which it
/// counts); `reads_begun` true where no device reads are begun ahead for it (a busy script's
/// answers).
fn parse_next(
    c: &mut Conn,
    at: usize,
    limits: resp::Limits,
    parsed: &mut u64,
    reads_begun: bool,
) -> Next {
    match c.parser.parse(&c.input[at..], limits) {
        Ok(Some(p)) => {
            let args = p
                .args
                .into_iter()
                .map(|r| r.start + at..r.end + at)
                .collect();
            let end = at + p.consumed;
            *parsed += 1;
            c.queue.push_back(Pending {
                args,
                error: None,
                end,
                reads_begun,
                seq: *parsed,
            });
            Next::Queued(end)
        }
        Ok(None) => Next::Partial,
        Err(e) => {
            // Commands before the garbage still run; then the error, then close: the stream
            // cannot be framed any more.
            protocol_error(c, at, *parsed, format!("ERR Protocol error: {}", e.0));
            Next::Garbage
        }
    }
}

/// Queue `msg` as the reply at this point of `c`'s stream, and close after it.
fn protocol_error(c: &mut Conn, at: usize, seq: u64, msg: String) {
    c.queue.push_back(Pending {
        args: Vec::new(),
        error: Some(msg),
        end: at,
        reads_begun: true,
        seq,
    });
    c.broken = true;
    c.closing = true;
}

fn peer(c: &Conn) -> String {
    c.peer
        .map(|p| p.to_string())
        .unwrap_or_else(|| "(unknown address)".into())
}

/// Close `c` now, its replies dropped, for the reason in `text` (logged, rate-limited).
fn close_over_limit(c: &mut Conn, info: &mut ServerInfo, log: &mut RateLimitedLog, text: &str) {
    c.output.clear();
    c.sent = 0;
    c.queue.clear();
    c.dead = true;
    info.client_output_buffer_limit_disconnections += 1;
    if let Some(line) = log.line("output-limit", Instant::now(), text) {
        log.emit(&line);
    }
}

/// Close `c` if its unread replies have stayed at or over the soft limit for the time allowed.
fn check_soft_limit(
    c: &mut Conn,
    now: Instant,
    limits: &Limits,
    info: &mut ServerInfo,
    log: &mut RateLimitedLog,
) {
    let limit = c.output_limit(limits);
    if c.dead || c.unsent() < limit.soft {
        c.over_soft_since = None;
        return;
    }
    let since = *c.over_soft_since.get_or_insert(now);
    let secs = limit.soft_seconds;
    if secs > 0 && now.saturating_duration_since(since) >= Duration::from_secs(secs) {
        let text = format!(
            "{} {}: {} bytes of {} for {secs} s, over the client-output-buffer-limit soft limit of {} bytes (the client must read its replies)",
            if c.replica.is_some() { "dropped replica" } else { "closed client" },
            peer(c),
            c.unsent(),
            if c.replica.is_some() { "write stream unsent" } else { "replies unread" },
            limit.soft
        );
        close_over_limit(c, info, log, &text);
    }
}

/// Run, connection by connection and in order, every queued command that need not wait for a
/// device read; commit once; return how many ran.
#[allow(clippy::too_many_arguments)]
fn run_ready(
    store: &mut Store,
    info: &mut ServerInfo,
    conns: &mut HashMap<Token, Conn>,
    roster: &mut Roster,
    order: &[Token],
    shutdown: &mut bool,
    limits: &Limits,
    log: &mut RateLimitedLog,
    busy_mode: &BusyMode,
) -> usize {
    let mut ran = 0;
    // Where each connection's replies of this turn start, and whether (and how often) it wrote,
    // in case the commit fails.
    let mut wrote: HashMap<Token, (bool, usize)> = HashMap::new();
    let mut starts: HashMap<Token, usize> = HashMap::new();
    // In the turn's order (see the loop): of two clients whose commands came in one turn,
    // the first to send runs first.
    for &t in order {
        if conns.get(&t).is_none_or(|c| c.queue.is_empty()) {
            continue;
        }
        // Out of the map while its commands run, so that a busy script can serve the others.
        let Some(mut conn) = conns.remove(&t) else {
            continue;
        };
        let c = &mut conn;
        let mut executed = 0;
        while let Some(p) = c.queue.front() {
            if c.quit {
                c.queue.clear();
                break;
            }
            // Parked by a blocking command: what follows it waits until it is answered.
            if c.parked.is_some() {
                break;
            }
            // Its client is not reading its replies: run nothing more of it until it does.
            if c.unsent() >= c.output_limit(limits).soft {
                break;
            }
            // Nothing can wait when no read is in flight (the common case in memory).
            if p.error.is_none() && store.reads_in_flight() > 0 {
                let mut wait = false;
                let exec = read_keys(&c.input, &c.session, &info.dbs, &p.args, |k| {
                    wait = wait || store.must_wait(&k)
                });
                // Inside MULTI a command is only queued: its data is needed by EXEC, which
                // waits for all of it.
                if wait && (exec || c.session.multi.is_none()) {
                    break;
                }
            }
            let p = c.queue.pop_front().expect("front exists");
            starts.entry(t).or_insert(c.output.len());
            let executed_before = executed;
            executed = p.end;
            ran += 1;
            let e = wrote.entry(t).or_insert((false, 0));
            e.1 += 1;
            if let Some(msg) = &p.error {
                reply::error(&mut c.output, msg);
                continue;
            }
            let input = std::mem::take(&mut c.input);
            let args: smallvec::SmallVec<[&[u8]; 8]> =
                p.args.iter().map(|r| &input[r.clone()]).collect();
            let before = c.output.len();
            c.session.input_pending = input.len() - executed_before;
            c.session.output_pending = c.unsent();
            // A script may run long: the other connections are then served in busy mode
            // from its instruction hook, so they leave the map for its run.
            // (An empty command, `*0`, is ignored by `execute`.)
            let busy = args
                .first()
                .and_then(|name| table::COMMANDS.lookup(name))
                .is_some_and(|c| c.has(crate::command::flag::SCRIPTS))
                .then(|| {
                    Rc::new(RefCell::new(BusyServe::new(
                        busy_mode,
                        std::mem::take(conns),
                        Admissions::start(info),
                        *limits,
                        info.acl.users.clone(),
                    )))
                });
            if let Some(b) = &busy {
                info.scripts.peers = Some(b.clone());
            }
            let effect =
                crate::dispatch::execute(store, info, &mut c.session, &args, &mut c.output);
            if let Some(b) = busy {
                info.scripts.peers = None;
                let mut b = b.borrow_mut();
                *conns = std::mem::take(&mut b.conns);
                std::mem::take(&mut b.adm).finish(info, roster);
                // It read, answered and closed connections the roster does not know of.
                roster.all |= b.served;
            }
            if std::mem::take(&mut info.shutdown_after_script) {
                *shutdown = true;
            }
            if effect == Effect::Postponed {
                // CLIENT PAUSE holds it: back at the head of its queue, with what follows it,
                // until the pause ends (`wake_paused`).
                drop(args);
                c.input = input;
                c.queue.push_front(p);
                executed = executed_before;
                ran -= 1;
                e.1 -= 1;
                c.paused = true;
                info.paused.insert(c.session.id);
                break;
            }
            if let Some(b) = c.session.block.take() {
                c.parked = Some(Parked {
                    args: b
                        .args
                        .unwrap_or_else(|| args.iter().map(|a| a.to_vec()).collect()),
                    keys: b.keys,
                    deadline: b.deadline,
                    seq: p.seq,
                    wait: b.wait,
                });
                info.blocked.insert(c.session.id);
            }
            drop(args);
            c.input = input;
            if let Some(start) = c.session.sync.take() {
                // The snapshot's bulk header goes after the replies before it (and PSYNC's
                // +FULLRESYNC); the snapshot follows it, with no CRLF after, as Redis sends it.
                c.output
                    .extend_from_slice(format!("${}\r\n", start.snapshot.len()).as_bytes());
                c.replica = Some(ReplicaLink {
                    snapshot: Some(SnapshotSend {
                        source: start.snapshot,
                        sent: 0,
                        piece: Vec::new(),
                        piece_at: 0,
                    }),
                    held: Vec::new(),
                    fed: start.offset,
                    online: false,
                });
            }
            // CLIENT REPLY OFF or SKIP: the command ran, its reply is not sent.
            if c.session.drop_reply() {
                c.session.drop_output_from(&mut c.output, before);
            }
            match effect {
                Effect::Wrote => e.0 = true,
                Effect::Close => {
                    c.closing = true;
                    c.quit = true;
                }
                Effect::Shutdown => *shutdown = true,
                Effect::Read | Effect::Postponed => {}
            }
            if c.unsent() >= c.output_limit(limits).hard {
                let text = format!(
                    "closed client {}: {} bytes of replies unread, over the client-output-buffer-limit hard limit of {} bytes (the client must read its replies; raise --client-output-buffer-limit for bigger ones)",
                    peer(c),
                    c.unsent(),
                    c.output_limit(limits).hard
                );
                close_over_limit(c, info, log, &text);
                break;
            }
        }
        // What CLIENT LIST shows of this connection to the others.
        if executed > 0 {
            if let Some(m) = info.clients.get_mut(&c.session.id) {
                m.update_from(&c.session);
                m.last_active = Instant::now();
                m.qbuf = c.input.len() - executed;
                m.omem = c.unsent();
            }
        }
        c.consume(executed);
        conns.insert(t, conn);
    }
    ran += serve_parked(store, info, conns, roster, &mut wrote, &mut starts);
    // The turn's last command's time ends here (its end is the start of the next otherwise).
    if info.timed.is_some() {
        info.close_command_time(context::now_us());
    }
    if ran == 0 {
        return 0;
    }
    if let Err(e) = store.commit() {
        // Nothing of this turn may be acknowledged as written: every reply of a connection that
        // wrote becomes the error.
        let msg = format!("ERR the write was not made durable: {e}");
        for (t, (did_write, replies)) in wrote {
            if !did_write {
                continue;
            }
            if let Some(c) = conns.get_mut(&t) {
                c.output.truncate(starts[&t]);
                for _ in 0..replies {
                    reply::error(&mut c.output, &msg);
                }
            }
        }
        if let Some(line) = log.line("commit", Instant::now(), &msg) {
            log.emit(&line);
        }
    }
    ran
}

/// What the loop lends the busy mode for a script's run: the sockets, the stop flag signals
/// set, and where to log.
struct BusyMode {
    net: Rc<RefCell<Net>>,
    stop: Arc<AtomicBool>,
    log: crate::ratelog::LogSink,
}

/// The other connections while a script runs. Its hook calls [`BusyPeers::tick`] every 100000
/// instructions: a signal that asks the server to stop is looked at each time, and once the
/// script is busy (past busy-reply-threshold) the sockets are polled: new connections are
/// accepted, and what the connections send is read and answered as Redis does then
/// ([`crate::dispatch::busy_command`]: BUSY to most commands; AUTH, HELLO, SCRIPT KILL,
/// SHUTDOWN NOSAVE, QUIT and the transaction's bookkeeping run). Bounded: each connection is
/// read up to its query buffer limit and not while its replies are unread past the soft limit;
/// nothing runs against the store. Each tick costs the connections that had an event, not all.
struct BusyServe {
    conns: HashMap<Token, Conn>,
    net: Rc<RefCell<Net>>,
    events: Events,
    adm: Admissions,
    limits: Limits,
    /// The ACL's users as the script found them (AUTH and HELLO are answered from them).
    users: Arc<crate::acl::Users>,
    stop: Arc<AtomicBool>,
    log: RateLimitedLog,
    /// A signal came while the script had written: the server stops when it ends; a second
    /// signal stops it now.
    stop_deferred: bool,
    /// The sockets were served (the loop then looks at every connection once).
    served: bool,
    /// Commands answered, for their queue entries' order.
    parsed: u64,
    /// Connections to look at in this tick (events, new ones; all of them at the first).
    due: Vec<Token>,
}

impl BusyServe {
    fn new(
        mode: &BusyMode,
        conns: HashMap<Token, Conn>,
        adm: Admissions,
        limits: Limits,
        users: Arc<crate::acl::Users>,
    ) -> BusyServe {
        BusyServe {
            conns,
            net: mode.net.clone(),
            events: Events::with_capacity(256),
            adm,
            limits,
            users,
            stop: mode.stop.clone(),
            log: RateLimitedLog::default().with_sink(mode.log.clone()),
            stop_deferred: false,
            served: false,
            parsed: 0,
            due: Vec::new(),
        }
    }

    /// SIGTERM or SIGINT while the script runs: a script that has not written is stopped
    /// (nothing of it is lost) and the server shuts down as the signal asked. One that has
    /// written runs to its end, since scripts are atomic, and the server stops then; a second
    /// signal stops it at once, as SHUTDOWN NOSAVE does.
    fn watch_signals(&mut self, run: &mut crate::lua::RunState) {
        if run.kill || !self.stop.swap(false, Ordering::Relaxed) {
            return;
        }
        run.shutdown = true;
        if !run.wrote || self.stop_deferred {
            run.kill_by_signal();
            let line = if run.wrote {
                "a second stop signal: the script that has written is stopped now, with what it wrote so far, and the server stops"
            } else {
                "stop signal: the running script (it has not written) is stopped and the server stops"
            };
            self.log.emit(line);
        } else {
            self.stop_deferred = true;
            self.log.emit("stop signal while a script that has written runs: the server stops when it ends (scripts are atomic); SHUTDOWN NOSAVE from a client, or a second signal, stops it now");
        }
    }

    /// Accept, read and answer: one zero-timeout poll, then the connections it reported.
    fn serve(&mut self, run: &mut crate::lua::RunState) {
        if !self.served {
            // The first tick looks at every connection: commands queued before the script,
            // input held back by limits, replies of commands that ran before it in its turn
            // (the loop writes those after the turn, which the script is holding up).
            self.served = true;
            self.due.extend(
                self.conns
                    .iter()
                    .filter(|(_, c)| c.readable || !c.queue.is_empty() || c.wants_write())
                    .map(|(&t, _)| t),
            );
        }
        let net = self.net.clone();
        let mut net = net.borrow_mut();
        match net.poll.poll(&mut self.events, Some(Duration::ZERO)) {
            Ok(()) => {}
            // Nothing read this time; the next tick polls again.
            Err(_) => self.events.clear(),
        }
        for ev in self.events.iter() {
            let t = ev.token();
            // Device reads finishing: collected by the loop after the script.
            if t == COMPLETIONS {
                continue;
            }
            if t == LISTENER {
                let before = self.adm.clients.len();
                accept(&mut net, &mut self.conns, &mut self.adm, &mut self.log);
                self.due
                    .extend(self.adm.clients[before..].iter().map(|&(_, t, _)| t));
                continue;
            }
            if let Some(c) = self.conns.get_mut(&t) {
                if ev.is_writable() {
                    flush(c);
                }
                if ev.is_readable() || ev.is_read_closed() {
                    c.readable = true;
                }
                self.due.push(t);
            }
        }
        let mut buf = vec![0u8; READ_CHUNK];
        let due = std::mem::take(&mut self.due);
        for t in due {
            let Some(c) = self.conns.get_mut(&t) else {
                continue;
            };
            if c.dead || c.broken || c.quit || c.parked.is_some() {
                continue;
            }
            if c.readable && has_room(c, &self.limits) {
                read_all(c, &mut buf, input_limit(c, &self.limits));
            }
            self.answer(t, run);
            if let Some(c) = self.conns.get_mut(&t) {
                flush(c);
                watch_writable(c, t, net.poll.registry());
            }
        }
    }

    /// Answer `t`'s queued commands and the complete ones in its input, one at a time (an AUTH
    /// changes the limits the next one is parsed with), until its replies reach the soft limit.
    fn answer(&mut self, t: Token, run: &mut crate::lua::RunState) {
        let Some(c) = self.conns.get_mut(&t) else {
            return;
        };
        let mut executed = 0;
        loop {
            if c.unsent() >= c.output_limit(&self.limits).soft {
                break;
            }
            if c.queue.is_empty() {
                if c.broken || c.parsed >= c.input.len() {
                    break;
                }
                let parse_limits = resp::Limits {
                    max_bulk: self.limits.max_bulk,
                    unauthenticated: self.users.auth_required() && !c.session.authed,
                };
                let at = c.parsed;
                match parse_next(c, at, parse_limits, &mut self.parsed, true) {
                    Next::Queued(end) => c.parsed = end,
                    Next::Partial => break,
                    // The error is queued: it is answered next, and the connection closes.
                    Next::Garbage => {}
                }
            }
            let Some(p) = c.queue.pop_front() else {
                break;
            };
            executed = p.end;
            if let Some(msg) = &p.error {
                reply::error(&mut c.output, msg);
                continue;
            }
            let args: Vec<&[u8]> = p.args.iter().map(|r| &c.input[r.clone()]).collect();
            let mut busy = crate::context::BusyCtx {
                run,
                session: &mut c.session,
                users: &self.users,
                out: &mut c.output,
            };
            let outcome = crate::dispatch::busy_command(&mut busy, &args);
            if outcome == crate::context::BusyOutcome::Close {
                c.quit = true;
                c.closing = true;
                c.queue.clear();
                break;
            }
        }
        c.consume(executed);
    }
}

impl crate::lua::BusyPeers for BusyServe {
    fn tick(&mut self, run: &mut crate::lua::RunState) {
        self.watch_signals(run);
        if run.busy && !run.kill {
            self.serve(run);
        }
    }
}

/// Once no pause holds them, give the connections CLIENT PAUSE held back their turns: their
/// commands run again from the start, in the order they came in.
fn wake_paused(info: &mut ServerInfo, conns: &mut HashMap<Token, Conn>, roster: &mut Roster) {
    if info.paused.is_empty() || info.pause_in_force(Instant::now()).is_some() {
        return;
    }
    for id in info.paused.drain() {
        let Some(&t) = roster.by_id.get(&id) else {
            continue;
        };
        if let Some(c) = conns.get_mut(&t) {
            c.paused = false;
            roster.active.insert(t);
        }
    }
}

/// Answer the parked connections that can be: those whose keys were written (in the order
/// they blocked: the command runs again and either answers or parks again), those whose
/// timeout passed (a null array) and those CLIENT UNBLOCK named. A connection served this way
/// wrote (BRPOPLPUSH) may feed another: it goes on until nothing more is ready. The number of
/// connections answered.
fn serve_parked(
    store: &mut Store,
    info: &mut ServerInfo,
    conns: &mut HashMap<Token, Conn>,
    roster: &mut Roster,
    wrote: &mut HashMap<Token, (bool, usize)>,
    starts: &mut HashMap<Token, usize>,
) -> usize {
    let mut served = 0;
    if info.blocked.is_empty() {
        info.ready.clear();
        info.unblock.clear();
        info.db_swaps.clear();
        return 0;
    }
    let now = Instant::now();
    let unblock = std::mem::take(&mut info.unblock);
    // The parked connections, found from the blocked clients' ids (not by looking at all).
    let parked: Vec<Token> = info
        .blocked
        .iter()
        .filter_map(|id| roster.by_id.get(id).copied())
        .collect();
    for &t in &parked {
        let Some(c) = conns.get_mut(&t) else {
            continue;
        };
        let Some(p) = &c.parked else {
            continue;
        };
        let asked = unblock.iter().find(|u| u.0 == c.session.id);
        // WAIT: answered as soon as enough replicas acknowledged its offset.
        let acked = p.wait.map(|(offset, want)| {
            let n = info.repl.acked(offset);
            (n, n >= want)
        });
        if asked.is_none() && p.deadline.is_none_or(|d| d > now) && !acked.is_some_and(|a| a.1) {
            continue;
        }
        let start = c.output.len();
        starts.entry(t).or_insert(start);
        wrote.entry(t).or_insert((false, 0)).1 += 1;
        if asked.is_some_and(|u| u.1) {
            reply::error(
                &mut c.output,
                "UNBLOCKED client unblocked via CLIENT UNBLOCK",
            );
        } else if let Some((n, _)) = acked {
            reply::int(&mut c.output, n as i64);
        } else {
            reply::null_array(&mut c.output, c.session.proto);
        }
        let args: Vec<&[u8]> = p.args.iter().map(Vec::as_slice).collect();
        crate::dispatch::count_answered_parked(info, &args, &c.output[start..]);
        c.parked = None;
        info.blocked.remove(&c.session.id);
        roster.touched.insert(t);
        served += 1;
    }
    // After SWAPDB the keys clients wait on in either database may be there now (Redis's
    // scanDatabaseForReadyKeys): each is tried as if written.
    for (a, b) in std::mem::take(&mut info.db_swaps) {
        for c in parked.iter().filter_map(|t| conns.get(t)) {
            if let Some(p) = &c.parked {
                info.ready.extend(
                    p.keys
                        .iter()
                        .filter(|k| {
                            k.first()
                                .is_some_and(|&d| d as usize == a || d as usize == b)
                        })
                        .cloned(),
                );
            }
        }
    }
    while !info.ready.is_empty() {
        let ready: hashbrown::HashSet<Vec<u8>> = info.ready.drain(..).collect();
        let mut waiting: Vec<(u64, Token)> = parked
            .iter()
            .filter_map(|&t| {
                let p = conns.get(&t)?.parked.as_ref()?;
                p.keys
                    .iter()
                    .any(|k| ready.contains(k))
                    .then_some((p.seq, t))
            })
            .collect();
        waiting.sort_unstable();
        for (_, t) in waiting {
            let Some(c) = conns.get_mut(&t) else {
                continue;
            };
            let Some(p) = c.parked.take() else {
                continue;
            };
            let args: Vec<&[u8]> = p.args.iter().map(Vec::as_slice).collect();
            let start = c.output.len();
            c.session.block_retry = true;
            let effect =
                crate::dispatch::execute(store, info, &mut c.session, &args, &mut c.output);
            c.session.block_retry = false;
            if c.session.block.take().is_some() {
                // Still nothing for it: it keeps its place and its deadline.
                c.output.truncate(start);
                c.parked = Some(p);
                continue;
            }
            starts.entry(t).or_insert(start);
            let e = wrote.entry(t).or_insert((false, 0));
            e.1 += 1;
            e.0 |= effect == Effect::Wrote;
            info.blocked.remove(&c.session.id);
            roster.touched.insert(t);
            served += 1;
        }
    }
    served
}

/// The sockets the loop polls: its `Poll`, the listener and what accepting needs. Shared
/// (`Rc<RefCell<..>>`) with the busy mode, which goes on accepting and reading while a script
/// runs: the loop does not touch it then.
struct Net {
    poll: Poll,
    listener: TcpListener,
    /// The token of the next connection.
    next_token: usize,
    /// Held so that, out of descriptors, one can be freed to accept a connection and close it
    /// with a reason rather than leave it waiting in the backlog (Redis's approach).
    spare_fd: Option<std::fs::File>,
}

/// What accepting connections changes in the server's state: its counters and the records
/// CLIENT LIST shows. Taken from [`ServerInfo`] and given back after ([`Admissions::finish`]),
/// so that the busy mode can accept while a running script holds the server's state.
#[derive(Default)]
struct Admissions {
    max_clients: usize,
    /// A password is set: new connections start unauthenticated.
    requirepass: bool,
    next_client_id: u64,
    accepted: u64,
    rejected: u64,
    clients: Vec<(u64, Token, ClientMeta)>,
}

impl Admissions {
    fn start(info: &ServerInfo) -> Admissions {
        Admissions {
            max_clients: info.max_clients,
            requirepass: info.acl.users.auth_required(),
            next_client_id: info.next_client_id,
            accepted: 0,
            rejected: 0,
            clients: Vec::new(),
        }
    }

    /// Give the server what was accepted: counters, CLIENT LIST's records, and the new
    /// connections to the roster (they are read in the next turn).
    fn finish(self, info: &mut ServerInfo, roster: &mut Roster) {
        info.next_client_id = info.next_client_id.max(self.next_client_id);
        info.total_connections += self.accepted;
        info.rejected_connections += self.rejected;
        for (id, t, meta) in self.clients {
            info.clients.insert(id, meta);
            roster.by_id.insert(id, t);
            roster.active.insert(t);
        }
    }
}

fn accept(
    net: &mut Net,
    conns: &mut HashMap<Token, Conn>,
    adm: &mut Admissions,
    log: &mut RateLimitedLog,
) {
    const FULL: &str = "ERR max number of clients reached (raise --max-clients, and the open-file limit: ulimit -n)";
    // The listener is edge-triggered: every pending connection is taken now (accepted, or
    // accepted and closed with the reason), or it would wait in the backlog unseen.
    loop {
        match net.listener.accept() {
            Ok((mut stream, peer)) => {
                // CONFIG SET maxclients changes info's limit.
                if conns.len() >= adm.max_clients {
                    adm.rejected += 1;
                    refuse(&mut stream, FULL);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                let t = Token(net.next_token);
                net.next_token = (net.next_token + 1) % (usize::MAX - 1);
                if let Err(e) = net
                    .poll
                    .registry()
                    .register(&mut stream, t, Interest::READABLE)
                {
                    if let Some(line) = log.line(
                        "register",
                        Instant::now(),
                        &format!("cannot watch the connection of {peer} (closed): {e}"),
                    ) {
                        log.emit(&line);
                    }
                    continue;
                }
                adm.accepted += 1;
                adm.next_client_id += 1;
                let id = adm.next_client_id;
                let now = Instant::now();
                adm.clients.push((
                    id,
                    t,
                    ClientMeta::new(
                        peer.to_string(),
                        stream
                            .local_addr()
                            .map(|a| a.to_string())
                            .unwrap_or_default(),
                        stream.as_raw_fd(),
                        now,
                    ),
                ));
                conns.insert(
                    t,
                    Conn {
                        wants_writable: false,
                        stream,
                        peer: Some(peer),
                        readable: true,
                        parser: Parser::default(),
                        more: false,
                        over_soft_since: None,
                        input: Vec::with_capacity(BUFFER_INITIAL),
                        output: Vec::with_capacity(BUFFER_INITIAL),
                        sent: 0,
                        session: Session::new(id, !adm.requirepass),
                        closing: false,
                        dead: false,
                        broken: false,
                        quit: false,
                        queue: VecDeque::new(),
                        parsed: 0,
                        parked: None,
                        paused: false,
                        replica: None,
                    },
                );
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Out of descriptors: free the spare one to take the connection and tell it why,
            // then take the spare back.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                if let Some(line) = log.line(
                    "accept",
                    Instant::now(),
                    &format!("accept failed: {e} (connections refused; raise ulimit -n or lower --max-clients)"),
                ) {
                    log.emit(&line);
                }
                let Some(spare) = net.spare_fd.take() else {
                    return;
                };
                drop(spare);
                let taken = net.listener.accept();
                net.spare_fd = std::fs::File::open("/dev/null").ok();
                match taken {
                    Ok((mut stream, _)) => {
                        adm.rejected += 1;
                        refuse(&mut stream, FULL);
                    }
                    // Nothing could be taken even so: try at the next event.
                    Err(_) => return,
                }
            }
            // The client gave up before it was accepted, and the like: the next one may do.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
                ) =>
            {
                continue
            }
            Err(e) => {
                if let Some(line) =
                    log.line("accept", Instant::now(), &format!("accept failed: {e}"))
                {
                    log.emit(&line);
                }
                return;
            }
        }
    }
}

/// Tell a connection that will not be served why, then close it (by dropping it). One write
/// on a socket just accepted: its send buffer is empty, so the reply goes in whole.
fn refuse(stream: &mut TcpStream, msg: &str) {
    let mut out = Vec::new();
    reply::error(&mut out, msg);
    loop {
        match stream.write(&out) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            _ => return,
        }
    }
}

/// Read what `c`'s socket has, until it has no more or the input reaches `limit` (the rest
/// is read once the queued commands have run).
fn read_all(c: &mut Conn, buf: &mut [u8], limit: usize) {
    while c.input.len() < limit {
        // No more than the limit leaves room for: the input never passes it.
        let room = (limit - c.input.len()).min(buf.len());
        match c.stream.read(&mut buf[..room]) {
            Ok(0) => {
                // The client finished sending: answer what it sent, then close.
                c.closing = true;
                c.readable = false;
                return;
            }
            Ok(n) => {
                // Grown by doubling, as a Vec grows, but never past the limit: the buffer's
                // memory is bounded by the limit, not by twice it.
                let need = c.input.len() + n;
                if need > c.input.capacity() {
                    let target = (2 * c.input.capacity()).clamp(need, limit.max(need));
                    c.input.reserve_exact(target - c.input.len());
                }
                c.input.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.readable = false;
                return;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                c.dead = true;
                c.readable = false;
                return;
            }
        }
    }
}

/// Write what the socket takes of `c`'s replies. What was written is dropped from the front
/// only once it is at least half the buffer: a client reading a big reply slowly would
/// otherwise make every partial write move all the rest.
fn flush(c: &mut Conn) {
    loop {
        flush_output(c);
        if c.dead || c.sent < c.output.len() {
            return;
        }
        // A replica: after the replies before it, its snapshot; once that is out, the stream
        // held meanwhile.
        let Some(link) = c.replica.as_mut() else {
            return;
        };
        let Some(snap) = link.snapshot.as_mut() else {
            return;
        };
        match snap.write_to(&mut c.stream) {
            Ok(true) => {
                link.snapshot = None;
                let held = std::mem::take(&mut link.held);
                c.output.extend_from_slice(&held);
            }
            Ok(false) => return,
            Err(_) => {
                c.dead = true;
                return;
            }
        }
    }
}

/// Write what the socket takes of `c`'s replies (see [`flush`]).
fn flush_output(c: &mut Conn) {
    while c.sent < c.output.len() {
        match c.stream.write(&c.output[c.sent..]) {
            Ok(0) => {
                c.dead = true;
                break;
            }
            Ok(n) => c.sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                c.dead = true;
                break;
            }
        }
    }
    if c.sent == c.output.len() {
        c.output.clear();
        c.sent = 0;
    } else if c.sent >= c.output.len() / 2 {
        c.output.drain(..c.sent);
        c.sent = 0;
    }
}

#[cfg(test)]
mod read_key_tests {
    use super::*;

    /// EXEC reads what its transaction's queued commands read: all their NVMe reads begin
    /// before it runs, and it waits for them all.
    #[test]
    fn exec_reads_the_keys_of_its_queued_commands() {
        let mut session = Session::new(1, true);
        let cmds: [&[&str]; 4] = [
            &["GET", "a"],
            &["MGET", "b", "c"],
            &["SET", "d", "v"],
            &["EXISTS", "e"],
        ];
        session.multi = Some(
            cmds.iter()
                .map(|c| c.iter().map(|a| a.as_bytes().to_vec()).collect())
                .collect(),
        );
        let input = b"execGET k".to_vec();
        let mut keys = Vec::new();
        let exec_args = vec![std::ops::Range { start: 0, end: 4 }];
        let mut dbs = crate::db::Databases::default();
        let exec = read_keys(&input, &session, &dbs, &exec_args, |k| keys.push(k));
        assert!(exec);
        let in_db = |db: u8, ks: &[&[u8]]| -> Vec<Vec<u8>> {
            ks.iter().map(|k| crate::db::store_key(db, k)).collect()
        };
        assert_eq!(keys, in_db(0, &[b"a", b"b", b"c", b"d"]));
        // Any other command: its own keys, in the database selected (where it is kept).
        keys.clear();
        assert!(!read_keys(&input, &session, &dbs, &[4..7, 8..9], |k| keys.push(k)));
        assert_eq!(keys, in_db(0, &[b"k"]));
        session.db = 2;
        dbs.swap(2, 5);
        keys.clear();
        read_keys(&input, &session, &dbs, &[4..7, 8..9], |k| keys.push(k));
        assert_eq!(keys, in_db(5, &[b"k"]));
    }
}
