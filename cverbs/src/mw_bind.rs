//! `ibv_bind_mw` (the context's `bind_mw`): a type 1 memory window (`mw`) bound at once,
//! its completion posted on the queue pair's (`qp`) send queue, after that queue's
//! earlier requests.

use libc::c_int;
use verbs::{SendFlags, SendOp, SendWr};

use crate::abi::*;
use crate::mw::window;
use crate::qp::queue_pair;

/// The context's `bind_mw` (`ibv_bind_mw`, type 1): binds (or, with no region, unbinds)
/// the window now and posts its completion if one is asked for; 0 or an error number.
///
/// # Safety
/// `bind` points to the caller's bind.
pub(crate) unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    bind: *mut ibv_mw_bind,
) -> c_int {
    let (Ok(w), Ok(q)) = (window(mw), queue_pair(qp.cast())) else {
        return libc::EINVAL;
    };
    // SAFETY: the caller's bind, per this function's contract.
    let Some(b) = (unsafe { bind.as_ref() }) else {
        return libc::EINVAL;
    };
    if let Err(e) = w.bind_now(&b.bind_info) {
        return e;
    }
    if q.signals(b.send_flags) {
        // Its completion, in order with the send queue's: a request that waits for
        // nothing (a Delay of zero), completed as IBV_WC_BIND_MW (`wc`).
        let wr = SendWr {
            wr_id: b.wr_id,
            op: SendOp::Delay {
                duration: std::time::Duration::ZERO,
            },
            flags: SendFlags::SIGNALED,
        };
        if let Err(e) = q.post_local(wr) {
            return e.0;
        }
    }
    0
}
