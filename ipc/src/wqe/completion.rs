//! Completion entries: [`CQE_SIZE`] octets, little-endian, written by the daemon into a
//! queue pair's completion ring and read by the library.
//!
//! The layout is drawn on [`encode_cqe`]; its fields are named in [`field`], the flag bits
//! in [`flag`].

use rdmap::{Completion, Queue, STag, TermCode, WcOpcode, WcStatus};

use super::CQE_SIZE;
use crate::codec::Malformed;
use crate::layout::{read_u32, read_u64, write_u32, write_u64};

mod field {
    use crate::layout::Field;

    pub(crate) const WR_ID: Field = 0..8;
    pub(crate) const QUEUE: usize = 8;
    pub(crate) const OPCODE: usize = 9;
    pub(crate) const STATUS: usize = 10;
    pub(crate) const FLAGS: usize = 11;
    pub(crate) const BYTE_LEN: Field = 12..16;
    pub(crate) const INVALIDATED: Field = 16..20;
    pub(crate) const TERM: Field = 20..22;
    pub(crate) const IMMEDIATE: Field = 24..32;
    pub(crate) const ATOMIC_ORIG: Field = 32..40;
    pub(crate) const SQ_DONE: Field = 40..44;
}

/// The bits of the flags octet: which optional fields are present.
mod flag {
    pub(super) const INVALIDATED: u8 = 0x01;
    pub(super) const SOLICITED: u8 = 0x02;
    pub(super) const IMMEDIATE: u8 = 0x04;
    pub(super) const ATOMIC_ORIG: u8 = 0x08;
    pub(super) const TERM: u8 = 0x10;
    pub(super) const PUSH_DISCARDED: u8 = 0x20;
    pub(super) const SQ_DONE: u8 = 0x40;
}

/// The opcode octet indexes this.
const OPCODES: [WcOpcode; 12] = [
    WcOpcode::Send,
    WcOpcode::Write,
    WcOpcode::Read,
    WcOpcode::Immediate,
    WcOpcode::FetchAdd,
    WcOpcode::CmpSwap,
    WcOpcode::LocalInvalidate,
    WcOpcode::FastRegister,
    WcOpcode::Bind,
    WcOpcode::Recv,
    WcOpcode::RecvImmediate,
    WcOpcode::Delay,
];

/// The status octet indexes this.
const STATUSES: [WcStatus; 8] = [
    WcStatus::Success,
    WcStatus::LocalLength,
    WcStatus::LocalProtection,
    WcStatus::LocalQpOperation,
    WcStatus::Flushed,
    WcStatus::RemoteAccess,
    WcStatus::RemoteOperation,
    WcStatus::RemoteInvalidRequest,
];

/// Encodes a completion, [`CQE_SIZE`] octets, little-endian:
///
/// | off | size | field |
/// |---|---|---|
/// | 0 | 8 | work request id |
/// | 8 | 1 | queue: 0 send, 1 receive |
/// | 9 | 1 | opcode: index into Send, Write, Read, Immediate, FetchAdd, CmpSwap, LocalInvalidate, FastRegister, Bind, Recv, RecvImmediate, Delay |
/// | 10 | 1 | status: index into Success, LocalLength, LocalProtection, LocalQpOperation, Flushed, RemoteAccess, RemoteOperation, RemoteInvalidRequest |
/// | 11 | 1 | flags: 0x01 invalidated, 0x02 solicited, 0x04 immediate, 0x08 atomic original, 0x10 Terminate code, 0x20 push discarded, 0x40 send queue index |
/// | 12 | 4 | octets |
/// | 16 | 4 | the invalidated STag |
/// | 20 | 2 | the Terminate code's two wire octets |
/// | 22 | 2 | zero |
/// | 24 | 8 | immediate data |
/// | 32 | 8 | the Atomic's original value |
/// | 40 | 4 | a send completion's send queue index: every request before it retired ([`set_sq_done`]) |
/// | 44 | 20 | zero |
pub fn encode_cqe(wc: &Completion) -> [u8; CQE_SIZE] {
    let mut e = [0u8; CQE_SIZE];
    write_u64(&mut e, field::WR_ID, wc.wr_id);
    e[field::QUEUE] = u8::from(wc.queue == Queue::Recv);
    e[field::OPCODE] = OPCODES.iter().position(|o| *o == wc.opcode).unwrap_or(0) as u8;
    e[field::STATUS] = STATUSES
        .iter()
        .position(|s| *s == wc.status)
        .unwrap_or(STATUSES.len() - 1) as u8;
    let mut flags = 0u8;
    if let Some(s) = wc.invalidated {
        flags |= flag::INVALIDATED;
        write_u32(&mut e, field::INVALIDATED, s.to_u32());
    }
    if wc.solicited {
        flags |= flag::SOLICITED;
    }
    if let Some(v) = wc.immediate {
        flags |= flag::IMMEDIATE;
        write_u64(&mut e, field::IMMEDIATE, v);
    }
    if let Some(v) = wc.atomic_orig {
        flags |= flag::ATOMIC_ORIG;
        write_u64(&mut e, field::ATOMIC_ORIG, v);
    }
    if let Some(t) = wc.term {
        flags |= flag::TERM;
        e[field::TERM].copy_from_slice(&t.to_wire());
    }
    if wc.push_discarded {
        flags |= flag::PUSH_DISCARDED;
    }
    e[field::FLAGS] = flags;
    write_u32(&mut e, field::BYTE_LEN, wc.byte_len);
    e
}

