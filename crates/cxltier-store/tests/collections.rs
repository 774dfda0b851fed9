//! Lists, sets, sorted sets and hashes against `std` models over random operations, with chunks
//! small enough that every few members split or merge a node; and their tiering, recovery and
//! cost per operation.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

mod util;

use cxltier_store::{
    Durability, Kind, ListEnd, ScoreBound, Store, StoreBuilder, StoreError, ZAddFlags,
};
use proptest::prelude::*;
use util::{in_memory, now_ms, nvme_reads, nvme_tier, open_with, over_log, temp};

/// A builder for a store in DRAM whose collection chunks split at `chunk` bytes.
fn in_dram(chunk: usize) -> StoreBuilder {
    // Chunks of many sizes take slab pages (1 MiB each with objects of at most 64 KiB) of many
    // size classes.
    StoreBuilder::new()
        .dram(64 << 20)
        .max_object(64 << 10)
        .durability(Durability::None)
        .collection_chunk_bytes(chunk)
}

/// A store in DRAM whose collection chunks split at `chunk` bytes.
fn small_chunks(chunk: usize) -> Store {
    in_dram(chunk).build().unwrap()
}

/// [`small_chunks`] with changed collections kept open across calls, as the server runs.
fn write_back_store(chunk: usize) -> Store {
    in_dram(chunk).collection_write_back(true).build().unwrap()
}

/// A builder for 32 MiB of DRAM over 128 MiB of NVMe in `p`, every write synced, collection
/// chunks splitting at `chunk` bytes.
fn durable_builder(p: &std::path::Path, chunk: usize) -> StoreBuilder {
    over_log(p, 32 << 20, 128 << 20)
        .max_object(64 << 10)
        .durability(Durability::Always)
        .collection_chunk_bytes(chunk)
}

/// 16 MiB of DRAM over 256 MiB of NVMe in `p`, objects of at most 64 KiB.
fn over_nvme(p: &std::path::Path, durability: Durability) -> Store {
    open_with(p, 16 << 20, 256 << 20, durability, |b| {
        b.max_object(64 << 10)
    })
}

/// Members from a small alphabet (so that they collide), now and then a long one (bigger than
/// a small chunk by itself).
fn member() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => prop::collection::vec(b'a'..b'e', 0..5),
        1 => prop::collection::vec(any::<u8>(), 40..90),
    ]
}

// ---------------------------------------------------------------- lists

#[derive(Debug, Clone)]
enum ListOp {
    Push(bool, Vec<Vec<u8>>),
    PushX(bool, Vec<Vec<u8>>),
    Pop(bool, u8),
    Set(i16, Vec<u8>),
    Insert(bool, u8, Vec<u8>),
    Rem(i8, Vec<u8>),
    Trim(i16, i16),
    Index(i16),
    Range(i16, i16),
    Del,
}

fn list_op() -> impl Strategy<Value = ListOp> {
    prop_oneof![
        6 => (any::<bool>(), prop::collection::vec(member(), 1..12)).prop_map(|(l, m)| ListOp::Push(l, m)),
        1 => (any::<bool>(), prop::collection::vec(member(), 1..3)).prop_map(|(l, m)| ListOp::PushX(l, m)),
        3 => (any::<bool>(), 1u8..10).prop_map(|(l, n)| ListOp::Pop(l, n)),
        2 => (-30i16..30, member()).prop_map(|(i, v)| ListOp::Set(i, v)),
        2 => (any::<bool>(), 0u8..30, member()).prop_map(|(b, p, v)| ListOp::Insert(b, p, v)),
        1 => (-3i8..3, member()).prop_map(|(c, v)| ListOp::Rem(c, v)),
        1 => (-40i16..40, -40i16..40).prop_map(|(a, b)| ListOp::Trim(a, b)),
        2 => (-40i16..40).prop_map(ListOp::Index),
        2 => (-40i16..40, -40i16..40).prop_map(|(a, b)| ListOp::Range(a, b)),
        1 => Just(ListOp::Del),
    ]
}

/// Redis's `start..=stop` over `len` items.
fn model_range(start: i64, stop: i64, len: usize) -> std::ops::Range<usize> {
    let len = len as i64;
    let s = if start < 0 {
        (start + len).max(0)
    } else {
        start
    };
    let e = if stop < 0 {
        stop + len
    } else {
        stop.min(len - 1)
    };
    if s > e || s >= len || e < 0 {
        0..0
    } else {
        s as usize..e as usize + 1
    }
}

fn model_index(i: i64, len: usize) -> Option<usize> {
    let i = if i < 0 { i + len as i64 } else { i };
    (i >= 0 && (i as usize) < len).then_some(i as usize)
}

fn end(left: bool) -> ListEnd {
    if left {
        ListEnd::Left
    } else {
        ListEnd::Right
    }
}

fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(|m| m.as_slice()).collect()
}

fn run_list(s: &mut Store, ops: &[ListOp]) {
    let k: &[u8] = b"list";
    let mut m: VecDeque<Vec<u8>> = VecDeque::new();
    run_list_ops(s, ops, &mut m, true);
    let all = s.list_range(k, 0, -1).unwrap();
    assert_eq!(all, m.iter().cloned().collect::<Vec<_>>());
    s.check_invariants().unwrap();
}

/// The model of a range's LIMIT: `v` (reversed with `rev`) from `off`, at most `lim` of it.
fn window<T>(mut v: Vec<T>, rev: bool, off: u8, lim: Option<u8>) -> Vec<T> {
    if rev {
        v.reverse();
    }
    v.into_iter()
        .skip(off as usize)
        .take(lim.map_or(usize::MAX, usize::from))
        .collect()
}

/// The model of LPUSH (`left`) or RPUSH of `v`.
fn push(m: &mut VecDeque<Vec<u8>>, left: bool, v: &[Vec<u8>]) {
    for x in v {
        if left {
            m.push_front(x.clone())
        } else {
            m.push_back(x.clone())
        }
    }
}

