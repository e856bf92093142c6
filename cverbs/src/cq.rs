//! Completion queues and completion channels: `ibv_create_cq`, `ibv_poll_cq` (through the
//! context's operation table), `ibv_req_notify_cq`, and the channel's file descriptor,
//! which `poll`/`epoll` wait on and `ibv_get_cq_event` reads, as rdma-core's.
//!
//! The channel's descriptor is an eventfd in semaphore mode: each armed queue that fires
//! adds one, and `ibv_get_cq_event` reads one (blocking, or `EAGAIN` if the program made
//! the descriptor non-blocking), then takes the queue that fired.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use libc::{c_int, c_void};

use crate::abi::*;
use crate::device::{Context, context};
use crate::errors::{Errno, set_errno};
use crate::live::Live;
use crate::semaphore::Counted;

static CHANNELS: Live<Channel> = Live::new();
static QUEUES: Live<Cq> = Live::new();

/// A completion channel.
#[repr(C)]
pub(crate) struct Channel {
    ibv: ibv_comp_channel,
    /// The queues that fired, in order, not yet taken by `ibv_get_cq_event`.
    fired: Counted<usize>,
    /// Queues using it: it is not destroyed while any is.
    users: AtomicUsize,
    _ctx: Arc<Context>,
}

// SAFETY: `ibv.context` is the address of the context this channel holds alive; Rust never
// writes through it.
unsafe impl Send for Channel {}
// SAFETY: as above.
unsafe impl Sync for Channel {}

impl Channel {
    /// `cq` fired: queued for `ibv_get_cq_event`, and the descriptor becomes readable.
    fn fire(&self, cq: usize) {
        self.fired.push(cq);
    }
}

/// A completion queue.
#[repr(C)]
pub(crate) struct Cq {
    ibv: ibv_cq,
    pub(crate) cq: verbs::Cq,
    channel: Option<Arc<Channel>>,
    /// A task waits for the armed notification.
    waiting: AtomicBool,
    /// That task, ended when the queue is destroyed.
    waiter: Mutex<Option<tokio::task::AbortHandle>>,
    /// Events handed out by `ibv_get_cq_event` and acknowledged, under `acked`'s lock.
    handed: AtomicU32,
    acked: Mutex<u32>,
    all_acked: Condvar,
    /// Queue pairs using it: it is not destroyed while any is.
    pub(crate) users: AtomicUsize,
    /// The connections of those queue pairs, once up: a poll that finds the queue empty
    /// runs them on the polling thread (reads their sockets, as iwperf does and as an
    /// adapter serves a spinning consumer, and writes what their send queues hold),
    /// rather than waiting for the engine's thread, which would be one more busy thread
    /// beside the program's spinning one.
    pub(crate) inputs: Mutex<Vec<verbs::Qp>>,
    _ctx: Arc<Context>,
}

// SAFETY: the pointers in `ibv` are addresses handed to C (the context and channel this
// queue holds alive, and the program's `cq_context`, never dereferenced here); Rust never
// writes through them, and never touches the pthread fields, which are C's.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

/// The queue behind `cq`, if it is alive.
pub(crate) fn queue(cq: *const c_void) -> Result<Arc<Cq>, Errno> {
    QUEUES.get(cq).ok_or(Errno::EINVAL)
}

/// `ibv_create_comp_channel`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    let Ok(c) = context(ctx) else {
        set_errno(Errno::EINVAL);
        return std::ptr::null_mut();
    };
    let Ok(fired) = Counted::new(usize::MAX) else {
        return std::ptr::null_mut();
    };
    CHANNELS
        .add(Channel {
            ibv: ibv_comp_channel {
                context: ctx,
                fd: fired.raw(),
                refcnt: 0,
            },
            fired,
            users: AtomicUsize::new(0),
            _ctx: c,
        })
        .cast()
}

/// `ibv_destroy_comp_channel`: 0, `EBUSY` while a queue uses it, `EINVAL` if it is not
/// alive.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    match CHANNELS.remove_unless(ch, |c| c.users.load(Ordering::Relaxed) > 0) {
        Ok(_) => 0,
        Err(true) => Errno::EBUSY.code(),
        Err(false) => Errno::EINVAL.code(),
    }
}

