//! rdma-core 44's structures, field for field as `<infiniband/verbs.h>` (libibverbs-dev on
//! Debian 12) declares them, with their C names, so that a reader can hold one against
//! the other. `tests/layout.rs` compiles a C program against the installed headers and
//! compares every size and offset with these.
//!
//! Only what this library fills or reads is spelled out; a C type it only passes along is
//! opaque here.

#![allow(non_camel_case_types, missing_docs, missing_debug_implementations)]

use libc::{c_char, c_int, c_uint, c_void, pthread_mutex_t};

/// `IBV_SYSFS_NAME_MAX`.
pub const IBV_SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const IBV_SYSFS_PATH_MAX: usize = 256;

/// `IBV_NODE_RNIC`: an iWARP adapter.
pub const IBV_NODE_RNIC: c_int = 4;
/// `IBV_TRANSPORT_IWARP`.
pub const IBV_TRANSPORT_IWARP: c_int = 1;
/// `IBV_PORT_ACTIVE`.
pub const IBV_PORT_ACTIVE: c_int = 4;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
/// `IBV_ATOMIC_HCA`: atomics are atomic with respect to this device's other operations.
pub const IBV_ATOMIC_HCA: c_int = 1;

/// `struct _ibv_device_ops`: two pointers no caller uses any more.
#[repr(C)]
#[derive(Debug)]
pub struct _ibv_device_ops {
    pub _dummy1: *mut c_void,
    pub _dummy2: *mut c_void,
}

/// `struct ibv_device`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    /// `enum ibv_node_type`.
    pub node_type: c_int,
    /// `enum ibv_transport_type`.
    pub transport_type: c_int,
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// A slot of the operation table that only rdma-core's own compatibility code calls.
pub type Compat = *mut c_void;

/// `struct ibv_context_ops`. The slots with names are what rdma-core's inline functions
/// (`ibv_post_send`, `ibv_poll_cq`, ...) call in the application's own code.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_context_ops {
    pub _compat_query_device: Compat,
    pub _compat_query_port: Compat,
    pub _compat_alloc_pd: Compat,
    pub _compat_dealloc_pd: Compat,
    pub _compat_reg_mr: Compat,
    pub _compat_rereg_mr: Compat,
    pub _compat_dereg_mr: Compat,
    pub alloc_mw: Option<unsafe extern "C" fn(*mut ibv_pd, c_int) -> *mut ibv_mw>,
    pub bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int>,
    pub dealloc_mw: Option<unsafe extern "C" fn(*mut ibv_mw) -> c_int>,
    pub _compat_create_cq: Compat,
    pub poll_cq: Option<unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> c_int>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut c_void, c_int) -> c_int>,
    pub _compat_cq_event: Compat,
    pub _compat_resize_cq: Compat,
    pub _compat_destroy_cq: Compat,
    pub _compat_create_srq: Compat,
    pub _compat_modify_srq: Compat,
    pub _compat_query_srq: Compat,
    pub _compat_destroy_srq: Compat,
    pub post_srq_recv: Option<PostFn>,
    pub _compat_create_qp: Compat,
    pub _compat_query_qp: Compat,
    pub _compat_modify_qp: Compat,
    pub _compat_destroy_qp: Compat,
    pub post_send: Option<PostFn>,
    pub post_recv: Option<PostFn>,
    pub _compat_create_ah: Compat,
    pub _compat_destroy_ah: Compat,
    pub _compat_attach_mcast: Compat,
    pub _compat_detach_mcast: Compat,
    pub _compat_async_event: Compat,
}

/// The shape of `post_send`, `post_recv` and `post_srq_recv`: the object, the first work
/// request of a list, and where the first one not posted is written.
pub type PostFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut *mut c_void) -> c_int;

/// `struct ibv_context`. `abi_compat` is not rdma-core's "extended" marker, so the
/// headers' inline functions take their legacy paths, which call this library's exported
/// functions.
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

