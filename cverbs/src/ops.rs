//! The operation table of every context: what rdma-core's inline `ibv_post_send`,
//! `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_poll_cq` and `ibv_req_notify_cq` call.
//! The completion queue's are in `cq`, the queue pair's in `qp`, the shared receive
//! queue's in `srq`.

use crate::abi::ibv_context_ops;

/// The table a new context gets.
pub(crate) fn table() -> ibv_context_ops {
    let null = std::ptr::null_mut();
    ibv_context_ops {
        _compat_query_device: null,
        _compat_query_port: null,
        _compat_alloc_pd: null,
        _compat_dealloc_pd: null,
        _compat_reg_mr: null,
        _compat_rereg_mr: null,
        _compat_dereg_mr: null,
        alloc_mw: Some(crate::mw::alloc_mw),
        bind_mw: Some(crate::mw_bind::bind_mw),
        dealloc_mw: Some(crate::mw::dealloc_mw),
        _compat_create_cq: null,
        poll_cq: Some(crate::cq::poll_cq),
        req_notify_cq: Some(crate::cq::req_notify_cq),
        _compat_cq_event: null,
        _compat_resize_cq: null,
        _compat_destroy_cq: null,
        _compat_create_srq: null,
        _compat_modify_srq: null,
        _compat_query_srq: null,
        _compat_destroy_srq: null,
        post_srq_recv: Some(crate::srq::post_srq_recv),
        _compat_create_qp: null,
        _compat_query_qp: null,
        _compat_modify_qp: null,
        _compat_destroy_qp: null,
        post_send: Some(crate::qp::post_send),
        post_recv: Some(crate::qp::post_recv),
        _compat_create_ah: null,
        _compat_destroy_ah: null,
        _compat_attach_mcast: null,
        _compat_detach_mcast: null,
        _compat_async_event: null,
    }
}