/// `ops` on the list `list` and on the model `m`, every answer compared. With `check_each`
/// the list's chunks are checked after each (which writes a changed list back, ending its
/// batch); without, the ops go on changing the list as one batch, read as it is in memory.
fn run_list_ops(s: &mut Store, ops: &[ListOp], m: &mut VecDeque<Vec<u8>>, check_each: bool) {
    let k: &[u8] = b"list";
    for op in ops {
        match op {
            ListOp::Push(left, v) => {
                let n = s.list_push(k, end(*left), &refs(v)).unwrap();
                push(m, *left, v);
                assert_eq!(n, m.len() as u64);
            }
            ListOp::PushX(left, v) => {
                let n = s.list_push_existing(k, end(*left), &refs(v)).unwrap();
                if !m.is_empty() {
                    push(m, *left, v);
                }
                assert_eq!(n, m.len() as u64);
            }
            ListOp::Pop(left, n) => {
                let got = s.list_pop(k, end(*left), u64::from(*n)).unwrap();
                if m.is_empty() {
                    assert_eq!(got, None);
                } else {
                    let want: Vec<Vec<u8>> = (0..*n)
                        .map_while(|_| if *left { m.pop_front() } else { m.pop_back() })
                        .collect();
                    assert_eq!(got, Some(want));
                }
            }
            ListOp::Set(i, v) => {
                let got = s.list_set(k, i64::from(*i), v).unwrap();
                let want = if m.is_empty() {
                    None
                } else {
                    Some(
                        model_index(i64::from(*i), m.len())
                            .map(|p| m[p] = v.clone())
                            .is_some(),
                    )
                };
                assert_eq!(got, want);
            }
            ListOp::Insert(before, p, v) => {
                // A pivot that is in the list most of the time.
                let pivot = m
                    .get(*p as usize)
                    .cloned()
                    .unwrap_or_else(|| b"zz".to_vec());
                let got = s.list_insert(k, *before, &pivot, v).unwrap();
                let want = if m.is_empty() {
                    0
                } else {
                    match m.iter().position(|x| *x == pivot) {
                        None => -1,
                        Some(at) => {
                            m.insert(if *before { at } else { at + 1 }, v.clone());
                            m.len() as i64
                        }
                    }
                };
                assert_eq!(got, want);
            }
            ListOp::Rem(c, v) => {
                let got = s.list_remove(k, i64::from(*c), v).unwrap();
                let limit = if *c == 0 {
                    usize::MAX
                } else {
                    c.unsigned_abs() as usize
                };
                let mut hits: Vec<usize> = m
                    .iter()
                    .enumerate()
                    .filter(|x| x.1 == v)
                    .map(|x| x.0)
                    .collect();
                if *c < 0 {
                    hits.reverse();
                }
                hits.truncate(limit);
                hits.sort_unstable_by(|a, b| b.cmp(a));
                for h in &hits {
                    m.remove(*h);
                }
                assert_eq!(got, hits.len() as u64);
            }
            ListOp::Trim(a, b) => {
                s.list_trim(k, i64::from(*a), i64::from(*b)).unwrap();
                let r = model_range(i64::from(*a), i64::from(*b), m.len());
                *m = m.range(r).cloned().collect();
            }
            ListOp::Index(i) => {
                let got = s.list_index(k, i64::from(*i)).unwrap();
                assert_eq!(
                    got,
                    model_index(i64::from(*i), m.len()).map(|p| m[p].clone())
                );
            }
            ListOp::Range(a, b) => {
                let got = s.list_range(k, i64::from(*a), i64::from(*b)).unwrap();
                let want: Vec<Vec<u8>> = m
                    .range(model_range(i64::from(*a), i64::from(*b), m.len()))
                    .cloned()
                    .collect();
                assert_eq!(got, want);
            }
            ListOp::Del => {
                assert_eq!(s.delete(k).unwrap(), !m.is_empty());
                m.clear();
            }
        }
        if check_each {
            s.check_collection(k)
                .unwrap_or_else(|e| panic!("after {op:?}: {e}"));
        }
        assert_eq!(s.list_len(k).unwrap(), m.len() as u64, "after {op:?}");
        assert_eq!(s.len(), u64::from(!m.is_empty()), "chunks are not keys");
    }
}

// ---------------------------------------------------------------- sorted sets

#[derive(Debug, Clone)]
enum ZOp {
    Add(u8, Vec<(i8, Vec<u8>)>),
    Incr(i8, Vec<u8>),
    Rem(Vec<Vec<u8>>),
    Pop(bool, u8),
    Rank(Vec<u8>, bool),
    ByRank(i16, i16, bool),
    ByScore(i8, bool, i8, bool, bool, u8, Option<u8>),
    Scan(Option<Vec<u8>>, u8),
    ByLex(
        Option<(Vec<u8>, bool)>,
        Option<(Vec<u8>, bool)>,
        bool,
        u8,
        Option<u8>,
    ),
    At(u8),
}

fn z_op() -> impl Strategy<Value = ZOp> {
    prop_oneof![
        6 => (0u8..6, prop::collection::vec((-8i8..8, member()), 1..10)).prop_map(|(f, m)| ZOp::Add(f, m)),
        2 => (-4i8..4, member()).prop_map(|(b, m)| ZOp::Incr(b, m)),
        3 => prop::collection::vec(member(), 1..6).prop_map(ZOp::Rem),
        1 => (any::<bool>(), 1u8..6).prop_map(|(x, n)| ZOp::Pop(x, n)),
        2 => (member(), any::<bool>()).prop_map(|(m, r)| ZOp::Rank(m, r)),
        2 => (-30i16..30, -30i16..30, any::<bool>()).prop_map(|(a, b, r)| ZOp::ByRank(a, b, r)),
        3 => (-9i8..9, any::<bool>(), -9i8..9, any::<bool>(), any::<bool>(), 0u8..4, prop::option::of(0u8..8))
            .prop_map(|(a, ax, b, bx, r, o, l)| ZOp::ByScore(a, ax, b, bx, r, o, l)),
        1 => (prop::option::of(member()), 1u8..8).prop_map(|(c, n)| ZOp::Scan(c, n)),
        2 => (
            prop::option::of((member(), any::<bool>())),
            prop::option::of((member(), any::<bool>())),
            any::<bool>(),
            0u8..3,
            prop::option::of(0u8..6)
        )
            .prop_map(|(a, b, r, o, l)| ZOp::ByLex(a, b, r, o, l)),
        1 => (0u8..40).prop_map(ZOp::At),
    ]
}

fn flags(f: u8) -> ZAddFlags {
    match f {
        1 => ZAddFlags {
            nx: true,
            ..Default::default()
        },
        2 => ZAddFlags {
            xx: true,
            ..Default::default()
        },
        3 => ZAddFlags {
            gt: true,
            ..Default::default()
        },
        4 => ZAddFlags {
            lt: true,
            ..Default::default()
        },
        _ => ZAddFlags::default(),
    }
}

/// Scores with halves and ties (-0 is 0).
fn score(x: i8) -> f64 {
    f64::from(x) / 2.0
}

fn sorted(m: &BTreeMap<Vec<u8>, f64>) -> Vec<(Vec<u8>, f64)> {
    let mut v: Vec<(Vec<u8>, f64)> = m.iter().map(|(k, s)| (k.clone(), *s)).collect();
    v.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap().then_with(|| a.0.cmp(&b.0)));
    v
}

/// A model's lex bound (`None`: the open end; `true`: exclusive).
fn lex(x: &Option<(Vec<u8>, bool)>, lower: bool) -> cxltier_store::LexBound<'_> {
    match x {
        None if lower => cxltier_store::LexBound::Min,
        None => cxltier_store::LexBound::Max,
        Some((m, true)) => cxltier_store::LexBound::Exclusive(m),
        Some((m, false)) => cxltier_store::LexBound::Inclusive(m),
    }
}

