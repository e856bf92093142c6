//! rdma-core's C ABI over this iWARP stack: `libibverbs.so.1` and `librdmacm.so.1` for
//! unmodified C programs (perftest, rping, ucmatose, ibv_devinfo), with no kernel module
//! (issue 34).
//!
//! `scripts/rdma_core_lib.sh` links this crate (a static library) into one shared object
//! with rdma-core's symbol versions (`rdma-core.map`), and names it `libibverbs.so.1`,
//! `librdmacm.so.1` and `libmlx5.so.1` (perftest links the last). Run a program with
//! `LD_LIBRARY_PATH` pointing at that directory:
//!
//! ```text
//! scripts/rdma_core_lib.sh            # prints the directory
//! LD_LIBRARY_PATH=target/rdma-core ibv_devinfo
//! ```
//!
//! What works so far: the device list (`iwarp0`, transport iWARP), opening and closing
//! it over the stack `IWARP_DEVICE` names (the engine in this process by default),
//! device, port, GID and P_Key queries, protection domains, and memory regions on the
//! program's own memory (embedded). Every other call the target programs make is
//! exported and fails with `EOPNOTSUPP`, saying once on stderr which call it was and why
//! (`unsupported`).
//!
//! # Safety at the boundary
//! Every exported function takes raw pointers from C. What this library can check, it
//! does: an object pointer must be one it handed out and has not freed (a closed context
//! is refused, not freed twice), and null pointers are refused. What it cannot check is
//! that a pointer to the caller's own memory (an attribute struct to fill) is valid for
//! its size: as in rdma-core, that is the caller's contract, written on each function.

pub mod abi;
pub mod addrinfo;
pub mod cm;
pub mod cm_abi;
pub mod cm_events;
pub mod cq;
pub mod device;
mod errors;
mod iface;
mod live;
pub mod memory;
mod ops;
pub mod qp;
mod rt;
mod sockaddr;
pub mod strings;
pub mod unsupported;
mod wc;
