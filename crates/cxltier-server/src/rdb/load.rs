//! Decoding RDB values: one value of a given RDB type read from a byte slice into a validated,
//! typed [`Value`]. RESTORE uses it for a DUMP payload's body; a loader of whole RDB files (a
//! replica's full sync) reads each key's type byte and calls [`read_value`] at that point of
//! the file.
//!
//! Every encoding Redis 7.0 loads for strings, lists, sets, sorted sets and hashes is read:
//! plain, integer-encoded and LZF-compressed strings; lists as `LIST`, `LIST_ZIPLIST`,
//! `LIST_QUICKLIST` (ziplist nodes) and `LIST_QUICKLIST_2` (listpack and plain nodes); sets as
//! `SET` and `SET_INTSET`; sorted sets as `ZSET` (scores as text), `ZSET_2` (binary doubles),
//! `ZSET_ZIPLIST` and `ZSET_LISTPACK`; hashes as `HASH`, `HASH_ZIPMAP`, `HASH_ZIPLIST` and
//! `HASH_LISTPACK`; streams as `STREAM_LISTPACKS` and `STREAM_LISTPACKS_2` (their own checks in
//! [`super::stream`]). Module values are refused (cxltier runs no modules), and so are the types
//! of RDB versions after 10 (Redis 7.2's `SET_LISTPACK`).
//!
//! The checks are those of Redis 7.0 with `sanitize-dump-payload yes`: every length within the
//! bytes left, the structure of ziplists, listpacks, intsets and zipmaps (headers, entry
//! encodings, back lengths, terminators, counts), intsets sorted without repeats, no set member,
//! hash field or sorted set member twice, no NaN score, no empty collection and no empty
//! quicklist node. Some are stricter than Redis where Redis would accept bytes it never writes
//! (a length byte `0xC0` read as a count, a listpack back length spelt in more bytes than
//! needed, text after a score).
//!
//! Untrusted input: nothing is allocated from a claimed count beyond what the remaining bytes
//! can hold (each member takes at least one byte), an LZF string's length is bounded by what its
//! compressed bytes can expand to ([`super::lzf::MAX_EXPANSION`]) and by the caller's largest
//! string, nothing recurses, and the work is linear in the input (repeats are found with a hash
//! table).

use std::borrow::Cow;
use std::hash::BuildHasher;

use super::lzf;
use super::*;

/// Why a value did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The bytes are not a valid value of their type: what is wrong, in words.
    #[error("{0}")]
    Corrupt(String),
    /// A valid value of a type cxltier does not keep (a module's value) or does not
    /// read (a newer RDB version's type).
    #[error("{0}")]
    Unsupported(String),
    /// A string longer than the caller accepts ([`Input::max_string`]).
    #[error("a string of {len} bytes is longer than the largest value ({max} bytes)")]
    TooLarge { len: u64, max: usize },
}

fn corrupt(what: impl Into<String>) -> LoadError {
    LoadError::Corrupt(what.into())
}

type Result<T> = std::result::Result<T, LoadError>;