/// `ibv_create_cq`: a queue of at least `cqe` completions, its events on `channel` (or
/// none).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    _comp_vector: c_int,
) -> *mut ibv_cq {
    let (Ok(c), Ok(depth)) = (context(ctx), usize::try_from(cqe)) else {
        set_errno(Errno::EINVAL);
        return std::ptr::null_mut();
    };
    if depth == 0 || depth > 1 << 20 {
        set_errno(Errno::EINVAL);
        return std::ptr::null_mut();
    }
    let ch = match channel.is_null() {
        true => None,
        false => match CHANNELS.get(channel) {
            Some(ch) => Some(ch),
            None => {
                set_errno(Errno::EINVAL);
                return std::ptr::null_mut();
            }
        },
    };
    if let Some(ch) = &ch {
        ch.users.fetch_add(1, Ordering::Relaxed);
    }
    let cq = c.device.create_cq(depth);
    QUEUES
        .add(Cq {
            ibv: ibv_cq {
                context: ctx,
                channel,
                cq_context,
                handle: 0,
                cqe,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                comp_events_completed: 0,
                async_events_completed: 0,
            },
            cq,
            channel: ch,
            waiting: AtomicBool::new(false),
            waiter: Mutex::new(None),
            handed: AtomicU32::new(0),
            acked: Mutex::new(0),
            all_acked: Condvar::new(),
            users: AtomicUsize::new(0),
            inputs: Mutex::default(),
            _ctx: c,
        })
        .cast()
}

/// `ibv_destroy_cq`: 0 once every event `ibv_get_cq_event` returned for it is
/// acknowledged (it waits for that, as rdma-core's does); `EBUSY` while a queue pair uses
/// it, `EINVAL` if it is not alive.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    let Ok(q) = queue(cq.cast()) else {
        return Errno::EINVAL.code();
    };
    // Every event handed out is acknowledged first (by another thread, if need be).
    let handed = q.handed.load(Ordering::Acquire);
    let acked = q.acked.lock().unwrap_or_else(|e| e.into_inner());
    drop(
        q.all_acked
            .wait_while(acked, |a| *a < handed)
            .unwrap_or_else(|e| e.into_inner()),
    );
    match QUEUES.remove_unless(cq, |q| q.users.load(Ordering::Relaxed) > 0) {
        Ok(q) => {
            // Its armed notification will not fire any more, and its channel is free.
            if let Some(w) = q.waiter.lock().unwrap_or_else(|e| e.into_inner()).take() {
                w.abort();
            }
            if let Some(ch) = &q.channel {
                ch.users.fetch_sub(1, Ordering::Relaxed);
            }
            0
        }
        Err(true) => Errno::EBUSY.code(),
        Err(false) => Errno::EINVAL.code(),
    }
}

/// The context's `poll_cq`: up to `n` completions into the program's `wc` array; how
/// many, or -1 if the queue overran (it is then in error, as a hardware queue).
///
/// # Safety
/// `wc` has room for `n` entries.
pub(crate) unsafe extern "C" fn poll_cq(cq: *mut c_void, n: c_int, wc: *mut c_void) -> c_int {
    let (Ok(q), Ok(n)) = (queue(cq), usize::try_from(n)) else {
        return -libc::EINVAL;
    };
    if wc.is_null() {
        return -libc::EINVAL;
    }
    let wc = wc.cast::<ibv_wc>();
    let mut i = 0;
    let mut take = |w: verbs::Wc| {
        // SAFETY: `i < n` (poll_with hands at most `n`), within the caller's array of `n`.
        unsafe { wc.add(i).write(crate::wc::to_ibv(&w)) };
        i += 1;
    };
    let mut polled = q.cq.poll_with(n, &mut take);
    if matches!(polled, Ok(0)) {
        let arrived = q
            .inputs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .fold(false, |got, qp| qp.poll_io() | got);
        if arrived {
            polled = q.cq.poll_with(n, &mut take);
        }
    }
    if matches!(polled, Ok(0))
        && let Some(most) = idle()
        && wait_until_ready(|cx| q.cq.poll_ready(cx), most)
    {
        polled = q.cq.poll_with(n, &mut take);
    }
    if !matches!(polled, Ok(0)) {
        busy();
    }
    match polled {
        Ok(k) => k as c_int,
        Err(e) => {
            crate::errors::once("ibv_poll_cq", &e.to_string());
            -1
        }
    }
}

