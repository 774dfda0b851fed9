//! Lists: pushes and pops at either end, indexes, ranges, inserts, removals and trims over a
//! counted tree of members in list order.

use super::node::{leaf_entry_size, Leaf};
use super::tree::{entry_bytes, Seek};
use super::{norm_index, norm_range, ListEnd};
use crate::{Kind, Result, Store};

impl Store {
    // ---- lists ----

    /// `LPUSH`/`RPUSH`: add `members` at `end` (creating the list), in the order Redis does
    /// (`LPUSH k a b` makes `b a`). Returns the list's length.
    pub fn list_push(&mut self, key: &[u8], end: ListEnd, members: &[&[u8]]) -> Result<u64> {
        self.list_push_inner(key, end, members, true)
            .map(|n| n.unwrap_or(0))
    }

    /// `LPUSHX`/`RPUSHX`: as [`Store::list_push`] only when the list exists; 0 when it does not.
    pub fn list_push_existing(
        &mut self,
        key: &[u8],
        end: ListEnd,
        members: &[&[u8]],
    ) -> Result<u64> {
        self.list_push_inner(key, end, members, false)
            .map(|n| n.unwrap_or(0))
    }

    fn list_push_inner(
        &mut self,
        key: &[u8],
        end: ListEnd,
        members: &[&[u8]],
        create: bool,
    ) -> Result<Option<u64>> {
        if members.is_empty() {
            return Ok(Some(self.list_len(key)?));
        }
        self.coll_write(key, Kind::List, create, |tx, root| {
            let top = &mut root.tops[0];
            let at = match end {
                ListEnd::Left => 0,
                ListEnd::Right => top.count(),
            };
            let grew: isize = members.iter().map(|m| entry_bytes(&[], m)).sum();
            // The gap is at the leaf's front or back (the list's end): the double-ended leaf
            // takes the members there without moving its other entries.
            let push = |e: &mut Leaf, pos: std::result::Result<usize, usize>| {
                let i = pos.unwrap_or_else(|i| i);
                for (k, m) in members.iter().enumerate() {
                    let entry = (Vec::new(), m.to_vec());
                    match end {
                        // Each member goes before the one pushed before it (`b a`).
                        ListEnd::Left if i == 0 => e.push_front(entry),
                        ListEnd::Left => e.insert(i, entry),
                        ListEnd::Right if i + k == e.len() => e.push_back(entry),
                        ListEnd::Right => e.insert(i + k, entry),
                    }
                }
            };
            // The end leaf changed earlier in this batch takes the members where it is, when
            // they fit; else the path is written anew (and the leaf split when it is full).
            let in_place = tx.modify_in_place(top, Seek::Before(at), |e, pos, room| {
                (grew.unsigned_abs() <= room.grow).then(|| (push(e, pos), grew))
            });
            if in_place.is_none() {
                tx.modify(top, Seek::Before(at), &mut |e, pos, edit| {
                    edit.grew = Some(grew);
                    push(e, pos);
                    // This is the list's end leaf: when full it stays as it is, and what was
                    // pushed starts the new end leaf.
                    edit.split_at = Some(match end {
                        ListEnd::Left => members.len(),
                        ListEnd::Right => e.len() - members.len(),
                    });
                })?;
            }
            Ok(top.count())
        })
    }

    /// `LPOP`/`RPOP` with a count: up to `count` members from `end`; `None` when the key is absent.
    pub fn list_pop(
        &mut self,
        key: &[u8],
        end: ListEnd,
        count: u64,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        self.coll_write(key, Kind::List, false, |tx, root| {
            let top = &mut root.tops[0];
            // Sized for what it will hold (one member for a plain pop), and the members moved
            // straight into it from the leaf: one allocation besides the members themselves.
            let mut out = Vec::with_capacity(count.min(top.count()).min(1024) as usize);
            while (out.len() as u64) < count && top.count() > 0 {
                let want = count as usize - out.len();
                let seek = match end {
                    ListEnd::Left => Seek::At(0),
                    ListEnd::Right => Seek::At(top.count() - 1),
                };
                let take = |e: &mut Leaf, n: usize, out: &mut Vec<Vec<u8>>| match end {
                    ListEnd::Left => out.extend(e.drain(..n).map(|x| x.1)),
                    ListEnd::Right => out.extend(e.drain(e.len() - n..).rev().map(|x| x.1)),
                };
                // From the end leaf where it is when it keeps enough not to merge.
                let in_place = tx.modify_in_place(top, seek, |e, _, room| {
                    let n = want.min(e.len());
                    let gone = match end {
                        ListEnd::Left => e.range(..n),
                        ListEnd::Right => e.range(e.len() - n..),
                    };
                    let bytes: usize = gone.map(leaf_entry_size).sum();
                    if n == e.len() || bytes > room.shrink {
                        return None;
                    }
                    take(e, n, &mut out);
                    Some(((), -(bytes as isize)))
                });
                if in_place.is_some() {
                    continue;
                }
                // Everything the leaf can give at once: one path written per leaf emptied.
                tx.modify(top, seek, &mut |e, _, edit| {
                    let before = out.len();
                    take(e, want.min(e.len()), &mut out);
                    edit.grew = Some(
                        -out[before..]
                            .iter()
                            .map(|m| entry_bytes(&[], m))
                            .sum::<isize>(),
                    );
                })?;
            }
            Ok(out)
        })
    }

