//! `cxltier serve` answering the string and keyspace commands over a real socket as Redis 7.0
//! does: the string commands in RESP2 and RESP3, SCAN's guarantee while another client inserts
//! and deletes (with most values on NVMe), KEYS, RANDOMKEY, RENAME, COPY, the EXPIRE flags.
//!
//! The client here writes and reads raw RESP2/RESP3, so that every byte the server sends is
//! checked.

mod common;
use common::free_port;
use cxltier_store::testing::{temp_file, TempFile};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_cxltier");
/// Only a guard against a hang: nothing here is timed.
const GUARD: Duration = Duration::from_secs(30);

/// A RESP2 or RESP3 value as the server sent it.
#[derive(Debug, Clone, PartialEq)]
enum V {
    Simple(String),
    Err(String),
    Int(i64),
    Bulk(Vec<u8>),
    NullBulk,
    NullArray,
    Array(Vec<V>),
    Map(Vec<(V, V)>),
    Set(Vec<V>),
    Push(Vec<V>),
    Double(String),
    Null,
    Bool(bool),
    Big(String),
    Verbatim(String, Vec<u8>),
}

impl V {
    fn text(&self) -> String {
        match self {
            V::Simple(s) | V::Err(s) | V::Double(s) | V::Big(s) => s.clone(),
            V::Bulk(b) | V::Verbatim(_, b) => String::from_utf8_lossy(b).into_owned(),
            V::Int(i) => i.to_string(),
            other => panic!("{other:?} is not text"),
        }
    }
    fn items(&self) -> &[V] {
        match self {
            V::Array(v) | V::Set(v) | V::Push(v) => v,
            other => panic!("{other:?} is not an array"),
        }
    }
}

fn bulk(s: &str) -> V {
    V::Bulk(s.as_bytes().to_vec())
}

struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Client {
    fn connect(addr: &str) -> std::io::Result<Client> {
        let s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(GUARD))?;
        Ok(Client {
            r: BufReader::new(s.try_clone()?),
            w: s,
        })
    }
    fn send(&mut self, args: &[&str]) {
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        // write_all goes on after a partial write and retries on EINTR.
        self.w.write_all(&req).unwrap();
    }
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        assert!(l.ends_with("\r\n"), "a reply line without CRLF: {l:?}");
        l.truncate(l.len() - 2);
        l
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0; n + 2];
        self.r.read_exact(&mut b).unwrap();
        assert_eq!(&b[n..], b"\r\n");
        b.truncate(n);
        b
    }
    fn read(&mut self) -> V {
        let l = self.line();
        let (tag, rest) = l.split_at(1);
        let n = || rest.parse::<i64>().unwrap();
        match tag {
            "+" => V::Simple(rest.into()),
            "-" => V::Err(rest.into()),
            ":" => V::Int(n()),
            "$" if n() < 0 => V::NullBulk,
            "$" => V::Bulk(self.bytes(n() as usize)),
            "*" if n() < 0 => V::NullArray,
            "*" => V::Array((0..n()).map(|_| self.read()).collect()),
            "~" => V::Set((0..n()).map(|_| self.read()).collect()),
            ">" => V::Push((0..n()).map(|_| self.read()).collect()),
            "%" => V::Map((0..n()).map(|_| (self.read(), self.read())).collect()),
            "," => V::Double(rest.into()),
            "_" => V::Null,
            "#" => V::Bool(rest == "t"),
            "(" => V::Big(rest.into()),
            "=" => {
                let b = self.bytes(n() as usize);
                V::Verbatim(
                    String::from_utf8_lossy(&b[..3]).into_owned(),
                    b[4..].to_vec(),
                )
            }
            _ => panic!("unknown reply type {l:?}"),
        }
    }
    fn call(&mut self, args: &[&str]) -> V {
        self.send(args);
        self.read()
    }
}