fn run_zset(s: &mut Store, ops: &[ZOp]) {
    let k: &[u8] = b"zset";
    let mut m: BTreeMap<Vec<u8>, f64> = BTreeMap::new();
    for op in ops {
        match op {
            ZOp::Add(f, members) => {
                let fl = flags(*f);
                let list: Vec<(f64, &[u8])> = members
                    .iter()
                    .map(|(x, mm)| (score(*x), mm.as_slice()))
                    .collect();
                let got = s.zadd(k, fl, &list).unwrap();
                let (mut added, mut changed) = (0, 0);
                for (sc, mm) in &list {
                    match m.get(*mm).copied() {
                        None if fl.xx => {}
                        None => {
                            m.insert(mm.to_vec(), *sc);
                            added += 1;
                        }
                        Some(_) if fl.nx => {}
                        Some(o) if (fl.gt && *sc <= o) || (fl.lt && *sc >= o) => {}
                        Some(o) => {
                            if o != *sc {
                                changed += 1;
                            }
                            m.insert(mm.to_vec(), *sc);
                        }
                    }
                }
                assert_eq!((got.added, got.changed), (added, changed));
            }
            ZOp::Incr(b, mm) => {
                let got = s.zincrby(k, ZAddFlags::default(), score(*b), mm).unwrap();
                let e = m.entry(mm.clone()).or_insert(0.0);
                *e += score(*b);
                assert_eq!(got, Some(*e));
            }
            ZOp::Rem(ms) => {
                let got = s.zrem(k, &refs(ms)).unwrap();
                let mut n = 0;
                for mm in ms {
                    n += u64::from(m.remove(mm).is_some());
                }
                assert_eq!(got, n);
            }
            ZOp::Pop(max, n) => {
                let got = s.zpop(k, *max, u64::from(*n)).unwrap();
                let mut v = sorted(&m);
                if *max {
                    v.reverse();
                }
                v.truncate(*n as usize);
                for (mm, _) in &v {
                    m.remove(mm);
                }
                assert_eq!(got, v);
            }
            ZOp::Rank(mm, rev) => {
                let got = s.zrank(k, mm, *rev).unwrap();
                let v = sorted(&m);
                let want = v
                    .iter()
                    .position(|x| x.0 == *mm)
                    .map(|p| if *rev { v.len() - 1 - p } else { p } as u64);
                assert_eq!(got, want);
                assert_eq!(s.zscore(k, mm).unwrap(), m.get(mm).copied());
            }
            ZOp::ByRank(a, b, rev) => {
                let got = s
                    .zrange_by_rank(k, i64::from(*a), i64::from(*b), *rev)
                    .unwrap();
                let mut v = sorted(&m);
                if *rev {
                    v.reverse();
                }
                let want = v[model_range(i64::from(*a), i64::from(*b), v.len())].to_vec();
                assert_eq!(got, want);
            }
            ZOp::ByScore(a, ax, b, bx, rev, off, lim) => {
                let bound = |x: i8, ex: bool| {
                    if ex {
                        ScoreBound::Exclusive(score(x))
                    } else {
                        ScoreBound::Inclusive(score(x))
                    }
                };
                let (min, max) = (bound(*a, *ax), bound(*b, *bx));
                let inside = |sc: f64| {
                    (if *ax { sc > score(*a) } else { sc >= score(*a) })
                        && (if *bx { sc < score(*b) } else { sc <= score(*b) })
                };
                let v: Vec<(Vec<u8>, f64)> =
                    sorted(&m).into_iter().filter(|x| inside(x.1)).collect();
                assert_eq!(s.zcount(k, min, max).unwrap(), v.len() as u64);
                let want = window(v, *rev, *off, *lim);
                let got = s
                    .zrange_by_score(k, min, max, *rev, u64::from(*off), lim.map(u64::from))
                    .unwrap();
                assert_eq!(got, want);
            }
            ZOp::ByLex(a, b, rev, off, lim) => {
                let bound = lex;
                let inside = |mm: &Vec<u8>| {
                    let lo = match a {
                        None => true,
                        Some((x, true)) => mm > x,
                        Some((x, false)) => mm >= x,
                    };
                    let hi = match b {
                        None => true,
                        Some((x, true)) => mm < x,
                        Some((x, false)) => mm <= x,
                    };
                    lo && hi
                };
                let v: Vec<(Vec<u8>, f64)> = m
                    .iter()
                    .filter(|x| inside(x.0))
                    .map(|(x, y)| (x.clone(), *y))
                    .collect();
                assert_eq!(
                    s.zlexcount(k, bound(a, true), bound(b, false)).unwrap(),
                    v.len() as u64
                );
                let want = window(v, *rev, *off, *lim);
                let got = s
                    .zrange_by_lex(
                        k,
                        bound(a, true),
                        bound(b, false),
                        *rev,
                        u64::from(*off),
                        lim.map(u64::from),
                    )
                    .unwrap();
                assert_eq!(got, want);
            }
            ZOp::At(i) => {
                let got = s.member_at(k, u64::from(*i)).unwrap();
                let want = m
                    .iter()
                    .nth(*i as usize)
                    .map(|(x, y)| (x.clone(), y.to_le_bytes().to_vec()));
                assert_eq!(got, want);
            }
            ZOp::Scan(after, n) => {
                let (got, next) = s.zscan(k, after.as_deref(), *n as usize).unwrap();
                let rest: Vec<(Vec<u8>, f64)> = m
                    .iter()
                    .filter(|x| after.as_ref().is_none_or(|a| x.0 > a))
                    .map(|(a, b)| (a.clone(), *b))
                    .collect();
                let want: Vec<_> = rest.iter().take(*n as usize).cloned().collect();
                assert_eq!(got, want);
                assert_eq!(next.is_some(), rest.len() > *n as usize);
            }
        }
        s.check_collection(k)
            .unwrap_or_else(|e| panic!("after {op:?}: {e}"));
        assert_eq!(s.zcard(k).unwrap(), m.len() as u64);
    }
    assert_eq!(s.zrange_by_rank(k, 0, -1, false).unwrap(), sorted(&m));
    s.check_invariants().unwrap();
}

// ---------------------------------------------------------------- sets and hashes

#[derive(Debug, Clone)]
enum KOp {
    Set(Vec<(Vec<u8>, Vec<u8>)>),
    Rem(Vec<Vec<u8>>),
    Get(Vec<u8>),
    Scan(u8),
    At(u8),
}

fn k_op() -> impl Strategy<Value = KOp> {
    prop_oneof![
        5 => prop::collection::vec((member(), member()), 1..10).prop_map(KOp::Set),
        3 => prop::collection::vec(member(), 1..8).prop_map(KOp::Rem),
        2 => member().prop_map(KOp::Get),
        1 => (1u8..9).prop_map(KOp::Scan),
        1 => (0u8..40).prop_map(KOp::At),
    ]
}

/// A whole scan in steps of `n`, members changing meanwhile: every member present throughout
/// comes back once.
fn full_scan(s: &mut Store, k: &[u8], hash: bool, n: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    let mut step = 0u32;
    loop {
        let (items, next) = if hash {
            let (i, c) = s.hscan(k, cursor.as_deref(), n).unwrap();
            (i.into_iter().map(|x| x.0).collect::<Vec<_>>(), c)
        } else {
            s.sscan(k, cursor.as_deref(), n).unwrap()
        };
        out.extend(items);
        // A change between steps: a member that comes and goes, another that stays.
        step += 1;
        let churn = format!("~churn{}", step % 3).into_bytes();
        if hash {
            s.hset(k, &[(churn.as_slice(), b"x".as_slice())]).unwrap();
            s.hdel(k, &[churn.as_slice()]).unwrap();
        } else {
            s.sadd(k, &[churn.as_slice()]).unwrap();
            s.srem(k, &[churn.as_slice()]).unwrap();
        }
        match next {
            Some(c) => cursor = Some(c),
            None => return out,
        }
    }
}

