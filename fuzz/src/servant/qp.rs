//! The queue pair under test (or the honest one) as its client sees it: the index words
//! and entries of its segment, its doorbell, and the completions it takes.

use std::sync::atomic::Ordering;

use ipc::push::SLOT_SIZE;
use ipc::qpseg::{Doorbell, Geometry, QpSegment, RQE_SIZE, SQE_SIZE, Side};
use ipc::wqe::decode_cqe;
use shm::Segment;

use crate::rings::layout::{
    HEADER, QP_WORDS, RQ_CONS, RQ_PROD, SLOT_QP, SLOT_STATE, SQ_CONS, SQ_DONE, SQ_PROD,
};

/// A connected queue pair, its segment mapped twice (raw octets, and `ipc`'s view for
/// taking completions) and its doorbells.
pub(super) struct Qp {
    /// The daemon's number for it.
    pub(super) id: u32,
    /// What its private data told the peer it is.
    pub(super) tag: u64,
    /// Its segment's layout.
    pub(super) geo: Geometry,
    /// The segment, raw octets.
    pub(super) seg: Segment,
    /// The segment, as `ipc` reads it.
    pub(super) view: QpSegment,
    /// The doorbell that wakes the daemon.
    pub(super) to_daemon: Doorbell,
    /// The daemon's doorbell to the client (kept open, not waited on).
    pub(super) _to_client: Doorbell,
    /// The input wrote the segment outside its entries: its completions are not checked,
    /// and it is replaced after the input.
    pub(super) tainted: bool,
    /// Completions taken from its ring.
    pub(super) completions: u64,
    /// Of those, receive completions.
    pub(super) received: u64,
    /// The harness posted its first message (see [`Harness::prime`](super::Harness::prime)).
    pub(super) primed: bool,
}

impl Qp {
    /// The index word at `at` of the segment.
    pub(super) fn word(&self, at: usize) -> u32 {
        self.seg.u32(at).load(Ordering::Acquire)
    }

    /// Stores `v` into the index word at `at`.
    pub(super) fn set(&self, at: usize, v: u32) {
        self.seg.u32(at).store(v, Ordering::Release);
    }

    /// Where send queue entry `i` (wrapped) lies in the segment.
    pub(super) fn sq_at(&self, i: u32) -> usize {
        HEADER + (i % self.geo.sq_depth) as usize * SQE_SIZE
    }

    /// Where receive queue entry `i` (wrapped) lies in the segment.
    pub(super) fn rq_at(&self, i: u32) -> usize {
        HEADER + self.geo.sq_depth as usize * SQE_SIZE + (i % self.geo.rq_depth) as usize * RQE_SIZE
    }

    /// Where the staging area begins in the segment.
    pub(super) fn staging_at(&self) -> usize {
        self.geo.len() - self.geo.staging as usize
    }

    /// Wakes the daemon, parked or not.
    pub(super) fn ring(&self) {
        let _ = self.view.must_wake(Side::Daemon);
        self.to_daemon.ring();
    }

    /// Everything published was taken and retired, and no push slot names it.
    pub(super) fn settled(&self, push: &Segment, slots: u32) -> bool {
        let (prod, cons, done) = (self.word(SQ_PROD), self.word(SQ_CONS), self.word(SQ_DONE));
        prod == cons
            && done == cons
            && self.word(RQ_PROD) == self.word(RQ_CONS)
            && !(0..slots).any(|s| {
                let at = s as usize * SLOT_SIZE;
                push.u32(at + SLOT_STATE).load(Ordering::Acquire) & 3 == 2
                    && push.u32(at + SLOT_QP).load(Ordering::Acquire) == self.id
            })
    }

    /// Takes the completions in the ring: each must decode unless the input wrote the
    /// segment.
    pub(super) fn drain(&mut self) {
        for _ in 0..4 * self.geo.cq_depth {
            match self.view.cq_pop() {
                Ok(Some(e)) => {
                    self.completions += 1;
                    if !self.tainted {
                        let wc = decode_cqe(&e).unwrap_or_else(|m| {
                            panic!("iwarpd wrote a completion that does not decode: {m} {e:?}")
                        });
                        self.received += u64::from(wc.queue == rdmap::Queue::Recv);
                    }
                }
                Ok(None) => return,
                Err(_) => {
                    assert!(self.tainted, "iwarpd's completion index is garbage");
                    return;
                }
            }
        }
    }

    /// Makes room in a completion ring whose indices the input scribbled on, as a client
    /// that wants its completions would: its consumer index back to the producer's.
    pub(super) fn unjam(&self) {
        if self.tainted && self.view.cq_pop().is_err() {
            self.set(QP_WORDS[6], self.word(QP_WORDS[5]));
        }
    }
}
