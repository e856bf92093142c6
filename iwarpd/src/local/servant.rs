//! The servant of one client queue pair: moves work requests from the client's send and
//! receive rings into the engine, and completions from the engine into the client's
//! completion ring.
//!
//! Every entry is copied out of shared memory and decoded before use; an entry that does
//! not decode, or a ring index more than a ring ahead, ends this queue pair alone (a
//! graceful close the peer sees), never the daemon. Work request ids are the daemon's own
//! (the client's are kept here and put back in its completions), and every request is
//! posted signaled so that the daemon knows when each retires: unsignaled successes are
//! then dropped instead of delivered, and `sq_done` counts them all.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ipc::push::Snapshot;
use ipc::qpseg::Discard;
use ipc::qpseg::{CQE_SIZE, Doorbell, Geometry, QpSegment, Side};
use ipc::wqe::{Data, decode_sqe, encode_cqe, sqe_pushed};
use rdmap::{Completion, QpEnd, Queue, RecvWr, SendFlags, SendWr, WcStatus, WrId};

use super::logs::{CLIENT_OTHER, RING_GARBAGE, limited};
use super::recvs::{QpRecvs, RQ_ID, SRQ_ID};
use ipc::qpseg::AsyncDoorbell;
use offload_engine::push_share::{PdPush, PushShare, pushed_octets};
use tokio::sync::Notify;

use offload_engine::{Cq, Qp};

/// How a request reached the engine.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Via {
    /// From the send or receive queue, with no pushed twin.
    Queue,
    /// From the send queue although its twin was pushed: the push was discarded.
    QueueAfterDiscard,
    /// From a pushed message (it holds a tracking entry until it completes).
    Push,
}

/// What a daemon-side work request id stands for.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Tracked {
    client: WrId,
    signaled: bool,
    via: Via,
}

/// Daemon-side work request ids and what they stand for.
#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
struct Ids {
    next: u64,
    map: HashMap<u64, Tracked>,
}

impl Ids {
    fn track(&mut self, client: WrId, signaled: bool, via: Via) -> u64 {
        let id = self.next;
        self.next += 1;
        self.map.insert(
            id,
            Tracked {
                client,
                signaled,
                via,
            },
        );
        id
    }

    fn send(&mut self, mut wr: SendWr, via: Via) -> SendWr {
        wr.wr_id = self.track(wr.wr_id, wr.flags.contains(SendFlags::SIGNALED), via);
        wr.flags = wr.flags | SendFlags::SIGNALED;
        wr
    }

    fn recv(&mut self, mut wr: RecvWr) -> RecvWr {
        wr.wr_id = self.track(wr.wr_id, true, Via::Queue);
        wr
    }

    /// The client's view of `wc` (`None` for an unsignaled success), and how the request
    /// went in.
    fn complete(&mut self, mut wc: Completion) -> (Option<Completion>, Option<Via>) {
        let Some(t) = self.map.remove(&wc.wr_id) else {
            return (None, None);
        };
        wc.wr_id = t.client;
        wc.push_discarded = t.via == Via::QueueAfterDiscard;
        ((t.signaled || !wc.is_ok()).then_some(wc), Some(t.via))
    }
}

/// The push path's share of a servant: its domain's region, and the resources every
/// pushed message draws on.
pub(super) struct Push {
    pub(super) pd: Arc<PdPush>,
    pub(super) share: Arc<PushShare>,
}

/// Tells the client that its queue pair ended (called once).
pub(super) type OnEnd = Box<dyn FnOnce(QpEnd) + Send + Sync>;

/// A servant about to start: its completion queue exists before the connection does, so
/// that initial receives can be translated.
pub(super) struct Prepared {
    cq: Cq,
    ids: Ids,
    recvs: Arc<QpRecvs>,
    /// Send and receive requests the engine can still take.
    sq_room: usize,
    rq_room: usize,
    backlog: VecDeque<[u8; CQE_SIZE]>,
}

/// What a servant holds that is not in shared memory, for a successor daemon: its ids of
/// the requests in flight, the room left in the engine's queues, and the completions not
/// yet in the client's ring.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct ServantImage {
    ids: Ids,
    sq_room: u32,
    rq_room: u32,
    /// Completion entries back to back.
    backlog: Vec<u8>,
}

