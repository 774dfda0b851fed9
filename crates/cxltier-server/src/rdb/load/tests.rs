//! The decoder on payloads that redis-server 7.0 produced (`tests/fixtures/dump/`, made by
//! `make.py` there), on hand-built payloads of the encodings Redis 7.0 no longer writes, and on
//! corrupt ones.

use super::*;
use crate::rdb::dump::{self, PayloadError};
use crate::rdb::encode;

/// A fixture's payload.
fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/dump/{name}.hex",
        env!("CARGO_MANIFEST_DIR")
    );
    let hex = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let hex = hex.trim();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn parse(payload: &[u8]) -> std::result::Result<Value, PayloadError> {
    dump::parse(payload, usize::MAX)
}

fn strings(items: &[&[u8]]) -> Strings {
    let mut s = Strings::new();
    for i in items {
        s.push(i);
    }
    s
}

/// A value as comparable text, whatever the order of a set's, a sorted set's or a hash's
/// members.
fn canon(v: &Value) -> (String, Vec<String>) {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut items: Vec<String> = match v {
        Value::String(s) => vec![text(s)],
        Value::List(s) | Value::Set(s) => s.iter().map(text).collect(),
        Value::ZSet { members, scores } => members
            .iter()
            .zip(scores)
            .map(|(m, s)| format!("{}={s}", text(m)))
            .collect(),
        Value::Hash(_) => v
            .pairs()
            .iter()
            .map(|(f, x)| format!("{}={}", text(f), text(x)))
            .collect(),
        Value::Stream(s) => vec![format!("{s:?}")],
    };
    if !matches!(v, Value::List(_)) {
        items.sort();
    }
    (v.type_name().to_string(), items)
}

