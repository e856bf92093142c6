//! Completion queues: bounded rings of work completions, shared by many queue pairs, with
//! async waiting and solicited-event notification.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};

use futures::Stream;
use rdmap::Completion;
use smallvec::SmallVec;
use tokio::sync::Notify;

use rdmap::QpNum;

/// A work completion as the application sees it: the stream's completion plus the queue
/// pair it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wc {
    /// The queue pair that produced it.
    pub qp: QpNum,
    /// What finished, and how.
    pub wc: Completion,
}

/// Why a completion queue cannot deliver.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CqError {
    /// More completions arrived than the queue holds; completions were lost, so the queue
    /// (like a hardware CQ) is in error. Create it deeper, or poll it more often.
    Overrun {
        /// The queue's depth.
        depth: usize,
    },
}

impl std::fmt::Display for CqError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Overrun { depth } => write!(
                f,
                "completion queue overrun: more than {depth} completions were pending; \
                 create the CQ with a larger depth or poll it more often"
            ),
        }
    }
}

impl std::error::Error for CqError {}

#[derive(Debug)]
struct Ring {
    entries: VecDeque<Wc>,
    overrun: bool,
    /// Armed by `req_notify`: the next completion (or the next solicited one) wakes
    /// `notified` waiters once.
    armed: Option<bool>,
    /// Tasks waiting in `poll_next`.
    /// Tasks awaiting an entry; inline, so waking them and registering again allocates
    /// nothing.
    wakers: SmallVec<[Waker; 2]>,
    /// Producers that look for completions only now and then while nobody waits (iwarpd's
    /// client pump while the application busy-polls), told when a task starts waiting.
    feeders: SmallVec<[Weak<Notify>; 2]>,
}

impl Ring {
    /// A task starts waiting: the feeders to tell, once the lock is released.
    fn feeders(&self) -> SmallVec<[Arc<Notify>; 2]> {
        self.feeders.iter().filter_map(Weak::upgrade).collect()
    }
}

/// Tells `feeders` that a task waits (outside the queue's lock).
fn tell(feeders: SmallVec<[Arc<Notify>; 2]>) {
    for f in feeders {
        f.notify_one();
    }
}

#[derive(Debug)]
struct Inner {
    depth: usize,
    ring: Mutex<Ring>,
    /// Wakes `notified` waiters when an armed notification fires.
    event: Notify,
}

/// A completion queue. Cheap to clone; clones share the queue.
#[derive(Clone, Debug)]
pub struct Cq {
    inner: Arc<Inner>,
}

