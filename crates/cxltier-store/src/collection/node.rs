//! The bytes of a tree node and of a collection's root.
//!
//! A node is either a leaf of entries (a key and a value each; a list's keys are empty) or an
//! inner node of children (the child's first key, its chunk id and how many entries lie below
//! it). Lengths and ids are little-endian; every decode checks its bounds and reports a node it
//! cannot read as corrupt rather than trusting it.

use crate::{Kind, Result, StoreError};

/// One child of an inner node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Child {
    /// The first key below it (empty in a list).
    pub first: Vec<u8>,
    pub id: u64,
    /// Entries below it.
    pub count: u64,
}

pub(crate) type Entry = (Vec<u8>, Vec<u8>);

/// A leaf's entries, double-ended: a list's end leaf takes a push or gives a pop at either end
/// without moving the others (a `Vec` moved every entry on each push at a list's front).
pub(crate) type Leaf = std::collections::VecDeque<Entry>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    Leaf(Leaf),
    Inner(Vec<Child>),
}

pub(crate) const LEAF: u8 = 0;
const INNER: u8 = 1;
/// Bytes a node spends beyond its entries: its tag and entry count.
pub(crate) const NODE_HEADER: usize = 5;
pub(crate) const LEAF_ENTRY: usize = 8;
const INNER_ENTRY: usize = 4 + 16;

impl Node {
    pub(crate) fn empty_leaf() -> Node {
        Node::Leaf(Leaf::new())
    }

    /// Entries below this node.
    pub(crate) fn count(&self) -> u64 {
        match self {
            Node::Leaf(e) => e.len() as u64,
            Node::Inner(c) => c.iter().map(|c| c.count).sum(),
        }
    }

    /// Slots (entries or children) in the node itself.
    pub(crate) fn slots(&self) -> usize {
        match self {
            Node::Leaf(e) => e.len(),
            Node::Inner(c) => c.len(),
        }
    }

    pub(crate) fn first_key(&self) -> &[u8] {
        match self {
            Node::Leaf(e) => e.front().map_or(&[][..], |e| &e.0),
            Node::Inner(c) => c.first().map_or(&[][..], |c| &c.first),
        }
    }

    /// The encoded size.
    pub(crate) fn size(&self) -> usize {
        NODE_HEADER
            + match self {
                Node::Leaf(e) => e.iter().map(leaf_entry_size).sum::<usize>(),
                Node::Inner(c) => c.iter().map(inner_entry_size).sum::<usize>(),
            }
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.size());
        match self {
            Node::Leaf(e) => {
                out.push(LEAF);
                out.extend_from_slice(&(e.len() as u32).to_le_bytes());
                for (k, v) in e {
                    out.extend_from_slice(&(k.len() as u32).to_le_bytes());
                    out.extend_from_slice(k);
                    out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                    out.extend_from_slice(v);
                }
            }
            Node::Inner(c) => {
                out.push(INNER);
                out.extend_from_slice(&(c.len() as u32).to_le_bytes());
                for c in c {
                    out.extend_from_slice(&(c.first.len() as u32).to_le_bytes());
                    out.extend_from_slice(&c.first);
                    out.extend_from_slice(&c.id.to_le_bytes());
                    out.extend_from_slice(&c.count.to_le_bytes());
                }
            }
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Node> {
        let tag = r.u8()?;
        let n = r.u32()? as usize;
        // Every entry takes at least its fixed bytes: a count larger than the bytes left is a
        // damaged node, not an allocation to attempt.
        let min = if tag == LEAF { LEAF_ENTRY } else { INNER_ENTRY };
        if n > r.left() / min {
            return Err(r.corrupt("an entry count larger than the node"));
        }
        match tag {
            LEAF => {
                let mut e = Leaf::with_capacity(n);
                for _ in 0..n {
                    let k = r.bytes()?.to_vec();
                    let v = r.bytes()?.to_vec();
                    e.push_back((k, v));
                }
                Ok(Node::Leaf(e))
            }
            INNER => {
                let mut c = Vec::with_capacity(n);
                for _ in 0..n {
                    let first = r.bytes()?.to_vec();
                    let id = r.u64()?;
                    let count = r.u64()?;
                    c.push(Child { first, id, count });
                }
                if c.is_empty() {
                    return Err(r.corrupt("an inner node without children"));
                }
                Ok(Node::Inner(c))
            }
            _ => Err(r.corrupt("an unknown node tag")),
        }
    }
}

/// A child of an inner node read in place.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChildRef<'a> {
    pub first: &'a [u8],
    pub id: u64,
    pub count: u64,
}

/// A node read in place from its bytes (one allocation for the slot list, none per entry): for
/// reads that only look.
pub(crate) enum NodeRef<'a> {
    Leaf(Vec<(&'a [u8], &'a [u8])>),
    Inner(Vec<ChildRef<'a>>),
}

