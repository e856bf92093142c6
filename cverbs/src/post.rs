//! Posting work requests, shared by queue pairs (`qp`) and shared receive queues (`srq`):
//! a C scatter/gather list as the stack's, a receive list posted request by request, and
//! what a refused post returns.

use libc::{c_int, c_void};
use verbs::{PostError, RecvWr, STag, Sge, Sgl};

use crate::abi::*;
use crate::errors::Errno;

/// The most entries of one scatter/gather list this library reads (a larger `num_sge`
/// is refused before anything is read).
pub(crate) const MAX_SGE: usize = 64;

/// A C scatter/gather list as the stack's.
///
/// # Safety
/// `sg` points to `n` entries (or `n` is 0).
pub(crate) unsafe fn sgl(sg: *const ibv_sge, n: c_int) -> Result<Sgl, Errno> {
    let n = usize::try_from(n).map_err(|_| Errno::EINVAL)?;
    if n > MAX_SGE {
        return Err(Errno::EINVAL);
    }
    if n == 0 {
        return Ok(Sgl::default());
    }
    if sg.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: the caller's `n` entries (this function's contract).
    let list = unsafe { std::slice::from_raw_parts(sg, n) };
    Ok(list
        .iter()
        .map(|s| Sge {
            stag: STag::from(s.lkey),
            to: s.addr,
            len: s.length,
        })
        .collect())
}

/// The errno of a refused post.
pub(crate) fn post_errno(e: &PostError) -> c_int {
    match e {
        PostError::QueueFull => libc::ENOMEM,
        _ => libc::EINVAL,
    }
}

/// A post that stopped at request `at` with error `e`: `at` is written where the
/// program's `bad_wr` points (rdma-core's contract), and `e` returned.
pub(crate) fn not_posted(bad: *mut *mut c_void, at: *mut c_void, e: c_int) -> c_int {
    if !bad.is_null() {
        // SAFETY: rdma-core's contract: `bad_wr` points to the caller's pointer.
        unsafe { *bad = at };
    }
    e
}

/// Posts the receive list at `wr` with `post`, request by request; on the first that
/// fails, `*bad` names it and its error is returned.
///
/// # Safety
/// `wr` is the program's list of `struct ibv_recv_wr`, valid for this call.
pub(crate) unsafe fn post_recvs(
    wr: *mut c_void,
    bad: *mut *mut c_void,
    mut post: impl FnMut(RecvWr) -> Result<(), c_int>,
) -> c_int {
    let mut at = wr.cast::<ibv_recv_wr>();
    while !at.is_null() {
        // SAFETY: the program's request list, valid for this call (this function's
        // contract).
        let w = unsafe { &*at };
        // SAFETY: its scatter list, likewise.
        let posted = match unsafe { sgl(w.sg_list, w.num_sge) } {
            Ok(sgl) => post(RecvWr {
                wr_id: w.wr_id,
                sgl,
            }),
            Err(e) => Err(e.0),
        };
        if let Err(e) = posted {
            return not_posted(bad, at.cast(), e);
        }
        at = w.next;
    }
    0
}
