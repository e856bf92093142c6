//! A queue pair whose engine is the local `iwarpd`: work requests go into the send and
//! receive rings of its shared segment, completions come out of the completion ring.
//!
//! A pump task moves completions out of the ring into the application's completion queues
//! (or to the future of an async method), sleeping on the daemon's doorbell only after it
//! set its parked word and found the ring empty. Posting writes entries and publishes the
//! producer index; the daemon's doorbell is rung only if the daemon parked.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cq::{CompletionFuture, Cq, NOTIFY_BIT, Waiters, check_wr_id};
use ipc::control::{QpInfo, Reply, Request};
use ipc::push::PushRegion;
use ipc::qpseg::{Discard, Doorbell, QpSegment, Side};
use ipc::wqe::{
    EncodeError, INLINE_MAX, SQE_SIZE, decode_cqe, encode_rqe, encode_sqe, mark_push_discarded,
    mark_pushed, set_inline, sq_done,
};
use rdmap::{
    Completion, Payload, PostError, QpEnd, QpNum, QpState, Queue, RecvWr, SendFlags, SendOp,
    SendWr, WcOpcode, WcStatus, WrId,
};
use tokio::sync::watch;

use super::shared_socket::SharedSocket;
use super::{Client, DaemonError};
use direct::{Direct, share_socket};

mod direct;
mod outstanding;
mod pump;
mod staging;
#[cfg(test)]
mod tests;

use outstanding::{Outstanding, later};
use pump::pump;
use staging::Staging;

struct Routes {
    send_cq: Cq,
    recv_cq: Cq,
    /// Requests of the async methods (the engine's slab: no allocation per request).
    waiters: Arc<Waiters>,
}

/// Completions on their way to the application's queues, kept between drains so that
/// draining allocates nothing.
#[derive(Default)]
struct Drained {
    sends: Vec<Completion>,
    recvs: Vec<Completion>,
}

/// What the handle and the pump share.
struct Shared {
    /// The completion ring has one consumer at a time: the pump, or a thread in
    /// `poll_input` (it holds this lock, with the buffers it sorts completions into).
    consumer: Mutex<Drained>,
    num: QpNum,
    seg: QpSegment,
    to_daemon: Doorbell,
    routes: Routes,
    /// Counts `poll_input` calls (the application busy-polls while it moves).
    polls: AtomicU32,
    /// The send queue index the completions drained so far retire up to (see
    /// [`retired`](Self::retired)).
    cqe_done: AtomicU32,
    /// A request whose completion goes to a future was posted, or a task started waiting
    /// on a completion queue this queue pair feeds: the pump watches the ring even while
    /// the application busy-polls (it awaits now).
    awaited: Arc<tokio::sync::Notify>,
    outstanding: Mutex<Outstanding>,
}

impl Shared {
    /// Moves every completion in the ring to where it goes; true if there were any.
    fn drain(&self) -> bool {
        let mut one = self.consumer.lock().unwrap_or_else(PoisonError::into_inner);
        let Drained { sends, recvs } = &mut *one;
        let mut any = false;
        loop {
            let e = match self.seg.cq_pop() {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(_) => {
                    tracing::error!(qp = %self.num, "iwarpd's completion index is garbage");
                    break;
                }
            };
            any = true;
            if let Some(done) = sq_done(&e) {
                // Release: whoever posts next, on any thread, sees the daemon done with
                // the octets it reuses (the ring's acquire came before).
                let seen = self.cqe_done.load(Ordering::Relaxed);
                self.cqe_done.store(later(seen, done), Ordering::Release);
            }
            let Ok(wc) = decode_cqe(&e) else {
                tracing::error!(qp = %self.num, "iwarpd wrote a completion this library cannot read");
                continue;
            };
            if wc.queue == Queue::Recv && wc.wr_id & NOTIFY_BIT != 0 {
                self.outstanding().received(wc.wr_id);
            }
            let Some(wc) = self.routes.waiters.route(wc) else {
                continue;
            };
            match wc.queue {
                Queue::Send => sends.push(wc),
                Queue::Recv => recvs.push(wc),
            }
        }
        if !recvs.is_empty() || any {
            let mut o = self.outstanding();
            for wc in recvs.iter() {
                o.received(wc.wr_id);
            }
        }
        if !sends.is_empty() {
            self.routes.send_cq.deliver(self.num, sends.drain(..));
        }
        if !recvs.is_empty() {
            self.routes.recv_cq.deliver(self.num, recvs.drain(..));
        }
        any
    }

