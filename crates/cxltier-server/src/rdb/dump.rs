//! DUMP/RESTORE payloads in Redis's format, what `DUMP` of redis-server 7.0 returns and its
//! `RESTORE` takes (so MIGRATE, `redis-cli --cluster import` and other tools move values between
//! Redis and cxltier either way):
//!
//! ```text
//! RDB type (1 byte) | the value's RDB serialization | RDB version (2 bytes LE) | CRC64 (8 bytes LE)
//! ```
//!
//! The CRC64 (Redis's `crc64`, [`super::crc64`]) covers every byte before it, version included.
//! As Redis 7.0's `verifyDumpPayload`: a payload shorter than the footer, of an RDB version
//! above 10, or whose CRC does not match is refused whole ([`PayloadError::Footer`], Redis's
//! "DUMP payload version or checksum are wrong"); a CRC of zero is checked like any other (Redis
//! skips the check only when told to by `DEBUG set-skip-checksum-validation`, which cxltier has
//! not). Then the value is decoded and validated ([`super::load`]); bytes left after it are an
//! error too (Redis ignores them; it never writes any).

use cxltier_store::Store;

use super::load::{read_object, Input, LoadError, Strings, Value};
use super::{crc64, RdbError, RdbWriter, VERSION};

/// DUMP's payload of the value under `key` (a key with its database byte), `None` when there is
/// none a user can name: what DUMP answers and MIGRATE sends to RESTORE.
pub fn key_payload(store: &mut Store, key: &[u8]) -> Result<Option<Vec<u8>>, RdbError> {
    let Some((kind, value)) = store.get(key)?.map(|o| (o.kind, o.value.to_vec())) else {
        return Ok(None);
    };
    let mut w = RdbWriter::bare(Vec::new());
    let name = crate::db::user_key(key);
    // Nothing a user can name when it writes nothing (an emptied collection is deleted).
    if !super::write_value(store, &mut w, key, name, (&kind, &value), |w, t| {
        w.value_type(t)
    })? {
        return Ok(None);
    }
    Ok(Some(w.finish_dump()?))
}

/// The footer: the RDB version and the CRC64.
pub const FOOTER_LEN: usize = 10;

/// Why a payload was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// Too short for a footer, an RDB version above 10, or a CRC that does not match.
    #[error("DUMP payload version or checksum are wrong")]
    Footer,
    /// The checksum holds but the value does not decode.
    #[error(transparent)]
    Value(#[from] LoadError),
}

/// The body of `payload` (the type byte and the value) once its footer checks out.
pub fn body(payload: &[u8]) -> Result<&[u8], PayloadError> {
    if payload.len() < FOOTER_LEN {
        return Err(PayloadError::Footer);
    }
    let (data, crc) = payload.split_at(payload.len() - 8);
    let version = u16::from_le_bytes([data[data.len() - 2], data[data.len() - 1]]);
    if version > VERSION || crc64(0, data).to_le_bytes() != crc {
        return Err(PayloadError::Footer);
    }
    Ok(&data[..data.len() - 2])
}

/// Decode and validate a whole payload, refusing any string longer than `max_string` bytes.
pub fn parse(payload: &[u8], max_string: usize) -> Result<Value, PayloadError> {
    let body = body(payload)?;
    let mut input = Input::new(body).max_string(max_string);
    let value = read_object(&mut input)?;
    if input.remaining() > 0 {
        return Err(
            LoadError::Corrupt(format!("{} bytes after the value", input.remaining())).into(),
        );
    }
    Ok(value)
}

/// `body` (a type byte and a value) with the footer of RDB version `version` and its CRC64: a
/// payload whose checksum holds whatever the body is.
pub fn seal_version(body: &[u8], version: u16) -> Vec<u8> {
    let mut p = Vec::with_capacity(body.len() + FOOTER_LEN);
    p.extend_from_slice(body);
    p.extend_from_slice(&version.to_le_bytes());
    let crc = crc64(0, &p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

/// [`seal_version`] with RDB version 10.
pub fn seal(body: &[u8]) -> Vec<u8> {
    seal_version(body, VERSION)
}

/// The payload of `value` in the encodings DUMP writes (those of the RDB snapshot: `STRING`,
/// `LIST`, `SET`, `ZSET_2`, `HASH`, all of which Redis 7.0 loads).
pub fn payload(value: &Value) -> Vec<u8> {
    let mut w = RdbWriter::bare(Vec::new());
    write(&mut w, value).expect("writing to memory");
    w.finish_dump().expect("writing to memory")
}

fn write(w: &mut RdbWriter<Vec<u8>>, value: &Value) -> std::io::Result<()> {
    let strings = |w: &mut RdbWriter<Vec<u8>>, t: u8, s: &Strings, pairs: bool| {
        w.value_type(t)?;
        w.len((if pairs { s.len() / 2 } else { s.len() }) as u64)?;
        s.iter().try_for_each(|m| w.string(m))
    };
    match value {
        Value::String(s) => {
            w.value_type(super::TYPE_STRING)?;
            w.string(s)
        }
        Value::List(s) => strings(w, super::TYPE_LIST, s, false),
        Value::Set(s) => strings(w, super::TYPE_SET, s, false),
        Value::Hash(s) => strings(w, super::TYPE_HASH, s, true),
        Value::Stream(s) => {
            w.value_type(super::TYPE_STREAM_LISTPACKS_2)?;
            super::stream::write(w, s)
        }
        Value::ZSet { members, scores } => {
            w.value_type(super::TYPE_ZSET_2)?;
            w.len(members.len() as u64)?;
            for (m, s) in members.iter().zip(scores) {
                w.string(m)?;
                w.binary_double(*s)?;
            }
            Ok(())
        }
    }
}