/// The most completions a servant holds for its client beyond its completion ring:
/// what the client's own requests can make at most (its ring holds one per send and
/// receive it may have outstanding, and its shared receive queue's receives can complete
/// here too). Past it the client is not taking its completions (an honest library always
/// does), and the queue pair ends with [`QpEnd::CqOverrun`], as an RNIC's does when its
/// completion queue overflows: nothing grows.
fn backlog_cap(geo: &Geometry, recvs: &QpRecvs) -> usize {
    geo.cq_depth as usize + recvs.srq().map_or(0, |q| q.depth() as usize)
}

impl Prepared {
    pub(super) fn new(geo: &Geometry, recvs: Arc<QpRecvs>) -> Self {
        Self {
            cq: Self::queue(geo),
            ids: Ids::default(),
            recvs,
            sq_room: geo.sq_depth as usize,
            rq_room: geo.rq_depth as usize,
            backlog: VecDeque::new(),
        }
    }

    /// Room for every request the servant lets in.
    fn queue(geo: &Geometry) -> Cq {
        Cq::new((geo.sq_depth + geo.rq_depth) as usize + 64)
    }

    /// A servant a daemon before this one ran, from its image.
    pub(super) fn restore(
        geo: &Geometry,
        recvs: Arc<QpRecvs>,
        image: ServantImage,
    ) -> Result<Self, String> {
        let (sq, rq) = (image.sq_room as usize, image.rq_room as usize);
        let in_flight = image.ids.map.len();
        if sq > geo.sq_depth as usize
            || rq > geo.rq_depth as usize
            || in_flight > (geo.sq_depth + geo.rq_depth) as usize
            || !image.backlog.len().is_multiple_of(CQE_SIZE)
        {
            return Err("a queue pair's servant image does not fit its rings".into());
        }
        let backlog = image
            .backlog
            .chunks_exact(CQE_SIZE)
            .map(|c| c.try_into().expect("exact chunks"))
            .collect();
        Ok(Self {
            cq: Self::queue(geo),
            ids: image.ids,
            recvs,
            sq_room: sq,
            rq_room: rq,
            backlog,
        })
    }

    pub(super) fn cq(&self) -> &Cq {
        &self.cq
    }

    pub(super) fn recv(&mut self, wr: RecvWr) -> RecvWr {
        // Posted with the connection: it holds engine receive queue room.
        self.rq_room = self.rq_room.saturating_sub(1);
        self.ids.recv(wr)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        self,
        id: u32,
        qp: Qp,
        seg: Arc<QpSegment>,
        to_daemon: Doorbell,
        to_client: Doorbell,
        push: Push,
        ended: OnEnd,
    ) -> Servant {
        let depth = seg.geometry();
        push.pd.add_qp(id);
        // Pushed requests still in flight (a servant restored from a daemon before) hold
        // tracking entries here now.
        let pushed = self.ids.map.values().filter(|t| t.via == Via::Push).count();
        push.share.retrack(pushed);
        let run = Run {
            id,
            push,
            backlog_cap: backlog_cap(&depth, &self.recvs),
            overran: false,
            sq_depth: depth.sq_depth as usize,
            qp,
            cq: self.cq,
            ids: self.ids,
            recvs: self.recvs,
            seg,
            to_client,
            signals: Arc::default(),
            ended: Some(ended),
            end: None,
            stopping: false,
            broken: false,
            sq_room: self.sq_room,
            rq_room: self.rq_room,
            backlog: self.backlog,
            batch: Vec::new(),
            completed: Vec::new(),
            snapshots: Vec::new(),
            arena: BytesMut::new(),
        };
        run.spawn(Bell::Raw(to_daemon))
    }
}

/// A running servant, as the session holds it.
pub(super) struct Servant {
    /// The client's id of the queue pair (what its push slots name).
    id: u32,
    pub(super) qp: Qp,
    /// Its domain's push region, which names it until it is gone.
    pd: Arc<PdPush>,
    signals: Arc<Signals>,
    octets: u64,
    /// Its task; taken by [`destroy`](Self::destroy) and [`freeze`](Self::freeze).
    /// Dropped with it still there, the servant is ended as `destroy` ends it (in the
    /// background): a servant never outlives its handle.
    task: Option<tokio::task::JoinHandle<Option<Frozen>>>,
}