    /// The send queue index every request before which retired: what the completions
    /// drained say (a completion is in the ring a moment before the daemon moves its
    /// `sq_done` word), or that word if it is ahead (requests without completions).
    fn retired(&self) -> u32 {
        let (_, word) = self.seg.sq_cons_done();
        later(word, self.cqe_done.load(Ordering::Acquire))
    }

    fn outstanding(&self) -> std::sync::MutexGuard<'_, Outstanding> {
        self.outstanding
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The daemon is gone: what it had not completed completes here as flushed (after
    /// what it did complete), as an RNIC that failed flushes its queues, so no
    /// application waits forever for it.
    fn flush_all(&self) {
        self.drain();
        let done = self.retired();
        let mut o = self.outstanding();
        o.dead = true;
        o.retire(done);
        let sends: Vec<_> = o.sends.drain(..).collect();
        let recvs: Vec<_> = o.recvs.drain(..).collect();
        drop(o);
        let flushed = sends
            .into_iter()
            .map(|(id, op)| Completion::new(id, Queue::Send, op, WcStatus::Flushed))
            .chain(
                recvs
                    .into_iter()
                    .map(|id| Completion::new(id, Queue::Recv, WcOpcode::Recv, WcStatus::Flushed)),
            );
        let (mut sends, mut recvs) = (Vec::new(), Vec::new());
        for wc in flushed {
            let Some(wc) = self.routes.waiters.route(wc) else {
                continue;
            };
            match wc.queue {
                Queue::Send => sends.push(wc),
                Queue::Recv => recvs.push(wc),
            }
        }
        self.routes.send_cq.deliver(self.num, sends.into_iter());
        self.routes.recv_cq.deliver(self.num, recvs.into_iter());
    }

    fn ring_daemon(&self) {
        if self.seg.must_wake(Side::Daemon) {
            self.to_daemon.ring();
        }
    }
}

/// The library's side of seed 000's push policy for one queue pair.
#[derive(Debug)]
struct PushPolicy {
    region: Arc<PushRegion>,
    rules: ipc::push::PushPolicy,
    /// The daemon's discard count when last looked at.
    discards_seen: u32,
    /// The rules allow pushing the next post.
    pushing: bool,
}

impl PushPolicy {
    /// Applies the stop and resume rules before a post: stop when the daemon discarded
    /// since the last look; resume once every request posted has retired (the send queue
    /// is empty).
    fn update(&mut self, seg: &QpSegment, retired: u32) {
        let discards = seg.push_discards();
        let discarded = discards != self.discards_seen;
        self.discards_seen = discards;
        let sq_empty = seg.sq_prod() == retired;
        self.pushing = self.rules.may_push(discarded, sq_empty);
    }
}

/// What posting changes, under one lock: the staging area, the push policy, and the
/// socket the daemon shared (the push path that skips it).
#[derive(Debug)]
struct Poster {
    staging: Staging,
    push: Option<PushPolicy>,
    direct: Option<Box<SharedSocket>>,
}

/// Why a request was not encoded into the send queue.
enum Unencoded {
    /// The post is refused: no staging room now, or never for this payload.
    Refused(PostError),
    /// It completes at once with an error, as a request the RNIC cannot take (a gather
    /// list longer than an entry holds: a local length error).
    Failed(Completion),
}

/// A queue pair served by `iwarpd`.
pub(crate) struct DaemonQp {
    client: Arc<Client>,
    id: u32,
    info: QpInfo,
    shared: Arc<Shared>,
    post: Mutex<Poster>,
    end: watch::Receiver<Option<QpEnd>>,
    pump: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for DaemonQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonQp")
            .field("num", &self.shared.num)
            .field("daemon", &self.client.path())
            .finish()
    }
}

impl Drop for DaemonQp {
    fn drop(&mut self) {
        self.pump.abort();
        self.client.drop_qp(self.id);
    }
}