impl<'a> NodeRef<'a> {
    /// The same checks as [`Node::decode`], over the whole of `bytes`.
    pub(crate) fn parse(bytes: &'a [u8], what: &'a [u8]) -> Result<NodeRef<'a>> {
        let mut r = Reader::new(bytes, what);
        let tag = r.u8()?;
        let n = r.u32()? as usize;
        let min = if tag == LEAF { LEAF_ENTRY } else { INNER_ENTRY };
        if n > r.left() / min {
            return Err(r.corrupt("an entry count larger than the node"));
        }
        let node = match tag {
            LEAF => {
                let mut e = Vec::with_capacity(n);
                for _ in 0..n {
                    let k = r.bytes()?;
                    let v = r.bytes()?;
                    e.push((k, v));
                }
                NodeRef::Leaf(e)
            }
            INNER => {
                let mut c = Vec::with_capacity(n);
                for _ in 0..n {
                    let first = r.bytes()?;
                    let id = r.u64()?;
                    let count = r.u64()?;
                    c.push(ChildRef { first, id, count });
                }
                if c.is_empty() {
                    return Err(r.corrupt("an inner node without children"));
                }
                NodeRef::Inner(c)
            }
            _ => return Err(r.corrupt("an unknown node tag")),
        };
        if !r.done() {
            return Err(r.corrupt("bytes after the node"));
        }
        Ok(node)
    }
}

/// Walk the entries of an encoded leaf from position `from` while `f` says go on, reading
/// each as it comes: the checks of [`NodeRef::parse`] on every entry read, and on the whole
/// leaf when the walk reaches its end. False when `f` said stop.
pub(crate) fn walk_leaf_bytes(
    bytes: &[u8],
    what: &[u8],
    from: u64,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<bool> {
    let mut r = Reader::new(bytes, what);
    if r.u8()? != LEAF {
        return Err(r.corrupt("an inner node where a leaf was read"));
    }
    let n = r.u32()? as usize;
    if n > r.left() / LEAF_ENTRY {
        return Err(r.corrupt("an entry count larger than the node"));
    }
    for i in 0..n {
        let k = r.bytes()?;
        let v = r.bytes()?;
        if i as u64 >= from && !f(k, v) {
            return Ok(false);
        }
    }
    if !r.done() {
        return Err(r.corrupt("bytes after the node"));
    }
    Ok(true)
}

pub(crate) fn leaf_entry_size(e: &Entry) -> usize {
    LEAF_ENTRY + e.0.len() + e.1.len()
}

pub(crate) fn inner_entry_size(c: &Child) -> usize {
    INNER_ENTRY + c.first.len()
}

/// A bounds-checked reader over a node's or root's bytes.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    what: &'a [u8],
}

impl<'a> Reader<'a> {
    /// `what`: the key the bytes belong to, for errors.
    pub(crate) fn new(bytes: &'a [u8], what: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0, what }
    }

    pub(crate) fn corrupt(&self, why: &str) -> StoreError {
        StoreError::Corrupt(format!(
            "collection object {:?} is unreadable at byte {}: {why}",
            String::from_utf8_lossy(self.what),
            self.at
        ))
    }

    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.left() {
            return Err(self.corrupt("it ends early"));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    pub(crate) fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    pub(crate) fn done(&self) -> bool {
        self.at == self.bytes.len()
    }
}

/// How many trees a root of `kind` has: a sorted set's members and scores; a big string's pieces
/// and a leaf of its piece size and length; a stream's five (`StreamTree`); one for the others.
fn trees_of(kind: Kind) -> usize {
    match kind {
        Kind::ZSet | Kind::BigString => 2,
        Kind::Stream => super::stream::STREAM_TREES,
        _ => 1,
    }
}

/// The format of a root's bytes.
const ROOT_FORMAT: u8 = 1;
/// Format 1's bytes and one byte of flags after the trees: written only when a flag is set, so
/// a root without flags is byte for byte what it always was.
const ROOT_FORMAT_FLAGS: u8 = 2;

/// A collection's root: its identity and the top node of each of its trees (a sorted set has
/// two, the others one).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Root {
    pub kind: Kind,
    /// Which incarnation of the key this is: part of every chunk key, so that chunks of a
    /// collection deleted earlier under the same key are never taken for this one's.
    pub generation: u64,
    /// The next unused chunk id (ids are never reused within a generation).
    pub next_id: u64,
    /// Chunk ids the last change replaced: deleted right after this root was written, and again
    /// by recovery in case a crash came in between.
    pub freed: Vec<u64>,
    pub tops: Vec<Node>,
    /// Bits the server sets and the collection keeps until it is deleted (a set that Redis
    /// would have converted to a hashtable stays one for `OBJECT ENCODING`).
    pub flags: u8,
}