/// What the session asks of a running servant.
#[derive(Default)]
struct Signals {
    /// Deliver the last completions and end (the queue pair is being destroyed).
    stop: Notify,
    /// Stop between two turns and give back what it holds (its session moves).
    freeze: std::sync::atomic::AtomicBool,
    wake: Notify,
}

/// Where the servant's doorbell is: not yet registered with the runtime, or registered.
enum Bell {
    Raw(Doorbell),
    Async(AsyncDoorbell),
}

/// A servant stopped between two turns, holding everything it held: it resumes where it
/// stopped, or its image goes to a successor daemon.
pub(super) struct Frozen {
    run: Run,
    bell: AsyncDoorbell,
}

impl Frozen {
    /// The queue pair.
    pub(super) fn qp(&self) -> &Qp {
        &self.run.qp
    }

    /// The client's id of it.
    pub(super) fn id(&self) -> u32 {
        self.run.id
    }

    /// Its domain's push region.
    pub(super) fn pd(&self) -> &Arc<PdPush> {
        &self.run.push.pd
    }

    /// Its receive buffers.
    pub(super) fn recvs(&self) -> &Arc<QpRecvs> {
        &self.run.recvs
    }

    /// Its rings' geometry.
    pub(super) fn geometry(&self) -> Geometry {
        self.run.seg.geometry()
    }

    /// Why it cannot move to another daemon, if it cannot.
    pub(super) fn unmovable(&self) -> Option<String> {
        let r = &self.run;
        if r.end.is_some() || r.stopping {
            return Some(format!("its queue pair {} has ended", r.id));
        }
        if r.broken || r.recvs.garbage().is_some() {
            return Some(format!(
                "its queue pair {} wrote garbage into its rings",
                r.id
            ));
        }
        None
    }

    /// Its image, once its queue pair is parked: the completions the engine made until
    /// then are taken first.
    pub(super) fn image(&mut self) -> ServantImage {
        self.run.collect();
        let r = &self.run;
        ServantImage {
            ids: r.ids.clone(),
            sq_room: r.sq_room as u32,
            rq_room: r.rq_room as u32,
            backlog: r.backlog.iter().flatten().copied().collect(),
        }
    }

    /// The descriptors that go with the image: its segment and its two doorbells.
    pub(super) fn files(&self) -> std::io::Result<[std::os::fd::OwnedFd; 3]> {
        use std::os::fd::AsFd;
        Ok([
            self.run.seg.fd().try_clone_to_owned()?,
            self.bell.as_fd().try_clone_to_owned()?,
            self.run.to_client.as_fd().try_clone_to_owned()?,
        ])
    }

    /// Runs on where it stopped.
    pub(super) fn resume(self) -> Servant {
        self.run.spawn(Bell::Async(self.bell))
    }

    /// Its queue pair runs in another daemon now: what it held here is let go.
    pub(super) fn moved_away(self) {
        let r = self.run;
        let pushed = r.ids.map.values().filter(|t| t.via == Via::Push).count();
        for _ in 0..pushed {
            r.push.share.untrack();
        }
        r.push.pd.remove_qp(r.id);
    }
}

/// How long a servant keeps polling after it last moved something, before it parks and
/// sleeps on its doorbell. A client's next request or the peer's answer usually comes
/// within this, and is then taken without a thread wake-up (measured on loopback: one-way
/// small-Send latency through iwarpd 50-65 µs without it, 20-30 µs with it). Each turn
/// of the shard's runtime gives up the processor once (see [`YIELDER`]), so a
/// busy-polling application on the same processor still runs.
const SPIN: Duration = Duration::from_micros(100);

