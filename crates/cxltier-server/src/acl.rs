//! Redis 7.0's access control lists: the users (on or off, passwords kept as SHA-256 hex,
//! `nopass`), what each may run (a bitmap over the command table and its subcommands, allowed
//! first arguments, categories), the keys (`~pattern`, `%R~`, `%W~`) and channels (`&pattern`)
//! it may touch, the rule parser of `ACL SETUSER` with Redis's errors, the rules written back
//! as `ACL LIST` shows them, and `ACL LOG`'s entries. State the handlers share, below them: it
//! imports nothing of the crate but `glob`, and knows the command table only as the
//! [`Catalog`] it is handed (built by the table from Redis's categories).
//!
//! Rules arrive from clients (`ACL SETUSER`) and files (`ACL LOAD`): each rule is parsed in time
//! linear in its length, repeated patterns and passwords are found by hashing, and what a user
//! holds is bounded by the rules it was given.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use hashbrown::{HashMap, HashSet};
use sha2::{Digest, Sha256};

/// Redis's ACL categories, in its order (`ACL CAT`, and the order rules are described in).
pub const CATEGORIES: [&str; 21] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// The bit of category `name` (without its `@`, any case).
pub fn category_bit(name: &[u8]) -> Option<u32> {
    CATEGORIES
        .iter()
        .position(|c| c.as_bytes().eq_ignore_ascii_case(name))
        .map(|i| 1 << i)
}

/// What a key pattern allows: reading, writing or both (`~` is both).
pub const READ: u8 = 1;
pub const WRITE: u8 = 2;

/// One command or subcommand as the ACL knows it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Lower case; a subcommand's is `container|sub`.
    pub name: String,
    pub parent: Option<u32>,
    pub subs: Vec<u32>,
    /// Bits of [`CATEGORIES`].
    pub categories: u32,
}

/// The commands rules may name: the table's, each with an id (its place here).
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    entries: Vec<Entry>,
    by_name: HashMap<String, u32>,
    /// The ids in each category, so that a `+@category` rule costs its commands alone.
    by_category: Vec<Vec<u32>>,
}

impl Catalog {
    /// Add a command (or a subcommand of `parent`) named `name` (`container|sub` for a
    /// subcommand) in `categories` (`@read`, ...); its id.
    pub fn add(&mut self, name: &str, parent: Option<u32>, categories: &[&str]) -> u32 {
        let id = self.entries.len() as u32;
        let cats = categories
            .iter()
            .filter_map(|c| category_bit(c.trim_start_matches('@').as_bytes()))
            .fold(0, |a, b| a | b);
        let name = name.to_ascii_lowercase();
        self.by_name.insert(name.clone(), id);
        self.by_category.resize(CATEGORIES.len(), Vec::new());
        for (j, ids) in self.by_category.iter_mut().enumerate() {
            if cats & (1 << j) != 0 {
                ids.push(id);
            }
        }
        self.entries.push(Entry {
            name,
            parent,
            subs: Vec::new(),
            categories: cats,
        });
        if let Some(p) = parent {
            self.entries[p as usize].subs.push(id);
        }
        id
    }

    /// The command or subcommand (`config|get`) named `name`, any case.
    pub fn id(&self, name: &[u8]) -> Option<u32> {
        let name = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
        self.by_name.get(&name).copied()
    }

    /// The id of subcommand `sub` of command `id`.
    pub fn sub_id(&self, id: u32, sub: &str) -> Option<u32> {
        self.entries
            .get(id as usize)?
            .subs
            .iter()
            .copied()
            .find(|&s| {
                self.entries[s as usize]
                    .name
                    .rsplit('|')
                    .next()
                    .is_some_and(|n| n.eq_ignore_ascii_case(sub))
            })
    }

    pub fn entry(&self, id: u32) -> &Entry {
        &self.entries[id as usize]
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The top-level commands, each followed by its subcommands (the order rules are written).
    fn in_order(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.parent.is_none())
            .flat_map(|(i, e)| std::iter::once(i as u32).chain(e.subs.iter().copied()))
    }
}

/// Items in the order they were added, each once, found by hashing (so that a hostile list of
/// rules costs linear time); removal leaves a hole that [`Ordered::compact`] closes.
#[derive(Debug, Clone)]
struct Ordered<T: std::hash::Hash + Eq + Clone> {
    items: Vec<Option<T>>,
    at: HashMap<T, usize>,
}

impl<T: std::hash::Hash + Eq + Clone> Default for Ordered<T> {
    fn default() -> Self {
        Ordered {
            items: Vec::new(),
            at: HashMap::new(),
        }
    }
}

impl<T: std::hash::Hash + Eq + Clone> Ordered<T> {
    /// Its place: the one it had, or a new one at the end.
    fn insert(&mut self, t: T) -> usize {
        if let Some(&i) = self.at.get(&t) {
            return i;
        }
        self.items.push(Some(t.clone()));
        self.at.insert(t, self.items.len() - 1);
        self.items.len() - 1
    }

    fn remove(&mut self, t: &T) -> bool {
        match self.at.remove(t) {
            Some(i) => {
                self.items[i] = None;
                true
            }
            None => false,
        }
    }

    fn clear(&mut self) {
        self.items.clear();
        self.at.clear();
    }

    fn iter(&self) -> impl Iterator<Item = (usize, &T)> {
        self.items
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.as_ref().map(|t| (i, t)))
    }

    fn len(&self) -> usize {
        self.at.len()
    }

    /// Close the holes removals left; `keep` is told each item's old and new place.
    fn compact(&mut self, mut moved: impl FnMut(usize, usize)) {
        if self.items.len() == self.at.len() {
            return;
        }
        let mut n = 0;
        for i in 0..self.items.len() {
            if let Some(t) = self.items[i].take() {
                moved(i, n);
                self.at.insert(t.clone(), n);
                self.items[n] = Some(t);
                n += 1;
            }
        }
        self.items.truncate(n);
    }
}

