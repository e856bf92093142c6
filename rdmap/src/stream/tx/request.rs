//! The message of a send-queue request (Send, RDMA Write, Immediate Data, Read, Atomic),
//! built after its local checks; Reads and Atomics enter the ORQ here.

use ddp::{Access, STag};
use mpa::Extensions;

use super::message::{Done, OutMsg, inline, payload_source, read_v2_flag, tagged, untagged};
use super::{OrqEntry, ReadSink};
use crate::memory::Memory;
use crate::sgl::Sge;
use crate::stream::Stream;
use crate::wire::{
    AtomicOp, AtomicRequestRepr, Opcode, READ_V2_REQUEST_LEN, ReadRequestRepr, ReadV2RequestRepr,
};
use crate::work::{Payload, RemoteBuf, SendFlags, SendOp, SendWr, WcStatus};

impl Stream {
    /// Turns a send request into its message, after the local checks.
    pub(super) fn request_message(
        &mut self,
        wr: SendWr,
        seq: u64,
        mem: &mut dyn Memory,
    ) -> Result<OutMsg, WcStatus> {
        let solicited = wr.flags.contains(SendFlags::SOLICITED);
        match wr.op {
            SendOp::LocalInvalidate { .. }
            | SendOp::FastRegister(_)
            | SendOp::Bind(_)
            | SendOp::Delay { .. } => Err(WcStatus::LocalQpOperation),
            SendOp::Send {
                data,
                invalidate,
                immediate,
            } => self.send_message(seq, mem, data, invalidate, immediate, solicited),
            // Registered already (register_first): the rest is a plain Send.
            SendOp::RegisterSend { data, .. } => {
                self.send_message(seq, mem, data, None, None, solicited)
            }
            SendOp::Write { data, dst } => {
                let len = check_payload(mem, &data)?;
                if len > dst.len {
                    return Err(WcStatus::LocalLength);
                }
                Ok(OutMsg::request(
                    seq,
                    tagged(Opcode::RdmaWrite, dst.stag, dst.to),
                    payload_source(data),
                    len,
                ))
            }
            SendOp::Immediate { data } => {
                let op = if solicited {
                    Opcode::ImmediateDataSe
                } else {
                    Opcode::ImmediateData
                };
                let msn = self.tx.next_msn(0);
                let src = inline(|b| b.copy_from_slice(&data.to_be_bytes()), 8);
                Ok(OutMsg::request(seq, untagged(op, 0, msn, 0), src, 8))
            }
            SendOp::Read { src, dst } => {
                if dst.len < src.len {
                    return Err(WcStatus::LocalLength);
                }
                let sink = Sge {
                    len: src.len,
                    ..dst
                };
                self.read_message(seq, mem, src, sink.into(), false)
            }
            SendOp::ReadSgl { src, dst } => self.read_message(seq, mem, src, dst, true),
            SendOp::FetchAdd {
                dst,
                add,
                mask,
                result,
            } => self.atomic_message(
                seq,
                mem,
                dst.stag,
                dst.to,
                result,
                (AtomicOp::FetchAdd, add, mask, 0, u64::MAX),
            ),
            SendOp::CmpSwap {
                dst,
                compare,
                compare_mask,
                swap,
                swap_mask,
                result,
            } => self.atomic_message(
                seq,
                mem,
                dst.stag,
                dst.to,
                result,
                (AtomicOp::CmpSwap, swap, swap_mask, compare, compare_mask),
            ),
        }
    }

    /// A Send of any variant (`immediate`: the extension's Send with Immediate Data).
    fn send_message(
        &mut self,
        seq: u64,
        mem: &mut dyn Memory,
        data: Payload,
        invalidate: Option<STag>,
        immediate: Option<u32>,
        solicited: bool,
    ) -> Result<OutMsg, WcStatus> {
        if immediate.is_some() && !self.extensions.contains(Extensions::SEND_IMMEDIATE) {
            // The peer did not agree: it would take the opcode for an error.
            return Err(WcStatus::LocalQpOperation);
        }
        let len = check_payload(mem, &data)?;
        let op = Opcode::send(invalidate.is_some(), solicited, immediate.is_some());
        let msn = self.tx.next_msn(0);
        let inv = invalidate.map_or(0, STag::to_u32);
        Ok(OutMsg {
            imm: immediate,
            ..OutMsg::request(seq, untagged(op, 0, msn, inv), payload_source(data), len)
        })
    }