thread_local! {
    /// The servant of this shard's thread that gives up the processor while servants
    /// spin (0: none yet): one thread yield per turn of the runtime, however many
    /// servants spin on it, so that an application on the same processor runs once per
    /// turn, not once per servant.
    static YIELDER: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A spinning servant's share of [`YIELDER`]: it yields the thread only while it holds
/// the duty, which it takes when nobody does and gives back when it parks or ends.
struct Yielder(u64);

impl Yielder {
    fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Self(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// One turn of spinning: the thread yields if this servant has the duty (taking it
    /// if nobody has it); true if it yielded.
    fn turn(&self) -> bool {
        let holder = YIELDER.with(|y| {
            if y.get() == 0 {
                y.set(self.0);
            }
            y.get()
        });
        let duty = holder == self.0;
        if duty {
            std::thread::yield_now();
        }
        duty
    }

    /// This servant stops spinning: another one takes the duty at its next turn.
    fn release(&self) {
        YIELDER.with(|y| {
            if y.get() == self.0 {
                y.set(0);
            }
        });
    }
}

impl Drop for Yielder {
    fn drop(&mut self) {
        self.release();
    }
}

/// How long destroying a queue pair waits for its close and its last completions.
const DESTROY_WAIT: Duration = Duration::from_secs(5);

impl Servant {
    /// Octets of its queue pair's segment (its rings and staging area).
    pub(super) fn octets(&self) -> u64 {
        self.octets
    }

    /// Two-phase teardown: the queue pair closes (its work finishes or is flushed), the
    /// servant delivers the last completions and stops touching the segment; then this
    /// returns.
    pub(super) async fn destroy(mut self) {
        if let Some(task) = self.task.take() {
            self.stop(task).await;
        }
    }

    /// Closes the queue pair and waits (a while) for the servant to deliver its last
    /// completions and end; then it is let go.
    fn stop(
        &self,
        task: tokio::task::JoinHandle<Option<Frozen>>,
    ) -> impl Future<Output = ()> + Send + 'static {
        self.qp.disconnect();
        self.signals.stop.notify_one();
        let (pd, id) = (self.pd.clone(), self.id);
        async move {
            let abort = task.abort_handle();
            if tokio::time::timeout(DESTROY_WAIT, task).await.is_err() {
                abort.abort();
            }
            pd.remove_qp(id);
        }
    }

    /// Stops it between two turns, for its session to move; `None` if it had ended on
    /// its own (its doorbell could not be polled: its queue pair was closed then).
    pub(super) async fn freeze(mut self) -> Option<Frozen> {
        let task = self.task.take()?;
        self.signals
            .freeze
            .store(true, std::sync::atomic::Ordering::Release);
        self.signals.wake.notify_one();
        task.await.ok().flatten()
    }
}

impl Drop for Servant {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            let stopping = self.stop(task);
            // With no runtime left (the daemon is ending) the queue pair was told to
            // close, and its task goes with the runtime.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                drop(rt.spawn(stopping));
            }
        }
    }
}

struct Run {
    /// The client's handle of this queue pair (what push slots name).
    id: u32,
    push: Push,
    sq_depth: usize,
    /// The client's receive ring (which the engine also reads on demand) and shared
    /// receive queue.
    recvs: Arc<QpRecvs>,
    qp: Qp,
    cq: Cq,
    ids: Ids,
    seg: Arc<QpSegment>,
    to_client: Doorbell,
    signals: Arc<Signals>,
    /// Tells the client its queue pair ended; taken when it does.
    ended: Option<OnEnd>,
    /// How its queue pair ended, once it did.
    end: Option<QpEnd>,
    /// Its queue pair is being destroyed.
    stopping: bool,
    /// The client wrote garbage into its rings.
    broken: bool,
    /// Send requests the engine can still take (its send queue depth less those out).
    sq_room: usize,
    rq_room: usize,
    /// Completions waiting for room in the client's ring, at most `backlog_cap`.
    backlog: VecDeque<[u8; CQE_SIZE]>,
    backlog_cap: usize,
    /// The backlog overflowed: the queue pair was terminated for it.
    overran: bool,
    /// Buffers kept from turn to turn, so that moving requests allocates nothing.
    batch: Vec<SendWr>,
    completed: Vec<Completion>,
    snapshots: Vec<Snapshot>,
    /// Where owned payloads are copied out of shared memory (see [`own`]).
    arena: BytesMut,
}

/// Octets an arena holds before a fresh one is taken.
const ARENA: usize = 64 << 10;