/// A bitmap over the catalog's ids; ids past its words are `fill` (all set after `+@all`,
/// all clear after `-@all`), so it needs no catalog to be all or nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Bits {
    words: Vec<u64>,
    fill: bool,
}

impl Bits {
    fn all(fill: bool) -> Bits {
        Bits {
            words: Vec::new(),
            fill,
        }
    }

    fn get(&self, id: u32) -> bool {
        let (w, b) = (id as usize / 64, id % 64);
        self.words
            .get(w)
            .map_or(self.fill, |word| word & (1 << b) != 0)
    }

    fn set(&mut self, id: u32, v: bool) {
        let (w, b) = (id as usize / 64, id % 64);
        if w >= self.words.len() {
            if v == self.fill {
                return;
            }
            self.words
                .resize(w + 1, if self.fill { u64::MAX } else { 0 });
        }
        if v {
            self.words[w] |= 1 << b;
        } else {
            self.words[w] &= !(1 << b);
        }
    }
}

/// Why a rule was refused (Redis's errno of `ACLSetUser`), as `ACL SETUSER` words it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleError {
    Unknown,
    Syntax,
    KeyAfterAll,
    ChannelAfterAll,
    NoSuchPassword,
    BadHash,
    SubcommandFirstArg,
    Selectors,
}

impl RuleError {
    pub fn message(self) -> &'static str {
        match self {
            RuleError::Unknown => "Unknown command or category name in ACL",
            RuleError::Syntax => "Syntax error",
            RuleError::KeyAfterAll => "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns",
            RuleError::ChannelAfterAll => "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels",
            RuleError::NoSuchPassword => "The password you are trying to remove from the user does not exist",
            RuleError::BadHash => "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
            RuleError::SubcommandFirstArg => "Allowing first-arg of a subcommand is not supported",
            RuleError::Selectors => "Selectors are not supported by this server",
        }
    }
}

/// What a user may run and touch (Redis's root selector).
#[derive(Debug, Clone)]
pub struct Perms {
    /// Every command, with no exception since `+@all` (Redis's ALLCOMMANDS flag).
    all_commands: bool,
    /// The rules began with `+@all` (commands added later would be allowed): they are
    /// described from `+@all` rather than `-@all`.
    future: bool,
    bits: Bits,
    /// Allowed first arguments of commands otherwise denied (`+select|0`), by command id; the
    /// lower-case spellings find repeats.
    first_args: HashMap<u32, (Vec<String>, HashSet<String>)>,
    all_keys: bool,
    keys: Ordered<Vec<u8>>,
    /// [`READ`] and [`WRITE`] of each key pattern, by its place in `keys`.
    key_flags: Vec<u8>,
    all_channels: bool,
    channels: Ordered<Vec<u8>>,
}

impl Perms {
    fn none(all_channels: bool) -> Perms {
        Perms {
            all_commands: false,
            future: false,
            bits: Bits::all(false),
            first_args: HashMap::new(),
            all_keys: false,
            keys: Ordered::default(),
            key_flags: Vec::new(),
            all_channels,
            channels: Ordered::default(),
        }
    }

    /// Everything: no check needs to be made.
    pub fn unrestricted(&self) -> bool {
        self.all_commands && self.all_keys && self.all_channels
    }

    pub fn all_keys(&self) -> bool {
        self.all_keys
    }

    pub fn all_channels(&self) -> bool {
        self.all_channels
    }

    /// Allow or deny a command; a container's subcommands follow it.
    fn change(&mut self, catalog: &Catalog, id: u32, allow: bool) {
        self.set_bit(id, allow);
        self.first_args.remove(&id);
        for &s in &catalog.entry(id).subs {
            self.set_bit(s, allow);
        }
    }

    fn set_bit(&mut self, id: u32, allow: bool) {
        self.bits.set(id, allow);
        if !allow {
            self.all_commands = false;
        }
    }

    fn change_category(&mut self, catalog: &Catalog, cat: u32, allow: bool) {
        let j = cat.trailing_zeros() as usize;
        for &id in catalog.by_category.get(j).map_or(&[][..], Vec::as_slice) {
            self.change(catalog, id, allow);
        }
    }

