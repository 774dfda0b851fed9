//! Keyspace notifications (`notify-keyspace-events`), as Redis 7.0's notify.c: a command that
//! changes a key announces an event of a class (generic, string, list, ...); when the class is
//! on, the event is published on `__keyspace@<db>__:<key>` (its name as the message, `K`) and on
//! `__keyevent@<db>__:<event>` (the key as the message, `E`).
//!
//! Handlers announce their events with [`Notifier::emit`] (one place per command family, in
//! Redis's order); `commands::dispatch` adds the events that follow from the keyspace alone
//! (`new` for a key the command created, `del` for a collection it emptied, `expired` for the
//! keys the store found past their TTL) and publishes them all once the handler is done.

use hashbrown::{HashMap, HashSet};

use crate::commands::Ctx;

/// The classes, Redis's bits (server.h), with their letters.
pub mod class {
    pub const KEYSPACE: u32 = 1 << 0;
    pub const KEYEVENT: u32 = 1 << 1;
    pub const GENERIC: u32 = 1 << 2;
    pub const STRING: u32 = 1 << 3;
    pub const LIST: u32 = 1 << 4;
    pub const SET: u32 = 1 << 5;
    pub const HASH: u32 = 1 << 6;
    pub const ZSET: u32 = 1 << 7;
    pub const EXPIRED: u32 = 1 << 8;
    pub const EVICTED: u32 = 1 << 9;
    pub const STREAM: u32 = 1 << 10;
    /// Excluded from `A`, as in Redis.
    pub const KEY_MISS: u32 = 1 << 11;
    pub const MODULE: u32 = 1 << 13;
    pub const NEW: u32 = 1 << 14;
    /// `A`: every class but key misses and new keys.
    pub const ALL: u32 =
        GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;
}

/// Redis's error for a letter that names no class.
pub const INVALID_FLAGS: &str = "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.";

/// The flags a `notify-keyspace-events` string names, or `None` for an unknown letter.
pub fn parse_flags(letters: &[u8]) -> Option<u32> {
    let mut flags = 0;
    for &c in letters {
        flags |= match c {
            b'A' => class::ALL,
            b'g' => class::GENERIC,
            b'$' => class::STRING,
            b'l' => class::LIST,
            b's' => class::SET,
            b'h' => class::HASH,
            b'z' => class::ZSET,
            b'x' => class::EXPIRED,
            b'e' => class::EVICTED,
            b'K' => class::KEYSPACE,
            b'E' => class::KEYEVENT,
            b't' => class::STREAM,
            b'm' => class::KEY_MISS,
            b'd' => class::MODULE,
            b'n' => class::NEW,
            _ => return None,
        };
    }
    Some(flags)
}

/// Redis's canonical string of `flags` (what `CONFIG GET` answers): `A` for all of its classes,
/// else their letters in a fixed order, then `K`, `E`, `m`.
pub fn format_flags(flags: u32) -> String {
    let mut s = String::new();
    if flags & class::ALL == class::ALL {
        s.push('A');
    } else {
        for (bit, letter) in [
            (class::GENERIC, 'g'),
            (class::STRING, '$'),
            (class::LIST, 'l'),
            (class::SET, 's'),
            (class::HASH, 'h'),
            (class::ZSET, 'z'),
            (class::EXPIRED, 'x'),
            (class::EVICTED, 'e'),
            (class::STREAM, 't'),
            (class::MODULE, 'd'),
            (class::NEW, 'n'),
        ] {
            if flags & bit != 0 {
                s.push(letter);
            }
        }
    }
    for (bit, letter) in [
        (class::KEYSPACE, 'K'),
        (class::KEYEVENT, 'E'),
        (class::KEY_MISS, 'm'),
    ] {
        if flags & bit != 0 {
            s.push(letter);
        }
    }
    s
}

/// One event waiting to be published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub class: u32,
    pub name: &'static str,
    pub key: Vec<u8>,
}

/// The flags in force and the events the running command announced. A command may name
/// many keys (a DEL or MSET of 100,000): what was said of a key, and where its first event
/// is, are found through hash maps, so a command's bookkeeping stays linear in its events.
#[derive(Debug, Default)]
pub struct Notifier {
    flags: u32,
    pending: Vec<Event>,
    /// The event names announced per key, for [`Notifier::emitted`].
    said: HashSet<(&'static str, Vec<u8>)>,
    /// Where each key's first event is in `pending`, and the `new` events to put before them.
    first_at: HashMap<Vec<u8>, usize>,
    news: Vec<(usize, Vec<u8>)>,
}

impl Notifier {
    pub fn flags(&self) -> u32 {
        self.flags
    }

    pub fn set_flags(&mut self, flags: u32) {
        self.flags = flags;
    }

    /// Whether events of `class` are published (the class is on, and so is one of `K`, `E`).
    pub fn wants(&self, class: u32) -> bool {
        self.flags & class != 0 && self.flags & (class::KEYSPACE | class::KEYEVENT) != 0
    }