/// Copies an owned payload out of shared memory into `Bytes` carved from `arena`: one
/// allocation per 64 KiB of payloads (a fresh arena once the old one is full and still
/// referenced by requests in flight; the same one again once they are gone), not one per
/// request. `None` for a staged range outside the area.
fn own(arena: &mut BytesMut, seg: &QpSegment, d: Data<'_>) -> Option<Bytes> {
    let len = match d {
        Data::Inline(b) => b.len(),
        // The claim is the client's: checked against the staging area before anything
        // is allocated for it (an arena holds at most that much).
        Data::Staged { offset, len } if seg.staged_fits(offset, u64::from(len)) => len as usize,
        Data::Staged { .. } => return None,
    };
    if arena.capacity() < len {
        arena.reserve(len.max(ARENA));
    }
    match d {
        Data::Inline(b) => arena.extend_from_slice(b),
        Data::Staged { offset, .. } => {
            arena.resize(len, 0);
            if !seg.read_staged(offset, arena) {
                arena.clear();
                return None;
            }
        }
    }
    Some(arena.split().freeze())
}

/// Counts a discarded pushed message, in the queue pair's segment and the device's totals.
fn discard(seg: &QpSegment, share: &PushShare, why: Discard) {
    seg.count_discard(why);
    share.count_discard(why);
}

impl Run {
    fn spawn(self, bell: Bell) -> Servant {
        let (id, qp, pd, signals) = (
            self.id,
            self.qp.clone(),
            self.push.pd.clone(),
            self.signals.clone(),
        );
        let octets = self.seg.geometry().len() as u64;
        let task = tokio::spawn(self.run(bell));
        Servant {
            id,
            qp,
            pd,
            signals,
            octets,
            task: Some(task),
        }
    }

    async fn run(mut self, bell: Bell) -> Option<Frozen> {
        let bell = match bell {
            Bell::Async(b) => b,
            Bell::Raw(raw) => match raw.into_async() {
                Ok(b) => b,
                Err(e) => {
                    limited!(CLIENT_OTHER, warn, error = %e, "doorbell not pollable");
                    self.qp.disconnect();
                    return None;
                }
            },
        };
        let qp = self.qp.clone();
        let closed = qp.closed();
        tokio::pin!(closed);
        let mut spins = 0u32;
        let mut last_moved = std::time::Instant::now();
        let yielder = Yielder::new();
        loop {
            if self
                .signals
                .freeze
                .load(std::sync::atomic::Ordering::Acquire)
            {
                self.signals
                    .freeze
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                return Some(Frozen { run: self, bell });
            }
            let mut moved = false;
            if !self.stopping && !self.broken {
                // The push region first (seed 000: before the send queue), so that a
                // pushed message meets its twin still at the head.
                match self.push_pass().and_then(|m| Ok(m | self.take_work()?)) {
                    Ok(m) => moved |= m,
                    Err(why) => {
                        limited!(RING_GARBAGE, warn, qp = %self.qp.num(), why, "local client wrote garbage into its rings; closing its queue pair");
                        self.broken = true;
                        self.qp.disconnect();
                    }
                }
            }
            moved |= self.collect();
            if self.deliver() {
                moved = true;
            }
            if moved {
                last_moved = std::time::Instant::now();
                spins += 1;
                if spins.is_multiple_of(64) {
                    tokio::task::yield_now().await;
                }
                continue;
            }
            if self.stopping && self.end.is_some() && self.backlog.is_empty() {
                return None;
            }
            if last_moved.elapsed() < SPIN {
                yielder.turn();
                tokio::task::yield_now().await;
                continue;
            }
            yielder.release();
            self.seg.park(Side::Daemon);
            if (!self.stopping
                && !self.broken
                && (self.work_waiting() || self.push.pd.region.any_ready_for(self.id)))
                || !self.cq.is_empty()
                || self
                    .signals
                    .freeze
                    .load(std::sync::atomic::Ordering::Acquire)
            {
                self.seg.unpark(Side::Daemon);
                continue;
            }
            let mut popped = None;
            tokio::select! {
                _ = bell.wait() => {}
                how = &mut closed, if self.end.is_none() => {
                    self.end = Some(how);
                    if let Some(f) = self.ended.take() {
                        // Completions flushed by the end go out before the event.
                        self.collect();
                        self.deliver();
                        f(self.why_ended(how));
                    }
                }
                _ = self.signals.stop.notified(), if !self.stopping => self.stopping = true,
                _ = self.signals.wake.notified() => {}
                wc = std::future::poll_fn(|cx| self.cq.poll_next(cx)) => popped = Some(wc),
                _ = tokio::time::sleep(Duration::from_millis(1)), if !self.backlog.is_empty() => {}
            }
            self.seg.unpark(Side::Daemon);
            match popped {
                Some(Ok(w)) => self.finish(w.wc),
                Some(Err(_)) => self.overrun(),
                None => {}
            }
        }
    }

