//! The operations of an input (the table in the module documentation of `servant`): what
//! the hostile client writes, asks or has the peer do, one method each.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use ipc::control::{QpChange, Reply, Request};
use ipc::qpseg::{RQE_SIZE, SQE_SIZE};
use ipc::wqe::{INLINE_MAX, encode_sqe, set_inline};
use rdmap::{Payload, RemoteBuf, SendFlags, SendOp, SendWr};

use super::fixup::{get32, get64};
use super::{Harness, LOCAL, Outcome, SRQ_DEPTH, trace};
use crate::input::Input;
use crate::rings::layout::{HEADER, QP_WORDS, RQ_PROD, SQ_CONS, SQ_PROD, SRQ_CONS, SRQ_PROD};

impl Harness {
    /// One operation; `Some` once the queue pair ended or stuck (the rest is skipped).
    pub(super) fn op(&mut self, input: &mut Input<'_>) -> Option<Outcome> {
        let op = input.u8();
        trace(format_args!("op {}", op % 12));
        match op % 12 {
            0 => self.send_entry(input),
            1 => self.recv_entry(input),
            2 => self.srq_entry(input),
            3 => self.staging_octets(input),
            4 => self.push_slot(input),
            5 => self.index_word(input),
            6 => self.octets_anywhere(input),
            7 => {
                self.qp().ring();
                match self.settle() {
                    Outcome::Settled => {}
                    other => return Some(other),
                }
            }
            8 => self.control_request(input),
            9 => self.peer_sends(input),
            10 => self.qp.as_mut().expect("a queue pair").drain(),
            _ => self.qp().ring(),
        }
        None
    }

    /// Op 0: a send queue entry at `sq_prod`, published; with `fix` bit 7 its twin
    /// message goes into a push slot too, as the library does.
    fn send_entry(&self, input: &mut Input<'_>) {
        let fix = input.u8();
        let mut e = input.entry::<SQE_SIZE>(SQE_SIZE);
        self.fix_sqe(&mut e, fix);
        let qp = self.qp();
        let prod = qp.word(SQ_PROD);
        let message = e;
        if fix & 0x80 != 0 {
            e[1] |= 0x10;
        }
        qp.seg.write(qp.sq_at(prod), &e);
        qp.set(SQ_PROD, prod.wrapping_add(1));
        if fix & 0x80 != 0 {
            let mut m = message;
            // A gather list goes inline, as the library copies it in: here the
            // first entry's octets of the client's region (at most what fits).
            if m[2] == 2 {
                let to = (get64(&m, 96 + 8) % u64::from(LOCAL)) as usize;
                let len = (get32(&m, 96 + 4) as usize)
                    .min(INLINE_MAX)
                    .min(LOCAL as usize - to);
                let mut body = [0u8; INLINE_MAX];
                self.fuzz.region.read(to, &mut body[..len]);
                let _ = set_inline(&mut m, &body[..len]);
            }
            self.fuzz.publish_slot(qp.id, prod, &m);
        }
    }

    /// Op 1: a receive queue entry at `rq_prod`, published.
    fn recv_entry(&self, input: &mut Input<'_>) {
        let fix = input.u8();
        let mut e = input.entry::<RQE_SIZE>(RQE_SIZE);
        self.fix_rqe(&mut e, fix);
        let qp = self.qp();
        let prod = qp.word(RQ_PROD);
        qp.seg.write(qp.rq_at(prod), &e);
        qp.set(RQ_PROD, prod.wrapping_add(1));
    }

    /// Op 2: a shared receive queue entry, published unless the ring is full.
    fn srq_entry(&self, input: &mut Input<'_>) {
        let fix = input.u8();
        let mut e = input.entry::<RQE_SIZE>(RQE_SIZE);
        self.fix_rqe(&mut e, fix);
        let s = &self.fuzz.srq_seg;
        let prod = s.u32(SRQ_PROD).load(Ordering::Acquire);
        let cons = s.u32(SRQ_CONS).load(Ordering::Acquire);
        if prod.wrapping_sub(cons) < SRQ_DEPTH {
            s.write(HEADER + (prod % SRQ_DEPTH) as usize * RQE_SIZE, &e);
            s.u32(SRQ_PROD)
                .store(prod.wrapping_add(1), Ordering::Release);
        }
    }

    /// Op 3: octets into the staging area.
    fn staging_octets(&self, input: &mut Input<'_>) {
        let qp = self.qp();
        let offset = usize::from(input.u16());
        let n = usize::from(input.u8());
        let data = input.entry::<256>(n);
        let at = offset.min(qp.geo.staging as usize - n);
        qp.seg.write(qp.staging_at() + at, &data[..n]);
    }

