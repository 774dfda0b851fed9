//! The tests' server: a store, the server's state and one connection, to run commands against
//! as a client would (through [`execute`]), and the helpers the command tests share.

use cxltier_store::{Store, StoreBuilder};

use crate::context::{ServerInfo, Session};
use crate::dispatch::execute;

pub(crate) struct Db {
    pub store: Store,
    pub info: ServerInfo,
    pub session: Session,
}

impl Db {
    /// A small store (64 MiB, objects up to 1 MiB): the collection commands' tests.
    pub fn new() -> Db {
        Db::with(64 << 20, 1 << 20)
    }

    /// A larger store (256 MiB, objects up to 16 MiB).
    pub fn large() -> Db {
        Db::with(256 << 20, 16 << 20)
    }

    fn with(dram: u64, max_object: usize) -> Db {
        Db {
            store: StoreBuilder::new()
                .dram(dram)
                .max_object(max_object)
                .durability(cxltier_store::Durability::None)
                .build()
                .unwrap(),
            info: ServerInfo::default(),
            session: Session::new(0, true),
        }
    }

    /// Run a command given as its words; the reply's bytes.
    pub fn run(&mut self, args: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        execute(
            &mut self.store,
            &mut self.info,
            &mut self.session,
            args,
            &mut out,
        );
        out
    }

    /// The reply to a command given as space-separated words, as text.
    pub fn cmd(&mut self, line: &str) -> String {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        String::from_utf8(self.run(&words)).unwrap()
    }

    /// A larger store as connection 1 sees it, and the session of a second connection (2) to
    /// run commands beside it ([`run_as`], [`Db::replies_as`]).
    pub fn two_connections() -> (Db, Session) {
        let mut db = Db::large();
        db.session.id = 1;
        (db, Session::new(2, true))
    }

    /// A larger store whose connection 1 is subscribed to `pattern` (PSUBSCRIBE); what follows
    /// runs as connection 2, so that its messages wait in the outbox.
    pub fn listening(pattern: &str) -> Db {
        let (mut db, other) = Db::two_connections();
        db.cmd(&format!("PSUBSCRIBE {pattern}"));
        db.session = other;
        db
    }

    /// The messages published since the last call, as (channel, payload) text.
    pub fn heard(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.info.pubsub.outbox)
            .iter()
            .map(|d| {
                (
                    String::from_utf8_lossy(&d.channel).into_owned(),
                    String::from_utf8_lossy(&d.payload).into_owned(),
                )
            })
            .collect()
    }

    /// The kind of value the store holds under `key` of database 0 (which must be there).
    pub fn kind_of(&self, key: &str) -> cxltier_store::Kind {
        let stored = crate::db::store_key(0, key.as_bytes());
        self.store.peek(&stored).unwrap().kind
    }

    /// WATCH `key`, run `write`, then a transaction of one PING: `write`'s reply and EXEC's
    /// (`*-1` when the write was a change of the key).
    pub fn watched_exec(&mut self, key: &str, write: &str) -> (String, String) {
        self.cmd(&format!("WATCH {key}"));
        let reply = self.cmd(write);
        self.cmd("MULTI");
        self.cmd("PING");
        (reply, self.cmd("EXEC"))
    }

    /// Run a script of lines, each with the reply it must get (Redis 7.0's answers, from its
    /// tests and redis-server), in order; a wrong reply fails naming its line.
    pub fn replies(&mut self, script: &[(&str, &str)]) {
        for (i, (line, want)) in script.iter().enumerate() {
            assert_eq!(self.cmd(line), *want, "line {i} of the script: {line}");
        }
    }

    /// Run a script of lines, each with the start its reply must have.
    pub fn replies_starting(&mut self, script: &[(&str, &str)]) {
        for (i, (line, start)) in script.iter().enumerate() {
            let got = self.cmd(line);
            assert!(
                got.starts_with(start),
                "line {i} of the script: {line}: {got:?} does not start with {start:?}"
            );
        }
    }

    /// Run a script of lines as another connection (`session`), each with the reply it must get.
    pub fn replies_as(&mut self, session: &mut Session, script: &[(&str, &str)]) {
        for (i, (line, want)) in script.iter().enumerate() {
            assert_eq!(
                run_as(self, session, line),
                *want,
                "line {i} of the script: {line}"
            );
        }
    }

    /// Run each step's commands, after which OBJECT ENCODING of its key must name its
    /// encoding; a failure names the step.
    pub fn encodings(&mut self, steps: &[(&[&str], &str, &str)]) {
        for (i, (lines, key, encoding)) in steps.iter().enumerate() {
            for line in *lines {
                self.cmd(line);
            }
            let want = format!("${}\r\n{encoding}\r\n", encoding.len());
            let got = self.cmd(&format!("OBJECT ENCODING {key}"));
            assert_eq!(got, want, "step {i}: {lines:?}, then {key}");
        }
    }

    /// Run each line, every one of which must get the same reply `want`.
    pub fn each_replies(&mut self, lines: &[&str], want: &str) {
        for line in lines {
            assert_eq!(self.cmd(line), want, "{line}");
        }
    }
}

