//! The Redis version cxltier answers as, in one place: HELLO, INFO, the RDB header and the
//! scripts' `redis.REDIS_VERSION` all say it.

/// The Redis version clients are told (HELLO, INFO's redis_version): the one whose commands and
/// replies cxltier follows. Clients branch on it.
pub const REDIS_VERSION: &str = "7.0.15";