    /// `LLEN` (0 when absent).
    pub fn list_len(&mut self, key: &[u8]) -> Result<u64> {
        self.coll_len(key, Kind::List)
    }

    /// `LINDEX` (negative from the end).
    pub fn list_index(&mut self, key: &[u8], index: i64) -> Result<Option<Vec<u8>>> {
        Ok(self
            .coll_read(key, Kind::List, |tx, r| {
                let Some(i) = norm_index(index, r.tops[0].count()) else {
                    return Ok(None);
                };
                Ok(tx.find(&r.tops[0], Seek::At(i))?.map(|e| e.1))
            })?
            .flatten())
    }

    /// `LSET`: `None` when the key is absent (Redis: "no such key"), `Some(false)` when the index
    /// is out of range.
    pub fn list_set(&mut self, key: &[u8], index: i64, value: &[u8]) -> Result<Option<bool>> {
        self.coll_write(key, Kind::List, false, |tx, root| {
            let Some(i) = norm_index(index, root.tops[0].count()) else {
                return Ok(false);
            };
            tx.modify(&mut root.tops[0], Seek::At(i), &mut |e, pos, _| {
                if let Ok(p) = pos {
                    e[p].1 = value.to_vec();
                }
            })?;
            Ok(true)
        })
    }

    /// `LRANGE` (Redis's index rules); reads only the leaves it returns.
    pub fn list_range(&mut self, key: &[u8], start: i64, stop: i64) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        self.list_range_into(
            key,
            start,
            stop,
            &mut out,
            |out, n| out.reserve(n as usize),
            |out, m| out.push(m.to_vec()),
        )?;
        Ok(out)
    }

    /// `LRANGE` written into `sink` as the chunks are read, nothing collected: `len` first with
    /// the number of members (0 when the key is absent or the range empty), then `member` with
    /// each in order. On an error `sink` may hold part of the range: the caller drops it.
    pub fn list_range_into<W>(
        &mut self,
        key: &[u8],
        start: i64,
        stop: i64,
        sink: &mut W,
        len: impl FnOnce(&mut W, u64),
        mut member: impl FnMut(&mut W, &[u8]),
    ) -> Result<()> {
        let mut len = Some(len);
        self.coll_read(key, Kind::List, |tx, r| {
            let Some((a, b)) = norm_range(start, stop, r.tops[0].count()) else {
                return Ok(());
            };
            let n = b - a + 1;
            (len.take().expect("called once"))(sink, n);
            let mut left = n;
            tx.walk(&r.tops[0], a, false, &mut |_, v| {
                member(sink, v);
                left -= 1;
                left > 0
            })
        })?;
        if let Some(len) = len {
            len(sink, 0);
        }
        Ok(())
    }

    /// `LINSERT`: the new length; 0 when the key is absent, -1 when `pivot` is not in the list.
    /// Finding the pivot reads the list up to it (as in Redis, O(n)); the insert is O(log n).
    pub fn list_insert(
        &mut self,
        key: &[u8],
        before: bool,
        pivot: &[u8],
        value: &[u8],
    ) -> Result<i64> {
        Ok(self
            .coll_write(key, Kind::List, false, |tx, root| {
                let mut at = None;
                let mut i = 0u64;
                tx.walk(&root.tops[0], 0, false, &mut |k, v| {
                    let e = (k, v);
                    if e.1 == pivot {
                        at = Some(i);
                        return false;
                    }
                    i += 1;
                    true
                })?;
                let Some(at) = at else { return Ok(-1) };
                let at = if before { at } else { at + 1 };
                tx.modify(&mut root.tops[0], Seek::Before(at), &mut |e, pos, _| {
                    let p = pos.unwrap_or_else(|p| p);
                    e.insert(p, (Vec::new(), value.to_vec()));
                })?;
                Ok(root.tops[0].count() as i64)
            })?
            .unwrap_or(0))
    }

    /// `LREM`: remove up to `count` (0: all; negative: from the tail) members equal to `value`.
    pub fn list_remove(&mut self, key: &[u8], count: i64, value: &[u8]) -> Result<u64> {
        Ok(self
            .coll_write(key, Kind::List, false, |tx, root| {
                let len = root.tops[0].count();
                if len == 0 {
                    return Ok(0);
                }
                let limit = if count == 0 {
                    u64::MAX
                } else {
                    count.unsigned_abs()
                };
                let rev = count < 0;
                let mut hits = Vec::new();
                let mut i = if rev { len - 1 } else { 0 };
                tx.walk(&root.tops[0], i, rev, &mut |k, v| {
                    let e = (k, v);
                    if e.1 == value {
                        hits.push(i);
                    }
                    if rev {
                        i = i.wrapping_sub(1);
                    } else {
                        i += 1;
                    }
                    (hits.len() as u64) < limit
                })?;
                // From the highest position down, so earlier positions stay where they were.
                hits.sort_unstable_by(|a, b| b.cmp(a));
                for &p in &hits {
                    tx.modify(&mut root.tops[0], Seek::At(p), &mut |e, pos, _| {
                        if let Ok(p) = pos {
                            e.remove(p);
                        }
                    })?;
                }
                Ok(hits.len() as u64)
            })?
            .unwrap_or(0))
    }

    /// `LTRIM`: keep `start..=stop`; a cost in the members removed, not the list's length.
    pub fn list_trim(&mut self, key: &[u8], start: i64, stop: i64) -> Result<()> {
        self.coll_write(key, Kind::List, false, |tx, root| {
            let len = root.tops[0].count();
            let (head, tail) = match norm_range(start, stop, len) {
                Some((a, b)) => (a, len - 1 - b),
                None => (len, 0),
            };
            for (end, mut n) in [(ListEnd::Left, head), (ListEnd::Right, tail)] {
                while n > 0 && root.tops[0].count() > 0 {
                    let top = &mut root.tops[0];
                    let seek = match end {
                        ListEnd::Left => Seek::At(0),
                        ListEnd::Right => Seek::At(top.count() - 1),
                    };
                    let took = tx.modify(top, seek, &mut |e, _, _| {
                        let k = (n as usize).min(e.len());
                        match end {
                            ListEnd::Left => drop(e.drain(..k)),
                            ListEnd::Right => drop(e.drain(e.len() - k..)),
                        }
                        k as u64
                    })?;
                    n -= took;
                }
            }
            Ok(())
        })
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{node, tree};
    use super::*;

    /// A store of 64 MiB of DRAM whose collections split at 512 bytes, with or without
    /// collection write-back.
    fn store_of_small_chunks(write_back: bool) -> Store {
        crate::StoreBuilder::new()
            .dram(64 << 20)
            .max_object(64 << 10)
            .durability(crate::Durability::None)
            .collection_chunk_bytes(512)
            .collection_write_back(write_back)
            .build()
            .unwrap()
    }

    /// A store with collection write-back and 512-byte chunks, holding list `l` of `n` members
    /// (`m0000`, `m0001`, ...) pushed and written back in one batch.
    fn write_back_store_with_list(n: usize) -> (Store, Vec<Vec<u8>>) {
        let mut s = store_of_small_chunks(true);
        let members: Vec<Vec<u8>> = (0..n).map(|i| format!("m{i:04}").into_bytes()).collect();
        let refs: Vec<&[u8]> = members.iter().map(|m| m.as_slice()).collect();
        s.list_push(b"l", ListEnd::Right, &refs).unwrap();
        s.end_batch();
        (s, members)
    }

    /// The chunk ids an open list has handed out (each a node its changes made anew).
    fn ids_handed_out(s: &Store, key: &[u8]) -> u64 {
        let oc = s.open.map.get(key).expect("the list is open");
        oc.root.next_id - oc.first_new_id
    }

    #[test]
    fn pushes_and_pops_at_a_list_end_in_one_batch_change_its_end_leaf_in_place() {
        // Four levels: a top, inner chunks, inner chunks, leaves of about 40 members.
        let (mut s, members) = write_back_store_with_list(20_000);
        let mut want: std::collections::VecDeque<Vec<u8>> = members.into_iter().collect();
        // 200 pushes at each end, then 300 pops from each: a path is made anew only when an
        // end leaf fills (a split, every 20 pushes or so) or thins (a merge, every 20 pops or
        // so), not per command (3 nodes each: 1,200 for the pushes, 1,800 for the pops).
        for i in 0..200 {
            let m = format!("p{i}").into_bytes();
            s.list_push(b"l", ListEnd::Left, &[&m]).unwrap();
            s.list_push(b"l", ListEnd::Right, &[&m]).unwrap();
            want.push_front(m.clone());
            want.push_back(m);
        }
        let pushed = ids_handed_out(&s, b"l");
        assert!(pushed < 200, "{pushed} nodes made for 400 pushes");
        for _ in 0..300 {
            let l = s.list_pop(b"l", ListEnd::Left, 1).unwrap().unwrap();
            let r = s.list_pop(b"l", ListEnd::Right, 1).unwrap().unwrap();
            assert_eq!(l, vec![want.pop_front().unwrap()]);
            assert_eq!(r, vec![want.pop_back().unwrap()]);
        }
        let popped = ids_handed_out(&s, b"l") - pushed;
        assert!(popped < 300, "{popped} nodes made for 600 pops");
        assert_eq!(s.list_len(b"l").unwrap(), want.len() as u64);
        s.end_batch();
        s.check_collection(b"l").unwrap();
        let got = s.list_range(b"l", 0, -1).unwrap();
        assert!(got.iter().eq(want.iter()), "the list after the batch");
    }

    #[test]
    fn a_batchs_first_push_takes_the_end_path_the_last_write_back_kept_decoded() {
        let (mut s, members) = write_back_store_with_list(5_000);
        assert!(
            s.written_nodes.nodes.is_empty(),
            "a write-back of many leaves keeps none of them"
        );
        let mut want: std::collections::VecDeque<Vec<u8>> = members.into_iter().collect();
        s.list_push(b"l", ListEnd::Right, &[b"first"]).unwrap();
        want.push_back(b"first".to_vec());
        s.end_batch();
        // Batches of pushes and pops at either end: each write-back keeps the end path it
        // wrote, and the next batch's first change takes its nodes from there, not from the
        // chunks.
        for round in 0..40u32 {
            let m = format!("r{round}").into_bytes();
            // Five rounds at one end, then five at the other.
            let left = round / 5 % 2 == 1;
            let same_end = round % 5 != 0;
            let kept = s.written_nodes.nodes.len();
            assert!(kept > 0, "round {round}: the write-back kept its nodes");
            if round % 3 == 2 {
                let got = s.list_pop(b"l", end_of(left), 1).unwrap().unwrap();
                let w = if left {
                    want.pop_front()
                } else {
                    want.pop_back()
                };
                assert_eq!(got, vec![w.unwrap()]);
            } else {
                s.list_push(b"l", end_of(left), &[&m]).unwrap();
                if left {
                    want.push_front(m);
                } else {
                    want.push_back(m);
                }
            }
            // The kept path is the end the last batch changed (the list's right end at
            // first).
            assert!(
                (!same_end && round > 0) || s.written_nodes.nodes.len() < kept,
                "round {round}: the change took its path from the kept nodes"
            );
            s.end_batch();
            s.check_collection(b"l").unwrap();
        }
        assert!(s.list_range(b"l", 0, -1).unwrap().iter().eq(want.iter()));
        // Deleted and made again under the same key (another generation): nothing kept for
        // the old one is taken for the new one.
        assert!(s.delete(b"l").unwrap());
        s.list_push(b"l", ListEnd::Right, &[b"x", b"y"]).unwrap();
        s.end_batch();
        s.list_push(b"l", ListEnd::Left, &[b"w"]).unwrap();
        s.end_batch();
        assert_eq!(
            s.list_range(b"l", 0, -1).unwrap(),
            vec![b"w".to_vec(), b"x".to_vec(), b"y".to_vec()]
        );
        s.check_collection(b"l").unwrap();
    }

    fn end_of(left: bool) -> ListEnd {
        if left {
            ListEnd::Left
        } else {
            ListEnd::Right
        }
    }

    #[test]
    fn a_list_pushed_at_one_end_fills_its_leaves() {
        for end in [ListEnd::Left, ListEnd::Right] {
            for write_back in [false, true] {
                let mut s = store_of_small_chunks(write_back);
                let n = 5_000;
                for i in 0..n {
                    let m = format!("m{i:04}");
                    s.list_push(b"l", end, &[m.as_bytes()]).unwrap();
                    if i % 100 == 99 {
                        s.end_batch();
                    }
                }
                s.end_batch();
                s.check_collection(b"l").unwrap();
                // A full leaf stays full when the end leaf splits: the chunks are about as
                // many as the members' bytes fill (halves, as before, made about twice as
                // many), besides a few inner chunks.
                let bytes = n * tree::entry_bytes(&[], b"m0000") as usize;
                let full = bytes.div_ceil(512 - node::NODE_HEADER);
                let chunks = s.chunk_keys_of(b"l").len();
                assert!(
                    chunks <= full + full / 5 + 8,
                    "{chunks} chunks for {full} full leaves ({end:?}, write-back {write_back})"
                );
            }
        }
    }
}
