//! Synchronous endpoints, as rdma-core's `rdma_server`/`rdma_client` use them:
//! `rdma_create_ep` (an identifier made without a channel, its address resolved or bound,
//! and its queue pair), `rdma_get_request` (a synchronous listener's next connection
//! request, with a queue pair made like the listener's) and `rdma_destroy_ep`. Each call
//! waits for its event and returns its outcome, as librdmacm's do.

use libc::c_int;

use crate::abi::*;
use crate::cm::{id_of, rdma_bind_addr, rdma_create_id, rdma_destroy_id};
use crate::cm::{rdma_resolve_addr, rdma_resolve_route};
use crate::cm_abi::*;
use crate::cm_qp::{rdma_create_qp, rdma_destroy_qp};
use crate::errors::Errno;

/// `rdma_create_ep`: a synchronous identifier for the first entry of `res`. Passive
/// (`RAI_PASSIVE`): bound to its source address, to listen on, each request it hands out
/// getting a queue pair made with `qp_init_attr`. Active: its destination resolved, and
/// a queue pair made with `qp_init_attr` (if given), its completion queues too if it
/// names none. `pd` null: the device's own domain.
///
/// # Safety
/// `id` points to the caller's pointer; `res` is the caller's address info (from
/// `rdma_getaddrinfo`); `qp_init_attr` is null or the caller's attributes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    if id.is_null() || res.is_null() {
        return Errno::EINVAL.fail();
    }
    // SAFETY: the caller's address info, per this function's contract.
    let r = unsafe { &*res };
    let mut cm: *mut rdma_cm_id = std::ptr::null_mut();
    // SAFETY: a pointer of ours to fill.
    if unsafe {
        rdma_create_id(
            std::ptr::null_mut(),
            &mut cm,
            std::ptr::null_mut(),
            r.ai_port_space,
        )
    } != 0
    {
        return -1;
    }
    let Ok(i) = id_of(cm) else {
        return Errno::EINVAL.fail();
    };
    let made = if r.ai_flags & RAI_PASSIVE != 0 {
        passive(&i, r, pd, qp_init_attr)
    } else {
        // SAFETY: the caller's attributes (this function's contract).
        unsafe { active(&i, r, pd, qp_init_attr) }
    };
    if made != 0 {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL);
        rdma_destroy_qp(cm);
        rdma_destroy_id(cm);
        return Errno(errno).fail();
    }
    // SAFETY: the caller's pointer, per this function's contract.
    unsafe { *id = cm };
    0
}

/// A passive endpoint: bound, with the queue pair its requests get.
fn passive(
    i: &crate::cm::CmId,
    r: &rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    if rdma_bind_addr(i.ptr(), r.ai_src_addr) != 0 {
        return -1;
    }
    let mut st = i.state();
    // SAFETY: the caller's attributes, if any (`rdma_create_ep`'s contract), copied.
    st.qp_init_attr = unsafe { qp_init_attr.as_ref() }.map(|a| ibv_qp_init_attr {
        qp_type: r.ai_qp_type,
        ..*a
    });
    // SAFETY: the C structure the identifier owns, written under its state's lock.
    unsafe { (*i.ptr()).pd = pd };
    0
}

/// An active endpoint: its destination resolved, its queue pair made.
///
/// # Safety
/// `qp_init_attr` is null or the caller's attributes.
unsafe fn active(
    i: &crate::cm::CmId,
    r: &rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    if rdma_resolve_addr(i.ptr(), r.ai_src_addr, r.ai_dst_addr, 2000) != 0
        || rdma_resolve_route(i.ptr(), 2000) != 0
    {
        return -1;
    }
    if !qp_init_attr.is_null() {
        // SAFETY: the caller's attributes (this function's contract).
        unsafe { (*qp_init_attr).qp_type = r.ai_qp_type };
        // SAFETY: as above.
        if unsafe { rdma_create_qp(i.ptr(), pd, qp_init_attr) } != 0 {
            return -1;
        }
    }
    0
}

/// `rdma_get_request`: waits for the next connection request on the synchronous
/// listener `listen` and gives its new (synchronous) identifier, with a queue pair made
/// as `rdma_create_ep` asked; its CONNECT_REQUEST is in the identifier's `event`.
/// `EINVAL` for a listener with a channel (it gets its requests as events).
///
/// # Safety
/// `id` points to the caller's pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    let Ok(l) = id_of(listen) else {
        return Errno::EINVAL.fail();
    };
    if !l.is_sync() || id.is_null() {
        return Errno::EINVAL.fail();
    }
    if l.complete() != 0 {
        return -1;
    }
    // SAFETY: the listener's event `complete` kept, alive until acknowledged.
    let ev = unsafe { (*listen).event };
    // SAFETY: as above.
    let (kind, child) = unsafe { ((*ev).event, (*ev).id) };
    if kind != RDMA_CM_EVENT_CONNECT_REQUEST {
        return Errno::EINVAL.fail();
    }
    let attr = l.state().qp_init_attr;
    if let Some(mut a) = attr {
        // SAFETY: the listener's own C structure (its `pd`), and attributes of ours.
        if unsafe { rdma_create_qp(child, (*listen).pd, &mut a) } != 0 {
            return -1;
        }
    }
    // The request's event moves to the new identifier, acknowledged with it.
    l.hold(std::ptr::null_mut());
    if let Ok(c) = id_of(child) {
        c.hold(ev);
    }
    // SAFETY: the caller's pointer, per this function's contract.
    unsafe { *id = child };
    0
}

/// `rdma_destroy_ep`: destroys the identifier, with its queue pair and the completion
/// queues made for it.
#[unsafe(no_mangle)]
pub extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    rdma_destroy_qp(id);
    rdma_destroy_id(id);
}