fn check_fixture(name: &str, rdb_type: u8, want: Value) {
    let p = fixture(name);
    assert_eq!(p[0], rdb_type, "{name}: the type redis-server wrote");
    let got = parse(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(canon(&got), canon(&want), "{name}");
    // What DUMP writes of it decodes to the same value.
    assert_eq!(parse(&dump::payload(&got)).unwrap(), got, "{name} again");
}

fn owned(items: &[String]) -> Vec<&[u8]> {
    items.iter().map(|s| s.as_bytes()).collect()
}

#[test]
fn strings_from_redis() {
    for (name, text) in [
        ("string_raw", "hello world"),
        ("string_empty", ""),
        ("string_int8", "-100"),
        ("string_int16", "1234"),
        ("string_int32", "-123456"),
        ("string_int64", "12345678901"),
    ] {
        check_fixture(name, TYPE_STRING, Value::String(text.into()));
    }
    // Int-encoded: the length byte says so (0xc0 | width).
    assert_eq!(fixture("string_int8")[1], 0xc0);
    assert_eq!(fixture("string_int16")[1], 0xc1);
    assert_eq!(fixture("string_int32")[1], 0xc2);
    let lzf = format!("{}tail", "abcdefgh".repeat(40));
    assert_eq!(fixture("string_lzf")[1], 0xc3, "LZF-compressed");
    check_fixture("string_lzf", TYPE_STRING, Value::String(lzf.into()));
}

#[test]
fn lists_from_redis() {
    let ints = [
        "1",
        "-1",
        "127",
        "128",
        "-4096",
        "4095",
        "-32768",
        "32767",
        "-8388608",
        "8388607",
        "-2147483648",
        "2147483647",
        "-9223372036854775808",
        "9223372036854775807",
        "x",
        "007",
    ];
    let ints: Vec<&[u8]> = ints.iter().map(|s| s.as_bytes()).collect();
    check_fixture(
        "list_quicklist",
        TYPE_LIST_QUICKLIST_2,
        Value::List(strings(&ints)),
    );
    let elements: Vec<String> = (0..16)
        .map(|i| format!("element-{i:02}-{}", "z".repeat(40)))
        .collect();
    check_fixture(
        "list_compressed",
        TYPE_LIST_QUICKLIST_2,
        Value::List(strings(&owned(&elements))),
    );
    let b = "b".repeat(100);
    let de = format!("{}{}", "d".repeat(64), "e".repeat(36));
    check_fixture(
        "list_plain",
        TYPE_LIST_QUICKLIST_2,
        Value::List(strings(&[b"a", b.as_bytes(), b"c", de.as_bytes()])),
    );
    // Its second node is a PLAIN one (container 1): four nodes, packed then plain.
    let p = fixture("list_plain");
    assert_eq!(&p[1..3], &[4, 2]);
}

#[test]
fn sets_from_redis() {
    check_fixture(
        "set_intset16",
        TYPE_SET_INTSET,
        Value::Set(strings(&[b"3", b"-2", b"1", b"32767", b"-32768"])),
    );
    check_fixture(
        "set_intset64",
        TYPE_SET_INTSET,
        Value::Set(strings(&[b"5", b"5000000000", b"-70000"])),
    );
    let x = "x".repeat(100);
    let ab = "abcdefgh".repeat(8);
    check_fixture(
        "set_hashtable",
        TYPE_SET,
        Value::Set(strings(&[
            b"a",
            b"bb",
            b"1",
            b"-7",
            x.as_bytes(),
            ab.as_bytes(),
        ])),
    );
    let ints: Vec<String> = (0..20).map(|i| (i * 1000).to_string()).collect();
    check_fixture(
        "set_hashtable_ints",
        TYPE_SET,
        Value::Set(strings(&owned(&ints))),
    );
}

#[test]
fn sorted_sets_from_redis() {
    let members: &[&[u8]] = &[b"one", b"onehalf", b"low", b"high", b"7", b"big"];
    check_fixture(
        "zset_listpack",
        TYPE_ZSET_LISTPACK,
        Value::ZSet {
            members: strings(members),
            scores: vec![1.0, 1.5, f64::NEG_INFINITY, f64::INFINITY, -2.0, 1e100],
        },
    );
    let names: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
    check_fixture(
        "zset_skiplist",
        TYPE_ZSET_2,
        Value::ZSet {
            members: strings(&owned(&names)),
            scores: (0..20).map(|i| f64::from(i) * 0.25).collect(),
        },
    );
    // A geo set: scores are 52-bit geohashes (Redis's GEOADD documentation's example).
    check_fixture(
        "geo",
        TYPE_ZSET_LISTPACK,
        Value::ZSet {
            members: strings(&[b"Palermo", b"Catania"]),
            scores: vec![3_479_099_956_230_698.0, 3_479_447_370_796_909.0],
        },
    );
}

#[test]
fn hashes_from_redis() {
    check_fixture(
        "hash_listpack",
        TYPE_HASH_LISTPACK,
        Value::Hash(strings(&[
            b"f", b"v", b"n", b"12", b"big", b"-70000", b"e", b"",
        ])),
    );
    let mut items = Vec::new();
    for i in 0..12 {
        items.push(format!("field{i}"));
        items.push(format!("value-{i}-{}", "q".repeat(30)));
    }
    check_fixture(
        "hash_hashtable",
        TYPE_HASH,
        Value::Hash(strings(&owned(&items))),
    );
}

/// A payload of RDB type `t` and `body`, with a valid footer.
fn sealed(t: u8, body: &[u8]) -> Vec<u8> {
    let mut b = vec![t];
    b.extend_from_slice(body);
    dump::seal(&b)
}

/// A body that is one RDB string holding `blob`.
fn blob(blob: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    encode::string(blob, &mut b);
    b
}

fn refused(p: &[u8]) -> String {
    match parse(p) {
        Err(PayloadError::Value(e)) => e.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn plain_list_and_text_scores_redis_no_longer_writes() {
    // RDB_TYPE_LIST: count 3; "a"; ""; an int8-encoded 5 (0xc0, 0x05).
    let list = sealed(TYPE_LIST, &[3, 1, b'a', 0, 0xc0, 5]);
    assert_eq!(
        parse(&list).unwrap(),
        Value::List(strings(&[b"a", b"", b"5"]))
    );
    // RDB_TYPE_ZSET: count 3; "a" 1.5 as text (length 3); "b" +inf (254); "c" -inf (255).
    let zset = sealed(
        TYPE_ZSET,
        &[3, 1, b'a', 3, b'1', b'.', b'5', 1, b'b', 254, 1, b'c', 255],
    );
    assert_eq!(
        parse(&zset).unwrap(),
        Value::ZSet {
            members: strings(&[b"a", b"b", b"c"]),
            scores: vec![1.5, f64::INFINITY, f64::NEG_INFINITY],
        }
    );
    // 253 is NaN: refused, as is text that is no number.
    assert!(refused(&sealed(TYPE_ZSET, &[1, 1, b'a', 253])).contains("NaN"));
    assert!(refused(&sealed(TYPE_ZSET, &[1, 1, b'a', 2, b'x', b'y'])).contains("not a number"));
}

/// A ziplist written out byte by byte: "ab", 5, 300, -1 and a 70-byte string.
fn hand_ziplist() -> Vec<u8> {
    let mut zl = Vec::new();
    zl.extend_from_slice(&97u32.to_le_bytes()); // zlbytes: the whole ziplist
    zl.extend_from_slice(&23u32.to_le_bytes()); // zltail: where the last entry starts
    zl.extend_from_slice(&5u16.to_le_bytes()); // zllen: 5 entries
    zl.extend_from_slice(&[0x00, 0x02, b'a', b'b']); // at 10: prevlen 0, a 2-byte string
    zl.extend_from_slice(&[0x04, 0xf6]); // at 14: prevlen 4, immediate 0xf6 = 6 - 1 = 5
    zl.extend_from_slice(&[0x02, 0xc0, 0x2c, 0x01]); // at 16: prevlen 2, int16 300
    zl.extend_from_slice(&[0x04, 0xfe, 0xff]); // at 20: prevlen 4, int8 -1
    zl.extend_from_slice(&[0x03, 0x40, 70]); // at 23: prevlen 3, 14-bit string length 70
    zl.extend_from_slice(&[b'x'; 70]);
    zl.push(0xff); // at 96: the end byte
    zl
}

#[test]
fn ziplists_written_by_hand_and_by_the_encoder_agree() {
    let x70 = [b'x'; 70];
    let entries = [
        Entry::Str(b"ab"),
        Entry::Int(5),
        Entry::Int(300),
        Entry::Int(-1),
        Entry::Str(&x70),
    ];
    assert_eq!(encode::ziplist(&entries), hand_ziplist());
    let want = Value::List(strings(&[b"ab", b"5", b"300", b"-1", &x70]));
    assert_eq!(
        parse(&sealed(TYPE_LIST_ZIPLIST, &blob(&hand_ziplist()))).unwrap(),
        want
    );
    // LIST_QUICKLIST: a count of nodes, each a ziplist; an empty node is skipped.
    let mut body = vec![2];
    body.extend(blob(&hand_ziplist()));
    body.extend(blob(&encode::ziplist(&[])));
    assert_eq!(parse(&sealed(TYPE_LIST_QUICKLIST, &body)).unwrap(), want);
}

#[test]
fn every_integer_width_round_trips_through_ziplists_and_listpacks() {
    let mut values = vec![
        0i64, 12, 13, -1, 127, 128, -128, -129, 4095, 4096, -4096, -4097,
    ];
    for bits in [15u32, 23, 31, 63] {
        let top = (1i64 << bits).wrapping_sub(1);
        values.extend([top, top.wrapping_add(1), -top - 1, -top]);
    }
    values.extend([i64::MIN, i64::MAX]);
    let entries: Vec<Entry<'_>> = values.iter().map(|&v| Entry::Int(v)).collect();
    let want: Vec<String> = values.iter().map(i64::to_string).collect();
    let want = Value::List(strings(&owned(&want)));
    let zl = encode::ziplist(&entries);
    assert_eq!(parse(&sealed(TYPE_LIST_ZIPLIST, &blob(&zl))).unwrap(), want);
    // A listpack travels as a LIST_QUICKLIST_2 node (a count of 1, container 2: packed).
    let mut body = vec![1, 2];
    body.extend(blob(&encode::listpack(&entries)));
    assert_eq!(parse(&sealed(TYPE_LIST_QUICKLIST_2, &body)).unwrap(), want);
    // Strings of each length encoding, with 5-byte previous lengths and back lengths.
    let long = vec![b'q'; 70_000];
    let mid = vec![b'm'; 300];
    let entries = [
        Entry::Str(&long),
        Entry::Str(&mid),
        Entry::Str(b""),
        Entry::Str(&long),
    ];
    let want = Value::List(strings(&[&long, &mid, b"", &long]));
    assert_eq!(
        parse(&sealed(
            TYPE_LIST_ZIPLIST,
            &blob(&encode::ziplist(&entries))
        ))
        .unwrap(),
        want
    );
    let mut body = vec![1, 2];
    body.extend(blob(&encode::listpack(&entries)));
    assert_eq!(parse(&sealed(TYPE_LIST_QUICKLIST_2, &body)).unwrap(), want);
}

#[test]
fn pairs_in_ziplists_listpacks_and_zipmaps() {
    let pairs = [
        Entry::Str(b"f"),
        Entry::Int(7),
        Entry::Str(b"g"),
        Entry::Str(b"1.5"),
    ];
    let hash = Value::Hash(strings(&[b"f", b"7", b"g", b"1.5"]));
    let zset = Value::ZSet {
        members: strings(&[b"f", b"g"]),
        scores: vec![7.0, 1.5],
    };
    let zl = blob(&encode::ziplist(&pairs));
    let lp = blob(&encode::listpack(&pairs));
    assert_eq!(parse(&sealed(TYPE_HASH_ZIPLIST, &zl)).unwrap(), hash);
    assert_eq!(parse(&sealed(TYPE_HASH_LISTPACK, &lp)).unwrap(), hash);
    assert_eq!(parse(&sealed(TYPE_ZSET_ZIPLIST, &zl)).unwrap(), zset);
    assert_eq!(parse(&sealed(TYPE_ZSET_LISTPACK, &lp)).unwrap(), zset);
    // zipmap.c's own example, byte for byte: "foo" => "bar", "hello" => "world".
    let zm = b"\x02\x03foo\x03\x00bar\x05hello\x05\x00world\xff";
    assert_eq!(
        encode::zipmap(&[(b"foo", b"bar"), (b"hello", b"world")]),
        zm.to_vec()
    );
    assert_eq!(
        parse(&sealed(TYPE_HASH_ZIPMAP, &blob(zm))).unwrap(),
        Value::Hash(strings(&[b"foo", b"bar", b"hello", b"world"]))
    );
    // A free byte after a value: 2 spare bytes after "hi" are skipped.
    let zm = b"\x01\x01a\x02\x02hi..\xff";
    assert_eq!(
        parse(&sealed(TYPE_HASH_ZIPMAP, &blob(zm))).unwrap(),
        Value::Hash(strings(&[b"a", b"hi"]))
    );
    // An odd number of entries: a field without its value, a member without its score.
    let odd = blob(&encode::listpack(&pairs[..3]));
    assert!(refused(&sealed(TYPE_HASH_LISTPACK, &odd)).contains("without a value"));
    assert!(refused(&sealed(TYPE_ZSET_LISTPACK, &odd)).contains("without a score"));
    // A score that is no number.
    let bad = blob(&encode::listpack(&[Entry::Str(b"m"), Entry::Str(b"x")]));
    assert!(refused(&sealed(TYPE_ZSET_LISTPACK, &bad)).contains("not a number"));
}

#[test]
fn empty_collections_are_refused_in_every_encoding() {
    let empty_zl = blob(&encode::ziplist(&[]));
    let empty_lp = blob(&encode::listpack(&[]));
    let cases: Vec<(u8, Vec<u8>)> = vec![
        (TYPE_LIST, vec![0]),
        (TYPE_SET, vec![0]),
        (TYPE_ZSET, vec![0]),
        (TYPE_ZSET_2, vec![0]),
        (TYPE_HASH, vec![0]),
        (TYPE_LIST_QUICKLIST, vec![0]),
        (TYPE_LIST_QUICKLIST_2, vec![0]),
        (TYPE_LIST_QUICKLIST, [vec![1], empty_zl.clone()].concat()),
        (
            TYPE_LIST_QUICKLIST_2,
            [vec![1, 2], empty_lp.clone()].concat(),
        ),
        (TYPE_LIST_ZIPLIST, empty_zl.clone()),
        (TYPE_ZSET_ZIPLIST, empty_zl.clone()),
        (TYPE_HASH_ZIPLIST, empty_zl),
        (TYPE_ZSET_LISTPACK, empty_lp.clone()),
        (TYPE_HASH_LISTPACK, empty_lp),
        (TYPE_SET_INTSET, blob(&encode::intset(&[]))),
        (TYPE_HASH_ZIPMAP, blob(b"\x00\xff")),
    ];
    for (t, body) in cases {
        let why = refused(&sealed(t, &body));
        assert!(why.contains("empty"), "type {t}: {why}");
    }
    // A quicklist node of no bytes at all.
    assert!(refused(&sealed(TYPE_LIST_QUICKLIST_2, &[1, 1, 0])).contains("empty quicklist node"));
}

#[test]
fn repeats_are_refused() {
    assert!(refused(&sealed(TYPE_SET, &[2, 1, b'a', 1, b'a'])).contains("twice"));
    // An int-encoded member equal to a plain one: the same bytes once decoded.
    assert!(refused(&sealed(TYPE_SET, &[2, 1, b'7', 0xc0, 7])).contains("twice"));
    assert!(refused(&sealed(TYPE_HASH, &[2, 1, b'f', 0, 1, b'f', 0])).contains("twice"));
    // A value may repeat; a field may equal another field's value.
    assert!(parse(&sealed(TYPE_HASH, &[2, 1, b'f', 1, b'g', 1, b'g', 1, b'g'])).is_ok());
    let mut z = vec![2];
    for _ in 0..2 {
        z.extend_from_slice(&[1, b'm']);
        z.extend_from_slice(&1.0f64.to_le_bytes());
    }
    assert!(refused(&sealed(TYPE_ZSET_2, &z)).contains("twice"));
    let lp = encode::listpack(&[
        Entry::Int(1),
        Entry::Int(2),
        Entry::Str(b"1"),
        Entry::Int(3),
    ]);
    assert!(refused(&sealed(TYPE_HASH_LISTPACK, &blob(&lp))).contains("twice"));
    let zm = encode::zipmap(&[(b"a", b"1"), (b"a", b"2")]);
    assert!(refused(&sealed(TYPE_HASH_ZIPMAP, &blob(&zm))).contains("twice"));
}

#[test]
fn intsets_must_be_sorted_without_repeats() {
    let ok = encode::intset(&[-5, 0, 70_000]);
    assert_eq!(
        parse(&sealed(TYPE_SET_INTSET, &blob(&ok))).unwrap(),
        Value::Set(strings(&[b"-5", b"0", b"70000"]))
    );
    for bad in [
        encode::intset(&[3, 1]),
        encode::intset(&[1, 1]),
        // A width of 3 bytes.
        [&3u32.to_le_bytes()[..], &1u32.to_le_bytes(), &[1, 0, 0]].concat(),
        // A count the bytes do not hold.
        [&2u32.to_le_bytes()[..], &2u32.to_le_bytes(), &[1, 0]].concat(),
    ] {
        assert!(refused(&sealed(TYPE_SET_INTSET, &blob(&bad))).contains("intset"));
    }
}

#[test]
fn nan_scores_are_refused() {
    let mut z = vec![1, 1, b'm'];
    z.extend_from_slice(&f64::NAN.to_le_bytes());
    assert!(refused(&sealed(TYPE_ZSET_2, &z)).contains("NaN"));
    let lp = encode::listpack(&[Entry::Str(b"m"), Entry::Str(b"nan")]);
    assert!(refused(&sealed(TYPE_ZSET_LISTPACK, &blob(&lp))).contains("NaN"));
}

/// A change of an encoded structure, by its name.
type Edit = (&'static str, fn(&mut [u8]));

/// `base` changed by each edit in turn (each time from `base`), with the edit's name.
fn edited(base: &[u8], edits: &[Edit]) -> Vec<(&'static str, Vec<u8>)> {
    edits
        .iter()
        .map(|(what, edit)| {
            let mut c = base.to_vec();
            edit(&mut c);
            (*what, c)
        })
        .collect()
}

#[test]
fn damaged_structures_are_refused() {
    let zl = hand_ziplist();
    let list = |zl: &[u8]| sealed(TYPE_LIST_ZIPLIST, &blob(zl));
    let cases: &[Edit] = &[
        ("header size", |c| c[0] += 1),
        ("tail offset", |c| c[4] = 20),
        ("count", |c| c[8] = 4),
        ("previous length", |c| c[14] = 3),
        ("encoding", |c| c[15] = 0xc1),
        ("string past the end", |c| c[24] = 0x7f),
        ("end byte", |c| *c.last_mut().unwrap() = 0),
    ];
    for (what, c) in edited(&zl, cases) {
        assert!(refused(&list(&c)).contains("ziplist"), "{what}");
    }
    let lp = encode::listpack(&[Entry::Str(b"abc"), Entry::Int(1000)]);
    let node = |lp: &[u8]| sealed(TYPE_LIST_QUICKLIST_2, &[&[1u8, 2][..], &blob(lp)].concat());
    assert!(parse(&node(&lp)).is_ok());
    let cases: &[Edit] = &[
        ("count", |c| c[4] = 3),
        ("back length", |c| c[10] = 9),
        ("encoding", |c| c[6] = 0xf5),
        ("string past the end", |c| c[6] = 0x8f),
        ("header size", |c| c[0] -= 1),
    ];
    for (what, c) in edited(&lp, cases) {
        assert!(refused(&node(&c)).contains("listpack"), "{what}");
    }
    // A quicklist node of an unknown container kind.
    assert!(refused(&sealed(
        TYPE_LIST_QUICKLIST_2,
        &[&[1u8, 3][..], &blob(&lp)].concat()
    ))
    .contains("container"));
}

#[test]
fn counts_and_lengths_beyond_the_bytes_are_refused_before_allocating() {
    // 2^60 members claimed in a few bytes.
    let mut body = Vec::new();
    encode::length(1 << 60, &mut body);
    body.extend_from_slice(&[1, b'a']);
    for t in [
        TYPE_LIST,
        TYPE_SET,
        TYPE_ZSET_2,
        TYPE_HASH,
        TYPE_LIST_QUICKLIST_2,
    ] {
        assert!(refused(&sealed(t, &body)).contains("more than the"), "{t}");
    }
    // A string of 4 GiB claimed.
    let mut body = Vec::new();
    encode::length(u64::from(u32::MAX), &mut body);
    assert!(refused(&sealed(TYPE_STRING, &body)).contains("past the end"));
    // An LZF string claiming 1 GiB from 3 compressed bytes.
    let mut body = vec![0xc3];
    encode::length(3, &mut body);
    encode::length(1 << 30, &mut body);
    body.extend_from_slice(&[0, b'a', b'b']);
    assert!(refused(&sealed(TYPE_STRING, &body)).contains("LZF"));
    // An unknown string encoding, and a length's unused first bytes.
    assert!(refused(&sealed(TYPE_STRING, &[0xc4])).contains("encoding"));
    assert!(refused(&sealed(TYPE_STRING, &[0x82])).contains("length encoding"));
}

#[test]
fn the_largest_string_is_the_callers() {
    let p = sealed(TYPE_STRING, &blob(&[b'a'; 100]));
    assert_eq!(
        dump::parse(&p, 99),
        Err(PayloadError::Value(LoadError::TooLarge {
            len: 100,
            max: 99
        }))
    );
    assert!(dump::parse(&p, 100).is_ok());
    // Compressed: its declared length is checked before it is inflated.
    let lzf = fixture("string_lzf");
    assert!(matches!(
        dump::parse(&lzf, 100),
        Err(PayloadError::Value(LoadError::TooLarge { len: 324, .. }))
    ));
}

#[test]
fn modules_and_later_types_are_refused_with_their_reason() {
    for (t, word) in [
        (TYPE_MODULE, "module"),
        (TYPE_MODULE_2, "module"),
        (TYPE_SET_LISTPACK, "7.2"),
        (21, "after 10"),
    ] {
        match parse(&sealed(t, &[0])) {
            Err(PayloadError::Value(LoadError::Unsupported(why))) => {
                assert!(why.contains(word), "{t}: {why}")
            }
            other => panic!("type {t}: {other:?}"),
        }
    }
    assert!(refused(&sealed(8, &[0])).contains("unknown RDB type"));
}

#[test]
fn the_footer_is_checked_as_redis_does() {
    let body = [TYPE_STRING, 1, b'v'];
    assert!(parse(&dump::seal(&body)).is_ok());
    // Older versions load; a newer one is refused with the checksum's words.
    assert!(parse(&dump::seal_version(&body, 9)).is_ok());
    assert_eq!(
        parse(&dump::seal_version(&body, 11)),
        Err(PayloadError::Footer)
    );
    // A CRC of zero is no exception (Redis checks it unless DEBUG turned checking off).
    let mut zero = dump::seal(&body);
    let n = zero.len();
    zero[n - 8..].fill(0);
    assert_eq!(parse(&zero), Err(PayloadError::Footer));
    let mut flipped = dump::seal(&body);
    flipped[1] ^= 1;
    assert_eq!(parse(&flipped), Err(PayloadError::Footer));
    assert_eq!(parse(&[0; 9]), Err(PayloadError::Footer));
    // Bytes after the value.
    assert!(refused(&dump::seal(&[TYPE_STRING, 1, b'v', 0])).contains("after the value"));
    // The error a footer gets is Redis's own sentence.
    assert_eq!(
        PayloadError::Footer.to_string(),
        "DUMP payload version or checksum are wrong"
    );
}

#[test]
fn dump_of_redis_values_matches_redis_byte_for_byte_where_encodings_agree() {
    // A plain string: Redis writes it as cxltier does (no integer form, too short for LZF).
    let p = fixture("string_raw");
    let v = parse(&p).unwrap();
    assert_eq!(dump::payload(&v), p);
}

#[test]
fn a_stream_of_redis_reads_with_its_nodes_groups_and_pending_entries() {
    let p = fixture("stream");
    assert_eq!(p[0], TYPE_STREAM_LISTPACKS_2);
    let Ok(Value::Stream(s)) = parse(&p) else {
        panic!("{:?}", parse(&p))
    };
    let ids: Vec<u64> = s.entries.iter().map(|e| e.id.0).collect();
    assert_eq!(ids, [1, 3, 4, 5, 6, 7, 8, 10, 11, 12]);
    // Nodes of 4 entries, the deleted ones kept in theirs: 1-4, 5-8, 9-12.
    let starts: Vec<u64> = s
        .entries
        .iter()
        .filter(|e| e.node_start)
        .map(|e| e.id.0)
        .collect();
    assert_eq!(starts, [1, 5, 10]);
    assert_eq!(s.tail_count, 4);
    let items = |i: usize| s.items_of(i).map(<[u8]>::to_vec).collect::<Vec<_>>();
    assert_eq!(items(0), [&b"f"[..], b"1", b"g", b"v1"]);
    assert_eq!(items(8), [&b"other"[..], b"x"]);
    assert_eq!(items(9), [&b"f"[..], b"12", b"g", b"v12"]);
    assert_eq!(
        (s.last_id, s.max_deleted, s.entries_added),
        ((12, 1), (9, 1), 12)
    );
    let [g1, g2] = &s.groups[..] else {
        panic!("{:?}", s.groups)
    };
    assert_eq!(
        (&g1.name[..], g1.last, g1.entries_read),
        (&b"g1"[..], (6, 1), None)
    );
    let owners: Vec<(u64, &[u8])> = g1
        .pending
        .iter()
        .map(|p| (p.id.0, &g1.consumers[p.consumer].name[..]))
        .collect();
    assert_eq!(
        owners,
        [
            (1, &b"alice"[..]),
            (3, b"alice"),
            (4, b"alice"),
            (5, b"bob"),
            (6, b"bob")
        ]
    );
    assert_eq!(
        (&g2.name[..], g2.last, g2.pending.len()),
        (&b"g2"[..], (12, 1), 0)
    );
    // What DUMP writes of it reads back the same.
    let again = dump::payload(&Value::Stream(s.clone()));
    assert_eq!(parse(&again), Ok(Value::Stream(s)));
}