/// Byte strings kept end to end in one buffer: a list's members, a set's, a sorted set's, or a
/// hash's fields and values alternating. One allocation for the bytes and one word per string,
/// so memory stays a small multiple of the payload whatever the members' sizes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Strings {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Strings {
    pub fn new() -> Strings {
        Strings::default()
    }

    /// Room for `count` strings and `bytes` bytes.
    pub fn with_capacity(count: usize, bytes: usize) -> Strings {
        Strings {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(count),
        }
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The bytes of every string together.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    /// The `i`th string (panics past the end, as slice indexing does).
    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    pub fn push(&mut self, s: &[u8]) {
        self.bytes.extend_from_slice(s);
        self.ends.push(self.bytes.len());
    }

    fn push_int(&mut self, v: i64) {
        let mut buf = itoa::Buffer::new();
        self.push(buf.format(v).as_bytes());
    }

    fn push_entry(&mut self, e: Entry<'_>) {
        match e {
            Entry::Str(s) => self.push(s),
            Entry::Int(v) => self.push_int(v),
        }
    }

    /// Append a string that `write` puts at the end of the buffer; on error nothing is added.
    fn push_with(&mut self, write: impl FnOnce(&mut Vec<u8>) -> Result<()>) -> Result<()> {
        let before = self.bytes.len();
        match write(&mut self.bytes) {
            Ok(()) => {
                self.ends.push(self.bytes.len());
                Ok(())
            }
            Err(e) => {
                self.bytes.truncate(before);
                Err(e)
            }
        }
    }

    /// The index of a string equal to one before it, among those at `first`, `first + step`,
    /// ... (a hash's fields are every other string).
    fn first_repeat(&self, first: usize, step: usize) -> Option<usize> {
        let state = std::collections::hash_map::RandomState::new();
        let mut seen: hashbrown::HashTable<usize> = hashbrown::HashTable::new();
        let wanted = self.len().saturating_sub(first).div_ceil(step);
        seen.reserve(wanted, |&i| state.hash_one(self.get(i)));
        for i in (first..self.len()).step_by(step) {
            let s = self.get(i);
            let h = state.hash_one(s);
            if seen.find(h, |&j| self.get(j) == s).is_some() {
                return Some(i);
            }
            seen.insert_unique(h, i, |&j| state.hash_one(self.get(j)));
        }
        None
    }
}

/// A value as an RDB file or a DUMP payload holds it, validated.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    String(Vec<u8>),
    List(Strings),
    /// Distinct members.
    Set(Strings),
    /// Distinct members, and their scores by index (never NaN).
    ZSet {
        members: Strings,
        scores: Vec<f64>,
    },
    /// Fields and values alternating: `get(2i)` is a field, `get(2i + 1)` its value. Fields
    /// are distinct.
    Hash(Strings),
    /// A stream with its consumer groups.
    Stream(Box<super::stream::Stream>),
}

