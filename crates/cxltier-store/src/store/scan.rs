//! Walks in key order: scans with their values (the sequential-scan prefetch) and listings of a
//! database's keys from the index alone.

use std::ops::Bound;

use super::{is_expired, Store};
use crate::index::{Entry, Place};
use crate::keys::{db_key, in_db, is_internal_key};
use crate::{Kind, Result, ScanItem};

impl Store {
    /// Up to `count` live keys `>= start` in byte order, with their objects. The sequential-scan
    /// prefetch hook: when a scan starts where the previous one ended, the keys that follow are
    /// read from NVMe in the same batch.
    pub fn scan(&mut self, start: &[u8], count: usize) -> Result<Vec<ScanItem>> {
        self.scan_within(start, None, count)
    }

    /// [`Store::scan`] within database `db`: `start` and the keys returned are the user's keys
    /// (without the database byte), and the walk stops at the database's last key.
    pub fn scan_db(&mut self, db: u8, start: &[u8], count: usize) -> Result<Vec<ScanItem>> {
        let mut items = self.scan_within(&db_key(db, start), Some(db), count)?;
        for it in &mut items {
            it.key.remove(0);
        }
        Ok(items)
    }

    /// Up to `count` keys of database `db` from `start` on, in byte order, with their kinds (a
    /// big string is a [`Kind::String`], as callers see it): from the index alone, nothing
    /// read from NVMe and no access counted. KEYS, SCAN and RANDOMKEY need no values.
    pub fn scan_db_keys(
        &mut self,
        db: u8,
        start: &[u8],
        count: usize,
    ) -> Result<Vec<(Vec<u8>, Kind)>> {
        // Roots as stored: the collections changed in this batch go out first.
        self.settle_collections()?;
        let now = self.now_ms();
        let from = db_key(db, start);
        Ok(self
            .live_keys_from(&from, Some(db), now)
            .take(count)
            .map(|(k, e)| {
                let kind = match e.kind() {
                    Kind::BigString => Kind::String,
                    k => k,
                };
                (k[1..].to_vec(), kind)
            })
            .collect())
    }

    /// The live user keys from `start` on (in database `db` only, when given).
    fn live_keys_from<'a>(
        &'a self,
        start: &'a [u8],
        db: Option<u8>,
        now: u64,
    ) -> impl Iterator<Item = (&'a [u8], &'a Entry)> + 'a {
        self.index
            .range_from(Bound::Included(start))
            .take_while(move |(k, _)| db.is_none_or(|d| in_db(k, d)))
            .filter(move |(k, e)| !is_expired(e, now) && !is_internal_key(k))
    }

    fn scan_within(&mut self, start: &[u8], db: Option<u8>, count: usize) -> Result<Vec<ScanItem>> {
        // A scan returns roots as stored: the collections changed in this batch go out first.
        self.settle_collections()?;
        let now = self.now_ms();
        let keys: Vec<Vec<u8>> = self
            .live_keys_from(start, db, now)
            .take(count)
            .map(|(k, _)| k.to_vec())
            .collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        self.prefetch(&refs)?;
        // Plain values first, big strings after: reading a big string admits its pieces, which
        // can push values the prefetch found in memory out to NVMe, where `peek` finds only
        // what was staged. Taken in the other order, such a value went missing from the scan
        // (a short batch, which KEYS, SCAN and a snapshot read as the end of the keys).
        let mut slots: Vec<Option<ScanItem>> = Vec::with_capacity(count.min(keys.len()));
        let mut big = Vec::new();
        for k in &keys {
            self.sketch.touch(k);
            if self.peek_kind(k) == Some(Kind::BigString) {
                big.push(slots.len());
                slots.push(None);
                continue;
            }
            let item = match self.peek(k) {
                Some(o) => Some(ScanItem {
                    key: k.clone(),
                    kind: o.kind,
                    value: o.value.to_vec(),
                    expires_at_ms: o.expires_at_ms,
                }),
                None => self.read_unstaged(k)?,
            };
            slots.push(item);
        }
        for i in big {
            let k = &keys[i];
            if let Some(o) = self.get_big(k)? {
                slots[i] = Some(ScanItem {
                    key: k.clone(),
                    kind: o.kind,
                    value: o.value.to_vec(),
                    expires_at_ms: o.expires_at_ms,
                });
            }
        }
        let out: Vec<ScanItem> = slots.into_iter().flatten().collect();
        Ok(out)
    }

    /// A live value on NVMe that is not staged, read from its log copy (nothing admitted, no
    /// access counted): `None` when the key is absent or is not on NVMe alone.
    fn read_unstaged(&mut self, key: &[u8]) -> Result<Option<ScanItem>> {
        let Some(e) = self.index.get(key) else {
            return Ok(None);
        };
        let (Place::Nvme, Some(loc), Some(log)) = (e.place(), e.nv(), self.log.as_mut()) else {
            return Ok(None);
        };
        let (kind, expires) = (e.kind(), e.expires());
        let rec = log.read(loc)?;
        Ok(Some(ScanItem {
            key: key.to_vec(),
            kind,
            value: rec.value,
            expires_at_ms: (expires != 0).then_some(expires),
        }))
    }
}
