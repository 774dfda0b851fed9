//! Values longer than one slot holds ("big strings"; a hash the server encodes as one value is
//! kept the same way): a collection root of [`Kind::BigString`] whose first tree is the value
//! cut into pieces of [`PIECE_BYTES`] (every piece that size but the last, so that byte `i` is in
//! piece `i / PIECE_BYTES` and a counted seek finds it), and whose second tree is one leaf
//! holding the piece size, the value's length and the kind callers see. A read or a
//! change of a range touches the pieces of that range and their path, never the whole value;
//! like any collection, the pieces are written before the root and a crash leaves the old value
//! or the new one whole. Layout in `docs/server.md` ("Big strings").

use super::node::{Entry, Leaf, Node, Root};
use super::tree::{Seek, Tx};
use crate::keys::{parse_chunk_key, CHUNK_KEY_OVERHEAD, MAX_PARTS_KEY};
use crate::{Kind, ObjectRef, Result, Store, StoreError};

/// The size of a big string's pieces (or half the longest value kept whole, when that is
/// smaller): a change of a few bytes writes one piece and its path.
pub(crate) const PIECE_BYTES: usize = 64 << 10;
/// The longest value stored whole, in one slot and one log record; longer strings are big
/// strings. Values up to it are read and written as one object, as before big strings existed.
pub(crate) const WHOLE_MAX: usize = 1 << 20;
/// The key of the meta leaf's one entry.
const META: &[u8] = b"piece,len,kind";

/// A big value's (piece size, length, kind), from its root's second tree.
pub(crate) fn meta_of(root: &Root, key: &[u8]) -> Result<(usize, u64, Kind)> {
    let bad = || {
        StoreError::Corrupt(format!(
            "the root of the string {:?} has no readable piece size and length",
            String::from_utf8_lossy(key)
        ))
    };
    let Some(Node::Leaf(e)) = root.tops.get(1) else {
        return Err(bad());
    };
    match e.as_slices() {
        ([(k, v)], []) if k == META && v.len() == 13 => {
            let piece = u32::from_le_bytes(v[..4].try_into().expect("4 bytes")) as usize;
            let len = u64::from_le_bytes(v[4..12].try_into().expect("8 bytes"));
            let kind = match Kind::from_u8(v[12]) {
                Some(k @ (Kind::String | Kind::Hash)) => k,
                _ => return Err(bad()),
            };
            if piece == 0 {
                return Err(bad());
            }
            Ok((piece, len, kind))
        }
        _ => Err(bad()),
    }
}

/// A big string's (piece size, length); [`StoreError::WrongType`] for a big value of another
/// kind.
fn meta(root: &Root, key: &[u8]) -> Result<(usize, u64)> {
    match meta_of(root, key)? {
        (piece, len, Kind::String) => Ok((piece, len)),
        (_, _, k) => Err(StoreError::WrongType {
            held: k.type_name(),
        }),
    }
}

fn set_meta(root: &mut Root, piece: usize, len: u64, kind: Kind) {
    let mut v = Vec::with_capacity(13);
    v.extend_from_slice(&(piece as u32).to_le_bytes());
    v.extend_from_slice(&len.to_le_bytes());
    v.push(kind as u8);
    root.tops[1] = Node::Leaf(Leaf::from(vec![(META.to_vec(), v)]));
}

/// `bytes` cut into pieces (leaf entries with empty keys).
fn pieces(bytes: &[u8], piece: usize) -> Vec<Entry> {
    bytes
        .chunks(piece)
        .map(|c| (Vec::new(), c.to_vec()))
        .collect()
}