impl Value {
    /// Redis's name of the type (`TYPE`).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::String(_) => "string",
            Value::List(_) => "list",
            Value::Set(_) => "set",
            Value::ZSet { .. } => "zset",
            Value::Hash(_) => "hash",
            Value::Stream(_) => "stream",
        }
    }

    /// A hash's field-value pairs (none for other types).
    pub fn pairs(&self) -> Vec<(&[u8], &[u8])> {
        match self {
            Value::Hash(s) => (0..s.len() / 2)
                .map(|i| (s.get(2 * i), s.get(2 * i + 1)))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// A cursor over the bytes values are read from.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
    max_string: usize,
}

impl<'a> Input<'a> {
    /// Reading from the start of `bytes`, strings of any length.
    pub fn new(bytes: &'a [u8]) -> Input<'a> {
        Input {
            bytes,
            at: 0,
            max_string: usize::MAX,
        }
    }

    /// Refuse ([`LoadError::TooLarge`]) any string, member or encoded collection longer than
    /// `max` bytes, before it is allocated: the largest value the caller keeps.
    pub fn max_string(mut self, max: usize) -> Input<'a> {
        self.max_string = max;
        self
    }

    /// How many bytes were read.
    pub fn position(&self) -> usize {
        self.at
    }

    /// How many bytes are left.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    pub fn byte(&mut self) -> Result<u8> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| corrupt("the value ends early"))?;
        self.at += 1;
        Ok(b)
    }

    pub fn take(&mut self, n: u64) -> Result<&'a [u8]> {
        if n > self.remaining() as u64 {
            return Err(corrupt(format!(
                "a length of {n} bytes goes past the end ({} left)",
                self.remaining()
            )));
        }
        let s = &self.bytes[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N as u64)?.try_into().expect("N bytes"))
    }

    /// RDB's length encoding, or the string encoding a `0b11` first byte names.
    fn length_or_encoding(&mut self) -> Result<Length> {
        let b = self.byte()?;
        Ok(match b >> 6 {
            0 => Length::Len(u64::from(b & 0x3f)),
            1 => Length::Len(u64::from(b & 0x3f) << 8 | u64::from(self.byte()?)),
            3 => Length::Encoded(b & 0x3f),
            _ if b == 0x80 => Length::Len(u64::from(u32::from_be_bytes(self.array()?))),
            _ if b == 0x81 => Length::Len(u64::from_be_bytes(self.array()?)),
            _ => return Err(corrupt(format!("unknown length encoding 0x{b:02x}"))),
        })
    }

    /// A length or count (an encoded string's marker is an error here).
    pub fn length(&mut self) -> Result<u64> {
        match self.length_or_encoding()? {
            Length::Len(n) => Ok(n),
            Length::Encoded(e) => Err(corrupt(format!(
                "a string encoding ({e}) where a length belongs"
            ))),
        }
    }

    /// A count of items that each take at least `min_bytes` bytes: refused when the bytes left
    /// cannot hold them, so that no loop or allocation follows a count the input cannot back.
    pub(crate) fn count(&mut self, min_bytes: u64) -> Result<u64> {
        let n = self.length()?;
        if n.saturating_mul(min_bytes) > self.remaining() as u64 {
            return Err(corrupt(format!(
                "a count of {n} items, more than the {} bytes left can hold",
                self.remaining()
            )));
        }
        Ok(n)
    }

    /// `n` strings one after the other (`n` checked by [`Input::count`]).
    fn strings(&mut self, n: u64) -> Result<Strings> {
        let mut strings = Strings::with_capacity(n as usize, 0);
        for _ in 0..n {
            strings.push_with(|out| self.string_into(out))?;
        }
        Ok(strings)
    }

    fn check_len(&self, len: u64) -> Result<()> {
        if len > self.max_string as u64 {
            return Err(LoadError::TooLarge {
                len,
                max: self.max_string,
            });
        }
        Ok(())
    }

    /// A string (plain, an integer, or LZF-compressed) appended to `out`.
    pub fn string_into(&mut self, out: &mut Vec<u8>) -> Result<()> {
        match self.length_or_encoding()? {
            Length::Len(n) => {
                self.check_len(n)?;
                out.extend_from_slice(self.take(n)?);
            }
            Length::Encoded(e @ (ENC_INT8 | ENC_INT16 | ENC_INT32)) => {
                let v = match e {
                    ENC_INT8 => i64::from(self.byte()? as i8),
                    ENC_INT16 => i64::from(i16::from_le_bytes(self.array()?)),
                    _ => i64::from(i32::from_le_bytes(self.array()?)),
                };
                out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
            }
            Length::Encoded(ENC_LZF) => {
                let clen = self.length()?;
                let len = self.length()?;
                let compressed = self.take(clen)?;
                self.check_len(len)?;
                lzf::decompress_into(compressed, len as usize, out)
                    .map_err(|e| corrupt(format!("an LZF string of {len} bytes: {e}")))?;
            }
            Length::Encoded(e) => return Err(corrupt(format!("unknown string encoding {e}"))),
        }
        Ok(())
    }

    /// A string as an owned vector.
    pub fn string(&mut self) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        self.string_into(&mut v)?;
        Ok(v)
    }

    /// A string holding an encoded collection (ziplist, listpack, intset, zipmap, a quicklist
    /// node): borrowed from the input unless it was compressed.
    pub(crate) fn blob(&mut self) -> Result<Cow<'a, [u8]>> {
        let save = self.at;
        if let Length::Len(n) = self.length_or_encoding()? {
            self.check_len(n)?;
            return Ok(Cow::Borrowed(self.take(n)?));
        }
        self.at = save;
        Ok(Cow::Owned(self.string()?))
    }
}

