//! The write stream as Redis 7.0 propagates it: whether it is built (a replica attached once),
//! its offset, the bytes not yet handed to the replicas, the units of operations commands add
//! to it (wrapped in `multi`/`exec` when several), and what the master knows of each replica.
//! Operations come in as the stream carries them: key arguments without their database byte
//! (dispatch strips it, [`crate::dispatch::user_keys`]).

use std::collections::BTreeMap;
use std::time::Instant;

use crate::resp::reply;

/// One command of the stream: its arguments, name first.
pub type Op = Vec<Vec<u8>>;

/// What the master knows of one replica (INFO replication, ROLE, WAIT).
#[derive(Debug, Clone)]
pub struct ReplicaInfo {
    pub ip: String,
    /// The port it listens on (`REPLCONF listening-port`), 0 when not told.
    pub port: u16,
    /// The stream offset it last acknowledged (`REPLCONF ACK`).
    pub ack_offset: u64,
    /// When it last acknowledged (or attached).
    pub ack_time: Instant,
    /// Its snapshot has been sent whole: it follows the stream.
    pub online: bool,
}

/// The master's replication state.
#[derive(Debug, Default)]
pub struct Replication {
    /// A replica attached at least once: from then on the write stream is built (and counted in
    /// the offset) whether or not a replica is attached now, as Redis keeps its backlog.
    pub active: bool,
    /// `master_repl_offset`: bytes of stream produced since the first replica attached.
    pub offset: u64,
    /// The stream bytes not yet handed to the replicas' connections (the last bytes before
    /// `offset`); the server moves them after each turn.
    pub pending: Vec<u8>,
    /// The database the stream last selected; `None` makes the next command select again (a
    /// new replica attached: its stream starts with a `select`).
    seldb: Option<u32>,
    /// The operations of the execution unit running, with their databases.
    unit: Vec<(u32, Op)>,
    /// How deep dispatch is nested (EXEC runs its commands through it): the unit ends at 0.
    depth: u32,
    /// The replicas attached, by connection id.
    pub replicas: BTreeMap<u64, ReplicaInfo>,
    /// A WAIT parked: ask the replicas for an acknowledgement (`REPLCONF GETACK *`) before
    /// the loop sleeps, once.
    pub want_acks: bool,
    /// When the replicas were last sent a PING.
    pub last_ping: Option<Instant>,
}

impl Replication {
    /// Start building the stream (the first replica is attaching). A replica attaching makes
    /// the next command select its database again, as Redis does.
    pub fn attach(&mut self) {
        self.active = true;
        self.seldb = None;
    }

    /// A command begins; returns whether it is the outermost (its end ends the unit).
    pub fn enter(&mut self) -> bool {
        self.depth += 1;
        self.depth == 1
    }

    /// Add `op` to the unit running (Redis's `alsoPropagate`).
    pub fn also_propagate(&mut self, db: u32, op: Op) {
        if self.active {
            self.unit.push((db, op));
        }
    }

    /// The command ends; at the outermost, the unit's operations go into the stream, in
    /// `multi` ... `exec` when there are several and `wrap` allows.
    pub fn leave(&mut self, wrap: bool) {
        self.depth = self.depth.saturating_sub(1);
        if self.depth > 0 || self.unit.is_empty() {
            return;
        }
        let unit = std::mem::take(&mut self.unit);
        let transaction = wrap && unit.len() > 1;
        if transaction {
            self.emit(unit[0].0, &[b"multi".to_vec()]);
        }
        let last_db = unit.last().map_or(0, |u| u.0);
        for (db, op) in unit {
            self.emit(db, &op);
        }
        if transaction {
            self.emit(last_db, &[b"exec".to_vec()]);
        }
    }

    /// Write `op` into the stream now, after a `select` when the database is not the one the
    /// stream last selected.
    pub fn emit(&mut self, db: u32, op: &[Vec<u8>]) {
        if !self.active {
            return;
        }
        if self.seldb != Some(db) {
            let select = [b"select".to_vec(), db.to_string().into_bytes()];
            self.write(&select);
            self.seldb = Some(db);
        }
        self.write(op);
    }

    /// Bytes into the stream as they are: a PING to the replicas, which Redis sends without a
    /// `select` (it is no command of a database).
    pub fn emit_raw(&mut self, op: &[Vec<u8>]) {
        if self.active {
            self.write(op);
        }
    }

