//! Protection domains and memory regions on the application's own memory.
//!
//! `ibv_reg_mr` registers memory the program already has (a `malloc`ed buffer) in place,
//! tagged from the virtual address the program passed (or from 0 with
//! `IBV_ACCESS_ZERO_BASED`). The engine in this process reads and writes those octets
//! directly. Through iwarpd the buffer's pages first move onto a memory file of this
//! process at the same address ([`shm::arena`]: same pointer, same contents), which the
//! daemon maps; `ibv_dereg_mr` moves them back.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_int, c_void};
use verbs::{Access, Region};

use crate::abi::*;
use crate::device::{Context, context};
use crate::errors::{Errno, set_errno, unsupported};
use crate::live::Live;

static DOMAINS: Live<Pd> = Live::new();
static REGIONS: Live<Mr> = Live::new();

/// A protection domain, as `ibv_alloc_pd` returns it.
#[repr(C)]
pub(crate) struct Pd {
    ibv: ibv_pd,
    pub(crate) pd: verbs::Pd,
    ctx: Arc<Context>,
    /// Regions and queue pairs in it: it is not freed while any is.
    pub(crate) users: AtomicUsize,
}

impl Pd {
    /// The context it was allocated on, as C knows it.
    pub(crate) fn context(&self) -> *mut ibv_context {
        self.ibv.context
    }

    /// The context it was allocated on.
    pub(crate) fn ctx(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The stack's device.
    pub(crate) fn device(&self) -> &verbs::Device {
        &self.ctx.device
    }
}

// SAFETY: `ibv.context` is the address of a context this domain holds alive (`ctx`);
// Rust never writes through it. `verbs::Pd` is Send and Sync.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

/// A memory region, as `ibv_reg_mr` returns it.
#[repr(C)]
pub(crate) struct Mr {
    ibv: ibv_mr,
    pub(crate) mr: verbs::Mr,
    pd: Arc<Pd>,
    /// Its pages were moved onto the arena (through iwarpd), to move back at
    /// deregistration.
    in_place: bool,
}

// SAFETY: `ibv`'s pointers are addresses handed to C (the context and domain this region
// holds alive, and the program's own buffer, which the engine reaches through `mr`'s
// region, never through `ibv.addr`). `verbs::Mr` is Send and Sync.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Drop for Pd {
    fn drop(&mut self) {
        self.ctx.domains.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        self.pd.users.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The domain behind `pd`, if it is alive.
pub(crate) fn domain(pd: *const ibv_pd) -> Result<Arc<Pd>, Errno> {
    DOMAINS.get(pd).ok_or(Errno::EINVAL)
}

/// The region behind `mr`, if it is alive.
pub(crate) fn region(mr: *const ibv_mr) -> Result<Arc<Mr>, Errno> {
    REGIONS.get(mr).ok_or(Errno::EINVAL)
}

/// `ibv_alloc_pd`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    let Ok(c) = context(ctx) else {
        set_errno(Errno::EINVAL);
        return std::ptr::null_mut();
    };
    let pd = match c.device.alloc_pd() {
        Ok(pd) => pd,
        Err(e) => {
            eprintln!("iwarp verbs: ibv_alloc_pd: {e}");
            set_errno(Errno::ENOMEM);
            return std::ptr::null_mut();
        }
    };
    let handle = pd.id().0;
    c.domains.fetch_add(1, Ordering::Relaxed);
    DOMAINS
        .add(Pd {
            ibv: ibv_pd {
                context: ctx,
                handle,
            },
            pd,
            ctx: c,
            users: AtomicUsize::new(0),
        })
        .cast()
}

/// `ibv_dealloc_pd`: 0, `EBUSY` while regions of it are registered, `EINVAL` for a
/// domain that is not alive.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    match DOMAINS.remove_unless(pd, |p| p.users.load(Ordering::Relaxed) > 0) {
        Ok(_) => 0,
        Err(true) => Errno::EBUSY.code(),
        Err(false) => Errno::EINVAL.code(),
    }
}