/// Decodes a completion copied out of the ring.
pub fn decode_cqe(e: &[u8; CQE_SIZE]) -> Result<Completion, Malformed> {
    let queue = match e[field::QUEUE] {
        0 => Queue::Send,
        1 => Queue::Recv,
        _ => return Err(Malformed("completion queue")),
    };
    let opcode = *OPCODES
        .get(usize::from(e[field::OPCODE]))
        .ok_or(Malformed("completion opcode"))?;
    let status = *STATUSES
        .get(usize::from(e[field::STATUS]))
        .ok_or(Malformed("completion status"))?;
    let flags = e[field::FLAGS];
    let mut wc = Completion::new(read_u64(e, field::WR_ID), queue, opcode, status);
    wc.byte_len = read_u32(e, field::BYTE_LEN);
    wc.invalidated =
        (flags & flag::INVALIDATED != 0).then(|| STag::from_u32(read_u32(e, field::INVALIDATED)));
    wc.solicited = flags & flag::SOLICITED != 0;
    wc.immediate = (flags & flag::IMMEDIATE != 0).then(|| read_u64(e, field::IMMEDIATE));
    wc.atomic_orig = (flags & flag::ATOMIC_ORIG != 0).then(|| read_u64(e, field::ATOMIC_ORIG));
    wc.term = (flags & flag::TERM != 0).then(|| {
        let mut t = [0u8; 2];
        t.copy_from_slice(&e[field::TERM]);
        TermCode::from_wire(t)
    });
    wc.push_discarded = flags & flag::PUSH_DISCARDED != 0;
    Ok(wc)
}

/// Marks a send completion with the send queue's retired index once its request retired:
/// every request before index `done` (this one included) is done with its entry and its
/// staged octets. The library frees them when it reads the completion, as an RNIC's
/// completion names the entry it retires, rather than waiting for the ring's `sq_done`
/// word, which the daemon moves a moment after the completion is in the ring.
pub fn set_sq_done(e: &mut [u8; CQE_SIZE], done: u32) {
    e[field::FLAGS] |= flag::SQ_DONE;
    write_u32(e, field::SQ_DONE, done);
}

/// The send queue index a completion retires up to ([`set_sq_done`]), if it names one.
pub fn sq_done(e: &[u8; CQE_SIZE]) -> Option<u32> {
    (e[field::FLAGS] & flag::SQ_DONE != 0).then(|| read_u32(e, field::SQ_DONE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_with_every_field_is_laid_out_as_documented() {
        let mut wc = Completion::new(
            0x0102_0304_0506_0708,
            Queue::Send,
            WcOpcode::FetchAdd,
            WcStatus::RemoteAccess,
        );
        wc.byte_len = 8;
        wc.invalidated = Some(STag::from_u32(0x1122_3344));
        wc.solicited = true;
        wc.immediate = Some(0xa1a2_a3a4_a5a6_a7a8);
        wc.atomic_orig = Some(0xb1b2_b3b4_b5b6_b7b8);
        wc.term = Some(TermCode::from_wire([0x12, 0x03]));
        wc.push_discarded = true;
        let e = encode_cqe(&wc);
        let mut want = [0u8; CQE_SIZE];
        #[rustfmt::skip]
        let written: &[u8] = &[
            8, 7, 6, 5, 4, 3, 2, 1,
            0, 4, 5, 0x3f,  8, 0, 0, 0,
            0x44, 0x33, 0x22, 0x11,  0x12, 0x03, 0, 0,
            0xa8, 0xa7, 0xa6, 0xa5, 0xa4, 0xa3, 0xa2, 0xa1,
            0xb8, 0xb7, 0xb6, 0xb5, 0xb4, 0xb3, 0xb2, 0xb1,
        ];
        want[..40].copy_from_slice(written);
        assert_eq!(e, want);
        assert_eq!(decode_cqe(&e).unwrap(), wc);

        // Absent optional fields stay zero and read back as absent.
        let mut wc = Completion::new(9, Queue::Recv, WcOpcode::Delay, WcStatus::Flushed);
        wc.byte_len = 0x0102;
        let e = encode_cqe(&wc);
        let mut want = [0u8; CQE_SIZE];
        want[..16].copy_from_slice(&[9, 0, 0, 0, 0, 0, 0, 0, 1, 11, 4, 0, 0x02, 0x01, 0, 0]);
        assert_eq!(e, want);
        assert_eq!(decode_cqe(&e).unwrap(), wc);
        assert_eq!(sq_done(&e), None);
    }

    #[test]
    fn a_send_completion_names_the_send_queue_index_it_retires_up_to() {
        let wc = Completion::new(5, Queue::Send, WcOpcode::Write, WcStatus::Success);
        let mut e = encode_cqe(&wc);
        set_sq_done(&mut e, 0x0102_0304);
        let mut want = encode_cqe(&wc);
        want[11] = 0x40;
        want[40..44].copy_from_slice(&[4, 3, 2, 1]);
        assert_eq!(e, want);
        assert_eq!(sq_done(&e), Some(0x0102_0304));
        assert_eq!(decode_cqe(&e).unwrap(), wc, "the rest reads as before");
    }
}