impl std::fmt::Debug for ibv_context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ibv_context")
            .field("device", &self.device)
            .field("cmd_fd", &self.cmd_fd)
            .field("async_fd", &self.async_fd)
            .finish_non_exhaustive()
    }
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    /// Big-endian, as `__be64`.
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_port_attr {
    /// `enum ibv_port_state`.
    pub state: c_int,
    /// `enum ibv_mtu`.
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// The octets of `struct ibv_port_attr` the exported `ibv_query_port` writes: rdma-core's
/// `struct _compat_ibv_port_attr`, which ends before `port_cap_flags2` (the headers'
/// inline wrapper zeroes the rest).
pub const COMPAT_PORT_ATTR_LEN: usize = std::mem::offset_of!(ibv_port_attr, port_cap_flags2);

/// `union ibv_gid`: 16 octets, aligned as its `__be64` halves.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    /// `enum ibv_gid_type`.
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `IBV_GID_TYPE_IB` in `enum ibv_gid_type` (what iWARP devices report).
pub const IBV_GID_TYPE_IB: u32 = 0;
/// `IBV_GID_TYPE_SYSFS_IB_ROCE_V1` in `enum ibv_gid_type_sysfs` (the same "IB/RoCE v1"
/// that `ibv_devinfo` prints for siw).
pub const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: c_int = 0;

/// `struct ibv_pd`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `enum ibv_access_flags`, the ones this device carries out.
pub const IBV_ACCESS_LOCAL_WRITE: u32 = 1;
pub const IBV_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: u32 = 1 << 2;
pub const IBV_ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;
pub const IBV_ACCESS_MW_BIND: u32 = 1 << 4;
pub const IBV_ACCESS_ZERO_BASED: u32 = 1 << 5;
pub const IBV_ACCESS_ON_DEMAND: u32 = 1 << 6;
pub const IBV_ACCESS_HUGETLB: u32 = 1 << 7;

/// `struct ibv_comp_channel`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

impl std::fmt::Debug for ibv_cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ibv_cq")
            .field("context", &self.context)
            .field("cqe", &self.cqe)
            .finish_non_exhaustive()
    }
}

/// `struct ibv_wc`. `imm_data` is the union of `imm_data` (big-endian) and
/// `invalidated_rkey`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: c_int,
    /// `enum ibv_wc_opcode`.
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `enum ibv_wc_status`, the ones this stack reports.
pub const IBV_WC_SUCCESS: c_int = 0;
pub const IBV_WC_LOC_LEN_ERR: c_int = 1;
pub const IBV_WC_LOC_QP_OP_ERR: c_int = 2;
pub const IBV_WC_LOC_PROT_ERR: c_int = 4;
pub const IBV_WC_WR_FLUSH_ERR: c_int = 5;
pub const IBV_WC_REM_INV_REQ_ERR: c_int = 9;
pub const IBV_WC_REM_ACCESS_ERR: c_int = 10;
pub const IBV_WC_REM_OP_ERR: c_int = 11;
pub const IBV_WC_GENERAL_ERR: c_int = 21;

/// `enum ibv_wc_opcode`.
pub const IBV_WC_SEND: c_int = 0;
pub const IBV_WC_RDMA_WRITE: c_int = 1;
pub const IBV_WC_RDMA_READ: c_int = 2;
pub const IBV_WC_COMP_SWAP: c_int = 3;
pub const IBV_WC_FETCH_ADD: c_int = 4;
pub const IBV_WC_BIND_MW: c_int = 5;
pub const IBV_WC_LOCAL_INV: c_int = 6;
pub const IBV_WC_RECV: c_int = 128;
pub const IBV_WC_RECV_RDMA_WITH_IMM: c_int = 129;

/// `enum ibv_wc_flags`.
pub const IBV_WC_WITH_IMM: c_uint = 1 << 1;
pub const IBV_WC_WITH_INV: c_uint = 1 << 3;

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    /// `enum ibv_qp_state`.
    pub state: c_int,
    /// `enum ibv_qp_type`.
    pub qp_type: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

