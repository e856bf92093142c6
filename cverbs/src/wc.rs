//! A completion as rdma-core's `struct ibv_wc`.

use libc::c_int;
use verbs::{WcOpcode, WcStatus};

use crate::abi::*;

/// `w` in rdma-core's form.
pub(crate) fn to_ibv(w: &verbs::Wc) -> ibv_wc {
    let c = &w.wc;
    let mut wc = ibv_wc {
        wr_id: c.wr_id,
        status: status(c.status),
        opcode: opcode(c.opcode),
        byte_len: c.byte_len,
        qp_num: w.qp.0,
        ..Default::default()
    };
    if let Some(imm) = c.immediate {
        // A Send with Immediate Data carries 32 bits, in network order in the field.
        wc.imm_data = (imm as u32).to_be();
        wc.wc_flags |= IBV_WC_WITH_IMM;
    } else if let Some(stag) = c.invalidated {
        wc.imm_data = u32::from(stag);
        wc.wc_flags |= IBV_WC_WITH_INV;
    }
    wc
}

fn status(s: WcStatus) -> c_int {
    match s {
        WcStatus::Success => IBV_WC_SUCCESS,
        WcStatus::LocalLength => IBV_WC_LOC_LEN_ERR,
        WcStatus::LocalProtection => IBV_WC_LOC_PROT_ERR,
        WcStatus::LocalQpOperation => IBV_WC_LOC_QP_OP_ERR,
        WcStatus::Flushed => IBV_WC_WR_FLUSH_ERR,
        WcStatus::RemoteAccess => IBV_WC_REM_ACCESS_ERR,
        WcStatus::RemoteOperation => IBV_WC_REM_OP_ERR,
        WcStatus::RemoteInvalidRequest => IBV_WC_REM_INV_REQ_ERR,
        _ => IBV_WC_GENERAL_ERR,
    }
}

fn opcode(o: WcOpcode) -> c_int {
    match o {
        WcOpcode::Send | WcOpcode::Immediate => IBV_WC_SEND,
        WcOpcode::Write => IBV_WC_RDMA_WRITE,
        WcOpcode::Read => IBV_WC_RDMA_READ,
        WcOpcode::FetchAdd => IBV_WC_FETCH_ADD,
        WcOpcode::CmpSwap => IBV_WC_COMP_SWAP,
        WcOpcode::LocalInvalidate => IBV_WC_LOCAL_INV,
        // This library posts a Delay (of zero) only as a type 1 bind's completion (`mw`).
        WcOpcode::Bind | WcOpcode::FastRegister | WcOpcode::Delay => IBV_WC_BIND_MW,
        WcOpcode::Recv => IBV_WC_RECV,
        WcOpcode::RecvImmediate => IBV_WC_RECV_RDMA_WITH_IMM,
        _ => IBV_WC_SEND,
    }
}
