//! RESP2 server over the tiered store.
