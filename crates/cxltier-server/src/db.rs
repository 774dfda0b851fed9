//! Databases (`SELECT`, `SWAPDB`): the numbers clients see and where their keys are kept.
//!
//! A key's identity in the store is its database and its bytes ([`cxltier_store::db_key`]: one
//! byte of database, then the key). The byte is the *physical* database; clients name
//! *logical* ones (`SELECT 3`). [`Databases`] maps one to the other, so that `SWAPDB a b` swaps
//! two entries of the map instead of moving keys: O(1) whatever the databases hold. The map is
//! kept in the store under a key of a database no client can select ([`META_DB`]), written in
//! the same batch as the SWAPDB, so it survives a restart (and, with `--durability always`, a
//! crash after the reply).
//!
//! The server's own registries of keys (WATCH, the keys blocked clients wait on, the keys just
//! written) speak logical databases, as Redis's per-database dictionaries do: a SWAPDB leaves
//! them in place, and a client watching a key of database 1 watches database 1's key whatever
//! is swapped in. Keys go to the store with their physical byte: dispatch puts it on every key
//! argument of a command.

use cxltier_store::keys::push_db_key;
use cxltier_store::{db_key, split_db_key, Kind, Store, StoreError, MAX_DATABASES};

/// Redis's default number of databases.
pub const DEFAULT_DATABASES: usize = 16;
/// The physical database that holds the server's own keys (the map); never selectable.
pub const META_DB: u8 = (MAX_DATABASES - 1) as u8;
/// The most databases `--databases` may ask for: every store database but [`META_DB`].
pub const MAX_SELECTABLE: usize = MAX_DATABASES - 1;
/// The key (in [`META_DB`]) that holds the logical → physical map, one byte per database.
const MAP_KEY: &[u8] = b"database-map";

/// Refuses a number of databases the server cannot keep (1 to [`MAX_SELECTABLE`]), before
/// anything is opened.
pub fn check_count(n: usize) -> Result<(), String> {
    if n == 0 || n > MAX_SELECTABLE {
        return Err(format!(
            "--databases {n}: the server keeps 1 to {MAX_SELECTABLE} databases"
        ));
    }
    Ok(())
}

/// The logical → physical map of the databases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Databases {
    /// `to_physical[logical]`.
    to_physical: Vec<u8>,
    /// `to_logical[physical]`.
    to_logical: Vec<u8>,
}

impl Default for Databases {
    fn default() -> Self {
        Databases::new(DEFAULT_DATABASES)
    }
}

impl Databases {
    /// `n` databases, each kept where its number says (no SWAPDB yet).
    pub fn new(n: usize) -> Databases {
        let n = n.clamp(1, MAX_SELECTABLE);
        let identity: Vec<u8> = (0..n as u8).collect();
        Databases {
            to_physical: identity.clone(),
            to_logical: identity,
        }
    }

    /// How many databases clients may select.
    pub fn count(&self) -> usize {
        self.to_physical.len()
    }

    /// Where logical database `db` (below [`Databases::count`]) is kept.
    pub fn physical(&self, db: usize) -> u8 {
        self.to_physical[db]
    }

    /// The logical database kept at `physical`; `None` for one clients cannot see.
    pub fn logical(&self, physical: u8) -> Option<usize> {
        self.to_logical.get(physical as usize).map(|&l| l as usize)
    }

