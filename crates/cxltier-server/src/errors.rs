//! The error replies commands of several kinds give, word for word as Redis 7.0 gives them.

/// Redis's reply to a command on a key of another type (without the store's own detail, which
/// clients matching the exact text would not expect).
pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";

pub(crate) const NOT_INT: &str = "ERR value is not an integer or out of range";

pub(crate) const SYNTAX: &str = "ERR syntax error";

/// Redis's error for a random-member count outside -LONG_MAX..LONG_MAX (SRANDMEMBER,
/// HRANDFIELD, ZRANDMEMBER).
pub(crate) const RANDOM_COUNT_RANGE: &str =
    "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807";

/// What a command of another connection gets while a script is busy, unless the busy mode
/// answers it.
pub(crate) const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

/// The same while a function (FCALL) is busy.
pub(crate) const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";

/// Redis's error for a subcommand `command` does not have, or one given the wrong number of
/// arguments: `sub` as the client wrote it, `command` as its HELP is named (`CONFIG`).
/// The error for a subcommand that is not known (`arity_ok` is `None`) or was given the wrong
/// number of arguments (`Some(false)`), worded as Redis 7.0 words it for containers whose
/// subcommands have arities of their own (`slowlog|get`): `None` when the arity is right.
pub(crate) fn subcommand_arity(
    command: &str,
    sub: &[u8],
    arity_ok: Option<bool>,
) -> Option<String> {
    let sub = String::from_utf8_lossy(sub);
    match arity_ok {
        None => Some(format!(
            "ERR unknown subcommand '{sub}'. Try {command} HELP."
        )),
        Some(false) => Some(format!(
            "ERR wrong number of arguments for '{}|{}' command",
            command.to_ascii_lowercase(),
            sub.to_ascii_lowercase()
        )),
        Some(true) => None,
    }
}

pub(crate) fn unknown_subcommand(command: &str, sub: &[u8]) -> String {
    format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {command} HELP.",
        String::from_utf8_lossy(sub)
    )
}
