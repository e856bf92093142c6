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
//!
//! The servant's concerns, one file each: its task's turns (`task.rs`: spinning, then
//! parking on its doorbell), reading what the client posted (`intake.rs`: its send and
//! receive rings and its domain's push region), executing requests in the engine
//! (`posting.rs`: daemon ids, posting), and writing completions back into the client's
//! ring (`completions.rs`).

mod completions;
mod intake;
mod posting;
mod task;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use ipc::push::Snapshot;
use ipc::qpseg::{AsyncDoorbell, CQE_SIZE, Doorbell, Geometry, QpSegment};
use rdmap::{Completion, QpEnd, RecvWr, SendWr};
use tokio::sync::Notify;

use super::recvs::QpRecvs;
use completions::backlog_cap;
use offload_engine::push_share::{PdPush, PushShare};
use offload_engine::{Cq, Qp};
use posting::Ids;

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
        let in_flight = image.ids.in_flight();
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
        let pushed = self.ids.pushed();
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
        let pushed = r.ids.pushed();
        for _ in 0..pushed {
            r.push.share.untrack();
        }
        r.push.pd.remove_qp(r.id);
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

/// A running servant's state, which its task owns (and a [`Frozen`] servant holds).
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
    /// Where owned payloads are copied out of shared memory (see [`own`](intake::own)).
    arena: BytesMut,
}

impl Run {
    /// Starts its task, waiting on `bell`; the handle the session holds.
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
}
