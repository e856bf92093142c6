//! A session of the hostile (or honest) client: its protection domain, registered region,
//! push region and shared receive queue; connecting a queue pair and destroying it;
//! writing push slots.

use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use ipc::control::{QueueDepths, Reply, Request};
use ipc::push::SLOT_SIZE;
use ipc::qpseg::{Doorbell, QpSegment, RQE_SIZE, SQE_SIZE};
use rdmap::{RecvWr, STag, Sge};
use shm::Segment;

use super::qp::Qp;
use super::{DEPTH, LOCAL, Raw, SRQ_DEPTH, trace};
use crate::rings::layout::{HEADER, SLOT_ENTRY, SLOT_INDEX, SLOT_QP, SLOT_STATE};

/// A client session: its domain, region, push region and shared receive queue.
pub(super) struct Client {
    /// Its control connection.
    pub(super) raw: Raw,
    pd: u32,
    /// The registered region's STag, and the region (mapped here too).
    pub(super) stag: u32,
    pub(super) region: Segment,
    /// The domain's push region, mapped here, and its slot count.
    pub(super) push: Segment,
    pub(super) push_slots: u32,
    srq: u32,
    /// The shared receive queue's segment, mapped here.
    pub(super) srq_seg: Segment,
    /// An input wrote the shared receive queue's indices or octets: it is replaced
    /// before the session is used again.
    pub(super) srq_tainted: bool,
    /// A DestroyQp sent and not answered yet: its transaction, the queue pair, when.
    destroying: Option<(u64, u32, Instant)>,
}

impl Client {
    /// A new session of the daemon at `path`: a domain, a registered region of [`LOCAL`]
    /// octets and a shared receive queue.
    pub(super) fn open(path: &std::path::Path) -> Self {
        let mut raw = Raw::open(path);
        let (r, fds) = raw.call(&Request::AllocPd);
        let Reply::Pd { pd, push_slots } = r else {
            panic!("AllocPd: {r:?}")
        };
        let push = map(fds, push_slots as usize * SLOT_SIZE);
        let region = Segment::create("iwarp-fuzz-region", LOCAL as usize).expect("region");
        let (r, _) = raw.call_with(
            &Request::RegMr {
                pd,
                access: 0x3f,
                va: None,
                len: u64::from(LOCAL),
                offset: 0,
            },
            &[region.fd()],
        );
        let Reply::Id(stag) = r else {
            panic!("RegMr: {r:?}")
        };
        let (srq, srq_seg) = Self::create_srq(&mut raw);
        Self {
            raw,
            pd,
            stag,
            region,
            push,
            push_slots,
            srq,
            srq_seg,
            srq_tainted: false,
            destroying: None,
        }
    }

    /// A new shared receive queue of [`SRQ_DEPTH`] entries, and its segment mapped.
    pub(super) fn create_srq(raw: &mut Raw) -> (u32, Segment) {
        let (r, fds) = raw.call(&Request::CreateSrq { depth: SRQ_DEPTH });
        let Reply::Srq { srq, depth } = r else {
            panic!("CreateSrq: {r:?}")
        };
        assert_eq!(depth, SRQ_DEPTH);
        (srq, map(fds, HEADER + depth as usize * RQE_SIZE))
    }

    /// Connects a queue pair to `addr`, tagged `tag` for the peer.
    pub(super) fn connect(
        &mut self,
        addr: std::net::SocketAddr,
        tag: u64,
        srq: bool,
        recvs: u32,
    ) -> Qp {
        let recvs = (0..recvs)
            .map(|i| RecvWr {
                wr_id: 0xf000 + u64::from(i),
                sgl: [Sge {
                    stag: STag::from_u32(self.stag),
                    to: u64::from(i) * 4096,
                    len: 4096,
                }]
                .into(),
            })
            .collect();
        let req = Request::Connect {
            pd: self.pd,
            srq: if srq { self.srq } else { 0 },
            depths: QueueDepths {
                sq: DEPTH,
                rq: DEPTH,
            },
            addr,
            private: Bytes::copy_from_slice(&tag.to_le_bytes()),
            recvs,
            rtr: 0,
        };
        let (r, fds) = self.raw.call(&req);
        let Reply::Qp(info) = r else {
            panic!("Connect: {r:?}")
        };
        let geo = info.geometry;
        let mut fds = fds.into_iter();
        let seg_fd = fds.next().expect("the segment");
        let view = QpSegment::map(std::fs::File::from(seg_fd.try_clone().expect("dup")), geo)
            .expect("map the segment");
        Qp {
            id: info.qp,
            tag,
            geo,
            seg: Segment::map(std::fs::File::from(seg_fd), geo.len()).expect("map"),
            view,
            to_daemon: Doorbell::from_fd(fds.next().expect("doorbell")),
            _to_client: Doorbell::from_fd(fds.next().expect("doorbell")),
            tainted: false,
            completions: 0,
            received: 0,
            primed: false,
        }
    }

