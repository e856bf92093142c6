//! The connection manager's event channels and events: `rdma_create_event_channel`,
//! `rdma_get_cm_event`, `rdma_ack_cm_event`.
//!
//! A channel's descriptor is an eventfd in semaphore mode, as a completion channel's: each
//! event adds one; `rdma_get_cm_event` reads one (blocking, or `EAGAIN` when the program
//! made the descriptor non-blocking) and takes the oldest event.
//!
//! As in librdmacm, an identifier's events end with it (`Owner`): those not yet taken
//! when it is destroyed are never handed out, and `rdma_destroy_id` returns only once
//! every event handed out for it was acknowledged, so a program's event thread never
//! holds an event of an identifier (or of memory) another thread has freed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use libc::c_int;

use crate::cm_abi::*;
use crate::errors::{Errno, set_errno};
use crate::live::Live;
use crate::semaphore::Counted;

static CHANNELS: Live<EventChannel> = Live::new();
static EVENTS: Live<Event> = Live::new();

/// An event channel.
#[repr(C)]
pub(crate) struct EventChannel {
    ibv: rdma_event_channel,
    /// Events not yet taken, oldest first (their addresses in `EVENTS`).
    queued: Counted<usize>,
    /// Identifiers on it: it is not destroyed while any is.
    pub(crate) ids: AtomicUsize,
}

/// An event, as `rdma_get_cm_event` hands it out.
#[repr(C)]
pub(crate) struct Event {
    ibv: rdma_cm_event,
    /// The private data `ibv.param.conn.private_data` points into.
    _private: Box<[u8]>,
    /// The identifier it is counted against: its own, or the listener's for a
    /// connection request (as librdmacm counts it).
    owner: Arc<Owner>,
}

/// The events of one identifier: whether it was destroyed, and how many of its events
/// the program holds (handed out, not yet acknowledged).
#[derive(Debug, Default)]
pub(crate) struct Owner {
    state: Mutex<Owned>,
    acked: Condvar,
}

#[derive(Debug, Default)]
struct Owned {
    gone: bool,
    held: usize,
    /// A listener's connection requests queued and not yet taken by the program, and how
    /// many it may have ([`Owner::listen`]).
    requests: usize,
    backlog: usize,
}

impl Owner {
    /// How long `end` waits before it says what it waits for.
    const TELL_AFTER: Duration = Duration::from_secs(5);

    fn state(&self) -> std::sync::MutexGuard<'_, Owned> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the identifier was destroyed.
    pub(crate) fn is_gone(&self) -> bool {
        self.state().gone
    }

    /// The identifier is destroyed: no more of its events are handed out. Waits until the
    /// program has acknowledged every one it holds (librdmacm's `rdma_destroy_id` does
    /// the same, and so waits forever on a thread that destroys an identifier whose event
    /// it has not acknowledged; after a while this says so).
    pub(crate) fn end(&self) {
        let mut st = self.state();
        st.gone = true;
        let mut told = false;
        while st.held > 0 {
            let (next, waited) = self
                .acked
                .wait_timeout(st, Self::TELL_AFTER)
                .unwrap_or_else(|e| e.into_inner());
            st = next;
            if waited.timed_out() && st.held > 0 && !told {
                told = true;
                crate::errors::once(
                    "rdma_destroy_id",
                    &format!(
                        "waits for {} event(s) of the identifier to be acknowledged \
                         (rdma_ack_cm_event): acknowledge every event before destroying \
                         its identifier",
                        st.held
                    ),
                );
            }
        }
    }

    /// librdmacm's backlog when the program asks for none, or for more (the kernel's
    /// `max_backlog`, 1024 by default).
    const MAX_BACKLOG: usize = 1024;

    /// The identifier listens with `backlog` (librdmacm's argument: at most that many
    /// connection requests wait for the program to take them; 0 or less, or more than
    /// 1024, is 1024).
    pub(crate) fn listen(&self, backlog: c_int) {
        self.state().backlog = match usize::try_from(backlog) {
            Ok(n @ 1..=Self::MAX_BACKLOG) => n,
            _ => Self::MAX_BACKLOG,
        };
    }

    /// A connection request arrived at this listener: true if it may be queued, false if
    /// the backlog is full (the kernel's rdma_ucm then rejects it, and so does the
    /// library), so that a peer that connects again and again cannot make a program that
    /// does not read its events hold ever more identifiers.
    pub(crate) fn admit_request(&self) -> bool {
        let mut st = self.state();
        if st.requests >= st.backlog {
            return false;
        }
        st.requests += 1;
        true
    }

    /// An admitted request left the queue: taken by the program, or never queued.
    pub(crate) fn request_gone(&self) {
        let mut st = self.state();
        st.requests = st.requests.saturating_sub(1);
    }

    /// One of its events goes to the program, unless the identifier was destroyed.
    fn hand_out(&self) -> bool {
        let mut st = self.state();
        if st.gone {
            return false;
        }
        st.held += 1;
        true
    }

    fn acknowledged(&self) {
        let mut st = self.state();
        st.held = st.held.saturating_sub(1);
        drop(st);
        self.acked.notify_all();
    }
}

// SAFETY: the pointers in `ibv` are addresses handed to C (identifiers, and `_private`,
// which this event owns); Rust never writes through them.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