    /// Whether any event at all is published: the per-command bookkeeping is skipped when not.
    pub fn active(&self) -> bool {
        self.wants(!(class::KEYSPACE | class::KEYEVENT))
    }

    /// Announce `name` of `class` on `key`; kept only when the class is published.
    pub fn emit(&mut self, class: u32, name: &'static str, key: &[u8]) {
        if !self.wants(class) {
            return;
        }
        self.first_at.entry_ref(key).or_insert(self.pending.len());
        self.said.insert((name, key.to_vec()));
        self.pending.push(Event {
            class,
            name,
            key: key.to_vec(),
        });
    }

    /// Whether the running command announced `name` on `key` already.
    pub(crate) fn emitted(&self, name: &'static str, key: &[u8]) -> bool {
        !self.said.is_empty() && self.said.contains(&(name, key.to_vec()))
    }

    /// Put a `new` event for `key` before the command's first event on it (Redis announces a
    /// key's creation inside dbAdd, before the command's own event), or last when there is none.
    pub(crate) fn insert_new(&mut self, key: &[u8]) {
        if !self.wants(class::NEW) {
            return;
        }
        let at = self
            .first_at
            .get(key)
            .copied()
            .unwrap_or(self.pending.len());
        self.said.insert(("new", key.to_vec()));
        self.news.push((at, key.to_vec()));
    }

