//! The client's completion ring as the connection's [`CompletionSink`]: each completion
//! the stream makes is encoded into the ring on the thread that made it (the servant's
//! post, or the connection's driver), with the client's own work request id, and the
//! client's doorbell rung if it sleeps. No queue of the engine's and no task stand in
//! between.
//!
//! Send requests complete in the order they were posted (RFC 5040), so what a send
//! completion needs that the stream does not know, whether the client asked for it
//! (every request goes in signaled, so that each one's end retires its ring entry) and
//! how it reached the connection (seed 000), is kept in that order ([`Sent`]) beside the
//! ring. Receives complete as they are: the connection takes them from the client's
//! rings itself ([`QpRecvs`](crate::local::recvs::QpRecvs)).

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ipc::qpseg::{CQE_SIZE, Doorbell, Geometry, QpSegment, Side};
use ipc::wqe::encode_cqe;
use offload_engine::CompletionSink;
use offload_engine::push_share::PushShare;
use rdmap::{Completion, QpNum, Queue};

use super::posting::{Sent, Via};
use crate::local::logs::{CLIENT_OTHER, limited};

/// The most completions held for the client beyond its completion ring: what its own
/// requests can make at most (its ring holds one per send and receive it may have
/// outstanding, and its shared receive queue's receives can complete here too). Past it
/// the client is not taking its completions (an honest library always does), and the
/// queue pair ends with [`QpEnd::CqOverrun`](rdmap::QpEnd::CqOverrun), as an RNIC's does
/// when its completion queue overflows: nothing grows.
pub(super) fn backlog_cap(geo: &Geometry, srq_depth: Option<u32>) -> usize {
    geo.cq_depth as usize + srq_depth.map_or(0, |d| d as usize)
}

/// A queue pair's completions on their way into its client's ring.
#[derive(Debug)]
pub(super) struct ClientRing {
    seg: Arc<QpSegment>,
    to_client: Doorbell,
    share: Arc<PushShare>,
    state: Mutex<RingState>,
    /// Wakes the servant: the backlog overflowed, or holds entries for the ring.
    pub(super) wake: tokio::sync::Notify,
    /// The servant runs its turns (it has not parked): entries that go into the ring
    /// meanwhile leave the client's doorbell `owed`, and the servant rings it once at its
    /// next turn, instead of each delivery ringing it (a client that wakes for each
    /// completion of a stream of them costs both sides a wake-up per message).
    spinning: AtomicBool,
    owed: AtomicBool,
}

#[derive(Debug)]
struct RingState {
    /// The send requests in the connection, oldest first.
    sends: VecDeque<Sent>,
    /// Completions waiting for room in the client's ring, at most `cap`.
    backlog: VecDeque<[u8; CQE_SIZE]>,
    cap: usize,
    /// The backlog overflowed (the servant ends the queue pair for it).
    overran: bool,
}