/// The program's buffer, which it keeps valid and in place from `ibv_reg_mr` until
/// `ibv_dereg_mr` (rdma-core's contract with every program).
struct Foreign {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the octets are the program's, valid (by the contract above) from any thread
// until the region is deregistered, which drops this.
unsafe impl Send for Foreign {}
// SAFETY: as above; every access goes through the region's views.
unsafe impl Sync for Foreign {}

impl AsMut<[u8]> for Foreign {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr..ptr + len` is the program's buffer, valid until deregistration
        // (the contract of `ibv_reg_mr`); `shm::Region::adopt` calls this once and then
        // reaches the octets only through its own locked views. The program writes them
        // too, as it does for any RDMA device: that is what registering shares.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Maps `ibv_access_flags` to the stack's; `Err` names a flag it does not carry out.
pub(crate) fn access_of(flags: u32) -> Result<Access, &'static str> {
    if flags & IBV_ACCESS_ON_DEMAND != 0 {
        return Err("IBV_ACCESS_ON_DEMAND (on-demand paging)");
    }
    let mut a = Access::NONE;
    for (bit, to) in [
        (IBV_ACCESS_LOCAL_WRITE, Access::LOCAL_WRITE),
        (IBV_ACCESS_REMOTE_WRITE, Access::REMOTE_WRITE),
        (IBV_ACCESS_REMOTE_READ, Access::REMOTE_READ),
        (IBV_ACCESS_REMOTE_ATOMIC, Access::REMOTE_ATOMIC),
        (IBV_ACCESS_MW_BIND, Access::BIND),
    ] {
        if flags & bit != 0 {
            a |= to;
        }
    }
    Ok(a)
}

/// `ibv_reg_mr`: the program's `len` octets at `addr`, tagged from `addr` (or from 0
/// with `IBV_ACCESS_ZERO_BASED`).
///
/// # Safety
/// `addr..addr + len` is memory the program owns and keeps valid until `ibv_dereg_mr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: this function's contract is that one's.
    unsafe { ibv_reg_mr_iova2(pd, addr, len, addr as u64, access as u32) }
}

/// `ibv_reg_mr_iova2`: as [`ibv_reg_mr`], tagged from `iova`.
///
/// # Safety
/// As [`ibv_reg_mr`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    match register(pd, addr, len, iova, access) {
        Ok(mr) => mr,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

fn register(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    flags: u32,
) -> Result<*mut ibv_mr, Errno> {
    let p = domain(pd)?;
    if addr.is_null() || len == 0 || (addr as usize).checked_add(len).is_none() {
        return Err(Errno::EINVAL);
    }
    let access = access_of(flags).map_err(|flag| unsupported("ibv_reg_mr with this flag", flag))?;
    let base = (flags & IBV_ACCESS_ZERO_BASED == 0).then_some(iova);
    let mem = Foreign {
        ptr: addr.cast(),
        len,
    };
    let in_place = p.ctx.device.daemon_path().is_some();
    let registered = if in_place {
        // Through iwarpd: the buffer's pages move onto this process's memory file, in
        // place, so that the daemon maps the same octets (shm::arena).
        let at = addr as usize;
        // SAFETY: ibv_reg_mr's contract: the program's buffer, kept mapped until
        // ibv_dereg_mr; the library's documented rule that nothing writes its pages
        // during this call (the library's own thread is held by `on_worker`).
        let shared = on_worker(move || unsafe { shm::arena::share_in_place(at as *mut u8, len) });
        let (file, offset) = shared.map_err(|e| {
            eprintln!("iwarp verbs: ibv_reg_mr: {len} octets at {addr:p}: {e}");
            match e.raw_os_error() {
                Some(code) => Errno(code),
                None => Errno::EINVAL,
            }
        })?;
        let r =
            p.pd.register_region(Region::adopt_in_file(mem, file, offset), base, access);
        if r.is_err() {
            // SAFETY: shared just above, and not registered: nothing else reaches it.
            let _ = on_worker(move || unsafe { shm::arena::unshare(at as *mut u8, len) });
        }
        r
    } else {
        p.pd.register_region(Region::adopt(mem), base, access)
    };
    let mr = registered.map_err(|e| {
        eprintln!("iwarp verbs: ibv_reg_mr: {e}");
        Errno::ENOMEM
    })?;
    let key = u32::from(mr.stag());
    p.users.fetch_add(1, Ordering::Relaxed);
    let ibv = ibv_mr {
        context: p.ibv.context,
        pd,
        addr,
        length: len,
        handle: key,
        lkey: key,
        rkey: key,
    };
    Ok(REGIONS
        .add(Mr {
            ibv,
            mr,
            pd: p,
            in_place,
        })
        .cast())
}

/// `ibv_dereg_mr`: 0, or `EINVAL` for a region that is not registered (deregistered
/// twice, or never this library's).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    let Some(r) = REGIONS.remove(mr) else {
        return Errno::EINVAL.code();
    };
    // Returns once nothing of the engine reads or writes the program's buffer any more:
    // the program may free it next.
    if let Err(e) = crate::rt::block_on(r.mr.clone().deregister()) {
        eprintln!("iwarp verbs: ibv_dereg_mr: {e}");
        return Errno::EBUSY.code();
    }
    if r.in_place {
        let (addr, len) = (r.ibv.addr, r.ibv.length);
        let at = addr as usize;
        // SAFETY: the pages `register` moved, deregistered now, so the daemon no longer
        // writes them; the library's rule that nothing writes them during this call
        // (the library's own thread is held by `on_worker`).
        if let Err(e) = on_worker(move || unsafe { shm::arena::unshare(at as *mut u8, len) }) {
            eprintln!("iwarp verbs: ibv_dereg_mr: {len} octets at {addr:p} stay shared: {e}");
        }
    }
    0
}

/// Runs `f` on the library's runtime thread, the calling thread waiting: while the
/// arena copies a buffer's pages and replaces their mapping, the library's own thread
/// (which allocates and frees heap memory, maybe on the same pages) is held, so no store
/// of its is lost in between.
fn on_worker<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let task = crate::rt::runtime().spawn(async move { f() });
    match crate::rt::block_on(task) {
        Ok(t) => t,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}