    /// `db` parsed from a client's argument: a number below [`Databases::count`]. `Err` carries
    /// Redis's reply: not a number, or out of range.
    pub fn parse(&self, arg: &[u8]) -> Result<usize, &'static str> {
        let n = std::str::from_utf8(arg)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or(crate::errors::NOT_INT)?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n < self.count())
            .ok_or(OUT_OF_RANGE)
    }

    /// A store key (with its physical byte) as the registries keep it: with the logical byte.
    pub fn to_logical_key(&self, key: &[u8]) -> Vec<u8> {
        remap_db_byte(&self.to_logical, key)
    }

    /// A registry's key (logical byte) as the store keeps it (physical byte).
    pub fn to_physical_key(&self, key: &[u8]) -> Vec<u8> {
        remap_db_byte(&self.to_physical, key)
    }

    /// `SWAPDB a b`: the two logical databases trade where they are kept.
    pub fn swap(&mut self, a: usize, b: usize) {
        self.to_physical.swap(a, b);
        let (pa, pb) = (self.to_physical[a] as usize, self.to_physical[b] as usize);
        self.to_logical[pa] = a as u8;
        self.to_logical[pb] = b as u8;
    }

    /// Every database where its number says (after FLUSHALL, when nothing is kept anywhere).
    pub fn reset(&mut self) {
        *self = Databases::new(self.count());
    }

    fn is_identity(&self) -> bool {
        self.to_physical
            .iter()
            .enumerate()
            .all(|(i, &p)| i == p as usize)
    }

    /// Write the map to the store (durable with the batch's commit); an identity map is kept as
    /// no key at all, so that a store never swapped holds nothing of the server's.
    pub fn save(&self, store: &mut Store) -> Result<(), StoreError> {
        let key = store_key(META_DB, MAP_KEY);
        if self.is_identity() {
            store.delete(&key)?;
            Ok(())
        } else {
            store.put(&key, Kind::String, &self.to_physical, None)
        }
    }

    /// The map a store keeps, for a server of `n` databases. Refused, with what to do, when
    /// the store's keys would not all be reachable: a database kept at a number `n` or above
    /// holds keys (a smaller `--databases` than the store was written with), or the map kept
    /// is not one.
    pub fn load(store: &mut Store, n: usize) -> Result<Databases, String> {
        check_count(n)?;
        let key = store_key(META_DB, MAP_KEY);
        let kept: Vec<u8> = store
            .get(&key)
            .map_err(|e| format!("reading the database map: {e}"))?
            .map(|o| o.value.to_vec())
            .unwrap_or_default();
        let mut dbs = Databases::new(n);
        // The map kept covers the databases of the server that wrote it; those past it are
        // where their numbers say.
        let mut to_physical: Vec<u8> = (0..n as u8).collect();
        for (logical, &physical) in kept.iter().enumerate() {
            if logical < n {
                to_physical[logical] = physical;
            } else if physical as usize != logical {
                return Err(format!(
                    "the store was written with at least {} databases and database {logical} was swapped (SWAPDB): restart with --databases {} or more",
                    kept.len(),
                    kept.len()
                ));
            }
        }
        let mut seen = vec![false; MAX_DATABASES];
        for &p in &to_physical {
            if p as usize >= n || std::mem::replace(&mut seen[p as usize], true) {
                return Err(format!(
                    "the store's database map {kept:?} does not fit --databases {n}: restart with --databases {} (the number it was written with)",
                    kept.len()
                ));
            }
        }
        for physical in n..MAX_SELECTABLE {
            let keys = store.db_len(physical as u8);
            if keys > 0 {
                return Err(format!(
                    "the store holds {keys} keys in database {physical}, beyond --databases {n}: restart with --databases {} or more",
                    physical + 1
                ));
            }
        }
        for (logical, &physical) in to_physical.iter().enumerate() {
            dbs.to_physical[logical] = physical;
            dbs.to_logical[physical as usize] = logical as u8;
        }
        Ok(dbs)
    }
}

/// `key` with its database byte mapped through `map` (physical to logical or back); as it is
/// when it has no such byte or the byte is past the map.
fn remap_db_byte(map: &[u8], key: &[u8]) -> Vec<u8> {
    match split_db_key(key) {
        Some((from, user)) => match map.get(from as usize) {
            Some(&to) => store_key(to, user),
            None => key.to_vec(),
        },
        None => key.to_vec(),
    }
}

/// Redis's reply to a database number past the last.
pub const OUT_OF_RANGE: &str = "ERR DB index is out of range";

/// A key argument's user bytes: dispatch gave every key argument its database byte, which a
/// reply naming the key (BLPOP, LMPOP, ...) leaves out.
pub fn user_key(key: &[u8]) -> &[u8] {
    split_db_key(key).map_or(&[], |(_, user)| user)
}

/// The store's key for `key` in the database kept at `physical`: the one place the server
/// gives a key its database byte, by the store's own layout ([`cxltier_store::db_key`]).
pub fn store_key(physical: u8, key: &[u8]) -> Vec<u8> {
    db_key(physical, key)
}

/// [`store_key`] appended to `buf`, for dispatch's buffer of a command's keys (one allocation
/// per command, not per key), by the store's own layout ([`cxltier_store::keys::push_db_key`]).
pub fn append_store_key(buf: &mut Vec<u8>, physical: u8, key: &[u8]) {
    push_db_key(buf, physical, key);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_keeps_the_two_maps_inverse() {
        let mut d = Databases::new(4);
        d.swap(0, 3);
        d.swap(3, 1);
        for l in 0..4 {
            assert_eq!(d.logical(d.physical(l)), Some(l));
        }
        assert_eq!((d.physical(0), d.physical(1), d.physical(3)), (3, 0, 1));
        let k = db_key(d.physical(1), b"k");
        assert_eq!(d.to_logical_key(&k), db_key(1, b"k"));
        assert_eq!(d.to_physical_key(&db_key(1, b"k")), k);
        d.reset();
        assert!(d.is_identity());
    }

    #[test]
    fn parse_says_what_is_wrong() {
        let d = Databases::new(16);
        assert_eq!(d.parse(b"15"), Ok(15));
        assert_eq!(d.parse(b"16"), Err(OUT_OF_RANGE));
        assert_eq!(d.parse(b"-1"), Err(OUT_OF_RANGE));
        assert_eq!(d.parse(b"x"), Err(crate::errors::NOT_INT));
    }
}
