//! What Redis says of a command or subcommand (its flags, key specs, ACL categories, tips and
//! docs), as types: the generated table of Redis 7.0's descriptions (`command_specs`) is made of
//! these, and COMMAND answers from them (`command_info`).

/// Key-spec flags (Redis's `CMD_KEY_*`), in `COMMAND INFO`'s order.
pub mod ks {
    pub const RO: u16 = 1 << 0;
    pub const RW: u16 = 1 << 1;
    pub const OW: u16 = 1 << 2;
    pub const RM: u16 = 1 << 3;
    pub const ACCESS: u16 = 1 << 4;
    pub const UPDATE: u16 = 1 << 5;
    pub const INSERT: u16 = 1 << 6;
    pub const DELETE: u16 = 1 << 7;
    pub const NOT_KEY: u16 = 1 << 8;
    pub const INCOMPLETE: u16 = 1 << 9;
    pub const VARIABLE_FLAGS: u16 = 1 << 10;

    pub const NAMES: &[(u16, &str)] = &[
        (RO, "RO"),
        (RW, "RW"),
        (OW, "OW"),
        (RM, "RM"),
        (ACCESS, "access"),
        (UPDATE, "update"),
        (INSERT, "insert"),
        (DELETE, "delete"),
        (NOT_KEY, "not_key"),
        (INCOMPLETE, "incomplete"),
        (VARIABLE_FLAGS, "variable_flags"),
    ];
}

/// Where a key spec's search begins.
#[derive(Debug, Clone, Copy)]
pub enum Begin {
    Unknown,
    /// At this argument.
    Index(i32),
    /// After this keyword, searched from `startfrom` (from the end when negative).
    Keyword {
        keyword: &'static str,
        startfrom: i32,
    },
}

/// How a key spec finds its keys from where the search began.
#[derive(Debug, Clone, Copy)]
pub enum Find {
    Unknown,
    Range {
        lastkey: i32,
        keystep: i32,
        limit: i32,
    },
    Keynum {
        keynumidx: i32,
        firstkey: i32,
        keystep: i32,
    },
}

#[derive(Debug)]
pub struct KeySpec {
    pub notes: Option<&'static str>,
    pub flags: u16,
    pub begin: Begin,
    pub find: Find,
}

/// One argument of a command, as `COMMAND DOCS` describes it.
#[derive(Debug)]
pub struct Arg {
    pub name: &'static str,
    pub kind: &'static str,
    pub key_spec_index: i32,
    pub token: Option<&'static str>,
    pub summary: Option<&'static str>,
    pub since: Option<&'static str>,
    pub deprecated_since: Option<&'static str>,
    pub flags: &'static [&'static str],
    pub args: &'static [Arg],
}

/// Redis's description of one command or subcommand.
#[derive(Debug)]
pub struct Spec {
    /// Lower case; a subcommand's is `container|sub`.
    pub name: &'static str,
    pub arity: i32,
    /// As `COMMAND INFO` names them, `movablekeys` included.
    pub flags: &'static [&'static str],
    /// Redis's legacy first key, last key and step (`COMMAND INFO`'s 4th to 6th fields).
    pub legacy_keys: (i32, i32, i32),
    pub categories: &'static [&'static str],
    pub tips: &'static [&'static str],
    pub key_specs: &'static [KeySpec],
    /// Redis has a key function for it (its key specs alone may not tell).
    pub getkeys_function: bool,
    pub summary: Option<&'static str>,
    pub since: Option<&'static str>,
    pub group: &'static str,
    pub complexity: Option<&'static str>,
    pub doc_flags: &'static [&'static str],
    pub deprecated_since: Option<&'static str>,
    pub replaced_by: Option<&'static str>,
    pub history: &'static [(&'static str, &'static str)],
    pub args: &'static [Arg],
}

impl Spec {
    pub(crate) fn has_flag(&self, name: &str) -> bool {
        self.flags.contains(&name)
    }
}
