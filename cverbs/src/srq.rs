//! Shared receive queues: `ibv_create_srq`, `ibv_query_srq`, `ibv_modify_srq`,
//! `ibv_destroy_srq`, and `ibv_post_srq_recv` through the context's table. Queue pairs
//! made with `srq` in their attributes draw receive buffers from it when their own
//! receive queue is empty; the completions go to each queue pair's receive queue.

use std::cell::UnsafeCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_int, c_void};

use crate::abi::*;
use crate::errors::{Errno, set_errno, unsupported};
use crate::live::Live;
use crate::memory::{Pd, domain};

static SRQS: Live<Srq> = Live::new();

/// The most scatter entries a receive of the queue holds (as a queue pair's).
const MAX_SGE: u32 = 64;

/// A shared receive queue.
#[repr(C)]
pub(crate) struct Srq {
    ibv: UnsafeCell<ibv_srq>,
    pub(crate) srq: verbs::Srq,
    pd: Arc<Pd>,
    /// Its depth, as created.
    max_wr: u32,
    /// Queue pairs drawing on it: it is not destroyed while any is.
    pub(crate) users: AtomicUsize,
}

// SAFETY: `ibv`'s pointers are addresses handed to C (the context and domain this queue
// holds alive, and the program's `srq_context`); Rust never writes through them, nor the
// pthread fields. `verbs::Srq` is Send and Sync.
unsafe impl Send for Srq {}
// SAFETY: as above.
unsafe impl Sync for Srq {}

/// The queue behind `srq`, if it is alive.
pub(crate) fn shared_queue(srq: *const c_void) -> Result<Arc<Srq>, Errno> {
    SRQS.get(srq).ok_or(Errno::EINVAL)
}

/// `ibv_create_srq`: a queue of `attr.max_wr` receives in `pd`; `attr` is updated to
/// what it got.
///
/// # Safety
/// `attr` points to the caller's `struct ibv_srq_init_attr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    // SAFETY: the caller's attributes (this function's contract), checked for null.
    let Some(attr) = (unsafe { attr.as_mut() }) else {
        set_errno(Errno::EINVAL);
        return std::ptr::null_mut();
    };
    match create(pd, attr) {
        Ok(srq) => srq,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

fn create(pd: *mut ibv_pd, attr: &mut ibv_srq_init_attr) -> Result<*mut ibv_srq, Errno> {
    let p = domain(pd)?;
    let a = &mut attr.attr;
    let most = crate::device::QUEUE_DEPTH as u32;
    if a.max_wr == 0 || a.max_wr > most || a.max_sge > MAX_SGE {
        crate::errors::once(
            "ibv_create_srq",
            &format!("1 to {most} receives of at most {MAX_SGE} entries each"),
        );
        return Err(Errno::EINVAL);
    }
    let srq = p.device().create_srq(a.max_wr as usize).map_err(|e| {
        eprintln!("iwarp verbs: ibv_create_srq: {e}");
        Errno::ENOMEM
    })?;
    a.max_sge = MAX_SGE;
    p.users.fetch_add(1, Ordering::Relaxed);
    let ibv = ibv_srq {
        context: p.context(),
        srq_context: attr.srq_context,
        pd,
        handle: 0,
        mutex: libc::PTHREAD_MUTEX_INITIALIZER,
        cond: libc::PTHREAD_COND_INITIALIZER,
        events_completed: 0,
    };
    Ok(SRQS
        .add(Srq {
            ibv: UnsafeCell::new(ibv),
            srq,
            pd: p,
            max_wr: attr.attr.max_wr,
            users: AtomicUsize::new(0),
        })
        .cast())
}

/// `ibv_destroy_srq`: 0, `EBUSY` while a queue pair draws on it, `EINVAL` for a queue that
/// is not alive. Receives still in it are dropped (no completion, as rdma-core's).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    match SRQS.remove_unless(srq, |s| s.users.load(Ordering::Relaxed) > 0) {
        // Its domain is free of it now, whoever still holds the queue a moment (a queue
        // pair's task): the program may deallocate the domain next.
        Ok(s) => {
            s.pd.users.fetch_sub(1, Ordering::Relaxed);
            0
        }
        Err(true) => Errno::EBUSY.code(),
        Err(false) => Errno::EINVAL.code(),
    }
}

/// `ibv_query_srq`: its depth and entries; no limit is armed (`srq_limit` 0).
///
/// # Safety
/// `attr` points to the caller's `struct ibv_srq_attr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    let Ok(q) = shared_queue(srq.cast()) else {
        return Errno::EINVAL.code();
    };
    // SAFETY: the caller's attributes (this function's contract), checked for null.
    let Some(attr) = (unsafe { attr.as_mut() }) else {
        return Errno::EINVAL.code();
    };
    *attr = ibv_srq_attr {
        max_wr: q.max_wr,
        max_sge: MAX_SGE,
        srq_limit: 0,
    };
    0
}

/// `ibv_modify_srq`: neither resizing (`IBV_SRQ_MAX_WR`) nor the limit event
/// (`IBV_SRQ_LIMIT`) is carried out: `EOPNOTSUPP`, naming which. An empty mask is 0.
///
/// # Safety
/// `attr` points to the caller's `struct ibv_srq_attr` (not read).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    _attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    if shared_queue(srq.cast()).is_err() {
        return Errno::EINVAL.code();
    }
    match mask {
        0 => 0,
        m if m & IBV_SRQ_MAX_WR != 0 => unsupported(
            "ibv_modify_srq resizing",
            "a shared receive queue keeps the depth it was created with",
        )
        .code(),
        _ => unsupported(
            "ibv_modify_srq with a limit",
            "there is no limit event (IBV_EVENT_SRQ_LIMIT_REACHED) on this device",
        )
        .code(),
    }
}

/// The context's `post_srq_recv`.
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut c_void,
    wr: *mut c_void,
    bad: *mut *mut c_void,
) -> c_int {
    let Ok(q) = shared_queue(srq) else {
        return crate::post::not_posted(bad, wr, libc::EINVAL);
    };
    // SAFETY: the program's request list, valid for this call (rdma-core's contract).
    unsafe {
        crate::post::post_recvs(wr, bad, |rwr| {
            q.srq
                .post_recv(rwr)
                .map_err(|e| crate::post::post_errno(&e))
        })
    }
}
