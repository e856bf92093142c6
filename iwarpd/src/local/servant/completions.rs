//! The client's completion ring as the connection's [`CompletionSink`]: each completion
//! the stream makes is encoded into the ring on the thread that made it (the servant's
//! post, or the connection's driver), with the client's own work request id, and the
//! client's doorbell rung if it sleeps. No queue of the engine's and no task stand in
//! between.
//!
//! The connection reports every send request when it ends, each completion carrying the
//! request's flags: its end retires its ring entry, `SIGNALED` says whether the client
//! asked for the completion, and `PUSHED` that it held the push path's resources (seed
//! 000). No state beside the ring has to match completions to requests. Receives
//! complete as they are: the connection takes them from the client's rings itself
//! ([`QpRecvs`](crate::local::recvs::QpRecvs)).

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ipc::qpseg::{CQE_SIZE, Doorbell, Geometry, QpSegment, Side};
use ipc::wqe::{encode_cqe, set_sq_done};
use offload_engine::CompletionSink;
use offload_engine::push::PushShare;
use rdmap::{Completion, QpNum, Queue, SendFlags};

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
    /// Send requests in the connection, and those of them from pushed messages.
    sends: usize,
    pushed: usize,
    /// Completions waiting for room in the client's ring, at most `cap`.
    backlog: VecDeque<[u8; CQE_SIZE]>,
    /// Send requests that ended while completions were held: their ring entries retire
    /// once the held completions are in the ring, so that no later completion (one the
    /// library makes itself, for a message it wrote to its shared socket once everything
    /// before had retired) overtakes them.
    retire_held: u32,
    cap: usize,
    /// The backlog overflowed (the servant ends the queue pair for it).
    overran: bool,
}

