//! DEBUG: the subcommands Redis's own tests and operators use that mean something over the
//! tiered store (HELP, SLEEP, OBJECT, DIGEST, DIGEST-VALUE, PROTOCOL, SET-ACTIVE-EXPIRE,
//! QUICKLIST-PACKED-THRESHOLD, STRINGMATCH-TEST), answered as Redis 7.0's `debugCommand`
//! answers them. The rest (RELOAD, LOADAOF, POPULATE, JMAP, crash and memory-layout tools) are
//! refused, naming the subcommand.

use cxltier_store::{Kind, StoreError};

use crate::context::*;
use crate::resp::reply;

const HELP: &[&str] = &[
    "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DIGEST",
    "    Output a hex signature representing the current DB content.",
    "DIGEST-VALUE <key> [<key> ...]",
    "    Output a hex signature of the values of all the specified keys.",
    "OBJECT <key>",
    "    Show low level info about the `key` and associated value.",
    "PROTOCOL <type>",
    "    Reply with a test value of the specified type. <type> can be: string,",
    "    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
    "    true, false.",
    "QUICKLIST-PACKED-THRESHOLD <size>",
    "    Sets the threshold for elements to be inserted as plain vs packed nodes",
    "    Default value is 1GB, allows values up to 4GB. Setting to 0 restores to default.",
    "SET-ACTIVE-EXPIRE <0|1>",
    "    Setting it to 0 disables expiring keys in background when they are not",
    "    accessed (otherwise the Redis behavior). Setting it to 1 reenables back the",
    "    default.",
    "SLEEP <seconds>",
    "    Stop the server for <seconds>. Decimals allowed.",
    "STRINGMATCH-TEST",
    "    Run a fuzz tester against the stringmatchlen() function.",
    "HELP",
    "    Print this help.",
];

