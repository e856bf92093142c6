//! The connection manager's queue pairs: `rdma_create_qp` (in the identifier's domain, or
//! the device's own; with completion queues made for it when the attributes name none, as
//! librdmacm makes them) and `rdma_destroy_qp`.

use std::sync::OnceLock;

use libc::c_int;

use crate::abi::*;
use crate::cm::id_of;
use crate::cm_abi::*;
use crate::errors::Errno;
use crate::open::cm_context;

/// `rdma_create_qp`: a queue pair for this identifier's connection, in `pd` (or the
/// device's own domain, as librdmacm's, if null). Completion queues the attributes do not
/// name are made for it, each with a channel, as librdmacm makes them (the identifier's
/// `send_cq`, `recv_cq` and their channels; their context is the identifier), and go
/// with the queue pair.
///
/// # Safety
/// `attr` points to the caller's attributes (their capabilities are updated).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    let Ok(i) = id_of(id) else {
        return Errno::EINVAL.fail();
    };
    if attr.is_null() {
        return Errno::EINVAL.fail();
    }
    // SAFETY: the caller's attributes, per this function's contract.
    let attr = unsafe { &mut *attr };
    let Some(ctx) = cm_context() else {
        return Errno::ENODEV.fail();
    };
    let pd = match pd.is_null() {
        false => pd,
        true => match default_pd() {
            Some(pd) => pd,
            None => return -1,
        },
    };
    let mut st = i.state();
    let mut made = Vec::new();
    for (cq, depth) in [
        (&mut attr.send_cq, attr.cap.max_send_wr),
        (&mut attr.recv_cq, attr.cap.max_recv_wr),
    ] {
        if cq.is_null() {
            match own_cq(ctx, depth, i.ptr()) {
                Some(pair) => {
                    *cq = pair.0;
                    made.push(pair);
                }
                None => {
                    free_cqs(&mut made);
                    return -1;
                }
            }
        }
    }
    match crate::qp::create(pd, attr) {
        Ok(qp) => {
            st.qp = Some(qp);
            st.own_cqs = made;
            let ibv = i.ptr();
            // SAFETY: the C structure this identifier owns, written under `state`'s lock.
            unsafe {
                (*ibv).pd = pd;
                (*ibv).send_cq = attr.send_cq;
                (*ibv).recv_cq = attr.recv_cq;
                for &(cq, ch) in &st.own_cqs {
                    if cq == attr.send_cq {
                        (*ibv).send_cq_channel = ch;
                    }
                    if cq == attr.recv_cq {
                        (*ibv).recv_cq_channel = ch;
                    }
                }
            }
            i.publish(&st);
            0
        }
        Err(e) => {
            free_cqs(&mut made);
            e.fail()
        }
    }
}

/// A completion queue of `depth` (at least 1) with a channel of its own, its context
/// `id` (what librdmacm's `rdma_get_send_comp` checks); none, errno set, if either fails.
fn own_cq(
    ctx: *mut ibv_context,
    depth: u32,
    id: *mut rdma_cm_id,
) -> Option<(*mut ibv_cq, *mut ibv_comp_channel)> {
    let ch = crate::cq::ibv_create_comp_channel(ctx);
    if ch.is_null() {
        return None;
    }
    let cqe = c_int::try_from(depth.max(1)).unwrap_or(c_int::MAX);
    let cq = crate::cq::ibv_create_cq(ctx, cqe, id.cast(), ch, 0);
    if cq.is_null() {
        crate::cq::ibv_destroy_comp_channel(ch);
        return None;
    }
    Some((cq, ch))
}

/// Frees the queues and channels `own_cq` made (their queue pair is gone).
fn free_cqs(made: &mut Vec<(*mut ibv_cq, *mut ibv_comp_channel)>) {
    for (cq, ch) in made.drain(..) {
        crate::cq::ibv_destroy_cq(cq);
        crate::cq::ibv_destroy_comp_channel(ch);
    }
}

/// The device's own protection domain, for identifiers given none (librdmacm's too):
/// made on first use, kept for the process's life.
fn default_pd() -> Option<*mut ibv_pd> {
    static PD: OnceLock<usize> = OnceLock::new();
    let pd =
        *PD.get_or_init(|| cm_context().map_or(0, |ctx| crate::memory::ibv_alloc_pd(ctx) as usize));
    (pd != 0).then_some(pd as *mut ibv_pd)
}

/// `rdma_destroy_qp`: destroys the identifier's queue pair, and the completion queues
/// `rdma_create_qp` made for it.
#[unsafe(no_mangle)]
pub extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    if let Ok(i) = id_of(id) {
        let mut st = i.state();
        if let Some(qp) = st.qp.take() {
            crate::qp::ibv_destroy_qp(qp.ibv());
        }
        free_cqs(&mut st.own_cqs);
        let ibv = i.ptr();
        // SAFETY: the C structure this identifier owns, written under `state`'s lock.
        unsafe {
            (*ibv).send_cq = std::ptr::null_mut();
            (*ibv).recv_cq = std::ptr::null_mut();
            (*ibv).send_cq_channel = std::ptr::null_mut();
            (*ibv).recv_cq_channel = std::ptr::null_mut();
        }
        i.publish(&st);
    }
}