    /// One rule of a selector (Redis's `ACLSetSelector`).
    fn apply(&mut self, catalog: &Catalog, op: &[u8]) -> Result<(), RuleError> {
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if is("allkeys") || op == b"~*" {
            self.all_keys = true;
            self.keys.clear();
            self.key_flags.clear();
        } else if is("resetkeys") {
            self.all_keys = false;
            self.keys.clear();
            self.key_flags.clear();
        } else if is("allchannels") || op == b"&*" {
            self.all_channels = true;
            self.channels.clear();
        } else if is("resetchannels") {
            self.all_channels = false;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.bits = Bits::all(true);
            self.all_commands = true;
            self.future = true;
            self.first_args.clear();
        } else if is("nocommands") || is("-@all") {
            self.bits = Bits::all(false);
            self.all_commands = false;
            self.future = false;
            self.first_args.clear();
        } else if op[0] == b'~' || op[0] == b'%' {
            if self.all_keys {
                return Err(RuleError::KeyAfterAll);
            }
            let (flags, offset) = if op[0] == b'%' {
                let mut flags = 0;
                let mut offset = 1;
                let mut ok = true;
                while offset < op.len() {
                    match op[offset].to_ascii_uppercase() {
                        b'R' if flags & READ == 0 => flags |= READ,
                        b'W' if flags & WRITE == 0 => flags |= WRITE,
                        b'~' => {
                            offset += 1;
                            break;
                        }
                        _ => {
                            ok = false;
                            break;
                        }
                    }
                    offset += 1;
                }
                if flags == 0 || !ok {
                    return Err(RuleError::Syntax);
                }
                (flags, offset)
            } else {
                (READ | WRITE, 1)
            };
            let pattern = op.get(offset..).unwrap_or_default();
            if has_spaces(pattern) {
                return Err(RuleError::Syntax);
            }
            let at = self.keys.insert(pattern.to_vec());
            if at == self.key_flags.len() {
                self.key_flags.push(flags);
            } else {
                self.key_flags[at] |= flags;
            }
            self.all_keys = false;
        } else if op[0] == b'&' {
            if self.all_channels {
                return Err(RuleError::ChannelAfterAll);
            }
            if has_spaces(&op[1..]) {
                return Err(RuleError::Syntax);
            }
            self.channels.insert(op[1..].to_vec());
            self.all_channels = false;
        } else if op[0] == b'+' && op.get(1) != Some(&b'@') {
            let name = &op[1..];
            match name.iter().rposition(|&b| b == b'|') {
                None => {
                    let id = catalog.id(name).ok_or(RuleError::Unknown)?;
                    self.change(catalog, id, true);
                }
                Some(bar) => {
                    let id = catalog.id(&name[..bar]).ok_or(RuleError::Unknown)?;
                    if catalog.entry(id).parent.is_some() {
                        return Err(RuleError::SubcommandFirstArg);
                    }
                    let sub = &name[bar + 1..];
                    if sub.is_empty() {
                        return Err(RuleError::Syntax);
                    }
                    if !catalog.entry(id).subs.is_empty() {
                        let sub_id = catalog.id(name).ok_or(RuleError::Unknown)?;
                        self.change(catalog, sub_id, true);
                    } else {
                        let sub = String::from_utf8_lossy(sub).into_owned();
                        let (list, seen) = self.first_args.entry(id).or_default();
                        if seen.insert(sub.to_ascii_lowercase()) {
                            list.push(sub);
                        }
                    }
                }
            }
        } else if op[0] == b'-' && op.get(1) != Some(&b'@') {
            let id = catalog.id(&op[1..]).ok_or(RuleError::Unknown)?;
            self.change(catalog, id, false);
        } else if (op[0] == b'+' || op[0] == b'-') && op.get(1) == Some(&b'@') {
            let cat = category_bit(&op[2..]).ok_or(RuleError::Unknown)?;
            self.change_category(catalog, cat, op[0] == b'+');
        } else {
            return Err(RuleError::Syntax);
        }
        Ok(())
    }

    /// Whether command `id` may run with these arguments (name first): its bit, or an allowed
    /// first argument (`+select|0`; a subcommand's is the argument after it).
    pub fn allows_command(&self, catalog: &Catalog, id: u32, args: &[&[u8]]) -> bool {
        if self.all_commands || self.bits.get(id) {
            return true;
        }
        let Some((list, _)) = self.first_args.get(&id) else {
            return false;
        };
        let at = if catalog.entry(id).parent.is_some() {
            2
        } else {
            1
        };
        args.get(at)
            .is_some_and(|a| list.iter().any(|s| s.as_bytes().eq_ignore_ascii_case(a)))
    }

    /// Whether `key` may be touched as `need` asks ([`READ`], [`WRITE`], both, or neither:
    /// then any pattern that matches will do).
    pub fn allows_key(&self, key: &[u8], need: u8) -> bool {
        self.all_keys
            || self.keys.iter().any(|(i, p)| {
                self.key_flags[i] & need == need && crate::glob::matches(p, key, false)
            })
    }

    /// Whether `channel` may be published or subscribed to; a pattern (PSUBSCRIBE) must be one
    /// of the user's patterns exactly.
    pub fn allows_channel(&self, channel: &[u8], is_pattern: bool) -> bool {
        self.all_channels
            || self.channels.iter().any(|(_, p)| {
                if is_pattern {
                    p == channel
                } else {
                    crate::glob::matches(p, channel, false)
                }
            })
    }

    /// The command rules, as Redis writes them: `+@all` or `-@all`, the categories that fit
    /// best, then single commands and first arguments (`ACLDescribeSelectorCommandRules`).
    pub fn describe_commands(&self, catalog: &Catalog) -> String {
        let additive = !self.future;
        let mut rules = String::from(if additive { "-@all " } else { "+@all " });
        let mut fake = Perms::none(false);
        fake.bits = Bits::all(!additive);
        let mut temp = Perms::none(false);
        temp.bits = self.bits.clone();
        let mut applied = [false; CATEGORIES.len()];
        loop {
            let mut best = None;
            let (mut mindiff, mut maxsame) = (u64::MAX, 0u64);
            for (j, _) in CATEGORIES.iter().enumerate() {
                if applied[j] {
                    continue;
                }
                let (mut on, mut off) = (0u64, 0u64);
                for &e in catalog.by_category.get(j).map_or(&[][..], Vec::as_slice) {
                    if temp.bits.get(e) {
                        on += 1;
                    } else {
                        off += 1;
                    }
                }
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < mindiff || (diff == mindiff && same > maxsame)) {
                    best = Some(j);
                    mindiff = diff;
                    maxsame = same;
                }
            }
            let Some(j) = best else { break };
            fake.change_category(catalog, 1 << j, additive);
            temp.change_category(catalog, 1 << j, !additive);
            rules.push_str(if additive { "+@" } else { "-@" });
            rules.push_str(CATEGORIES[j]);
            rules.push(' ');
            applied[j] = true;
        }
        for id in catalog.in_order() {
            let mine = self.bits.get(id);
            if mine != fake.bits.get(id) {
                rules.push(if mine { '+' } else { '-' });
                rules.push_str(&catalog.entry(id).name);
                rules.push(' ');
                fake.change(catalog, id, mine);
            }
            if !mine {
                if let Some((list, _)) = self.first_args.get(&id) {
                    for a in list {
                        rules.push('+');
                        rules.push_str(&catalog.entry(id).name);
                        rules.push('|');
                        rules.push_str(a);
                        rules.push(' ');
                    }
                }
            }
        }
        rules.pop();
        rules
    }

    /// The key patterns as `ACL GETUSER` shows them (`~*` for all).
    pub fn describe_keys(&self) -> String {
        if self.all_keys {
            return "~*".into();
        }
        let mut s = Vec::new();
        for (i, p) in self.keys.iter() {
            if !s.is_empty() {
                s.push(b' ');
            }
            s.extend_from_slice(match self.key_flags[i] {
                READ => b"%R~",
                WRITE => b"%W~",
                _ => b"~",
            });
            s.extend_from_slice(p);
        }
        String::from_utf8_lossy(&s).into_owned()
    }

    /// The channel patterns as `ACL GETUSER` shows them (`&*` for all).
    pub fn describe_channels(&self) -> String {
        if self.all_channels {
            return "&*".into();
        }
        let mut s = Vec::new();
        for (_, p) in self.channels.iter() {
            if !s.is_empty() {
                s.push(b' ');
            }
            s.push(b'&');
            s.extend_from_slice(p);
        }
        String::from_utf8_lossy(&s).into_owned()
    }

    /// Keys, channels and commands as `ACL LIST` writes them (`ACLDescribeSelector`).
    fn describe(&self, catalog: &Catalog) -> String {
        let mut res = String::new();
        if self.all_keys {
            res.push_str("~* ");
        } else if !self.keys.items.is_empty() {
            res.push_str(&self.describe_keys());
            res.push(' ');
        }
        if self.all_channels {
            res.push_str("&* ");
        } else {
            res.push_str("resetchannels ");
            if self.channels.len() > 0 {
                res.push_str(&self.describe_channels());
                res.push(' ');
            }
        }
        res.push_str(&self.describe_commands(catalog));
        res
    }

    fn compact(&mut self) {
        let flags = &mut self.key_flags;
        self.keys.compact(|from, to| flags[to] = flags[from]);
        flags.truncate(self.keys.len());
        self.channels.compact(|_, _| {});
    }
}