fn run_keyed(s: &mut Store, ops: &[KOp], hash: bool) {
    let k: &[u8] = if hash { b"hash" } else { b"set" };
    let mut m: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for op in ops {
        match op {
            KOp::Set(pairs) => {
                let got = if hash {
                    let p: Vec<(&[u8], &[u8])> = pairs
                        .iter()
                        .map(|(a, b)| (a.as_slice(), b.as_slice()))
                        .collect();
                    s.hset(k, &p).unwrap()
                } else {
                    let ms: Vec<Vec<u8>> = pairs.iter().map(|p| p.0.clone()).collect();
                    s.sadd(k, &refs(&ms)).unwrap()
                };
                let mut added = 0;
                for (a, b) in pairs {
                    let v = if hash { b.clone() } else { Vec::new() };
                    added += u64::from(m.insert(a.clone(), v).is_none());
                }
                assert_eq!(got, added);
            }
            KOp::Rem(ms) => {
                let got = if hash {
                    s.hdel(k, &refs(ms)).unwrap()
                } else {
                    s.srem(k, &refs(ms)).unwrap()
                };
                let mut n = 0;
                for mm in ms {
                    n += u64::from(m.remove(mm).is_some());
                }
                assert_eq!(got, n);
            }
            KOp::Get(mm) => {
                if hash {
                    assert_eq!(s.hget(k, mm).unwrap(), m.get(mm).cloned());
                } else {
                    assert_eq!(s.sismember(k, mm).unwrap(), m.contains_key(mm));
                }
            }
            KOp::At(i) => {
                let want = m
                    .iter()
                    .nth(*i as usize)
                    .map(|(a, b)| (a.clone(), b.clone()));
                assert_eq!(s.member_at(k, u64::from(*i)).unwrap(), want);
            }
            KOp::Scan(n) => {
                let got: BTreeSet<Vec<u8>> =
                    full_scan(s, k, hash, *n as usize).into_iter().collect();
                let want: BTreeSet<Vec<u8>> = m.keys().cloned().collect();
                assert_eq!(got, want);
            }
        }
        s.check_collection(k)
            .unwrap_or_else(|e| panic!("after {op:?}: {e}"));
        let len = if hash {
            s.hlen(k).unwrap()
        } else {
            s.scard(k).unwrap()
        };
        assert_eq!(len, m.len() as u64);
    }
    s.check_invariants().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    // Each run of lists, sorted sets and sets twice: each call written back as it returns, then
    // with write-back, every call inside one long batch (reads see the changes not yet written,
    // and the check at the end, which writes back, finds the chunks exact).
    #[test]
    fn lists_match_a_deque(ops in prop::collection::vec(list_op(), 1..80)) {
        run_list(&mut small_chunks(64), &ops);
        run_list(&mut write_back_store(64), &ops);
    }

    #[test]
    fn sorted_sets_match_a_map(ops in prop::collection::vec(z_op(), 1..80)) {
        run_zset(&mut small_chunks(64), &ops);
        run_zset(&mut write_back_store(64), &ops);
    }

    #[test]
    fn sets_match_a_set(ops in prop::collection::vec(k_op(), 1..60)) {
        run_keyed(&mut small_chunks(64), &ops, false);
        run_keyed(&mut write_back_store(64), &ops, false);
    }

    #[test]
    fn hashes_match_a_map(ops in prop::collection::vec(k_op(), 1..60)) {
        run_keyed(&mut small_chunks(64), &ops, true);
    }
}

#[test]
fn collections_are_typed_and_their_parts_are_invisible() {
    let mut s = small_chunks(64);
    s.put(b"str", Kind::String, b"v", None).unwrap();
    let wrong = s.list_push(b"str", ListEnd::Left, &[b"x"]);
    assert!(
        matches!(wrong, Err(StoreError::WrongType { held: "string" })),
        "{wrong:?}"
    );
    let members: Vec<Vec<u8>> = (0..200)
        .map(|i| format!("member-{i:04}").into_bytes())
        .collect();
    s.sadd(b"set", &refs(&members)).unwrap();
    assert!(matches!(
        s.zcard(b"set"),
        Err(StoreError::WrongType { held: "set" })
    ));
    assert_eq!(s.len(), 2, "a collection is one key whatever its chunks");
    let scanned = s.scan(b"", 1000).unwrap();
    assert_eq!(
        scanned.iter().map(|i| i.key.as_slice()).collect::<Vec<_>>(),
        vec![&b"set"[..], b"str"]
    );
    assert_eq!(s.get(b"set").unwrap().unwrap().kind, Kind::Set);
    // The reserved prefix is not a user key.
    assert!(matches!(
        s.put(b"\xff\x00\xffCx", Kind::String, b"v", None),
        Err(StoreError::Config(_))
    ));
    // A string written over a collection takes its parts with it.
    s.put(b"set", Kind::String, b"now a string", None).unwrap();
    s.check_collection(b"set").unwrap();
    assert_eq!(
        s.scard(b"str")
            .map_err(|e| e.to_string())
            .unwrap_err()
            .split(' ')
            .next(),
        Some("WRONGTYPE")
    );
    s.check_invariants().unwrap();
    assert_eq!(s.stats().keys, 2);
}

#[test]
fn expiry_of_the_root_removes_the_whole_collection() {
    let mut s = small_chunks(64);
    let members: Vec<Vec<u8>> = (0..300).map(|i| format!("m{i}").into_bytes()).collect();
    s.list_push(b"l", ListEnd::Right, &refs(&members)).unwrap();
    assert!(s.set_expiry(b"l", Some(u64::MAX / 2)).unwrap());
    assert_eq!(s.list_len(b"l").unwrap(), 300, "an expiry keeps the parts");
    s.check_collection(b"l").unwrap();
    assert!(s.set_expiry(b"l", Some(1)).unwrap());
    assert_eq!(s.list_len(b"l").unwrap(), 0);
    s.check_collection(b"l").unwrap();
    assert_eq!(s.stats().keys, 0);
    s.check_invariants().unwrap();
}

// ---------------------------------------------------------------- tiering

#[test]
fn collections_larger_than_dram_keep_their_cold_chunks_on_nvme_and_stay_correct() {
    let p = temp("nvme");
    let mut s = over_nvme(&p, Durability::None);
    // A sorted set first, then a list twice the DRAM budget that pushes it down.
    let mut z = BTreeMap::new();
    for batch in 0..6u32 {
        let members: Vec<(f64, Vec<u8>)> = (0..500u32)
            .map(|i| {
                let n = batch * 500 + i;
                (
                    f64::from(n.wrapping_mul(7919) % 1000),
                    format!("{n:06}-{}", "z".repeat(1000)).into_bytes(),
                )
            })
            .collect();
        let list: Vec<(f64, &[u8])> = members.iter().map(|(s, m)| (*s, m.as_slice())).collect();
        s.zadd(b"z", ZAddFlags::default(), &list).unwrap();
        for (sc, m) in members {
            z.insert(m, sc);
        }
    }
    let mut l = Vec::new();
    for batch in 0..100u32 {
        let members: Vec<Vec<u8>> = (0..500u32)
            .map(|i| format!("{:07}{}", batch * 500 + i, "l".repeat(400)).into_bytes())
            .collect();
        s.list_push(b"l", ListEnd::Right, &refs(&members)).unwrap();
        l.extend(members);
        s.tick().unwrap();
    }
    let stats = s.stats();
    let nvme = stats.tiers.iter().find(|t| t.tier == "nvme").unwrap();
    assert!(nvme.objects > 100, "cold chunks went to NVMe: {nvme:?}");
    assert_eq!(stats.keys, 2);
    // The list's parts are in DRAM and on NVMe (OBJECT TIER's answer), found from the index.
    assert_eq!(s.tier_of(b"l"), Some("mixed"));
    assert_eq!(s.tier_of(b"nope"), None);
    s.check_invariants().unwrap();
    let hits_before = nvme_tier(&s).hits;
    assert_eq!(s.zrange_by_rank(b"z", 0, -1, false).unwrap(), sorted(&z));
    assert_eq!(s.list_range(b"l", 0, -1).unwrap(), l);
    let hits_after = nvme_tier(&s).hits;
    assert!(hits_after > hits_before, "the reads went to NVMe");
    // Point operations deep in the list and set, with chunks coming back from NVMe.
    for i in (0..l.len()).step_by(4999) {
        assert_eq!(s.list_index(b"l", i as i64).unwrap().as_ref(), Some(&l[i]));
        assert!(s.list_set(b"l", i as i64, b"changed").unwrap().unwrap());
        l[i] = b"changed".to_vec();
    }
    assert_eq!(s.list_range(b"l", 0, -1).unwrap(), l);
    s.check_collection(b"l").unwrap();
    s.check_collection(b"z").unwrap();
    s.check_invariants().unwrap();
}

// ---------------------------------------------------------------- recovery

fn durable(p: &std::path::Path, chunk: usize) -> Store {
    durable_builder(p, chunk).build().unwrap()
}

