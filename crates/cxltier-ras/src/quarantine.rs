//! The quarantine file's format, writer and follower live in `cxltier-quarantine`, so that its
//! readers (the server, the tiering daemon) need not depend on the rest of RAS; re-exported here
//! for the watcher and the CLI.

pub use cxltier_quarantine::*;
