//! The memory figures INFO memory, CONFIG GET maxmemory, the OOM refusal, ROLE's replica
//! report and the metrics share, from the store's statistics; and eviction under a
//! `maxmemory-policy` ([`perform_evictions`]): keys given up, before a command, while the store
//! is full or over `maxmemory`, each announced (`evicted`), replicated as `DEL` and counted.

use cxltier_store::{EvictionPolicy, Store};

use crate::context::ServerInfo;

/// What they report, from the memory budget: `maxmemory` is
/// the budget (`--dram` plus the CXL tier's capacity), `used_memory` the slots the memory
/// tiers' arenas hold objects in plus the key index, which the store keeps inside the DRAM
/// budget (the index's bytes come out of it, and an arena grows only while the budget has
/// room). Like Redis's, `used_memory` falls as keys are deleted.
pub fn memory_figures(st: &cxltier_store::StoreStats) -> (u64, u64) {
    let memory = st.tiers.iter().filter(|t| t.tier != "nvme");
    // The DRAM tier's capacity is what the budget leaves objects after the index.
    let max: u64 = memory.map(|t| t.capacity_bytes).sum::<u64>() + st.index_bytes;
    (st.memory_used_bytes.min(max), max)
}

/// The process's resident memory in bytes (INFO's `used_memory_rss`, as Redis reads it): the
/// second field of `/proc/self/statm`, in pages; 0 where it cannot be read.
pub fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * cxltier_sys::page_size() as u64)
}

/// The fraction of the store's capacity (over all its tiers, [`Store::fill`]) past which a
/// policy other than `noeviction` evicts before a command: room for the command's writes,
/// in slab pages of the size classes they need.
const FULL_AT: (u64, u64) = (95, 100);

/// Whether the store is past what eviction keeps it under: `maxmemory` (when set below the
/// budget) by `used_memory`, or [`FULL_AT`] of its capacity, or of the fill at which a write
/// last found it full (records and slots are not packed without waste: a log of 1 KiB values
/// fills at about three quarters of its bytes).
pub(crate) fn over_limit(store: &Store, info: &ServerInfo) -> bool {
    if info
        .maxmemory_limit
        .is_some_and(|limit| store.memory_used() > limit)
    {
        return true;
    }
    let fill = store.fill();
    let capacity = info
        .store_full_at
        .map_or(fill.capacity, |f| f.min(fill.capacity));
    u128::from(fill.used) * u128::from(FULL_AT.1) > u128::from(capacity) * u128::from(FULL_AT.0)
}

/// Most keys one write that found the store full evicts before it is tried again.
const FULL_EVICTIONS_MAX: u64 = 1024;

/// A write found the store full under a policy that evicts: note how full it was (eviction
/// keeps below that from now on) and evict down to [`FULL_AT`] of it. True when keys went,
/// and the write may be tried again.
pub(crate) fn evict_for_full(store: &mut Store, info: &mut ServerInfo) -> bool {
    if store.eviction_policy() == EvictionPolicy::NoEviction {
        return false;
    }
    let used = store.fill().used;
    info.store_full_at = Some(info.store_full_at.map_or(used, |f| f.min(used)));
    let samples = info.knobs.int("maxmemory-samples").clamp(1, 64) as usize;
    let mut evicted = 0;
    while evicted < FULL_EVICTIONS_MAX && (evicted == 0 || over_limit(store, info)) {
        match store.evict(samples) {
            Ok(Some(key)) => evicted_key(info, &key),
            Ok(None) | Err(_) => break,
        }
        evicted += 1;
    }
    evicted > 0
}

/// Redis's `evictionTimeLimitUs`: how long one round of eviction may take, from
/// `maxmemory-eviction-tenacity` (10: 500 µs; 100: no limit).
fn eviction_time_limit(tenacity: i64) -> Option<std::time::Duration> {
    let us = match tenacity {
        ..=10 => 50 * tenacity.max(0) as u64,
        11..=99 => (500.0 * 1.15f64.powi(tenacity as i32 - 10)) as u64,
        _ => return None,
    };
    Some(std::time::Duration::from_micros(us))
}