/// How long a thread may spin on empty polls before each further empty poll offers the
/// processor (sched_yield), as iwperf's waits do: perftest spins on `ibv_poll_cq`, and
/// on a machine with few processors that spin took them from the engine's own thread,
/// which is what would fill the queue.
const SPIN: Duration = Duration::from_micros(20);
/// After this long of empty polls, each further empty poll sleeps until the queue gets a
/// completion, for at most [`nap`]: a thread that has waited that long waits for
/// something that takes a while (the next of perftest's `-Q 100` completions in a
/// bandwidth run, its server's control message at the end of one), and a yield does not
/// keep it off the processors that do the work. Shorter than the round trips the
/// latency tests measure, so a spinning latency test never sleeps.
const WAIT_AFTER: Duration = Duration::from_micros(200);
/// The shortest and the longest sleep.
const NAP: Duration = Duration::from_micros(50);
const NAP_MAX: Duration = Duration::from_millis(1);

/// How long an empty poll sleeps at most after `idle` of empty polls: a twentieth of it,
/// from [`NAP`] to [`NAP_MAX`]. A completion on the queue ends the sleep at once; the
/// bound is for what else the program may wait for (another queue, a socket), which is
/// seen up to a twentieth of the wait later (at most 1 ms, plus the kernel's timer
/// slack). A sleep that ends costs a wake-up (25 to 30 us of processor time on this
/// project's VMs), so fixed 50 us naps kept perftest's idle server thread at 60% of a
/// processor for a whole run, taken from the threads that move the data; growing ones
/// took `ib_write_bw -s 65536` from 37.6 to 44.5 Gbit/s (BENCHMARKS.md).
fn nap(idle: Duration) -> Duration {
    (idle / 20).clamp(NAP, NAP_MAX)
}

thread_local! {
    /// Since when this thread's polls have found nothing (`None`: its last poll took
    /// something).
    static EMPTY_SINCE: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
    /// Wakes this thread from [`wait_until_ready`]'s sleep.
    static UNPARK: std::task::Waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
}

/// A poll on this thread took something: it is not idle.
fn busy() {
    EMPTY_SINCE.with(|since| since.set(None));
}

/// A poll on this thread found nothing: after [`SPIN`] of empty polls it yields the
/// processor here, and after [`WAIT_AFTER`] it says how long to sleep at most.
fn idle() -> Option<Duration> {
    EMPTY_SINCE.with(|since| match since.get().map(|t| t.elapsed()) {
        None => {
            since.set(Some(Instant::now()));
            None
        }
        Some(idle) if idle >= WAIT_AFTER => Some(nap(idle)),
        Some(idle) if idle >= SPIN => {
            std::thread::yield_now();
            None
        }
        Some(_) => None,
    })
}