impl DaemonQp {
    /// Maps the segment and doorbells of a queue pair the daemon connected (the reply to
    /// Connect or Accept) and starts its pump.
    pub(crate) fn start(
        client: &Arc<Client>,
        reply: Reply,
        mut fds: Vec<OwnedFd>,
        send_cq: Cq,
        recv_cq: Cq,
        push: Option<Arc<PushRegion>>,
        initial_recvs: impl Iterator<Item = WrId>,
    ) -> Result<Self, DaemonError> {
        let Reply::Qp(info) = reply else {
            return Err(DaemonError::Refused(
                "iwarpd answered with no queue pair".into(),
            ));
        };
        let bad = |what: String| DaemonError::Refused(format!("iwarpd's queue pair: {what}"));
        if fds.len() != 3 {
            return Err(bad("descriptors missing".into()));
        }
        let to_client = Doorbell::from_fd(fds.pop().unwrap_or_else(|| unreachable!()));
        let to_daemon = Doorbell::from_fd(fds.pop().unwrap_or_else(|| unreachable!()));
        let seg_fd = fds.pop().unwrap_or_else(|| unreachable!());
        let seg = QpSegment::map(std::fs::File::from(seg_fd), info.geometry)
            .map_err(|e| bad(e.to_string()))?;
        let to_client = to_client.into_async().map_err(|e| bad(e.to_string()))?;
        let id = info.qp;
        let awaited = Arc::new(tokio::sync::Notify::new());
        send_cq.add_feeder(&awaited);
        if !send_cq.same_queue(&recv_cq) {
            recv_cq.add_feeder(&awaited);
        }
        // Where the daemon's index stands (0 for a new queue pair).
        let retired_before = seg.sq_cons_done().1;
        let shared = Arc::new(Shared {
            consumer: Mutex::new(Drained::default()),
            num: QpNum(info.num),
            seg,
            to_daemon,
            routes: Routes {
                send_cq,
                recv_cq,
                waiters: Arc::default(),
            },
            polls: AtomicU32::new(0),
            cqe_done: AtomicU32::new(retired_before),
            awaited,
            outstanding: Mutex::new(Outstanding {
                sends: VecDeque::new(),
                first_send: 0,
                recvs: initial_recvs.collect(),
                depths: client.depths(),
                dead: false,
            }),
        });
        let end = client.qp_end(id);
        let direct = client
            .push_socket()
            .then(|| share_socket(client, id))
            .flatten();
        let pump = tokio::spawn(pump(shared.clone(), to_client, client.clone(), end.clone()));
        Ok(Self {
            client: client.clone(),
            id,
            post: Mutex::new(Poster {
                staging: Staging {
                    size: u64::from(info.geometry.staging),
                    head: 0,
                    tail: 0,
                    live: VecDeque::new(),
                },
                push: push
                    .filter(|_| client.push_enabled())
                    .map(|region| PushPolicy {
                        region,
                        rules: ipc::push::PushPolicy::new(info.qp),
                        discards_seen: 0,
                        pushing: true,
                    }),
                direct,
            }),
            info,
            shared,
            end,
            pump,
        })
    }

    pub(crate) fn num(&self) -> QpNum {
        self.shared.num
    }

    pub(crate) fn ird_ord(&self) -> (u16, u16) {
        (self.info.ird, self.info.ord)
    }

    pub(crate) fn mulpdu(&self) -> u16 {
        self.info.mulpdu
    }

    pub(crate) fn framing(&self) -> rdmap::Framing {
        self.info.framing
    }

    pub(crate) fn extensions(&self) -> rdmap::Extensions {
        rdmap::Extensions::from_bits_truncate(self.info.extensions)
    }

    pub(crate) fn private_data(&self) -> &bytes::Bytes {
        &self.info.private
    }

    pub(crate) fn state(&self) -> QpState {
        if self.end.borrow().is_some() {
            QpState::Error
        } else {
            QpState::Rts
        }
    }

    /// The push counters the daemon keeps in the segment, with what this library wrote
    /// to the shared socket itself (executed) and could not (discarded).
    pub(crate) fn push_counters(&self) -> ipc::qpseg::PushCounters {
        let mut c = self.shared.seg.push_counters();
        let own = self.shared.seg.tx_share().counts();
        c.executed += own.pushed;
        c.discards[Discard::NotAtHead.index()] += own.not_at_head;
        c.discards[Discard::FlowControl.index()] += own.busy;
        c
    }

    /// The traffic counters from the daemon, and the push counters from the segment.
    pub(crate) fn counters(&self) -> ipc::control::Counters {
        let mut c = match self.client.call(&Request::QueryQp { qp: self.id }) {
            Ok(Reply::QpCounters(c)) => c,
            _ => ipc::control::Counters::default(),
        };
        c.push = self.push_counters();
        c
    }