fn has_spaces(s: &[u8]) -> bool {
    s.iter().any(|&b| b.is_ascii_whitespace() || b == 0)
}

/// A password as Redis keeps it: SHA-256, 64 lower-case hex digits.
pub fn hash_password(pass: &[u8]) -> String {
    let digest = Sha256::digest(pass);
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn valid_hash(h: &[u8]) -> bool {
    h.len() == 64 && h.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether two hashes are equal, looking at every byte whatever differs.
fn same_hash(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// A user.
#[derive(Debug, Clone)]
pub struct User {
    pub name: Vec<u8>,
    pub on: bool,
    pub nopass: bool,
    /// `sanitize-payload` (true) or `skip-sanitize-payload` (false), when one was given.
    pub sanitize_payload: Option<bool>,
    passwords: Ordered<String>,
    pub perms: Perms,
}

impl User {
    /// A user just created: off, no password, no permissions (channels as
    /// `acl-pubsub-default` says).
    pub fn new(name: &[u8], all_channels: bool) -> User {
        User {
            name: name.to_vec(),
            on: false,
            nopass: false,
            sanitize_payload: None,
            passwords: Ordered::default(),
            perms: Perms::none(all_channels),
        }
    }

    /// One rule (Redis's `ACLSetUser`); `all_channels` is `acl-pubsub-default`, for `reset`.
    pub fn apply(
        &mut self,
        catalog: &Catalog,
        op: &[u8],
        all_channels: bool,
    ) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(());
        }
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if is("on") {
            self.on = true;
        } else if is("off") {
            self.on = false;
        } else if is("skip-sanitize-payload") {
            self.sanitize_payload = Some(false);
        } else if is("sanitize-payload") {
            self.sanitize_payload = Some(true);
        } else if is("nopass") {
            self.nopass = true;
            self.passwords.clear();
        } else if is("resetpass") {
            self.nopass = false;
            self.passwords.clear();
        } else if op[0] == b'>' || op[0] == b'#' {
            let hash = if op[0] == b'>' {
                hash_password(&op[1..])
            } else if valid_hash(&op[1..]) {
                String::from_utf8_lossy(&op[1..]).into_owned()
            } else {
                return Err(RuleError::BadHash);
            };
            self.passwords.insert(hash);
            self.nopass = false;
        } else if op[0] == b'<' || op[0] == b'!' {
            let hash = if op[0] == b'<' {
                hash_password(&op[1..])
            } else if valid_hash(&op[1..]) {
                String::from_utf8_lossy(&op[1..]).into_owned()
            } else {
                return Err(RuleError::BadHash);
            };
            if !self.passwords.remove(&hash) {
                return Err(RuleError::NoSuchPassword);
            }
        } else if op[0] == b'(' {
            return Err(RuleError::Selectors);
        } else if is("clearselectors") {
        } else if is("reset") {
            self.nopass = false;
            self.passwords.clear();
            self.perms = Perms::none(all_channels);
            self.on = false;
            self.sanitize_payload = Some(true);
        } else {
            return self.perms.apply(catalog, op);
        }
        Ok(())
    }

    /// Whether `pass` opens this user (on, and nopass or one of its passwords).
    pub fn accepts(&self, pass: &[u8]) -> bool {
        if !self.on {
            return false;
        }
        if self.nopass {
            return true;
        }
        let hashed = hash_password(pass);
        self.passwords.iter().any(|(_, h)| same_hash(h, &hashed))
    }

    /// Its flags, in `ACL GETUSER`'s order.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut f = vec![if self.on { "on" } else { "off" }];
        if self.nopass {
            f.push("nopass");
        }
        match self.sanitize_payload {
            Some(false) => f.push("skip-sanitize-payload"),
            Some(true) => f.push("sanitize-payload"),
            None => {}
        }
        f
    }

    /// Its password hashes, in the order given.
    pub fn passwords(&self) -> impl Iterator<Item = &str> {
        self.passwords.iter().map(|(_, h)| h.as_str())
    }

    /// Everything but its name, as `ACL LIST` and the ACL file write it (`ACLDescribeUser`).
    pub fn describe(&self, catalog: &Catalog) -> String {
        let mut res = String::new();
        for f in self.flags() {
            res.push_str(f);
            res.push(' ');
        }
        for h in self.passwords() {
            res.push('#');
            res.push_str(h);
            res.push(' ');
        }
        res.push_str(&self.perms.describe(catalog));
        res
    }
}

