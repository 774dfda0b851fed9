//! `cxltier serve` for real: redis-cli and redis-benchmark against it, bad input, kill -9
//! during a YCSB load and during writes of every type with `--durability always`, values of
//! megabytes changed by range, a full NVMe tier, and `cxltier ycsb` against the server,
//! redis-server and memcached. (Commands over a socket alone are the server crate's tests.)
//!
//! The peers (redis-server, redis-tools, memcached) are installed by scripts/peers, which
//! scripts/test runs first; a missing peer fails the test with that instruction.

mod common;
use common::{free_port, need, serve, ServerChild as Server};
use cxltier_store::testing::{temp_file, TempFile};
use std::collections::HashMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cxltier_resp::{Client, Reply};
use cxltier_ycsb::{Phase, Protocol, RunConfig, ScanMethod, Spec};

const BIN: &str = env!("CARGO_BIN_EXE_cxltier");

fn temp(name: &str) -> TempFile {
    temp_file("cxltier-serve-", name)
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

/// A peer server (redis-server, memcached) that is killed when the test ends, passed or not, so
/// that no server outlives the test run.
struct Peer(Child);

impl Peer {
    /// Start `command(port)` on a free port, and again on another one if the child exits before
    /// it has listened and lived on for a moment: a port free when picked may be taken by a test
    /// running in parallel before the peer binds it (the peer then exits, and whatever answers
    /// on the port is not it). Returns the peer and its port.
    fn start(
        command: impl Fn(u16) -> Command,
        answers: fn(&str, u32, Duration) -> common::Answer,
    ) -> (Peer, u16) {
        for _ in 0..5 {
            let port = free_port();
            let mut cmd = command(port);
            let mut peer = Peer(cmd.spawn().unwrap());
            let t = Instant::now();
            let addr = format!("127.0.0.1:{port}");
            let mut other = false;
            while t.elapsed() < Duration::from_secs(20) {
                if peer.0.try_wait().unwrap().is_some() {
                    break;
                }
                match answers(&addr, peer.0.id(), Duration::from_secs(20)) {
                    common::Answer::Ours => return (peer, port),
                    common::Answer::Other => {
                        other = true;
                        break;
                    }
                    common::Answer::Nothing => {}
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(
                peer.0.try_wait().unwrap().is_some() || other,
                "{:?} did not answer on port {port} within 20 s",
                cmd.get_program()
            );
        }
        panic!("could not start a peer on any of 5 free ports");
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A connection that returns its failures (the tests here look at some of them).
fn client(s: &Server) -> Client {
    Client::connect(&s.addr).unwrap()
}

fn call(c: &mut Client, args: &[&str]) -> Reply {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    c.call(&a).unwrap()
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

#[test]
fn bad_options_are_explained() {
    let run = |args: &[&str]| Command::new(BIN).arg("serve").args(args).output().unwrap();
    let out = run(&["--durability", "always"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--ssd"));
    let out = run(&["--dram-node", "99", "--bind", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no NUMA node 99"));
    for depth in ["0", "257"] {
        let out = run(&["--nvme-queue-depth", depth, "--bind", "127.0.0.1:0"]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--nvme-queue-depth") && err.contains("between 1 and 256"),
            "{err}"
        );
    }
    let out = run(&["--ssd", "/nonexistent-dir/x.log:1G"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent-dir/x.log"));
    let dir = tempfile::tempdir().unwrap();
    let out = run(&["--quarantine-file", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a directory"));
    // An ACL file that does not load: every line's error, and no start.
    let acl = dir.path().join("users.acl");
    std::fs::write(&acl, "user a on +nosuch\n").unwrap();
    let out = run(&["--acl-file", acl.to_str().unwrap(), "--bind", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("users.acl:1: Error in applying operation '+nosuch'"),
        "{err}"
    );
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let out = run(&["--bind", &addr]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("in use"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn load_config(addr: &str, records: u64, hook: Option<cxltier_ycsb::AckHook>) -> RunConfig {
    RunConfig {
        addr: addr.to_string(),
        protocol: Protocol::Resp,
        scan: ScanMethod::Auto,
        phase: Phase::Load,
        threads: 1,
        connections: 4,
        pipeline: 8,
        target: None,
        operations: records,
        max_time: None,
        password: None,
        seed: 5,
        on_ack: hook,
        on_progress: None,
        send_interval: std::time::Duration::from_micros(50),
        interval_period: std::time::Duration::from_secs(10),
        on_interval: None,
        hdr_log: None,
    }
}

type Acked = Arc<Mutex<HashMap<String, Vec<(String, Vec<u8>)>>>>;

#[test]
fn kill_9_during_a_ycsb_load_loses_no_acknowledged_write() {
    let ssd = temp("nvme");
    let spec = format!("{}:256M", ssd.display());
    let s = serve(&["--dram", "16M", "--ssd", &spec, "--durability", "always"]);
    let acked: Acked = Arc::default();
    let hook_acked = acked.clone();
    let hook: cxltier_ycsb::AckHook = Arc::new(move |k, f| {
        hook_acked.lock().unwrap().insert(k.to_string(), f.to_vec());
    });
    let cfg = load_config(&s.addr, 200_000, Some(hook));
    let data = cxltier_ycsb::DataSet {
        records: 200_000,
        insert_start: 0,
        field_count: 10,
        field_length: 100,
        data_integrity: false,
    };
    let shared =
        cxltier_ycsb::shared(Spec::core('a').unwrap(), Phase::Load, data, 200_000).unwrap();
    let loader = std::thread::spawn(move || cxltier_ycsb::run(&cfg, shared));
    // Kill the server mid-load.
    let t = Instant::now();
    while acked.lock().unwrap().len() < 5_000 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the load does not progress"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    s.kill9();
    let result = loader.join().unwrap();
    assert!(result.is_err(), "the load should have seen the server die");
    let acked = acked.lock().unwrap().clone();
    let s = serve(&["--dram", "16M", "--ssd", &spec, "--durability", "always"]);
    let mut c = client(&s);
    for (key, fields) in &acked {
        let Reply::Array(items) = c.call(&[b"HGETALL", key.as_bytes()]).unwrap() else {
            panic!("{key} is gone after kill -9 although its insert was acknowledged")
        };
        assert_eq!(items.len(), 20, "{key}");
        for (i, (f, v)) in fields.iter().enumerate() {
            assert_eq!(items[2 * i], Reply::Bulk(f.as_bytes().to_vec()));
            assert_eq!(items[2 * i + 1], Reply::Bulk(v.clone()), "{key} {f}");
        }
    }
    eprintln!(
        "{} acknowledged inserts, all present after kill -9",
        acked.len()
    );
}

#[test]
fn a_full_nvme_tier_fails_writes_keeps_reads_and_data() {
    let ssd = temp("nvme");
    let spec = format!("{}:24M", ssd.display());
    let s = serve(&["--dram", "8M", "--ssd", &spec, "--durability", "always"]);
    let mut c = client(&s);
    let value = "x".repeat(4000);
    let mut written = 0;
    let err = loop {
        match call(&mut c, &["SET", &format!("k{written}"), &value]) {
            Reply::Simple(_) => written += 1,
            Reply::Error(e) => break e,
            other => panic!("{other:?}"),
        }
        assert!(written < 100_000, "never full");
    };
    assert!(err.contains("full") && err.contains("--ssd"), "{err}");
    for i in (0..written).step_by(7) {
        assert_eq!(
            call(&mut c, &["GET", &format!("k{i}")]),
            bulk(&value),
            "k{i}"
        );
    }
    // Still full for writes, still fine for reads, and nothing is lost across a restart.
    assert!(matches!(
        call(&mut c, &["SET", "more", &value]),
        Reply::Error(_)
    ));
    s.kill9();
    let s = serve(&["--dram", "8M", "--ssd", &spec, "--durability", "always"]);
    let mut c = client(&s);
    assert_eq!(call(&mut c, &["DBSIZE"]), Reply::Int(written));
    for i in 0..written {
        assert_eq!(
            call(&mut c, &["GET", &format!("k{i}")]),
            bulk(&value),
            "k{i}"
        );
    }
    // Deleting makes room again.
    for i in 0..written / 2 {
        call(&mut c, &["DEL", &format!("k{i}")]);
    }
    assert_eq!(call(&mut c, &["SET", "more", &value]), ok());
}

#[test]
fn redis_cli_and_redis_benchmark_work() {
    need("redis-cli");
    need("redis-benchmark");
    let s = serve(&[]);
    let port = s.addr.rsplit(':').next().unwrap().to_string();
    let cli = |args: &[&str]| {
        let out = Command::new("redis-cli")
            .args(["-p", &port])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(cli(&["ping"]), "PONG");
    assert_eq!(cli(&["set", "k", "hello world"]), "OK");
    assert_eq!(cli(&["get", "k"]), "hello world");
    assert!(cli(&["info", "tiers"]).contains("tier_dram_objects:"));
    let out = Command::new("redis-benchmark")
        .args([
            "-p", &port, "-t", "set,get", "-n", "20000", "-q", "-d", "100",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("SET:") && text.contains("GET:"), "{text}");
    assert_eq!(
        cli(&["dbsize"]),
        "2",
        "redis-benchmark uses one key (key:__rand_int__ without -r), plus ours"
    );
    assert_eq!(cli(&["get", "key:__rand_int__"]).len(), 100);
}

fn ycsb(args: &[&str]) -> serde_json::Value {
    let out = Command::new(BIN)
        .arg("ycsb")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ycsb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn ycsb_runs_every_workload_against_the_store_redis_and_memcached() {
    need("redis-server");
    need("memcached");
    let ssd = temp("nvme");
    let s = serve(&["--dram", "16M", "--ssd", &format!("{}:256M", ssd.display())]);
    let (redis, redis_port) = Peer::start(
        |port| {
            let mut c = Command::new("redis-server");
            c.args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
            c
        },
        |addr, pid, patience| common::who_answers(addr, None, pid, patience),
    );
    let (mc, mc_port) = Peer::start(
        |port| {
            let mut c = Command::new("memcached");
            c.args([
                "-l",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-m",
                "64",
                "-U",
                "0",
            ]);
            // memcached refuses to run as root unless told which user to run as.
            if is_root() {
                c.args(["-u", "root"]);
            }
            c.stderr(Stdio::null());
            c
        },
        common::memcached_answers,
    );
    let redis_addr = format!("127.0.0.1:{redis_port}");
    let mc_addr = format!("127.0.0.1:{mc_port}");
    // 20k records of 1 KB: more than the store's 16 MB of DRAM, so NVMe serves part of it.
    for (addr, proto) in [
        (s.addr.as_str(), "resp"),
        (redis_addr.as_str(), "resp"),
        (mc_addr.as_str(), "memcache"),
    ] {
        let load = ycsb(&[
            "load",
            "--records",
            "20000",
            "--addr",
            addr,
            "--protocol",
            proto,
        ]);
        assert_eq!(load["operations"], 20000);
        for w in ["a", "b", "c", "d", "e", "f"] {
            if w == "e" && proto == "memcache" {
                let out = Command::new(BIN)
                    .args([
                        "ycsb",
                        "run",
                        "--workload",
                        "e",
                        "--records",
                        "20000",
                        "--protocol",
                        "memcache",
                        "--addr",
                        addr,
                    ])
                    .output()
                    .unwrap();
                assert_eq!(out.status.code(), Some(2));
                assert!(String::from_utf8_lossy(&out.stderr).contains("no scan"));
                continue;
            }
            let ops = if w == "e" { "2000" } else { "10000" };
            let r = ycsb(&[
                "run",
                "--workload",
                w,
                "--records",
                "20000",
                "--ops",
                ops,
                "--addr",
                addr,
                "--protocol",
                proto,
            ]);
            assert_eq!(r["errors"], 0, "{w} on {addr}: {r}");
            assert_eq!(r["verify_errors"], 0, "{w} on {addr}: {r}");
            assert_eq!(
                r["operations"].as_u64().unwrap(),
                ops.parse::<u64>().unwrap(),
                "{w} on {addr}"
            );
        }
    }
    drop(redis);
    drop(mc);
    // The store really tiered: objects on NVMe and reads from it.
    let mut c = client(&s);
    let Reply::Bulk(info) = call(&mut c, &["INFO", "tiers"]) else {
        panic!()
    };
    let info = String::from_utf8(info).unwrap();
    let field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    assert!(
        field("tier_nvme_objects") > 0 && field("tier_nvme_reads") > 0,
        "{info}"
    );
}

#[test]
fn ycsb_bad_input_is_explained() {
    let out = Command::new(BIN)
        .args(["ycsb", "run", "--workload", "z"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a, b, c, d, e, f"));
    let port = free_port();
    let out = Command::new(BIN)
        .args(["ycsb", "load", "--addr", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cxltier serve"));
    // The report options: each refusal names the option and what to give instead.
    let addr = format!("127.0.0.1:{port}");
    for (args, says) in [
        (
            &["--hdr-log", "/nonexistent-dir/run.hdr"][..],
            "--hdr-log /nonexistent-dir/run.hdr",
        ),
        (&["--status-interval", "0"][..], "--status-interval 0"),
        (&["--json", "--format", "ycsb"][..], "cannot be used with"),
    ] {
        let out = Command::new(BIN)
            .args(["ycsb", "run", "--addr", &addr])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn data_integrity_checks_every_byte_read_back_through_the_tiers() {
    let ssd = temp("nvme");
    // 8 MB of DRAM for 20k records of 1 KB: most reads come back from NVMe. Two reads at the
    // device at once, against the driver's 128 requests in flight: most reads wait in the server
    // for their turn, and must still bring back the right bytes, each to its own command.
    let s = serve(&[
        "--dram",
        "8M",
        "--ssd",
        &format!("{}:256M", ssd.display()),
        "--nvme-queue-depth",
        "2",
    ]);
    let common = ["--records", "20000", "--addr", &s.addr, "--data-integrity"];
    let load = ycsb(&[&["load"][..], &common].concat());
    assert_eq!(load["errors"], 0, "{load}");
    let run = ycsb(&[&["run", "--workload", "a", "--ops", "20000"][..], &common].concat());
    assert_eq!(run["errors"], 0, "{run}");
    assert_eq!(run["verify_errors"], 0, "{run}");
    let reads = run["per_operation"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["operation"] == "READ")
        .unwrap()["count"]
        .as_u64()
        .unwrap();
    assert!(reads > 5_000, "{run}");
    // Negative control: damage one field of every record the way a buggy tier would (same
    // length, other bytes); the next reads must notice.
    let mut c = client(&s);
    for k in 0..20_000i64 {
        let key = cxltier_ycsb::generator::key_name(k, 1);
        let bad = "x".repeat(100);
        assert_eq!(call(&mut c, &["HSET", &key, "field3", &bad]), Reply::Int(0));
    }
    let out = Command::new(BIN)
        .args(
            [
                &["ycsb", "run", "--workload", "c", "--ops", "2000"][..],
                &common,
            ]
            .concat(),
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("2000 verify errors"), "{err}");
    s.stop();
}

/// Values up to 512 MB (Redis's proto-max-bulk-len) by default: a 4 MB value set (past a 1 MB
/// query buffer limit), read, appended to and read and changed by range over a socket, kept
/// across a kill -9 with `--durability always` in less DRAM than it takes; a value over
/// `--max-object` gets an error, and the connection serves the next command.
#[test]
fn big_values_round_trip_and_change_by_range_over_a_socket() {
    let ssd = temp("big");
    let spec = format!("{}:256M", ssd.display());
    // A query buffer limit under the value: a command's bulk data count on top of it.
    let args = [
        "--dram",
        "16M",
        "--ssd",
        &spec,
        "--durability",
        "always",
        "--client-query-buffer-limit",
        "1mb",
    ];
    let s = serve(&args);
    let mut c = client(&s);
    let mut v: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(c.call(&[b"SET", b"big", &v]).unwrap(), ok());
    assert_eq!(c.call(&[b"GET", b"big"]).unwrap(), Reply::Bulk(v.clone()));
    assert_eq!(
        call(&mut c, &["APPEND", "big", "tail"]),
        Reply::Int(4_000_004)
    );
    v.extend_from_slice(b"tail");
    assert_eq!(
        call(&mut c, &["GETRANGE", "big", "3999998", "-1"]),
        Reply::Bulk(v[3_999_998..].to_vec())
    );
    assert_eq!(
        call(&mut c, &["SETRANGE", "big", "1000000", "hello"]),
        Reply::Int(4_000_004)
    );
    v[1_000_000..1_000_005].copy_from_slice(b"hello");
    assert_eq!(call(&mut c, &["SETBIT", "big", "7", "1"]), Reply::Int(0));
    v[0] |= 1;
    assert_eq!(call(&mut c, &["GETBIT", "big", "7"]), Reply::Int(1));
    assert_eq!(call(&mut c, &["STRLEN", "big"]), Reply::Int(4_000_004));
    assert_eq!(
        call(&mut c, &["TYPE", "big"]),
        Reply::Simple("string".into())
    );
    assert_eq!(
        call(&mut c, &["CONFIG", "GET", "proto-max-bulk-len"]),
        Reply::Array(vec![
            bulk("proto-max-bulk-len"),
            bulk(&((512 << 20) + (64 << 10)).to_string()),
        ])
    );
    s.kill9();
    let s = serve(&args);
    let mut c = client(&s);
    assert_eq!(c.call(&[b"GET", b"big"]).unwrap(), Reply::Bulk(v));
    drop(c);
    drop(s);

    let s = serve(&["--dram", "32M", "--max-object", "2M"]);
    let mut c = client(&s);
    let over = vec![b'x'; (2 << 20) + 1000];
    let Reply::Error(e) = c.call(&[b"SET", b"k", &over]).unwrap() else {
        panic!("a value over --max-object was stored")
    };
    assert!(e.contains("larger than the maximum object size"), "{e}");
    assert_eq!(call(&mut c, &["PING"]), Reply::Simple("PONG".into()));
    assert_eq!(call(&mut c, &["EXISTS", "k"]), Reply::Int(0));
}

/// A key's value as a client sees it, for the kill -9 test of every type.
#[derive(Debug, Clone, PartialEq)]
enum Model {
    Str(Vec<u8>),
    List(std::collections::VecDeque<Vec<u8>>),
    Set(std::collections::BTreeSet<Vec<u8>>),
    ZSet(std::collections::BTreeMap<Vec<u8>, i64>),
    Hash(std::collections::BTreeMap<Vec<u8>, Vec<u8>>),
}

/// One write of the kill -9 test: its command, and its effect on the model once acknowledged.
fn any_type_write(i: u64) -> (String, Vec<Vec<u8>>) {
    let r = i
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        >> 33;
    let k = r % 7;
    let m = format!("m{}", r % 23).into_bytes();
    let b = |s: &str| s.as_bytes().to_vec();
    match r % 12 {
        0 | 1 => {
            let key = format!("str{k}");
            (
                key.clone(),
                vec![b("SET"), b(&key), format!("v{i}").into_bytes()],
            )
        }
        // A big string set whole now and then, appended to and patched in between.
        2 if i % 5 == 0 => {
            let key = format!("big{}", k % 2);
            let v: Vec<u8> = (0..1_500_000u64).map(|j| (j * 7 + i) as u8).collect();
            (key.clone(), vec![b("SET"), b(&key), v])
        }
        2 => {
            let key = format!("big{}", k % 2);
            (key.clone(), vec![b("APPEND"), b(&key), vec![i as u8; 3000]])
        }
        3 => {
            let key = format!("big{}", k % 2);
            let at = (r % 1_400_000).to_string();
            (
                key.clone(),
                vec![
                    b("SETRANGE"),
                    b(&key),
                    b(&at),
                    format!("@{i}@").into_bytes(),
                ],
            )
        }
        4 | 5 => {
            let key = format!("list{k}");
            (
                key.clone(),
                vec![b("RPUSH"), b(&key), format!("e{i}").into_bytes()],
            )
        }
        6 => {
            let key = format!("list{k}");
            (key.clone(), vec![b("LPOP"), b(&key)])
        }
        7 => {
            let key = format!("set{k}");
            (key.clone(), vec![b("SADD"), b(&key), m])
        }
        8 => {
            let key = format!("set{k}");
            (key.clone(), vec![b("SREM"), b(&key), m])
        }
        9 => {
            let key = format!("zset{k}");
            let score = ((r >> 8) % 1000).to_string();
            (key.clone(), vec![b("ZADD"), b(&key), b(&score), m])
        }
        10 => {
            let key = format!("hash{k}");
            (
                key.clone(),
                vec![b("HSET"), b(&key), m, format!("h{i}").into_bytes()],
            )
        }
        _ => {
            let key = format!("hash{k}");
            (key.clone(), vec![b("HDEL"), b(&key), m])
        }
    }
}

/// The model after `cmd` (as Redis applies it); an emptied collection is gone.
fn apply(model: &mut HashMap<String, Model>, key: &str, cmd: &[Vec<u8>]) {
    use std::collections::{BTreeMap, BTreeSet, VecDeque};
    let cur = model.remove(key);
    let new = match (cmd[0].as_slice(), cur) {
        (b"SET", _) => Some(Model::Str(cmd[2].clone())),
        (b"APPEND", cur) => {
            let mut v = match cur {
                Some(Model::Str(v)) => v,
                _ => Vec::new(),
            };
            v.extend_from_slice(&cmd[2]);
            Some(Model::Str(v))
        }
        (b"SETRANGE", cur) => {
            let mut v = match cur {
                Some(Model::Str(v)) => v,
                _ => Vec::new(),
            };
            let at: usize = std::str::from_utf8(&cmd[2]).unwrap().parse().unwrap();
            if v.len() < at + cmd[3].len() {
                v.resize(at + cmd[3].len(), 0);
            }
            v[at..at + cmd[3].len()].copy_from_slice(&cmd[3]);
            Some(Model::Str(v))
        }
        (b"RPUSH", cur) => {
            let mut l = match cur {
                Some(Model::List(l)) => l,
                _ => VecDeque::new(),
            };
            l.push_back(cmd[2].clone());
            Some(Model::List(l))
        }
        (b"LPOP", cur) => match cur {
            Some(Model::List(mut l)) => {
                l.pop_front();
                (!l.is_empty()).then_some(Model::List(l))
            }
            other => other,
        },
        (b"SADD", cur) => {
            let mut s = match cur {
                Some(Model::Set(s)) => s,
                _ => BTreeSet::new(),
            };
            s.insert(cmd[2].clone());
            Some(Model::Set(s))
        }
        (b"SREM", cur) => match cur {
            Some(Model::Set(mut s)) => {
                s.remove(&cmd[2]);
                (!s.is_empty()).then_some(Model::Set(s))
            }
            other => other,
        },
        (b"ZADD", cur) => {
            let mut z = match cur {
                Some(Model::ZSet(z)) => z,
                _ => BTreeMap::new(),
            };
            let score = std::str::from_utf8(&cmd[2]).unwrap().parse().unwrap();
            z.insert(cmd[3].clone(), score);
            Some(Model::ZSet(z))
        }
        (b"HSET", cur) => {
            let mut h = match cur {
                Some(Model::Hash(h)) => h,
                _ => BTreeMap::new(),
            };
            h.insert(cmd[2].clone(), cmd[3].clone());
            Some(Model::Hash(h))
        }
        (b"HDEL", cur) => match cur {
            Some(Model::Hash(mut h)) => {
                h.remove(&cmd[2]);
                (!h.is_empty()).then_some(Model::Hash(h))
            }
            other => other,
        },
        (c, _) => panic!("no model for {}", String::from_utf8_lossy(c)),
    };
    if let Some(v) = new {
        model.insert(key.to_string(), v);
    }
}

/// What the server holds under `key`, read as the model's type says.
fn read_back(c: &mut Client, key: &str, like: Option<&Model>) -> Option<Model> {
    use std::collections::{BTreeMap, BTreeSet};
    let items = |r: Reply| -> Vec<Vec<u8>> {
        match r {
            Reply::Array(v) => v
                .into_iter()
                .map(|x| match x {
                    Reply::Bulk(b) => b,
                    other => panic!("{key}: {other:?}"),
                })
                .collect(),
            other => panic!("{key}: {other:?}"),
        }
    };
    let k = key.as_bytes();
    let got = match like {
        None => {
            assert_eq!(call(c, &["EXISTS", key]), Reply::Int(0), "{key} came back");
            return None;
        }
        Some(Model::Str(_)) => match c.call(&[b"GET", k]).unwrap() {
            Reply::Bulk(v) => Model::Str(v),
            _ => return None,
        },
        Some(Model::List(_)) => {
            Model::List(items(c.call(&[b"LRANGE", k, b"0", b"-1"]).unwrap()).into())
        }
        Some(Model::Set(_)) => Model::Set(
            items(c.call(&[b"SMEMBERS", k]).unwrap())
                .into_iter()
                .collect::<BTreeSet<_>>(),
        ),
        Some(Model::ZSet(_)) => {
            let flat = items(c.call(&[b"ZRANGE", k, b"0", b"-1", b"WITHSCORES"]).unwrap());
            Model::ZSet(
                flat.chunks(2)
                    .map(|p| {
                        let s: f64 = std::str::from_utf8(&p[1]).unwrap().parse().unwrap();
                        (p[0].clone(), s as i64)
                    })
                    .collect::<BTreeMap<_, _>>(),
            )
        }
        Some(Model::Hash(_)) => {
            let flat = items(c.call(&[b"HGETALL", k]).unwrap());
            Model::Hash(
                flat.chunks(2)
                    .map(|p| (p[0].clone(), p[1].clone()))
                    .collect::<BTreeMap<_, _>>(),
            )
        }
    };
    let empty = match &got {
        Model::List(l) => l.is_empty(),
        Model::Set(s) => s.is_empty(),
        Model::ZSet(z) => z.is_empty(),
        Model::Hash(h) => h.is_empty(),
        Model::Str(_) => false,
    };
    (!empty).then_some(got)
}

/// `--durability always` under kill -9 with writes of every type in flight: strings, big strings
/// (set, appended, patched), lists, sets, sorted sets and hashes (adds and removes). After the
/// restart every key holds what its acknowledged writes made it; only the one write whose reply
/// never came may or may not be there.
#[test]
fn kill_9_loses_no_acknowledged_write_of_any_type() {
    let ssd = temp("anytype");
    let spec = format!("{}:512M", ssd.display());
    let args = ["--dram", "16M", "--ssd", &spec, "--durability", "always"];
    let s = serve(&args);
    type Shared = Arc<Mutex<(HashMap<String, Model>, Option<(String, Vec<Vec<u8>>)>, u64)>>;
    let shared: Shared = Arc::default();
    let writer = {
        let shared = shared.clone();
        let mut c = client(&s);
        std::thread::spawn(move || {
            for i in 0.. {
                let (key, cmd) = any_type_write(i);
                shared.lock().unwrap().1 = Some((key.clone(), cmd.clone()));
                let args: Vec<&[u8]> = cmd.iter().map(Vec::as_slice).collect();
                match c.call(&args) {
                    Ok(Reply::Error(e)) => panic!("{key}: {e}"),
                    Ok(_) => {
                        let mut g = shared.lock().unwrap();
                        apply(&mut g.0, &key, &cmd);
                        g.1 = None;
                        g.2 += 1;
                    }
                    Err(_) => return,
                }
            }
        })
    };
    let t = Instant::now();
    while shared.lock().unwrap().2 < 3000 {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the writes do not progress"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    s.kill9();
    writer.join().unwrap();
    let (model, pending, acked) = shared.lock().unwrap().clone();
    let s = serve(&args);
    let mut c = client(&s);
    let mut keys: Vec<&String> = model.keys().collect();
    if let Some((k, _)) = &pending {
        keys.push(k);
    }
    for key in keys {
        let want = model.get(key);
        // The model had the one write whose reply never came run: the key may be either way.
        let mut after = model.clone();
        let pending_here = pending.as_ref().filter(|(k, _)| k == key);
        if let Some((_, cmd)) = pending_here {
            apply(&mut after, key, cmd);
        }
        let got = read_back(&mut c, key, want.or(after.get(key)));
        if got.as_ref() == want {
            continue;
        }
        assert!(
            pending_here.is_some(),
            "{key} lost an acknowledged write: {got:?} != {want:?}"
        );
        assert_eq!(
            got.as_ref(),
            after.get(key),
            "{key} is neither as acknowledged nor as after its unacknowledged write"
        );
    }
    eprintln!("{acked} acknowledged writes of every type, all present after kill -9");
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

/// `[SECTION], metric, value` lines as YCSB's result parsers read them: section → metric → value.
fn parse_ycsb_report(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut sections: HashMap<String, HashMap<String, String>> = HashMap::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ", ");
        let (Some(section), Some(metric), Some(value)) = (parts.next(), parts.next(), parts.next())
        else {
            panic!("not a YCSB report line: {line:?}\n{text}");
        };
        let section = section
            .strip_prefix('[')
            .and_then(|s| s.strip_suffix(']'))
            .unwrap_or_else(|| panic!("no [SECTION] in {line:?}"));
        let old = sections
            .entry(section.to_string())
            .or_default()
            .insert(metric.to_string(), value.to_string());
        assert!(old.is_none(), "{section}/{metric} twice:\n{text}");
    }
    sections
}

/// `ycsb run --format ycsb` against serve: stdout is YCSB 0.17's report, every line of it
/// parseable the way YCSB's own tools read it, with p95, min and Return=OK per operation; stderr
/// has YCSB's status lines (stdout is a pipe); the HdrHistogram log reads back with the crate's
/// interval log reader and holds every operation, by tag and all together; `--json` has p95 and
/// min too.
#[test]
fn ycsb_format_report_status_lines_and_hdr_log_read_back() {
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;
    let s = serve(&["--dram", "64M"]);
    let common = ["--records", "2000", "--addr", &s.addr];
    let load = ycsb(&[&["load"][..], &common].concat());
    assert_eq!(load["errors"], 0, "{load}");
    let log = temp("ycsb.hdr");
    let ops = 6000u64;
    let out = Command::new(BIN)
        .args(["ycsb", "run", "--workload", "a", "--ops", &ops.to_string()])
        .args(common)
        // Open loop at 6,000 ops/s: about a second, so several 0.2 s status intervals.
        .args([
            "--target",
            "6000",
            "--format",
            "ycsb",
            "--status-interval",
            "0.2",
        ])
        .args(["--hdr-log", &log.display().to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report = parse_ycsb_report(&stdout);
    let overall = &report["OVERALL"];
    let run_ms: f64 = overall["RunTime(ms)"].parse().unwrap();
    let throughput: f64 = overall["Throughput(ops/sec)"].parse().unwrap();
    assert!(run_ms >= 900.0, "{stdout}");
    assert!(
        (throughput * run_ms / 1000.0 - ops as f64).abs() < 1.0,
        "{stdout}"
    );
    let mut counted = 0;
    let mut per_op = HashMap::new();
    for name in ["READ", "UPDATE"] {
        let m = &report[name];
        let get = |k: &str| -> u64 {
            m.get(k)
                .unwrap_or_else(|| panic!("no [{name}], {k}:\n{stdout}"))
                .parse()
                .unwrap()
        };
        let avg: f64 = m["AverageLatency(us)"].parse().unwrap();
        let (min, p95, p99, max) = (
            get("MinLatency(us)"),
            get("95thPercentileLatency(us)"),
            get("99thPercentileLatency(us)"),
            get("MaxLatency(us)"),
        );
        assert!(
            min >= 1 && (min as f64) <= avg && p95 <= p99 && p99 <= max,
            "{stdout}"
        );
        assert_eq!(get("Return=OK"), get("Operations"), "{stdout}");
        assert!(!m.contains_key("Return=ERROR"), "{stdout}");
        counted += get("Operations");
        per_op.insert(name, get("Operations"));
    }
    assert_eq!(counted, ops, "{stdout}");
    assert_eq!(report.len(), 3, "OVERALL, READ, UPDATE only:\n{stdout}");

    // Status lines: "yyyy-MM-dd HH:mm:ss:SSS N sec: N operations; ...", one at the start, one
    // per interval, one at the end (with every operation done).
    let status: Vec<&str> = stderr.lines().filter(|l| l.contains(" sec: ")).collect();
    assert!(status.len() >= 4, "{stderr}");
    for l in &status {
        let b = l.as_bytes();
        assert!(
            b.len() > 24 && b[4] == b'-' && b[10] == b' ' && b[19] == b':' && b[23] == b' ',
            "{l}"
        );
    }
    // YCSB's first line divides by a rate of 0: at 0 ms of the run that is 0/0 (NaN, taken as 0
    // seconds), a millisecond later 1/0 (Java's Long.MAX_VALUE seconds); real YCSB logs show
    // both, and which one depends on how fast the first line comes.
    assert!(
        status[0].ends_with(" 0 operations; est completion in 0 seconds ")
            || status[0]
                .ends_with(" 0 operations; est completion in 106751991167300 days 15 hours "),
        "{stderr}"
    );
    let last = status.last().unwrap();
    assert!(last.contains(&format!(" {ops} operations; ")), "{last}");
    assert!(
        status.iter().any(|l| l.contains("[READ: Count=")),
        "{stderr}"
    );

    // The interval log: per interval an untagged histogram of everything and one per operation.
    let text = std::fs::read(&*log).unwrap();
    assert!(
        text.starts_with(b"#[Logging for: "),
        "{}",
        String::from_utf8_lossy(&text)
    );
    let mut deserializer = Deserializer::new();
    let mut by_tag: HashMap<String, u64> = HashMap::new();
    let mut intervals = 0;
    let mut start_time = None;
    for entry in IntervalLogIterator::new(&text) {
        match entry.unwrap() {
            LogEntry::StartTime(t) => start_time = Some(t),
            LogEntry::Interval(h) => {
                let decoded: hdrhistogram::Histogram<u64> = deserializer
                    .deserialize(&mut base64_decode(h.encoded_histogram()).as_slice())
                    .unwrap();
                let tag = h.tag().map_or("", |t| t.as_str()).to_string();
                intervals += usize::from(tag.is_empty());
                *by_tag.entry(tag).or_default() += decoded.len();
            }
            LogEntry::BaseTime(_) => panic!("YCSB's logs have no BaseTime"),
        }
    }
    assert!(start_time.is_some());
    assert!(intervals >= 3, "{intervals} intervals");
    assert_eq!(by_tag[""], ops, "{by_tag:?}");
    for (name, n) in per_op {
        assert_eq!(by_tag[name], n, "{name}: {by_tag:?}");
    }

    // --json: p95 and min beside the fields it had.
    let json = ycsb(&[&["run", "--workload", "a", "--ops", "2000"][..], &common].concat());
    for o in json["per_operation"].as_array().unwrap() {
        let (min, p95, p99) = (
            o["min_us"].as_u64().unwrap(),
            o["p95_us"].as_u64().unwrap(),
            o["p99_us"].as_u64().unwrap(),
        );
        assert!(min >= 1 && min <= p95 && p95 <= p99, "{o}");
    }
    s.stop();
}

/// A stream with a consumer group under `--durability always`, cut by kill -9: after the
/// restart it holds every acknowledged entry, its last id and counters, and its group's
/// delivered id, pending entries and consumers as acknowledged.
#[test]
fn kill_9_keeps_a_stream_and_its_group() {
    let ssd = temp("stream");
    let spec = format!("{}:256M", ssd.display());
    let args = ["--dram", "16M", "--ssd", &spec, "--durability", "always"];
    let s = serve(&args);
    let mut c = client(&s);
    let call = |c: &mut Client, line: &str| -> Reply {
        let a: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let r = c.call(&a).unwrap();
        assert!(!matches!(r, Reply::Error(_)), "{line}: {r:?}");
        r
    };
    let value = "v".repeat(200);
    for i in 1..=3000 {
        call(&mut c, &format!("XADD s {i}-0 n {i} pad {value}"));
        if i == 10 {
            call(&mut c, "XGROUP CREATE s g 0");
        }
        if i % 100 == 0 {
            // 100 delivered to alice, then the first half of them acknowledged.
            call(&mut c, "XREADGROUP GROUP g alice COUNT 100 STREAMS s >");
            let ids: Vec<String> = (i - 99..=i - 50).map(|n| format!("{n}-0")).collect();
            call(&mut c, &format!("XACK s g {}", ids.join(" ")));
        }
    }
    call(&mut c, "XDEL s 7-0");
    call(&mut c, "XGROUP CREATECONSUMER s g bob");
    let before: Vec<Reply> = [
        "XLEN s",
        "XINFO GROUPS s",
        "XPENDING s g",
        "XRANGE s - + COUNT 3",
        "XREVRANGE s + - COUNT 3",
        "XPENDING s g - + 5 alice",
    ]
    .iter()
    .map(|l| call(&mut c, l))
    .collect();
    s.kill9();
    let s = serve(&args);
    let mut c = client(&s);
    let after: Vec<Reply> = [
        "XLEN s",
        "XINFO GROUPS s",
        "XPENDING s g",
        "XRANGE s - + COUNT 3",
        "XREVRANGE s + - COUNT 3",
        "XPENDING s g - + 5 alice",
    ]
    .iter()
    .map(|l| call(&mut c, l))
    .collect();
    assert_eq!(before[..5], after[..5]);
    assert_eq!(before[0], Reply::Int(2999));
    // The pending entries' ids and owners are kept (their idle times have grown).
    let ids = |r: &Reply| -> Vec<Reply> {
        let Reply::Array(rows) = r else {
            panic!("{r:?}")
        };
        rows.iter()
            .map(|row| {
                let Reply::Array(f) = row else {
                    panic!("{row:?}")
                };
                Reply::Array(vec![f[0].clone(), f[1].clone(), f[3].clone()])
            })
            .collect()
    };
    assert_eq!(ids(&before[5]), ids(&after[5]));
    assert_eq!(ids(&after[5]).len(), 5);
}