enum Length {
    Len(u64),
    Encoded(u8),
}

const ENC_INT8: u8 = 0;
const ENC_INT16: u8 = 1;
const ENC_INT32: u8 = 2;
const ENC_LZF: u8 = 3;

/// One entry of a ziplist or listpack: a string, or an integer kept as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry<'a> {
    Str(&'a [u8]),
    Int(i64),
}

/// Read a value of RDB type `rdb_type` (the type byte already read) at `input`'s position.
pub fn read_value(rdb_type: u8, input: &mut Input<'_>) -> Result<Value> {
    let value = match rdb_type {
        TYPE_STRING => Value::String(input.string()?),
        TYPE_LIST => {
            let n = input.count(1)?;
            Value::List(input.strings(n)?)
        }
        TYPE_SET => {
            let n = input.count(1)?;
            Value::Set(input.strings(n)?)
        }
        TYPE_ZSET | TYPE_ZSET_2 => {
            // A member takes a byte at least, a score one (text) or eight (binary).
            let n = input.count(if rdb_type == TYPE_ZSET { 2 } else { 9 })?;
            let mut members = Strings::with_capacity(n as usize, 0);
            let mut scores = Vec::with_capacity(n as usize);
            for _ in 0..n {
                members.push_with(|out| input.string_into(out))?;
                let score = if rdb_type == TYPE_ZSET_2 {
                    f64::from_le_bytes(input.array()?)
                } else {
                    text_double(input)?
                };
                scores.push(score);
            }
            Value::ZSet { members, scores }
        }
        TYPE_HASH => {
            // Fields and values, alternating.
            let n = input.count(2)?;
            Value::Hash(input.strings(2 * n)?)
        }
        TYPE_LIST_QUICKLIST | TYPE_LIST_QUICKLIST_2 => quicklist(rdb_type, input)?,
        TYPE_HASH_ZIPMAP => Value::Hash(zipmap(&input.blob()?)?),
        TYPE_LIST_ZIPLIST => {
            let mut list = Strings::new();
            ziplist(&input.blob()?, |e| {
                list.push_entry(e);
                Ok(())
            })?;
            Value::List(list)
        }
        TYPE_SET_INTSET => Value::Set(intset(&input.blob()?)?),
        TYPE_ZSET_ZIPLIST | TYPE_ZSET_LISTPACK => {
            let blob = input.blob()?;
            let mut members = Strings::new();
            let mut scores = Vec::new();
            let mut entry = |e: Entry<'_>| {
                if members.len() == scores.len() {
                    members.push_entry(e);
                } else {
                    scores.push(entry_score(e)?);
                }
                Ok(())
            };
            if rdb_type == TYPE_ZSET_ZIPLIST {
                ziplist(&blob, &mut entry)?;
            } else {
                listpack(&blob, &mut entry)?;
            }
            if members.len() != scores.len() {
                return Err(corrupt("a member without a score"));
            }
            Value::ZSet { members, scores }
        }
        TYPE_HASH_ZIPLIST | TYPE_HASH_LISTPACK => {
            let blob = input.blob()?;
            let mut fields = Strings::new();
            let entry = |e: Entry<'_>| {
                fields.push_entry(e);
                Ok(())
            };
            if rdb_type == TYPE_HASH_ZIPLIST {
                ziplist(&blob, entry)?;
            } else {
                listpack(&blob, entry)?;
            }
            if fields.len() % 2 == 1 {
                return Err(corrupt("a field without a value"));
            }
            Value::Hash(fields)
        }
        TYPE_MODULE | TYPE_MODULE_2 => {
            return Err(LoadError::Unsupported(format!(
                "a module's value (RDB type {rdb_type}): cxltier runs no modules"
            )))
        }
        TYPE_STREAM_LISTPACKS | TYPE_STREAM_LISTPACKS_2 => {
            Value::Stream(Box::new(super::stream::read(rdb_type, input)?))
        }
        TYPE_SET_LISTPACK => {
            return Err(LoadError::Unsupported(format!(
                "a set as a listpack (RDB type {rdb_type}) is Redis 7.2's RDB version 11: cxltier reads Redis 7.0's RDB version 10 (where such a set is an intset or a plain set)"
            )))
        }
        LATER_TYPES_FROM.. if rdb_type < 0xf0 => {
            return Err(LoadError::Unsupported(format!(
                "RDB type {rdb_type} belongs to an RDB version after 10 (Redis 7.2 and later): cxltier reads Redis 7.0's RDB version 10"
            )))
        }
        _ => return Err(corrupt(format!("unknown RDB type {rdb_type}"))),
    };
    validate(value)
}