/// A user's id, as a connection holds it: the default user is 0; ids are never reused, so a
/// deleted user's connections find none.
pub type UserId = u64;

pub const DEFAULT_USER: UserId = 0;

/// The users. Shared (copied on write) with a busy script's restricted mode, which answers
/// AUTH and HELLO from it.
#[derive(Debug, Clone)]
pub struct Users {
    by_id: HashMap<UserId, User>,
    names: BTreeMap<Vec<u8>, UserId>,
    next_id: UserId,
}

impl Default for Users {
    /// The default user alone: `on nopass ~* &* +@all`.
    fn default() -> Users {
        let mut user = User::new(b"default", true);
        user.on = true;
        user.nopass = true;
        user.perms.all_keys = true;
        user.perms.bits = Bits::all(true);
        user.perms.all_commands = true;
        user.perms.future = true;
        let mut by_id = HashMap::new();
        by_id.insert(DEFAULT_USER, user);
        let mut names = BTreeMap::new();
        names.insert(b"default".to_vec(), DEFAULT_USER);
        Users {
            by_id,
            names,
            next_id: 1,
        }
    }
}

impl Users {
    /// The id the next user created gets (ids are never reused, across `ACL LOAD` too).
    pub fn next_id(&self) -> UserId {
        self.next_id
    }

    pub fn get(&self, id: UserId) -> Option<&User> {
        self.by_id.get(&id)
    }

    pub fn id_of(&self, name: &[u8]) -> Option<UserId> {
        self.names.get(name).copied()
    }

    pub fn by_name(&self, name: &[u8]) -> Option<&User> {
        self.get(self.id_of(name)?)
    }

    /// The users by name (Redis's order).
    pub fn iter(&self) -> impl Iterator<Item = (UserId, &User)> {
        self.names.values().map(|&id| (id, &self.by_id[&id]))
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    fn default_user(&self) -> &User {
        &self.by_id[&DEFAULT_USER]
    }

    /// New connections must authenticate: the default user needs a password or is off.
    pub fn auth_required(&self) -> bool {
        let d = self.default_user();
        !(d.nopass && d.on)
    }

    /// The default user has no password (`AUTH <password>` alone is then a mistake).
    pub fn default_nopass(&self) -> bool {
        self.default_user().nopass
    }

    /// The user `name` opened by `pass`.
    pub fn authenticate(&self, name: &[u8], pass: &[u8]) -> Option<UserId> {
        let id = self.id_of(name)?;
        self.by_id[&id].accepts(pass).then_some(id)
    }

    /// `ACL SETUSER name rules...`: all the rules or none (they are tried on a copy); the
    /// error as Redis words it. Returns the user's id.
    pub fn set_user(
        &mut self,
        catalog: &Catalog,
        name: &[u8],
        rules: &[&[u8]],
        all_channels: bool,
    ) -> Result<UserId, String> {
        let existing = self.id_of(name);
        let mut user = match existing {
            Some(id) => self.by_id[&id].clone(),
            None => User::new(name, all_channels),
        };
        for rule in rules {
            if let Err(e) = user.apply(catalog, rule, all_channels) {
                return Err(format!(
                    "ERR Error in ACL SETUSER modifier '{}': {}",
                    String::from_utf8_lossy(rule),
                    e.message()
                ));
            }
        }
        user.passwords.compact(|_, _| {});
        user.perms.compact();
        let id = match existing {
            Some(id) => id,
            None => {
                let id = self.next_id;
                self.next_id += 1;
                self.names.insert(name.to_vec(), id);
                id
            }
        };
        self.by_id.insert(id, user);
        Ok(id)
    }

    /// Remove user `name` (never the default one); its id, if it was there.
    pub fn delete(&mut self, name: &[u8]) -> Option<UserId> {
        if name == b"default" {
            return None;
        }
        let id = self.names.remove(name)?;
        self.by_id.remove(&id);
        Some(id)
    }

    /// `requirepass`: the default user's password, or `nopass` for none (Redis's
    /// `ACLUpdateDefaultUserPassword`).
    pub fn set_default_password(&mut self, catalog: &Catalog, pass: Option<&[u8]>) {
        let d = self.by_id.get_mut(&DEFAULT_USER).expect("default user");
        let _ = d.apply(catalog, b"resetpass", false);
        match pass {
            Some(p) => {
                let mut rule = vec![b'>'];
                rule.extend_from_slice(p);
                let _ = d.apply(catalog, &rule, false);
            }
            None => {
                let _ = d.apply(catalog, b"nopass", false);
            }
        }
    }
}

/// Why a command was refused (ACL LOG's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Command,
    Key,
    Channel,
    Auth,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Channel => "channel",
            Reason::Auth => "auth",
        }
    }
}

/// Where the refused command ran (ACL LOG's `context`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogContext {
    Toplevel,
    Multi,
    Lua,
}

impl LogContext {
    pub fn name(self) -> &'static str {
        match self {
            LogContext::Toplevel => "toplevel",
            LogContext::Multi => "multi",
            LogContext::Lua => "lua",
        }
    }
}

/// One entry of ACL LOG.
#[derive(Debug, Clone)]
pub struct LogEntry {
    pub count: u64,
    pub reason: Reason,
    pub context: LogContext,
    pub object: Vec<u8>,
    pub username: Vec<u8>,
    /// When it last happened, in ms since the epoch.
    pub ctime_ms: u64,
    pub client_info: String,
}

/// Entries this close in time (and alike) are one entry counted again (Redis's
/// ACL_LOG_GROUPING_MAX_TIME_DELTA).
const GROUPING_MS: u64 = 60_000;

