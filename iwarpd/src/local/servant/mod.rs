//! The servant of one client queue pair: moves the send requests the client writes into
//! its ring (or pushes, seed 000) onto the connection. Completions do not come back
//! through it: the connection writes them into the client's completion ring itself
//! ([`ClientRing`], its completion sink), and takes receives from the client's rings when
//! a message needs one ([`QpRecvs`]). Nothing of the engine's (no completion queue, no
//! futures, no id of the daemon's) stands between the client and its connection.
//!
//! Every entry is copied out of shared memory and decoded before use; an entry that does
//! not decode, or a ring index more than a ring ahead, ends this queue pair alone (a
//! graceful close the peer sees), never the daemon.
//!
//! The servant's concerns, one file each: its task's turns (`task.rs`: spinning, then
//! parking on its doorbell), reading what the client posted (`intake.rs`: its send ring
//! and its domain's push region), posting on the connection (`posting.rs`), and the
//! completion ring as the connection's sink (`completions.rs`).

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
use rdmap::{QpEnd, SendWr};
use tokio::sync::Notify;

use super::recvs::QpRecvs;
use completions::{ClientRing, backlog_cap};
use offload_engine::push::{PdPush, PushShare};
use offload_engine::{Completions, Qp};

/// The push path's share of a servant: its domain's region, and the resources every
/// pushed message draws on.
pub(super) struct Push {
    pub(super) pd: Arc<PdPush>,
    pub(super) share: Arc<PushShare>,
}

/// Tells the client that its queue pair ended (called once).
pub(super) type OnEnd = Box<dyn FnOnce(QpEnd) + Send + Sync>;

/// A servant about to start: its completion sink exists before the connection does,
/// which delivers to it from its first step.
pub(super) struct Prepared {
    ring: Arc<ClientRing>,
    recvs: Arc<QpRecvs>,
    seg: Arc<QpSegment>,
}

/// What a servant holds that is not in shared memory, for a successor daemon: how many
/// send requests are in the connection (and how many of them from pushed messages), and
/// the completions not yet in the client's ring.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct ServantImage {
    sends: u32,
    pushed: u32,
    /// Completion entries back to back.
    backlog: Vec<u8>,
}

impl Prepared {
    /// The servant of a new queue pair with segment `seg`, whose client's doorbell is
    /// `to_client`.
    pub(super) fn new(
        seg: Arc<QpSegment>,
        to_client: Doorbell,
        recvs: Arc<QpRecvs>,
        share: Arc<PushShare>,
    ) -> Self {
        let image = ServantImage {
            sends: 0,
            pushed: 0,
            backlog: Vec::new(),
        };
        Self::restore(seg, to_client, recvs, share, image).expect("an empty image fits")
    }

    /// A servant a daemon before this one ran, from its image.
    pub(super) fn restore(
        seg: Arc<QpSegment>,
        to_client: Doorbell,
        recvs: Arc<QpRecvs>,
        share: Arc<PushShare>,
        image: ServantImage,
    ) -> Result<Self, String> {
        let geo = seg.geometry();
        let cap = backlog_cap(&geo, recvs.srq().map(|q| q.depth()));
        if image.sends > geo.sq_depth
            || image.pushed > image.sends
            || !image.backlog.len().is_multiple_of(CQE_SIZE)
            || image.backlog.len() / CQE_SIZE > cap
        {
            return Err("a queue pair's servant image does not fit its rings".into());
        }
        let backlog: VecDeque<[u8; CQE_SIZE]> = image
            .backlog
            .chunks_exact(CQE_SIZE)
            .map(|c| c.try_into().expect("exact chunks"))
            .collect();
        let counts = (image.sends as usize, image.pushed as usize, backlog);
        let ring = ClientRing::new(seg.clone(), to_client, share, counts, cap);
        Ok(Self {
            ring: Arc::new(ring),
            recvs,
            seg,
        })
    }

    /// Where the connection's completions go: the client's ring.
    pub(super) fn completions(&self) -> Completions {
        Completions::Sink(self.ring.clone())
    }