impl Store {
    /// Write `value` (longer than [`WHOLE_MAX`]) under `key` as a big string, replacing whatever
    /// the key held: the pieces under a new generation first, then the root, then the old
    /// value's parts. On a failure the pieces written are deleted and the old value stays.
    pub(crate) fn big_put(
        &mut self,
        key: &[u8],
        kind: Kind,
        value: &[u8],
        exp: Option<u64>,
    ) -> Result<()> {
        let max = MAX_PARTS_KEY - CHUNK_KEY_OVERHEAD;
        if key.len() > max {
            return Err(StoreError::Config(format!(
                "a value longer than {WHOLE_MAX} bytes is kept in parts, and its key may be at most {max} bytes (its parts' keys add {CHUNK_KEY_OVERHEAD}), not {}",
                key.len()
            )));
        }
        let old_parts = match self.peek_kind(key) {
            Some(k) if k.is_collection() => self.chunk_keys_of(key),
            _ => Vec::new(),
        };
        let generation = self.new_generation();
        let mut root = Root::new(Kind::BigString, generation);
        let piece = PIECE_BYTES.min(self.whole_max() / 2);
        set_meta(&mut root, piece, value.len() as u64, kind);
        let written = self.big_build(key, &mut root, value, piece);
        let written = written.and_then(|()| {
            let bytes = root.encode();
            self.put_raw(key, Kind::BigString, &bytes, exp, 0)
        });
        if let Err(e) = written {
            // Best effort: a part left behind has no root and recovery drops it.
            for k in self.chunk_keys_of(key) {
                if parse_chunk_key(&k).is_some_and(|(_, g, _)| g == generation) {
                    let _ = self.chunk_delete(&k);
                }
            }
            return Err(e);
        }
        self.forget_assembled(key);
        for k in old_parts {
            self.chunk_delete_replaced(&k)?;
        }
        Ok(())
    }

    /// The pieces of a new big string and the tree above them, written (not the root).
    fn big_build(&mut self, key: &[u8], root: &mut Root, value: &[u8], piece: usize) -> Result<()> {
        let chunk_bytes = self.chunk_bytes();
        let mut tx = Tx {
            store: self,
            key: key.to_vec(),
            generation: root.generation,
            next_id: 0,
            freed: Vec::new(),
            chunk_bytes,
            first_new_id: 0,
            pending: Default::default(),
            pending_bytes: 0,
            changed: false,
        };
        let mut all = Some(pieces(value, piece));
        tx.modify(&mut root.tops[0], Seek::Before(0), &mut |e, _, _| {
            e.extend(all.take().unwrap_or_default());
        })?;
        tx.flush()?;
        root.next_id = tx.next_id;
        Ok(())
    }