/// What the test keeps of each collection, to compare after a restart.
#[derive(Default, Clone, PartialEq)]
struct Model {
    list: Vec<Vec<u8>>,
    zset: BTreeMap<Vec<u8>, f64>,
    set: BTreeSet<Vec<u8>>,
    hash: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// Sizes only: a failed comparison of whole models would print megabytes.
impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Model {{ list: {}, zset: {}, set: {}, hash: {} }}",
            self.list.len(),
            self.zset.len(),
            self.set.len(),
            self.hash.len()
        )
    }
}

fn change(s: &mut Store, m: &mut Model, round: u32) {
    let items: Vec<Vec<u8>> = (0..40)
        .map(|i| format!("r{round}-{i}").into_bytes())
        .collect();
    s.list_push(b"list", ListEnd::Right, &refs(&items)).unwrap();
    m.list.extend(items.iter().cloned());
    let popped = s.list_pop(b"list", ListEnd::Left, 7).unwrap().unwrap();
    assert_eq!(popped, m.list.drain(..7).collect::<Vec<_>>());
    let zs: Vec<(f64, &[u8])> = items
        .iter()
        .enumerate()
        .map(|(i, x)| ((i % 9) as f64, x.as_slice()))
        .collect();
    s.zadd(b"zset", ZAddFlags::default(), &zs).unwrap();
    for (sc, x) in &zs {
        m.zset.insert(x.to_vec(), *sc);
    }
    s.sadd(b"set", &refs(&items)).unwrap();
    m.set.extend(items.iter().cloned());
    let gone: Vec<Vec<u8>> = items.iter().step_by(3).cloned().collect();
    s.zrem(b"zset", &refs(&gone)).unwrap();
    s.srem(b"set", &refs(&gone)).unwrap();
    for g in &gone {
        m.zset.remove(g);
        m.set.remove(g);
    }
    let pairs: Vec<(&[u8], &[u8])> = items
        .iter()
        .map(|x| (x.as_slice(), b"v".as_slice()))
        .collect();
    s.hset(b"hash", &pairs).unwrap();
    for x in &items {
        m.hash.insert(x.clone(), b"v".to_vec());
    }
}

fn read_back(s: &mut Store) -> Model {
    let mut m = Model {
        list: s.list_range(b"list", 0, -1).unwrap(),
        zset: s
            .zrange_by_rank(b"zset", 0, -1, false)
            .unwrap()
            .into_iter()
            .collect(),
        ..Model::default()
    };
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        let (items, next) = s.sscan(b"set", cursor.as_deref(), 50).unwrap();
        m.set.extend(items);
        let Some(c) = next else { break };
        cursor = Some(c);
    }
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        let (items, next) = s.hscan(b"hash", cursor.as_deref(), 50).unwrap();
        m.hash.extend(items);
        let Some(c) = next else { break };
        cursor = Some(c);
    }
    for k in [&b"list"[..], b"zset", b"set", b"hash"] {
        s.check_collection(k)
            .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(k)));
    }
    s.check_invariants().unwrap();
    m
}

/// A [`durable`] store in `p` (256-byte chunks) after the [`change`]s of `rounds`, each
/// committed with `commit_each`; and the model of them.
fn changed(p: &std::path::Path, rounds: std::ops::Range<u32>, commit_each: bool) -> (Store, Model) {
    let mut m = Model::default();
    let mut s = durable(p, 256);
    for round in rounds {
        change(&mut s, &mut m, round);
        if commit_each {
            s.commit().unwrap();
        }
    }
    (s, m)
}

#[test]
fn collections_recover_exactly_after_close_and_after_a_crash() {
    let p = temp("nvme");
    let (s, mut m) = changed(&p, 0..10, true);
    s.close().unwrap();
    let mut s = durable(&p, 256);
    assert_eq!(s.recovery().chunks_dropped, 0);
    assert_eq!(s.len(), 4);
    assert_eq!(read_back(&mut s), m);
    for round in 10..20 {
        change(&mut s, &mut m, round);
        s.commit().unwrap();
    }
    // Dropped without close: a crash after the last commit.
    drop(s);
    let mut s = durable(&p, 256);
    assert_eq!(s.recovery().chunks_dropped, 0, "every change was whole");
    assert_eq!(s.len(), 4);
    assert_eq!(read_back(&mut s), m);
    // A deleted collection stays deleted, its chunks with it.
    assert!(s.delete(b"zset").unwrap());
    s.commit().unwrap();
    drop(s);
    let mut s = durable(&p, 256);
    m.zset.clear();
    assert_eq!(s.len(), 3);
    assert_eq!(read_back(&mut s), m);
}

#[test]
fn a_crash_in_the_middle_of_a_split_leaves_the_old_or_the_new_collection_whole() {
    let p = temp("nvme");
    let (mut s, mut m) = changed(&p, 0..5, false);
    s.commit().unwrap();
    // `s` committed, dropped without close (a crash after the commit) and opened again: some
    // chunk (`dropped`) is dropped, and the collections are `m` (`whole`).
    let crash = |mut s: Store, m: &Model, dropped: &str, whole: &str| {
        s.commit().unwrap();
        drop(s);
        let mut s = durable(&p, 256);
        assert!(s.recovery().chunks_dropped >= 1, "{dropped}");
        assert_eq!(read_back(&mut s), *m, "{whole}");
        s
    };
    let chunks_before = s.collection_chunk_writes();
    // The second chunk write of the next change fails: the first is on the log, its root is not.
    s.fail_chunk_io_after(Some(1), None);
    let many: Vec<(f64, Vec<u8>)> = (0..200)
        .map(|i| (f64::from(i), format!("new{i}").into_bytes()))
        .collect();
    let list: Vec<(f64, &[u8])> = many.iter().map(|(a, b)| (*a, b.as_slice())).collect();
    s.zadd(b"zset", ZAddFlags::default(), &list).unwrap_err();
    assert_eq!(s.collection_chunk_writes(), chunks_before + 1);
    let mut s = crash(
        s,
        &m,
        "the chunk written for the lost root is dropped",
        "the old collection, whole",
    );

    // Now the root is written and the replaced chunks' deletes are lost.
    s.fail_chunk_io_after(None, Some(0));
    s.zadd(b"zset", ZAddFlags::default(), &list).unwrap_err();
    for (sc, x) in &many {
        m.zset.insert(x.clone(), *sc);
    }
    crash(
        s,
        &m,
        "the replaced chunks are dropped",
        "the new collection, whole",
    );
}

/// Where `needle` occurs in the file.
fn find(path: &std::path::Path, needle: &[u8]) -> usize {
    let bytes = std::fs::read(path).unwrap();
    bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{:?} not in the file", String::from_utf8_lossy(needle)))
}

#[test]
fn a_damaged_chunk_refuses_the_start_like_any_record() {
    let p = temp("nvme");
    let mut s = durable(&p, 256);
    let items: Vec<Vec<u8>> = (0..300)
        .map(|i| format!("member{i:05}").into_bytes())
        .collect();
    s.sadd(b"set", &refs(&items)).unwrap();
    s.commit().unwrap();
    s.close().unwrap();
    // The last record holding the member: a chunk (or the root) of the live set.
    let needle = b"member00123";
    let bytes = std::fs::read(&*p).unwrap();
    let at = bytes
        .windows(needle.len())
        .rposition(|w| w == needle)
        .unwrap();
    assert!(at >= find(&p, needle));
    let mut bytes = bytes;
    bytes[at] ^= 0xa5;
    std::fs::write(&*p, &bytes).unwrap();
    let refused = durable_builder(&p, 256).build();
    assert!(
        matches!(refused, Err(StoreError::Damaged(_))),
        "{refused:?}"
    );
}

// ---------------------------------------------------------------- cost

/// Chunk writes of one operation.
fn writes(s: &mut Store, op: impl FnOnce(&mut Store)) -> u64 {
    let before = s.collection_chunk_writes();
    op(s);
    s.collection_chunk_writes() - before
}