/// Sleeps until `ready` (a completion queue's `poll_ready`) is ready, for at most `most`:
/// true if it is. The queue wakes the thread itself (its waker unparks it), so the caller
/// takes the completions without a trip through the runtime.
fn wait_until_ready(
    mut ready: impl FnMut(&mut std::task::Context<'_>) -> std::task::Poll<()>,
    most: Duration,
) -> bool {
    UNPARK.with(|waker| {
        let mut cx = std::task::Context::from_waker(waker);
        let until = Instant::now() + most;
        loop {
            if ready(&mut cx).is_ready() {
                return true;
            }
            let now = Instant::now();
            if now >= until {
                return false;
            }
            // A spurious return, or an unpark left from an earlier sleep, only polls again.
            std::thread::park_timeout(until - now);
        }
    })
}

/// Unparks the thread that polls (see [`wait_until_ready`]).
struct Unpark(std::thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// The context's `req_notify_cq`: arms the queue; when it fires, its channel's descriptor
/// becomes readable.
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut c_void, solicited_only: c_int) -> c_int {
    let Ok(q) = queue(cq) else {
        return libc::EINVAL;
    };
    q.cq.req_notify(solicited_only != 0);
    if q.channel.is_some() && !q.waiting.swap(true, Ordering::AcqRel) {
        let (key, fires) = (cq as usize, q.clone());
        let task = crate::rt::runtime().spawn(async move {
            fires.cq.notified().await;
            fires.waiting.store(false, Ordering::Release);
            if let Some(ch) = &fires.channel {
                ch.fire(key);
            }
        });
        *q.waiter.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.abort_handle());
    }
    0
}

/// `ibv_get_cq_event`: waits for an event on `channel` (unless its descriptor is
/// non-blocking: then -1 and `EAGAIN`), and says which queue fired.
///
/// # Safety
/// `cq` and `cq_context` point to the caller's pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    let Some(ch) = CHANNELS.get(channel) else {
        return Errno::EINVAL.fail();
    };
    if cq.is_null() || cq_context.is_null() {
        return Errno::EINVAL.fail();
    }
    loop {
        let Some(fired) = ch.fired.take() else {
            return -1; // errno set: read(2)'s (EAGAIN, EINTR), or EINVAL
        };
        // A queue destroyed after it fired is skipped.
        let Some(q) = QUEUES.get(fired as *const c_void) else {
            continue;
        };
        q.handed.fetch_add(1, Ordering::AcqRel);
        // SAFETY: the caller's pointers, per this function's contract.
        unsafe {
            *cq = fired as *mut ibv_cq;
            *cq_context = q.ibv.cq_context;
        }
        return 0;
    }
}

/// `ibv_ack_cq_events`: acknowledges `nevents` events of `cq`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: u32) {
    if let Ok(q) = queue(cq.cast()) {
        let mut acked = q.acked.lock().unwrap_or_else(|e| e.into_inner());
        *acked = acked.wrapping_add(nevents);
        q.all_acked.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_poller_sleeps_until_a_completion_comes() {
        let cq = cq::Cq::new(4);
        assert!(
            idle().is_none(),
            "the first empty poll starts the idle time"
        );
        std::thread::sleep(WAIT_AFTER);
        let most = idle().expect("idle past WAIT_AFTER: it sleeps");
        assert_eq!(most, NAP);
        // Nothing comes: the sleep ends at its bound.
        let start = Instant::now();
        assert!(!wait_until_ready(|cx| cq.poll_ready(cx), most));
        assert!(start.elapsed() >= most);
        // A completion that comes ends it at once, and stays for the caller to take.
        let feeder = cq.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            let wc = rdmap::Completion::new(
                7,
                rdmap::Queue::Send,
                rdmap::WcOpcode::Write,
                rdmap::WcStatus::Success,
            );
            feeder.deliver(rdmap::QpNum(1), std::iter::once(wc));
        });
        let start = Instant::now();
        assert!(wait_until_ready(
            |cx| cq.poll_ready(cx),
            Duration::from_secs(30)
        ));
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "woken by the completion, not by the bound"
        );
        assert_eq!(cq.len(), 1);
        t.join().unwrap();
        // Sleeps grow with the idle time, up to a limit.
        assert_eq!(nap(WAIT_AFTER), NAP);
        assert_eq!(nap(Duration::from_millis(10)), Duration::from_micros(500));
        assert_eq!(nap(Duration::from_secs(60)), NAP_MAX);
        // A completion ends the idle time: the next empty poll starts it again.
        busy();
        assert!(idle().is_none());
        let since = EMPTY_SINCE.with(std::cell::Cell::get);
        assert!(since.is_some_and(|t| t.elapsed() < WAIT_AFTER));
    }
}
