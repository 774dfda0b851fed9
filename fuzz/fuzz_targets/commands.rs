//! The RESP parser with the command layer behind it: the input is a client's byte stream; each
//! command parsed from it runs through `commands::execute` against a real in-memory store (DRAM
//! only, so it stays fast), as the server's loop does. Checks that each command writes exactly one
//! well-framed RESP2 or RESP3 reply, and that the store's own invariants hold after every command.
#![no_main]

use cxltier_server::commands::{execute, Effect, ServerInfo, Session};
use cxltier_server::resp::parse;
use cxltier_store::{Durability, Store, StoreBuilder};
use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;

/// Most commands run per input: enough for any sequence that matters, few enough that an input
/// of thousands of one-byte inline commands does not make the run crawl.
const MAX_COMMANDS: usize = 512;

/// The length of the one RESP2 or RESP3 reply at the start of `b`, or why it is not one.
fn reply_len(b: &[u8]) -> Result<usize, String> {
    let line = |b: &[u8]| -> Result<usize, String> {
        b.windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| "a reply line without CRLF".to_string())
    };
    let (&tag, rest) = b.split_first().ok_or("an empty reply")?;
    let end = line(rest)?;
    let head = &rest[..end];
    let after = 1 + end + 2;
    let int = || -> Result<i64, String> {
        std::str::from_utf8(head)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("{:?} is not an integer", String::from_utf8_lossy(head)))
    };
    match tag {
        // RESP3's one-line types (after HELLO 3): null, boolean, double, big number.
        b'_' | b'#' | b',' | b'(' => {
            if head.contains(&b'\r') || head.contains(&b'\n') {
                return Err("a CR or LF inside a one-line reply".into());
            }
            Ok(after)
        }
        b'+' | b'-' => {
            if head.contains(&b'\r') || head.contains(&b'\n') {
                return Err("a CR or LF inside a status or error reply".into());
            }
            Ok(after)
        }
        b':' => int().map(|_| after),
        b'$' | b'=' => match int()? {
            -1 => Ok(after),
            n if n >= 0 => {
                let n = n as usize;
                if b.len() < after + n + 2 || &b[after + n..after + n + 2] != b"\r\n" {
                    return Err(format!("a bulk reply of {n} bytes not ended by CRLF"));
                }
                Ok(after + n + 2)
            }
            n => Err(format!("bulk length {n}")),
        },
        b'*' | b'~' | b'>' | b'%' => match int()? {
            -1 if tag == b'*' => Ok(after),
            n if n >= 0 => {
                let mut at = after;
                let items = if tag == b'%' { 2 * n } else { n };
                for _ in 0..items {
                    at += reply_len(&b[at..])?;
                }
                Ok(at)
            }
            n => Err(format!("array length {n}")),
        },
        t => Err(format!("a reply starting with {:?}", t as char)),
    }
}

thread_local! {
    /// One store per process, emptied before each input: building one (its arena mapping and
    /// index) costs more than running a few hundred commands, and the fuzzer would spend its time
    /// there. What an input sees is the same as with a new store, but for the admission sketch's
    /// counts, which only decide placement between tiers (there is one here).
    static STORE: RefCell<Store> = RefCell::new(
        StoreBuilder::new()
            .dram(16 << 20)
            .durability(Durability::None)
            .build()
            .expect("a DRAM-only store of 16 MiB builds"),
    );
}

fuzz_target!(|data: &[u8]| STORE.with_borrow_mut(|store| run(store, data)));

fn run(store: &mut Store, data: &[u8]) {
    store.flush_all().expect("FLUSHALL on a DRAM-only store");
    store.reset_stats();
    let mut info = ServerInfo {
        max_object: store.max_object(),
        ..ServerInfo::default()
    };
    let mut session = Session::default();
    let mut out = Vec::new();
    let mut at = 0;
    for _ in 0..MAX_COMMANDS {
        let Ok(Some(p)) = parse(&data[at..]) else {
            break;
        };
        let buf = &data[at..];
        let args: Vec<&[u8]> = p.args.iter().map(|r| &buf[r.clone()]).collect();
        at += p.consumed;
        out.clear();
        let effect = execute(store, &mut info, &mut session, &args, &mut out);
        // CLIENT REPLY OFF and SKIP write no reply of their own (the server drops the replies
        // of the commands they silence).
        let silenced = session.drop_reply();
        // A command that parks (a blocking pop that found nothing, WAIT) is answered later, by
        // the server; SYNC and PSYNC hand the server a snapshot to send (PSYNC's +FULLRESYNC
        // comes first) and are ignored on a connection that is a replica already; REPLCONF ACK
        // and GETACK answer nothing: all as in Redis.
        let parked = session.block.take().is_some();
        let synced = session.sync.take().is_some();
        let named = |n: &str| {
            args.first()
                .is_some_and(|a| a.eq_ignore_ascii_case(n.as_bytes()))
        };
        let acked = named("REPLCONF")
            && args
                .iter()
                .skip(1)
                .step_by(2)
                .any(|a| a.eq_ignore_ascii_case(b"ACK") || a.eq_ignore_ascii_case(b"GETACK"));
        let resync = (named("SYNC") || named("PSYNC")) && session.is_replica;
        let unanswered = parked || synced || acked || resync;
        if args.is_empty() || (silenced && out.is_empty()) || (unanswered && out.is_empty()) {
            // An empty multibulk is ignored, like Redis: no reply.
            assert!(out.is_empty(), "a reply to an empty command");
        } else if effect != Effect::Shutdown {
            // (Un)subscribing confirms each channel in a reply of its own, and a RESP3
            // connection's PUBLISH to its own channel is preceded by the message.
            let many = [
                "SUBSCRIBE",
                "PSUBSCRIBE",
                "UNSUBSCRIBE",
                "PUNSUBSCRIBE",
                "PUBLISH",
            ]
            .iter()
            .any(|n| n.as_bytes().eq_ignore_ascii_case(args[0]));
            let mut at = 0;
            let mut replies = 0;
            while at < out.len() {
                at += reply_len(&out[at..]).unwrap_or_else(|e| {
                    panic!("command {args:?} wrote a malformed reply ({e}): {out:?}")
                });
                replies += 1;
            }
            assert!(replies >= 1, "command {args:?} wrote no reply");
            assert!(
                many || replies == 1,
                "command {args:?} wrote more than one reply"
            );
        }
        store.commit().expect("a DRAM-only store commits");
        if let Err(e) = store.check_invariants() {
            panic!("after {args:?}: the store's invariants fail: {e}");
        }
        if matches!(effect, Effect::Close | Effect::Shutdown) {
            break;
        }
    }
}