impl Cq {
    /// A queue holding at most `depth` completions.
    pub fn new(depth: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                depth: depth.max(1),
                ring: Mutex::new(Ring {
                    entries: VecDeque::with_capacity(depth.min(4096)),
                    overrun: false,
                    armed: None,
                    wakers: SmallVec::new(),
                    feeders: SmallVec::new(),
                }),
                event: Notify::new(),
            }),
        }
    }

    /// The depth it was created with.
    pub fn depth(&self) -> usize {
        self.inner.depth
    }

    /// Moves up to `max` completions into `out` without waiting; returns how many.
    pub fn poll(&self, out: &mut Vec<Wc>, max: usize) -> Result<usize, CqError> {
        let mut ring = self.lock();
        if ring.overrun {
            return Err(CqError::Overrun {
                depth: self.inner.depth,
            });
        }
        let n = max.min(ring.entries.len());
        out.extend(ring.entries.drain(..n));
        Ok(n)
    }

    /// Hands up to `max` completions to `f`, oldest first, without waiting; returns how
    /// many (for a layer above that converts them without an intermediate vector).
    pub fn poll_with(&self, max: usize, mut f: impl FnMut(Wc)) -> Result<usize, CqError> {
        let mut ring = self.lock();
        if ring.overrun {
            return Err(CqError::Overrun {
                depth: self.inner.depth,
            });
        }
        let n = max.min(ring.entries.len());
        ring.entries.drain(..n).for_each(&mut f);
        Ok(n)
    }

    /// The next completion, waiting for one.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a completion is removed only when this future returns it.
    pub async fn next(&self) -> Result<Wc, CqError> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// Polls for the next completion (the `poll_*` twin of [`next`](Self::next)).
    pub fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Result<Wc, CqError>> {
        let mut ring = self.lock();
        if ring.overrun {
            return Poll::Ready(Err(CqError::Overrun {
                depth: self.inner.depth,
            }));
        }
        match ring.entries.pop_front() {
            Some(wc) => Poll::Ready(Ok(wc)),
            None => {
                self.wait_with(ring, cx);
                Poll::Pending
            }
        }
    }

    /// Ready once a completion waits (or the queue overran), without taking it: for a
    /// caller that then takes as many as it has room for ([`poll_with`](Self::poll_with)).
    /// Pending registers `cx`'s waker, as [`poll_next`](Self::poll_next) does.
    pub fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        let ring = self.lock();
        if ring.overrun || !ring.entries.is_empty() {
            return Poll::Ready(());
        }
        self.wait_with(ring, cx);
        Poll::Pending
    }

    /// Registers `cx`'s waker on the empty queue (once per waker), and tells the feeders
    /// that someone waits (after the lock is released).
    fn wait_with(&self, mut ring: MutexGuard<'_, Ring>, cx: &Context<'_>) {
        if !ring.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            ring.wakers.push(cx.waker().clone());
        }
        let feeders = ring.feeders();
        drop(ring);
        tell(feeders);
    }

    /// The completions as a [`Stream`].
    pub fn stream(&self) -> impl Stream<Item = Result<Wc, CqError>> + '_ {
        futures::stream::unfold(self, |cq| async move { Some((cq.next().await, cq)) })
    }

    /// Arms a one-shot notification (verbs `req_notify_cq`): the next completion, or with
    /// `solicited_only` the next solicited receive completion or error, fires it.
    pub fn req_notify(&self, solicited_only: bool) {
        self.lock().armed = Some(solicited_only);
    }

    /// Tells `feeder` whenever a task starts waiting on this queue ([`poll_next`] finds it
    /// empty, or [`notified`] is called): a producer that looks for completions only now
    /// and then while nobody waits must then look at once. Held weakly; dropped feeders
    /// are forgotten.
    ///
    /// [`poll_next`]: Self::poll_next
    /// [`notified`]: Self::notified
    pub fn add_feeder(&self, feeder: &Arc<Notify>) {
        let mut ring = self.lock();
        ring.feeders.retain(|f| f.strong_count() > 0);
        ring.feeders.push(Arc::downgrade(feeder));
    }

    /// Waits for an armed notification to fire.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe; a notification that fires while nobody waits is kept for the next call.
    pub async fn notified(&self) {
        let feeders = self.lock().feeders();
        tell(feeders);
        self.inner.event.notified().await;
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// True when no completion is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds a completion (the engine's side).
    #[cfg(test)]
    pub(crate) fn push(&self, wc: Wc) {
        self.deliver(wc.qp, std::iter::once(wc.wc));
    }

    /// Adds completions of queue pair `qp`, in order, under one lock, and wakes the
    /// waiters once: the engine's completions of one step, or those an engine in another
    /// process wrote into shared memory (daemon mode, where the library moves them into the
    /// application's queue).
    pub fn deliver(&self, qp: QpNum, wcs: impl Iterator<Item = Completion>) {
        let (fire, wakers) = {
            let mut ring = self.lock();
            let (mut any, mut fire) = (false, false);
            for wc in wcs {
                any = true;
                if ring
                    .armed
                    .is_some_and(|solicited_only| !solicited_only || wc.solicited || !wc.is_ok())
                {
                    ring.armed = None;
                    fire = true;
                }
                if ring.entries.len() >= self.inner.depth {
                    if !ring.overrun {
                        tracing::warn!(depth = self.inner.depth, "completion queue overrun");
                    }
                    ring.overrun = true;
                } else {
                    ring.entries.push_back(Wc { qp, wc });
                }
            }
            if !any {
                return;
            }
            (fire, std::mem::take(&mut ring.wakers))
        };
        wakers.into_iter().for_each(Waker::wake);
        if fire {
            self.inner.event.notify_one();
        }
    }

    /// True if `other` is this queue (or a clone of it).
    pub fn same_queue(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        self.inner.ring.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmap::{Queue, WcOpcode, WcStatus};

    fn wc(id: u64, solicited: bool) -> Wc {
        let mut c = Completion::new(id, Queue::Recv, WcOpcode::Recv, WcStatus::Success);
        c.solicited = solicited;
        Wc {
            qp: QpNum(1),
            wc: c,
        }
    }

    #[tokio::test]
    async fn next_waits_for_a_push() {
        let cq = Cq::new(4);
        let cq2 = cq.clone();
        let t = tokio::spawn(async move { cq2.next().await });
        tokio::task::yield_now().await;
        cq.push(wc(7, false));
        assert_eq!(t.await.unwrap().unwrap().wc.wr_id, 7);
    }

    #[tokio::test]
    async fn ready_waits_for_a_push_and_takes_nothing() {
        let cq = Cq::new(4);
        let cq2 = cq.clone();
        let t = tokio::spawn(async move { std::future::poll_fn(|cx| cq2.poll_ready(cx)).await });
        tokio::task::yield_now().await;
        assert!(!t.is_finished(), "empty: it waits");
        cq.push(wc(7, false));
        t.await.unwrap();
        assert_eq!(cq.len(), 1, "ready leaves the completion in the queue");
    }

    #[test]
    fn overrun_is_an_error_naming_the_depth() {
        let cq = Cq::new(2);
        for i in 0..3 {
            cq.push(wc(i, false));
        }
        let err = cq.poll(&mut Vec::new(), 10).unwrap_err();
        assert_eq!(err, CqError::Overrun { depth: 2 });
        assert!(err.to_string().contains("larger depth"));
    }

    #[test]
    fn solicited_notification_fires_only_on_solicited() {
        use futures::FutureExt;
        let cq = Cq::new(8);
        cq.req_notify(true);
        cq.push(wc(1, false));
        assert!(
            cq.notified().now_or_never().is_none(),
            "unsolicited: no event"
        );
        cq.push(wc(2, true));
        assert!(
            cq.notified().now_or_never().is_some(),
            "solicited: one event"
        );
        cq.push(wc(3, true));
        assert!(
            cq.notified().now_or_never().is_none(),
            "one-shot until re-armed"
        );
        let mut out = Vec::new();
        assert_eq!(cq.poll(&mut out, 10).unwrap(), 3);
    }
}
