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
pub(crate) fn unknown_subcommand(command: &str, sub: &[u8]) -> String {
    format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {command} HELP.",
        String::from_utf8_lossy(sub)
    )
}