/// The users and ACL LOG.
#[derive(Debug, Clone, Default)]
pub struct Acl {
    pub users: Arc<Users>,
    log: VecDeque<LogEntry>,
}

impl Acl {
    /// The users, to change (copied first if a busy script's mode holds them).
    pub fn users_mut(&mut self) -> &mut Users {
        Arc::make_mut(&mut self.users)
    }

    /// Log a refusal: an entry like one of the last ten (same reason, context, object and
    /// user, within a minute) is counted again and moved first; the log keeps `max_len`.
    pub fn log(&mut self, mut e: LogEntry, max_len: usize) {
        let found = self.log.iter().take(10).position(|c| {
            c.reason == e.reason
                && c.context == e.context
                && c.ctime_ms.abs_diff(e.ctime_ms) <= GROUPING_MS
                && c.object == e.object
                && c.username == e.username
        });
        if let Some(i) = found {
            let mut old = self.log.remove(i).expect("found");
            old.client_info = std::mem::take(&mut e.client_info);
            old.ctime_ms = e.ctime_ms;
            old.count += 1;
            self.log.push_front(old);
        } else {
            self.log.push_front(e);
        }
        self.log.truncate(max_len);
    }

    pub fn log_entries(&self) -> impl Iterator<Item = &LogEntry> {
        self.log.iter()
    }

    pub fn log_len(&self) -> usize {
        self.log.len()
    }

    pub fn reset_log(&mut self) {
        self.log.clear();
    }

    /// Keep at most `max_len` entries (`CONFIG SET acllog-max-len`).
    pub fn trim_log(&mut self, max_len: usize) {
        self.log.truncate(max_len);
    }
}

/// The largest ACL file read: users are a few lines each.
const MAX_FILE: u64 = 64 << 20;

/// The users an ACL file describes (`user <name> <rules>...` a line, Redis's format), with ids
/// from `next_id` on (the default user keeps 0; it is Redis's default when the file has none):
/// the whole file or nothing, with every line's error as Redis words it.
pub fn parse_file(
    text: &str,
    file: &str,
    catalog: &Catalog,
    all_channels: bool,
    next_id: UserId,
) -> Result<Users, String> {
    let mut users = Users {
        by_id: HashMap::new(),
        names: BTreeMap::new(),
        next_id: next_id.max(1),
    };
    let mut errors = String::new();
    for (i, line) in text.split('\n').enumerate() {
        let linenum = i + 1;
        let line = line.trim_matches(|c| matches!(c, ' ' | '\t' | '\r' | '\n'));
        if line.is_empty() {
            continue;
        }
        let words: Vec<&str> = line.split(' ').collect();
        if words[0] != "user" || words.len() < 2 {
            errors.push_str(&format!(
                "{file}:{linenum} should start with user keyword followed by the username. "
            ));
            continue;
        }
        let name = words[1].as_bytes();
        if name.is_empty() || has_spaces(name) {
            errors.push_str(&format!(
                "'{file}:{linenum}: username '{}' contains invalid characters. ",
                words[1]
            ));
            continue;
        }
        if users.names.contains_key(name) {
            errors.push_str(&format!(
                "WARNING: Duplicate user '{}' found on line {linenum}. ",
                words[1]
            ));
            continue;
        }
        let mut user = User::new(name, all_channels);
        let mut syntax_error = false;
        for op in &words[2..] {
            let op = op.trim_matches(|c| matches!(c, '\t' | '\r' | '\n'));
            if let Err(e) = user.apply(catalog, op.as_bytes(), all_channels) {
                if e == RuleError::Unknown {
                    errors.push_str(&format!(
                        "{file}:{linenum}: Error in applying operation '{op}': {}. ",
                        e.message()
                    ));
                } else if !syntax_error {
                    errors.push_str(&format!("{file}:{linenum}: {}. ", e.message()));
                    syntax_error = true;
                }
            }
        }
        user.passwords.compact(|_, _| {});
        user.perms.compact();
        let id = if name == b"default" {
            DEFAULT_USER
        } else {
            users.next_id += 1;
            users.next_id - 1
        };
        users.names.insert(name.to_vec(), id);
        users.by_id.insert(id, user);
    }
    if !errors.is_empty() {
        errors.pop();
        return Err(errors);
    }
    if !users.names.contains_key(&b"default"[..]) {
        let d = Users::default();
        users.names.insert(b"default".to_vec(), DEFAULT_USER);
        users
            .by_id
            .insert(DEFAULT_USER, d.by_id[&DEFAULT_USER].clone());
    }
    Ok(users)
}

/// `ACL LOAD`: [`parse_file`] of the file at `path`.
pub fn load_file(
    path: &std::path::Path,
    catalog: &Catalog,
    all_channels: bool,
    next_id: UserId,
) -> Result<Users, String> {
    use std::io::Read;
    let shown = path.display().to_string();
    let opening = |e: std::io::Error| format!("Error loading ACLs, opening file '{shown}': {e}");
    let f = std::fs::File::open(path).map_err(opening)?;
    let mut text = String::new();
    f.take(MAX_FILE + 1)
        .read_to_string(&mut text)
        .map_err(opening)?;
    if text.len() as u64 > MAX_FILE {
        return Err(format!(
            "Error loading ACLs, file '{shown}' is larger than {MAX_FILE} bytes"
        ));
    }
    parse_file(&text, &shown, catalog, all_channels, next_id)
}