    /// The command's events in order, `new` events in their places; the notifier is empty
    /// after.
    pub(crate) fn take(&mut self) -> Vec<Event> {
        self.said.clear();
        self.first_at.clear();
        let pending = std::mem::take(&mut self.pending);
        if self.news.is_empty() {
            return pending;
        }
        let mut news = std::mem::take(&mut self.news);
        // Stable: two new keys before one place keep the order they were found in.
        news.sort_by_key(|(at, _)| *at);
        let mut news = news.into_iter().peekable();
        let mut out = Vec::with_capacity(pending.len() + news.len());
        for (i, e) in pending.into_iter().enumerate() {
            while let Some((_, key)) = news.next_if(|(at, _)| *at <= i) {
                out.push(new_event(key));
            }
            out.push(e);
        }
        out.extend(news.map(|(_, key)| new_event(key)));
        out
    }
}

fn new_event(key: Vec<u8>) -> Event {
    Event {
        class: class::NEW,
        name: "new",
        key,
    }
}

/// The channels of one event on `key` (the user's) of database `db` (the number clients
/// select): `__keyspace@<db>__:<key>` → event name (when `K` is on) and
/// `__keyevent@<db>__:<event>` → key (when `E` is on), in that order.
pub(crate) fn channels(flags: u32, db: u32, name: &str, key: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::with_capacity(2);
    if flags & class::KEYSPACE != 0 {
        let mut ch = format!("__keyspace@{db}__:").into_bytes();
        ch.extend_from_slice(key);
        out.push((ch, name.as_bytes().to_vec()));
    }
    if flags & class::KEYEVENT != 0 {
        let ch = format!("__keyevent@{db}__:{name}").into_bytes();
        out.push((ch, key.to_vec()));
    }
    out
}

/// Announce the keys the store found past their TTL since it was last asked (`expired`), and
/// replicate them (`crate::commands::drain_expired`); `in_command`: a command is running.
pub(crate) fn announce_expired(
    store: &mut cxltier_store::Store,
    info: &mut crate::commands::ServerInfo,
    in_command: bool,
) {
    crate::commands::drain_expired(store, info, in_command);
}

/// After a command's handler: the events that follow from the keyspace (`new` for a key it
/// created, `del` for one it removed without saying how, `expired` for keys found past their
/// TTL on the way), then every event published. `existed` says which of the command's keys
/// existed before it ran, and `reads` whether it is a read-only command (its keys that were
/// missing are `keymiss` events, when its handler did not say so already); `reply_at` is where
/// its reply starts in the output.
pub(crate) fn finish_command(
    ctx: &mut Ctx<'_>,
    existed: &[(&[u8], bool)],
    reads: bool,
    reply_at: usize,
) {
    // Which keys exist now, before the expiries are announced: a key whose TTL ran out since
    // the handler is then said `expired`, not `del`.
    let now: Vec<bool> = existed.iter().map(|(k, _)| ctx.store.contains(k)).collect();
    announce_expired(ctx.store, ctx.info, true);
    if reads && ctx.info.notify.wants(class::KEY_MISS) {
        for &(key, before) in existed {
            if !before && !ctx.info.notify.emitted("keymiss", key) {
                ctx.info.notify.emit(class::KEY_MISS, "keymiss", key);
            }
        }
    }
    for (&(key, before), now) in existed.iter().zip(now) {
        let n = &mut ctx.info.notify;
        match (before, now) {
            (false, true) if !n.emitted("new", key) => n.insert_new(key),
            (true, false)
                if !["del", "rename_from", "move_from", "expired"]
                    .iter()
                    .any(|e| n.emitted(e, key)) =>
            {
                n.emit(class::GENERIC, "del", key)
            }
            _ => {}
        }
    }
    let events = ctx.info.notify.take();
    if events.is_empty() {
        return;
    }
    // A connection subscribed to its own events (RESP3) gets them before the command's reply,
    // as from Redis 7.0; inside EXEC they would land in EXEC's array: they go after the turn.
    let me = (!ctx.session.in_exec).then_some(ctx.session.id);
    let mut mine = Vec::new();
    publish(ctx.info, &events, me, ctx.session.proto, &mut mine);
    if !mine.is_empty() {
        let len = mine.len();
        ctx.out.splice(reply_at..reply_at, mine);
        for r in &mut ctx.session.pushed {
            if r.start >= reply_at {
                *r = r.start + len..r.end + len;
            }
        }
        ctx.session.pushed.push(reply_at..reply_at + len);
    }
}

/// Publish `events` to their subscribers: the messages for connection `me` are written to
/// `mine` in its protocol `proto`, the others left in the outbox for the server. Each event's
/// key is the store's (its physical database's byte first): the database named is the one
/// clients select for it (after any SWAPDB), the key the user's.
pub(crate) fn publish(
    info: &mut crate::commands::ServerInfo,
    events: &[Event],
    me: Option<u64>,
    proto: u8,
    mine: &mut Vec<u8>,
) {
    let flags = info.notify.flags();
    for e in events {
        let logical = info.dbs.to_logical_key(&e.key);
        let Some((&db, key)) = logical.split_first() else {
            continue;
        };
        for (channel, payload) in channels(flags, u32::from(db), e.name, key) {
            for d in crate::pubsub::deliveries(&info.pubsub, &channel, &payload) {
                if Some(d.to) == me {
                    crate::pubsub::write_message(mine, proto, &d);
                } else {
                    info.pubsub.outbox.push(d);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_and_print_as_redis_does() {
        // Redis 7.0.15's CONFIG GET after CONFIG SET of each string.
        for (set, get) in [
            ("", ""),
            ("KEA", "AKE"),
            ("gKE", "gKE"),
            ("$lshzxeKE", "$lshzxeKE"),
            ("KA", "AK"),
            ("EA", "AE"),
            ("En", "nE"),
            ("Kgm", "gKm"),
            ("AnK", "AK"),
            ("g$lshzxetdKE", "AKE"),
        ] {
            let flags = parse_flags(set.as_bytes()).unwrap_or_else(|| panic!("{set} refused"));
            assert_eq!(format_flags(flags), get, "CONFIG SET {set:?}");
        }
        assert_eq!(parse_flags(b"KEq"), None);
        assert_eq!(parse_flags(b"a"), None);
    }

    /// A command of many keys (MSET of 100,000 new ones) is announced in linear time, each
    /// `new` before its key's `set`: the old list searches took quadratic time.
    #[test]
    fn many_new_keys_are_placed_in_linear_time() {
        let mut n = Notifier::default();
        n.set_flags(class::ALL | class::NEW | class::KEYEVENT);
        let keys: Vec<Vec<u8>> = (0..100_000).map(|i| format!("k{i}").into_bytes()).collect();
        let t = std::time::Instant::now();
        for k in &keys {
            n.emit(class::STRING, "set", k);
        }
        for k in keys.iter().rev() {
            assert!(!n.emitted("new", k));
            n.insert_new(k);
            assert!(n.emitted("new", k));
        }
        let events = n.take();
        assert_eq!(events.len(), 200_000);
        for (pair, k) in events.chunks(2).zip(&keys) {
            assert_eq!((pair[0].name, &pair[0].key), ("new", k));
            assert_eq!((pair[1].name, &pair[1].key), ("set", k));
        }
        // Quadratic work would take minutes here; linear work takes well under a second even
        // in a debug build on a loaded machine (a bound on a blow-up, not a timing).
        assert!(t.elapsed() < std::time::Duration::from_secs(20));
        assert!(!n.emitted("set", b"k0"), "take leaves nothing behind");
    }

    #[test]
    fn nothing_is_kept_without_k_or_e() {
        let mut n = Notifier::default();
        n.set_flags(class::ALL);
        assert!(!n.active());
        n.emit(class::GENERIC, "del", b"k");
        assert!(n.take().is_empty());
        n.set_flags(class::LIST | class::KEYEVENT);
        n.emit(class::GENERIC, "del", b"k");
        n.emit(class::LIST, "lpush", b"k");
        n.insert_new(b"k");
        assert_eq!(
            n.take().iter().map(|e| e.name).collect::<Vec<_>>(),
            ["lpush"]
        );
        n.set_flags(class::LIST | class::NEW | class::KEYSPACE);
        n.emit(class::LIST, "lpush", b"a");
        n.emit(class::LIST, "lpush", b"k");
        n.insert_new(b"k");
        assert_eq!(
            n.take().iter().map(|e| e.name).collect::<Vec<_>>(),
            ["lpush", "new", "lpush"]
        );
    }
}