/// Redis's `performEvictions`: under a policy other than `noeviction`, evict keys while the
/// store is over its limit ([`over_limit`]). False when it is over and nothing can be evicted
/// (Redis's `EVICT_FAIL`: a command that may grow memory answers OOM); true when under, or
/// when the round's time ran out first (the command goes on, as with Redis's
/// `EVICT_RUNNING`).
pub(crate) fn perform_evictions(store: &mut Store, info: &mut ServerInfo) -> bool {
    if store.eviction_policy() == EvictionPolicy::NoEviction || !over_limit(store, info) {
        return true;
    }
    let samples = info.knobs.int("maxmemory-samples").clamp(1, 64) as usize;
    let limit = eviction_time_limit(info.knobs.int("maxmemory-eviction-tenacity"));
    let start = std::time::Instant::now();
    let mut evicted = 0u64;
    while over_limit(store, info) {
        match store.evict(samples) {
            Ok(Some(key)) => evicted_key(info, &key),
            // Nothing the policy may evict, or the delete failed: the store stays as it is.
            Ok(None) | Err(_) => return false,
        }
        evicted += 1;
        if evicted % 16 == 0 && limit.is_some_and(|l| start.elapsed() > l) {
            return true;
        }
    }
    true
}

/// What follows the eviction of `key` (a store key): counted (`evicted_keys`), its watchers'
/// transactions fail, announced (`evicted`), and replicated as `DEL` (`UNLINK` with
/// `lazyfree-lazy-eviction yes`), alone in the stream, as Redis propagates an eviction.
fn evicted_key(info: &mut ServerInfo, key: &[u8]) {
    info.evicted_keys += 1;
    let logical = info.dbs.to_logical_key(key);
    info.touch(&logical);
    info.notify
        .emit(crate::notify::class::EVICTED, "evicted", key);
    if info.repl.active {
        let (db, user_key) = crate::context::expired_in(info, key);
        let verb: &[u8] = if info.knobs.get("lazyfree-lazy-eviction") == Some("yes") {
            b"unlink"
        } else {
            b"del"
        };
        let op = vec![
            verb.to_vec(),
            user_key.get(1..).unwrap_or_default().to_vec(),
        ];
        info.repl.emit(db, &op);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdb::*;

    /// A store of 8 MiB, limited to `maxmemory` bytes above what it uses empty, under `policy`.
    fn limited(policy: &str, room: u64) -> Db {
        let mut db = Db {
            store: cxltier_store::StoreBuilder::new()
                .dram(8 << 20)
                .durability(cxltier_store::Durability::None)
                .build()
                .unwrap(),
            info: ServerInfo::default(),
            session: crate::context::Session::new(0, true),
        };
        db.store.seed_eviction(1);
        let used: u64 = info_field(&mut db, "memory", "used_memory")
            .parse()
            .unwrap();
        assert_eq!(
            db.cmd(&format!("CONFIG SET maxmemory {}", used + room)),
            "+OK\r\n"
        );
        assert_eq!(
            db.cmd(&format!("CONFIG SET maxmemory-policy {policy}")),
            "+OK\r\n"
        );
        db
    }

    fn used(db: &mut Db) -> u64 {
        info_field(db, "memory", "used_memory").parse().unwrap()
    }

    #[test]
    fn allkeys_lru_keeps_the_limit_and_the_keys_read_since() {
        let mut db = limited("allkeys-lru", 200 << 10);
        assert_eq!(db.cmd("CONFIG SET maxmemory-samples 10"), "+OK\r\n");
        let limit: u64 = info_field(&mut db, "memory", "maxmemory").parse().unwrap();
        let value = "x".repeat(1000);
        // Cold keys, written an hour ago a second apart (the store's clock injected), up to
        // about three quarters of the limit.
        let t0 = crate::context::now_ms() - 3_600_000;
        for i in 0..140u64 {
            db.store.freeze_clock(t0 + i * 1000);
            let key = format!("\0cold{i}");
            db.store
                .put(
                    key.as_bytes(),
                    cxltier_store::Kind::String,
                    value.as_bytes(),
                    None,
                )
                .unwrap();
            db.store.thaw_clock();
        }
        // The hot keys, written and read now.
        for i in 0..10 {
            assert_eq!(db.cmd(&format!("SET hot{i} {value}")), "+OK\r\n");
            db.cmd(&format!("GET hot{i}"));
        }
        // New keys past the limit: each write evicts, and the victims are cold.
        for i in 0..100 {
            assert_eq!(db.cmd(&format!("SET new{i} {value}")), "+OK\r\n");
        }
        let evicted: u64 = info_field(&mut db, "stats", "evicted_keys")
            .parse()
            .unwrap();
        assert!(evicted > 50, "{evicted}");
        let cold = db.cmd("KEYS cold*");
        let cold: u64 = cold[1..cold.find('\r').unwrap()].parse().unwrap();
        assert_eq!(cold, 140 - evicted, "only cold keys went");
        assert!(used(&mut db) <= limit + 4096, "{} > {limit}", used(&mut db));
        for h in 0..10 {
            assert_eq!(db.cmd(&format!("EXISTS hot{h}")), ":1\r\n", "hot{h} went");
        }
        assert_eq!(
            db.cmd("CONFIG GET maxmemory-policy"),
            "*2\r\n$16\r\nmaxmemory-policy\r\n$11\r\nallkeys-lru\r\n"
        );
        assert!(db
            .cmd("INFO memory")
            .contains("maxmemory_policy:allkeys-lru"));
        assert_eq!(db.cmd("CONFIG RESETSTAT"), "+OK\r\n");
        assert_eq!(info_field(&mut db, "stats", "evicted_keys"), "0");
    }

    #[test]
    fn volatile_policies_evict_only_keys_with_a_ttl_then_answer_oom() {
        for policy in [
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            let mut db = limited(policy, 100 << 10);
            let value = "x".repeat(1000);
            let mut oom = false;
            'fill: for i in 0..400 {
                for cmd in [
                    format!("SET v{i} {value} EX 1000"),
                    format!("SET p{i} {value}"),
                ] {
                    let r = db.cmd(&cmd);
                    if r.starts_with("-OOM command not allowed when used memory > 'maxmemory'") {
                        oom = true;
                        break 'fill;
                    }
                    assert_eq!(r, "+OK\r\n", "{policy}");
                }
            }
            assert!(oom, "{policy}: the keys without a TTL filled it");
            let evicted: u64 = info_field(&mut db, "stats", "evicted_keys")
                .parse()
                .unwrap();
            assert!(evicted > 0, "{policy}");
            // Every key without a TTL is still there.
            let keys = db.cmd("KEYS p*");
            let kept: usize = keys[1..keys.find('\r').unwrap()].parse().unwrap();
            let written = db.cmd("DBSIZE");
            assert!(kept > 50, "{policy}: {kept} {written}");
            for i in 0..kept {
                assert_eq!(db.cmd(&format!("EXISTS p{i}")), ":1\r\n", "{policy}");
            }
            // Reads go on; a delete makes room.
            assert!(db.cmd("GET p0").starts_with("$1000"));
        }
    }

    #[test]
    fn noeviction_refuses_and_keeps_every_key() {
        let mut db = limited("noeviction", 50 << 10);
        let value = "x".repeat(1000);
        let mut written = 0;
        for i in 0..200 {
            if db.cmd(&format!("SET k{i} {value}")).starts_with("-OOM") {
                break;
            }
            written += 1;
        }
        assert!(written > 10 && written < 200);
        assert_eq!(db.cmd("DBSIZE"), format!(":{written}\r\n"));
        assert_eq!(info_field(&mut db, "stats", "evicted_keys"), "0");
    }

    #[test]
    fn evictions_are_announced_and_replicated_as_deletes() {
        let mut db = limited("allkeys-random", 20 << 10);
        assert_eq!(db.cmd("CONFIG SET notify-keyspace-events Ee"), "+OK\r\n");
        let mut sub = crate::context::Session::new(7, true);
        run_as(&mut db, &mut sub, "SUBSCRIBE __keyevent@0__:evicted");
        db.info.pubsub.outbox.clear();
        db.info.repl.attach();
        let value = "x".repeat(1000);
        for i in 0..100 {
            assert_eq!(db.cmd(&format!("SET k{i} {value}")), "+OK\r\n");
        }
        let evicted: usize = info_field(&mut db, "stats", "evicted_keys")
            .parse()
            .unwrap();
        assert!(evicted > 50);
        let said = db.info.pubsub.outbox.iter().filter(|d| d.to == 7).count();
        assert!(said + 1 >= evicted, "{said} of {evicted} announced");
        // The stream holds a `del` of each (the user's key: no database byte).
        let stream = String::from_utf8_lossy(&db.info.repl.pending).into_owned();
        assert_eq!(stream.matches("$3\r\ndel\r\n").count(), evicted, "{stream}");
        assert!(
            !stream.contains('\0'),
            "user keys, without the database byte"
        );
        assert_eq!(db.cmd("DBSIZE"), format!(":{}\r\n", 100 - evicted));
    }

    /// A lower limit evicts at once (Redis's updateMaxmemory), but inside EXEC only at the next
    /// command, so that the deletes follow the transaction in the write stream.
    #[test]
    fn config_set_maxmemory_evicts_at_once_but_after_a_transaction() {
        let mut db = limited("allkeys-lru", 1 << 20);
        db.info.repl.attach();
        for i in 0..3 {
            db.cmd(&format!("SET k{i} v"));
        }
        assert_eq!(db.cmd("CONFIG SET maxmemory 1"), "+OK\r\n");
        assert_eq!(db.cmd("DBSIZE"), ":0\r\n");
        assert_eq!(info_field(&mut db, "stats", "evicted_keys"), "3");
        assert_eq!(db.cmd("CONFIG SET maxmemory 0"), "+OK\r\n");
        db.info.repl.pending.clear();
        db.cmd("MULTI");
        db.cmd("INCR x");
        db.cmd("CONFIG SET maxmemory 1");
        db.cmd("INCR x");
        assert_eq!(db.cmd("EXEC"), "*3\r\n:1\r\n+OK\r\n:2\r\n");
        assert_eq!(db.cmd("DBSIZE"), ":0\r\n");
        let stream = String::from_utf8_lossy(&db.info.repl.pending).into_owned();
        let exec = stream.find("exec").expect(&stream);
        let del = stream.find("$3\r\ndel\r\n$1\r\nx").expect(&stream);
        assert!(exec < del, "{stream}");
    }

    /// RESTORE's IDLETIME sets the access clock under an LRU policy, FREQ the counter under
    /// an LFU one (Redis's objectSetLRUOrLFU).
    #[test]
    fn restore_sets_idle_time_or_frequency_by_the_policy() {
        let mut db = limited("allkeys-lru", 1 << 20);
        db.cmd("SET k v");
        let dump = db.run(&[b"DUMP", b"k"]);
        let payload = &dump[dump.iter().position(|&b| b == b'\n').unwrap() + 1..dump.len() - 2];
        let restore = |db: &mut Db, opt: &[u8], n: &[u8]| {
            let r = db.run(&[b"RESTORE", b"r", b"0", payload, b"REPLACE", opt, n]);
            assert_eq!(r, b"+OK\r\n");
        };
        restore(&mut db, b"IDLETIME", b"1000");
        let idle: u64 = db.cmd("OBJECT IDLETIME r")[1..].trim().parse().unwrap();
        assert!((1000..1003).contains(&idle), "{idle}");
        assert_eq!(db.cmd("CONFIG SET maxmemory-policy allkeys-lfu"), "+OK\r\n");
        restore(&mut db, b"FREQ", b"100");
        assert_eq!(db.cmd("OBJECT FREQ r"), ":100\r\n");
    }

    #[test]
    fn object_freq_and_idletime_follow_the_policy() {
        let mut db = limited("allkeys-lru", 1 << 20);
        db.cmd("SET k v");
        assert!(db
            .cmd("OBJECT FREQ k")
            .starts_with("-ERR An LFU maxmemory policy is not selected"));
        assert_eq!(db.cmd("OBJECT IDLETIME k"), ":0\r\n");
        assert_eq!(db.cmd("CONFIG SET maxmemory-policy allkeys-lfu"), "+OK\r\n");
        assert_eq!(db.cmd("CONFIG SET lfu-log-factor 0"), "+OK\r\n");
        db.cmd("SET f v");
        assert_eq!(db.cmd("OBJECT FREQ f"), ":5\r\n", "Redis's LFU_INIT_VAL");
        for _ in 0..10 {
            db.cmd("GET f");
        }
        assert_eq!(db.cmd("OBJECT FREQ f"), ":15\r\n");
        assert_eq!(db.cmd("OBJECT FREQ nope"), "$-1\r\n");
        assert!(db
            .cmd("OBJECT IDLETIME f")
            .starts_with("-ERR An LFU maxmemory policy is selected, idle time not tracked"));
        assert!(db
            .cmd("CONFIG SET maxmemory-policy lru")
            .contains("argument(s) must be one of the following: volatile-lru"));
        assert!(db.cmd("CONFIG SET maxmemory-samples 0").starts_with("-ERR"));
        assert_eq!(db.cmd("CONFIG SET maxmemory-samples 10"), "+OK\r\n");
        assert_eq!(
            db.cmd("CONFIG SET maxmemory-eviction-tenacity 100"),
            "+OK\r\n"
        );
        assert!(db
            .cmd("CONFIG GET maxmemory-eviction-tenacity")
            .ends_with("$3\r\n100\r\n"));
    }

    #[test]
    fn tenacity_gives_redis_time_limits() {
        use std::time::Duration;
        assert_eq!(eviction_time_limit(10), Some(Duration::from_micros(500)));
        assert_eq!(eviction_time_limit(0), Some(Duration::ZERO));
        assert_eq!(eviction_time_limit(11), Some(Duration::from_micros(575)));
        assert_eq!(eviction_time_limit(100), None);
    }
}