/// C's `strtod` of what Redis's DEBUG SLEEP takes: the longest prefix that is a number (0
/// when none), looked for in the first 64 bytes (no number is longer; a huge argument costs
/// no more).
fn strtod_prefix(b: &[u8]) -> f64 {
    let b = &b[..b.len().min(64)];
    let s = std::str::from_utf8(b).unwrap_or("").trim_start();
    (1..=s.len())
        .rev()
        .filter(|&i| s.is_char_boundary(i))
        .find_map(|i| s[..i].parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// C's `atoi`.
fn atoi(b: &[u8]) -> i64 {
    let s = std::str::from_utf8(b).unwrap_or("").trim_start();
    let (neg, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let n = rest
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0i64, |n, d| {
            n.saturating_mul(10).saturating_add(i64::from(d - b'0'))
        });
    if neg {
        -n
    } else {
        n
    }
}

fn store_key(ctx: &Ctx<'_>, key: &[u8]) -> Vec<u8> {
    crate::db::store_key(ctx.info.dbs.physical(ctx.session.db), key)
}

pub(crate) fn debug(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let sub = args[1].to_ascii_uppercase();
    let proto = ctx.session.proto;
    match (sub.as_slice(), args.len()) {
        (b"HELP", 2) => reply::simple_lines(ctx.out, HELP),
        (b"SLEEP", 3) => {
            // The whole server stops, as Redis's does: the loop is this thread.
            let secs = strtod_prefix(args[2]);
            if secs.is_finite() && secs > 0.0 {
                std::thread::sleep(std::time::Duration::from_secs_f64(secs.min(1e9)));
            }
            reply::ok(ctx.out);
        }
        (b"SET-ACTIVE-EXPIRE", 3) => {
            ctx.store.set_active_expire(atoi(args[2]) != 0);
            reply::ok(ctx.out);
        }
        (b"QUICKLIST-PACKED-THRESHOLD", 3) => {
            // Redis's bounds: a memory value above 0 and below 4 GB (0: the default, 1 GB).
            let n = crate::limits::parse_memory(&String::from_utf8_lossy(args[2]));
            match n {
                Some(n) if n < 1 << 32 => {
                    ctx.info.quicklist_packed_threshold = n as u64;
                    reply::ok(ctx.out);
                }
                _ => {
                    return fail(
                        ctx,
                        "ERR argument must be a memory value bigger than 1 and smaller than 4gb",
                    )
                }
            }
        }
        (b"STRINGMATCH-TEST", 2) => {
            crate::glob::fuzz_check(1000);
            reply::simple(ctx.out, "Apparently Redis did not crash: test passed");
        }
        (b"DIGEST", 2) => {
            let dbs: Vec<(u32, u8)> = (0..ctx.info.dbs.count())
                .map(|j| (j as u32, ctx.info.dbs.physical(j)))
                .collect();
            let d = crate::digest::dataset_digest(ctx.store, &dbs)?;
            reply::simple(ctx.out, &crate::digest::hex(&d));
        }
        (b"DIGEST-VALUE", _) => {
            let mut digests = Vec::with_capacity(args.len() - 2);
            for key in &args[2..] {
                let k = store_key(ctx, key);
                let mut d = [0u8; 20];
                let expires = ctx
                    .store
                    .key_info(&k)
                    .is_some_and(|i| i.expires_at_ms.is_some());
                let found = ctx.store.get(&k)?.map(|o| (o.kind, o.value.to_vec()));
                if let Some((kind, value)) = found {
                    crate::digest::value_digest(ctx.store, &k, kind, &value, expires, &mut d)?;
                }
                digests.push(crate::digest::hex(&d));
            }
            reply::array(ctx.out, digests.len());
            for d in digests {
                reply::simple(ctx.out, &d);
            }
        }
        (b"OBJECT", 3) => return object(ctx, args[2]),
        (b"PROTOCOL", 3) => protocol(ctx.out, proto, args[2]),
        (
            b"RELOAD" | b"LOADAOF" | b"POPULATE" | b"JMAP" | b"CHANGE-REPL-ID" | b"SEGFAULT"
            | b"PANIC" | b"ASSERT" | b"RESTART" | b"CRASH-AND-RECOVER",
            _,
        ) => {
            return fail(
                ctx,
                &format!(
                    "ERR DEBUG {} is not supported by cxltier serve",
                    String::from_utf8_lossy(args[1]).to_ascii_uppercase()
                ),
            )
        }
        _ => return fail(ctx, &crate::errors::unknown_subcommand("DEBUG", args[1])),
    }
    Ok(Effect::Read)
}

/// DEBUG PROTOCOL double's value, Redis's (3.141, not π).
#[allow(clippy::approx_constant)]
const TEST_DOUBLE: f64 = 3.141;

/// DEBUG PROTOCOL type: a test value of each RESP3 type (their RESP2 forms on RESP2).
fn protocol(out: &mut Vec<u8>, proto: u8, name: &[u8]) {
    match name.to_ascii_lowercase().as_slice() {
        b"string" => reply::bulk(out, b"Hello World"),
        b"integer" => reply::int(out, 12345),
        b"double" => reply::double(out, proto, TEST_DOUBLE),
        b"bignum" => reply::big_number(out, proto, "1234567999999999999999999999999999999"),
        b"null" => reply::null(out, proto),
        b"array" => {
            reply::array(out, 3);
            (0..3).for_each(|j| reply::int(out, j));
        }
        b"set" => {
            reply::set(out, proto, 3);
            (0..3).for_each(|j| reply::int(out, j));
        }
        b"map" => {
            reply::map(out, proto, 3);
            for j in 0..3 {
                reply::int(out, j);
                reply::boolean(out, proto, j == 1);
            }
        }
        b"attrib" => {
            if proto >= 3 {
                out.extend_from_slice(b"|1\r\n");
                reply::bulk(out, b"key-popularity");
                reply::array(out, 2);
                reply::bulk(out, b"key:123");
                reply::int(out, 90);
            }
            reply::bulk(out, b"Some real reply following the attribute");
        }
        b"push" => {
            if proto < 3 {
                reply::error(out, "ERR RESP2 is not supported by this command");
                return;
            }
            reply::push(out, proto, 2);
            reply::bulk(out, b"server-cpu-usage");
            reply::int(out, 42);
            reply::bulk(out, b"Some real reply following the push reply");
        }
        b"true" => reply::boolean(out, proto, true),
        b"false" => reply::boolean(out, proto, false),
        b"verbatim" => reply::verbatim(out, proto, "txt", b"This is a verbatim\nstring"),
        _ => reply::error(
            out,
            "ERR Wrong protocol type name. Please use one of the following: string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false",
        ),
    }
}

/// The bytes of a listpack entry holding `e`: its encoding header, the bytes, its back-length
/// (Redis's `lpEncodeBacklen` sizes), as Redis packs list elements.
fn listpack_entry_bytes(e: &[u8]) -> usize {
    let n = e.len();
    let header_and_data = match parse_i64(e).filter(|v| v.to_string().as_bytes() == e) {
        Some(v) if (0..=127).contains(&v) => 1,
        Some(v) if (-4096..4096).contains(&v) => 2,
        Some(v) if (-(1 << 15)..(1 << 15)).contains(&v) => 3,
        Some(v) if (-(1 << 23)..(1 << 23)).contains(&v) => 4,
        Some(v) if (-(1 << 31)..(1 << 31)).contains(&v) => 5,
        Some(_) => 9,
        None if n < 64 => 1 + n,
        None if n < 4096 => 2 + n,
        None => 5 + n,
    };
    let backlen = match header_and_data {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2097150 => 3,
        2097151..=268435454 => 4,
        _ => 5,
    };
    header_and_data + backlen
}

/// DEBUG OBJECT key: Redis's line. `Value at` is 0 (a value has no fixed address here: it
/// moves between tiers); `serializedlength` is the length of its RDB serialization; for a
/// list, the `ql_*` fields are those of the quicklist Redis would build from its elements
/// under `list-max-listpack-size` and `list-compress-depth`.
fn object(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Effect, StoreError> {
    let k = store_key(ctx, key);
    let Some(info) = ctx.store.key_info(&k) else {
        return fail(ctx, "ERR no such key");
    };
    let Some(encoding) = crate::encoding::object_encoding(ctx, &k)? else {
        return fail(ctx, "ERR no such key");
    };
    let Some((kind, value)) = ctx.store.get(&k)?.map(|o| (o.kind, o.value.to_vec())) else {
        return fail(ctx, "ERR no such key");
    };
    let mut w = crate::rdb::RdbWriter::bare(Vec::new());
    crate::rdb::write_value(ctx.store, &mut w, &k, key, (&kind, &value), |_, _| Ok(()))
        .map_err(|e| StoreError::Config(format!("DEBUG OBJECT: {e}")))?;
    let serialized = w.finish_dump().map(|v| v.len()).unwrap_or(0);
    let idle = info.idle_seconds;
    let lru = (now_ms() / 1000).wrapping_sub(idle) & 0xFF_FFFF;
    let mut extra = String::new();
    if kind == Kind::List {
        extra = quicklist_fields(ctx, &k)?;
    }
    reply::simple(
        ctx.out,
        &format!(
            "Value at:0x0 refcount:1 encoding:{encoding} serializedlength:{serialized} lru:{lru} lru_seconds_idle:{idle}{extra}"
        ),
    );
    Ok(Effect::Read)
}

/// The quicklist Redis would keep the list under `key` in: its nodes filled in order up to
/// `list-max-listpack-size` (a negative size: 4, 8, 16, 32 or 64 KiB of listpack; a positive
/// one: that many elements), an element above the packed threshold in a node of its own.
fn quicklist_fields(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<String, StoreError> {
    let fill = ctx.info.knobs.int("list-max-listpack-size");
    let compress = ctx.info.knobs.int("list-compress-depth");
    let threshold = match ctx.info.quicklist_packed_threshold {
        0 => 1 << 30,
        n => n as usize,
    };
    let size_limit = match fill {
        f if f < 0 => Some(4096usize << ((-f - 1).clamp(0, 4) as usize)),
        _ => None,
    };
    const LISTPACK_HEADER: usize = 7;
    let n = ctx.store.list_len(key)?;
    let (mut nodes, mut in_node, mut node_bytes, mut total) = (0u64, 0i64, 0usize, 0usize);
    let mut at = 0u64;
    while at < n {
        let end = (at + 1024).min(n) - 1;
        let page = ctx.store.list_range(key, at as i64, end as i64)?;
        if page.is_empty() {
            break;
        }
        at += page.len() as u64;
        for e in &page {
            if e.len() >= threshold {
                nodes += 1;
                total += node_bytes + e.len();
                (in_node, node_bytes) = (0, 0);
                continue;
            }
            let bytes = listpack_entry_bytes(e);
            let fits = in_node > 0
                && match size_limit {
                    Some(limit) => LISTPACK_HEADER + node_bytes + bytes <= limit,
                    None => in_node < fill.max(1),
                };
            if !fits {
                if in_node > 0 {
                    total += LISTPACK_HEADER + node_bytes;
                }
                nodes += 1;
                (in_node, node_bytes) = (0, 0);
            }
            in_node += 1;
            node_bytes += bytes;
        }
    }
    if in_node > 0 {
        total += LISTPACK_HEADER + node_bytes;
    }
    let avg = if nodes == 0 {
        f64::NAN
    } else {
        n as f64 / nodes as f64
    };
    Ok(format!(
        " ql_nodes:{nodes} ql_avg_node:{avg:.2} ql_listpack_max:{fill} ql_compressed:{} ql_uncompressed_size:{total}",
        u8::from(compress != 0)
    ))
}

#[cfg(test)]
mod tests {
    use crate::testdb::*;

    #[test]
    fn protocol_answers_each_resp3_type() {
        let mut db = Db::new();
        db.replies(&[
            ("DEBUG PROTOCOL string", "$11\r\nHello World\r\n"),
            ("DEBUG PROTOCOL integer", ":12345\r\n"),
            ("DEBUG PROTOCOL true", ":1\r\n"),
            ("DEBUG PROTOCOL array", "*3\r\n:0\r\n:1\r\n:2\r\n"),
            (
                "DEBUG PROTOCOL push",
                "-ERR RESP2 is not supported by this command\r\n",
            ),
            (
                "DEBUG NOPE",
                "-ERR unknown subcommand or wrong number of arguments for 'NOPE'. Try DEBUG HELP.\r\n",
            ),
            (
                "DEBUG RELOAD",
                "-ERR DEBUG RELOAD is not supported by cxltier serve\r\n",
            ),
        ]);
    }

    #[test]
    fn digests_are_redis_s() {
        let mut db = Db::new();
        assert_eq!(db.cmd("DEBUG DIGEST"), format!("+{}\r\n", "0".repeat(40)));
        db.cmd("SET a 1");
        let one = db.cmd("DEBUG DIGEST");
        db.cmd("RPUSH l x y");
        db.cmd("SADD s p q");
        db.cmd("ZADD z 1.5 m");
        db.cmd("HSET h f v");
        let all = db.cmd("DEBUG DIGEST");
        assert_ne!(one, all);
        // A list's order matters; a set's does not.
        db.cmd("DEL l s");
        db.cmd("RPUSH l y x");
        db.cmd("SADD s q p");
        assert_ne!(db.cmd("DEBUG DIGEST"), all);
        db.cmd("DEL l");
        db.cmd("RPUSH l x y");
        assert_eq!(db.cmd("DEBUG DIGEST"), all);
        let v = db.cmd("DEBUG DIGEST-VALUE a missing");
        assert!(v.starts_with("*2\r\n+") && v.ends_with(&format!("+{}\r\n", "0".repeat(40))));
    }

    #[test]
    fn object_shows_redis_s_fields() {
        let mut db = Db::new();
        db.cmd("SET k 12345");
        let r = db.cmd("DEBUG OBJECT k");
        assert!(
            r.starts_with("+Value at:0x0 refcount:1 encoding:int serializedlength:"),
            "{r}"
        );
        db.cmd("RPUSH l a b c");
        let r = db.cmd("DEBUG OBJECT l");
        assert!(
            r.contains("encoding:quicklist")
                && r.contains(" ql_nodes:1 ql_avg_node:3.00 ql_listpack_max:-2 ql_compressed:0"),
            "{r}"
        );
        assert_eq!(db.cmd("DEBUG OBJECT nope"), "-ERR no such key\r\n");
        assert_eq!(db.cmd("DEBUG SLEEP 0"), "+OK\r\n");
        assert_eq!(db.cmd("DEBUG SLEEP 0.001x"), "+OK\r\n");
        assert_eq!(super::strtod_prefix(b" 1.5s"), 1.5);
        // Only the first 64 digits are read: 10^64, nearly.
        let huge = super::strtod_prefix(&[b'9'; 100_000]);
        assert!(huge.is_finite() && huge > 9e63, "{huge}");
        assert_eq!(db.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), "+OK\r\n");
        assert_eq!(db.cmd("DEBUG QUICKLIST-PACKED-THRESHOLD 100"), "+OK\r\n");
        assert!(db
            .cmd("DEBUG QUICKLIST-PACKED-THRESHOLD 5gb")
            .starts_with("-ERR argument must be a memory value"));
    }
}
