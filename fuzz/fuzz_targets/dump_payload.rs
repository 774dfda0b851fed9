//! The DUMP/RESTORE payload decoder (`cxltier_server::rdb::dump::parse`, what RESTORE runs
//! before it touches the keyspace), in two modes chosen by the first byte:
//!
//! - raw (even first byte): the rest is a payload as a client sends it, decoded as it is and
//!   again sealed with a valid footer (RDB version 10, its CRC64), so that its body is reached;
//! - structured (odd first byte): `arbitrary` draws an RDB type and the members of a value of
//!   that type, the value is written in that type's encoding (plain strings, integers and LZF
//!   in RDB strings; ziplists, listpacks, intsets and zipmaps through `rdb::encode`; streams
//!   with groups, pending entries and consumers as DUMP writes them), a few
//!   bytes of the body are then changed, cut or inserted, and the footer is sealed with a valid
//!   CRC64 (and an RDB version drawn near 10).
//!
//! Checks: no panic; no allocation past a budget proportional to the input (32 bytes per input
//! byte plus 64 KiB; 4096 per byte when the input holds `0xc3`, the LZF marker, since LZF
//! expands up to 88 times and the elements of a compressed listpack more again), enforced by a
//! capped global allocator; and when a payload is accepted, the payload DUMP writes of its value
//! decodes to the same value.
#![no_main]

use std::alloc::System;

use cap::Cap;
use cxltier_server::rdb::dump;
use cxltier_server::rdb::encode::{self, Entry};
use cxltier_server::rdb::load::Value;
use cxltier_server::rdb::lzf;
use cxltier_server::rdb::stream::{Consumer, Pending, Stream, StreamEntry, StreamGroup};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

/// Every RDB type the decoder knows, and a few it refuses.
const TYPES: [u8; 22] = [
    0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 8,
];

fn decode_within_budget(payload: &[u8]) {
    let per_byte = if payload.contains(&0xc3) { 4096 } else { 32 };
    let budget = payload.len() * per_byte + (64 << 10);
    let base = ALLOC.allocated();
    ALLOC
        .set_limit(base + budget)
        .expect("the limit is above what is allocated");
    let result = dump::parse(payload, usize::MAX);
    ALLOC.set_limit(usize::MAX).expect("no limit");
    if let Ok(value) = result {
        let again = dump::payload(&value);
        assert_eq!(
            dump::parse(&again, usize::MAX).as_ref(),
            Ok(&value),
            "the DUMP of an accepted value does not decode to it"
        );
    }
}

/// A member: short bytes from a small alphabet (so that repeats happen), an integer's text, or
/// longer bytes.
fn member(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    Ok(match u.int_in_range(0..=3)? {
        0 => vec![*u.choose(b"ab1")?; u.int_in_range(0..=3)?],
        1 => u.arbitrary::<i64>()?.to_string().into_bytes(),
        2 => i64::from(u.arbitrary::<i16>()?).to_string().into_bytes(),
        _ => u.arbitrary::<Vec<u8>>()?,
    })
}