    /// How the client is told its queue pair ended: the connection's end, unless the
    /// daemon ended it for what the client did.
    fn why_ended(&self, how: QpEnd) -> QpEnd {
        if self.overran {
            QpEnd::CqOverrun
        } else if self.broken || self.recvs.garbage().is_some() {
            QpEnd::Misused
        } else {
            how
        }
    }

    /// Holds a completion for the client's ring, or ends the queue pair if the client
    /// has let more pile up than its requests can make (see [`backlog_cap`]).
    fn hold(&mut self, e: [u8; CQE_SIZE]) {
        if self.backlog.len() < self.backlog_cap {
            self.backlog.push_back(e);
            return;
        }
        if !self.overran {
            self.overran = true;
            limited!(CLIENT_OTHER, warn, qp = %self.qp.num(), held = self.backlog.len(),
                "local client does not take its completions; its queue pair is terminated");
            self.qp.terminate(rdmap::TermCode::RDMAP_LOCAL_CATASTROPHIC);
        }
    }

    fn work_waiting(&self) -> bool {
        self.seg
            .sq_pending()
            .map_or(true, |n| n > 0 && self.sq_room > 0)
    }

    /// Takes what the client posted into the engine. `Err` names the garbage found.
    ///
    /// The send queue's index is read first (Acquire): every receive the client posted
    /// before those sends is then visible, and goes into the engine before them, since
    /// the peer's answer to a Send may need it.
    fn take_work(&mut self) -> Result<bool, &'static str> {
        let n = self.seg.sq_pending().map_err(|_| "send queue index")?;
        let mut moved = self.take_recvs()?;
        let take = (n as usize).min(self.sq_room);
        if take > 0 {
            let mut batch = std::mem::take(&mut self.batch);
            let seg = &self.seg;
            for _ in 0..take {
                let (_, e) = seg.sq_peek();
                let arena = &mut self.arena;
                let wr = decode_sqe(&e, &mut |d| own(arena, seg, d)).map_err(|m| m.0)?;
                // A pushed twin that reaches the send queue path: its push was discarded.
                let via = if sqe_pushed(&e) {
                    Via::QueueAfterDiscard
                } else {
                    Via::Queue
                };
                batch.push(self.ids.send(wr, via));
                seg.sq_take();
            }
            self.executed(0, take as u64);
            self.sq_room -= take;
            self.post_sends(batch.drain(..));
            self.batch = batch;
            moved = true;
        }
        Ok(moved)
    }

    /// Takes the receives the client posted into the engine.
    fn take_recvs(&mut self) -> Result<bool, &'static str> {
        let mut moved = false;
        while self.rq_room > 0 {
            let Some(wr) = self.recvs.pop()? else {
                break;
            };
            let wr = self.ids.recv(wr);
            let id = wr.wr_id;
            self.rq_room -= 1;
            if let Err(e) = self.qp.post_recv(wr) {
                tracing::debug!(error = %e, "receive not posted");
                self.fail(id, Queue::Recv);
            }
            moved = true;
        }
        Ok(moved)
    }

    /// Posts requests whose daemon ids are consecutive (as [`Ids`] hands them out); those
    /// the engine refuses complete as flushed.
    fn post_sends(&mut self, batch: impl ExactSizeIterator<Item = SendWr>) {
        let (first, n) = (self.ids.next - batch.len() as u64, batch.len());
        // A lone request goes through `post_send`, which writes a small one to the socket
        // on this thread when the connection is idle (no hop to the connection's driver).
        let posted = if n == 1 {
            let mut batch = batch;
            match batch.next() {
                Some(wr) => self.qp.post_send(wr).map_err(|e| (0, e)),
                None => Ok(()),
            }
        } else {
            self.qp.post_send_batch(batch)
        };
        if let Err((queued, e)) = posted {
            tracing::debug!(error = %e, "send requests not posted");
            for id in first + queued as u64..first + n as u64 {
                self.fail(id, Queue::Send);
            }
        }
    }

    /// A request the engine refused completes as flushed.
    fn fail(&mut self, id: u64, queue: Queue) {
        let opcode = match queue {
            Queue::Send => rdmap::WcOpcode::Send,
            Queue::Recv => rdmap::WcOpcode::Recv,
        };
        let wc = Completion::new(id, queue, opcode, WcStatus::Flushed);
        self.finish(wc);
    }

    fn finish(&mut self, mut wc: Completion) {
        if wc.wr_id & (SRQ_ID | RQ_ID) != 0 {
            // A receive the engine took on demand: never in its receive queue.
            if let Some(client) = self.recvs.complete(wc.wr_id) {
                wc.wr_id = client;
                self.hold(encode_cqe(&wc));
            }
            return;
        }
        match wc.queue {
            Queue::Send => {
                self.sq_room += 1;
                self.seg.sq_retire(1);
            }
            Queue::Recv => self.rq_room += 1,
        }
        let (wc, via) = self.ids.complete(wc);
        if via == Some(Via::Push) {
            self.push.share.untrack();
        }
        if let Some(wc) = wc {
            self.hold(encode_cqe(&wc));
        }
    }

    /// Seed 000's engine side: every READY slot of this queue pair is executed if all
    /// admission checks pass, else discarded (its twin entry then runs from the send
    /// queue, its completion flagged). Slots that name a queue pair outside the domain
    /// are discarded by whichever servant of the domain sees them. True if anything was
    /// done; `Err` names garbage found in the receive ring.
    fn push_pass(&mut self) -> Result<bool, &'static str> {
        let region = &self.push.pd.region;
        if !region.any_ready() {
            return Ok(false);
        }
        let mut mine = std::mem::take(&mut self.snapshots);
        let mut foreign = false;
        let (id, pd) = (self.id, &self.push.pd);
        region.ready(
            |qp| qp == id || !pd.has_qp(qp),
            |s| {
                if s.qp == id {
                    mine.push(s);
                } else {
                    // D6: a slot naming a queue pair outside the domain.
                    region.free(s.slot, s.state);
                    discard(&self.seg, &self.push.share, Discard::Security);
                    foreign = true;
                }
            },
        );
        // The receives posted before these messages' twins go in first (see take_work).
        if !mine.is_empty() {
            self.take_recvs()?;
        }
        // Oldest twin first: the one at the head can go, the rest then follow in order.
        let head = self.seg.sq_head();
        mine.sort_by_key(|s| s.sq_index.wrapping_sub(head));
        let now = std::time::Instant::now();
        let moved = !mine.is_empty() || foreign;
        for s in mine.drain(..) {
            let admitted = self.admit(&s, now);
            self.push.pd.region.free(s.slot, s.state);
            match admitted {
                Ok(wr) => {
                    self.seg.sq_take();
                    self.sq_room -= 1;
                    self.executed(1, 0);
                    let wr = self.ids.send(wr, Via::Push);
                    self.post_sends(std::iter::once(wr));
                }
                Err(why) => discard(&self.seg, &self.push.share, why),
            }
        }
        self.snapshots = mine;
        Ok(moved)
    }

    /// Counts requests executed, in the queue pair's segment and the device's totals.
    fn executed(&self, pushed: u64, sq_path: u64) {
        self.seg.count_executed(pushed, sq_path);
        self.push.share.count_executed(pushed, sq_path);
    }

    /// The admission checks of a pushed message, in the seed's order; the request to
    /// execute, or why the message is discarded.
    fn admit(&mut self, s: &Snapshot, now: std::time::Instant) -> Result<SendWr, Discard> {
        // Only a whole request with its payload inline may be pushed.
        let arena = &mut self.arena;
        let wr = decode_sqe(&s.entry, &mut |d| match d {
            Data::Inline(_) => own(arena, &self.seg, d),
            Data::Staged { .. } => None,
        })
        .map_err(|_| Discard::Malformed)?;
        let octets = pushed_octets(&wr).ok_or(Discard::Malformed)?;
        // D3: its twin is the next entry of the send queue, and nothing of this queue
        // pair is part-way through transmission.
        let twin_waiting = self.seg.sq_pending().is_ok_and(|n| n > 0);
        if s.sq_index != self.seg.sq_head() || !twin_waiting || self.sq_room < self.sq_depth {
            return Err(Discard::NotAtHead);
        }
        let (_, twin) = self.seg.sq_peek();
        if !sqe_pushed(&twin) {
            return Err(Discard::Malformed);
        }
        // D4: the connection is not back-pressured.
        if self.qp.tx_backlog() {
            return Err(Discard::FlowControl);
        }
        self.push.share.admit(octets, now)?;
        Ok(wr)
    }

    /// Moves the engine's completions into the backlog; true if any.
    fn collect(&mut self) -> bool {
        let mut got = std::mem::take(&mut self.completed);
        if self.cq.poll_with(usize::MAX, |w| got.push(w.wc)).is_err() {
            self.overrun();
        }
        let any = !got.is_empty();
        for wc in got.drain(..) {
            self.finish(wc);
        }
        self.completed = got;
        any
    }

    /// Cannot happen (the queue holds every request the servant let in); if it did,
    /// completions were lost: end the queue pair rather than hang the client.
    fn overrun(&self) {
        tracing::error!(qp = %self.qp.num(), "servant completion queue overrun");
        self.qp.disconnect();
    }

    /// Pushes the backlog into the client's ring and rings it if it sleeps; true if
    /// anything went in.
    fn deliver(&mut self) -> bool {
        let mut pushed = false;
        while let Some(e) = self.backlog.front() {
            if !self.seg.cq_push(e) {
                break;
            }
            self.backlog.pop_front();
            pushed = true;
        }
        if pushed && self.seg.must_wake(Side::Client) {
            self.to_client.ring();
        }
        pushed
    }
}

