//! Databases of `cxltier serve` over a real socket: SELECT, SWAPDB kept across a restart and a
//! kill -9, blocking pops per database (and woken by SWAPDB), CLIENT LIST's `db=`, redis-cli
//! -n, `--databases`, and a store of the format before databases opened as database 0.

mod common;
use common::free_port;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cxltier_store::testing::{temp_file, TempFile};

const BIN: &str = env!("CARGO_BIN_EXE_cxltier");
/// Only a guard against a hang: nothing here is timed.
const GUARD: Duration = Duration::from_secs(30);

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
    /// One reply, whole, as the bytes the server sent.
    fn reply(&mut self, out: &mut Vec<u8>) {
        let mut l = Vec::new();
        self.r.read_until(b'\n', &mut l).unwrap();
        assert!(l.ends_with(b"\r\n"), "a reply line without CRLF: {l:?}");
        out.extend_from_slice(&l);
        let n: i64 = std::str::from_utf8(&l[1..l.len() - 2])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        match l[0] {
            b'$' | b'=' if n >= 0 => {
                let mut b = vec![0; n as usize + 2];
                self.r.read_exact(&mut b).unwrap();
                out.extend_from_slice(&b);
            }
            b'*' | b'~' | b'>' => (0..n.max(0)).for_each(|_| self.reply(out)),
            b'%' => (0..2 * n.max(0)).for_each(|_| self.reply(out)),
            _ => {}
        }
    }
    fn cmd(&mut self, line: &str) -> String {
        self.send(line);
        self.read()
    }
    fn send(&mut self, line: &str) {
        let args: Vec<&str> = line.split(' ').collect();
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in &args {
            req.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        self.w.write_all(&req).unwrap();
    }
    fn read(&mut self) -> String {
        let mut out = Vec::new();
        self.reply(&mut out);
        String::from_utf8(out).unwrap()
    }
}

