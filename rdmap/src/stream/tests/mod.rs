//! Deterministic two-endpoint tests of the stream.

mod delay;
mod direct;
mod drain;
mod negative;
mod ops;
mod pair;
mod pending;
mod prop;
mod pushed;
mod read_v2;
mod refuse;
mod send_imm;
mod snapshot;

use bytes::Bytes;

use crate::{Access, Payload, RecvWr, RemoteBuf, STag, SendFlags, SendOp, SendWr, Sge};

const RW: Access = Access::LOCAL_READ
    .union(Access::LOCAL_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_ATOMIC);

fn stag(index: u32) -> STag {
    STag::new(index, 0x5a)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn send(wr_id: u64, data: &[u8]) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Send {
            data: Payload::Bytes(Bytes::copy_from_slice(data)),
            invalidate: None,
            immediate: None,
        },
        flags: SendFlags::SIGNALED,
    }
}

fn write(wr_id: u64, data: &[u8], dst: RemoteBuf) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Write {
            data: Payload::Bytes(Bytes::copy_from_slice(data)),
            dst,
        },
        flags: SendFlags::SIGNALED,
    }
}

fn read(wr_id: u64, src: RemoteBuf, dst: Sge) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Read { src, dst },
        flags: SendFlags::SIGNALED,
    }
}

fn recv(wr_id: u64, stag: STag, to: u64, len: u32) -> RecvWr {
    RecvWr {
        wr_id,
        sgl: [Sge { stag, to, len }].into(),
    }
}

fn remote(stag: STag, to: u64, len: u32) -> RemoteBuf {
    RemoteBuf { stag, to, len }
}

fn sge(stag: STag, to: u64, len: u32) -> Sge {
    Sge { stag, to, len }
}

/// The default MPA settings with `f` applied.
fn mpa_cfg(f: impl FnOnce(&mut mpa::MpaConfig)) -> mpa::MpaConfig {
    let mut c = mpa::MpaConfig::default();
    f(&mut c);
    c
}
