//! Send queue entries: [`SQE_SIZE`] octets, little-endian, written by the library and
//! read by the daemon.
//!
//! The layout is drawn on [`encode_sqe`](super::encode_sqe).
//!
//! This file names the fields ([`field`]), the opcodes ([`op`]), the flag bits and the
//! payload kinds, and reads and writes the fields through [`SendEntry`]; `mod.rs` turns
//! work requests into entries and back.

use bytes::Bytes;
use rdmap::{Access, Payload, RemoteBuf, STag, SendFlags, Sge, Sgl};

use super::Data;
use crate::codec::Malformed;
use crate::layout::{read_u32, read_u64, write_u32, write_u64};
use crate::wqe::sge::{SGE_LEN, get_sges, put_sges};
use crate::wqe::{EncodeError, SQE_SIZE};

mod field {
    use super::SQE_SIZE;
    use crate::layout::Field;

    pub(crate) const OPCODE: usize = 0;
    pub(crate) const FLAGS: usize = 1;
    pub(crate) const PAYLOAD: usize = 2;
    pub(crate) const SGE_COUNT: usize = 3;
    pub(crate) const PAYLOAD_LEN: Field = 4..8;
    pub(crate) const WR_ID: Field = 8..16;
    pub(crate) const STAG: Field = 16..20;
    pub(crate) const REGION_STAG: Field = 20..24;
    pub(crate) const TO: Field = 24..32;
    pub(crate) const REMOTE_LEN: Field = 32..36;
    pub(crate) const ACCESS: Field = 36..40;
    pub(crate) const A: Field = 40..48;
    /// The low half of `A`: a Send's 32-bit immediate value.
    pub(crate) const A_LOW: Field = 40..44;
    pub(crate) const B: Field = 48..56;
    pub(crate) const C: Field = 56..64;
    pub(crate) const D: Field = 64..72;
    pub(crate) const STAGED_OFFSET: Field = 72..76;
    pub(crate) const BODY: Field = 96..SQE_SIZE;
}

/// Opcodes.
pub(super) mod op {
    pub(crate) const SEND: u8 = 1;
    pub(crate) const WRITE: u8 = 2;
    pub(crate) const READ: u8 = 3;
    pub(crate) const IMMEDIATE: u8 = 4;
    pub(crate) const FETCH_ADD: u8 = 5;
    pub(crate) const CMP_SWAP: u8 = 6;
    pub(crate) const LOCAL_INVALIDATE: u8 = 7;
    pub(crate) const FAST_REGISTER: u8 = 8;
    pub(crate) const BIND: u8 = 9;
    pub(crate) const DELAY: u8 = 10;
    pub(crate) const REGISTER_SEND: u8 = 11;
    pub(crate) const READ_SGL: u8 = 12;
}

/// The longest payload carried inline in a send queue entry.
pub const INLINE_MAX: usize = field::BODY.end - field::BODY.start;
/// The most gather entries of a send queue entry.
pub const SQ_SGES: usize = INLINE_MAX / SGE_LEN;

const F_SIGNALED: u8 = 0x01;
const F_SOLICITED: u8 = 0x02;
const F_FENCE: u8 = 0x04;
pub(super) const F_INVALIDATE: u8 = 0x08;
pub(super) const F_ONE_TOUCH: u8 = 0x20;
pub(super) const F_IMMEDIATE: u8 = 0x40;
/// The entry's twin message was pushed (seed 000's indication 110).
pub const F_PUSHED: u8 = 0x10;
/// The library tried to write the request to the shared socket itself and could not (the
/// send queue was not empty, or the stream was busy): its completion says so.
pub const F_PUSH_DISCARDED: u8 = 0x80;
/// Every flag bit an entry may have: all eight, so no flags octet is garbage.
#[cfg(test)]
const _ALL_FLAGS: () = assert!(
    F_SIGNALED
        | F_SOLICITED
        | F_FENCE
        | F_INVALIDATE
        | F_PUSHED
        | F_ONE_TOUCH
        | F_IMMEDIATE
        | F_PUSH_DISCARDED
        == 0xff
);

