//! Seed 000's push path for an embedded engine's queue pairs, on an in-process region:
//! the same algorithm iwarpd runs for its clients (`iwarpd/src/local/servant/`), with the
//! posting thread playing both parts, under the connection's lock. [`QpPush::offer`]
//! decides; the connection acts on the decision (`conn/connection/push_post.rs`).
//!
//! - **Library side.** A lone small Send, Write or Immediate Data (payload at most
//!   [`INLINE_MAX`] octets) is encoded whole and written into a free slot of its
//!   protection domain's push region, published with a release store. Its twin is the
//!   request itself, kept aside. Pushing stops after a discard or a full region and
//!   resumes once the send queue is empty.
//! - **Engine side.** The region's READY slots are scanned (a slot naming a queue pair
//!   outside the domain is discarded, D6); this queue pair's message is copied out and
//!   executed only if every admission check passes, in the seed's order: it decodes, its
//!   twin is at the head of the send queue (D3), the connection is not back-pressured
//!   (D4), a tracking entry (D1/D2) and transmit credit (D5) are free. Executed, the
//!   message is written to the socket at once on this thread; discarded, the twin runs
//!   from the send queue through the connection's driver and its completion is flagged
//!   `push_discarded`. Every request runs exactly once.
//!
//! In software both parts run on the posting thread, so the push path saves here what the
//! inline push always saved (the driver's wake-up), not the PCIe read the seed saves; it
//! is kept the same as the daemon's so that one set of counters and one set of tests
//! describes both modes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::BytesMut;
use ipc::push::{PushPolicy, Snapshot};
use ipc::qpseg::{Discard, PushCounters};
use ipc::wqe::{INLINE_MAX, encode_sqe, set_inline};
use rdmap::{Payload, QpNum, SendOp, SendWr, Stream};

use super::share::{PdPush, PushShare};
use crate::tpt::{PdId, Tpt};

/// What the push path reads and keeps of a queue pair's connection, under the
/// connection's lock (`conn/connection/push_post.rs` builds it).
pub(crate) struct ConnView<'a> {
    /// The connection's protocol stream, read only.
    pub(crate) stream: &'a Stream,
    /// Connected, in RTS, with its socket open and not moving: a pushed message may be
    /// written now.
    pub(crate) idle: bool,
    /// The driver holds octets not yet written (with [`Stream::wants_transmit`], the
    /// connection is back-pressured, D4).
    pub(crate) tx_busy: bool,
    /// The home's memory table, which reads a gather list's octets into the message.
    pub(crate) tpt: &'a Tpt,
    /// Seed 000's stop and resume rules on this side.
    pub(crate) rules: &'a mut PushPolicy,
    /// Payloads copied out of push slots are carved from this.
    pub(crate) arena: &'a mut BytesMut,
}

/// How a request offered to the push path runs ([`QpPush::offer`]).
#[derive(Debug)]
pub(crate) enum Offer {
    /// Not pushed: it goes through the send queue (the inline doorbell may write it).
    Queue(SendWr),
    /// Pushed and admitted: the request decoded from the pushed message, to execute now
    /// and write on this thread. It holds a tracking entry until [`QpPush::untrack`].
    Execute(SendWr),
    /// Pushed and discarded: its twin, flagged, runs from the send queue through the
    /// connection's driver.
    Discarded(SendWr),
}

/// A queue pair's part of the push path.
#[derive(Debug)]
pub(crate) struct QpPush {
    pd: Arc<PdPush>,
    share: Arc<PushShare>,
    pd_id: PdId,
    num: u32,
    /// Executed from pushed messages, from the send queue, then discards by reason
    /// ([`Discard::ALL`] order).
    counters: [AtomicU64; 8],
}

impl Drop for QpPush {
    fn drop(&mut self) {
        self.pd.remove_qp(self.num);
    }
}

impl QpPush {
    pub(crate) fn new(pd: Arc<PdPush>, share: Arc<PushShare>, pd_id: PdId, num: QpNum) -> Self {
        pd.add_qp(num.0);
        Self {
            pd,
            share,
            pd_id,
            num: num.0,
            counters: Default::default(),
        }
    }

    /// The same part (region, counters) moved to another engine whose push resources
    /// are `share`; `None` if it is held elsewhere (it never is: only its queue pair's
    /// state holds it, and the queue pair is parked).
    pub(crate) fn moved_to(self: Arc<Self>, share: Arc<PushShare>) -> Option<Arc<Self>> {
        let mut qp = Arc::try_unwrap(self).ok()?;
        qp.share = share;
        Some(Arc::new(qp))
    }

    /// Its protection domain's push region.
    pub(crate) fn region(&self) -> &Arc<PdPush> {
        &self.pd
    }

    /// The counters of this queue pair.
    pub(crate) fn counters(&self) -> PushCounters {
        super::share::read_counters(&self.counters)
    }

    /// Counts `n` requests run from the send queue.
    pub(crate) fn queued(&self, n: u64) {
        self.counters[1].fetch_add(n, Ordering::Relaxed);
        self.share.count_executed(0, n);
    }

