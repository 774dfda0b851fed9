//! Client-side caching, as Redis 7.0's `tracking.c` keeps it: the connections that track
//! (`CLIENT TRACKING`) with their modes, the default mode's table of the keys each tracking
//! connection read (capped by `tracking-table-max-keys`, whose overflow is invalidated), BCAST
//! mode's prefixes and the keys written under them since the last turn, and the invalidation
//! messages a write, an expiry, an eviction of the table or a flush leaves: those for the
//! connection whose command caused them go after that command's reply (at the end of the
//! outermost command, so never inside EXEC's array), the others are delivered by the server after
//! the turn, to the tracking connection (a RESP3 `invalidate` push) or to the connection it
//! redirects to (a push, or in RESP2 a message of `__redis__:invalidate`). Keys are the user's,
//! without a database: Redis's table has none. Nothing here costs a write more than a check of
//! two lengths while nobody tracks.

use std::collections::BTreeMap;

use hashbrown::HashMap;

use crate::resp::reply;

/// The channel RESP2 connections subscribe to for redirected invalidations.
pub const CHANNEL: &[u8] = b"__redis__:invalidate";

/// How one connection tracks (`CLIENT TRACKING on ...`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mode {
    /// The connection the messages go to (0: its own).
    pub redirect: u64,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    /// CLIENT CACHING yes (OPTIN) or no (OPTOUT) given for the next command.
    pub caching: bool,
    /// The connection redirected to went away (flag `R`, `broken_redirect`).
    pub broken: bool,
    /// BCAST's prefixes, in order.
    pub prefixes: Vec<Vec<u8>>,
}

/// An invalidation for a tracking connection: keys, or `None` for "everything" (a flush).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalidation {
    pub client: u64,
    pub keys: Option<Vec<Vec<u8>>>,
}

/// One BCAST prefix: its connections and the keys written under it since the last turn, each
/// with the connection that wrote it last (NOLOOP leaves a connection's own writes out).
#[derive(Debug, Default)]
struct Prefix {
    clients: Vec<u64>,
    keys: BTreeMap<Vec<u8>, Option<u64>>,
}

/// Where a message goes and in which form, once the server has looked up the connections.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// Write these bytes to connection `to`.
    Send { to: u64, bytes: Vec<u8> },
    /// Nobody can be told (RESP2 without a subscribed redirection, or no longer tracking).
    Drop,
}

/// What the server knows of a connection when routing: its protocol and whether it subscribes.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub proto: u8,
    pub subscribed: bool,
}

/// The server-wide tracking state.
#[derive(Debug, Default)]
pub struct Tracking {
    /// The connections tracking now, by id.
    pub clients: HashMap<u64, Mode>,
    /// Default mode: each key read, and the connections that read it since its last change.
    table: HashMap<Vec<u8>, Vec<u64>>,
    /// Connections over all keys of the table (`tracking_total_items`).
    items: usize,
    prefixes: BTreeMap<Vec<u8>, Prefix>,
    /// The connection whose command is running (set by dispatch for the outermost command).
    pub current: Option<u64>,
    /// The key arguments of the script running (user keys): what its read-only commands
    /// make its caller remember, as in Redis 7.0 (not the keys those commands name).
    pub script_keys: Option<Vec<Vec<u8>>>,
    /// Messages for the running command's own connection, sent after its reply.
    pending: Vec<Invalidation>,
    /// Messages the server delivers after the turn.
    pub outbox: Vec<Invalidation>,
    /// Times in a row the table was still over its cap after an eviction (Redis's effort).
    over_runs: usize,
}

