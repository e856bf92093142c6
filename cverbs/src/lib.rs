//! rdma-core's C ABI over this iWARP stack: `libibverbs.so.1` and `librdmacm.so.1` for
//! unmodified C programs (perftest, rping, ucmatose, ibv_devinfo), with no kernel module
//! (issue 34).
//!
//! `scripts/rdma_core_lib.sh` links this crate (a static library) into one shared object
//! with rdma-core's symbol versions (`rdma-core.map`), named `libibverbs.so.1`, with
//! `librdmacm.so.1`, `libmlx5.so.1` and `libefa.so.1` beside it (perftest links the last
//! two). Run a program with `LD_LIBRARY_PATH` pointing at that directory:
//!
//! ```text
//! scripts/rdma_core_lib.sh            # prints the directory
//! LD_LIBRARY_PATH=target/rdma-core ibv_devinfo
//! ```
//!
//! What works: the device list (`iwarp0`, transport iWARP) and its queries; protection
//! domains; memory regions on the program's own memory; completion queues with channels;
//! shared receive queues; the connection manager (event channels, identifiers, address
//! resolution, listen, connect, accept, reject, disconnect); queue pairs made by
//! `rdma_create_qp` and posted to. All of it with the engine in the program's process
//! (`open`), on a runtime thread of the library's own (`rt`), or through a local
//! iwarpd (`IWARP_DEVICE=unix:PATH`), where a registered buffer's pages move in place onto
//! a memory file the daemon maps (`memory`, `shm::arena`). Every other call the target
//! programs make is exported and fails with `EOPNOTSUPP`, saying once on stderr which
//! call it was and why (`unsupported`).
//!
//! # Safety at the boundary
//! Every exported function takes raw pointers from C. What this library can check, it
//! does (`live`): an object pointer must be one it handed out and has not freed (an object
//! freed twice, or never the library's, is refused with `EINVAL`, not freed again); an
//! object still in use by another thread when C destroys it lives until that use ends;
//! domains with regions, queues with queue pairs and channels with queues are not freed
//! (`EBUSY`); null pointers and lists over 64 entries are refused. What it cannot check is
//! that a pointer to the caller's own memory (an attribute struct to fill, a buffer a
//! request names, a registered region freed before `ibv_dereg_mr`) is valid: as in
//! rdma-core, that is the caller's contract, written on each function, and breaking it
//! harms that program only, never another process's queue pairs.

/// Rust's allocations in this library stay off the program's malloc heap: its runtime
/// threads never write a page the program's buffers share, and so never while such a
/// page moves in place for iwarpd (`memory`; Cargo.toml says more).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod abi;
pub mod addrinfo;
pub mod async_events;
pub mod cm;
pub mod cm_abi;
pub mod cm_ep;
pub mod cm_events;
pub mod cm_qp;
pub mod cq;
pub mod device;
mod errors;
mod iface;
mod live;
pub mod memory;
mod mw;
mod mw_bind;
pub mod open;
mod ops;
mod post;
pub mod qp;
mod rt;
mod semaphore;
mod sockaddr;
pub mod srq;
pub mod strings;
pub mod unsupported;
mod wc;

#[cfg(test)]
mod tests {
    /// The mapping of this process that holds `addr` (from /proc/self/maps).
    fn mapping_of(addr: usize) -> std::ops::Range<usize> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter_map(|l| {
                let (lo, hi) = l.split_whitespace().next()?.split_once('-')?;
                let r = usize::from_str_radix(lo, 16).ok()?..usize::from_str_radix(hi, 16).ok()?;
                r.contains(&addr).then_some(r)
            })
            .next()
            .unwrap()
    }

    /// Rust's allocations here never share a mapping with the C heap this thread's
    /// `malloc` serves (the reason for the library's own allocator).
    #[test]
    fn the_library_allocates_apart_from_the_programs_malloc_heap() {
        // SAFETY: a plain allocation, freed below.
        let c = unsafe { libc::malloc(64) };
        assert!(!c.is_null());
        let heap = mapping_of(c as usize);
        let rust: Vec<Box<[u8; 64]>> = (0..64).map(|_| Box::new([0; 64])).collect();
        for b in &rust {
            let at = std::ptr::from_ref(&**b) as usize;
            assert!(!heap.contains(&at), "{at:#x} is in the C heap {heap:x?}");
        }
        // SAFETY: allocated above by malloc, freed once.
        unsafe { libc::free(c) };
    }
}