/// The request flags and their bits.
pub(super) const REQUEST_FLAGS: [(SendFlags, u8); 3] = [
    (SendFlags::SIGNALED, F_SIGNALED),
    (SendFlags::SOLICITED, F_SOLICITED),
    (SendFlags::FENCE, F_FENCE),
];

pub(super) const P_INLINE: u8 = 1;
pub(super) const P_SGL: u8 = 2;
const P_STAGED: u8 = 3;

/// A read/write view of a send queue entry, always a whole [`SQE_SIZE`]-octet array (so
/// no accessor can panic).
#[derive(Debug)]
pub(super) struct SendEntry<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SendEntry<T> {
    pub(super) fn new(buffer: T) -> Self {
        debug_assert_eq!(buffer.as_ref().len(), SQE_SIZE);
        Self { buffer }
    }

    pub(super) fn into_inner(self) -> T {
        self.buffer
    }

    pub(super) fn octets(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub(super) fn opcode(&self) -> u8 {
        self.octets()[field::OPCODE]
    }

    pub(super) fn flags(&self) -> u8 {
        self.octets()[field::FLAGS]
    }

    pub(super) fn payload_kind(&self) -> u8 {
        self.octets()[field::PAYLOAD]
    }

    pub(super) fn sge_count(&self) -> usize {
        usize::from(self.octets()[field::SGE_COUNT])
    }

    pub(super) fn payload_len(&self) -> u32 {
        read_u32(self.octets(), field::PAYLOAD_LEN)
    }

    pub(super) fn wr_id(&self) -> u64 {
        read_u64(self.octets(), field::WR_ID)
    }

    pub(super) fn stag(&self) -> STag {
        STag::from_u32(read_u32(self.octets(), field::STAG))
    }

    pub(super) fn region_stag(&self) -> STag {
        STag::from_u32(read_u32(self.octets(), field::REGION_STAG))
    }

    pub(super) fn to(&self) -> u64 {
        read_u64(self.octets(), field::TO)
    }

    /// STag, tagged offset and remote length.
    pub(super) fn remote(&self) -> RemoteBuf {
        RemoteBuf {
            stag: self.stag(),
            to: self.to(),
            len: read_u32(self.octets(), field::REMOTE_LEN),
        }
    }

    pub(super) fn access(&self) -> Access {
        Access::from_bits_truncate(read_u32(self.octets(), field::ACCESS) as u8)
    }

    pub(super) fn a(&self) -> u64 {
        read_u64(self.octets(), field::A)
    }

    pub(super) fn a_low(&self) -> u32 {
        read_u32(self.octets(), field::A_LOW)
    }

    pub(super) fn b(&self) -> u64 {
        read_u64(self.octets(), field::B)
    }

    pub(super) fn c(&self) -> u64 {
        read_u64(self.octets(), field::C)
    }

    pub(super) fn d(&self) -> u64 {
        read_u64(self.octets(), field::D)
    }

    pub(super) fn staged_offset(&self) -> u32 {
        read_u32(self.octets(), field::STAGED_OFFSET)
    }

    pub(super) fn body(&self) -> &[u8] {
        &self.octets()[field::BODY]
    }

    /// The first `n` gather entries of the body (`n` at most [`SQ_SGES`]).
    pub(super) fn sges(&self, n: usize) -> Sgl {
        get_sges(self.body(), n)
    }

    /// The payload, checked: `own` makes `Bytes` of an owned payload's octets.
    pub(super) fn payload(
        &self,
        own: &mut dyn FnMut(Data<'_>) -> Option<Bytes>,
    ) -> Result<Payload, Malformed> {
        let len = self.payload_len();
        let nsge = self.sge_count();
        match self.payload_kind() {
            P_INLINE if len as usize <= INLINE_MAX => {
                own(Data::Inline(&self.body()[..len as usize]))
                    .map(Payload::Bytes)
                    .ok_or(Malformed("inline payload"))
            }
            P_STAGED => own(Data::Staged {
                offset: self.staged_offset(),
                len,
            })
            .map(Payload::Bytes)
            .ok_or(Malformed("staged range")),
            P_SGL if nsge <= SQ_SGES => Ok(Payload::Sgl(self.sges(nsge))),
            _ => Err(Malformed("send entry payload")),
        }
    }

    /// The one gather entry of a Read's sink or an Atomic's result.
    pub(super) fn sink(&self) -> Result<Sge, Malformed> {
        if self.sge_count() != 1 {
            return Err(Malformed("send entry sink"));
        }
        Ok(self.sges(1)[0])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SendEntry<T> {
    pub(super) fn octets_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    pub(super) fn set_opcode(&mut self, v: u8) {
        self.octets_mut()[field::OPCODE] = v;
    }

    pub(super) fn set_flags(&mut self, v: u8) {
        self.octets_mut()[field::FLAGS] = v;
    }

    pub(super) fn set_payload_kind(&mut self, v: u8) {
        self.octets_mut()[field::PAYLOAD] = v;
    }

    pub(super) fn set_sge_count(&mut self, v: u8) {
        self.octets_mut()[field::SGE_COUNT] = v;
    }

    pub(super) fn set_payload_len(&mut self, v: u32) {
        write_u32(self.octets_mut(), field::PAYLOAD_LEN, v);
    }

    pub(super) fn set_wr_id(&mut self, v: u64) {
        write_u64(self.octets_mut(), field::WR_ID, v);
    }

    pub(super) fn set_stag(&mut self, v: STag) {
        write_u32(self.octets_mut(), field::STAG, v.to_u32());
    }

    pub(super) fn set_region_stag(&mut self, v: STag) {
        write_u32(self.octets_mut(), field::REGION_STAG, v.to_u32());
    }

    pub(super) fn set_to(&mut self, v: u64) {
        write_u64(self.octets_mut(), field::TO, v);
    }

    pub(super) fn set_remote(&mut self, r: &RemoteBuf) {
        self.set_stag(r.stag);
        self.set_to(r.to);
        write_u32(self.octets_mut(), field::REMOTE_LEN, r.len);
    }

    pub(super) fn set_access(&mut self, v: Access) {
        write_u32(self.octets_mut(), field::ACCESS, u32::from(v.bits()));
    }

    pub(super) fn set_a(&mut self, v: u64) {
        write_u64(self.octets_mut(), field::A, v);
    }

    pub(super) fn set_b(&mut self, v: u64) {
        write_u64(self.octets_mut(), field::B, v);
    }

    pub(super) fn set_c(&mut self, v: u64) {
        write_u64(self.octets_mut(), field::C, v);
    }

    pub(super) fn set_d(&mut self, v: u64) {
        write_u64(self.octets_mut(), field::D, v);
    }

    pub(super) fn set_staged_offset(&mut self, v: u32) {
        write_u32(self.octets_mut(), field::STAGED_OFFSET, v);
    }

    pub(super) fn body_mut(&mut self) -> &mut [u8] {
        &mut self.octets_mut()[field::BODY]
    }

    /// The gather entries (at most [`SQ_SGES`]) into the body, and their count.
    pub(super) fn set_sges(&mut self, sges: &[Sge]) {
        self.set_sge_count(sges.len() as u8);
        put_sges(self.body_mut(), sges);
    }

    /// An owned payload inline (at most [`INLINE_MAX`] octets), or staged by `stage`; a
    /// gather list into the body.
    pub(super) fn set_payload(
        &mut self,
        data: &Payload,
        stage: &mut dyn FnMut(&[u8]) -> Option<u32>,
    ) -> Result<(), EncodeError> {
        match data {
            Payload::Bytes(b) if b.len() <= INLINE_MAX => {
                self.set_payload_kind(P_INLINE);
                self.set_payload_len(b.len() as u32);
                self.body_mut()[..b.len()].copy_from_slice(b);
            }
            Payload::Bytes(b) => {
                let len = u32::try_from(b.len()).map_err(|_| EncodeError::NoStagingRoom)?;
                let at = stage(b).ok_or(EncodeError::NoStagingRoom)?;
                self.set_payload_kind(P_STAGED);
                self.set_payload_len(len);
                self.set_staged_offset(at);
            }
            Payload::Sgl(sgl) => {
                if sgl.len() > SQ_SGES {
                    return Err(EncodeError::TooManyEntries { max: SQ_SGES });
                }
                self.set_payload_kind(P_SGL);
                self.set_sges(sgl);
            }
        }
        Ok(())
    }
}