impl std::fmt::Debug for ibv_qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ibv_qp")
            .field("qp_num", &self.qp_num)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_srq`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// `IBV_SRQ_MAX_WR` of `enum ibv_srq_attr_mask`.
pub const IBV_SRQ_MAX_WR: c_int = 1;

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

/// `IBV_QPT_RC`: the only type iWARP has.
pub const IBV_QPT_RC: c_int = 2;
/// `enum ibv_qp_state`.
pub const IBV_QPS_INIT: c_int = 1;
pub const IBV_QPS_RTS: c_int = 3;
pub const IBV_QPS_ERR: c_int = 6;

/// `struct ibv_async_event`: the object it is about (a queue pair, a completion queue, a
/// port number; a union of pointers and an int in C) and its type.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_async_event {
    pub element: usize,
    /// `enum ibv_event_type`.
    pub event_type: c_int,
}

/// `enum ibv_event_type`, the ones this library reports.
pub const IBV_EVENT_CQ_ERR: c_int = 0;
pub const IBV_EVENT_QP_FATAL: c_int = 1;
pub const IBV_EVENT_DEVICE_FATAL: c_int = 8;

/// `struct ibv_qp_attr` (what `ibv_query_qp` fills).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_qp_attr {
    /// `enum ibv_qp_state`.
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    /// `enum ibv_mtu`.
    pub path_mtu: c_int,
    /// `enum ibv_mig_state`.
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: ibv_qp_cap,
    /// `struct ibv_ah_attr` (an InfiniBand address; iWARP has none).
    pub ah_attr: [u64; 4],
    pub alt_ah_attr: [u64; 4],
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `wr.rdma` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `wr.atomic` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// The `wr` union of `struct ibv_send_wr` (its `ud` member is a connectionless
/// transport's, never read here).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_wr_rdma,
    pub atomic: ibv_wr_atomic,
}

/// `struct ibv_send_wr`. `imm_data` is the union of `imm_data` and `invalidate_rkey`;
/// `qp_type` (XRC) and `bind_mw`/`tso` are only passed over.
#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    /// `enum ibv_wr_opcode`.
    pub opcode: c_int,
    pub send_flags: c_uint,
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    pub qp_type: u32,
    pub bind_mw: ibv_send_wr_bind_mw,
}

/// The `bind_mw` member of `struct ibv_send_wr`'s last union (the largest).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_mw`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    /// `enum ibv_mw_type` (C's `type`).
    pub mw_type: c_int,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw_bind` (what `ibv_bind_mw` takes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: c_uint,
    pub bind_info: ibv_mw_bind_info,
}

/// `enum ibv_mw_type`.
pub const IBV_MW_TYPE_1: c_int = 1;
pub const IBV_MW_TYPE_2: c_int = 2;

/// `enum ibv_wr_opcode`.
pub const IBV_WR_RDMA_WRITE: c_int = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_int = 1;
pub const IBV_WR_SEND: c_int = 2;
pub const IBV_WR_SEND_WITH_IMM: c_int = 3;
pub const IBV_WR_RDMA_READ: c_int = 4;
pub const IBV_WR_ATOMIC_CMP_AND_SWP: c_int = 5;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: c_int = 6;
pub const IBV_WR_LOCAL_INV: c_int = 7;
pub const IBV_WR_BIND_MW: c_int = 8;
pub const IBV_WR_SEND_WITH_INV: c_int = 9;

/// `enum ibv_send_flags`.
pub const IBV_SEND_FENCE: c_uint = 1;
pub const IBV_SEND_SIGNALED: c_uint = 1 << 1;
pub const IBV_SEND_SOLICITED: c_uint = 1 << 2;
pub const IBV_SEND_INLINE: c_uint = 1 << 3;