#[test]
fn a_point_change_to_a_hundred_thousand_members_writes_a_few_chunks_not_the_collection() {
    let mut s = in_memory(256 << 20);
    let n = 100_000u32;
    for batch in 0..(n / 1000) {
        let members: Vec<Vec<u8>> = (0..1000)
            .map(|i| format!("member:{:08}", batch * 1000 + i).into_bytes())
            .collect();
        let list: Vec<(f64, &[u8])> = members
            .iter()
            .enumerate()
            .map(|(i, m)| ((i * 7 % 1000) as f64, m.as_slice()))
            .collect();
        s.zadd(b"z", ZAddFlags::default(), &list).unwrap();
        s.list_push(b"l", ListEnd::Right, &refs(&members)).unwrap();
    }
    assert_eq!(s.zcard(b"z").unwrap(), u64::from(n));
    assert_eq!(s.list_len(b"l").unwrap(), u64::from(n));
    s.check_collection(b"z").unwrap();
    s.check_collection(b"l").unwrap();
    // A whole rewrite would be hundreds of 4 KiB chunks (100,000 members of ~30 bytes); a
    // tree of this size is 3 levels, so a point change writes a path per tree touched.
    let zadd = writes(&mut s, |s| {
        s.zadd(b"z", ZAddFlags::default(), &[(0.5, b"member:00050000")])
            .unwrap();
    });
    let zadd_new = writes(&mut s, |s| {
        s.zadd(b"z", ZAddFlags::default(), &[(3.0, b"a-new-member")])
            .unwrap();
    });
    let zrem = writes(&mut s, |s| {
        s.zrem(b"z", &[b"member:00070000"]).unwrap();
    });
    let nothing = writes(&mut s, |s| {
        assert_eq!(s.zrem(b"z", &[b"not-a-member"]).unwrap(), 0);
        let before = s.zscore(b"z", b"member:00000001").unwrap().unwrap();
        let flags = ZAddFlags {
            nx: true,
            ..ZAddFlags::default()
        };
        s.zadd(b"z", flags, &[(before + 1.0, b"member:00000001")])
            .unwrap();
    });
    assert_eq!(nothing, 0, "a change that changes nothing writes nothing");
    let zrank = writes(&mut s, |s| {
        assert!(s.zrank(b"z", b"member:00020000", false).unwrap().is_some());
    });
    let lpush = writes(&mut s, |s| {
        s.list_push(b"l", ListEnd::Left, &[b"x"]).unwrap();
    });
    let rpop = writes(&mut s, |s| {
        s.list_pop(b"l", ListEnd::Right, 1).unwrap();
    });
    let lset = writes(&mut s, |s| {
        assert!(s.list_set(b"l", 50_000, b"y").unwrap().unwrap());
    });
    let linsert_at = writes(&mut s, |s| {
        assert_eq!(
            s.list_index(b"l", 75_000).unwrap().unwrap(),
            format!("member:{:08}", 74_999).into_bytes()
        );
    });
    for (what, w, most) in [
        ("zadd (score change: two trees, two paths)", zadd, 9),
        ("zadd of a new member", zadd_new, 9),
        ("zrem", zrem, 9),
        ("zrank", zrank, 0),
        ("lpush", lpush, 4),
        ("rpop", rpop, 4),
        ("lset", lset, 4),
        ("lindex", linsert_at, 0),
    ] {
        assert!(w <= most, "{what} wrote {w} chunks");
    }
    assert!(
        zadd >= 1 && lset >= 1,
        "changes below the top write chunks: {zadd} {lset}"
    );
    s.check_collection(b"z").unwrap();
    s.check_collection(b"l").unwrap();
}

#[test]
fn the_reads_an_operation_needs_can_be_started_ahead() {
    let p = temp("nvme");
    let mut s = over_nvme(&p, Durability::EverySec);
    let members: Vec<Vec<u8>> = (0..20_000)
        .map(|i| format!("{i:08}{}", "m".repeat(200)).into_bytes())
        .collect();
    for c in members.chunks(1000) {
        s.list_push(b"l", ListEnd::Right, &refs(c)).unwrap();
        s.tick().unwrap();
    }
    s.close().unwrap();
    // After a restart everything is on NVMe: the root first, then one level at a time.
    let mut s = over_nvme(&p, Durability::EverySec);
    let probe = cxltier_store::CollectionProbe::Index(12_345);
    let mut rounds = 0;
    loop {
        let keys = s.collection_reads(b"l", probe);
        if keys.is_empty() {
            break;
        }
        assert_eq!(keys.len(), 1);
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        s.start_reads(&refs).unwrap();
        while s.reads_in_flight() > 0 {
            s.reap_reads(true).unwrap();
        }
        for k in &keys {
            assert!(!s.must_wait(k), "its read is done");
        }
        rounds += 1;
        assert!(rounds < 10, "one read per level");
    }
    assert!(
        rounds >= 2,
        "the root and at least one chunk were on NVMe: {rounds}"
    );
    let misses = nvme_reads(&s);
    assert_eq!(
        s.list_index(b"l", 12_345).unwrap().as_ref(),
        Some(&members[12_345])
    );
    let after = nvme_reads(&s);
    assert_eq!(
        after, misses,
        "the operation read nothing more from the device"
    );
}

#[test]
fn a_collection_copied_or_renamed_takes_its_parts_along() {
    let p = temp("nvme");
    let mut s = durable(&p, 256);
    let items: Vec<Vec<u8>> = (0..500).map(|i| format!("i{i:04}").into_bytes()).collect();
    s.list_push(b"a", ListEnd::Right, &refs(&items)).unwrap();
    s.sadd(b"target", &[b"x"]).unwrap();
    assert!(!s.copy_key(b"a", b"target", false).unwrap(), "no replace");
    assert!(s.copy_key(b"a", b"b", false).unwrap());
    assert!(s.rename(b"a", b"target", true).unwrap());
    s.list_push(b"b", ListEnd::Left, &[b"only in b"]).unwrap();
    assert_eq!(s.list_range(b"target", 0, -1).unwrap(), items);
    assert_eq!(s.list_range(b"b", 1, -1).unwrap(), items);
    assert_eq!(s.list_len(b"a").unwrap(), 0);
    for k in [&b"a"[..], b"b", b"target"] {
        s.check_collection(k).unwrap();
    }
    s.commit().unwrap();
    drop(s);
    let mut s = durable(&p, 256);
    assert_eq!(s.recovery().chunks_dropped, 0);
    assert_eq!(s.len(), 2);
    assert_eq!(s.list_range(b"target", 0, -1).unwrap(), items);
    assert_eq!(s.list_len(b"b").unwrap(), 501);
    for k in [&b"a"[..], b"b", b"target"] {
        s.check_collection(k).unwrap();
    }
    let check = cxltier_store::check_log(&p, cxltier_store::log::DEFAULT_SEGMENT_SIZE).unwrap();
    s.close().unwrap();
    assert_eq!(
        check.keys, 2,
        "chunks are not keys to the offline check either"
    );
}

/// A store of small objects (`cxltier serve --max-object 4K`, as the lab's RAS check starts it)
/// builds, and its collections split at half the largest object; a chunk size asked for that does
/// not fit is still refused.
#[test]
fn small_objects_shrink_the_default_chunk_and_collections_still_work() {
    let small_objects = || {
        StoreBuilder::new()
            .dram(16 << 20)
            .max_object(4096)
            .durability(Durability::None)
    };
    let mut s = small_objects()
        .build()
        .expect("a store of 4 KiB objects builds");
    let members: Vec<Vec<u8>> = (0..500u32)
        .map(|i| format!("m{i:05}").into_bytes())
        .collect();
    let refs: Vec<&[u8]> = members.iter().map(Vec::as_slice).collect();
    assert_eq!(s.list_push(b"l", ListEnd::Right, &refs).unwrap(), 500);
    assert_eq!(s.list_range(b"l", 0, -1).unwrap(), members);
    let refused = small_objects().collection_chunk_bytes(4096).build();
    assert!(refused.is_err());
}