    /// Asks the daemon to change a setting; once it answered, the change holds. A daemon
    /// that is gone runs nothing anyway.
    pub(crate) fn modify(&self, change: ipc::control::QpChange) {
        let _ = self.client.call(&Request::ModifyQp {
            qp: self.id,
            change,
        });
    }

    pub(crate) fn disconnect(&self) {
        self.client.tell(&Request::Disconnect { qp: self.id });
    }

    pub(crate) async fn closed(&self) -> QpEnd {
        let mut rx = self.end.clone();
        loop {
            if let Some(end) = *rx.borrow_and_update() {
                return end;
            }
            if rx.changed().await.is_err() {
                return if self.client.is_gone() {
                    self.client.lost()
                } else {
                    QpEnd::ConnectionLost
                };
            }
        }
    }

    /// Takes what the completion ring holds now (busy-poll mode).
    pub(crate) fn poll_input(&self) -> bool {
        self.shared.polls.fetch_add(1, Ordering::Relaxed);
        let any = self.shared.drain();
        if !any {
            // The daemon that serves this queue pair needs a processor to make progress:
            // a busy poll that finds nothing gives this one up for a moment.
            std::thread::yield_now();
        }
        any
    }

    /// As [`poll_input`](Self::poll_input): iwarpd writes the output.
    pub(crate) fn poll_io(&self) -> bool {
        self.poll_input()
    }

