//! Sorted sets: two counted trees, members in member order with their scores, and score keys
//! (the score's bytes, then the member) in score order; ranges by rank, score and member.

use super::node::{Node, Root};
use super::tree::{entry_bytes, Seek, Tx};
use super::{
    above_score, norm_range, score_bytes, score_from_bytes, score_key, value_score, LexBound,
    ScanPage, ScoreBound, ZAddFlags, ZAddOutcome,
};
use crate::{Kind, Result, Store, StoreError};

impl Store {
    // ---- sorted sets ----

    /// `ZADD` (with `NX`/`XX`/`GT`/`LT`); a NaN score is refused before anything changes.
    pub fn zadd(
        &mut self,
        key: &[u8],
        flags: ZAddFlags,
        members: &[(f64, &[u8])],
    ) -> Result<ZAddOutcome> {
        if members.iter().any(|m| m.0.is_nan()) {
            return Err(StoreError::Config("a score is not a number (NaN)".into()));
        }
        if members.is_empty() {
            return Ok(ZAddOutcome::default());
        }
        let mut out = ZAddOutcome::default();
        self.coll_write(key, Kind::ZSet, !flags.xx, |tx, root| {
            for &(s, m) in members {
                match zadd_one(tx, root, m, s, flags)? {
                    Some(None) => out.added += 1,
                    Some(Some(_)) => out.changed += 1,
                    None => {}
                }
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// `ZINCRBY` / `ZADD INCR`: the new score, or `None` when the flags stopped it.
    pub fn zincrby(
        &mut self,
        key: &[u8],
        flags: ZAddFlags,
        by: f64,
        member: &[u8],
    ) -> Result<Option<f64>> {
        if by.is_nan() {
            return Err(StoreError::Config(
                "the increment is not a number (NaN)".into(),
            ));
        }
        Ok(self
            .coll_write(key, Kind::ZSet, !flags.xx, |tx, root| {
                let old = zscore_in(tx, root, member)?;
                if (old.is_none() && flags.xx) || (old.is_some() && flags.nx) {
                    return Ok(None);
                }
                let s = old.unwrap_or(0.0) + by;
                if s.is_nan() {
                    return Err(StoreError::Config(
                        "resulting score is not a number (NaN)".into(),
                    ));
                }
                if let Some(o) = old {
                    if (flags.gt && s <= o) || (flags.lt && s >= o) {
                        return Ok(None);
                    }
                }
                zset_score(tx, root, member, s, old)?;
                Ok(Some(s))
            })?
            .flatten())
    }

    /// `ZREM`: members removed.
    pub fn zrem(&mut self, key: &[u8], members: &[&[u8]]) -> Result<u64> {
        Ok(self
            .coll_write(key, Kind::ZSet, false, |tx, root| {
                let mut n = 0;
                for &m in members {
                    let old = tx.modify(&mut root.tops[0], Seek::Key(m), &mut |e, pos, ch| {
                        ch.changed = pos.is_ok();
                        pos.ok()
                            .and_then(|p| e.remove(p))
                            .map(|x| value_score(&x.1))
                    })?;
                    if let Some(o) = old {
                        let sk = score_key(o, m);
                        tx.modify(&mut root.tops[1], Seek::Key(&sk), &mut |e, pos, _| {
                            if let Ok(p) = pos {
                                e.remove(p);
                            }
                        })?;
                        n += 1;
                    }
                }
                Ok(n)
            })?
            .unwrap_or(0))
    }

    /// A read of the sorted set under `key`: `read`'s answer, or the empty one (0, none, no
    /// members) when the key is absent.
    fn zread<R: Default>(
        &mut self,
        key: &[u8],
        read: impl FnOnce(&mut Tx<'_>, &Root) -> Result<R>,
    ) -> Result<R> {
        Ok(self.coll_read(key, Kind::ZSet, read)?.unwrap_or_default())
    }

    /// `ZSCORE`.
    pub fn zscore(&mut self, key: &[u8], member: &[u8]) -> Result<Option<f64>> {
        self.zread(key, |tx, r| {
            Ok(tx
                .find(&r.tops[0], Seek::Key(member))?
                .map(|e| value_score(&e.1)))
        })
    }

    /// `ZCARD` (0 when absent).
    pub fn zcard(&mut self, key: &[u8]) -> Result<u64> {
        self.coll_len(key, Kind::ZSet)
    }

    /// `ZRANK` / `ZREVRANK`.
    pub fn zrank(&mut self, key: &[u8], member: &[u8], rev: bool) -> Result<Option<u64>> {
        self.zread(key, |tx, r| {
            let Some(e) = tx.find(&r.tops[0], Seek::Key(member))? else {
                return Ok(None);
            };
            let below = tx.count_below(&r.tops[1], &score_key(value_score(&e.1), member), false)?;
            let len = r.tops[1].count();
            Ok(Some(if rev { len - 1 - below } else { below }))
        })
    }

    /// `ZRANGE start stop [REV]` by rank: members with their scores.
    pub fn zrange_by_rank(
        &mut self,
        key: &[u8],
        start: i64,
        stop: i64,
        rev: bool,
    ) -> Result<Vec<(Vec<u8>, f64)>> {
        self.zread(key, |tx, r| {
            let len = r.tops[1].count();
            let Some((a, b)) = norm_range(start, stop, len) else {
                return Ok(Vec::new());
            };
            let n = b - a + 1;
            let from = if rev { len - 1 - a } else { a };
            zwalk(tx, &r.tops[1], from, rev, n)
        })
    }

    /// Positions `[lo, hi)` of the score tree that lie within `min..max`.
    fn zspan(tx: &mut Tx<'_>, top: &Node, min: ScoreBound, max: ScoreBound) -> Result<(u64, u64)> {
        let lo = match min {
            ScoreBound::Inclusive(s) => tx.count_below(top, &score_bytes(s), false)?,
            ScoreBound::Exclusive(s) => tx.count_below(top, &above_score(s), false)?,
        };
        let hi = match max {
            ScoreBound::Inclusive(s) => tx.count_below(top, &above_score(s), false)?,
            ScoreBound::Exclusive(s) => tx.count_below(top, &score_bytes(s), false)?,
        };
        Ok((lo, hi.max(lo)))
    }

    /// `ZRANGEBYSCORE` (and `ZRANGE ... BYSCORE [REV] [LIMIT offset count]`): members with scores
    /// within `min..max`, lowest first (highest first with `rev`), skipping `offset`, at most
    /// `limit`. Reads the paths to the range's ends and the leaves it returns.
    pub fn zrange_by_score(
        &mut self,
        key: &[u8],
        min: ScoreBound,
        max: ScoreBound,
        rev: bool,
        offset: u64,
        limit: Option<u64>,
    ) -> Result<Vec<(Vec<u8>, f64)>> {
        self.zread(key, |tx, r| {
            let (lo, hi) = Self::zspan(tx, &r.tops[1], min, max)?;
            let Some((from, n)) = window(lo, hi, rev, offset, limit) else {
                return Ok(Vec::new());
            };
            zwalk(tx, &r.tops[1], from, rev, n)
        })
    }

    /// Positions `[lo, hi)` of the member tree within `min..max`.
    fn lexspan(
        tx: &mut Tx<'_>,
        top: &Node,
        min: LexBound<'_>,
        max: LexBound<'_>,
    ) -> Result<(u64, u64)> {
        let at = |tx: &mut Tx<'_>, b: LexBound<'_>, upper: bool| -> Result<u64> {
            Ok(match b {
                LexBound::Min => 0,
                LexBound::Max => top.count(),
                LexBound::Inclusive(m) => tx.count_below(top, m, upper)?,
                LexBound::Exclusive(m) => tx.count_below(top, m, !upper)?,
            })
        };
        let lo = at(tx, min, false)?;
        let hi = at(tx, max, true)?;
        Ok((lo, hi.max(lo)))
    }

    /// `ZRANGEBYLEX` (and `ZRANGE ... BYLEX [REV] [LIMIT]`): members within `min..max` in member
    /// order (Redis defines it for members of one score, where the two orders agree), with their
    /// scores.
    pub fn zrange_by_lex(
        &mut self,
        key: &[u8],
        min: LexBound<'_>,
        max: LexBound<'_>,
        rev: bool,
        offset: u64,
        limit: Option<u64>,
    ) -> Result<Vec<(Vec<u8>, f64)>> {
        self.zread(key, |tx, r| {
            let (lo, hi) = Self::lexspan(tx, &r.tops[0], min, max)?;
            let Some((from, n)) = window(lo, hi, rev, offset, limit) else {
                return Ok(Vec::new());
            };
            let mut out = Vec::with_capacity(n.min(1024) as usize);
            tx.walk(&r.tops[0], from, rev, &mut |k, v| {
                let e = (k, v);
                out.push((e.0.to_vec(), value_score(e.1)));
                (out.len() as u64) < n
            })?;
            Ok(out)
        })
    }

    /// `ZLEXCOUNT`.
    pub fn zlexcount(&mut self, key: &[u8], min: LexBound<'_>, max: LexBound<'_>) -> Result<u64> {
        self.zread(key, |tx, r| {
            let (lo, hi) = Self::lexspan(tx, &r.tops[0], min, max)?;
            Ok(hi - lo)
        })
    }

    /// `ZCOUNT`: members with scores within `min..max`, from two paths (no member is read).
    pub fn zcount(&mut self, key: &[u8], min: ScoreBound, max: ScoreBound) -> Result<u64> {
        self.zread(key, |tx, r| {
            let (lo, hi) = Self::zspan(tx, &r.tops[1], min, max)?;
            Ok(hi - lo)
        })
    }

    /// `ZPOPMIN` / `ZPOPMAX` (`max`): up to `count` members with their scores.
    pub fn zpop(&mut self, key: &[u8], max: bool, count: u64) -> Result<Vec<(Vec<u8>, f64)>> {
        Ok(self
            .coll_write(key, Kind::ZSet, false, |tx, root| {
                let mut out = Vec::new();
                while (out.len() as u64) < count && root.tops[1].count() > 0 {
                    let at = if max { root.tops[1].count() - 1 } else { 0 };
                    let sk = tx
                        .modify(&mut root.tops[1], Seek::At(at), &mut |e, pos, ch| {
                            let (k, v) = e.remove(pos.ok()?)?;
                            ch.grew = Some(-entry_bytes(&k, &v));
                            Some(k)
                        })?
                        .expect("a position within the count");
                    let member = sk[8..].to_vec();
                    tx.modify(&mut root.tops[0], Seek::Key(&member), &mut |e, pos, ch| {
                        if let Ok(p) = pos {
                            let (k, v) = e.remove(p).expect("the entry found");
                            ch.grew = Some(-entry_bytes(&k, &v));
                        }
                    })?;
                    out.push((member, score_from_bytes(&sk)));
                }
                Ok(out)
            })?
            .unwrap_or_default())
    }

    /// `ZSCAN`: up to `count` members after the cursor `after` (member order) with their scores,
    /// and the cursor to continue from (`None`: done). Every member present for the whole scan
    /// is returned once, whatever changes meanwhile.
    pub fn zscan(
        &mut self,
        key: &[u8],
        after: Option<&[u8]>,
        count: usize,
    ) -> Result<ScanPage<(Vec<u8>, f64)>> {
        let (items, next) = self.coll_scan(key, Kind::ZSet, after, count)?;
        Ok((
            items
                .into_iter()
                .map(|(m, v)| {
                    let s = value_score(&v);
                    (m, s)
                })
                .collect(),
            next,
        ))
    }
}

fn zscore_in(tx: &mut Tx<'_>, root: &Root, member: &[u8]) -> Result<Option<f64>> {
    Ok(tx
        .find(&root.tops[0], Seek::Key(member))?
        .map(|e| value_score(&e.1)))
}

/// Set `member`'s score to `s` (its current score `old`) in both trees; false when unchanged.
fn zset_score(
    tx: &mut Tx<'_>,
    root: &mut Root,
    member: &[u8],
    s: f64,
    old: Option<f64>,
) -> Result<bool> {
    let s = if s == 0.0 { 0.0 } else { s };
    if old == Some(s) {
        return Ok(false);
    }
    let sv = s.to_le_bytes().to_vec();
    tx.modify(
        &mut root.tops[0],
        Seek::Key(member),
        &mut |e, pos, _| match pos {
            Ok(p) => e[p].1 = sv.clone(),
            Err(p) => e.insert(p, (member.to_vec(), sv.clone())),
        },
    )?;
    if let Some(o) = old {
        let ok = score_key(o, member);
        tx.modify(&mut root.tops[1], Seek::Key(&ok), &mut |e, pos, _| {
            if let Ok(p) = pos {
                e.remove(p);
            }
        })?;
    }
    let nk = score_key(s, member);
    tx.modify(&mut root.tops[1], Seek::Key(&nk), &mut |e, pos, _| {
        if let Err(p) = pos {
            e.insert(p, (nk.clone(), Vec::new()));
        }
    })?;
    Ok(true)
}

/// `ZADD` of one member under `flags`, deciding in the one walk to its leaf in the member tree:
/// `Some(old score)` when it was added (`None`) or its score changed; `None` when nothing did.
fn zadd_one(
    tx: &mut Tx<'_>,
    root: &mut Root,
    member: &[u8],
    s: f64,
    flags: ZAddFlags,
) -> Result<Option<Option<f64>>> {
    let s = if s == 0.0 { 0.0 } else { s };
    let sv = s.to_le_bytes();
    let done = tx.modify(&mut root.tops[0], Seek::Key(member), &mut |e, pos, ch| {
        let old = pos.ok().map(|p| value_score(&e[p].1));
        let apply = match old {
            None => !flags.xx,
            Some(o) => !(flags.nx || o == s || (flags.gt && s <= o) || (flags.lt && s >= o)),
        };
        ch.changed = apply;
        if !apply {
            return None;
        }
        match pos {
            // A score is 8 bytes: replacing one keeps the leaf's size.
            Ok(p) => {
                e[p].1 = sv.to_vec();
                ch.grew = Some(0);
            }
            Err(p) => {
                e.insert(p, (member.to_vec(), sv.to_vec()));
                ch.grew = Some(entry_bytes(member, &sv));
            }
        }
        Some(old)
    })?;
    let Some(old) = done else { return Ok(None) };
    if let Some(o) = old {
        let ok = score_key(o, member);
        tx.modify(&mut root.tops[1], Seek::Key(&ok), &mut |e, pos, ch| {
            ch.grew = Some(0);
            if let Ok(p) = pos {
                let (k, v) = e.remove(p).expect("the entry found");
                ch.grew = Some(-entry_bytes(&k, &v));
            }
        })?;
    }
    let nk = score_key(s, member);
    tx.modify(&mut root.tops[1], Seek::Key(&nk), &mut |e, pos, ch| {
        ch.grew = Some(0);
        if let Err(p) = pos {
            e.insert(p, (nk.clone(), Vec::new()));
            ch.grew = Some(entry_bytes(&nk, &[]));
        }
    })?;
    Ok(Some(old))
}

/// `n` entries of a score tree from position `from`, as (member, score).
/// Where a ranged read of positions `[lo, hi)` starts and how many it reads: `offset` skipped
/// from the low end (the high end with `rev`), at most `limit`; `None` when that leaves none.
fn window(lo: u64, hi: u64, rev: bool, offset: u64, limit: Option<u64>) -> Option<(u64, u64)> {
    let avail = (hi - lo).saturating_sub(offset);
    let n = limit.map_or(avail, |l| l.min(avail));
    if n == 0 {
        return None;
    }
    let from = if rev { hi - 1 - offset } else { lo + offset };
    Some((from, n))
}

fn zwalk(tx: &mut Tx<'_>, top: &Node, from: u64, rev: bool, n: u64) -> Result<Vec<(Vec<u8>, f64)>> {
    let mut out = Vec::with_capacity(n.min(1024) as usize);
    tx.walk(top, from, rev, &mut |k, v| {
        let e = (k, v);
        out.push((e.0[8..].to_vec(), score_from_bytes(e.0)));
        (out.len() as u64) < n
    })?;
    Ok(out)
}
