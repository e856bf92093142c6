//! Segmentation: the current message is cut at the MULPDU into FPDUs, one per call, each
//! framed with its payload copied in once or chained by reference; then the bookkeeping
//! once a segment, and a message's last one, is out.

use std::ops::Range;

use bytes::BytesMut;
use ddp::{Access, STag, SegmentRepr, TaggedRepr, UntaggedRepr};

use super::message::{Done, OutMsg, Source};
use crate::memory::{Memory, MemoryOps};
use crate::sgl::Sge;
use crate::stream::transmit::{Chained, IN_PLACE_MIN, Transmit, ZERO_COPY_MIN};
use crate::stream::{QpState, Stream, StreamStats};
use crate::term::TermCode;
use crate::wire::{Opcode, RdmapControl, SEND_IMM_LEN};
use crate::work::WcStatus;

impl Stream {
    /// Emits one FPDU if there is anything to send. Returns false when idle or blocked.
    pub(in crate::stream) fn transmit_one(
        &mut self,
        mem: &mut dyn MemoryOps,
        out: &mut Transmit,
    ) -> bool {
        if self.tx.current.is_none() {
            match self.next_message(mem) {
                Some(m) => self.tx.current = Some(m),
                None => return false,
            }
        }
        let Some(msg) = self.tx.current.take() else {
            return false;
        };
        let ddp_len = msg.header.header_len();
        // A Send with Immediate Data's value rides after the DDP header of every segment.
        let hlen = ddp_len + msg.imm.map_or(0, |_| SEND_IMM_LEN);
        let max = u32::from(self.cfg.mulpdu)
            .saturating_sub(hlen as u32)
            .max(1);
        let seg_len = (msg.len - msg.off).min(max);
        let last = msg.off + seg_len == msg.len;
        let header = segment_header(&msg.header, msg.off, last);
        let mut hbuf = [0u8; ddp::UNTAGGED_HEADER_LEN + SEND_IMM_LEN];
        header.emit(&mut hbuf[..ddp_len]);
        if let Some(imm) = msg.imm {
            hbuf[ddp_len..hlen].copy_from_slice(&imm.to_be_bytes());
        }

        let range = msg.off as usize..(msg.off + seg_len) as usize;
        if let Some(payload) = chained_payload(&msg, range.clone(), mem, self.framer.markers()) {
            // Header into the arena; the payload by reference, its PAD and CRC behind it.
            let head = out.arena(ddp::UNTAGGED_HEADER_LEN + SEND_IMM_LEN + 2);
            if let Some(trailer) = self
                .framer
                .encode_deferred(&hbuf[..hlen], range.len(), head)
            {
                if matches!(payload, Chained::InPlace { .. }) {
                    self.stats.bytes_sent_in_place += range.len() as u64;
                }
                out.push_chained(payload, trailer);
                return self.segment_sent(msg, seg_len, last);
            }
        }
        let dst = out.arena(self.framer.wire_len(hlen + seg_len as usize));
        let header = &hbuf[..hlen];
        let len = seg_len as usize;
        // The payload is copied once, from where it is straight into the FPDU.
        let filled = self
            .framer
            .encode_with(header, len, dst, |d| match &msg.src {
                Source::Empty => Ok(()),
                Source::Inline(buf, n) => {
                    d.extend_from_slice(&buf[..*n]);
                    Ok(())
                }
                Source::Bytes(b) => {
                    d.extend_from_slice(&b[range]);
                    Ok(())
                }
                Source::Sgl(sgl) => gather(mem, sgl, msg.off, len, d)
                    .map_err(|_| TermCode::RDMAP_LOCAL_CATASTROPHIC),
                Source::Remote(req) => {
                    let to = req.src_to.wrapping_add(msg.off.into());
                    mem.read_append(req.src_stag, to, len, d, Access::REMOTE_READ)
                        .map_err(|e| e.rdmap_term())
                }
            });
        if let Err(code) = filled {
            self.source_failed(&msg, code);
            return true;
        }
        self.segment_sent(msg, seg_len, last)
    }

    /// Bookkeeping after one segment of `msg` went out.
    fn segment_sent(&mut self, mut msg: OutMsg, seg_len: u32, last: bool) -> bool {
        self.tx.emitted = self.framer.position();
        self.stats.fpdus_sent += 1;
        let op = RdmapControl::parse(msg.header.rsvd_ulp()).opcode;
        StreamStats::count(&mut self.stats.octets_sent, op, seg_len as usize);
        if last && op == Opcode::Terminate {
            self.stats.terminates_sent += 1;
        }
        msg.off += seg_len;
        if last {
            self.message_sent(msg.done);
        } else {
            self.tx.current = Some(msg);
        }
        true
    }

