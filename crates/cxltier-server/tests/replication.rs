//! The server as a replication master: SYNC as Redis's test harness sends it (a valid RDB
//! then the write stream, as Redis 7.0 propagates it), and a real `redis-server --replicaof`
//! that loads the snapshot and follows the stream until its data equal the master's, for every
//! type (a stream with a group and pending entries included), with values on NVMe.

mod util;
use cxltier_store::testing::temp_file;
use std::time::{Duration, Instant};
use util::{need, wait_until, Conn, Reply as V, ReplyExt, Server, GUARD};

/// One command of a replication stream, its words joined by spaces.
fn stream_command(c: &mut Conn) -> String {
    match c.read() {
        V::Array(words) => words.iter().map(V::text).collect::<Vec<_>>().join(" "),
        other => panic!("the stream sent {other:?}, not a command"),
    }
}

/// Redis's crc64 (Jones, reflected), to check the snapshot's trailer independently of the
/// server's code.
fn crc64(bytes: &[u8]) -> u64 {
    let mut crc = 0u64;
    for &b in bytes {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x95ac_9329_ac4b_c9b5
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// What Redis's `attach_to_replication_stream` does: SYNC inline, skip newlines, read
/// `$<len>` and the payload (no CRLF after it).
fn attach(s: &Server) -> (Conn, Vec<u8>) {
    let mut c = s.client();
    c.send_raw(b"SYNC\r\n").unwrap();
    let count = loop {
        let l = String::from_utf8(c.read_line().unwrap()).unwrap();
        if !l.is_empty() {
            break l;
        }
    };
    assert!(count.starts_with('$'), "SYNC answered {count:?}");
    let rdb = c.read_bytes(count[1..].parse().unwrap()).unwrap();
    (c, rdb)
}

fn check_rdb(rdb: &[u8]) {
    assert!(
        rdb.starts_with(b"REDIS0010"),
        "{:?}",
        &rdb[..rdb.len().min(16)]
    );
    let (data, crc) = rdb.split_at(rdb.len() - 8);
    assert_eq!(*data.last().unwrap(), 0xff, "EOF before the checksum");
    assert_eq!(crc, crc64(data).to_le_bytes(), "the snapshot's CRC64");
}

#[test]
fn sync_sends_a_valid_snapshot_then_the_stream_as_redis_propagates_it() {
    let ssd = temp_file("cxltier-repl-", "nvme");
    for server in [
        Server::builder().dram("32M"),
        Server::builder().dram("8M").ssd(&ssd, "64M"),
    ] {
        let s = server.start();
        let mut c = s.client();
        c.call(&["SET", "before", "x"]);
        let (mut repl, rdb) = attach(&s);
        check_rdb(&rdb);
        assert!(rdb.windows(6).any(|w| w == b"before"));
        c.call(&["CONFIG", "SET", "repl-ping-replica-period", "3600"]);
        c.call(&["SET", "foo", "bar", "EX", "100"]);
        c.call(&["GET", "foo"]);
        c.call(&["DEL", "nothing"]);
        c.call(&["INCRBYFLOAT", "f", "1.5"]);
        c.call(&["MULTI"]);
        c.call(&["LPUSH", "l", "a", "b"]);
        c.call(&["RPOP", "l"]);
        assert_eq!(
            c.call(&["EXEC"]),
            V::Array(vec![V::Int(2), V::Bulk(b"a".to_vec())])
        );
        c.call(&["EXPIRE", "foo", "-1"]);
        assert_eq!(stream_command(&mut repl), "select 0");
        let set = stream_command(&mut repl);
        assert!(set.starts_with("set foo bar PXAT "), "{set}");
        assert_eq!(stream_command(&mut repl), "set f 1.5 KEEPTTL");
        assert_eq!(stream_command(&mut repl), "multi");
        assert_eq!(stream_command(&mut repl), "LPUSH l a b");
        assert_eq!(stream_command(&mut repl), "RPOP l");
        assert_eq!(stream_command(&mut repl), "exec");
        assert_eq!(stream_command(&mut repl), "del foo");
        // The replica acknowledges: INFO and ROLE show it, WAIT counts it.
        let info = c.call(&["INFO", "replication"]).text();
        assert!(info.contains("connected_slaves:1\r\n"), "{info}");
        assert!(
            info.contains("slave0:ip=127.0.0.1,port=0,state=online"),
            "{info}"
        );
        let replicas = c.call(&["CLIENT", "LIST", "TYPE", "replica"]).text();
        assert_eq!(replicas.lines().count(), 1, "{replicas}");
        assert!(replicas.contains(" flags=S "), "{replicas}");
        let offset: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("master_repl_offset:"))
            .unwrap()
            .parse()
            .unwrap();
        assert!(offset > 0);
        repl.send_bytes(&[b"REPLCONF", b"ACK", offset.to_string().as_bytes()]);
        assert_eq!(c.call(&["WAIT", "1", "5000"]), V::Int(1));
        match c.call(&["ROLE"]) {
            V::Array(r) => {
                assert_eq!(r[0].text(), "master");
                assert_eq!(r[1], V::Int(offset as i64));
            }
            other => panic!("ROLE answered {other:?}"),
        }
        // Nobody acknowledges what comes next: WAIT 1 waits its timeout and answers 0,
        // without holding up another client.
        c.call(&["SET", "k", "v"]);
        let t = Instant::now();
        c.send_bytes(&[b"WAIT", b"1", b"300"]);
        let mut other = s.client();
        assert_eq!(other.call(&["PING"]), V::Simple("PONG".into()));
        assert_eq!(c.read(), V::Int(0));
        assert!(t.elapsed() >= Duration::from_millis(300));
        // The GETACK the parked WAIT asked for is in the stream.
        assert_eq!(stream_command(&mut repl), "SET k v");
        assert_eq!(stream_command(&mut repl), "REPLCONF GETACK *");
        // The replicas' PING, every repl-ping-replica-period seconds.
        c.call(&["CONFIG", "SET", "repl-ping-replica-period", "1"]);
        assert_eq!(stream_command(&mut repl), "PING");
        c.call(&["CONFIG", "SET", "repl-ping-replica-period", "3600"]);
        // A key that nobody reads again is expired by the background sampling: a DEL alone.
        c.call(&["SET", "short", "v", "PX", "100"]);
        let set = stream_command(&mut repl);
        assert!(set.starts_with("set short v PXAT "), "{set}");
        assert_eq!(stream_command(&mut repl), "del short");
    }
}

/// Every key's type and value as a comparable text (members of sets sorted, hashes sorted by
/// field), and whether it has a TTL.
fn dump_all(c: &mut Conn) -> Vec<String> {
    let keys = match c.call(&["KEYS", "*"]) {
        V::Array(k) => k.iter().map(V::text).collect::<Vec<_>>(),
        other => panic!("KEYS answered {other:?}"),
    };
    let mut out = Vec::new();
    for k in keys {
        let t = c.call(&["TYPE", &k]).text();
        let value = match t.as_str() {
            "string" => {
                let v = c.call(&["GET", &k]).text();
                format!("{} bytes, crc {:x}", v.len(), crc64(v.as_bytes()))
            }
            "list" => format!("{:?}", c.call(&["LRANGE", &k, "0", "-1"])),
            "set" => {
                let V::Array(mut m) = c.call(&["SMEMBERS", &k]) else {
                    panic!()
                };
                m.sort_by_key(V::text);
                format!("{m:?}")
            }
            "zset" => format!("{:?}", c.call(&["ZRANGE", &k, "0", "-1", "WITHSCORES"])),
            "hash" => {
                let V::Array(m) = c.call(&["HGETALL", &k]) else {
                    panic!()
                };
                let mut pairs: Vec<(String, String)> =
                    m.chunks(2).map(|p| (p[0].text(), p[1].text())).collect();
                pairs.sort();
                format!("{pairs:?}")
            }
            "stream" => format!(
                "{:?} {:?} {:?}",
                c.call(&["XRANGE", &k, "-", "+"]),
                c.call(&["XINFO", "GROUPS", &k]),
                c.call(&["XPENDING", &k, "g"]),
            ),
            other => panic!("{k} has type {other}"),
        };
        let ttl = match c.call(&["PTTL", &k]) {
            V::Int(-1) => "no ttl".to_string(),
            V::Int(ms) if ms > 0 => "ttl".to_string(),
            other => format!("{other:?}"),
        };
        out.push(format!("{k} {t} {ttl} {value}"));
    }
    out.sort();
    out
}

fn fill(c: &mut Conn, round: &str) {
    let big = "b".repeat(3 << 20);
    let cold = "c".repeat(3000);
    let cmds: Vec<Vec<String>> = vec![
        vec!["SET".into(), format!("{round}:s"), "hello".into()],
        vec![
            "SET".into(),
            format!("{round}:ttl"),
            "t".into(),
            "EX".into(),
            "1000".into(),
        ],
        vec!["SET".into(), format!("{round}:big"), big],
        vec![
            "RPUSH".into(),
            format!("{round}:l"),
            "a".into(),
            "b".into(),
            "c".into(),
        ],
        vec![
            "SADD".into(),
            format!("{round}:set"),
            "x".into(),
            "y".into(),
            "1".into(),
        ],
        vec![
            "ZADD".into(),
            format!("{round}:z"),
            "1.5".into(),
            "m".into(),
            "-2".into(),
            "n".into(),
        ],
        vec![
            "HSET".into(),
            format!("{round}:h"),
            "f".into(),
            "v".into(),
            "g".into(),
            "w".into(),
        ],
        vec!["INCRBYFLOAT".into(), format!("{round}:f"), "0.1".into()],
        vec!["EXPIRE".into(), format!("{round}:l"), "5000".into()],
    ];
    for cmd in cmds {
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let r = c.call(&args);
        assert!(!matches!(r, V::Error(_)), "{args:?}: {r:?}");
    }
    // A list long enough to take many pages, and values pushed out to NVMe.
    for i in 0..1500 {
        c.send_bytes(&[
            b"RPUSH",
            format!("{round}:long").as_bytes(),
            format!("m{i}").as_bytes(),
        ]);
        c.send_bytes(&[
            b"SET",
            format!("{round}:cold:{i}").as_bytes(),
            cold.as_bytes(),
        ]);
    }
    for _ in 0..3000 {
        assert!(!matches!(c.read(), V::Error(_)));
    }
}

#[test]
fn a_redis_replica_loads_the_snapshot_and_follows_the_stream() {
    // The replica is a real Redis: CI installs it with scripts/peers.
    need("redis-server");
    let ssd = temp_file("cxltier-repl-", "nvme");
    let s = Server::builder().dram("8M").ssd(&ssd, "128M").start();
    let mut c = s.client();
    fill(&mut c, "snap");
    // A stream of several nodes, with a deleted entry, a group and pending entries.
    for i in 1..=450 {
        c.send_line(&format!("XADD snap:stream {i}-1 f {i} g v"));
    }
    for _ in 0..450 {
        assert!(matches!(c.read(), V::Bulk(_)));
    }
    for cmd in [
        "XDEL snap:stream 5-1",
        "XGROUP CREATE snap:stream g 0",
        "XREADGROUP GROUP g alice COUNT 3 STREAMS snap:stream >",
        "XREADGROUP GROUP g bob COUNT 2 STREAMS snap:stream >",
    ] {
        let r = c.call_line(cmd);
        assert!(!matches!(r, V::Error(_)), "{cmd}: {r:?}");
    }
    // Keys in other databases: the snapshot selects each database that holds keys.
    assert_eq!(c.call(&["SELECT", "3"]), V::Simple("OK".into()));
    c.call(&["SET", "db3:s", "three"]);
    c.call(&["HSET", "db3:h", "f", "v"]);
    c.call(&["SELECT", "7"]);
    c.call(&["SADD", "db7:set", "a", "b"]);
    c.call(&["SELECT", "0"]);
    let dir = temp_file("cxltier-repl-", "redis");
    std::fs::create_dir_all(&*dir).unwrap();
    let (replica, mut r) = util::redis_replica(&s.port(), &dir);
    let port = replica.port;
    let snapshot = dump_all(&mut c);
    // 1,500 values pushed out to NVMe and the rest: the comparison is of a real data set.
    assert!(snapshot.len() > 1500, "{}", snapshot.len());
    assert_eq!(dump_all(&mut r), snapshot, "after the snapshot");
    // The stream: more of every type, and changes to what the snapshot held.
    fill(&mut c, "stream");
    c.call(&["LPOP", "snap:l"]);
    c.call(&["SPOP", "snap:set"]);
    c.call(&["ZINCRBY", "snap:z", "2", "m"]);
    c.call(&["HINCRBYFLOAT", "snap:h", "n", "0.5"]);
    c.call(&["DEL", "snap:s"]);
    c.call(&["PERSIST", "snap:ttl"]);
    c.call(&["SETRANGE", "snap:big", "1000", "zz"]);
    wait_until("the replica acknowledged the stream", || {
        c.call(&["WAIT", "1", "1000"]) == V::Int(1)
    });
    let master = dump_all(&mut c);
    assert!(master.len() > 3000, "{}", master.len());
    wait_until("the replica has the master's data", || {
        dump_all(&mut r) == master
    });
    // Writes in other databases, a hash large enough to be chunked, and SWAPDB: the stream
    // selects each write's database and names the user's keys.
    c.call(&["SELECT", "3"]);
    c.call(&["RPUSH", "db3:l", "a", "b"]);
    let mut hset: Vec<String> = vec!["HSET".into(), "db3:bighash".into()];
    for i in 0..2000 {
        hset.push(format!("field:{i:06}"));
        hset.push(format!("value:{i:06}"));
    }
    let args: Vec<&str> = hset.iter().map(String::as_str).collect();
    assert_eq!(c.call(&args), V::Int(2000));
    c.call(&["HSET", "db3:bighash", "field:000007", "changed"]);
    c.call(&["SELECT", "0"]);
    assert_eq!(c.call(&["SWAPDB", "3", "5"]), V::Simple("OK".into()));
    wait_until(
        "the replica acknowledged the other databases' writes",
        || c.call(&["WAIT", "1", "1000"]) == V::Int(1),
    );
    for db in ["0", "3", "5", "7"] {
        c.call(&["SELECT", db]);
        r.call(&["SELECT", db]);
        let master = dump_all(&mut c);
        wait_until(
            &format!("the replica's database {db} is the master's"),
            || dump_all(&mut r) == master,
        );
        match db {
            "3" => assert!(master.is_empty(), "{master:?}"),
            "5" => assert_eq!(master.len(), 4, "{master:?}"),
            "7" => assert_eq!(master.len(), 1, "{master:?}"),
            _ => {}
        }
    }
    c.call(&["SELECT", "0"]);
    let info = c.call(&["INFO", "replication"]).text();
    assert!(
        info.contains(&format!("port={port},state=online")),
        "{info}"
    );
}

/// A replica that does not read is dropped once the stream held for it reaches the replica
/// class's hard limit (256 MB), and the master goes on serving.
#[test]
fn a_replica_that_does_not_read_is_dropped_at_the_hard_limit() {
    let s = Server::builder().dram("32M").start();
    let (_stalled, _) = attach(&s);
    let mut c = s.client();
    let value = vec![b'v'; 1 << 20];
    // 300 MiB of stream: past 256 MB whatever the socket buffers took.
    for _ in 0..300 {
        c.send_bytes(&[b"SET", b"k", &value]);
        assert_eq!(c.read(), V::Simple("OK".into()));
    }
    let t = Instant::now();
    loop {
        let info = c.call(&["INFO", "replication"]).text();
        if info.contains("connected_slaves:0\r\n") {
            break;
        }
        assert!(t.elapsed() < GUARD, "the replica was not dropped: {info}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = c.call(&["INFO", "stats"]).text();
    assert!(
        stats.contains("client_output_buffer_limit_disconnections:1\r\n"),
        "{stats}"
    );
    assert_eq!(c.call(&["STRLEN", "k"]), V::Int(1 << 20));
}