impl ClientRing {
    /// The sink of a queue pair whose client has `seg` and `to_client`, with `sends`
    /// send requests in the connection (`pushed` of them from pushed messages) and the
    /// completions `backlog` not yet in the ring (a servant a daemon before this one ran;
    /// none for a new one).
    pub(super) fn new(
        seg: Arc<QpSegment>,
        to_client: Doorbell,
        share: Arc<PushShare>,
        (sends, pushed, backlog): (usize, usize, VecDeque<[u8; CQE_SIZE]>),
        cap: usize,
    ) -> Self {
        // Pushed requests still in the connection hold tracking entries here now.
        share.retrack(pushed);
        Self {
            seg,
            to_client,
            share,
            state: Mutex::new(RingState {
                sends,
                pushed,
                backlog,
                retire_held: 0,
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
        self.lock().sends
    }

    /// Counts `n` send requests about to be posted, `pushed` of them from pushed
    /// messages (before the post: a small one may complete within it); those the
    /// connection then refuses complete through [`not_posted`](Self::not_posted).
    pub(super) fn sending(&self, n: usize, pushed: usize) {
        let mut st = self.lock();
        st.sends += n;
        st.pushed += pushed;
    }

    /// Requests given to [`sending`](Self::sending) that the connection refused: they
    /// complete as `wcs` (flushed, with their flags).
    pub(super) fn not_posted(&self, mut wcs: impl Iterator<Item = Completion>) {
        self.deliver_all(&mut wcs);
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
    pub(super) fn image(&self) -> (usize, usize, Vec<u8>) {
        let mut st = self.lock();
        // The image carries the held completions, not the retirements behind them: those
        // retire now (a later completion of the library's may then overtake a held one).
        self.seg.sq_retire(std::mem::take(&mut st.retire_held));
        (
            st.sends,
            st.pushed,
            st.backlog.iter().flatten().copied().collect(),
        )
    }

    /// Its queue pair runs in another daemon now: the tracking entries of its pushed
    /// requests are let go here.
    pub(super) fn moved_away(&self) {
        let pushed = self.lock().pushed;
        for _ in 0..pushed {
            self.share.untrack();
        }
    }

    /// A send request's end: its push tracking entry goes, and its completion is the
    /// client's unless it asked for none and it succeeded. The caller retires its ring
    /// entry once that completion, and every one before it, is in the ring.
    fn finish_send(&self, st: &mut RingState, wc: &Completion) -> Option<[u8; CQE_SIZE]> {
        st.sends = st.sends.saturating_sub(1);
        if wc.flags.contains(SendFlags::PUSHED) && st.pushed > 0 {
            st.pushed -= 1;
            self.share.untrack();
        }
        (wc.flags.contains(SendFlags::SIGNALED) || !wc.is_ok()).then(|| encode_cqe(wc))
    }

    /// Completions into the ring (held if it is full), in order, and the client's
    /// doorbell rung if any went in.
    fn deliver_all(&self, wcs: &mut dyn Iterator<Item = Completion>) {
        let mut st = self.lock();
        let mut pushed = false;
        for wc in wcs {
            let entry = match wc.queue {
                Queue::Send => self.finish_send(&mut st, &wc).map(|mut e| {
                    // The index once this request retired: those held behind full rings
                    // retire before it.
                    let done = self.seg.sq_retired().wrapping_add(st.retire_held + 1);
                    set_sq_done(&mut e, done);
                    e
                }),
                Queue::Recv => Some(encode_cqe(&wc)),
            };
            if let Some(e) = entry {
                pushed |= self.put(&mut st, e);
            }
            if wc.queue == Queue::Send {
                if st.backlog.is_empty() {
                    self.seg.sq_retire(1);
                } else {
                    st.retire_held += 1;
                }
            }
        }
        drop(st);
        if pushed {
            self.ring_client();
        }
    }

    /// Completions flushed for receives the connection never took (still in the client's
    /// ring when the queue pair ended).
    pub(super) fn flushed_recvs(&self, mut wcs: impl Iterator<Item = Completion>) {
        self.deliver_all(&mut wcs);
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
            if st.backlog.is_empty() {
                self.seg.sq_retire(std::mem::take(&mut st.retire_held));
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
    fn deliver(&self, _qp: QpNum, batch: &mut Vec<Completion>) {
        self.deliver_all(&mut batch.drain(..));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc::qpseg::{Discard, Side};
    use ipc::wqe::{decode_cqe, sq_done};
    use offload_engine::PushConfig;
    use rdmap::{WcOpcode, WcStatus};

    fn wc(id: u64, flags: SendFlags, status: WcStatus) -> Completion {
        let mut wc = Completion::new(id, Queue::Send, WcOpcode::Send, status);
        wc.flags = flags;
        wc
    }

    /// A ring over a fresh segment with a completion ring `cq_depth` deep, drawing on
    /// `share`, and the client's mapping of the same segment.
    fn ring(cq_depth: u32, share: &Arc<PushShare>) -> (ClientRing, QpSegment) {
        let geo = Geometry {
            sq_depth: 4,
            rq_depth: 4,
            cq_depth,
            staging: 64,
        };
        let seg = Arc::new(QpSegment::create(geo).unwrap());
        let file = std::fs::File::from(seg.fd().try_clone_to_owned().unwrap());
        let client = QpSegment::map(file, geo).unwrap();
        let ring = ClientRing::new(
            seg,
            Doorbell::new().unwrap(),
            share.clone(),
            (0, 0, VecDeque::new()),
            cq_depth as usize,
        );
        (ring, client)
    }

    /// Each completion says itself whether the client asked for it and whether it held
    /// the push path's resources: whatever order they come in (a Terminate keeps requests
    /// on their way to the socket while later posts flush), the client gets exactly the
    /// completions it asked for, every ring entry retires, and each pushed request gives
    /// its tracking entry back once.
    #[test]
    fn completions_carry_what_the_client_asked_for_in_any_order() {
        let share = Arc::new(PushShare::new(PushConfig {
            tracking: 1,
            ..PushConfig::default()
        }));
        let now = std::time::Instant::now();
        assert!(
            share.admit(8, now).is_ok(),
            "the pushed request's tracking entry"
        );
        let (ring, client) = ring(4, &share);
        ring.sending(3, 1);
        assert_eq!(ring.sends_in_flight(), 3);
        let pushed = SendFlags::PUSHED | SendFlags::SIGNALED;
        ring.deliver(
            QpNum(1),
            &mut vec![
                wc(3, SendFlags::SIGNALED, WcStatus::Flushed),
                wc(1, SendFlags::NONE, WcStatus::Success),
                wc(2, pushed, WcStatus::Success),
            ],
        );
        let got: Vec<_> = std::iter::from_fn(|| client.cq_pop().unwrap())
            .map(|e| decode_cqe(&e).unwrap().wr_id)
            .collect();
        assert_eq!(got, [3, 2], "the unsignaled success stays quiet");
        assert_eq!(client.sq_cons_done().1, 3, "every entry retired");
        assert_eq!(ring.sends_in_flight(), 0);
        assert!(share.admit(8, now).is_ok(), "the tracking entry came back");
        assert_eq!(share.admit(8, now), Err(Discard::TrackingFull), "once");
    }

    /// A send whose completion is held (the client's ring is full) retires only once it
    /// and every completion before it are in the ring, and so does an unsignaled send
    /// behind it: the library may write to its shared socket once everything retired,
    /// and completes that message itself, after what it drained from the ring.
    #[test]
    fn sends_behind_held_completions_retire_once_those_are_in_the_ring() {
        let (ring, client) = ring(2, &Arc::new(PushShare::new(PushConfig::default())));
        ring.sending(4, 0);
        ring.deliver(
            QpNum(1),
            &mut vec![
                wc(1, SendFlags::SIGNALED, WcStatus::Success),
                wc(2, SendFlags::SIGNALED, WcStatus::Success),
                wc(3, SendFlags::SIGNALED, WcStatus::Success),
                wc(4, SendFlags::NONE, WcStatus::Success),
            ],
        );
        assert!(ring.holds_any());
        assert_eq!(client.sq_cons_done().1, 2, "those in the ring retired");
        let first = client.cq_pop().unwrap().unwrap();
        assert_eq!(decode_cqe(&first).unwrap().wr_id, 1);
        assert_eq!(sq_done(&first), Some(1), "it names its own retirement");
        assert!(ring.flush());
        assert!(!ring.holds_any());
        assert_eq!(
            client.sq_cons_done().1,
            4,
            "the held one and the one behind it"
        );
        let got: Vec<_> = std::iter::from_fn(|| client.cq_pop().unwrap())
            .map(|e| (decode_cqe(&e).unwrap().wr_id, sq_done(&e)))
            .collect();
        assert_eq!(
            got,
            [(2, Some(2)), (3, Some(3))],
            "a held completion names the index its request retires at, not the word's"
        );
    }

    /// While the servant runs its turns, completions the connection delivers leave the
    /// client's doorbell owed and the servant rings it once at its turn; a parked
    /// servant's deliveries ring at once. Either way a sleeping client is woken.
    #[test]
    fn a_spinning_servant_rings_once_per_turn_a_parked_one_at_once() {
        use std::io::Read as _;
        use std::os::fd::AsFd;
        let (ring, client) = ring(8, &Arc::new(PushShare::new(PushConfig::default())));
        let mut bell = std::fs::File::from(ring.to_client().as_fd().try_clone_to_owned().unwrap());
        // The eventfd's count of rings since the last read (0: none).
        let mut rings = move || {
            let mut b = [0u8; 8];
            bell.read(&mut b).map_or(0, |_| u64::from_ne_bytes(b))
        };
        let signaled = || wc(1, SendFlags::SIGNALED, WcStatus::Success);
        ring.sending(4, 0);

        client.park(Side::Client);
        ring.set_spinning(true);
        ring.deliver(QpNum(1), &mut vec![signaled()]);
        ring.deliver(QpNum(1), &mut vec![signaled()]);
        assert_eq!(rings(), 0, "owed, not rung, while the servant spins");
        ring.settle();
        assert_eq!(rings(), 1, "rung once at the servant's turn");
        ring.settle();
        assert_eq!(rings(), 0, "nothing owed any more");

        client.park(Side::Client);
        ring.deliver(QpNum(1), &mut vec![signaled()]);
        ring.set_spinning(false);
        assert_eq!(rings(), 1, "what was owed is rung as the servant parks");
        client.park(Side::Client);
        ring.deliver(QpNum(1), &mut vec![signaled()]);
        assert_eq!(rings(), 1, "a parked servant's delivery rings at once");
    }
}
