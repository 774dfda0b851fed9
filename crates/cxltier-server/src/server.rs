//! The event loop: one thread, non-blocking sockets, batches.
//!
//! Each turn of the loop reads everything the ready connections sent, parses every complete
//! command (pipelining), asks the store to prefetch the keys the batch will read (one io_uring
//! submission for all NVMe misses), executes the commands in order, commits once (group commit:
//! with `--durability always`, no write is acknowledged before its log record is on disk), and only
//! then writes the replies, one `write` per connection.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cxltier_store::Store;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use crate::commands::{self, Effect, ServerInfo, Session};
use crate::resp::{self, reply};

const LISTENER: Token = Token(usize::MAX);
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
}

/// One parsed command of the current batch: its connection and its arguments' ranges.
struct Pending {
    conn: Token,
    args: Vec<std::ops::Range<usize>>,
    /// A protocol error at this point of the stream: reply with it, then close.
    error: Option<String>,
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
    let mut conns: HashMap<Token, Conn> = HashMap::new();
    let mut next_token = 0usize;
    let mut events = Events::with_capacity(1024);
    let mut ready: Vec<Token> = Vec::new();
    let mut last_tick = Instant::now();
    let mut buf = vec![0u8; READ_CHUNK];
    let mut shutdown = false;

    while !shutdown && !stop.load(Ordering::Relaxed) {
        let timeout = TICK
            .saturating_sub(last_tick.elapsed())
            .max(Duration::from_millis(1));
        if let Err(e) = poll.poll(&mut events, Some(timeout)) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        }
        ready.clear();
        for ev in events.iter() {
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
        // Parse every complete command of every connection with input.
        let mut batch: Vec<Pending> = Vec::new();
        let mut consumed: HashMap<Token, usize> = HashMap::new();
        for (&t, c) in conns.iter_mut() {
            if c.input.is_empty() || c.broken {
                continue;
            }
            let mut at = 0;
            loop {
                match resp::parse(&c.input[at..]) {
                    Ok(Some(p)) => {
                        let args = p
                            .args
                            .into_iter()
                            .map(|r| r.start + at..r.end + at)
                            .collect();
                        batch.push(Pending {
                            conn: t,
                            args,
                            error: None,
                        });
                        at += p.consumed;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        // Commands before the garbage still run; then the error, then close:
                        // the stream cannot be framed any more.
                        let error = Some(format!("ERR Protocol error: {}", e.0));
                        batch.push(Pending {
                            conn: t,
                            args: Vec::new(),
                            error,
                        });
                        c.broken = true;
                        c.closing = true;
                        break;
                    }
                }
            }
            consumed.entry(t).or_insert(at);
        }
        if !batch.is_empty() {
            run_batch(&mut store, &mut info, &mut conns, &batch, &mut shutdown);
            for (t, n) in consumed {
                if let Some(c) = conns.get_mut(&t) {
                    if c.broken {
                        c.input.clear();
                    } else {
                        c.input.drain(..n);
                    }
                }
            }
        }
        // Replies go out after the commit.
        for c in conns.values_mut() {
            if !c.output.is_empty() {
                flush(c);
            }
        }
        conns.retain(|_, c| {
            let done = c.dead || (c.closing && c.output.is_empty());
            if done {
                let _ = poll.registry().deregister(&mut c.stream);
            }
            !done
        });
        info.connected_clients = conns.len();
        if batch.is_empty() || last_tick.elapsed() >= TICK {
            if let Err(e) = store.tick() {
                eprintln!("cxltier serve: background work failed: {e}");
            }
            last_tick = Instant::now();
        }
    }
    for c in conns.values_mut() {
        flush(c);
    }
    store.close()?;
    Ok(())
}

fn run_batch(
    store: &mut Store,
    info: &mut ServerInfo,
    conns: &mut HashMap<Token, Conn>,
    batch: &[Pending],
    shutdown: &mut bool,
) {
    // Prefetch: the keys this batch reads, one NVMe submission.
    {
        let mut keys: Vec<&[u8]> = Vec::new();
        for p in batch {
            let Some(c) = conns.get(&p.conn) else {
                continue;
            };
            let args: Vec<&[u8]> = p.args.iter().map(|r| &c.input[r.clone()]).collect();
            commands::read_keys(&args, &mut keys);
        }
        if let Err(e) = store.prefetch(&keys) {
            eprintln!("cxltier serve: prefetch failed (the commands will read one by one): {e}");
        }
    }
    // Execute in order; remember where each connection's replies of this batch start and
    // whether it wrote, in case the commit fails.
    let mut wrote: HashMap<Token, (usize, usize)> = HashMap::new(); // conn -> (output start, replies)
    let mut starts: HashMap<Token, usize> = HashMap::new();
    for p in batch {
        let Some(c) = conns.get_mut(&p.conn) else {
            continue;
        };
        starts.entry(p.conn).or_insert(c.output.len());
        if let Some(msg) = &p.error {
            reply::error(&mut c.output, msg);
            continue;
        }
        let input = std::mem::take(&mut c.input);
        let args: Vec<&[u8]> = p.args.iter().map(|r| &input[r.clone()]).collect();
        let effect = commands::execute(store, info, &mut c.session, &args, &mut c.output);
        c.input = input;
        let e = wrote.entry(p.conn).or_insert((usize::MAX, 0));
        e.1 += 1;
        match effect {
            Effect::Wrote => e.0 = e.0.min(starts[&p.conn]),
            Effect::Close => c.closing = true,
            Effect::Shutdown => *shutdown = true,
            Effect::Read => {}
        }
    }
    if let Err(e) = store.commit() {
        // Nothing of this batch may be acknowledged as written: every reply of a connection that
        // wrote becomes the error.
        let msg = format!("ERR the write was not made durable: {e}");
        for (t, (from, replies)) in wrote {
            if from == usize::MAX {
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
