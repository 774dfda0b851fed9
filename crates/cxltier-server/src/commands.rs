//! The commands as a caller outside the crate runs them: [`execute`] one against the server's
//! and the connection's state. Dispatch is in [`crate::dispatch`], the state in
//! [`crate::context`], and each handler with its kind (the crate's module list).

pub use crate::context::{
    now_us, Block, ClientMeta, CommandName, CommandStat, Ctx, Effect, ServerInfo, Session,
    Snapshot, SyncStart,
};
pub use crate::dispatch::execute;
pub use crate::memory::memory_figures;
pub use crate::version::REDIS_VERSION;