/// Redis's overlap rule: one prefix of the other.
fn overlap(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

impl Tracking {
    /// Whether a write must look any further: keys are tracked or prefixes broadcast.
    #[inline]
    pub fn active(&self) -> bool {
        !self.table.is_empty() || !self.prefixes.is_empty()
    }

    /// `tracking_total_keys`, `tracking_total_items`, `tracking_total_prefixes`.
    pub fn totals(&self) -> (usize, usize, usize) {
        (self.table.len(), self.items, self.prefixes.len())
    }

    /// `CLIENT TRACKING on` for `id` with `mode`'s options (checked by the caller but for
    /// prefixes): Redis's errors for switching modes and overlapping prefixes, else enabled.
    /// Prefixes given again add to those it has, as in Redis.
    pub fn enable(&mut self, id: u64, mut mode: Mode) -> Result<(), String> {
        if !mode.bcast && !mode.prefixes.is_empty() {
            return Err("ERR PREFIX option requires BCAST mode to be enabled".into());
        }
        if let Some(old) = self.clients.get(&id) {
            if old.bcast != mode.bcast {
                return Err("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.".into());
            }
        }
        if mode.bcast && (mode.optin || mode.optout) {
            return Err("ERR OPTIN and OPTOUT are not compatible with BCAST".into());
        }
        if mode.optin && mode.optout {
            return Err("ERR You can't use both OPTIN and OPTOUT".into());
        }
        if let Some(old) = self.clients.get(&id) {
            if (mode.optin && old.optout) || (mode.optout && old.optin) {
                return Err("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.".into());
            }
        }
        let had: Vec<Vec<u8>> = self
            .clients
            .get(&id)
            .map(|m| m.prefixes.clone())
            .unwrap_or_default();
        if mode.bcast {
            for (i, p) in mode.prefixes.iter().enumerate() {
                if let Some(c) = had.iter().find(|h| overlap(h, p)) {
                    return Err(format!(
                        "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                        String::from_utf8_lossy(p),
                        String::from_utf8_lossy(c)
                    ));
                }
                if let Some(q) = mode.prefixes[i + 1..].iter().find(|q| overlap(p, q)) {
                    return Err(format!(
                        "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                        String::from_utf8_lossy(p),
                        String::from_utf8_lossy(q)
                    ));
                }
            }
            let mut wanted = std::mem::take(&mut mode.prefixes);
            if wanted.is_empty() {
                wanted.push(Vec::new());
            }
            mode.prefixes = had;
            for p in wanted {
                if !mode.prefixes.contains(&p) {
                    let entry = self.prefixes.entry(p.clone()).or_default();
                    if !entry.clients.contains(&id) {
                        entry.clients.push(id);
                    }
                    mode.prefixes.push(p);
                }
            }
        }
        mode.caching = false;
        mode.broken = false;
        self.clients.insert(id, mode);
        Ok(())
    }

    /// `CLIENT TRACKING off`, RESET, or the connection closed: its prefixes go; the keys it
    /// read stay in the table until changed (Redis cleans no ids up either).
    pub fn disable(&mut self, id: u64) {
        let Some(mode) = self.clients.remove(&id) else {
            return;
        };
        for p in mode.prefixes {
            if let Some(entry) = self.prefixes.get_mut(&p) {
                entry.clients.retain(|&c| c != id);
                if entry.clients.is_empty() {
                    self.prefixes.remove(&p);
                }
            }
        }
    }

    /// The keys a read-only command of the running connection read (user keys): remembered for
    /// it in default mode, unless OPTIN without CACHING yes or OPTOUT with CACHING no.
    pub fn remember<'k>(&mut self, keys: impl Iterator<Item = &'k [u8]>) {
        let Some(id) = self.current else {
            return;
        };
        let Some(m) = self.clients.get(&id) else {
            return;
        };
        if m.bcast || (m.optin && !m.caching) || (m.optout && m.caching) {
            return;
        }
        for key in keys {
            let ids = self.table.entry_ref(key).or_default();
            if !ids.contains(&id) {
                ids.push(id);
                self.items += 1;
            }
        }
    }

    /// `key` (a user key) was changed: by the running command's connection (`by_current`),
    /// or by the server (an expiry). The default mode's readers are told once and forgotten;
    /// BCAST prefixes note it for the end of the turn.
    pub fn invalidate(&mut self, key: &[u8], by_current: bool) {
        let by = if by_current { self.current } else { None };
        if !self.prefixes.is_empty() {
            for (p, entry) in self.prefixes.iter_mut() {
                if key.starts_with(p) {
                    entry.keys.insert(key.to_vec(), by);
                }
            }
        }
        self.invalidate_readers(key, by);
    }

    fn invalidate_readers(&mut self, key: &[u8], by: Option<u64>) {
        let Some(ids) = self.table.remove(key) else {
            return;
        };
        self.items -= ids.len();
        for id in ids {
            let Some(m) = self.clients.get(&id) else {
                continue;
            };
            if m.bcast || (m.noloop && by == Some(id)) {
                continue;
            }
            let inv = Invalidation {
                client: id,
                keys: Some(vec![key.to_vec()]),
            };
            if self.current == Some(id) {
                self.pending.push(inv);
            } else {
                self.outbox.push(inv);
            }
        }
    }

    /// FLUSHALL or FLUSHDB: every tracking connection is told everything changed (`null`), and
    /// the table is emptied.
    pub fn flush(&mut self) {
        let mut ids: Vec<u64> = self.clients.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let inv = Invalidation {
                client: id,
                keys: None,
            };
            if self.current == Some(id) {
                self.pending.push(inv);
            } else {
                self.outbox.push(inv);
            }
        }
        self.table = HashMap::new();
        self.items = 0;
    }

    /// The messages for the connection whose outermost command just ended.
    pub fn take_pending(&mut self) -> Vec<Invalidation> {
        std::mem::take(&mut self.pending)
    }

    /// After a command of connection `id` (not CLIENT, outside MULTI): CLIENT CACHING held for
    /// that one command only.
    pub fn command_done(&mut self, id: u64) {
        if let Some(m) = self.clients.get_mut(&id) {
            m.caching = false;
        }
    }

    /// Keep the table within `max` keys (0: no cap), invalidating keys as Redis does: an effort
    /// of 100 keys, growing by 100 each time in a row that was not enough.
    pub fn limit(&mut self, max: usize) {
        if max == 0 || self.table.len() <= max {
            self.over_runs = 0;
            return;
        }
        let effort = 100 * (self.over_runs + 1);
        let victims: Vec<Vec<u8>> = self
            .table
            .keys()
            .take(effort.min(self.table.len() - max))
            .cloned()
            .collect();
        let current = self.current.take();
        for k in victims {
            self.invalidate_readers(&k, None);
        }
        self.current = current;
        if self.table.len() > max {
            self.over_runs += 1;
        } else {
            self.over_runs = 0;
        }
    }

    /// BCAST: the keys written under each prefix since the last turn, as one message per
    /// prefix and connection (NOLOOP leaves out the keys it wrote itself), into the outbox.
    pub fn broadcast(&mut self) {
        for entry in self.prefixes.values_mut() {
            if entry.keys.is_empty() {
                continue;
            }
            let keys = std::mem::take(&mut entry.keys);
            for &id in &entry.clients {
                let noloop = self.clients.get(&id).is_some_and(|m| m.noloop);
                let list: Vec<Vec<u8>> = keys
                    .iter()
                    .filter(|(_, by)| !(noloop && **by == Some(id)))
                    .map(|(k, _)| k.clone())
                    .collect();
                if !list.is_empty() {
                    self.outbox.push(Invalidation {
                        client: id,
                        keys: Some(list),
                    });
                }
            }
        }
    }

    /// Where `inv` goes, framed: to the tracking connection in RESP3, to its redirection (a
    /// push in RESP3, a `__redis__:invalidate` message to a subscribed RESP2 connection), or, when
    /// the redirection is gone, a `tracking-redir-broken` push to a RESP3 tracking connection.
    /// `peer` looks a connection up.
    pub fn route(&mut self, inv: &Invalidation, peer: impl Fn(u64) -> Option<Peer>) -> Route {
        let Some(mode) = self.clients.get_mut(&inv.client) else {
            return Route::Drop;
        };
        let Some(me) = peer(inv.client) else {
            return Route::Drop;
        };
        let mut bytes = Vec::new();
        let to = if mode.redirect != 0 {
            let Some(target) = peer(mode.redirect) else {
                mode.broken = true;
                if me.proto < 3 {
                    return Route::Drop;
                }
                reply::push(&mut bytes, 3, 2);
                reply::bulk(&mut bytes, b"tracking-redir-broken");
                reply::int(&mut bytes, mode.redirect as i64);
                return Route::Send {
                    to: inv.client,
                    bytes,
                };
            };
            if target.proto >= 3 {
                reply::push(&mut bytes, 3, 2);
                reply::bulk(&mut bytes, b"invalidate");
            } else if target.subscribed {
                reply::push(&mut bytes, 2, 3);
                reply::bulk(&mut bytes, b"message");
                reply::bulk(&mut bytes, CHANNEL);
            } else {
                return Route::Drop;
            }
            mode.redirect
        } else {
            if me.proto < 3 {
                return Route::Drop;
            }
            reply::push(&mut bytes, 3, 2);
            reply::bulk(&mut bytes, b"invalidate");
            inv.client
        };
        match &inv.keys {
            Some(keys) => {
                reply::array(&mut bytes, keys.len());
                for k in keys {
                    reply::bulk(&mut bytes, k);
                }
            }
            // The tracking connection's null, as Redis writes it.
            None => reply::null(&mut bytes, me.proto),
        }
        Route::Send { to, bytes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode() -> Mode {
        Mode::default()
    }

    #[test]
    fn prefixes_must_not_overlap_and_need_bcast() {
        let mut t = Tracking::default();
        let p = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect();
        let err = t
            .enable(
                1,
                Mode {
                    prefixes: p(&["a"]),
                    ..mode()
                },
            )
            .unwrap_err();
        assert_eq!(err, "ERR PREFIX option requires BCAST mode to be enabled");
        let bcast = |v| Mode {
            bcast: true,
            prefixes: p(v),
            ..mode()
        };
        let err = t.enable(1, bcast(&["FOO", "FOOBAR"])).unwrap_err();
        assert!(err.starts_with("ERR Prefix 'FOO' overlaps with another provided prefix 'FOOBAR'"));
        t.enable(1, bcast(&["BAR"])).unwrap();
        let err = t.enable(1, bcast(&["BARB"])).unwrap_err();
        assert!(err.starts_with("ERR Prefix 'BARB' overlaps with an existing prefix 'BAR'"));
        t.enable(1, bcast(&["X"])).unwrap();
        assert_eq!(t.clients[&1].prefixes, p(&["BAR", "X"]));
        assert_eq!(t.totals().2, 2);
        t.disable(1);
        assert_eq!(t.totals().2, 0);
        assert!(!t.active());
    }

    #[test]
    fn the_table_is_capped_by_invalidating_keys() {
        let mut t = Tracking::default();
        t.enable(1, mode()).unwrap();
        t.current = Some(1);
        let keys: Vec<Vec<u8>> = (0..250).map(|i| format!("k{i}").into_bytes()).collect();
        t.remember(keys.iter().map(Vec::as_slice));
        t.current = None;
        assert_eq!(t.totals(), (250, 250, 0));
        t.limit(1);
        assert_eq!(t.totals().0, 150, "an effort of 100 keys");
        t.limit(1);
        assert_eq!(t.totals().0, 1, "then 200");
        assert_eq!(t.outbox.len(), 249);
        t.limit(1);
        assert_eq!(t.totals().0, 1);
    }
}
