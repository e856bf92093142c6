//! One connected queue pair, split the way quinn splits a connection from its driver:
//!
//! - [`connection`]: `Connection`, everything behind the connection's lock (private to
//!   this module): the protocol stream, the queue pair's view of memory, octets read and
//!   not yet consumed, what an inline transmit left unwritten, and the completions
//!   waiting to be delivered;
//! - [`io`]: `Io`, the only code that touches the socket and the capture (reads, vectored
//!   writes, the FIN), so that the capture sees every octet in the order the socket did;
//! - [`driver`]: the connection's task, one loop of process -> transmit -> timers ->
//!   deliver;
//! - [`inline_tx`]: inline transmit (a small send onto an idle send queue is written by
//!   the posting thread);
//! - [`push_post`]: a post by seed 000's push path ([`crate::push`] decides whether a lone
//!   small request is executed from its pushed message or goes through the send queue;
//!   this part acts on it, as it changes the connection's state);
//! - [`park`]: parking a queue pair's driver so that live migration ([`crate::migration`])
//!   can move it to another engine;
//! - [`image`]: a parked queue pair as plain data and a socket, for migration to another
//!   process, and the queue pair built from them there;
//! - [`handle`]: [`Qp`], the application's handle;
//! - [`completions`]: where completions go: completion queues and futures, or one sink.
//!
//! Completions, per-request futures and the end of the connection are delivered after the
//! lock is released, never from inside it ([`Shared::unlock`]): a woken task that posts at
//! once does not find the lock held. Completions go to a completion queue in batches (one
//! lock and one wake-up for everything a step produced). The engine reads one clock,
//! tokio's, so that timers run in paused time in tests.

mod completions;
mod connection;
mod driver;
mod handle;
mod image;
mod inline_tx;
mod io;
mod park;
mod push_post;

pub use completions::{CompletionSink, Completions};
pub(crate) use connection::{Connection, Home};
pub(crate) use driver::spawn;
pub use handle::Qp;
pub(crate) use handle::Shared;
pub(crate) use image::{Prepared as PreparedQp, QpImage};
pub(crate) use io::Io;
pub(crate) use park::{ParkError, Parked};
pub use rdmap::{QpEnd, QpNum};

/// The engine's one clock: tokio's, so that paused time in tests moves every timer.
pub(crate) fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}