#[cfg(test)]
mod tests {
    use super::{ARENA, BytesMut, Data, QpSegment, Yielder, own};

    /// A staged payload's length is the client's claim: one beyond the staging area is
    /// refused before anything is allocated (it was reserved and zero-filled first: three
    /// entries claiming 4 GiB took iwarpd to 3.1 GB).
    #[test]
    fn a_staged_claim_is_checked_before_it_is_allocated() {
        let seg = QpSegment::create(ipc::qpseg::Geometry::default()).unwrap();
        let staging = seg.geometry().staging;
        let mut arena = BytesMut::new();
        for (offset, len) in [(0, 64 << 20), (0, u32::MAX), (staging, 1), (u32::MAX, 2)] {
            assert!(own(&mut arena, &seg, Data::Staged { offset, len }).is_none());
            assert_eq!(arena.capacity(), 0, "nothing allocated for {offset}+{len}");
        }
        let got = own(
            &mut arena,
            &seg,
            Data::Staged {
                offset: 0,
                len: staging,
            },
        );
        assert_eq!(
            got.map(|b| b.len()),
            Some(staging as usize),
            "the whole area fits"
        );
        assert!(arena.capacity() <= (staging as usize).max(ARENA));
    }

    /// However many servants spin on a thread, one of them yields it per turn; when that
    /// one parks or ends, the next to spin takes the duty.
    #[test]
    fn one_spinning_servant_per_thread_yields_it() {
        let (a, b) = (Yielder::new(), Yielder::new());
        assert!(a.turn(), "the first to spin takes the duty");
        assert!(!b.turn() && !b.turn(), "the second only spins");
        assert!(a.turn());
        a.release();
        assert!(b.turn(), "a parked: b takes the duty");
        assert!(!a.turn(), "a spins again: b keeps it");
        drop(b);
        assert!(a.turn(), "b ended: a takes it");
        // Another thread has its own.
        let c = std::thread::spawn(|| Yielder::new().turn()).join().unwrap();
        assert!(c);
    }
}