    /// Counts one request executed from its pushed message.
    pub(crate) fn executed(&self) {
        self.counters[0].fetch_add(1, Ordering::Relaxed);
        self.share.count_executed(1, 0);
    }

    /// Frees the tracking entry an executed message held: it is on the wire, or with
    /// the driver next (or its post failed).
    pub(crate) fn untrack(&self) {
        self.share.untrack();
    }

    fn discard(&self, why: Discard) {
        self.counters[2 + why.index()].fetch_add(1, Ordering::Relaxed);
        self.share.count_discard(why);
    }

    /// Offers `wr` (a lone request) to the push path: it is pushed if it may be, and
    /// the result says how it runs. `conn` is what the push path reads and keeps of the
    /// connection, under its lock; the home's TPT reads a gather list's octets into the
    /// message.
    pub(crate) fn offer(&self, conn: ConnView<'_>, wr: SendWr) -> Offer {
        // Seed 000's rules (ipc's, as verbs' daemon backend applies them). A discard
        // stops pushing at once (`discarded`), not at the next post.
        let empty = conn.stream.outstanding_sends() == 0;
        let message = match conn.rules.may_push(false, empty) && conn.idle {
            true => self.message(conn.tpt, &wr),
            false => None,
        };
        // The stop rule for a full region is the rules' too.
        let rules = &mut *conn.rules;
        let slot = message.and_then(|m| rules.claim(&self.pd.region).map(|s| (s, m)));
        let Some((slot, message)) = slot else {
            self.queued(1);
            return Offer::Queue(wr);
        };
        self.pd.region.publish(slot, self.num, 0, &message);
        // The doorbell: the engine side runs now, on this thread.
        let Some(s) = self.scan() else {
            // Our own message was not READY: cannot happen under the lock, but the
            // request still runs once.
            self.discard(Discard::Malformed);
            return self.discarded(conn.rules, wr);
        };
        let admitted = self.admit(&s, conn.stream, conn.tx_busy, conn.arena);
        self.pd.region.free(s.slot, s.state);
        match admitted {
            Ok(pushed) => Offer::Execute(pushed),
            Err(why) => {
                self.discard(why);
                self.discarded(conn.rules, wr)
            }
        }
    }

    /// Seed 000's stop rule after a discard; the twin runs from the send queue through
    /// the driver, its completion flagged.
    fn discarded(&self, rules: &mut PushPolicy, mut wr: SendWr) -> Offer {
        rules.discarded();
        self.queued(1);
        wr.flags = wr.flags | rdmap::SendFlags::PUSH_DISCARDED;
        Offer::Discarded(wr)
    }

    /// The message for `wr`, if it may be pushed: a Send, Write or Immediate Data whose
    /// payload (inline, or read from a gather list of the domain's regions) fits a slot.
    fn message(&self, tpt: &Tpt, wr: &SendWr) -> Option<[u8; ipc::qpseg::SQE_SIZE]> {
        let data = match &wr.op {
            SendOp::Send { data, .. } | SendOp::Write { data, .. } => data,
            SendOp::Immediate { .. } => return encode_sqe(wr, &mut |_| None).ok(),
            _ => return None,
        };
        match data {
            Payload::Bytes(b) if b.len() <= INLINE_MAX => encode_sqe(wr, &mut |_| None).ok(),
            Payload::Bytes(_) => None,
            Payload::Sgl(sgl) => {
                let mut body = [0u8; INLINE_MAX];
                let mut at = 0;
                for sge in sgl.iter() {
                    let end = at + sge.len as usize;
                    if end > INLINE_MAX
                        || tpt
                            .read(self.pd_id, sge.stag, sge.to, &mut body[at..end])
                            .is_err()
                    {
                        return None;
                    }
                    at = end;
                }
                let mut m = encode_sqe(wr, &mut |_| None).ok()?;
                set_inline(&mut m, &body[..at]).then_some(m)
            }
        }
    }

    /// The engine's scan of the domain's region: slots naming a queue pair outside the
    /// domain are discarded (D6); this queue pair's message is returned.
    fn scan(&self) -> Option<Snapshot> {
        let mut mine = None;
        let (num, pd) = (self.num, &self.pd);
        pd.region.ready(
            |qp| qp == num || !pd.has_qp(qp),
            |s| {
                if s.qp == num {
                    mine = Some(s);
                } else {
                    pd.region.free(s.slot, s.state);
                    self.discard(Discard::Security);
                }
            },
        );
        mine
    }

    /// The admission checks, in the seed's order: the request to execute, or why the
    /// message is discarded.
    fn admit(
        &self,
        s: &Snapshot,
        stream: &Stream,
        tx_busy: bool,
        arena: &mut BytesMut,
    ) -> Result<SendWr, Discard> {
        // D3: the twin is at the head of the send queue (nothing posted before it is
        // still outstanding).
        let at_head = match stream.outstanding_sends() {
            0 => Ok(()),
            _ => Err(Discard::NotAtHead),
        };
        let (busy, wants) = (tx_busy, stream.wants_transmit());
        self.share.admit_message(
            &s.entry,
            arena,
            at_head,
            || busy || wants,
            crate::conn::now(),
        )
    }
}
