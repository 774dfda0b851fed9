//! Commands over a socket to a server with an NVMe tier, as a client sees them: the string,
//! hash and range commands, INFO and FLUSHALL; an update of a cold hash read once from NVMe;
//! NVMe reads timed in INFO and CONFIG RESETSTAT zeroing the counters.

mod util;
use cxltier_store::testing::TempFile;
use std::time::Duration;
use util::{bulk, info_number, over_nvme, Conn, Reply, Server};

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

#[test]
fn commands_behave_like_redis() {
    let (_ssd, s) = over_nvme("32M", "64M");
    let mut c = s.client();
    assert_eq!(c.call(&["PING"]), Reply::Simple("PONG".into()));
    assert_eq!(c.call(&["SET", "k", "v"]), ok());
    assert_eq!(c.call(&["GET", "k"]), bulk("v"));
    assert_eq!(c.call(&["SET", "k", "w", "NX"]), Reply::NullBulk);
    assert_eq!(c.call(&["SET", "k", "w", "XX", "GET"]), bulk("v"));
    assert_eq!(c.call(&["SET", "n", "1", "XX"]), Reply::NullBulk);
    assert_eq!(c.call(&["SET", "t", "x", "PX", "100000"]), ok());
    assert!(matches!(c.call(&["PTTL", "t"]), Reply::Int(n) if n > 90_000));
    assert_eq!(c.call(&["SET", "gone", "x", "PX", "1"]), ok());
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(c.call(&["GET", "gone"]), Reply::NullBulk);
    assert_eq!(c.call(&["INCR", "n"]), Reply::Int(1));
    assert_eq!(c.call(&["INCRBY", "n", "41"]), Reply::Int(42));
    assert!(matches!(c.call(&["INCR", "k"]), Reply::Error(e) if e.contains("not an integer")));
    assert_eq!(c.call(&["MSET", "a", "1", "b", "2"]), ok());
    assert_eq!(
        c.call(&["MGET", "a", "b", "zz"]),
        Reply::Array(vec![bulk("1"), bulk("2"), Reply::NullBulk])
    );
    assert_eq!(c.call(&["EXISTS", "a", "b", "zz"]), Reply::Int(2));
    assert_eq!(c.call(&["DEL", "a", "zz"]), Reply::Int(1));
    assert_eq!(
        c.call(&["HSET", "h", "f1", "v1", "f2", "v2"]),
        Reply::Int(2)
    );
    assert_eq!(c.call(&["HSET", "h", "f1", "x"]), Reply::Int(0));
    assert_eq!(c.call(&["HGET", "h", "f1"]), bulk("x"));
    assert_eq!(
        c.call(&["HMGET", "h", "f2", "nope"]),
        Reply::Array(vec![bulk("v2"), Reply::NullBulk])
    );
    assert_eq!(
        c.call(&["HGETALL", "h"]),
        Reply::Array(vec![bulk("f1"), bulk("x"), bulk("f2"), bulk("v2")])
    );
    assert_eq!(c.call(&["HDEL", "h", "f1"]), Reply::Int(1));
    assert!(matches!(c.call(&["GET", "h"]), Reply::Error(e) if e.starts_with("WRONGTYPE")));
    assert!(matches!(c.call(&["HGET", "k", "f"]), Reply::Error(e) if e.starts_with("WRONGTYPE")));
    // The ordered range scan of workload E.
    for k in ["r1", "r2", "r3"] {
        c.call(&["SET", k, k]);
    }
    assert_eq!(
        c.call(&["SCANRANGE", "r1", "2"]),
        Reply::Array(vec![
            Reply::Array(vec![bulk("r1"), bulk("r1")]),
            Reply::Array(vec![bulk("r2"), bulk("r2")]),
        ])
    );
    assert!(matches!(c.call(&["SCANRANGE", "r1", "x"]), Reply::Error(_)));
    assert!(matches!(c.call(&["GET"]), Reply::Error(e) if e.contains("wrong number of arguments")));
    assert!(
        matches!(c.call(&["NOPE", "x"]), Reply::Error(e) if e.contains("unknown command 'NOPE'"))
    );
    assert_eq!(
        c.call(&["CONFIG", "GET", "appendonly"]),
        Reply::Array(vec![bulk("appendonly"), bulk("yes")])
    );
    let Reply::Bulk(info) = c.call(&["INFO"]) else {
        panic!("INFO")
    };
    let info = String::from_utf8(info).unwrap();
    for field in [
        "cxltier_version:",
        "tier_dram_objects:",
        "tier_nvme_writes:",
        "write_amplification:",
        "db0:keys=",
    ] {
        assert!(info.contains(field), "INFO lacks {field}:\n{info}");
    }
    let Reply::Int(n) = c.call(&["DBSIZE"]) else {
        panic!()
    };
    assert!(n >= 7);
    assert_eq!(c.call(&["FLUSHALL"]), ok());
    assert_eq!(c.call(&["DBSIZE"]), Reply::Int(0));
    // The server stops cleanly: stop() fails the test otherwise.
    s.stop();
}

/// How many values of 1,000 bytes [`filled_over_nvme`] writes: about 12 MB, more than its
/// DRAM holds.
const FILLED: usize = 12_000;

