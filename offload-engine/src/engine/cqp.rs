//! The control queue (seed 003 §3.4, the "CQP"): memory registrations queued apart from
//! the data path and run in submission order by a task of their own, with a pending bit.
//!
//! [`Engine::register_queued`] gives the region its STag at once, marked pending in the
//! TPT, and queues the work: checking the storage and faulting its pages in (what pinning
//! is to a hardware RNIC), plus the engine's
//! [`registration_delay`](crate::EngineConfig::registration_delay). Meanwhile:
//!
//! - a work request that names a pending STag (in a gather or scatter list, as an Atomic
//!   result, as the region of a bind or fast registration, or as the target of a Local
//!   Invalidate) is **held**: it and every later request of its queue pair wait, in order,
//!   at the head of the send queue (the stream asks `LocalOps::registration_pending`,
//!   which the queue pair's view of the TPT answers), and go once the registration is
//!   done (this queue wakes the domain's queue pairs). Other queue pairs are not held;
//! - if the region is deregistered before its registration is done, the registration
//!   fails: the held requests go on and complete with a local protection error (or are
//!   flushed), as for any invalid STag;
//! - the peer's access to a pending STag is an access to an invalid STag (DDP Terminate
//!   `11 00`, nothing placed): hand the STag to the peer after
//!   [`Engine::registered`] says it is done. Stalling the peer's stream instead would
//!   make one early advertisement hold up every message behind it on that connection.
//!
//! Registrations finish in the order they were queued.

use std::sync::{Arc, Weak};
use std::time::Duration;

use rdmap::{Access, STag};
use tokio::sync::{mpsc, watch};

use super::{Engine, Inner};
use crate::tpt::{Base, PdId, TptError};
use shm::Region;

/// One queued registration.
#[derive(Debug)]
struct Op {
    pd: PdId,
    stag: STag,
    storage: Arc<Region>,
}

/// An engine's control queue: where registrations are queued, and a counter of those
/// done.
#[derive(Debug)]
pub(crate) struct ControlQueue {
    ops: mpsc::UnboundedSender<Op>,
    done: watch::Receiver<u64>,
}

impl ControlQueue {
    /// Starts the control task of `engine` on the current runtime.
    fn start(engine: Weak<Inner>, delay: Duration) -> Self {
        let (ops, rx) = mpsc::unbounded_channel();
        let (done_tx, done) = watch::channel(0);
        tokio::spawn(serve(engine, rx, done_tx, delay));
        Self { ops, done }
    }
}

async fn serve(
    engine: Weak<Inner>,
    mut ops: mpsc::UnboundedReceiver<Op>,
    done: watch::Sender<u64>,
    delay: Duration,
) {
    while let Some(op) = ops.recv().await {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        // Off the runtime's threads: a large region takes a while.
        let storage = Arc::clone(&op.storage);
        let _ = tokio::task::spawn_blocking(move || fault_in(&storage)).await;
        let Some(engine) = engine.upgrade().map(Engine::from_inner) else {
            return;
        };
        let finished = engine.tpt().finish_pending(op.stag);
        tracing::debug!(stag = %op.stag, finished, "queued registration done");
        // Held requests of the domain's queue pairs go on (or fail, if it was withdrawn).
        engine.wake_domain(op.pd);
        done.send_modify(|n| *n += 1);
    }
}

/// Touches one octet per page, so that placement into the region does not fault.
fn fault_in(storage: &Region) {
    const PAGE: usize = 4096;
    let mut octet = [0u8];
    for at in (0..storage.len()).step_by(PAGE) {
        let _ = storage.read_at(at, &mut octet);
    }
}

impl Engine {
    /// Registers `storage` as a region of `pd` through the control queue: returns its
    /// STag at once, pending, and finishes the registration in the background, in
    /// submission order (see the `cqp` module documentation). Work requests may name the
    /// STag straight away: they wait until it is done. Called outside a tokio runtime
    /// before any queued registration, it registers at once.
    pub fn register_queued(
        &self,
        pd: PdId,
        storage: Arc<Region>,
        base: Base,
        access: Access,
    ) -> Result<STag, TptError> {
        if self.cqp_cell().get().is_none() && tokio::runtime::Handle::try_current().is_err() {
            // No runtime to run the control queue on: registered at once.
            return self.tpt().register_region(pd, storage, base, access);
        }
        let stag = self
            .tpt()
            .register_pending(pd, storage.clone(), base, access)?;
        let queue = self.control_queue();
        if queue.ops.send(Op { pd, stag, storage }).is_err() {
            // The control task is gone (its runtime ended): nothing will finish it.
            let _ = self.tpt().deregister(stag);
            return Err(TptError::NoSuchStag(stag));
        }
        Ok(stag)
    }

    /// Waits until the queued registration of `stag` is over: true if the region is
    /// registered, false if it was deregistered first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn registered(&self, stag: STag) -> bool {
        if self.tpt().is_pending(stag) {
            self.wait_registered(stag).await;
        }
        self.tpt().info(stag).is_some_and(|e| e.valid)
    }

    async fn wait_registered(&self, stag: STag) {
        let mut done = self.control_queue().done.clone();
        while self.tpt().is_pending(stag) {
            if done.changed().await.is_err() {
                break;
            }
        }
    }

    /// Wakes the drivers of domain `pd`'s queue pairs: requests held on a registration
    /// of it may go on.
    pub fn wake_domain(&self, pd: PdId) {
        for qp in self.qps_of(pd) {
            qp.wake_driver();
        }
    }

    fn control_queue(&self) -> &ControlQueue {
        let delay = self.config().registration_delay;
        let inner = self.downgrade();
        self.cqp_cell()
            .get_or_init(|| ControlQueue::start(inner, delay))
    }
}