    /// Asks the daemon to destroy queue pair `id`; [`Self::ready`] waits for the answer.
    pub(super) fn destroy(&mut self, id: u32) {
        assert!(self.destroying.is_none());
        let txn = self.raw.send(&Request::DestroyQp { qp: id }, &[]);
        trace(format_args!("DestroyQp {id} sent"));
        self.destroying = Some((txn, id, Instant::now()));
    }

    /// True if the daemon answered the DestroyQp under way (checked as [`Self::ready`]
    /// checks it), or none is.
    pub(super) fn destroyed(&mut self) -> bool {
        let Some((txn, id, sent)) = self.destroying else {
            return true;
        };
        let Some((r, _)) = self.raw.try_reply(txn) else {
            return false;
        };
        assert_eq!(r, Reply::Done, "DestroyQp");
        trace(format_args!(
            "DestroyQp {id} answered {:?} after it was sent",
            sent.elapsed()
        ));
        self.destroying = None;
        true
    }

    /// Makes the session ready for a queue pair: the daemon must have answered its last
    /// DestroyQp (within the bound) that it did, and a scribbled shared receive queue is
    /// replaced.
    pub(super) fn ready(&mut self) {
        if let Some((txn, id, sent)) = self.destroying.take() {
            let t = Instant::now();
            let (r, _) = self.raw.reply(txn, "DestroyQp");
            assert_eq!(r, Reply::Done, "DestroyQp");
            trace(format_args!(
                "DestroyQp {id} answered {:?} after it was sent (waited {:?})",
                sent.elapsed(),
                t.elapsed()
            ));
            // The ends of the queue pairs gone are of no use now.
            while self.raw.event().is_some() {}
        }
        if self.srq_tainted {
            self.srq_tainted = false;
            let (r, _) = self.raw.call(&Request::DestroySrq { srq: self.srq });
            assert_eq!(r, Reply::Done, "DestroySrq");
            (self.srq, self.srq_seg) = Self::create_srq(&mut self.raw);
        }
    }

    /// Writes `entry` into a push slot as the library publishes one: the first FREE
    /// slot, READY with a new generation.
    pub(super) fn publish_slot(&self, qp: u32, index: u32, entry: &[u8; SQE_SIZE]) {
        let free = (0..self.push_slots).find(|&s| {
            self.push
                .u32(s as usize * SLOT_SIZE + SLOT_STATE)
                .load(Ordering::Acquire)
                & 3
                == 0
        });
        if let Some(s) = free {
            self.write_slot(s, qp, index, entry, None);
        }
    }

    /// Writes slot `s`: its queue pair, index and entry, then its state word (`None`:
    /// READY with the next generation).
    pub(super) fn write_slot(
        &self,
        s: u32,
        qp: u32,
        index: u32,
        entry: &[u8; SQE_SIZE],
        state: Option<u32>,
    ) {
        let at = s as usize * SLOT_SIZE;
        self.push.u32(at + SLOT_QP).store(qp, Ordering::Relaxed);
        self.push
            .u32(at + SLOT_INDEX)
            .store(index, Ordering::Relaxed);
        self.push.write(at + SLOT_ENTRY, entry);
        let w = self.push.u32(at + SLOT_STATE);
        let st =
            state.unwrap_or_else(|| ((w.load(Ordering::Relaxed) >> 2).wrapping_add(1) << 2) | 2);
        w.store(st, Ordering::Release);
    }
}

/// The memory file that came with a reply, mapped `len` octets long.
fn map(fds: Vec<std::os::fd::OwnedFd>, len: usize) -> Segment {
    let fd = fds
        .into_iter()
        .next()
        .expect("a memory file with the reply");
    Segment::map(std::fs::File::from(fd), len).expect("map a memory file of iwarpd's")
}
