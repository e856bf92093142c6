//! Asynchronous events, on the context's `async_fd` (an eventfd in semaphore mode, which
//! poll/epoll wait on); `ibv_get_async_event` and `ibv_ack_async_event` (in `device`, with
//! the context) take them.
//!
//! Reported, as siw reports them: `IBV_EVENT_QP_FATAL` when a connected queue pair ends
//! in error (a Terminate either way, the TCP connection lost, a stall, a completion queue
//! overrun, which is also an `IBV_EVENT_CQ_ERR` on the queue that overflowed) and
//! `IBV_EVENT_DEVICE_FATAL` when the stack under it went away (the iwarpd it was attached
//! to). A graceful disconnect, and a queue pair that moved to another daemon, report
//! nothing.

use libc::c_int;
use verbs::QpEnd;

use crate::abi::*;
use crate::semaphore::Counted;

/// The most events a context keeps for a program that does not take them.
const KEPT: usize = 1024;

/// A context's events not yet taken, and the descriptor that counts them.
#[derive(Debug)]
pub(crate) struct AsyncEvents(Counted<ibv_async_event>);

impl AsyncEvents {
    /// A context's, at none.
    pub(crate) fn new() -> std::io::Result<Self> {
        Counted::new(KEPT).map(Self)
    }

    /// The descriptor, as C sees it (`ibv_context::async_fd`).
    pub(crate) fn raw(&self) -> c_int {
        self.0.raw()
    }

    /// The oldest event, waiting for one unless the descriptor is non-blocking; none with
    /// errno set (read(2)'s: `EAGAIN`, `EINTR`; or `EINVAL`).
    pub(crate) fn take(&self) -> Option<ibv_async_event> {
        self.0.take()
    }

    fn post(&self, element: usize, event_type: c_int) {
        self.0.push(ibv_async_event {
            element,
            event_type,
        });
    }

    /// A connected queue pair `qp` (its C address) ended with `end`, its completion
    /// queues `cqs`: the events that says, if any.
    pub(crate) fn ended(&self, qp: usize, cqs: [usize; 2], end: &QpEnd) {
        match end {
            QpEnd::Closed | QpEnd::MovedAway => {}
            QpEnd::DeviceLost(_) => self.post(0, IBV_EVENT_DEVICE_FATAL),
            QpEnd::CqOverrun => {
                // Which of its queues overflowed is not said: both are named when they
                // differ, as either may have.
                self.post(cqs[0], IBV_EVENT_CQ_ERR);
                if cqs[1] != cqs[0] {
                    self.post(cqs[1], IBV_EVENT_CQ_ERR);
                }
                self.post(qp, IBV_EVENT_QP_FATAL);
            }
            _ => self.post(qp, IBV_EVENT_QP_FATAL),
        }
    }
}