/// An RDB string of `s`: plain, integer-encoded when it is a small integer's text, or LZF.
fn rdb_string(u: &mut Unstructured<'_>, s: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let as_int = std::str::from_utf8(s)
        .ok()
        .and_then(|t| t.parse::<i32>().ok())
        .filter(|v| v.to_string().as_bytes() == s);
    match (u.int_in_range(0..=2)?, as_int) {
        (1, Some(v)) => {
            if let Ok(b) = i8::try_from(v) {
                out.extend_from_slice(&[0xc0, b as u8]);
            } else if let Ok(h) = i16::try_from(v) {
                out.push(0xc1);
                out.extend_from_slice(&h.to_le_bytes());
            } else {
                out.push(0xc2);
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        (2, _) => match lzf::compress(s) {
            Some(c) => {
                out.push(0xc3);
                encode::length(c.len() as u64, out);
                encode::length(s.len() as u64, out);
                out.extend_from_slice(&c);
            }
            None => encode::string(s, out),
        },
        _ => encode::string(s, out),
    }
    Ok(())
}

fn entries(members: &[Vec<u8>]) -> Vec<Entry<'_>> {
    members
        .iter()
        .map(|m| {
            match std::str::from_utf8(m)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
                .filter(|v| v.to_string().as_bytes() == m.as_slice())
            {
                Some(v) => Entry::Int(v),
                None => Entry::Str(m),
            }
        })
        .collect()
}

/// The body (type byte first) of a value of a drawn type.
fn body(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let t = *u.choose(&TYPES)?;
    let n = u.int_in_range(0..=24)?;
    let members: Vec<Vec<u8>> = (0..n).map(|_| member(u)).collect::<Result<_>>()?;
    let scores: Vec<f64> = (0..n)
        .map(|_| {
            Ok(match u.int_in_range(0..=4)? {
                0 => f64::from(u.arbitrary::<i32>()?),
                1 => u.arbitrary::<f64>()?,
                2 => f64::INFINITY,
                _ => f64::from(u.arbitrary::<i16>()?) / 4.0,
            })
        })
        .collect::<Result<_>>()?;
    let mut b = vec![t];
    match t {
        0 => rdb_string(u, members.first().map_or(&[][..], |m| m), &mut b)?,
        1 | 2 | 4 => {
            let count = if t == 4 { n / 2 } else { n };
            encode::length(count as u64, &mut b);
            for m in &members[..if t == 4 { 2 * count } else { count }] {
                rdb_string(u, m, &mut b)?;
            }
        }
        3 | 5 => {
            encode::length(n as u64, &mut b);
            for (m, s) in members.iter().zip(&scores) {
                rdb_string(u, m, &mut b)?;
                if t == 5 {
                    b.extend_from_slice(&s.to_le_bytes());
                } else if s.is_infinite() {
                    b.push(if *s > 0.0 { 254 } else { 255 });
                } else {
                    let text = s.to_string();
                    b.push(text.len() as u8);
                    b.extend_from_slice(text.as_bytes());
                }
            }
        }
        9 => {
            let pairs: Vec<(&[u8], &[u8])> = members
                .chunks_exact(2)
                .map(|p| (p[0].as_slice(), p[1].as_slice()))
                .collect();
            rdb_string(u, &encode::zipmap(&pairs), &mut b)?;
        }
        10 | 12 | 13 => {
            let mut items = members.clone();
            if t == 12 {
                // Members and scores alternating.
                items = members
                    .iter()
                    .zip(&scores)
                    .flat_map(|(m, s)| [m.clone(), s.to_string().into_bytes()])
                    .collect();
            }
            rdb_string(u, &encode::ziplist(&entries(&items)), &mut b)?;
        }
        11 => {
            let mut v: Vec<i64> = members
                .iter()
                .filter_map(|m| std::str::from_utf8(m).ok()?.parse().ok())
                .collect();
            v.sort_unstable();
            v.dedup();
            rdb_string(u, &encode::intset(&v), &mut b)?;
        }
        14 | 18 => {
            let nodes = members.chunks(4).collect::<Vec<_>>();
            encode::length(nodes.len() as u64, &mut b);
            for node in nodes {
                if t == 18 {
                    let plain = u.arbitrary::<bool>()? && !node[0].is_empty();
                    b.push(if plain { 1 } else { 2 });
                    if plain {
                        rdb_string(u, &node[0], &mut b)?;
                        continue;
                    }
                    rdb_string(u, &encode::listpack(&entries(node)), &mut b)?;
                } else {
                    rdb_string(u, &encode::ziplist(&entries(node)), &mut b)?;
                }
            }
        }
        16 | 17 => {
            let mut items = members.clone();
            if t == 17 {
                items = members
                    .iter()
                    .zip(&scores)
                    .flat_map(|(m, s)| [m.clone(), s.to_string().into_bytes()])
                    .collect();
            }
            rdb_string(u, &encode::listpack(&entries(&items)), &mut b)?;
        }
        15 | 19 => {
            // A stream written as DUMP writes it (type 19's fields; a type 15 body reads them
            // as what follows), then damaged like the rest.
            let s = stream(u, &members)?;
            let p = dump::payload(&Value::Stream(Box::new(s)));
            b.extend_from_slice(&p[1..p.len() - dump::FOOTER_LEN]);
        }
        _ => {
            let n = u.int_in_range(0..=16)?;
            b.extend_from_slice(u.bytes(n)?);
        }
    }
    Ok(b)
}

/// A stream of entries made of `members` (one or two pairs each, ids increasing, nodes opened
/// at random), and up to two groups with consumers owning some of its ids.
fn stream(u: &mut Unstructured<'_>, members: &[Vec<u8>]) -> Result<Stream> {
    let mut s = Stream::default();
    let mut id = (u64::from(u.arbitrary::<u16>()?), 0u64);
    for pair in members.chunks(2) {
        id = (id.0 + u64::from(u.int_in_range(0..=3u8)?), id.1 + 1);
        let fields = s.items.len();
        let pairs = pair.len().min(if u.arbitrary::<bool>()? { 1 } else { 2 });
        for m in &pair[..pairs] {
            s.items.push(m);
        }
        for m in &pair[..pairs] {
            s.items.push(m);
        }
        let node_start = s.entries.is_empty() || u.ratio(1, 4)?;
        s.entries.push(StreamEntry {
            id,
            fields,
            values: fields + pairs,
            pairs,
            node_start,
        });
    }
    s.last_id = id;
    s.first_id = s.entries.first().map_or((0, 0), |e| e.id);
    s.entries_added = s.entries.len() as u64 + u64::from(u.arbitrary::<u8>()?);
    for g in 0..u.int_in_range(0..=2)? {
        let mut group = StreamGroup {
            name: vec![b'g', g],
            last: id,
            entries_read: u.arbitrary()?,
            ..StreamGroup::default()
        };
        let consumers = u.int_in_range(1..=3u8)?;
        group.consumers = (0..consumers)
            .map(|c| Consumer {
                name: vec![b'c', c],
                seen_ms: 1,
            })
            .collect();
        for e in &s.entries {
            if u.arbitrary::<bool>()? {
                group.pending.push(Pending {
                    id: e.id,
                    delivered_ms: u.arbitrary()?,
                    deliveries: u64::from(u.arbitrary::<u8>()?),
                    consumer: usize::from(u.int_in_range(0..=consumers - 1)?),
                });
            }
        }
        s.groups.push(group);
    }
    Ok(s)
}

/// A few changes to the body: a byte set, a range cut, bytes inserted, the end cut.
fn damage(u: &mut Unstructured<'_>, b: &mut Vec<u8>) -> Result<()> {
    for _ in 0..u.int_in_range(0..=3)? {
        if b.is_empty() {
            break;
        }
        let at = u.choose_index(b.len())?;
        match u.int_in_range(0..=3)? {
            0 => b[at] = u.arbitrary()?,
            1 => {
                let end = (at + u.int_in_range(1..=8)?).min(b.len());
                b.drain(at..end);
            }
            2 => {
                let n = u.int_in_range(1..=4)?;
                let extra = u.bytes(n)?.to_vec();
                b.splice(at..at, extra);
            }
            _ => b.truncate(at),
        }
    }
    Ok(())
}

fn structured(data: &[u8]) -> Result<Vec<u8>> {
    let mut u = Unstructured::new(data);
    let mut b = body(&mut u)?;
    damage(&mut u, &mut b)?;
    let version = if u.ratio(1, 8)? {
        u.int_in_range(0..=12)?
    } else {
        10
    };
    Ok(dump::seal_version(&b, version))
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        decode_within_budget(rest);
        decode_within_budget(&dump::seal(rest));
    } else if let Ok(payload) = structured(rest) {
        decode_within_budget(&payload);
    }
});
