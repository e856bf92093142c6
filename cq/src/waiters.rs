//! Requests whose completion goes to a future (the async methods of a queue pair): a slab of slots reused from one request to the next, so the per-request futures of the
//! async API allocate nothing once the slab has grown to the most requests in flight.
//! The engine's queue pairs use it, and so does a queue pair run by a local daemon
//! (`verbs`' daemon mode), whose completions come out of shared memory instead.
//!
//! A request's work request id names its slot: [`NOTIFY_BIT`](crate::NOTIFY_BIT), a 31-bit
//! generation (bumped each time the slot is reused, so a stale id never matches) and the
//! 32-bit slot index.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use rdmap::{Completion, WrId};

use crate::NOTIFY_BIT;

#[derive(Debug)]
enum Slot {
    Free,
    /// Posted; the future's waker once it has been polled.
    Waiting(Option<Waker>),
    /// Completed; the future has not taken it yet.
    Done(Completion),
    /// The future was dropped first: the completion is dropped when it comes.
    Abandoned,
}

#[derive(Debug, Default)]
struct Slots {
    slots: Vec<(u32, Slot)>,
    free: Vec<u32>,
}

/// The slab of one queue pair: [`register`](Self::register) a request, hand its
/// completion to [`complete`](Self::complete), await it through [`future`](Self::future).
#[derive(Debug, Default)]
pub struct Waiters {
    inner: Mutex<Slots>,
}

fn split(id: WrId) -> (usize, u32) {
    (
        (id & 0xFFFF_FFFF) as usize,
        ((id >> 32) as u32) & 0x7FFF_FFFF,
    )
}

impl Waiters {
    fn lock(&self) -> MutexGuard<'_, Slots> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a request about to be posted; its work request id.
    pub fn register(&self) -> WrId {
        let mut s = self.lock();
        let index = match s.free.pop() {
            Some(i) => i,
            None => {
                s.slots.push((0, Slot::Free));
                (s.slots.len() - 1) as u32
            }
        };
        let entry = &mut s.slots[index as usize];
        entry.0 = (entry.0 + 1) & 0x7FFF_FFFF;
        entry.1 = Slot::Waiting(None);
        NOTIFY_BIT | (u64::from(entry.0) << 32) | u64::from(index)
    }

    /// The one rule by which both backends route a completion: one of a request posted
    /// with a future (its id has [`NOTIFY_BIT`]) goes to that future, and `None` comes
    /// back; any other comes back, for a completion queue. A completion with the bit that
    /// no live request waits for (its future was dropped, or the id is stale) is dropped:
    /// it is never a completion queue's.
    pub fn route(&self, wc: Completion) -> Option<Completion> {
        if wc.wr_id & NOTIFY_BIT == 0 {
            return Some(wc);
        }
        if let Some(stale) = self.complete(wc) {
            tracing::debug!(wr_id = stale.wr_id, "completion of a forgotten request");
        }
        None
    }

    /// [`route`](Self::route) for a batch, in place: the completions of requests posted
    /// with a future leave `batch`, the rest stay in order. Moves, never copies.
    pub fn route_batch(&self, batch: &mut Vec<Completion>) {
        for wc in batch.extract_if(.., |wc| wc.wr_id & NOTIFY_BIT != 0) {
            self.route(wc);
        }
    }

    /// Hands `wc` to its future; gives it back if no live slot has its id.
    fn complete(&self, wc: Completion) -> Option<Completion> {
        let (index, generation) = split(wc.wr_id);
        let mut s = self.lock();
        let Some((g, slot)) = s.slots.get_mut(index) else {
            return Some(wc);
        };
        if *g != generation {
            return Some(wc);
        }
        match std::mem::replace(slot, Slot::Free) {
            Slot::Waiting(waker) => {
                *slot = Slot::Done(wc);
                drop(s);
                if let Some(w) = waker {
                    w.wake();
                }
                None
            }
            Slot::Abandoned => {
                s.free.push(index as u32);
                None
            }
            other => {
                *slot = other;
                Some(wc)
            }
        }
    }

    /// Releases the slot of `id`: its request was never posted, or its future is gone.
    fn release(&self, id: WrId) {
        let (index, generation) = split(id);
        let mut s = self.lock();
        let Some((g, slot)) = s.slots.get_mut(index) else {
            return;
        };
        if *g != generation {
            return;
        }
        match slot {
            Slot::Waiting(_) => *slot = Slot::Abandoned,
            Slot::Done(_) => {
                *slot = Slot::Free;
                s.free.push(index as u32);
            }
            Slot::Free | Slot::Abandoned => {}
        }
    }

    /// Forgets a slot whose request was refused (never posted).
    pub fn forget(&self, id: WrId) {
        let (index, generation) = split(id);
        let mut s = self.lock();
        if let Some((g, slot)) = s.slots.get_mut(index)
            && *g == generation
            && matches!(slot, Slot::Waiting(_))
        {
            *slot = Slot::Free;
            s.free.push(index as u32);
        }
    }