#[test]
fn a_one_value_hash_made_chunked_keeps_its_fields_and_expiry_across_a_restart() {
    let p = temp("nvme");
    let far = now_ms() + 3_600_000;
    let fields: Vec<(Vec<u8>, Vec<u8>)> = (0..300)
        .map(|i| {
            (
                format!("field{i:05}").into_bytes(),
                format!("value{i}").into_bytes(),
            )
        })
        .collect();
    let pairs: Vec<(&[u8], &[u8])> = fields
        .iter()
        .map(|(f, v)| (f.as_slice(), v.as_slice()))
        .collect();
    {
        let mut s = durable(&p, 256);
        s.put(
            b"h",
            Kind::Hash,
            b"the server's one-value encoding",
            Some(far),
        )
        .unwrap();
        s.put(b"str", Kind::String, b"v", None).unwrap();
        // Only a one-value hash is turned into a chunked one.
        assert!(!s.hash_to_chunked(b"absent", &pairs).unwrap());
        assert!(!s.hash_to_chunked(b"str", &pairs).unwrap());
        assert!(!s.hash_to_chunked(b"h", &[]).unwrap());
        assert!(s.hash_to_chunked(b"h", &pairs).unwrap());
        assert_eq!(s.get(b"h").unwrap().unwrap().kind, Kind::ChunkedHash);
        assert!(!s.hash_to_chunked(b"h", &pairs).unwrap(), "already chunked");
        s.commit().unwrap();
        s.close().unwrap();
    }
    let mut s = durable(&p, 256);
    assert_eq!(s.recovery().chunks_dropped, 0);
    let root = s.get(b"h").unwrap().unwrap();
    assert_eq!(root.kind, Kind::ChunkedHash);
    assert_eq!(root.expires_at_ms, Some(far));
    assert_eq!(s.hlen(b"h").unwrap(), 300);
    assert_eq!(s.hget(b"h", b"field00123").unwrap().unwrap(), b"value123");
    s.check_collection(b"h").unwrap();
    s.check_invariants().unwrap();
}

/// `changes` moves exactly when the contents change (Redis's `server.dirty`, which decides
/// what is replicated), and `take_expired` hands over the user keys that expired, once.
#[test]
fn changes_count_real_changes_and_expired_keys_are_handed_over_once() {
    let mut s = small_chunks(4096);
    let c0 = s.changes();
    s.put(b"k", Kind::String, b"v", None).unwrap();
    assert!(s.changes() > c0);
    // Nothing changes: no count.
    let c1 = s.changes();
    assert!(!s.delete(b"absent").unwrap());
    s.srem(b"noset", &[b"a".as_slice()]).unwrap();
    s.sadd(b"set", &[b"a".as_slice()]).unwrap();
    let c2 = s.changes();
    assert!(c2 > c1);
    s.sadd(b"set", &[b"a".as_slice()]).unwrap();
    s.srem(b"set", &[b"zz".as_slice()]).unwrap();
    assert!(!s.set_expiry(b"absent", Some(u64::MAX)).unwrap());
    assert_eq!(
        s.changes(),
        c2,
        "adding a member present, removing one absent"
    );
    // Expiry is not a change, and is reported only when tracked.
    let soon = now_ms() + 40;
    s.put(b"e1", Kind::String, b"v", Some(soon)).unwrap();
    s.track_expired(true);
    s.put(b"e2", Kind::String, b"v", Some(soon)).unwrap();
    s.list_push(b"e3", ListEnd::Left, &[b"x".as_slice()])
        .unwrap();
    s.set_expiry(b"e3", Some(soon)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(60));
    let c3 = s.changes();
    assert!(!s.contains(b"e1"));
    assert!(!s.contains(b"e2"));
    assert!(s.get(b"e3").unwrap().is_none());
    assert_eq!(s.changes(), c3);
    assert_eq!(
        s.take_expired(),
        [b"e1".to_vec(), b"e2".to_vec(), b"e3".to_vec()]
    );
    assert!(s.take_expired().is_empty());
    s.track_expired(false);
    s.put(b"e4", Kind::String, b"v", Some(soon + 100)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(110));
    assert!(!s.contains(b"e4"));
    assert!(s.take_expired().is_empty());
}

// ---------------------------------------------------------------- write-back across a batch

/// [`durable`] with changed collections kept open across calls, as the server runs.
fn durable_write_back(p: &std::path::Path, chunk: usize) -> Store {
    durable_builder(p, chunk)
        .collection_write_back(true)
        .build()
        .unwrap()
}