/// Read a type byte, then the value of that type: a DUMP payload's body.
pub fn read_object(input: &mut Input<'_>) -> Result<Value> {
    let t = input.byte()?;
    read_value(t, input)
}

/// The checks every encoding shares: not empty, members and fields not repeated, scores not
/// NaN.
fn validate(value: Value) -> Result<Value> {
    let (strings, step) = match &value {
        // A stream may be empty (Redis keeps one with its last id and groups).
        Value::String(_) | Value::Stream(_) => return Ok(value),
        Value::List(s) => (s, 0),
        Value::Set(s) => (s, 1),
        Value::ZSet { members, scores } => {
            if scores.iter().any(|s| s.is_nan()) {
                return Err(corrupt("a sorted set with a NaN score"));
            }
            (members, 1)
        }
        Value::Hash(s) => (s, 2),
    };
    if strings.is_empty() {
        // Redis refuses an empty key: no RESTORE may create one, or delete one by REPLACE.
        return Err(corrupt(format!("an empty {}", value.type_name())));
    }
    if step > 0 {
        if let Some(i) = strings.first_repeat(0, step) {
            return Err(corrupt(format!(
                "a {} with {:?} twice",
                value.type_name(),
                String::from_utf8_lossy(strings.get(i))
            )));
        }
    }
    Ok(value)
}

/// A score as `RDB_TYPE_ZSET` keeps it: a length byte (253 NaN, 254 +inf, 255 -inf), then the
/// number as text.
fn text_double(input: &mut Input<'_>) -> Result<f64> {
    match input.byte()? {
        253 => Ok(f64::NAN),
        254 => Ok(f64::INFINITY),
        255 => Ok(f64::NEG_INFINITY),
        n => parse_score(input.take(u64::from(n))?),
    }
}

fn parse_score(text: &[u8]) -> Result<f64> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
        .ok_or_else(|| {
            corrupt(format!(
                "a score that is not a number: {:?}",
                String::from_utf8_lossy(text)
            ))
        })
}

fn entry_score(e: Entry<'_>) -> Result<f64> {
    match e {
        Entry::Int(v) => Ok(v as f64),
        Entry::Str(s) => parse_score(s),
    }
}

/// `LIST_QUICKLIST` (ziplist nodes) and `LIST_QUICKLIST_2` (a container kind per node: a
/// listpack, or one member plain).
fn quicklist(rdb_type: u8, input: &mut Input<'_>) -> Result<Value> {
    // A node's container kind (`LIST_QUICKLIST_2`).
    const CONTAINER_PLAIN: u64 = 1;
    const CONTAINER_PACKED: u64 = 2;
    let nodes = input.count(2)?;
    let mut list = Strings::new();
    for _ in 0..nodes {
        let container = if rdb_type == TYPE_LIST_QUICKLIST_2 {
            match input.length()? {
                c @ (CONTAINER_PLAIN | CONTAINER_PACKED) => c,
                c => return Err(corrupt(format!("a quicklist node of container kind {c}"))),
            }
        } else {
            CONTAINER_PACKED
        };
        let node = input.blob()?;
        if node.is_empty() {
            return Err(corrupt("an empty quicklist node"));
        }
        let push = |list: &mut Strings, e: Entry<'_>| {
            list.push_entry(e);
            Ok(())
        };
        match (container, rdb_type) {
            (CONTAINER_PLAIN, _) => list.push(&node),
            (_, TYPE_LIST_QUICKLIST_2) => listpack(&node, |e| push(&mut list, e))?,
            _ => ziplist(&node, |e| push(&mut list, e))?,
        }
        // A node without entries is skipped, as Redis does; a list of none is empty (refused).
    }
    Ok(Value::List(list))
}