    pub(crate) fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        self.post_send_batch(std::iter::once(wr))
            .map_err(|(_, e)| e)
    }

    pub(crate) fn post_send_batch<I>(&self, wrs: I) -> Result<(), (usize, PostError)>
    where
        I: IntoIterator<Item = SendWr>,
    {
        self.post_sends(wrs.into_iter().map(|wr| (wr, false)))
    }

    /// Writes the entries, publishes them together and rings the daemon once. A lone
    /// small request is pushed when the policy allows (see [`push_one`](Self::push_one)).
    fn post_sends(
        &self,
        wrs: impl Iterator<Item = (SendWr, bool)>,
    ) -> Result<(), (usize, PostError)> {
        let seg = &self.shared.seg;
        let mut post = self.post.lock().unwrap_or_else(PoisonError::into_inner);
        let Poster {
            staging,
            push,
            direct,
        } = &mut *post;
        if direct.as_ref().is_some_and(|d| !d.is_on(seg)) {
            // The daemon ended the share (the queue pair left RTS or moved): the socket
            // is let go, so that this copy does not keep the connection open.
            *direct = None;
        }
        let mut direct = direct.as_mut();
        let mut sent_here: Option<Completion> = None;
        let done = self.shared.retired();
        staging.reclaim(done);
        let mut outstanding = self.shared.outstanding();
        if outstanding.dead {
            drop(outstanding);
            drop(post);
            return self.flush_posted(wrs);
        }
        outstanding.retire(done);
        if outstanding.sends.is_empty() {
            outstanding.first_send = seg.sq_prod();
        }
        if let Some(p) = push.as_mut() {
            p.update(seg, done);
        }
        let mut room = seg.sq_room().min(outstanding.send_room());
        let (mut n, mut done) = (0u32, 0usize);
        let mut failed = None;
        let mut wrs = wrs.peekable();
        while let Some((wr, internal)) = wrs.next() {
            if let (false, Err(e)) = (internal, check_wr_id(wr.wr_id)) {
                failed = Some(e);
                break;
            }
            if room == 0 {
                failed = Some(PostError::QueueFull);
                break;
            }
            // The push path that skips the daemon: a lone small request onto an empty
            // send queue goes on the wire from this thread.
            let lone = n == 0 && wrs.peek().is_none();
            let mut discarded = false;
            if let Some(d) = direct.as_deref_mut().filter(|_| lone) {
                match self.try_direct(d, &wr, outstanding.sends.is_empty()) {
                    Direct::Done(wc) => {
                        sent_here = Some(wc);
                        done += 1;
                        continue;
                    }
                    Direct::Queue { discarded: d } => discarded = d,
                }
            }
            let idx = seg.sq_prod().wrapping_add(n);
            let mut e = match self.encode(staging, &wr, idx) {
                Ok(e) => e,
                Err(Unencoded::Refused(why)) => {
                    failed = Some(why);
                    break;
                }
                Err(Unencoded::Failed(wc)) => {
                    self.complete_locally(wc);
                    done += 1;
                    continue;
                }
            };
            outstanding.sends.push_back((wr.wr_id, wr.op.wc_opcode()));
            if discarded {
                mark_push_discarded(&mut e);
            }
            // Seed 000's push through the daemon, when the socket is not shared.
            let policy = push
                .as_mut()
                .filter(|p| direct.is_none() && lone && p.pushing);
            if !self.push_slot(policy, &wr, &mut e, idx) {
                seg.sq_write(n, &e);
                n += 1;
            }
            done += 1;
            room -= 1;
        }
        if n > 0 {
            seg.sq_publish(n);
        }
        drop(outstanding);
        drop(post);
        if let Some(wc) = sent_here {
            // After what the ring holds: completions stay in posting order.
            if wc.flags.contains(SendFlags::SIGNALED) || !wc.is_ok() {
                self.shared.drain();
                self.complete_locally(wc);
            }
        }
        if done > 0 {
            // Also after a request sent here: a parked servant wakes and spins, so that
            // the peer's answer is read by a thread that is awake (a Write's answer
            // rings nothing else: no receive is posted for it).
            self.shared.ring_daemon();
        }
        match failed {
            None => Ok(()),
            Some(e) => Err((done, e)),
        }
    }

    /// `wr` as the send queue entry at index `idx`, a payload too long to be inline
    /// staged.
    fn encode(
        &self,
        staging: &mut Staging,
        wr: &SendWr,
        idx: u32,
    ) -> Result<[u8; SQE_SIZE], Unencoded> {
        let seg = &self.shared.seg;
        let mut staged_end = None;
        // No room now, or never: a payload larger than the area (or than a message
        // holds, refused before it is offered to the area).
        let mut too_large = true;
        let encoded = encode_sqe(wr, &mut |data| {
            too_large = !staging.could_hold(data.len());
            let at = staging.alloc(data.len())?;
            seg.stage(at, data);
            staged_end = Some(staging.head);
            Some(at)
        });
        match encoded {
            Ok(e) => {
                if let Some(end) = staged_end {
                    staging.live.push_back((idx, end));
                }
                Ok(e)
            }
            Err(EncodeError::NoStagingRoom) if too_large => {
                Err(Unencoded::Refused(PostError::PayloadTooLarge {
                    max: staging.size as usize,
                }))
            }
            Err(EncodeError::NoStagingRoom) => Err(Unencoded::Refused(PostError::QueueFull)),
            Err(EncodeError::TooManyEntries { max }) => {
                tracing::warn!(
                    max,
                    "a gather list longer than iwarpd's send queue entries hold"
                );
                let op = wr.op.wc_opcode();
                let wc = Completion::new(wr.wr_id, Queue::Send, op, WcStatus::LocalLength);
                Err(Unencoded::Failed(wc))
            }
        }
    }

    /// Seed 000's push through the daemon's region, for `wr` (encoded as `e`, at send
    /// queue index `idx`) if `policy` lets it: the twin entry first (flagged),
    /// published; then the message, published READY. False if it was not pushed (the
    /// caller writes the entry with the others).
    fn push_slot(
        &self,
        policy: Option<&mut PushPolicy>,
        wr: &SendWr,
        e: &mut [u8; SQE_SIZE],
        idx: u32,
    ) -> bool {
        let Some(p) = policy else {
            return false;
        };
        let Some(message) = self.message(wr, e) else {
            return false;
        };
        // Stop condition 2 (no room in the region) is the rules'.
        let Some(slot) = p.rules.claim(&p.region) else {
            return false;
        };
        mark_pushed(e);
        let seg = &self.shared.seg;
        seg.sq_write(0, e);
        seg.sq_publish(1);
        p.region.publish(slot, self.id, idx, &message);
        true
    }

    /// The pushed message for `wr` (encoded as `entry`), if it may be pushed: a Send,
    /// Write or Immediate Data whose payload is inline in its entry already, or a gather
    /// list of this process's regions short enough to be copied in.
    fn message(&self, wr: &SendWr, entry: &[u8; SQE_SIZE]) -> Option<[u8; SQE_SIZE]> {
        let data = match &wr.op {
            SendOp::Send { data, .. } | SendOp::Write { data, .. } => data,
            SendOp::Immediate { .. } => return Some(*entry),
            _ => return None,
        };
        match data {
            // Inline in its entry already.
            Payload::Bytes(b) => (b.len() <= INLINE_MAX).then_some(*entry),
            Payload::Sgl(_) => {
                let mut body = [0u8; INLINE_MAX];
                let payload = self.local_payload(data, &mut body)?;
                let mut m = *entry;
                set_inline(&mut m, payload).then_some(m)
            }
        }
    }

    /// The octets of `data` if they fit `buf`: `Bytes` as they are, a gather list of this
    /// process's regions copied into `buf`; `None` if longer, or if a region is not one
    /// this library registered here. An entry's inline payload, or a message the library
    /// writes to its shared socket.
    pub(super) fn local_payload<'a>(
        &self,
        data: &'a Payload,
        buf: &'a mut [u8],
    ) -> Option<&'a [u8]> {
        match data {
            Payload::Bytes(b) => (b.len() <= buf.len()).then_some(&b[..]),
            Payload::Sgl(sgl) => {
                let mut at = 0;
                for sge in sgl.iter() {
                    let end = at + sge.len as usize;
                    if end > buf.len() || !self.client.copy_local(sge, &mut buf[at..end]) {
                        return None;
                    }
                    at = end;
                }
                Some(&buf[..at])
            }
        }
    }

    /// Completes send requests posted after the daemon went away as flushed, as a
    /// queue pair in the error state does.
    fn flush_posted(
        &self,
        wrs: impl Iterator<Item = (SendWr, bool)>,
    ) -> Result<(), (usize, PostError)> {
        for (done, (wr, internal)) in wrs.enumerate() {
            if let (false, Err(e)) = (internal, check_wr_id(wr.wr_id)) {
                return Err((done, e));
            }
            let op = wr.op.wc_opcode();
            self.complete_locally(Completion::new(
                wr.wr_id,
                Queue::Send,
                op,
                WcStatus::Flushed,
            ));
        }
        Ok(())
    }

    fn complete_locally(&self, wc: Completion) {
        let Some(wc) = self.shared.routes.waiters.route(wc) else {
            return;
        };
        let cq = match wc.queue {
            Queue::Send => &self.shared.routes.send_cq,
            Queue::Recv => &self.shared.routes.recv_cq,
        };
        cq.deliver(self.shared.num, std::iter::once(wc));
    }

    pub(crate) fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        check_wr_id(wr.wr_id)?;
        self.push_recv(wr)
    }

    fn push_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        let Ok(e) = encode_rqe(&wr) else {
            let wc = Completion::new(wr.wr_id, Queue::Recv, WcOpcode::Recv, WcStatus::LocalLength);
            self.complete_locally(wc);
            return Ok(());
        };
        let mut outstanding = self.shared.outstanding();
        if outstanding.dead {
            drop(outstanding);
            let wc = Completion::new(wr.wr_id, Queue::Recv, WcOpcode::Recv, WcStatus::Flushed);
            self.complete_locally(wc);
            return Ok(());
        }
        if outstanding.recvs.len() >= outstanding.depths.rq as usize || !self.shared.seg.rq_push(&e)
        {
            return Err(PostError::QueueFull);
        }
        outstanding.recvs.push_back(wr.wr_id);
        drop(outstanding);
        self.shared.ring_daemon();
        Ok(())
    }

    /// Posts `wr` signaled, its completion going to the returned future.
    pub(crate) fn post_send_notify(&self, mut wr: SendWr) -> Result<CompletionFuture, PostError> {
        let waiters = &self.shared.routes.waiters;
        let id = waiters.register();
        wr.wr_id = id;
        wr.flags = wr.flags | SendFlags::SIGNALED;
        self.post_sends(std::iter::once((wr, true)))
            .map_err(|(_, e)| e)
            .inspect_err(|_| waiters.forget(id))?;
        self.shared.awaited.notify_one();
        Ok(waiters.future(id))
    }

    /// Posts `wr`, its completion going to the returned future.
    pub(crate) fn post_recv_notify(&self, mut wr: RecvWr) -> Result<CompletionFuture, PostError> {
        let waiters = &self.shared.routes.waiters;
        let id = waiters.register();
        wr.wr_id = id;
        self.push_recv(wr).inspect_err(|_| waiters.forget(id))?;
        self.shared.awaited.notify_one();
        Ok(waiters.future(id))
    }
}
