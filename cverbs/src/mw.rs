//! Memory windows: `ibv_alloc_mw`, `ibv_dealloc_mw` and the bind behind `ibv_bind_mw`
//! (the context's operations, which rdma-core's inline functions call; `ibv_bind_mw`'s
//! entry, which posts on the queue pair, is `mw_bind`), and the send queue's
//! `IBV_WR_BIND_MW` and `IBV_WR_LOCAL_INV`.
//!
//! A type 1 window is bound by `ibv_bind_mw`, at once, for every queue pair of its domain;
//! the completion it asks for (`IBV_SEND_SIGNALED`, or a queue pair that signals all)
//! comes after the send queue's earlier requests, as an `IBV_WC_BIND_MW`. A type 2 window
//! is bound by an `IBV_WR_BIND_MW` request on the queue pair it is to belong to, under the
//! key the program names (`ibv_inc_rkey` of the window's), and unbound by
//! `IBV_WR_LOCAL_INV` or by the peer's Send with Invalidate.

use std::cell::UnsafeCell;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use libc::c_int;
use verbs::{MwType, SendOp};

use crate::abi::*;
use crate::errors::{Errno, once, set_errno};
use crate::live::Live;
use crate::memory::{Pd, access_of, domain, region};

static WINDOWS: Live<Mw> = Live::new();

/// A memory window, as `ibv_alloc_mw` returns it.
#[repr(C)]
pub(crate) struct Mw {
    ibv: UnsafeCell<ibv_mw>,
    mw: verbs::Mw,
    pd: Arc<Pd>,
}

// SAFETY: `ibv`'s pointers are addresses handed to C (the context and the domain this
// window holds alive); Rust writes only its `rkey` word, under the window's own lock
// (`verbs::Mw`'s, held by each bind). `verbs::Mw` is Send and Sync.
unsafe impl Send for Mw {}
// SAFETY: as above.
unsafe impl Sync for Mw {}

impl Drop for Mw {
    fn drop(&mut self) {
        self.pd.users.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Mw {
    /// Publishes the key the peer names the window by now.
    fn set_rkey(&self, rkey: u32) {
        // SAFETY: the window's own C structure; its `rkey` word is written only by binds,
        // which the program orders (rdma-core's contract: one bind of a window at a time).
        unsafe { (*self.ibv.get()).rkey = rkey };
    }

    /// Binds (or, with no region, unbinds) the window now, as `ibv_bind_mw` does (type
    /// 1); the error number if it cannot be.
    pub(crate) fn bind_now(&self, info: &ibv_mw_bind_info) -> Result<(), c_int> {
        let bound = match target(info) {
            Err(e) => return Err(e.0),
            Ok(None) => self.mw.invalidate().map(|()| u32::from(self.mw.stag())),
            Ok(Some((mr, range, access))) => self
                .mw
                .bind(&mr.mr, range, access)
                .map(|remote| u32::from(remote.stag)),
        };
        match bound {
            Ok(rkey) => {
                self.set_rkey(rkey);
                Ok(())
            }
            Err(e) => {
                once("ibv_bind_mw", &e.to_string());
                Err(libc::EINVAL)
            }
        }
    }
}

/// The context's `alloc_mw`: an unbound window of type 1 or 2 in `pd`; null with errno
/// if `pd` is not alive or the type is neither.
pub(crate) unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, ty: c_int) -> *mut ibv_mw {
    let Ok(p) = domain(pd) else {
        set_errno(Errno::EINVAL);
        return std::ptr::null_mut();
    };
    let kind = match ty {
        IBV_MW_TYPE_1 => MwType::One,
        IBV_MW_TYPE_2 => MwType::Two,
        _ => {
            set_errno(Errno::EINVAL);
            return std::ptr::null_mut();
        }
    };
    let mw = match p.pd.alloc_mw(kind) {
        Ok(mw) => mw,
        Err(e) => {
            once("ibv_alloc_mw", &e.to_string());
            set_errno(Errno::ENOMEM);
            return std::ptr::null_mut();
        }
    };
    p.users.fetch_add(1, Ordering::Relaxed);
    let ibv = ibv_mw {
        context: p.context(),
        pd,
        rkey: u32::from(mw.stag()),
        handle: 0,
        mw_type: ty,
    };
    WINDOWS
        .add(Mw {
            ibv: UnsafeCell::new(ibv),
            mw,
            pd: p,
        })
        .cast()
}

/// The context's `dealloc_mw`: 0, or `EINVAL` if the window is not alive.
pub(crate) unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    match WINDOWS.remove(mw) {
        Some(_) => 0,
        None => libc::EINVAL,
    }
}

/// The window behind `mw`, if it is alive.
pub(crate) fn window(mw: *const ibv_mw) -> Result<Arc<Mw>, Errno> {
    WINDOWS.get(mw).ok_or(Errno::EINVAL)
}

/// What a bind names: the region, the octets of it (from its start) and the rights.
type Target = (
    Arc<crate::memory::Mr>,
    std::ops::Range<usize>,
    verbs::Access,
);

/// The target of a bind (none, with no region and no length: an unbind).
fn target(info: &ibv_mw_bind_info) -> Result<Option<Target>, Errno> {
    if info.mr.is_null() {
        return match info.length {
            0 => Ok(None),
            _ => Err(Errno::EINVAL),
        };
    }
    let mr = region(info.mr)?;
    let start = info.addr.checked_sub(mr.mr.to()).ok_or(Errno::EINVAL)?;
    let start = usize::try_from(start).map_err(|_| Errno::EINVAL)?;
    let len = usize::try_from(info.length).map_err(|_| Errno::EINVAL)?;
    let end = start.checked_add(len).ok_or(Errno::EINVAL)?;
    let access = access_of(info.mw_access_flags).map_err(|why| {
        once("ibv_bind_mw", &format!("{why} is not carried out"));
        Errno::EINVAL
    })?;
    Ok(Some((mr, start..end, access)))
}

/// An `IBV_WR_BIND_MW` request as the stack's (type 2 windows): the key must be the
/// window's next (`ibv_inc_rkey`), which the window takes now.
pub(crate) fn bind_request(b: &ibv_send_wr_bind_mw) -> Result<SendOp, Errno> {
    let w = window(b.mw)?;
    let (mr, range, access) = target(&b.bind_info)?.ok_or(Errno::EINVAL)?;
    let now = w.mw.stag();
    let next = u32::from(now.with_instance(now.instance().wrapping_add(1)));
    if b.rkey != next {
        once(
            "ibv_post_send(IBV_WR_BIND_MW)",
            "the key must be the window's next one: ibv_inc_rkey(mw->rkey)",
        );
        return Err(Errno::EINVAL);
    }
    let (op, remote) = w.mw.bind_op(&mr.mr, range, access).map_err(|e| {
        once("ibv_post_send(IBV_WR_BIND_MW)", &e.to_string());
        Errno::EINVAL
    })?;
    w.set_rkey(u32::from(remote.stag));
    Ok(op)
}