/// A server child, killed when the test ends.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    /// Start `cxltier serve ARGS` on a free port, again on another if the port was taken before
    /// the server bound it (the child answering must be this one: INFO's process_id).
    fn start(args: &[&str]) -> Server {
        let password = args
            .iter()
            .position(|a| *a == "--requirepass")
            .map(|i| args[i + 1]);
        for _ in 0..5 {
            let port = free_port();
            let addr = format!("127.0.0.1:{port}");
            let none = std::env::temp_dir().join(format!("cxltier-keyspace-none-{port}.jsonl"));
            let child = Command::new(BIN)
                .args(["serve", "--bind", &addr, "--quarantine-file"])
                .arg(&none)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut s = Server { child, addr };
            let t = Instant::now();
            while t.elapsed() < GUARD {
                if s.child.try_wait().unwrap().is_some() {
                    break;
                }
                match common::who_answers(&s.addr, password, s.child.id(), GUARD) {
                    common::Answer::Ours => return s,
                    common::Answer::Other => break,
                    common::Answer::Nothing => {}
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
        panic!("no server came up on five free ports");
    }
    fn client(&self) -> Client {
        Client::connect(&self.addr).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// COMMAND and its subcommands describe the table the server dispatches from: every command it
/// knows, with Redis's arity, flags and key positions.
fn temp(name: &str) -> TempFile {
    temp_file("cxltier-keyspace-", name)
}

fn int(n: i64) -> V {
    V::Int(n)
}

fn err(c: &mut Client, args: &[&str]) -> String {
    match c.call(args) {
        V::Err(e) => e,
        other => panic!("{args:?} answered {other:?}, not an error"),
    }
}

#[test]
fn string_commands_in_resp2_and_resp3() {
    let s = Server::start(&["--dram", "32M"]);
    let mut c = s.client();
    assert_eq!(c.call(&["APPEND", "s", "foo"]), int(3));
    assert_eq!(c.call(&["APPEND", "s", "bar"]), int(6));
    assert_eq!(c.call(&["GETRANGE", "s", "-3", "-1"]), bulk("bar"));
    assert_eq!(c.call(&["SETRANGE", "s", "8", "!"]), int(9));
    assert_eq!(c.call(&["GET", "s"]), V::Bulk(b"foobar\0\0!".to_vec()));
    assert_eq!(c.call(&["STRLEN", "s"]), int(9));
    assert_eq!(
        c.call(&["GETSET", "s", "x"]),
        V::Bulk(b"foobar\0\0!".to_vec())
    );
    assert_eq!(c.call(&["GETEX", "s", "PX", "100000"]), bulk("x"));
    assert!(matches!(c.call(&["PTTL", "s"]), V::Int(t) if t > 0 && t <= 100_000));
    assert_eq!(c.call(&["SETNX", "s", "y"]), int(0));
    assert_eq!(c.call(&["MSETNX", "a", "1", "b", "2"]), int(1));
    assert_eq!(c.call(&["INCRBYFLOAT", "a", "0.5"]), bulk("1.5"));
    assert_eq!(c.call(&["SETBIT", "bits", "9", "1"]), int(0));
    assert_eq!(c.call(&["GETBIT", "bits", "9"]), int(1));
    assert_eq!(c.call(&["BITCOUNT", "bits"]), int(1));
    assert_eq!(c.call(&["BITPOS", "bits", "1"]), int(9));
    assert_eq!(c.call(&["GETDEL", "s"]), bulk("x"));
    assert_eq!(c.call(&["GETDEL", "s"]), V::NullBulk);
    assert_eq!(
        err(&mut c, &["SETBIT", "bits", "-1", "1"]),
        "ERR bit offset is not an integer or out of range"
    );
    assert_eq!(
        err(&mut c, &["SETRANGE", "s", "536870912", "x"]),
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    );
    // RESP3: a missing value is the null type.
    c.call(&["HELLO", "3"]);
    assert_eq!(c.call(&["GETDEL", "s"]), V::Null);
    assert_eq!(c.call(&["GETEX", "s"]), V::Null);
    assert_eq!(c.call(&["GETSET", "s", "v"]), V::Null);
    // The arity and flags come from the table.
    let info = c.call(&["COMMAND", "INFO", "getex", "msetnx", "scan"]);
    let getex = &info.items()[0].items();
    assert_eq!(getex[1], int(-2));
    let msetnx = &info.items()[1].items();
    assert_eq!(
        (&msetnx[3], &msetnx[4], &msetnx[5]),
        (&int(1), &int(-1), &int(2))
    );
}

#[test]
fn values_over_max_object_name_the_limit() {
    let s = Server::start(&["--dram", "32M", "--max-object", "1M"]);
    let mut c = s.client();
    let e = err(&mut c, &["SETRANGE", "k", "2000000", "x"]);
    assert!(e.contains("--max-object"), "{e}");
    assert_eq!(c.call(&["EXISTS", "k"]), int(0));
    c.call(&["SET", "k", "v"]);
    let e = err(&mut c, &["SETBIT", "k", "16000000", "1"]);
    assert!(e.contains("--max-object"), "{e}");
    assert_eq!(c.call(&["GET", "k"]), bulk("v"));
}

/// A whole SCAN, COUNT `count`, while `between` runs after each call; the keys returned.
fn scan_all(c: &mut Client, count: &str, mut between: impl FnMut()) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut keys = Vec::new();
    loop {
        let r = c.call(&["SCAN", &cursor, "COUNT", count]);
        let [next, found] = r.items() else {
            panic!("{r:?}")
        };
        keys.extend(found.items().iter().map(V::text));
        cursor = next.text();
        if cursor == "0" {
            return keys;
        }
        between();
    }
}

/// Redis's guarantee, with most values on NVMe and another client inserting and deleting
/// between calls: every key present for the whole scan is returned, and none twice.
#[test]
fn scan_returns_every_key_present_throughout_with_values_on_nvme() {
    let ssd = temp("nvme");
    let s = Server::start(&["--dram", "8M", "--ssd", &format!("{}:64M", ssd.display())]);
    let mut c = s.client();
    let mut other = s.client();
    let value = "v".repeat(4000);
    const N: usize = 3000;
    for i in 0..N {
        c.send(&["SET", &format!("key:{i:05}"), &value]);
    }
    for _ in 0..N {
        assert_eq!(c.read(), V::Simple("OK".into()));
    }
    assert_eq!(c.call(&["DBSIZE"]), int(N as i64));
    let mut step = 0usize;
    let keys = scan_all(&mut c, "97", || {
        // Delete an existing key, insert a new one before and after it.
        let victim = format!("key:{:05}", (step * 37) % N);
        other.call(&["DEL", &victim]);
        other.call(&["SET", &format!("key:{:05}x", step), "new"]);
        other.call(&["SET", &format!("a{step}"), "new"]);
        step += 1;
    });
    let deleted: std::collections::HashSet<String> = (0..step)
        .map(|s| format!("key:{:05}", (s * 37) % N))
        .collect();
    let unique: std::collections::HashSet<&String> = keys.iter().collect();
    assert_eq!(unique.len(), keys.len(), "a key was returned twice");
    for i in 0..N {
        let k = format!("key:{i:05}");
        assert!(
            deleted.contains(&k) || unique.contains(&k),
            "{k} was missed"
        );
    }
    // MATCH and TYPE filter what a call returns.
    c.call(&["HSET", "h", "f", "v"]);
    let r = c.call(&[
        "SCAN", "0", "MATCH", "h*", "TYPE", "hash", "COUNT", "100000",
    ]);
    assert_eq!(r.items()[1], V::Array(vec![bulk("h")]));
    let keys = c.call(&["KEYS", "key:0000?"]);
    assert!(!keys.items().is_empty() && keys.items().len() <= 10);
    assert!(matches!(c.call(&["RANDOMKEY"]), V::Bulk(_)));
}

#[test]
fn rename_copy_and_the_expire_family() {
    let s = Server::start(&["--dram", "32M"]);
    let mut c = s.client();
    c.call(&["SET", "k", "v"]);
    assert_eq!(c.call(&["EXPIRE", "k", "100", "XX"]), int(0));
    assert_eq!(c.call(&["EXPIRE", "k", "100", "NX"]), int(1));
    assert_eq!(c.call(&["EXPIRE", "k", "50", "GT"]), int(0));
    assert_eq!(c.call(&["PEXPIRE", "k", "50000", "LT"]), int(1));
    assert!(matches!(c.call(&["EXPIRETIME", "k"]), V::Int(t) if t > 1_700_000_000));
    assert_eq!(
        err(&mut c, &["EXPIRE", "k", "1", "NX", "GT"]),
        "ERR NX and XX, GT or LT options at the same time are not compatible"
    );
    assert_eq!(c.call(&["RENAME", "k", "k2"]), V::Simple("OK".into()));
    assert!(matches!(c.call(&["TTL", "k2"]), V::Int(t) if t > 0 && t <= 50));
    assert_eq!(c.call(&["RENAMENX", "k2", "k2"]), int(0));
    assert_eq!(c.call(&["COPY", "k2", "k3"]), int(1));
    assert_eq!(c.call(&["COPY", "k2", "k3"]), int(0));
    assert_eq!(c.call(&["TOUCH", "k2", "k3", "k2", "nope"]), int(3));
    assert_eq!(c.call(&["EXISTS", "k2", "k2", "nope"]), int(2));
    assert_eq!(c.call(&["UNLINK", "k2", "k3"]), int(2));
    assert_eq!(err(&mut c, &["RENAME", "k2", "x"]), "ERR no such key");
    assert_eq!(c.call(&["PEXPIRETIME", "k2"]), int(-2));
}