impl ClientRing {
    /// The sink of a queue pair whose client has `seg` and `to_client`, with the send
    /// requests `sends` in the connection and the completions `backlog` not yet in the
    /// ring (a servant a daemon before this one ran; empty for a new one).
    pub(super) fn new(
        seg: Arc<QpSegment>,
        to_client: Doorbell,
        share: Arc<PushShare>,
        (sends, backlog): (VecDeque<Sent>, VecDeque<[u8; CQE_SIZE]>),
        cap: usize,
    ) -> Self {
        // Pushed requests still in the connection hold tracking entries here now.
        share.retrack(sends.iter().filter(|s| s.via == Via::Push).count());
        Self {
            seg,
            to_client,
            share,
            state: Mutex::new(RingState {
                sends,
                backlog,
                cap,
                overran: false,
            }),
            wake: tokio::sync::Notify::new(),
            spinning: AtomicBool::new(false),
            owed: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, RingState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The client's doorbell.
    pub(super) fn to_client(&self) -> &Doorbell {
        &self.to_client
    }

    /// Send requests in the connection.
    pub(super) fn sends_in_flight(&self) -> usize {
        self.lock().sends.len()
    }

    /// Records send requests about to be posted, in order (before the post: a small one
    /// may complete within it); those the connection then refuses are taken back by
    /// [`not_posted`](Self::not_posted).
    pub(super) fn sending(&self, sent: impl Iterator<Item = Sent>) {
        self.lock().sends.extend(sent);
    }

    /// The last `wcs.len()` requests given to [`sending`](Self::sending) were not
    /// posted: they complete as `wcs` (flushed), in order.
    pub(super) fn not_posted(&self, wcs: impl ExactSizeIterator<Item = Completion>) {
        let mut st = self.lock();
        let from = st.sends.len().saturating_sub(wcs.len());
        let sent: Vec<Sent> = st.sends.drain(from..).collect();
        let mut pushed = false;
        for (mut wc, sent) in wcs.zip(sent) {
            wc.push_discarded = sent.via == Via::QueueAfterDiscard;
            if let Some(e) = self.finish_send(wc, sent) {
                pushed |= self.put(&mut st, e);
            }
        }
        drop(st);
        if pushed {
            self.ring_client();
        }
    }

    /// True if the backlog overflowed: the servant ends the queue pair.
    pub(super) fn overran(&self) -> bool {
        self.lock().overran
    }

    /// True while completions wait for room in the ring.
    pub(super) fn holds_any(&self) -> bool {
        !self.lock().backlog.is_empty()
    }

    /// What a successor daemon's servant starts from: the send requests in the
    /// connection and the completions not yet in the ring (entries back to back).
    pub(super) fn image(&self) -> (Vec<Sent>, Vec<u8>) {
        let st = self.lock();
        (
            st.sends.iter().copied().collect(),
            st.backlog.iter().flatten().copied().collect(),
        )
    }

    /// Its queue pair runs in another daemon now: the tracking entries of its pushed
    /// requests are let go here.
    pub(super) fn moved_away(&self) {
        let pushed = self
            .lock()
            .sends
            .iter()
            .filter(|s| s.via == Via::Push)
            .count();
        for _ in 0..pushed {
            self.share.untrack();
        }
    }

    /// A send request's end: its ring entry retires, its push tracking entry goes, and
    /// its completion is the client's unless it asked for none and it succeeded.
    fn finish_send(&self, wc: Completion, sent: Sent) -> Option<[u8; CQE_SIZE]> {
        self.seg.sq_retire(1);
        if sent.via == Via::Push {
            self.share.untrack();
        }
        (sent.signaled || !wc.is_ok()).then(|| encode_cqe(&wc))
    }

    /// Completions flushed for receives the connection never took (still in the client's
    /// ring when the queue pair ended).
    pub(super) fn flushed_recvs(&self, wcs: impl Iterator<Item = Completion>) {
        let mut st = self.lock();
        let mut pushed = false;
        for wc in wcs {
            pushed |= self.put(&mut st, encode_cqe(&wc));
        }
        drop(st);
        if pushed {
            self.ring_client();
        }
    }

    /// An entry into the ring behind those already held, or held; true if it went into
    /// the ring (the caller then rings the client's doorbell, once the lock is released).
    fn put(&self, st: &mut RingState, e: [u8; CQE_SIZE]) -> bool {
        if st.backlog.is_empty() && self.seg.cq_push(&e) {
            return true;
        }
        if st.backlog.len() < st.cap {
            st.backlog.push_back(e);
        } else {
            st.overran = true;
        }
        self.wake.notify_one();
        false
    }

    /// Moves held completions into the ring as far as it has room; true if any went in.
    pub(super) fn flush(&self) -> bool {
        let mut pushed = false;
        {
            let mut st = self.lock();
            while let Some(e) = st.backlog.front() {
                if !self.seg.cq_push(e) {
                    break;
                }
                st.backlog.pop_front();
                pushed = true;
            }
        }
        if pushed {
            self.ring_client();
        }
        pushed
    }

    /// Entries went into the ring: the client's doorbell is rung now, or by the servant
    /// at its next turn if it is running them.
    fn ring_client(&self) {
        if self.spinning.load(SeqCst) {
            self.owed.store(true, SeqCst);
            if self.spinning.load(SeqCst) {
                return;
            }
            // The servant stopped meanwhile and may have settled already: whoever takes
            // the debt rings.
            if !self.owed.swap(false, SeqCst) {
                return;
            }
        }
        self.ring_now();
    }

    fn ring_now(&self) {
        if self.seg.must_wake(Side::Client) {
            self.to_client.ring();
        }
    }

    /// The servant runs its turns (`true`), or is about to park or stop (`false`: what
    /// is owed is rung now).
    pub(super) fn set_spinning(&self, on: bool) {
        self.spinning.store(on, SeqCst);
        if !on {
            self.settle();
        }
    }

    /// The servant's turn: rings the client's doorbell if entries went into the ring
    /// since the last one.
    pub(super) fn settle(&self) {
        if self.owed.swap(false, SeqCst) {
            self.ring_now();
        }
    }
}

impl CompletionSink for ClientRing {
    fn deliver(&self, qp: QpNum, batch: &mut Vec<Completion>) {
        let mut st = self.lock();
        let mut pushed = false;
        for wc in batch.drain(..) {
            let entry = match wc.queue {
                Queue::Send => {
                    let sent = st.sends.pop_front().unwrap_or_else(|| {
                        limited!(CLIENT_OTHER, error, qp = %qp, "a send completion for no request of the client's");
                        Sent::QUEUED
                    });
                    self.finish_send(wc, sent)
                }
                Queue::Recv => Some(encode_cqe(&wc)),
            };
            if let Some(e) = entry {
                pushed |= self.put(&mut st, e);
            }
        }
        drop(st);
        if pushed {
            self.ring_client();
        }
    }
}
