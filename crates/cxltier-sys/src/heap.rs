//! Memory the process's allocators hold free, handed back to the system.
//!
//! The `cxltier` binary allocates through mimalloc, which keeps freed pages for reuse and
//! returns them to the system only when a later allocation or free in the same thread finds
//! their purge delay past: a server that freed a few hundred megabytes at once (a Lua script's
//! heap collected after it reached its cap) and then sits idle would keep them resident. Test
//! binaries and other programs that link this crate use glibc's malloc, which keeps freed
//! memory at the top of its heaps until `malloc_trim`.

/// Return the memory the allocators hold free to the system: mimalloc's free pages of every
/// heap of this thread and abandoned ones (`mi_collect(true)`), and glibc's free memory at the
/// ends of its arenas (`malloc_trim(0)`). Each allocator that is not in use has nothing to give
/// back, so both are asked. Costs a walk over the allocators' free pages: call it after a
/// burst of frees, not per request.
pub fn release_free_memory() {
    // SAFETY: `mi_collect` takes no pointers and may be called at any time from any thread;
    // with `force` it frees or purges the calling thread's free pages and collects abandoned
    // segments. When mimalloc is not the global allocator it has no pages to give back.
    unsafe { libmimalloc_sys::mi_collect(true) };
    // SAFETY: `malloc_trim` takes no pointers and may be called at any time; 0 keeps no
    // padding at the top of the heap. It returns whether memory was released, which is not
    // needed here.
    unsafe { libc::malloc_trim(0) };
}
