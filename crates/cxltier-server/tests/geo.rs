//! The GEO commands of the server side by side with redis-server 7.0: the same commands
//! sent to both, every reply compared byte for byte (positions, hashes and distances print
//! Redis's digits; searches return Redis's members in Redis's order).
//!
//! redis-server is installed by scripts/peers (scripts/test runs it first); without it the test
//! fails with that instruction.

mod util;
use util::{redis, Conn, Server};

/// Every command of `script` (one a line) against both servers; the mismatches, listed. A line
/// starting with `~ ` is sent to both and its reply not compared (HELLO's client id differs).
fn compare(script: &str) {
    let (ours, theirs) = (Server::start(), redis());
    let mut a = Conn::connect(&ours.addr);
    let mut b = Conn::connect(&theirs.addr);
    let mut diffs = Vec::new();
    let mut n = 0;
    for line in script.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(unchecked) = line.strip_prefix("~ ") {
            a.cmd(unchecked);
            b.cmd(unchecked);
            continue;
        }
        n += 1;
        let (x, y) = (a.cmd(line), b.cmd(line));
        if x != y {
            diffs.push(format!("{line}\n  cxltier: {x:?}\n  redis:   {y:?}"));
        }
    }
    assert!(n > 0);
    assert!(
        diffs.is_empty(),
        "{} of {n} replies differ from redis-server's:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}

#[test]
fn geo_commands_answer_as_redis_server_does() {
    compare(
        "
        GEOADD Sicily 13.361389 38.115556 Palermo 15.087269 37.502669 Catania
        ZRANGE Sicily 0 -1 WITHSCORES
        GEOPOS Sicily Palermo Catania nope
        GEOHASH Sicily Palermo Catania nope
        GEODIST Sicily Palermo Catania
        GEODIST Sicily Palermo Catania km
        GEODIST Sicily Palermo Catania MI
        GEODIST Sicily Palermo Catania ft
        GEODIST Sicily Palermo nope
        GEODIST nokey a b
        GEODIST Sicily Palermo Catania parsecs
        GEODIST Sicily Palermo Catania km extra
        GEORADIUS Sicily 15 37 200 km WITHDIST WITHCOORD WITHHASH
        GEORADIUS Sicily 15 37 200 km DESC
        GEORADIUS Sicily 15 37 200 km COUNT 1
        GEORADIUS Sicily 15 37 200 km COUNT 1 ANY
        GEORADIUSBYMEMBER Sicily Palermo 200 km WITHDIST ASC
        GEORADIUSBYMEMBER_RO Sicily Palermo 100 km
        GEORADIUS_RO Sicily 15 37 200 km WITHCOORD
        GEOSEARCH Sicily FROMLONLAT 15 37 BYRADIUS 200 km ASC WITHDIST
        GEOSEARCH Sicily FROMMEMBER Palermo BYBOX 400 400 km ASC WITHCOORD WITHDIST
        GEOSEARCH Sicily FROMLONLAT 15 37 BYBOX 400 400 km DESC COUNT 1 WITHHASH
        GEOADD k 10 10 a 11 11 b
        GEOADD k NX CH 10 10 a 12 12 c
        GEOADD k XX CH 10.5 10 a 13 13 d
        GEOADD k 180 85.05112878 north -180 -85.05112878 south
        GEOPOS k a north south
        GEOHASH k north south
        # Errors, in Redis's words and Redis's order of checks.
        GEOADD k 200 100 m
        GEOADD k 10 85.06 m
        GEOADD k inf 1 m
        GEOADD k x 1 m
        GEOADD k NX XX 1 1 a
        GEOADD k 1 1
        GEOADD k GT 1 1 a
        GEOSEARCH k FROMLONLAT 10 10 BYRADIUS 500 km COUNT 0
        GEOSEARCH k FROMLONLAT 10 10 BYRADIUS 500 km COUNT x
        GEOSEARCH k FROMLONLAT 10 10 BYRADIUS 500 km ANY
        GEOSEARCH k FROMMEMBER nope BYBOX 400 400 km
        GEOSEARCH k FROMMEMBER a BYRADIUS -1 km
        GEOSEARCH k FROMMEMBER a BYRADIUS x km
        GEOSEARCH k FROMMEMBER a BYBOX -1 1 km
        GEOSEARCH k FROMMEMBER a BYBOX x 1 km
        GEOSEARCH k FROMMEMBER a BYBOX 1 x km
        GEOSEARCH k FROMMEMBER a BYBOX 1 1 parsec
        GEOSEARCH k BYBOX 1 1 km
        GEOSEARCH k FROMMEMBER a FROMLONLAT 1 1 BYBOX 1 1 km
        geosearch k frommember a count 1
        GEOSEARCH k FROMMEMBER a BYRADIUS 1 km BYBOX 1 1 km
        GEOSEARCH k FROMMEMBER a BYRADIUS 1 km STORE x
        GEOSEARCH nokey FROMMEMBER a BYRADIUS 1 km
        GEORADIUS k 10 10 500 km WITHDIST STORE x
        GEORADIUS_RO k 10 10 500 km STORE x
        GEORADIUS k 200 10 500 km
        GEORADIUS k 10 10 500 parsec
        GEORADIUSBYMEMBER k nope 500 km
        GEORADIUSBYMEMBER nokey nope 500 km STORE y
        GEOSEARCHSTORE dst k FROMLONLAT 10 10 BYRADIUS 500 km WITHDIST
        SET str v
        GEOADD str 1 1 a
        GEOPOS str a
        GEOHASH str a
        GEODIST str a b
        GEOSEARCH str FROMLONLAT 1 1 BYRADIUS x km
        GEORADIUS str 1 1 1 km
        # Stores: the members' hashes or distances as scores; nothing found removes the key.
        GEOSEARCHSTORE dst k FROMLONLAT 10 10 BYRADIUS 500 km
        ZRANGE dst 0 -1 WITHSCORES
        GEOSEARCHSTORE dst k FROMLONLAT 10 10 BYRADIUS 500 km STOREDIST COUNT 2 DESC
        ZRANGE dst 0 -1 WITHSCORES
        GEOSEARCHSTORE dst k FROMLONLAT 100 10 BYRADIUS 5 km
        EXISTS dst
        GEORADIUS k 10 10 500 km STORE x
        ZRANGE x 0 -1 WITHSCORES
        GEORADIUSBYMEMBER k a 500 km STOREDIST x
        ZRANGE x 0 -1 WITHSCORES
        SET s v
        GEORADIUS nokey 1 1 1 km STORE s
        EXISTS s
        # Edges: the poles' limits, the antimeridian, huge and zero radii, boxes.
        GEOADD big 0 0 o 0.001 0.001 p -0.001 0.001 q 0.001 -0.001 r -0.001 -0.001 s
        GEOADD big 179.99 0 w -179.99 0 e 0 84 np 0 -84 sp
        GEOSEARCH big FROMLONLAT 0 0 BYRADIUS 1 km WITHDIST
        GEOSEARCH big FROMLONLAT 0 0 BYRADIUS 20000 km WITHDIST
        GEOSEARCH big FROMLONLAT 0 0 BYRADIUS 0 km WITHDIST
        GEOSEARCH big FROMLONLAT 180 0 BYRADIUS 10 km WITHDIST
        GEOSEARCH big FROMLONLAT 0 85 BYRADIUS 200 km WITHDIST
        GEOSEARCH big FROMLONLAT 0 -85 BYRADIUS 200 km WITHDIST
        GEOSEARCH big FROMLONLAT 0 0 BYBOX 300 300 m WITHDIST
        GEOSEARCH big FROMLONLAT 0 0 BYBOX 100000 100000 km WITHDIST
        GEOSEARCH big FROMLONLAT 0 0 BYBOX 300 300 ft WITHDIST
        COMMAND GETKEYS GEORADIUS k 1 1 1 km STORE d
        COMMAND GETKEYS GEORADIUSBYMEMBER k m 1 km STOREDIST d
        COMMAND GETKEYS GEOSEARCHSTORE d k FROMLONLAT 1 1 BYRADIUS 1 km
        TYPE Sicily
        # RESP3: coordinates as doubles, a missing member's null.
        ~ HELLO 3
        GEOPOS Sicily Palermo nope
        GEOHASH Sicily nope
        GEODIST Sicily Palermo nope
        GEOSEARCH Sicily FROMLONLAT 15 37 BYRADIUS 200 km WITHDIST WITHHASH WITHCOORD
        ",
    );
}

/// Many random points searched from random centres by radius and by box: the same members in
/// the same order as redis-server (the 9-box cover, its edge cases and the distance test).
#[test]
fn random_searches_find_what_redis_server_finds() {
    // A fixed sequence (xorshift), so a failure can be replayed.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut script = String::new();
    for cluster in 0..6 {
        let (lon, lat) = (next() * 340.0 - 170.0, next() * 160.0 - 80.0);
        let mut add = String::from("GEOADD pts");
        for i in 0..150 {
            let x = (lon + (next() - 0.5) * 8.0).clamp(-180.0, 180.0);
            let y = (lat + (next() - 0.5) * 8.0).clamp(-85.0, 85.0);
            add.push_str(&format!(" {x:.6} {y:.6} m{cluster}-{i}"));
        }
        script.push_str(&add);
        script.push('\n');
        for _ in 0..8 {
            let r = next() * 400.0;
            script.push_str(&format!(
                "GEOSEARCH pts FROMLONLAT {lon:.5} {lat:.5} BYRADIUS {r:.3} km ASC WITHDIST\n"
            ));
            let (w, h) = (next() * 600.0, next() * 600.0);
            script.push_str(&format!(
                "GEOSEARCH pts FROMLONLAT {lon:.5} {lat:.5} BYBOX {w:.3} {h:.3} km WITHDIST\n"
            ));
            script.push_str(&format!(
                "GEORADIUSBYMEMBER pts m{cluster}-7 {r:.3} km WITHDIST WITHCOORD\n"
            ));
            let n = 1 + (next() * 40.0) as u32;
            script.push_str(&format!(
                "GEOSEARCH pts FROMLONLAT {lon:.5} {lat:.5} BYRADIUS {r:.3} km COUNT {n} DESC\n"
            ));
        }
    }
    compare(&script);
}

/// Members at the same place are at equal distances: with COUNT, Redis's partial quicksort
/// (pqsort) decides their order, and a full sort (glibc's stable qsort) when all are returned.
#[test]
fn count_orders_equal_distances_as_redis_server_does() {
    let mut script = String::from("GEOADD t");
    for i in 0..90 {
        let (x, y) = [(1.0, 1.0), (2.0, 2.0), (0.5, 0.5)][i % 3];
        script.push_str(&format!(" {x} {y} m{i}"));
    }
    script.push('\n');
    for count in [1, 5, 10, 25, 31, 44, 60, 89, 90, 100] {
        for order in ["ASC", "DESC"] {
            script.push_str(&format!(
                "GEOSEARCH t FROMLONLAT 0 0 BYRADIUS 500 km COUNT {count} {order}\n"
            ));
            script.push_str(&format!(
                "GEORADIUS t 0 0 500 km COUNT {count} {order} WITHDIST\n"
            ));
        }
        script.push_str(&format!(
            "GEOSEARCH t FROMLONLAT 0 0 BYRADIUS 500 km COUNT {count}\n"
        ));
    }
    compare(&script);
}
