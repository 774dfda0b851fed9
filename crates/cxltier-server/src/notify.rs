//! Keyspace notifications (`notify-keyspace-events`), as Redis 7.0's notify.c: a command that
//! changes a key announces an event of a class (generic, string, list, ...); when the class is
//! on, the event is published on `__keyspace@<db>__:<key>` (its name as the message, `K`) and on
//! `__keyevent@<db>__:<event>` (the key as the message, `E`).
//!
//! Handlers announce their events with [`Notifier::emit`] (one place per command family, in
//! Redis's order); `crate::dispatch` adds the events that follow from the keyspace alone
//! (`new` for a key the command created, `del` for a collection it emptied, `expired` for the
//! keys the store found past their TTL) and publishes them all once the handler is done. This
//! module is the settings and the events; it imports nothing of the server.

use hashbrown::{HashMap, HashSet};

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

#[cfg(test)]
mod tests {

    use crate::context::*;
    use crate::testdb::*;

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

    /// A RESP3 client subscribed to its own keyspace events gets each before the reply of the
    /// command that caused it, as from Redis 7.0, and under CLIENT REPLY OFF still gets it;
    /// inside EXEC they go after the turn (not into EXEC's array).
    #[test]
    fn own_keyspace_events_come_before_the_reply_and_stay_out_of_exec() {
        let mut db = Db::large();
        db.session.id = 1;
        assert_eq!(db.cmd("CONFIG SET notify-keyspace-events KEA"), "+OK\r\n");
        served(&mut db, "HELLO 3");
        served(&mut db, "SUBSCRIBE __keyspace@0__:k");
        assert_eq!(
            served(&mut db, "SET k v"),
            ">3\r\n$7\r\nmessage\r\n$16\r\n__keyspace@0__:k\r\n$3\r\nset\r\n+OK\r\n"
        );
        served(&mut db, "CLIENT REPLY OFF");
        assert_eq!(
            served(&mut db, "DEL k"),
            ">3\r\n$7\r\nmessage\r\n$16\r\n__keyspace@0__:k\r\n$3\r\ndel\r\n"
        );
        served(&mut db, "CLIENT REPLY ON");
        served(&mut db, "MULTI");
        served(&mut db, "SET k w");
        assert_eq!(served(&mut db, "EXEC"), "*1\r\n+OK\r\n");
        let out: Vec<_> = std::mem::take(&mut db.info.pubsub.outbox);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].to, &*out[0].payload), (1, &b"set"[..]));
    }

    /// CONFIG SET notify-keyspace-events takes Redis's letters and answers Redis's canonical
    /// string; a wrong letter is refused with Redis's message, naming the letters.
    #[test]
    fn notify_keyspace_events_is_set_and_read_back_as_redis_does() {
        let mut db = Db::large();
        let get = |db: &mut Db| db.cmd("CONFIG GET notify-keyspace-events");
        assert!(get(&mut db).ends_with("$0\r\n\r\n"), "{}", get(&mut db));
        assert_eq!(db.cmd("CONFIG SET notify-keyspace-events KEA"), "+OK\r\n");
        assert!(get(&mut db).ends_with("$3\r\nAKE\r\n"), "{}", get(&mut db));
        assert_eq!(
            db.cmd("CONFIG SET notify-keyspace-events Kq"),
            "-ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - Invalid event class character. Use 'Ag$lshzxeKEtmdn'.\r\n"
        );
        assert!(get(&mut db).ends_with("$3\r\nAKE\r\n"));
        // Without K or E nothing is published, whatever the classes.
        assert_eq!(db.cmd("CONFIG SET notify-keyspace-events A"), "+OK\r\n");
        db.cmd("PSUBSCRIBE *");
        db.session = Session::new(2, true);
        db.cmd("SET k v");
        assert!(db.info.pubsub.outbox.is_empty());
    }

    /// Events name the database clients select and the user's key, also after a SWAPDB moved
    /// the database's keys elsewhere in the store.
    #[test]
    fn events_name_the_selected_database_and_the_users_key() {
        let mut db = Db::listening("__key*");
        db.cmd("CONFIG SET notify-keyspace-events KEA");
        db.cmd("SELECT 3");
        db.cmd("SET k v");
        let ev = db.heard();
        assert!(
            ev.contains(&("__keyspace@3__:k".into(), "set".into()))
                && ev.contains(&("__keyevent@3__:set".into(), "k".into())),
            "{ev:?}"
        );
        db.cmd("SWAPDB 3 5");
        db.heard();
        db.cmd("SELECT 5");
        db.cmd("DEL k");
        let ev = db.heard();
        assert!(
            ev.contains(&("__keyspace@5__:k".into(), "del".into())),
            "{ev:?}"
        );
    }

    /// Keys the store expires are announced as `expired` when `x` is on, lazily (a command
    /// finds one) and actively (the store's tick), and not kept at all when it is off.
    #[test]
    fn expired_keys_are_announced_lazily_and_actively() {
        let mut db = Db::listening("__keyevent@0__:*");
        db.cmd("SET off v PX 1");
        db.cmd("CONFIG SET notify-keyspace-events Ex");
        db.cmd("SET lazy v PX 1");
        db.cmd("SET active v PX 1");
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(db.cmd("GET lazy"), "$-1\r\n");
        let events = db.heard();
        // "off" expired before anyone asked: it may be found by the GET's lookup (as here)
        // only if it is one of the command's keys, and it is not.
        assert_eq!(
            events,
            [("__keyevent@0__:expired".to_string(), "lazy".to_string())]
        );
        // The tick samples every key of a small store: "active" and "off" go, "active" told.
        std::thread::sleep(std::time::Duration::from_millis(15));
        db.store.tick().unwrap();
        crate::dispatch::announce_expired(&mut db.store, &mut db.info, false);
        // Events name the store's keys (the database's byte first); publishing names the user's.
        let named: Vec<Vec<u8>> = db.info.notify.take().into_iter().map(|e| e.key).collect();
        assert!(
            named.contains(&crate::db::store_key(0, b"active")),
            "{named:?}"
        );
    }

    /// SET with an EXAT/PXAT already past: Redis adds the key (`new`, `set`, `expire`) and
    /// finds it expired at the next lookup (`expired`); the store takes such a write as a delete,
    /// which the server announced as `del` of an existing key and not at all for a new one.
    #[test]
    fn set_with_a_time_past_is_announced_as_set_then_expired() {
        let mut db = Db::listening("__keyspace@0__:*");
        db.cmd("CONFIG SET notify-keyspace-events AKEn");
        db.cmd("SET old v");
        db.info.pubsub.outbox.clear();
        db.replies(&[
            ("SET fresh v PXAT 1", "+OK\r\n"),
            ("SET old v EXAT 1", "+OK\r\n"),
            ("EXISTS fresh old", ":0\r\n"),
        ]);
        let heard: Vec<String> = db.heard().iter().map(|(c, p)| format!("{c} {p}")).collect();
        assert_eq!(
            heard,
            [
                "__keyspace@0__:fresh new",
                "__keyspace@0__:fresh set",
                "__keyspace@0__:fresh expire",
                "__keyspace@0__:fresh expired",
                "__keyspace@0__:old set",
                "__keyspace@0__:old expire",
                "__keyspace@0__:old expired",
            ]
        );
        assert_eq!(info_field(&mut db, "stats", "expired_keys"), "2");
    }
}