    /// The future of the request registered as `id`.
    pub fn future(self: &Arc<Self>, id: WrId) -> CompletionFuture {
        CompletionFuture {
            waiters: self.clone(),
            id,
            done: false,
        }
    }

    fn poll(&self, id: WrId, cx: &mut Context<'_>) -> Poll<Completion> {
        let (index, generation) = split(id);
        let mut s = self.lock();
        let Some((g, slot)) = s.slots.get_mut(index) else {
            return Poll::Pending;
        };
        if *g != generation {
            // The slot serves another request now.
            return Poll::Pending;
        }
        match std::mem::replace(slot, Slot::Free) {
            Slot::Done(wc) => {
                s.free.push(index as u32);
                Poll::Ready(wc)
            }
            Slot::Waiting(w) => {
                let waker = match w {
                    Some(w) if w.will_wake(cx.waker()) => w,
                    _ => cx.waker().clone(),
                };
                *slot = Slot::Waiting(Some(waker));
                Poll::Pending
            }
            other => {
                *slot = other;
                Poll::Pending
            }
        }
    }
}

/// The completion of one request registered with [`Waiters::register`] (a queue pair's
/// `post_send_notify` or `post_recv_notify`).
///
/// # Cancel safety
///
/// Dropping it does not cancel the request: it still runs, and its completion is
/// discarded.
#[derive(Debug)]
pub struct CompletionFuture {
    waiters: Arc<Waiters>,
    id: WrId,
    done: bool,
}

impl Future for CompletionFuture {
    type Output = Completion;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Completion> {
        if self.done {
            // Polled again after it returned: its slot may serve another request now.
            return Poll::Pending;
        }
        let ready = self.waiters.poll(self.id, cx);
        if ready.is_ready() {
            self.done = true;
        }
        ready
    }
}

impl Drop for CompletionFuture {
    fn drop(&mut self) {
        if !self.done {
            self.waiters.release(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmap::{Queue, WcOpcode, WcStatus};

    fn wc(id: WrId) -> Completion {
        Completion::new(id, Queue::Send, WcOpcode::Send, WcStatus::Success)
    }

    #[test]
    fn slots_are_reused_and_stale_ids_never_match() {
        let w = Waiters::default();
        let a = w.register();
        assert!(w.complete(wc(a)).is_none());
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(w.poll(a, &mut cx), Poll::Ready(c) if c.wr_id == a));
        let b = w.register();
        assert_eq!(b & 0xFFFF_FFFF, a & 0xFFFF_FFFF, "the slot is reused");
        assert_ne!(a, b, "under a new generation");
        assert!(w.complete(wc(a)).is_some(), "a stale id goes elsewhere");
        // Abandoned before completion: the completion is dropped, the slot freed.
        w.release(b);
        assert!(w.complete(wc(b)).is_none());
        let c = w.register();
        assert_eq!(c & 0xFFFF_FFFF, a & 0xFFFF_FFFF);
        w.forget(c);
        assert_eq!(w.lock().slots.len(), 1, "one slot served every request");
    }

    #[test]
    fn a_finished_future_and_a_twice_forgotten_id_touch_no_other_request() {
        let w = Arc::new(Waiters::default());
        let a = w.register();
        let mut fa = w.future(a);
        assert!(w.route(wc(a)).is_none());
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut fa).poll(&mut cx).is_ready());
        let b = w.register();
        assert_eq!(b & 0xFFFF_FFFF, a & 0xFFFF_FFFF, "the slot serves b now");
        assert!(w.route(wc(b)).is_none());
        assert!(
            Pin::new(&mut fa).poll(&mut cx).is_pending(),
            "not b's completion"
        );
        assert!(matches!(w.poll(b, &mut cx), Poll::Ready(c) if c.wr_id == b));
        // Forgetting an id twice frees its slot once.
        let c = w.register();
        w.forget(c);
        w.forget(c);
        let (d, e) = (w.register(), w.register());
        assert_ne!(
            d & 0xFFFF_FFFF,
            e & 0xFFFF_FFFF,
            "two live requests, two slots"
        );
    }

    #[test]
    fn route_gives_back_only_what_is_a_queues() {
        let w = Waiters::default();
        assert_eq!(
            w.route(wc(7)).map(|c| c.wr_id),
            Some(7),
            "an application's id"
        );
        let a = w.register();
        assert!(w.route(wc(a)).is_none(), "to its future");
        assert!(
            w.route(wc(a)).is_none(),
            "a stale id is dropped, not a queue's"
        );
        assert!(w.route(wc(NOTIFY_BIT | 0xFFFF)).is_none(), "no such slot");
    }
}