    /// Local data could not be read while a message was being sent.
    fn source_failed(&mut self, msg: &OutMsg, code: TermCode) {
        match (&msg.src, msg.done) {
            (Source::Remote(req), _) => {
                // RFC 5040 §4.8: the copied Read Request header reflects the progress.
                let rdma = req.advanced(msg.off).to_bytes();
                self.fatal(code, None, Some(rdma));
            }
            (_, Done::Written(seq)) => {
                self.tx.finish(seq, WcStatus::LocalProtection, None);
                self.fatal(code, None, None);
            }
            _ => self.fatal(code, None, None),
        }
    }

    /// The last segment of a message went out: what its [`Done`] says happens now.
    fn message_sent(&mut self, done: Done) {
        match done {
            Done::Written(seq) => {
                if let Some(e) = self.tx.entry(seq) {
                    e.sent = true;
                }
                self.tx.wait_written.push_back((self.tx.emitted, seq));
            }
            Done::Response => self.tx.responding = false,
            Done::Terminate => {
                if self.tx.all_written() {
                    self.set_state(QpState::Error);
                }
            }
            Done::Nothing => {}
        }
    }
}

/// The header of the segment at `off` of a message.
fn segment_header(h: &SegmentRepr, off: u32, last: bool) -> SegmentRepr {
    match *h {
        SegmentRepr::Tagged(t) => SegmentRepr::Tagged(TaggedRepr {
            last,
            to: t.to.wrapping_add(off.into()),
            ..t
        }),
        SegmentRepr::Untagged(u) => SegmentRepr::Untagged(UntaggedRepr { last, mo: off, ..u }),
    }
}

/// The payload of the segment `range` of `msg`, to be chained by reference rather than
/// copied into the FPDU: an application's `Bytes` from 512 octets, or registered memory
/// from 4 KiB when it lies in one place (one SGE, or the range a Read Request names) with
/// the rights needed. Never with markers (they would go inside the payload).
fn chained_payload(
    msg: &OutMsg,
    range: Range<usize>,
    mem: &mut dyn MemoryOps,
    markers: bool,
) -> Option<Chained> {
    let len = range.len();
    if markers || len < ZERO_COPY_MIN {
        return None;
    }
    let (stag, to, access) = match &msg.src {
        Source::Bytes(b) => return Some(Chained::Bytes(b.slice(range))),
        _ if len < IN_PLACE_MIN => return None,
        Source::Sgl(sgl) => {
            let (stag, to) = within_one_sge(sgl, range.start as u64, len)?;
            (stag, to, Access::LOCAL_READ)
        }
        Source::Remote(req) => (
            req.src_stag,
            req.src_to.wrapping_add(range.start as u64),
            Access::REMOTE_READ,
        ),
        Source::Empty | Source::Inline(..) => return None,
    };
    let (region, off) = mem.in_place(stag, to, len, access).ok()??;
    Some(Chained::InPlace { region, off, len })
}

/// Where `[off, off + len)` of the gather list `sgl` lies, if inside one element.
fn within_one_sge(sgl: &[Sge], mut off: u64, len: usize) -> Option<(STag, u64)> {
    for sge in sgl {
        let sge_len = u64::from(sge.len);
        if off < sge_len {
            return (off + len as u64 <= sge_len).then(|| (sge.stag, sge.to.wrapping_add(off)));
        }
        off -= sge_len;
    }
    None
}

/// Appends `len` octets of the gather list `sgl`, starting `off` octets in, to `dst`.
fn gather(
    mem: &mut dyn Memory,
    sgl: &[Sge],
    mut off: u32,
    mut len: usize,
    dst: &mut BytesMut,
) -> Result<(), crate::memory::AccessError> {
    for sge in sgl {
        if len == 0 {
            break;
        }
        if off >= sge.len {
            off -= sge.len;
            continue;
        }
        let n = ((sge.len - off) as usize).min(len);
        mem.read_append(
            sge.stag,
            sge.to.wrapping_add(u64::from(off)),
            n,
            dst,
            Access::LOCAL_READ,
        )?;
        len -= n;
        off = 0;
    }
    Ok(())
}