    /// A Read of `src` into `sink` (at least `src.len` octets): Read V2 when both sides
    /// agreed, an RFC 5040 Read (whose sink must be one entry) otherwise, or, for
    /// `v2_only` (a scatter list), not at all.
    fn read_message(
        &mut self,
        seq: u64,
        mem: &mut dyn Memory,
        src: RemoteBuf,
        sink: crate::Sgl,
        v2_only: bool,
    ) -> Result<OutMsg, WcStatus> {
        let v2 = self.extensions.contains(Extensions::READ_V2);
        if self.ord == 0 || (v2_only && !v2) {
            return Err(WcStatus::LocalQpOperation);
        }
        let room = sink.iter().try_fold(0u32, |a, s| a.checked_add(s.len));
        if room.is_none_or(|r| r < src.len) {
            return Err(WcStatus::LocalLength);
        }
        for sge in &sink {
            mem.check(sge.stag, sge.to, sge.len, Access::LOCAL_WRITE)
                .map_err(|_| WcStatus::LocalProtection)?;
        }
        let msn = self.tx.next_msn(1);
        let header = read_v2_flag(untagged(Opcode::ReadRequest, 1, msn, 0), v2);
        let (sink, req, len) = match (v2, sink.first().copied()) {
            (false, Some(one)) => {
                // Read V1: the sink goes on the wire.
                let req = ReadRequestRepr {
                    sink_stag: one.stag,
                    sink_to: one.to,
                    size: src.len,
                    src_stag: src.stag,
                    src_to: src.to,
                };
                let len = ReadRequestRepr::buffer_len();
                (ReadSink::Named(one), inline(|b| req.emit(b), len), len)
            }
            _ => {
                // Read V2: no sink on the wire; it stays in the ORQ entry.
                let req = ReadV2RequestRepr {
                    size: src.len,
                    src_stag: src.stag,
                    src_to: src.to,
                };
                let sink = ReadSink::V2 { id: msn, sgl: sink };
                let len = READ_V2_REQUEST_LEN;
                (sink, inline(|b| req.emit(b), len), len)
            }
        };
        self.tx.orq.push_back(OrqEntry::Read {
            seq,
            len: src.len,
            received: 0,
            sink,
        });
        Ok(OutMsg {
            done: Done::Nothing,
            ..OutMsg::request(seq, header, req, len as u32)
        })
    }

    fn atomic_message(
        &mut self,
        seq: u64,
        mem: &mut dyn Memory,
        stag: STag,
        to: u64,
        result: Sge,
        (op, data, data_mask, compare, compare_mask): (AtomicOp, u64, u64, u64, u64),
    ) -> Result<OutMsg, WcStatus> {
        if self.ord == 0 {
            return Err(WcStatus::LocalQpOperation);
        }
        if result.len < 8 {
            return Err(WcStatus::LocalLength);
        }
        mem.check(result.stag, result.to, 8, Access::LOCAL_WRITE)
            .map_err(|_| WcStatus::LocalProtection)?;
        let msn = self.tx.next_msn(1);
        // The Request Identifier is the MSN, as urdma does: unique among outstanding requests.
        let req = AtomicRequestRepr {
            op,
            req_id: msn,
            stag,
            to,
            add_or_swap: data,
            add_or_swap_mask: data_mask,
            compare,
            compare_mask,
        };
        self.tx.orq.push_back(OrqEntry::Atomic {
            seq,
            req_id: msn,
            result,
        });
        let len = AtomicRequestRepr::buffer_len();
        Ok(OutMsg {
            header: untagged(Opcode::AtomicRequest, 1, msn, 0),
            imm: None,
            src: inline(|b| req.emit(b), len),
            len: len as u32,
            off: 0,
            done: Done::Nothing,
        })
    }
}

/// Length of a payload after checking every gather entry for local-read access.
fn check_payload(mem: &dyn Memory, p: &Payload) -> Result<u32, WcStatus> {
    let len = p.len().ok_or(WcStatus::LocalLength)?;
    if let Payload::Sgl(sgl) = p {
        for sge in sgl {
            mem.check(sge.stag, sge.to, sge.len, Access::LOCAL_READ)
                .map_err(|_| WcStatus::LocalProtection)?;
        }
    }
    Ok(len)
}