/// The back length a listpack entry of `len` bytes ends with: `len` in 7-bit groups, most
/// significant first, every byte but the first with its high bit set.
pub(crate) fn listpack_backlen(len: usize, out: &mut [u8; 5]) -> usize {
    let n = match len {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2097150 => 3,
        2097151..=268435454 => 4,
        _ => 5,
    };
    for (i, slot) in out.iter_mut().take(n).enumerate() {
        let shift = 7 * (n - 1 - i);
        let group = ((len >> shift) & 127) as u8;
        *slot = if i == 0 { group } else { group | 128 };
    }
    n
}

/// Walk a listpack (`lpValidateIntegrity` with `deep`), handing each entry to `entry`.
pub(crate) fn listpack<'a>(
    lp: &'a [u8],
    mut entry: impl FnMut(Entry<'a>) -> Result<()>,
) -> Result<()> {
    let bad = |what: &str| corrupt(format!("a listpack {what}"));
    if lp.len() < 7 {
        return Err(bad("shorter than its header"));
    }
    let total = u32::from_le_bytes(lp[0..4].try_into().expect("4 bytes"));
    if total as usize != lp.len() {
        return Err(bad("whose header's size is not its length"));
    }
    let declared = u16::from_le_bytes(lp[4..6].try_into().expect("2 bytes"));
    let end = lp.len() - 1;
    if lp[end] != 0xff {
        return Err(bad("without its end byte"));
    }
    let mut p = 6;
    let mut count: u64 = 0;
    while lp[p] != 0xff {
        let b = lp[p];
        // The encoding's own bytes (after the first), then the data's.
        let (head, data) = match b {
            0x00..=0x7f => (0, 0),
            0x80..=0xbf => (0, usize::from(b & 0x3f)),
            0xc0..=0xdf => (1, 0),
            0xe0..=0xef => (1, usize::from(b & 0x0f) << 8 | usize::from(lp[p + 1])),
            0xf0 => {
                let len = lp
                    .get(p + 1..p + 5)
                    .filter(|_| p + 5 <= end)
                    .ok_or_else(|| bad("entry header past its end"))?;
                (
                    4,
                    u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize,
                )
            }
            0xf1 => (2, 0),
            0xf2 => (3, 0),
            0xf3 => (4, 0),
            0xf4 => (8, 0),
            _ => return Err(bad(&format!("entry of unknown encoding 0x{b:02x}"))),
        };
        // The first byte after the header must still be inside (the 12-bit length's second
        // byte was read above: `p + 1 <= end` holds since `lp[end]` is the end byte).
        if p + 1 + head > end {
            return Err(bad("entry header past its end"));
        }
        let entry_len = 1 + head + data;
        let mut backlen = [0u8; 5];
        let bl = listpack_backlen(entry_len, &mut backlen);
        let next = p
            .checked_add(entry_len + bl)
            .filter(|&n| n <= end)
            .ok_or_else(|| bad("entry past its end"))?;
        if lp[p + entry_len..next] != backlen[..bl] {
            return Err(bad("entry whose back length does not match"));
        }
        let body = &lp[p + 1..p + 1 + head + data];
        let e = match b {
            0x00..=0x7f => Entry::Int(i64::from(b)),
            0x80..=0xbf | 0xe0..=0xf0 => Entry::Str(&body[head..]),
            0xc0..=0xdf => Entry::Int(signed(u64::from(b & 0x1f) << 8 | u64::from(body[0]), 13)),
            _ => Entry::Int(signed_le(body)),
        };
        entry(e)?;
        count += 1;
        p = next;
    }
    if p != end {
        return Err(bad("whose entries end before its last byte"));
    }
    if declared != u16::MAX && u64::from(declared) != count {
        return Err(bad(&format!(
            "of {count} entries whose header says {declared}"
        )));
    }
    Ok(())
}