    /// A big string read whole, kept until the next change of the key or the end of the batch
    /// so that [`Store::get`] can lend it like any value.
    pub(crate) fn get_big(&mut self, key: &[u8]) -> Result<Option<ObjectRef<'_>>> {
        let value = self.coll_read(key, Kind::BigString, |tx, r| {
            let (_, len, kind) = meta_of(r, key)?;
            let mut out = Vec::with_capacity(len as usize);
            tx.walk(&r.tops[0], 0, false, &mut |k, v| {
                let e = (k, v);
                out.extend_from_slice(e.1);
                true
            })?;
            if out.len() as u64 != len {
                return Err(StoreError::Corrupt(format!(
                    "the string {:?} should hold {len} bytes, its pieces hold {}",
                    String::from_utf8_lossy(key),
                    out.len()
                )));
            }
            Ok((kind, out))
        })?;
        let Some((kind, value)) = value else {
            return Ok(None);
        };
        let expires_at_ms = self.peek_raw(key).and_then(|o| o.expires_at_ms);
        self.assembled = Some((key.into(), kind, value));
        Ok(self.assembled_ref(key, expires_at_ms))
    }

    /// The big string [`Store::get_big`] read last, if it is `key`'s.
    pub(crate) fn assembled_ref(
        &self,
        key: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Option<ObjectRef<'_>> {
        match &self.assembled {
            Some((k, kind, v)) if &k[..] == key => Some(ObjectRef {
                kind: *kind,
                value: v,
                expires_at_ms,
            }),
            _ => None,
        }
    }

    pub(crate) fn forget_assembled(&mut self, key: &[u8]) {
        if self
            .assembled
            .as_ref()
            .is_some_and(|(k, _, _)| &k[..] == key)
        {
            self.assembled = None;
        }
    }

    /// The length of the string under `key` (`STRLEN`), without reading its value: `None` when
    /// the key is absent, [`StoreError::WrongType`] when it holds another type.
    pub fn strlen(&mut self, key: &[u8]) -> Result<Option<u64>> {
        if !self.contains(key) {
            return Ok(None);
        }
        match self.peek_kind(key) {
            Some(Kind::String) => Ok(self.entry_len(key)),
            Some(Kind::BigString) => self.coll_read(key, Kind::BigString, |_, r| {
                meta(r, key).map(|(_, len)| len)
            }),
            Some(k) => Err(StoreError::WrongType {
                held: k.type_name(),
            }),
            None => Ok(None),
        }
    }

    /// Up to `len` bytes of the string under `key` from byte `offset` (`GETRANGE`, `GETBIT`):
    /// a big string's pieces in that range only. Empty past the end; `None` when the key is
    /// absent, [`StoreError::WrongType`] when it holds another type.
    pub fn get_range(&mut self, key: &[u8], offset: u64, len: u64) -> Result<Option<Vec<u8>>> {
        if !self.contains(key) {
            return Ok(None);
        }
        match self.peek_kind(key) {
            Some(Kind::BigString) => {}
            Some(Kind::String) => {
                return Ok(self.get(key)?.map(|o| {
                    let v = o.value;
                    let from = (offset.min(v.len() as u64)) as usize;
                    let to = (offset.saturating_add(len).min(v.len() as u64)) as usize;
                    v[from..to].to_vec()
                }))
            }
            Some(k) => {
                return Err(StoreError::WrongType {
                    held: k.type_name(),
                })
            }
            None => return Ok(None),
        }
        self.coll_read(key, Kind::BigString, |tx, r| {
            let (piece, total) = meta(r, key)?;
            let end = offset.saturating_add(len).min(total);
            if offset >= end {
                return Ok(Vec::new());
            }
            let mut out = Vec::with_capacity((end - offset) as usize);
            let first = offset / piece as u64;
            let mut at = first * piece as u64;
            tx.walk(&r.tops[0], first, false, &mut |k, v| {
                let e = (k, v);
                let (from, to) = (offset.max(at), end.min(at + e.1.len() as u64));
                if from < to {
                    out.extend_from_slice(&e.1[(from - at) as usize..(to - at) as usize]);
                }
                at += e.1.len() as u64;
                at < end
            })?;
            Ok(out)
        })
    }

    /// Write `bytes` at byte `offset` of the string under `key` (`SETRANGE`, `SETBIT`), zero-filling
    /// a gap past its end and creating it when absent (not for empty `bytes`); its expiry stays.
    /// A big string changes only the pieces the range touches (and grows by new pieces at its
    /// end). Returns the new length.
    pub fn set_range(&mut self, key: &[u8], offset: u64, bytes: &[u8]) -> Result<u64> {
        let cur = self.strlen(key)?;
        let end = offset.saturating_add(bytes.len() as u64);
        if bytes.is_empty() {
            return Ok(cur.unwrap_or(0));
        }
        if end > self.max_object() as u64 {
            return Err(StoreError::TooLarge {
                len: end.min(usize::MAX as u64) as usize,
                max: self.max_object(),
            });
        }
        if self.peek_kind(key) == Some(Kind::BigString) {
            self.forget_assembled(key);
            return self.big_set_range(key, offset, bytes);
        }
        // A whole value: changed in place when the range is inside it and it is in memory,
        // else read, changed and written (as a big string once it outgrows a slot).
        let cur = cur.unwrap_or(0);
        if end <= cur && self.patch(key, offset as usize, bytes)? {
            return Ok(cur);
        }
        let (mut value, exp) = match self.get(key)? {
            Some(o) => (o.value.to_vec(), o.expires_at_ms),
            None => (Vec::new(), None),
        };
        let (offset, end) = (offset as usize, end as usize);
        if value.len() < end {
            value.resize(end, 0);
        }
        value[offset..end].copy_from_slice(bytes);
        self.put(key, Kind::String, &value, exp)?;
        Ok(value.len() as u64)
    }

    /// `APPEND`: `bytes` added at the end of the string under `key` (created when absent).
    /// Returns the new length.
    pub fn append(&mut self, key: &[u8], bytes: &[u8]) -> Result<u64> {
        let len = self.strlen(key)?.unwrap_or(0);
        if bytes.is_empty() {
            // Redis creates an empty string for APPEND of nothing to a missing key.
            if !self.contains(key) {
                self.put(key, Kind::String, b"", None)?;
            }
            return Ok(len);
        }
        self.set_range(key, len, bytes)
    }

    fn big_set_range(&mut self, key: &[u8], offset: u64, bytes: &[u8]) -> Result<u64> {
        let r = self.coll_write(key, Kind::BigString, false, |tx, root| {
            let (piece, len) = meta(root, key)?;
            let p = piece as u64;
            let end = offset + bytes.len() as u64;
            // The bytes inside the value: piece by piece.
            let mut at = offset;
            while at < end.min(len) {
                let (i, within) = (at / p, (at % p) as usize);
                let n = (p - within as u64).min(end.min(len) - at) as usize;
                let src = &bytes[(at - offset) as usize..(at - offset) as usize + n];
                tx.modify(&mut root.tops[0], Seek::At(i), &mut |e, pos, _| {
                    if let Ok(q) = pos {
                        e[q].1[within..within + n].copy_from_slice(src);
                    }
                })?;
                at += n as u64;
            }
            if end <= len {
                return Ok(len);
            }
            // Past the end: zeros up to the offset, then the bytes; first into the last piece
            // up to its full size, then as new pieces.
            let from = len.max(offset);
            let mut tail = vec![0u8; (from - len) as usize];
            tail.extend_from_slice(&bytes[(from - offset) as usize..]);
            let count = root.tops[0].count();
            let last_len = len - (count - 1) * p;
            let fill = ((p - last_len) as usize).min(tail.len());
            if fill > 0 {
                let add = &tail[..fill];
                tx.modify(&mut root.tops[0], Seek::At(count - 1), &mut |e, pos, _| {
                    if let Ok(q) = pos {
                        e[q].1.extend_from_slice(add);
                    }
                })?;
            }
            let mut rest = Some(pieces(&tail[fill..], piece));
            if rest.as_ref().is_some_and(|r| !r.is_empty()) {
                tx.modify(&mut root.tops[0], Seek::Before(count), &mut |e, _, _| {
                    e.extend(rest.take().unwrap_or_default());
                })?;
            }
            set_meta(root, piece, end, Kind::String);
            Ok(end)
        })?;
        r.ok_or_else(|| {
            StoreError::Corrupt(format!(
                "the string {:?} vanished during a change",
                String::from_utf8_lossy(key)
            ))
        })
    }

    /// Check a big string (tests): its tree, its parts, and that every piece but the last is
    /// full and the pieces add up to its length.
    pub fn check_big_string(&mut self, key: &[u8]) -> std::result::Result<(), String> {
        self.check_collection(key)?;
        let r = self
            .coll_read(key, Kind::BigString, |tx, r| {
                let (piece, len, _) = meta_of(r, key)?;
                let mut sizes = Vec::new();
                tx.walk(&r.tops[0], 0, false, &mut |k, v| {
                    let e = (k, v);
                    sizes.push(e.1.len());
                    true
                })?;
                Ok((piece, len, sizes))
            })
            .map_err(|e| e.to_string())?;
        let Some((piece, len, sizes)) = r else {
            return Err("not a big string".into());
        };
        if sizes.iter().sum::<usize>() as u64 != len {
            return Err(format!(
                "pieces add up to {}, not {len}",
                sizes.iter().sum::<usize>()
            ));
        }
        let n = sizes.len();
        if sizes.iter().take(n.saturating_sub(1)).any(|&s| s != piece)
            || sizes.last().is_some_and(|&s| s == 0 || s > piece)
        {
            return Err(format!("pieces of uneven sizes: {sizes:?}"));
        }
        Ok(())
    }
}