/// A server child, killed when the test ends.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    /// Start `cxltier serve ARGS` on a free port (again on another if this child is not the one
    /// answering there); `Err` with its stderr when it exits instead.
    fn try_start(args: &[&str]) -> Result<Server, String> {
        for _ in 0..5 {
            let port = free_port();
            let addr = format!("127.0.0.1:{port}");
            let none = std::env::temp_dir().join(format!("cxltier-db-none-{port}.jsonl"));
            let child = Command::new(BIN)
                .args(["serve", "--bind", &addr, "--quarantine-file"])
                .arg(&none)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut s = Server { child, addr };
            let t = Instant::now();
            while t.elapsed() < GUARD {
                if s.child.try_wait().unwrap().is_some() {
                    let mut err = String::new();
                    if let Some(mut e) = s.child.stderr.take() {
                        let _ = e.read_to_string(&mut err);
                    }
                    if err.contains("cannot listen") {
                        break;
                    }
                    return Err(err);
                }
                match common::who_answers(&s.addr, None, s.child.id(), GUARD) {
                    common::Answer::Ours => return Ok(s),
                    common::Answer::Other => break,
                    common::Answer::Nothing => {}
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
        Err("no server came up on five free ports".into())
    }
    fn start(args: &[&str]) -> Server {
        Server::try_start(args).unwrap()
    }
    fn client(&self) -> Client {
        Client::connect(&self.addr).unwrap()
    }
    fn port(&self) -> &str {
        self.addr.rsplit(':').next().unwrap()
    }
    /// SHUTDOWN, and wait for the process to end.
    fn stop(mut self) {
        // SHUTDOWN closes the connection without a reply.
        self.client().send("SHUTDOWN");
        let t = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(t.elapsed() < GUARD, "the server did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_blocked(c: &mut Client, n: usize) {
    let t = Instant::now();
    let want = format!("blocked_clients:{n}\r\n");
    while !c.cmd("INFO clients").contains(&want) {
        assert!(t.elapsed() < GUARD, "never {want:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn ssd_args(ssd: &Path, durability: &str) -> Vec<String> {
    vec![
        "--dram".into(),
        "32M".into(),
        "--ssd".into(),
        format!("{}:64M", ssd.display()),
        "--durability".into(),
        durability.into(),
    ]
}

fn start_on(ssd: &TempFile, durability: &str) -> Server {
    let args = ssd_args(ssd, durability);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start(&args)
}

/// Write a key of every type in databases 1 and 2, SWAPDB them, and read back what each
/// database holds: after SWAPDB at once, and after a restart (SHUTDOWN, or kill -9).
fn swapdb_survives(kill_9: bool) {
    let ssd = temp_file("cxltier-db-", "swap.log");
    let restart = |s: Server| {
        if kill_9 {
            s.kill9();
        } else {
            s.stop();
        }
        start_on(&ssd, "always")
    };
    let s = start_on(&ssd, "always");
    let mut c = s.client();
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
    let check = |c: &mut Client| {
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
    check(&mut s.client());
    // Swapped back, and kept so too.
    let mut c = s.client();
    assert_eq!(c.cmd("SWAPDB 2 1"), "+OK\r\n");
    c.cmd("SELECT 1");
    assert_eq!(c.cmd("GET s"), "$3\r\none\r\n");
    drop(c);
    let s = restart(s);
    let mut c = s.client();
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

#[test]
fn swapdb_survives_a_restart() {
    swapdb_survives(false);
}

/// With `--durability always` the SWAPDB's reply leaves only once the map is on disk: a kill
/// -9 right after it keeps the swap.
#[test]
fn swapdb_survives_kill_9_with_durability_always() {
    swapdb_survives(true);
}

/// A blocked pop waits on its own database's key: a push of the same name in another database
/// does not wake it; a push in its database does; and a SWAPDB that brings it a database
/// holding the key wakes it (Redis's scanDatabaseForReadyKeys).
#[test]
fn blocking_pops_wait_in_their_database_and_swapdb_wakes_them() {
    let s = Server::start(&[]);
    let (mut a, mut b) = (s.client(), s.client());
    assert_eq!(a.cmd("SELECT 1"), "+OK\r\n");
    a.send("BLPOP q 0");
    wait_blocked(&mut b, 1);
    assert_eq!(b.cmd("RPUSH q zero"), ":1\r\n");
    // Still blocked: database 0's q is not its q.
    wait_blocked(&mut b, 1);
    let list = b.cmd("CLIENT LIST");
    assert!(list.contains(" flags=b db=1 "), "{list}");
    assert!(list.contains(" flags=N db=0 "), "{list}");
    b.cmd("SELECT 1");
    assert_eq!(b.cmd("RPUSH q one"), ":1\r\n");
    assert_eq!(a.read(), "*2\r\n$1\r\nq\r\n$3\r\none\r\n");
    // Blocked again in database 1; the key appears in database 2, which SWAPDB brings in.
    a.send("BRPOP q 0");
    wait_blocked(&mut b, 1);
    b.cmd("SELECT 2");
    assert_eq!(b.cmd("RPUSH q two"), ":1\r\n");
    wait_blocked(&mut b, 1);
    assert_eq!(b.cmd("SWAPDB 1 2"), "+OK\r\n");
    assert_eq!(a.read(), "*2\r\n$1\r\nq\r\n$3\r\ntwo\r\n");
    wait_blocked(&mut b, 0);
    // The database 0 list was never touched.
    b.cmd("SELECT 0");
    assert_eq!(b.cmd("LRANGE q 0 -1"), "*1\r\n$4\r\nzero\r\n");
    // SORT ... STORE creating the key a client waits on (in its database) wakes it.
    // (In database 0 it creates another database's key: the client waits on.)
    a.send("BLPOP sorted 0");
    wait_blocked(&mut b, 1);
    assert_eq!(b.cmd("RPUSH src 3 1 2"), ":3\r\n");
    assert_eq!(b.cmd("SORT src STORE sorted"), ":3\r\n");
    wait_blocked(&mut b, 1);
    b.cmd("SELECT 1");
    assert_eq!(b.cmd("RPUSH src 6 4 5"), ":3\r\n");
    assert_eq!(b.cmd("SORT src STORE sorted"), ":3\r\n");
    assert_eq!(a.read(), "*2\r\n$6\r\nsorted\r\n$1\r\n4\r\n");
    b.cmd("SELECT 0");
    // BLMPOP names its key without the database.
    a.cmd("SELECT 0");
    assert_eq!(
        a.cmd("BLMPOP 0 2 nothing q LEFT"),
        "*2\r\n$1\r\nq\r\n*1\r\n$4\r\nzero\r\n"
    );
}

/// redis-cli -n picks a database as it does with redis-server; --databases and CONFIG GET
/// databases agree; SELECT past them is refused.
#[test]
fn redis_cli_n_and_the_databases_option() {
    let s = Server::start(&["--databases", "4"]);
    let port = s.port().to_string();
    let cli = |args: &[&str]| -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &port])
            .args(args)
            .output()
            .expect("redis-cli (scripts/install-redis)");
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(cli(&["-n", "3", "SET", "k", "three"]), "OK\n");
    assert_eq!(cli(&["-n", "3", "GET", "k"]), "three\n");
    assert_eq!(cli(&["GET", "k"]), "\n");
    assert_eq!(cli(&["CONFIG", "GET", "databases"]), "databases\n4\n");
    let mut c = s.client();
    assert_eq!(c.cmd("SELECT 4"), "-ERR DB index is out of range\r\n");
    assert!(c
        .cmd("INFO keyspace")
        .contains("db3:keys=1,expires=0,avg_ttl=0\r\n"));
    let err = Server::try_start(&["--databases", "0"]).err().unwrap();
    assert!(err.contains("--databases 0"), "{err}");
}

/// A store holds its databases: restarting it with fewer `--databases` than hold keys is
/// refused with what to do, and with enough it starts.
#[test]
fn a_store_refuses_fewer_databases_than_hold_keys() {
    let ssd = temp_file("cxltier-db-", "fewer.log");
    let s = start_on(&ssd, "always");
    let mut c = s.client();
    c.cmd("SELECT 9");
    assert_eq!(c.cmd("SET k v"), "+OK\r\n");
    drop(c);
    s.stop();
    let mut args = ssd_args(&ssd, "always");
    args.extend(["--databases".into(), "4".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let err = Server::try_start(&args).err().unwrap();
    assert!(
        err.contains("holds 1 keys in database 9") && err.contains("--databases 10"),
        "{err}"
    );
    let mut args = ssd_args(&ssd, "always");
    args.extend(["--databases".into(), "10".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = Server::start(&args);
    let mut c = s.client();
    c.cmd("SELECT 9");
    assert_eq!(c.cmd("GET k"), "$1\r\nv\r\n");
}

/// A store written by the server before databases existed (the store's fixture) opens with
/// every key in database 0.
#[test]
fn a_store_of_the_format_before_databases_serves_its_keys_in_database_0() {
    let ssd = temp_file("cxltier-db-", "old.log");
    let head = include_bytes!("../../cxltier-store/tests/fixtures/format1-db0.log-head");
    let mut bytes = head.to_vec();
    bytes.resize(8 << 20, 0);
    std::fs::write(&*ssd, &bytes).unwrap();
    let ssd_arg = ssd.display().to_string();
    let s = Server::start(&["--dram", "32M", "--ssd", &ssd_arg, "--durability", "always"]);
    let mut c = s.client();
    assert_eq!(c.cmd("DBSIZE"), ":6\r\n");
    assert_eq!(c.cmd("GET str"), "$5\r\nhello\r\n");
    assert_eq!(
        c.cmd("LRANGE l 0 -1"),
        "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
    );
    assert_eq!(c.cmd("ZSCORE z m2"), "$1\r\n2\r\n");
    assert_eq!(c.cmd("HGET h f2"), "$2\r\nv2\r\n");
    assert_eq!(c.cmd("SISMEMBER s x"), ":1\r\n");
    let info = c.cmd("INFO keyspace");
    assert!(info.contains("db0:keys=6,expires=1,avg_ttl="), "{info}");
    c.cmd("SELECT 1");
    assert_eq!(c.cmd("DBSIZE"), ":0\r\n");
}