    fn write(&mut self, op: &[Vec<u8>]) {
        let before = self.pending.len();
        reply::array(&mut self.pending, op.len());
        for a in op {
            reply::bulk(&mut self.pending, a);
        }
        self.offset += (self.pending.len() - before) as u64;
    }

    /// How many replicas acknowledged at least `offset`.
    pub fn acked(&self, offset: u64) -> u64 {
        self.replicas
            .values()
            .filter(|r| r.online && r.ack_offset >= offset)
            .count() as u64
    }

    /// Replicas whose last acknowledgement is at most `max_lag` seconds old
    /// (`min-replicas-to-write` counts these).
    pub fn good_replicas(&self, max_lag: u64, now: Instant) -> u64 {
        self.replicas
            .values()
            .filter(|r| r.online && now.saturating_duration_since(r.ack_time).as_secs() <= max_lag)
            .count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // Operations as dispatch hands them to the stream: their keys without the database byte.
    use crate::dispatch::user_keys;

    fn text(r: &Replication) -> String {
        String::from_utf8_lossy(&r.pending).into_owned()
    }

    #[test]
    fn nothing_is_built_before_a_replica_attaches() {
        let mut r = Replication::default();
        r.enter();
        r.also_propagate(
            0,
            user_keys(vec![b"set".to_vec(), b"k".to_vec(), b"v".to_vec()]),
        );
        r.leave(true);
        assert!(r.pending.is_empty());
        assert_eq!(r.offset, 0);
    }

    /// A key argument as a handler sees it: its database's byte first (`user_keys` drops it).
    fn key(db: u8, name: &str) -> Vec<u8> {
        crate::db::store_key(db, name.as_bytes())
    }

    #[test]
    fn select_first_then_only_on_a_change_and_offset_counts_bytes() {
        let mut r = Replication::default();
        r.attach();
        r.emit(0, &user_keys(vec![b"del".to_vec(), key(0, "a")]));
        r.emit(0, &user_keys(vec![b"del".to_vec(), key(0, "b")]));
        r.emit(3, &user_keys(vec![b"del".to_vec(), key(3, "c")]));
        assert_eq!(
            text(&r),
            "*2\r\n$6\r\nselect\r\n$1\r\n0\r\n*2\r\n$3\r\ndel\r\n$1\r\na\r\n*2\r\n$3\r\ndel\r\n$1\r\nb\r\n*2\r\n$6\r\nselect\r\n$1\r\n3\r\n*2\r\n$3\r\ndel\r\n$1\r\nc\r\n"
        );
        assert_eq!(r.offset, r.pending.len() as u64);
        // A new replica: the next command selects again.
        r.attach();
        r.pending.clear();
        r.emit(3, &user_keys(vec![b"del".to_vec(), key(3, "d")]));
        assert!(text(&r).starts_with("*2\r\n$6\r\nselect\r\n$1\r\n3\r\n"));
    }

    #[test]
    fn a_unit_of_several_is_wrapped_unless_told_not_to() {
        let mut r = Replication::default();
        r.attach();
        r.emit(0, &user_keys(vec![b"ping".to_vec()]));
        r.pending.clear();
        assert!(r.enter());
        assert!(!r.enter());
        r.also_propagate(0, user_keys(vec![b"incr".to_vec(), key(0, "a")]));
        r.leave(true);
        r.also_propagate(0, user_keys(vec![b"incr".to_vec(), key(0, "b")]));
        assert!(r.pending.is_empty(), "nothing goes before the unit ends");
        r.leave(true);
        assert_eq!(
            text(&r),
            "*1\r\n$5\r\nmulti\r\n*2\r\n$4\r\nincr\r\n$1\r\na\r\n*2\r\n$4\r\nincr\r\n$1\r\nb\r\n*1\r\n$4\r\nexec\r\n"
        );
        r.pending.clear();
        r.enter();
        r.also_propagate(0, user_keys(vec![b"del".to_vec(), key(0, "x")]));
        r.also_propagate(0, user_keys(vec![b"del".to_vec(), key(0, "y")]));
        r.leave(false);
        assert!(!text(&r).contains("multi"));
        // One operation alone is never wrapped.
        r.pending.clear();
        r.enter();
        r.also_propagate(0, user_keys(vec![b"del".to_vec(), key(0, "z")]));
        r.leave(true);
        assert!(!text(&r).contains("multi"));
    }
}