/// What an event says: its type, its status, and the connection parameters it carries.
#[derive(Debug, Default)]
pub(crate) struct What {
    pub(crate) event: c_int,
    pub(crate) status: c_int,
    pub(crate) private: Vec<u8>,
    pub(crate) ird: u8,
    pub(crate) ord: u8,
}

impl EventChannel {
    /// Queues an event for `id` (and `listen_id`, for a connection request), counted
    /// against `owner`'s identifier; dropped if that one was destroyed.
    pub(crate) fn post(
        &self,
        id: *mut rdma_cm_id,
        listen_id: *mut rdma_cm_id,
        owner: &Arc<Owner>,
        what: What,
    ) {
        if owner.is_gone() {
            return;
        }
        let private = what.private.into_boxed_slice();
        let conn = rdma_conn_param {
            private_data: if private.is_empty() {
                std::ptr::null()
            } else {
                private.as_ptr().cast()
            },
            private_data_len: private.len().min(255) as u8,
            responder_resources: what.ird,
            initiator_depth: what.ord,
            flow_control: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            srq: 0,
            qp_num: 0,
        };
        let ev = EVENTS.add(Event {
            ibv: rdma_cm_event {
                id,
                listen_id,
                event: what.event,
                status: what.status,
                param: rdma_cm_event_param { conn },
            },
            _private: private,
            owner: owner.clone(),
        });
        self.queued.push(ev as usize);
    }

    /// The C structure's address.
    pub(crate) fn ibv(&self) -> *mut rdma_event_channel {
        (&self.ibv as *const rdma_event_channel).cast_mut()
    }
}

// SAFETY: `ibv` holds only the descriptor's number.
unsafe impl Send for EventChannel {}
// SAFETY: as above.
unsafe impl Sync for EventChannel {}

/// The channel behind `ch`, if it is alive.
pub(crate) fn channel(ch: *const rdma_event_channel) -> Option<Arc<EventChannel>> {
    CHANNELS.get(ch)
}

/// `rdma_create_event_channel`. Null with `ENODEV` if the stack cannot be reached (the
/// reason is on stderr).
#[unsafe(no_mangle)]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    open().map_or(std::ptr::null_mut(), |c| c.ibv())
}

/// A new channel; none (errno set) if the stack cannot be reached. A synchronous
/// identifier (one made without a channel) gets one of its own, as librdmacm gives it.
pub(crate) fn open() -> Option<Arc<EventChannel>> {
    if crate::open::cm_context().is_none() {
        set_errno(Errno::ENODEV);
        return None;
    }
    let queued = Counted::new(usize::MAX).ok()?;
    let ptr = CHANNELS.add(EventChannel {
        ibv: rdma_event_channel { fd: queued.raw() },
        queued,
        ids: AtomicUsize::new(0),
    });
    CHANNELS.get(ptr)
}

/// Frees a synchronous identifier's own channel, with the events nobody took.
pub(crate) fn close_private(ch: &EventChannel) {
    CHANNELS.remove(ch.ibv());
    for ev in ch.queued.drain() {
        EVENTS.remove(ev as *const rdma_cm_event);
    }
}

/// `rdma_destroy_event_channel`: refused (left alone, with a message) while identifiers
/// use it, as rdma-core requires them destroyed first.
#[unsafe(no_mangle)]
pub extern "C" fn rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    if let Err(true) = CHANNELS.remove_unless(ch, |c| c.ids.load(Ordering::Relaxed) > 0) {
        crate::errors::once(
            "rdma_destroy_event_channel",
            "identifiers still use the channel: destroy them first",
        );
    }
}

/// `rdma_get_cm_event`: the oldest event, waiting for one unless the descriptor is
/// non-blocking.
///
/// # Safety
/// `event` points to the caller's pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_get_cm_event(
    ch: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    let Some(c) = CHANNELS.get(ch) else {
        return Errno::EINVAL.fail();
    };
    if event.is_null() {
        return Errno::EINVAL.fail();
    }
    loop {
        let Some(ev) = c.queued.take() else {
            return -1; // errno set: read(2)'s (EAGAIN, EINTR), or EINVAL
        };
        let e = EVENTS.get(ev as *const Event);
        if let Some(e) = e
            .as_ref()
            .filter(|e| e.ibv.event == RDMA_CM_EVENT_CONNECT_REQUEST)
        {
            // Out of the listener's backlog, as rdma_ucm counts it.
            e.owner.request_gone();
        }
        // One whose identifier was destroyed since is never handed out: take the next.
        match e {
            Some(e) if e.owner.hand_out() => {
                // SAFETY: the caller's pointer, per this function's contract.
                unsafe { *event = ev as *mut rdma_cm_event };
                return 0;
            }
            _ => drop(EVENTS.remove(ev as *const Event)),
        }
    }
}

/// `rdma_ack_cm_event`: frees the event; `EINVAL` for one not handed out (acknowledged
/// twice, or never this library's).
#[unsafe(no_mangle)]
pub extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    match EVENTS.remove(event) {
        Some(e) => {
            e.owner.acknowledged();
            0
        }
        None => Errno::EINVAL.fail(),
    }
}