    /// Op 4: a push slot, naming this queue pair or another, at any index, with any state
    /// word.
    fn push_slot(&self, input: &mut Input<'_>) {
        let slot = u32::from(input.u8()) % self.fuzz.push_slots;
        let qsel = input.u8();
        let isel = input.u8();
        let fix = input.u8();
        let qp = self.qp();
        let target = match qsel {
            0..=0x7f => qp.id,
            0x80..=0xbf => qp.id.wrapping_add(1 + u32::from(qsel & 0x3f)),
            _ => input.u32(),
        };
        let (prod, cons) = (qp.word(SQ_PROD), qp.word(SQ_CONS));
        let index = match isel & 3 {
            0 => cons,
            1 => prod.wrapping_sub(1),
            2 => prod,
            _ => input.u32(),
        };
        let state = (isel & 0x80 != 0).then(|| input.u32());
        let mut e = input.entry::<SQE_SIZE>(SQE_SIZE);
        self.fix_sqe(&mut e, fix);
        self.fuzz.write_slot(slot, target, index, &e, state);
    }

    /// Op 5: any index word of the segment (the daemon's included) or of the shared receive
    /// queue, which taints it.
    fn index_word(&mut self, input: &mut Input<'_>) {
        let which = usize::from(input.u8()) % (QP_WORDS.len() + 2);
        if which < QP_WORDS.len() {
            let qp = self.qp.as_mut().expect("a queue pair");
            qp.tainted = true;
            let v = input.index(qp.word(QP_WORDS[which]));
            qp.set(QP_WORDS[which], v);
        } else {
            self.fuzz.srq_tainted = true;
            let at = if which == QP_WORDS.len() {
                SRQ_PROD
            } else {
                SRQ_CONS
            };
            let w = self.fuzz.srq_seg.u32(at);
            let v = input.index(w.load(Ordering::Relaxed));
            w.store(v, Ordering::Release);
        }
    }

    /// Op 6: octets anywhere in the queue pair's segment, the push region or the shared
    /// receive queue, which taints it.
    fn octets_anywhere(&mut self, input: &mut Input<'_>) {
        let target = input.u8() % 3;
        let offset = input.u32() as usize;
        let n = usize::from(input.u8());
        let data = input.entry::<256>(n);
        let seg = match target {
            0 => {
                let qp = self.qp.as_mut().expect("a queue pair");
                qp.tainted = true;
                &qp.seg
            }
            1 => &self.fuzz.push,
            _ => {
                self.fuzz.srq_tainted = true;
                &self.fuzz.srq_seg
            }
        };
        let at = offset % seg.len();
        let n = n.min(seg.len() - at);
        seg.write(at, &data[..n]);
    }

    /// Op 8: a control request about the queue pair, answered as it must be.
    fn control_request(&mut self, input: &mut Input<'_>) {
        let which = input.u8();
        let on = input.u8() & 1 != 0;
        let id = self.qp().id;
        let req = match which % 8 {
            0 => Request::ModifyQp {
                qp: id,
                change: QpChange::IncomingRdma(on),
            },
            1 => Request::ModifyQp {
                qp: id,
                change: QpChange::DrainOnLocalFailure(on),
            },
            2 => Request::ModifyQp {
                qp: id,
                change: QpChange::ResumeSendQueue,
            },
            3 => Request::QueryQp { qp: id },
            4 => Request::Stats,
            5 => Request::QueryDevice,
            6 => Request::Disconnect { qp: id },
            _ => Request::QueryQp {
                qp: id.wrapping_add(1),
            },
        };
        let (r, _) = self.fuzz.raw.call(&req);
        let refused = matches!(r, Reply::Error { .. });
        assert_eq!(
            refused,
            which % 8 == 7,
            "{req:?} about the client's own queue pair: {r:?}"
        );
    }

    /// Op 9: the peer sends messages to the queue pair.
    fn peer_sends(&mut self, input: &mut Input<'_>) {
        let n = u32::from(input.u8() % 8) + 1;
        let len = u32::from(input.u16() % 8192);
        let flags = input.u8();
        self.prime();
        self.peer.send(self.qp().tag, n, len, flags);
    }

    /// Posts a zero-length RDMA Write on the queue pair under test, once: the peer is the
    /// MPA Responder, which may send nothing before its Initiator's first message.
    pub(super) fn prime(&mut self) {
        let peer = self.peer.fuzz_region;
        let qp = self.qp.as_mut().expect("a queue pair");
        if qp.primed {
            return;
        }
        qp.primed = true;
        let wr = SendWr {
            wr_id: u64::MAX,
            op: SendOp::Write {
                data: Payload::Bytes(Bytes::new()),
                dst: RemoteBuf { len: 0, ..peer },
            },
            flags: SendFlags::NONE,
        };
        let e = encode_sqe(&wr, &mut |_| None).expect("encode");
        let prod = qp.word(SQ_PROD);
        qp.seg.write(qp.sq_at(prod), &e);
        qp.set(SQ_PROD, prod.wrapping_add(1));
        qp.ring();
    }
}
