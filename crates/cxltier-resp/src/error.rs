//! The crate's one error: what went wrong talking RESP to a server.

use std::time::Duration;

use cxltier_error::{Class, Classify};

/// A client's failure: connecting, reading or writing, or a reply that is not RESP.
#[derive(Debug, thiserror::Error)]
pub enum RespError {
    #[error("{addr}: not a HOST:PORT that resolves")]
    Resolve { addr: String },
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    #[error("the server closed the connection")]
    Closed,
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// The bytes are not a RESP reply: the stream can no longer be framed.
    #[error("malformed reply: {0}")]
    Malformed(String),
    /// A reply longer than the client accepts (a bound on what a server can make it buffer).
    #[error("a reply over {limit} bytes")]
    TooLarge { limit: usize },
}

impl Classify for RespError {
    fn class(&self) -> Class {
        match self {
            RespError::Resolve { .. } => Class::BadInput,
            _ => Class::Runtime,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            RespError::Connect { addr, .. } => Some(format!(
                "is a server listening on {addr}? start one with `cxltier serve --bind {addr}`"
            )),
            _ => None,
        }
    }
}