/// A server of 8 MiB of DRAM over an NVMe log of 64 MiB (the log's file, kept while it runs),
/// and a client that has written [`FILLED`] values, value `i` by `write(client, i)`: the first
/// ones written were demoted long since.
fn filled_over_nvme(write: impl Fn(&mut Conn, usize)) -> (TempFile, Server, Conn) {
    let (ssd, s) = over_nvme("8M", "64M");
    let mut c = s.client();
    for i in 0..FILLED {
        write(&mut c, i);
    }
    (ssd, s, c)
}

/// An update of a hash that lives only on NVMe and is colder than what DRAM holds: one read of
/// the record (one NVMe hit, one access for admission), the new value written to the log, and it
/// reads back.
#[test]
fn a_cold_hash_update_reads_the_record_once() {
    let field = "x".repeat(1000);
    let (_ssd, s, mut c) = filled_over_nvme(|c, i| {
        c.call(&["HSET", &format!("h{i}"), "f", &field]);
    });
    let n = FILLED;
    // Whatever DRAM holds (the last written) becomes hot.
    for _ in 0..4 {
        for i in n - 8000..n {
            c.call(&["HGET", &format!("h{i}"), "f"]);
        }
    }
    let stat = |c: &mut Conn, name: &str| info_number(c, "tiers", name);
    // Whether a given cold key is refused depends on how much headroom the background demotion
    // has just made (below the low watermark a read is admitted without a contest), so the test
    // walks the cold keys until one is refused: each admitted one uses up headroom.
    let new = "y".repeat(1000);
    let mut refused = None;
    for i in 0..2000 {
        let key = format!("h{i}");
        let hits = stat(&mut c, "tier_nvme_hits");
        let rejected = stat(&mut c, "admissions_rejected");
        assert_eq!(c.call(&["HSET", &key, "f", &new]), Reply::Int(0));
        let reads = stat(&mut c, "tier_nvme_hits") - hits;
        assert!(
            reads <= 1,
            "the update of {key} read the record {reads} times"
        );
        if stat(&mut c, "admissions_rejected") > rejected {
            assert_eq!(reads, 1, "the refused {key} was not read from NVMe");
            refused = Some(key);
            break;
        }
    }
    let key = refused.expect("no update of 2000 cold hashes was refused admission to DRAM");
    assert_eq!(c.call(&["HGET", &key, "f"]), bulk(&new));
    for i in 0..20 {
        let want = if i <= key[1..].parse::<usize>().unwrap() {
            &new
        } else {
            &field
        };
        assert_eq!(c.call(&["HGET", &format!("h{i}"), "f"]), bulk(want));
    }
    // The server stops cleanly: stop() fails the test otherwise.
    s.stop();
}

/// Reads from NVMe are timed in `INFO tiers`, and `CONFIG RESETSTAT` starts the activity
/// counters again from zero without touching the data.
#[test]
fn nvme_reads_are_timed_and_resetstat_zeroes_the_counters() {
    let value = "v".repeat(1000);
    let (_ssd, s, mut c) = filled_over_nvme(|c, i| {
        c.call(&["SET", &format!("k{i}"), &value]);
    });
    assert_eq!(
        info_number(&mut c, "tiers", "tier_nvme_read_latency_reads"),
        0
    );
    // The first keys written were demoted long ago: these reads go to the device.
    for i in 0..200 {
        assert_eq!(c.call(&["GET", &format!("k{i}")]), bulk(&value));
    }
    let timed = info_number(&mut c, "tiers", "tier_nvme_read_latency_reads");
    let hits = info_number(&mut c, "tiers", "tier_nvme_hits");
    assert!(
        hits >= 100,
        "only {hits} of 200 reads of cold keys came from NVMe"
    );
    assert!(timed >= hits, "{timed} reads timed for {hits} NVMe hits");
    let p50 = info_number(&mut c, "tiers", "tier_nvme_read_latency_p50_us");
    let p99 = info_number(&mut c, "tiers", "tier_nvme_read_latency_p99_us");
    let p999 = info_number(&mut c, "tiers", "tier_nvme_read_latency_p999_us");
    let max = info_number(&mut c, "tiers", "tier_nvme_read_latency_max_us");
    assert!(
        0 < p50 && p50 <= p99 && p99 <= p999 && p999 <= max,
        "percentiles out of order: p50 {p50} p99 {p99} p99.9 {p999} max {max}"
    );

    assert_eq!(c.call(&["CONFIG", "RESETSTAT"]), ok());
    for (section, field) in [
        ("tiers", "tier_nvme_hits"),
        ("tiers", "tier_nvme_reads"),
        ("tiers", "tier_nvme_read_latency_reads"),
        ("tiers", "tier_nvme_read_latency_p99_us"),
        ("tiers", "tier_dram_hits"),
        ("tiers", "evictions_to_nvme"),
        ("stats", "keyspace_hits"),
    ] {
        assert_eq!(
            info_number(&mut c, section, field),
            0,
            "{field} after RESETSTAT"
        );
    }
    assert_eq!(
        info_number(&mut c, "tiers", "keys"),
        FILLED as u64,
        "RESETSTAT touched the data"
    );
    assert_eq!(c.call(&["GET", "k1"]), bulk(&value));
    assert_eq!(c.call(&["GET", &format!("k{}", FILLED - 1)]), bulk(&value));
    // The server stops cleanly: stop() fails the test otherwise.
    s.stop();
}