    /// Starts it for `qp`, the client's queue pair `id`, woken by `to_daemon`.
    pub(super) fn start(
        self,
        id: u32,
        qp: Qp,
        to_daemon: Doorbell,
        push: Push,
        ended: OnEnd,
    ) -> Servant {
        push.pd.add_qp(id);
        let run = Run {
            id,
            push,
            sq_depth: self.seg.geometry().sq_depth as usize,
            qp,
            ring: self.ring,
            recvs: self.recvs,
            seg: self.seg,
            signals: Arc::default(),
            ended: Some(ended),
            end: None,
            stopping: false,
            broken: false,
            overran: false,
            batch: Vec::new(),
            snapshots: Vec::new(),
            arena: BytesMut::new(),
            twin_seen: None,
            pushed_seen: 0,
        };
        run.spawn(Bell::Raw(to_daemon))
    }
}

/// A running servant, as the session holds it.
pub(super) struct Servant {
    /// The client's id of the queue pair (what its push slots name).
    id: u32,
    pub(super) qp: Qp,
    /// The queue pair's segment (its transmit share, when the socket is shared).
    pub(super) seg: Arc<QpSegment>,
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
        if r.overran || r.ring.overran() {
            return Some(format!(
                "its queue pair {} does not take its completions",
                r.id
            ));
        }
        if r.broken || r.recvs.garbage().is_some() {
            return Some(format!(
                "its queue pair {} wrote garbage into its rings",
                r.id
            ));
        }
        None
    }

    /// Its image, once its queue pair is parked (the connection delivered everything it
    /// made until then).
    pub(super) fn image(&self) -> ServantImage {
        let (sends, pushed, backlog) = self.run.ring.image();
        ServantImage {
            sends: sends as u32,
            pushed: pushed as u32,
            backlog,
        }
    }

    /// The descriptors that go with the image: its segment and its two doorbells.
    pub(super) fn files(&self) -> std::io::Result<[std::os::fd::OwnedFd; 3]> {
        use std::os::fd::AsFd;
        Ok([
            self.run.seg.fd().try_clone_to_owned()?,
            self.bell.as_fd().try_clone_to_owned()?,
            self.run.ring.to_client().as_fd().try_clone_to_owned()?,
        ])
    }

    /// Runs on where it stopped.
    pub(super) fn resume(self) -> Servant {
        self.run.spawn(Bell::Async(self.bell))
    }

    /// Its queue pair runs in another daemon now: what it held here is let go.
    pub(super) fn moved_away(self) {
        let r = self.run;
        r.ring.moved_away();
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
    /// The client's receive ring and shared receive queue (the connection reads them).
    recvs: Arc<QpRecvs>,
    qp: Qp,
    /// The connection's completion sink.
    ring: Arc<ClientRing>,
    seg: Arc<QpSegment>,
    signals: Arc<Signals>,
    /// Tells the client its queue pair ended; taken when it does.
    ended: Option<OnEnd>,
    /// How its queue pair ended, once it did.
    end: Option<QpEnd>,
    /// Its queue pair is being destroyed.
    stopping: bool,
    /// The client wrote garbage into its rings.
    broken: bool,
    /// The client let more completions pile up than its requests can make: the queue
    /// pair was terminated for it.
    overran: bool,
    /// Buffers kept from turn to turn, so that moving requests allocates nothing.
    batch: Vec<SendWr>,
    snapshots: Vec<Snapshot>,
    /// Where owned payloads are copied out of shared memory (see [`own`](intake::own)).
    arena: BytesMut,
    /// The pushed twin at the head of the send queue waiting for its message, and since
    /// when (see `intake::TWIN_WAIT`).
    twin_seen: Option<(u32, std::time::Instant)>,
    /// The client's count of messages it wrote onto the shared socket, as last seen.
    pushed_seen: u64,
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
        let seg = self.seg.clone();
        let task = tokio::spawn(self.run(bell));
        Servant {
            id,
            qp,
            seg,
            pd,
            signals,
            octets,
            task: Some(task),
        }
    }
}