/// The two's complement value of a little-endian integer of `bytes.len()` (at most 8) bytes.
fn signed_le(bytes: &[u8]) -> i64 {
    let mut le = [0u8; 8];
    le[..bytes.len()].copy_from_slice(bytes);
    signed(u64::from_le_bytes(le), 8 * bytes.len() as u32)
}

/// The two's complement value of the low `bits` bits of `u`.
fn signed(u: u64, bits: u32) -> i64 {
    if bits >= 64 {
        return u as i64;
    }
    let shift = 64 - bits;
    ((u << shift) as i64) >> shift
}

/// Walk a ziplist (`ziplistValidateIntegrity` with `deep`), handing each entry to `entry`.
fn ziplist(zl: &[u8], mut entry: impl FnMut(Entry<'_>) -> Result<()>) -> Result<()> {
    let bad = |what: &str| corrupt(format!("a ziplist {what}"));
    const HEADER: usize = 10;
    if zl.len() < HEADER + 1 {
        return Err(bad("shorter than its header"));
    }
    let le32 = |at: usize| u32::from_le_bytes(zl[at..at + 4].try_into().expect("4 bytes"));
    if le32(0) as usize != zl.len() {
        return Err(bad("whose header's size is not its length"));
    }
    let tail = le32(4) as usize;
    let end = zl.len() - 1;
    if tail > end {
        return Err(bad("whose tail offset is past its end"));
    }
    let declared = u16::from_le_bytes(zl[8..10].try_into().expect("2 bytes"));
    if zl[end] != 0xff {
        return Err(bad("without its end byte"));
    }
    let mut p = HEADER;
    let mut prev_len = 0usize;
    let mut last = None;
    let mut count: u64 = 0;
    while zl[p] != 0xff {
        let (prevlen_size, prevlen) = if zl[p] < 254 {
            (1, usize::from(zl[p]))
        } else {
            if p + 5 > end {
                return Err(bad("entry header past its end"));
            }
            (5, le32(p + 1) as usize)
        };
        let q = p + prevlen_size;
        if q > end {
            return Err(bad("entry header past its end"));
        }
        let enc = zl[q];
        // Redis masks a string encoding to its top two bits.
        let (len_size, data) = match enc >> 6 {
            0 => (1, usize::from(enc & 0x3f)),
            1 if q < end => (2, usize::from(enc & 0x3f) << 8 | usize::from(zl[q + 1])),
            2 if q + 5 <= end => (
                5,
                u32::from_be_bytes(zl[q + 1..q + 5].try_into().expect("4 bytes")) as usize,
            ),
            1 | 2 => return Err(bad("entry header past its end")),
            _ => match enc {
                0xc0 => (1, 2),
                0xd0 => (1, 4),
                0xe0 => (1, 8),
                0xf0 => (1, 3),
                0xfe => (1, 1),
                0xf1..=0xfd => (1, 0),
                _ => return Err(bad(&format!("entry of unknown encoding 0x{enc:02x}"))),
            },
        };
        let start = q + len_size;
        let next = start
            .checked_add(data)
            .filter(|&n| n <= end)
            .ok_or_else(|| bad("entry past its end"))?;
        if prevlen != prev_len {
            return Err(bad("entry whose previous length is wrong"));
        }
        let body = &zl[start..next];
        let e = match enc {
            0..=0xbf => Entry::Str(body),
            0xf1..=0xfd => Entry::Int(i64::from(enc & 0x0f) - 1),
            _ => Entry::Int(signed_le(body)),
        };
        entry(e)?;
        count += 1;
        prev_len = next - p;
        last = Some(p);
        p = next;
    }
    if p != end {
        return Err(bad("whose entries end before its last byte"));
    }
    if last.is_some_and(|l| l != tail) {
        return Err(bad("whose tail offset is not its last entry"));
    }
    if declared != u16::MAX && u64::from(declared) != count {
        return Err(bad(&format!(
            "of {count} entries whose header says {declared}"
        )));
    }
    Ok(())
}

/// An intset (`intsetValidateIntegrity` with `deep`): its members as decimal text.
fn intset(is: &[u8]) -> Result<Strings> {
    let bad = |what: &str| corrupt(format!("an intset {what}"));
    if is.len() < 8 {
        return Err(bad("shorter than its header"));
    }
    let width = u32::from_le_bytes(is[0..4].try_into().expect("4 bytes")) as usize;
    if !matches!(width, 2 | 4 | 8) {
        return Err(bad(&format!("of {width}-byte integers")));
    }
    let count = u32::from_le_bytes(is[4..8].try_into().expect("4 bytes")) as usize;
    if (count as u64) * (width as u64) + 8 != is.len() as u64 {
        return Err(bad("whose count does not match its length"));
    }
    if count == 0 {
        return Err(corrupt("an empty set"));
    }
    let mut set = Strings::with_capacity(count, count * 4);
    let mut prev = None;
    for raw in is[8..].chunks_exact(width) {
        let v = signed_le(raw);
        if prev.is_some_and(|p| v <= p) {
            return Err(bad("out of order or with a repeat"));
        }
        prev = Some(v);
        set.push_int(v);
    }
    Ok(set)
}

/// A zipmap (`zipmapValidateIntegrity`, Redis 2.4's small hashes): fields and values.
fn zipmap(zm: &[u8]) -> Result<Strings> {
    let bad = |what: &str| corrupt(format!("a zipmap {what}"));
    if zm.len() < 2 {
        return Err(bad("shorter than its header"));
    }
    let end = zm.len() - 1;
    if zm[end] != 0xff {
        return Err(bad("without its end byte"));
    }
    // A length: one byte below 254, else 254 and four bytes (little-endian).
    let length = |p: usize| -> Result<(usize, usize)> {
        match zm[p] {
            b @ 0..=253 => Ok((1, usize::from(b))),
            254 if p + 5 <= end => Ok((
                5,
                u32::from_le_bytes(zm[p + 1..p + 5].try_into().expect("4 bytes")) as usize,
            )),
            _ => Err(bad("length past its end")),
        }
    };
    let mut fields = Strings::new();
    let mut p = 1;
    while zm[p] != 0xff {
        let (s, l_field) = length(p)?;
        let field = p + s;
        p = field
            .checked_add(l_field)
            .filter(|&n| n <= end)
            .ok_or_else(|| bad("field past its end"))?;
        let (s, l) = length(p)?;
        // The free byte: spare room after the value.
        let free = usize::from(zm[p + s]);
        let value = p + s + 1;
        let next = value
            .checked_add(l + free)
            .filter(|&n| n <= end)
            .ok_or_else(|| bad("value past its end"))?;
        fields.push(&zm[field..field + l_field]);
        fields.push(&zm[value..value + l]);
        p = next;
    }
    let count = fields.len() / 2;
    if count == 0 {
        return Err(corrupt("an empty hash"));
    }
    if zm[0] != 254 && usize::from(zm[0]) != count {
        return Err(bad(&format!(
            "of {count} pairs whose header says {}",
            zm[0]
        )));
    }
    Ok(fields)
}

#[cfg(test)]
mod tests;