/// The reply to a command on a key holding another type.
pub(crate) const WT: &str =
    "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

/// `text` holds every one of `parts`.
pub(crate) fn assert_has(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "{part:?} is not in {text:?}");
    }
}

pub(crate) fn eval(db: &mut Db, args: &[&str]) -> String {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    String::from_utf8(db.run(&args)).unwrap()
}

/// A second connection's session, run against the same store and server state.
pub(crate) fn run_as(db: &mut Db, session: &mut Session, line: &str) -> String {
    let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    let mut out = Vec::new();
    execute(&mut db.store, &mut db.info, session, &words, &mut out);
    String::from_utf8(out).unwrap()
}

pub(crate) fn info_field(db: &mut Db, section: &str, name: &str) -> String {
    let text = db.cmd(&format!("INFO {section}"));
    text.split("\r\n")
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in INFO {section}: {text}"))
        .to_string()
}

/// The length of the RESP2 or RESP3 frame at the start of `b`.
pub(crate) fn frame_len(b: &[u8]) -> Result<usize, String> {
    let end = b
        .windows(2)
        .position(|w| w == b"\r\n")
        .ok_or("a line without CRLF")?;
    let head = std::str::from_utf8(&b[1..end]).map_err(|e| e.to_string())?;
    let after = end + 2;
    let n = || head.parse::<i64>().map_err(|e| format!("{head:?}: {e}"));
    match b[0] {
        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Ok(after),
        b'$' | b'=' => match n()? {
            -1 => Ok(after),
            l if l >= 0 && b.len() >= after + l as usize + 2 => Ok(after + l as usize + 2),
            l => Err(format!("bulk of {l}")),
        },
        t @ (b'*' | b'~' | b'>' | b'%') => match n()? {
            -1 if t == b'*' => Ok(after),
            c if c >= 0 => {
                let items = if t == b'%' { 2 * c } else { c };
                let mut at = after;
                for _ in 0..items {
                    at += frame_len(&b[at..])?;
                }
                Ok(at)
            }
            c => Err(format!("aggregate of {c}")),
        },
        t => Err(format!("type {:?}", t as char)),
    }
}

/// SCAN to the end from cursor 0, with `extra` arguments; the keys in the order returned.
pub(crate) fn scan_all(db: &mut Db, extra: &str) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut keys = Vec::new();
    loop {
        let r = db.cmd(&format!("SCAN {cursor}{extra}"));
        let (next, found) = parse_scan(&r);
        keys.extend(found);
        if next == "0" {
            return keys;
        }
        cursor = next;
    }
}

pub(crate) fn parse_scan(r: &str) -> (String, Vec<String>) {
    let lines: Vec<&str> = r.split("\r\n").collect();
    assert_eq!(lines[0], "*2");
    let next = lines[2].to_string();
    let n: usize = lines[3][1..].parse().unwrap();
    let keys = (0..n).map(|i| lines[5 + 2 * i].to_string()).collect();
    (next, keys)
}

/// Run `line` as the server does: the command, then CLIENT REPLY OFF/SKIP take its reply
/// back but for its push messages.
pub(crate) fn served(db: &mut Db, line: &str) -> String {
    let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    let mut out = db.run(&words);
    if db.session.drop_reply() {
        db.session.drop_output_from(&mut out, 0);
    }
    String::from_utf8(out).unwrap()
}