impl Root {
    pub(crate) fn new(kind: Kind, generation: u64) -> Root {
        let trees = trees_of(kind);
        Root {
            kind,
            generation,
            next_id: 0,
            freed: Vec::new(),
            tops: vec![Node::empty_leaf(); trees],
            flags: 0,
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            32 + self.freed.len() * 8 + self.tops.iter().map(|t| 4 + t.size()).sum::<usize>(),
        );
        out.push(if self.flags == 0 {
            ROOT_FORMAT
        } else {
            ROOT_FORMAT_FLAGS
        });
        out.push(self.kind as u8);
        out.extend_from_slice(&self.generation.to_le_bytes());
        out.extend_from_slice(&self.next_id.to_le_bytes());
        out.extend_from_slice(&(self.freed.len() as u32).to_le_bytes());
        for id in &self.freed {
            out.extend_from_slice(&id.to_le_bytes());
        }
        out.push(self.tops.len() as u8);
        for t in &self.tops {
            let mut b = Vec::new();
            t.encode(&mut b);
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(&b);
        }
        if self.flags != 0 {
            out.push(self.flags);
        }
        out
    }

    /// The root's identity only (generation, next id, freed ids), without its trees: recovery's
    /// check of a collection's chunks.
    pub(crate) fn decode_header(bytes: &[u8], key: &[u8]) -> Result<(u64, u64, Vec<u64>)> {
        let mut r = Reader::new(bytes, key);
        if !matches!(r.u8()?, ROOT_FORMAT | ROOT_FORMAT_FLAGS) {
            return Err(r.corrupt("an unknown root format"));
        }
        Kind::from_u8(r.u8()?).ok_or_else(|| r.corrupt("an unknown kind"))?;
        let generation = r.u64()?;
        let next_id = r.u64()?;
        let n = r.u32()? as usize;
        if n > bytes.len() / 8 {
            return Err(r.corrupt("more freed ids than bytes"));
        }
        let mut freed = Vec::with_capacity(n);
        for _ in 0..n {
            freed.push(r.u64()?);
        }
        Ok((generation, next_id, freed))
    }

    pub(crate) fn decode(bytes: &[u8], key: &[u8]) -> Result<Root> {
        let (generation, next_id, freed) = Root::decode_header(bytes, key)?;
        let kind = Kind::from_u8(bytes[1]).expect("checked by decode_header");
        let mut r = Reader::new(bytes, key);
        r.take(1 + 1 + 8 + 8 + 4 + 8 * freed.len())?;
        let trees = r.u8()? as usize;
        if trees != trees_of(kind) {
            return Err(r.corrupt("the wrong number of trees for its kind"));
        }
        let mut tops = Vec::with_capacity(trees);
        for _ in 0..trees {
            let b = r.bytes()?;
            let mut nr = Reader::new(b, key);
            tops.push(Node::decode(&mut nr)?);
            if !nr.done() {
                return Err(nr.corrupt("bytes after its top node"));
            }
        }
        let flags = if bytes[0] == ROOT_FORMAT_FLAGS {
            r.u8()?
        } else {
            0
        };
        if !r.done() {
            return Err(r.corrupt("bytes after its trees"));
        }
        Ok(Root {
            kind,
            generation,
            next_id,
            freed,
            tops,
            flags,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_and_roots_round_trip_and_truncation_is_corrupt() {
        let leaf = Node::Leaf(Leaf::from(vec![
            (b"a".to_vec(), b"1".to_vec()),
            (vec![], vec![7; 300]),
        ]));
        let inner = Node::Inner(vec![Child {
            first: b"k".to_vec(),
            id: 9,
            count: 12,
        }]);
        for n in [&leaf, &inner] {
            let mut b = Vec::new();
            n.encode(&mut b);
            assert_eq!(b.len(), n.size());
            assert_eq!(&Node::decode(&mut Reader::new(&b, b"x")).unwrap(), n);
            for cut in 0..b.len() {
                assert!(Node::decode(&mut Reader::new(&b[..cut], b"x")).is_err());
            }
        }
        let mut root = Root::new(Kind::ZSet, 5);
        root.tops[1] = inner.clone();
        root.freed = vec![1, 2];
        root.next_id = 3;
        let b = root.encode();
        assert_eq!(Root::decode(&b, b"x").unwrap(), root);
        for cut in 0..b.len() {
            assert!(Root::decode(&b[..cut], b"x").is_err(), "cut at {cut}");
        }
        // Flags: a byte more, and a root without them is as it was.
        root.flags = 1;
        let f = root.encode();
        assert_eq!(f.len(), b.len() + 1);
        assert_eq!(f[1..b.len()], b[1..]);
        assert_eq!(Root::decode(&f, b"x").unwrap(), root);
        for cut in 0..f.len() {
            assert!(Root::decode(&f[..cut], b"x").is_err(), "cut at {cut}");
        }
    }
}