/// `ACL SAVE`: `lines` (one `user ...` each) written to a file beside `path`, synced, then
/// renamed over it (and the directory synced): the file is the old one or the new one whole.
pub fn save_file(path: &std::path::Path, lines: &[String]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map_or_else(|| "acl".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        let mut text = String::new();
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(&dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        let mut c = Catalog::default();
        c.add("get", None, &["@read", "@string", "@fast"]);
        c.add("set", None, &["@write", "@string", "@slow"]);
        let config = c.add("config", None, &["@slow"]);
        c.add(
            "config|get",
            Some(config),
            &["@admin", "@slow", "@dangerous"],
        );
        c.add(
            "config|set",
            Some(config),
            &["@admin", "@slow", "@dangerous"],
        );
        c.add("select", None, &["@keyspace", "@fast"]);
        c.add("auth", None, &["@fast", "@connection"]);
        c
    }

    fn set(users: &mut Users, name: &str, rules: &str) -> Result<UserId, String> {
        let rules: Vec<&[u8]> = rules.split(' ').map(str::as_bytes).collect();
        users.set_user(&catalog(), name.as_bytes(), &rules, false)
    }

    #[test]
    fn the_default_user_can_do_everything_and_describes_itself_as_redis_does() {
        let users = Users::default();
        let d = users.by_name(b"default").unwrap();
        assert!(d.perms.unrestricted());
        assert!(!users.auth_required());
        assert_eq!(d.describe(&catalog()), "on nopass ~* &* +@all");
    }

    #[test]
    fn passwords_are_sha256_and_any_of_them_opens_the_user() {
        assert_eq!(
            hash_password(b"foo"),
            "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
        );
        let mut users = Users::default();
        set(&mut users, "alice", "on >p1 >p2").unwrap();
        assert!(users.authenticate(b"alice", b"p1").is_some());
        assert!(users.authenticate(b"alice", b"p2").is_some());
        assert!(users.authenticate(b"alice", b"p3").is_none());
        set(&mut users, "alice", "<p1").unwrap();
        assert!(users.authenticate(b"alice", b"p1").is_none());
        assert_eq!(
            set(&mut users, "alice", "<nope"),
            Err("ERR Error in ACL SETUSER modifier '<nope': The password you are trying to remove from the user does not exist".into())
        );
        set(&mut users, "alice", "off").unwrap();
        assert!(users.authenticate(b"alice", b"p2").is_none(), "off");
        let h = hash_password(b"x");
        set(&mut users, "bob", &format!("on #{h}")).unwrap();
        assert!(users.authenticate(b"bob", b"x").is_some());
        assert!(set(&mut users, "bob", "#ABC")
            .unwrap_err()
            .ends_with("exactly 64 characters and contain only lowercase hexadecimal characters"));
        users.set_default_password(&catalog(), Some(b"pw"));
        assert!(users.auth_required());
        assert!(users.authenticate(b"default", b"pw").is_some());
    }

    #[test]
    fn bad_rules_are_refused_whole_with_redis_errors() {
        let mut users = Users::default();
        set(&mut users, "u", "on +get").unwrap();
        let err = set(&mut users, "u", "+set +nosuch").unwrap_err();
        assert_eq!(
            err,
            "ERR Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL"
        );
        let u = users.by_name(b"u").unwrap();
        let c = catalog();
        assert!(
            !u.perms.allows_command(&c, c.id(b"set").unwrap(), &[b"set"]),
            "nothing applied"
        );
        for (rule, msg) in [
            ("bogus", "Syntax error"),
            ("+@nosuch", "Unknown command or category name in ACL"),
            ("%X~a", "Syntax error"),
            (
                "+config|get|x",
                "Allowing first-arg of a subcommand is not supported",
            ),
            ("+select|", "Syntax error"),
        ] {
            assert_eq!(
                set(&mut users, "u", rule).unwrap_err(),
                format!("ERR Error in ACL SETUSER modifier '{rule}': {msg}")
            );
        }
        assert!(set(&mut users, "u", "~* ~a")
            .unwrap_err()
            .contains("Try 'resetkeys'"));
        assert!(set(&mut users, "u", "&* &a")
            .unwrap_err()
            .contains("Try 'resetchannels'"));
    }

    #[test]
    fn commands_subcommands_first_args_and_categories() {
        let c = catalog();
        let mut users = Users::default();
        set(
            &mut users,
            "u",
            "on nopass -@all +get +config|get +select|0",
        )
        .unwrap();
        let u = users.by_name(b"u").unwrap();
        let id = |n: &str| c.id(n.as_bytes()).unwrap();
        assert!(u.perms.allows_command(&c, id("get"), &[b"get", b"k"]));
        assert!(!u.perms.allows_command(&c, id("set"), &[b"set", b"k", b"v"]));
        assert!(u
            .perms
            .allows_command(&c, id("config|get"), &[b"config", b"get"]));
        assert!(!u
            .perms
            .allows_command(&c, id("config|set"), &[b"config", b"set"]));
        assert!(u.perms.allows_command(&c, id("select"), &[b"select", b"0"]));
        assert!(!u.perms.allows_command(&c, id("select"), &[b"select", b"1"]));
        assert_eq!(
            u.describe(&c),
            // `get` is all of @read in this catalog: the category fits best.
            "on nopass resetchannels -@all +@read +config|get +select|0"
        );
        set(&mut users, "v", "+@all -@dangerous").unwrap();
        let v = users.by_name(b"v").unwrap();
        assert!(v.perms.allows_command(&c, id("set"), &[b"set"]));
        assert!(!v
            .perms
            .allows_command(&c, id("config|set"), &[b"config", b"set"]));
        // @admin holds the same commands here, and comes first in Redis's order.
        assert_eq!(v.describe(&c), "off resetchannels +@all -@admin");
        set(&mut users, "w", "+@string").unwrap();
        assert_eq!(
            users.by_name(b"w").unwrap().describe(&c),
            "off resetchannels -@all +@string"
        );
    }

    #[test]
    fn key_and_channel_patterns() {
        let mut users = Users::default();
        set(
            &mut users,
            "u",
            "on ~obj:* %R~ro:* %W~wo:* %RW~both &news.* &x",
        )
        .unwrap();
        let p = &users.by_name(b"u").unwrap().perms;
        assert!(p.allows_key(b"obj:1", READ | WRITE));
        assert!(p.allows_key(b"ro:1", READ));
        assert!(!p.allows_key(b"ro:1", WRITE));
        assert!(p.allows_key(b"wo:1", WRITE));
        assert!(!p.allows_key(b"wo:1", READ));
        assert!(p.allows_key(b"both", READ | WRITE));
        assert!(!p.allows_key(b"other", 0));
        assert!(p.allows_channel(b"news.today", false));
        assert!(!p.allows_channel(b"news.*x", true));
        assert!(p.allows_channel(b"news.*", true));
        assert_eq!(p.describe_keys(), "~obj:* %R~ro:* %W~wo:* ~both");
        assert_eq!(p.describe_channels(), "&news.* &x");
        set(&mut users, "u", "~obj:* resetkeys ~a allchannels").unwrap();
        let p = &users.by_name(b"u").unwrap().perms;
        assert_eq!(p.describe_keys(), "~a");
        assert_eq!(p.describe_channels(), "&*");
        set(&mut users, "u", "reset").unwrap();
        let u = users.by_name(b"u").unwrap();
        assert_eq!(
            u.describe(&catalog()),
            "off sanitize-payload resetchannels -@all"
        );
    }

    #[test]
    fn a_hostile_rule_list_costs_linear_time() {
        // 200k repeated patterns and passwords: found by hashing, kept once.
        let mut rules: Vec<Vec<u8>> = Vec::new();
        for i in 0..100_000 {
            rules.push(format!("~k{}", i % 10).into_bytes());
            rules.push(format!(">p{}", i % 3).into_bytes());
            rules.push(format!("+select|{}", i % 5).into_bytes());
        }
        let refs: Vec<&[u8]> = rules.iter().map(Vec::as_slice).collect();
        let mut users = Users::default();
        users.set_user(&catalog(), b"u", &refs, false).unwrap();
        let u = users.by_name(b"u").unwrap();
        assert_eq!(u.passwords().count(), 3);
        assert_eq!(u.perms.keys.len(), 10);
    }

    #[test]
    fn the_log_groups_alike_entries_and_keeps_its_length() {
        let mut acl = Acl::default();
        let e = |object: &[u8], t| LogEntry {
            count: 1,
            reason: Reason::Command,
            context: LogContext::Toplevel,
            object: object.to_vec(),
            username: b"u".to_vec(),
            ctime_ms: t,
            client_info: String::new(),
        };
        acl.log(e(b"get", 1000), 3);
        acl.log(e(b"get", 2000), 3);
        assert_eq!(acl.log_len(), 1);
        assert_eq!(acl.log_entries().next().unwrap().count, 2);
        acl.log(e(b"get", 2000 + GROUPING_MS + 1), 3);
        assert_eq!(acl.log_len(), 2, "too far apart");
        acl.log(e(b"a", 0), 3);
        acl.log(e(b"b", 0), 3);
        assert_eq!(acl.log_len(), 3);
        assert_eq!(acl.log_entries().next().unwrap().object, b"b");
    }

    #[test]
    fn an_acl_file_loads_whole_or_not_at_all() {
        let c = catalog();
        let users = parse_file(
            "user a on >x ~k* +get\n\nuser default on nopass ~* &* +@all\n",
            "f",
            &c,
            false,
            5,
        )
        .unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(users.id_of(b"a"), Some(5));
        assert_eq!(users.id_of(b"default"), Some(DEFAULT_USER));
        assert!(users.authenticate(b"a", b"x").is_some());
        // No default user in the file: Redis's default.
        let users = parse_file("user a off", "f", &c, false, 1).unwrap();
        assert!(users.by_name(b"default").unwrap().perms.unrestricted());
        assert_eq!(
            parse_file(
                "user a on\nusr b\nuser a off\nuser c +nosuch bogus x",
                "f",
                &c,
                false,
                1
            )
            .unwrap_err(),
            "f:2 should start with user keyword followed by the username. \
             WARNING: Duplicate user 'a' found on line 3. \
             f:4: Error in applying operation '+nosuch': Unknown command or category name in ACL. \
             f:4: Syntax error."
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]
        /// Any rules, over the server's own table: what ACL LIST writes of a user (the command
        /// rules Redis's best-fit algorithm writes) loads back as the same permissions, command
        /// by command, and describes itself the same (Redis checks the first and panics).
        #[test]
        fn a_user_described_loads_back_the_same(picks in proptest::collection::vec(0usize..26, 0..24)) {
            const RULES: [&str; 26] = [
                "on", "off", ">a", ">b", "<a", "nopass", "resetpass", "+@all", "-@all",
                "+@read", "-@write", "+@dangerous", "-@admin", "+get", "-get", "+config|get",
                "-config|set", "+client", "-client|kill", "+select|1", "~k*", "%R~r*", "%W~w*",
                "resetkeys", "&ch*", "reset",
            ];
            let catalog = crate::table::COMMANDS.acl();
            let mut users = Users::default();
            let rules: Vec<&[u8]> = picks.iter().map(|&i| RULES[i].as_bytes()).collect();
            // A rule may be refused (`<a` without `a`): then another list is tried.
            let Ok(id) = users.set_user(catalog, b"u", &rules, false) else { return Ok(()) };
            let user = users.get(id).unwrap();
            let line = format!("user u {}", user.describe(catalog));
            let again = parse_file(&line, "f", catalog, false, 1).unwrap();
            let back = again.by_name(b"u").unwrap();
            for e in 0..catalog.entries().len() as u32 {
                let args: [&[u8]; 3] = [b"x", b"1", b"1"];
                proptest::prop_assert_eq!(
                    user.perms.allows_command(catalog, e, &args),
                    back.perms.allows_command(catalog, e, &args),
                    "{} in {}", catalog.entry(e).name, line
                );
            }
            proptest::prop_assert_eq!(back.describe(catalog), user.describe(catalog));
        }
    }

    #[test]
    fn an_acl_file_is_saved_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.acl");
        save_file(&path, &["user a on".into(), "user b off".into()]).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "user a on\nuser b off\n"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