/// Pushes and pops at the ends, most of the time: a batch of them changes its end leaves in
/// place until one fills or thins.
fn end_heavy_list_op() -> impl Strategy<Value = ListOp> {
    prop_oneof![
        4 => (any::<bool>(), prop::collection::vec(member(), 1..3)).prop_map(|(l, m)| ListOp::Push(l, m)),
        3 => (any::<bool>(), 1u8..4).prop_map(|(l, n)| ListOp::Pop(l, n)),
        1 => list_op(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    // Batches of many ops each (the end leaves changed where they lie, then split or merged
    // when one fills or thins), each batch written back, the store now and then closed or
    // dropped (a crash after its last commit) and opened again from its NVMe log: the list
    // stays the deque's, and its chunks are exact after every batch.
    #[test]
    fn lists_changed_in_batches_and_reopened_match_a_deque(
        ops in prop::collection::vec(end_heavy_list_op(), 1..400),
        batch in 1usize..60,
        restart_every in 1usize..5,
    ) {
        let p = temp("list-batches");
        let k: &[u8] = b"list";
        let mut m = VecDeque::new();
        let mut s = durable_write_back(&p, 64);
        for (i, ops) in ops.chunks(batch).enumerate() {
            run_list_ops(&mut s, ops, &mut m, false);
            if i % 2 == 0 {
                s.commit().unwrap();
            } else {
                s.end_batch();
            }
            s.check_collection(k).unwrap_or_else(|e| panic!("after batch {i}: {e}"));
            if i % restart_every == restart_every - 1 {
                if i % 2 == 0 {
                    drop(s);
                } else {
                    s.close().unwrap();
                }
                s = durable_write_back(&p, 64);
                assert_eq!(s.recovery().chunks_dropped, 0);
            }
            let all = s.list_range(k, 0, -1).unwrap();
            assert_eq!(all, m.iter().cloned().collect::<Vec<_>>(), "after batch {i}");
        }
        s.check_invariants().unwrap();
    }
}

fn members(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .collect()
}

/// A list of 400 members, written; then 50 pushes left open.
fn list_with_open_pushes(s: &mut Store) -> Vec<Vec<u8>> {
    let first = members("a", 400);
    s.list_push(b"l", ListEnd::Right, &refs(&first)).unwrap();
    s.end_batch();
    let writes = s.collection_chunk_writes();
    let more = members("b", 50);
    for m in &more {
        s.list_push(b"l", ListEnd::Left, &[m.as_slice()]).unwrap();
    }
    assert_eq!(s.collection_chunk_writes(), writes, "nothing written yet");
    assert!(s.collection_write_back_bytes().0 > 0);
    let mut want: Vec<Vec<u8>> = more.into_iter().rev().collect();
    want.extend(first);
    want
}

#[test]
fn write_back_writes_a_batch_of_pushes_once() {
    let mut s = write_back_store(256);
    list_with_open_pushes(&mut s);
    let writes = s.collection_chunk_writes();
    s.end_batch();
    let per_batch = s.collection_chunk_writes() - writes;
    // The front leaves the pushes filled (a 256-byte chunk holds about 20 of them) and the
    // nodes above them, once each: not a path per push.
    assert!(per_batch <= 16, "{per_batch} chunk writes for one batch");
    assert_eq!(s.collection_write_back_bytes(), (0, 0));
    s.check_collection(b"l").unwrap();
    // Without write-back every push writes its path.
    let mut t = small_chunks(256);
    t.list_push(b"l", ListEnd::Right, &refs(&members("a", 400)))
        .unwrap();
    let writes = t.collection_chunk_writes();
    for m in members("b", 50) {
        t.list_push(b"l", ListEnd::Left, &[m.as_slice()]).unwrap();
    }
    assert!(t.collection_chunk_writes() - writes >= 50);
}

#[test]
fn every_other_path_sees_the_changes_a_batch_has_not_written() {
    // Reads through the collection calls, and a scan (roots as stored).
    let mut s = write_back_store(256);
    let want = list_with_open_pushes(&mut s);
    assert_eq!(s.list_range(b"l", 0, -1).unwrap(), want);
    assert_eq!(s.list_len(b"l").unwrap(), want.len() as u64);
    let scanned = s.scan(b"", 10).unwrap();
    assert_eq!(scanned.len(), 1);
    assert_eq!(s.collection_write_back_bytes(), (0, 0), "the scan wrote it");
    s.check_collection(b"l").unwrap();

    // A get of the root (DUMP, OBJECT, MEMORY USAGE read it so).
    let mut s = write_back_store(256);
    list_with_open_pushes(&mut s);
    let before = s.peek(b"l").unwrap().value.to_vec();
    let root = s.get(b"l").unwrap().unwrap().value.to_vec();
    assert_ne!(root, before, "get wrote the new root back first");
    s.check_collection(b"l").unwrap();

    // Rename and copy carry every push, the parts with them.
    let mut s = write_back_store(256);
    let want = list_with_open_pushes(&mut s);
    assert!(s.copy_key(b"l", b"c", false).unwrap());
    assert!(s.rename(b"l", b"r", false).unwrap());
    assert_eq!(s.list_range(b"c", 0, -1).unwrap(), want);
    assert_eq!(s.list_range(b"r", 0, -1).unwrap(), want);
    for k in [&b"l"[..], b"c", b"r"] {
        s.check_collection(k).unwrap();
    }

    // A delete takes the open changes with it; a push after it starts a new list.
    let mut s = write_back_store(256);
    list_with_open_pushes(&mut s);
    assert!(s.delete(b"l").unwrap());
    assert_eq!(s.collection_write_back_bytes(), (0, 0));
    s.list_push(b"l", ListEnd::Left, &[b"x"]).unwrap();
    s.end_batch();
    assert_eq!(s.list_range(b"l", 0, -1).unwrap(), vec![b"x".to_vec()]);
    s.check_collection(b"l").unwrap();

    // An expiry set after the pushes stays (the write-back does not put the old one back),
    // and an expired list does not come back at the batch's end.
    let mut s = write_back_store(256);
    let want = list_with_open_pushes(&mut s);
    let at = now_ms() + 60_000;
    assert!(s.set_expiry(b"l", Some(at)).unwrap());
    s.list_push(b"l", ListEnd::Right, &[b"z"]).unwrap();
    s.end_batch();
    assert_eq!(s.key_info(b"l").unwrap().expires_at_ms, Some(at));
    assert_eq!(s.list_len(b"l").unwrap(), want.len() as u64 + 1);
    assert!(s.set_expiry(b"l", Some(now_ms() + 30)).unwrap());
    s.list_push(b"l", ListEnd::Right, &[b"y"]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(60));
    s.list_push(b"l", ListEnd::Right, &[b"after"]).unwrap();
    s.end_batch();
    assert_eq!(s.list_range(b"l", 0, -1).unwrap(), vec![b"after".to_vec()]);
    s.check_collection(b"l").unwrap();

    // A put over the key replaces the list, parts and open changes alike.
    let mut s = write_back_store(256);
    list_with_open_pushes(&mut s);
    s.put(b"l", Kind::String, b"v", None).unwrap();
    s.end_batch();
    assert_eq!(s.get(b"l").unwrap().unwrap().value, b"v");
    s.check_collection(b"l").unwrap();

    // Turning write-back off writes back what is open; later changes are written at once.
    let mut s = write_back_store(256);
    let want = list_with_open_pushes(&mut s);
    s.set_collection_write_back(false).unwrap();
    assert_eq!(s.collection_write_back_bytes(), (0, 0));
    s.check_collection(b"l").unwrap();
    let writes = s.collection_chunk_writes();
    s.list_push(b"l", ListEnd::Left, &[b"w"]).unwrap();
    assert!(s.collection_chunk_writes() > writes);
    assert_eq!(s.list_len(b"l").unwrap(), want.len() as u64 + 1);

    // Flushing every key forgets them.
    let mut s = write_back_store(256);
    list_with_open_pushes(&mut s);
    s.flush_all().unwrap();
    s.end_batch();
    assert_eq!(s.len(), 0);
    s.check_invariants().unwrap();
}

#[test]
fn a_commit_writes_the_batch_and_a_crash_after_it_loses_no_push() {
    let p = temp("nvme");
    let durable_wb = |p: &std::path::Path| durable_write_back(p, 256);
    let mut m = Model::default();
    let mut s = durable_wb(&p);
    for round in 0..6 {
        change(&mut s, &mut m, round);
        if round % 2 == 1 {
            // Two rounds per batch: the commit writes them back before its sync.
            s.commit().unwrap();
            assert_eq!(s.collection_write_back_bytes(), (0, 0));
        }
    }
    // Dropped without close or end_batch: a crash after the last commit.
    drop(s);
    let mut s = durable_wb(&p);
    assert_eq!(s.recovery().chunks_dropped, 0, "every batch was whole");
    assert_eq!(s.len(), 4);
    assert_eq!(read_back(&mut s), m);
}

#[test]
fn the_open_changes_are_bounded() {
    let mut s = write_back_store(4096);
    // Members long enough that each push changes a different leaf of many.
    let big: Vec<Vec<u8>> = (0..3000)
        .map(|i| format!("{i:06}{}", "x".repeat(900)).into_bytes())
        .collect();
    s.sadd(b"s", &refs(&big)).unwrap();
    s.end_batch();
    let mut most = 0;
    for (i, m) in big.iter().enumerate() {
        // Each member grows: its leaf is changed and kept open.
        let mut longer = m.clone();
        longer.extend_from_slice(b"-2");
        s.sadd(b"s", &[longer.as_slice()]).unwrap();
        most = most.max(s.collection_write_back_bytes().0);
        if i % 500 == 0 {
            assert!(s.collection_write_back_bytes().1 <= 1);
        }
    }
    assert!(most > 0);
    assert!(
        most <= cxltier_store::OPEN_BYTES_MAX,
        "{most} bytes open, over the bound"
    );
    s.end_batch();
    assert_eq!(s.scard(b"s").unwrap(), 6000);
    s.check_collection(b"s").unwrap();
    // Many collections: no more than the bound stay open.
    for i in 0..(cxltier_store::OPEN_COLLECTIONS_MAX + 10) {
        let k = format!("k{i}");
        s.sadd(k.as_bytes(), &[b"a"]).unwrap();
        s.sadd(k.as_bytes(), &[b"b"]).unwrap();
        assert!(s.collection_write_back_bytes().1 <= cxltier_store::OPEN_COLLECTIONS_MAX);
    }
}
