//! RESP2 and RESP3, the Redis protocol, both ways.
//!
//! - [`server_side`]: what a server reads and writes: the resumable request [`Parser`]
//!   (multibulk and inline; never panics, whatever the bytes) and the [`reply`] writers, which
//!   shape a reply once for RESP2 or RESP3;
//! - [`value`]: what a client reads: a [`Reply`] value and its bounded decoder
//!   ([`parse_reply`], and [`reply_len`] for the bytes of a reply without building it);
//! - [`client`]: what a client writes ([`write_command`]: an array of bulk strings, into a
//!   reused buffer) and a blocking [`Client`] (timeouts on connect, read and write; partial
//!   reads and writes and EINTR handled; a reply's size bounded);
//! - [`error`]: [`RespError`], the crate's one error.

// A library reports through its return values; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]
#![forbid(unsafe_code)]

pub mod client;
pub mod error;
pub mod server_side;
pub mod value;

pub use client::{write_command, Client};
pub use error::RespError;
pub use server_side::{
    parse, reply, Limits, Parsed, Parser, ProtocolError, MAX_ARGS, MAX_BULK, MAX_INLINE,
    UNAUTHENTICATED_MAX_ARGS, UNAUTHENTICATED_MAX_BULK,
};
pub use value::{parse_reply, reply_len, Reply, MAX_DEPTH};
