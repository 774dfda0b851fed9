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
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cxltier_store::Store;
// Looked up several times per command: foldhash rather than std's SipHash.
use hashbrown::HashMap;
use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::commands::{self, Effect, ServerInfo, Session};
use crate::quarantine::Quarantine;
use crate::resp::{self, reply};

const LISTENER: Token = Token(usize::MAX);
/// The store's device-read completion eventfd.
const COMPLETIONS: Token = Token(usize::MAX - 1);
/// Bytes read per `read` call.
const READ_CHUNK: usize = 64 << 10;
/// Output above which a connection is not read until its client catches up (backpressure).
const OUTPUT_HIGH: usize = 4 << 20;
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
}

struct Conn {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
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

/// Run the server until SHUTDOWN or until `stop` is set (by a signal handler). Closes the store
/// cleanly on the way out.
pub fn serve(
    cfg: ServerConfig,
    mut store: Store,
    stop: Arc<AtomicBool>,
) -> Result<(), ServerError> {
    let mut listener = TcpListener::bind(cfg.bind).map_err(|source| ServerError::Bind {
        addr: cfg.bind,
        hint: match source.kind() {
            io::ErrorKind::AddrInUse => format!(
                " (the port is in use: stop what listens there, e.g. a redis-server, or pick another with --bind {}:PORT)",
                cfg.bind.ip()
            ),
            io::ErrorKind::PermissionDenied => " (ports below 1024 need root: pick a port above 1024)".into(),
            io::ErrorKind::AddrNotAvailable => " (no interface has this address: use 127.0.0.1 or an address of this host)".into(),
            _ => String::new(),
        },
        source,
    })?;
    let mut poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut info = ServerInfo {
        port: listener.local_addr()?.port(),
        bind: cfg.bind.ip().to_string(),
        requirepass: cfg.requirepass.clone(),
        started: Some(Instant::now()),
        max_object: store.max_object(),
        ..ServerInfo::default()
    };
    let mut quarantine = cfg
        .quarantine_file
        .as_ref()
        .map(|p| Quarantine::new(p, &mut info.poison));
    let mut conns: HashMap<Token, Conn> = HashMap::new();
    let mut next_token = 0usize;
    let mut events = Events::with_capacity(1024);
    let mut ready: Vec<Token> = Vec::new();
    let mut last_tick = Instant::now();
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
    let mut idle = false;
    // Commands parsed so far: each queued command's place in arrival order.
    let mut parsed = 0u64;
    while !shutdown && !stop.load(Ordering::Relaxed) {
        // With device reads in flight or commands queued, only look at the sockets (the reads
        // are collected and the commands run below) unless the last turn found nothing to do:
        // waking from a sleep costs more than a turn on this path, so the loop keeps its CPU
        // while work is coming in.
        let busy =
            !idle && (store.reads_in_flight() > 0 || conns.values().any(|c| !c.queue.is_empty()));
        let timeout = if busy {
            Duration::ZERO
        } else {
            TICK.saturating_sub(last_tick.elapsed())
                .max(Duration::from_millis(1))
        };
        if let Err(e) = poll.poll(&mut events, Some(timeout)) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        }
        let had_events = !events.is_empty();
        ready.clear();
        for ev in events.iter() {
            if ev.token() == COMPLETIONS {
                // The reads are collected below.
                store.clear_read_signal();
                continue;
            }
            if ev.token() == LISTENER {
                accept(
                    &mut listener,
                    &poll,
                    &mut conns,
                    &mut next_token,
                    &mut info,
                    cfg.max_clients,
                )?;
                continue;
            }
            if ev.is_writable() {
                if let Some(c) = conns.get_mut(&ev.token()) {
                    flush(c);
                }
            }
            if ev.is_readable() || ev.is_read_closed() {
                ready.push(ev.token());
            }
        }
        // Read all that is there.
        for t in &ready {
            if let Some(c) = conns.get_mut(t) {
                if c.output.len() < OUTPUT_HIGH {
                    read_all(c, &mut buf);
                }
            }
        }
        // Parse every complete command onto its connection's queue.
        for c in conns.values_mut() {
            parse_into_queue(c, &mut parsed);
        }
        // Collect the device reads that finished, then begin those the queued commands need, up
        // to the store's NVMe queue depth, oldest command first (collecting first frees room in
        // the queue for this turn). A command is looked at until all its reads have begun: the
        // index lookups this takes are paid once per command unless the queue is full.
        if let Err(e) = store.reap_reads(false) {
            eprintln!("cxltier serve: collecting NVMe reads failed (the commands will read one by one): {e}");
        }
        if store.has_nvme() {
            let mut keys: Vec<(u64, &[u8])> = Vec::new();
            for c in conns.values() {
                for p in c.queue.iter().filter(|p| !p.reads_begun) {
                    let args = p.args.iter().map(|r| &c.input[r.clone()]);
                    commands::for_each_read_key(args, |k| keys.push((p.seq, k)));
                }
            }
            if !keys.is_empty() {
                keys.sort_by_key(|&(seq, _)| seq);
                let keys: Vec<&[u8]> = keys.into_iter().map(|(_, k)| k).collect();
                if let Err(e) = store.start_reads(&keys) {
                    eprintln!("cxltier serve: NVMe reads could not begin (the commands will read one by one): {e}");
                }
                for c in conns.values_mut() {
                    for p in c.queue.iter_mut().filter(|p| !p.reads_begun) {
                        let args = p.args.iter().map(|r| &c.input[r.clone()]);
                        let mut unstarted = false;
                        commands::for_each_read_key(args, |k| {
                            unstarted = unstarted || store.read_unstarted(k)
                        });
                        p.reads_begun = !unstarted;
                    }
                }
            }
        }
        let ran = run_ready(&mut store, &mut info, &mut conns, &mut shutdown);
        store.end_batch();
        // Replies go out after the commit.
        for c in conns.values_mut() {
            if !c.output.is_empty() {
                flush(c);
            }
        }
        conns.retain(|_, c| {
            let done = c.dead || (c.closing && c.output.is_empty() && c.queue.is_empty());
            if done {
                let _ = poll.registry().deregister(&mut c.stream);
            }
            !done
        });
        info.connected_clients = conns.len();
        if ran == 0 || last_tick.elapsed() >= TICK {
            if let Err(e) = store.tick() {
                eprintln!("cxltier serve: background work failed: {e}");
            }
            if let Some(q) = quarantine.as_mut() {
                q.tick(&mut store, &mut info.poison);
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

/// Parse the complete commands of `c`'s input onto its queue.
fn parse_into_queue(c: &mut Conn, parsed: &mut u64) {
    if c.broken || c.quit {
        return;
    }
    let mut at = c.parsed;
    while at < c.input.len() {
        match resp::parse(&c.input[at..]) {
            Ok(Some(p)) => {
                let args = p
                    .args
                    .into_iter()
                    .map(|r| r.start + at..r.end + at)
                    .collect();
                at += p.consumed;
                *parsed += 1;
                c.queue.push_back(Pending {
                    args,
                    error: None,
                    end: at,
                    reads_begun: false,
                    seq: *parsed,
                });
            }
            Ok(None) => break,
            Err(e) => {
                // Commands before the garbage still run; then the error, then close: the stream
                // cannot be framed any more.
                c.queue.push_back(Pending {
                    args: Vec::new(),
                    error: Some(format!("ERR Protocol error: {}", e.0)),
                    end: at,
                    reads_begun: true,
                    seq: *parsed,
                });
                c.broken = true;
                c.closing = true;
                break;
            }
        }
    }
    c.parsed = at;
}

/// Run, connection by connection and in order, every queued command that need not wait for a
/// device read; commit once; return how many ran.
fn run_ready(
    store: &mut Store,
    info: &mut ServerInfo,
    conns: &mut HashMap<Token, Conn>,
    shutdown: &mut bool,
) -> usize {
    let mut ran = 0;
    // Where each connection's replies of this turn start, and whether (and how often) it wrote,
    // in case the commit fails.
    let mut wrote: HashMap<Token, (bool, usize)> = HashMap::new();
    let mut starts: HashMap<Token, usize> = HashMap::new();
    for (&t, c) in conns.iter_mut() {
        let mut executed = 0;
        while let Some(p) = c.queue.front() {
            if c.quit {
                c.queue.clear();
                break;
            }
            // Nothing can wait when no read is in flight (the common case in memory).
            if p.error.is_none() && store.reads_in_flight() > 0 {
                let mut wait = false;
                let args = p.args.iter().map(|r| &c.input[r.clone()]);
                commands::for_each_read_key(args, |k| wait = wait || store.must_wait(k));
                if wait {
                    break;
                }
            }
            let p = c.queue.pop_front().expect("front exists");
            starts.entry(t).or_insert(c.output.len());
            executed = p.end;
            ran += 1;
            let e = wrote.entry(t).or_insert((false, 0));
            e.1 += 1;
            if let Some(msg) = &p.error {
                reply::error(&mut c.output, msg);
                continue;
            }
            let input = std::mem::take(&mut c.input);
            let args: Vec<&[u8]> = p.args.iter().map(|r| &input[r.clone()]).collect();
            let effect = commands::execute(store, info, &mut c.session, &args, &mut c.output);
            c.input = input;
            match effect {
                Effect::Wrote => e.0 = true,
                Effect::Close => {
                    c.closing = true;
                    c.quit = true;
                }
                Effect::Shutdown => *shutdown = true,
                Effect::Read => {}
            }
        }
        // Drop what ran from the input; what is still queued moves down with it.
        if executed > 0 {
            c.input.drain(..executed);
            c.parsed -= executed;
            for p in &mut c.queue {
                p.end -= executed;
                for r in &mut p.args {
                    *r = r.start - executed..r.end - executed;
                }
            }
        }
        if c.broken && c.queue.is_empty() {
            c.input.clear();
            c.parsed = 0;
        }
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
        eprintln!("cxltier serve: {msg}");
    }
    ran
}

fn accept(
    listener: &mut TcpListener,
    poll: &Poll,
    conns: &mut HashMap<Token, Conn>,
    next: &mut usize,
    info: &mut ServerInfo,
    max_clients: usize,
) -> io::Result<()> {
    loop {
        match listener.accept() {
            Ok((mut stream, _)) => {
                if conns.len() >= max_clients {
                    let mut out = Vec::new();
                    reply::error(
                        &mut out,
                        "ERR max number of clients reached (raise --max-clients)",
                    );
                    let _ = stream.write(&out);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                let t = Token(*next);
                *next = (*next + 1) % (usize::MAX - 1);
                poll.registry().register(
                    &mut stream,
                    t,
                    Interest::READABLE | Interest::WRITABLE,
                )?;
                info.total_connections += 1;
                conns.insert(
                    t,
                    Conn {
                        stream,
                        input: Vec::with_capacity(16 << 10),
                        output: Vec::with_capacity(16 << 10),
                        session: Session {
                            id: info.total_connections,
                            authed: info.requirepass.is_none(),
                            name: None,
                        },
                        closing: false,
                        dead: false,
                        broken: false,
                        quit: false,
                        queue: VecDeque::new(),
                        parsed: 0,
                    },
                );
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Out of descriptors and the like: keep serving the clients we have.
            Err(e) => {
                eprintln!("cxltier serve: accept failed: {e}");
                return Ok(());
            }
        }
    }
}

fn read_all(c: &mut Conn, buf: &mut [u8]) {
    loop {
        match c.stream.read(buf) {
            Ok(0) => {
                // The client finished sending: answer what it sent, then close.
                c.closing = true;
                return;
            }
            Ok(n) => c.input.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                c.dead = true;
                return;
            }
        }
    }
}

fn flush(c: &mut Conn) {
    let mut written = 0;
    while written < c.output.len() {
        match c.stream.write(&c.output[written..]) {
            Ok(0) => {
                c.dead = true;
                break;
            }
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                c.dead = true;
                break;
            }
        }
    }
    c.output.drain(..written);
}
