//! One connected queue pair, split the way quinn splits a connection from its driver:
//!
//! - [`connection`]: `Connection`, everything behind the connection's lock, with private
//!   fields: the protocol stream, the queue pair's view of memory, octets read and not
//!   yet consumed, what an inline transmit left unwritten, and the completions waiting
//!   to be delivered. Its submodules are its parts: what the application's handle and
//!   the driver ask of it, the inline transmit, seed 000's push post, parking for live
//!   migration and the image that crosses to another process;
//! - [`io`]: `Io`, the only code that touches the socket and the capture (reads, vectored
//!   writes, the FIN), so that the capture sees every octet in the order the socket did;
//! - [`driver`]: the connection's task, one loop of process -> transmit -> timers ->
//!   deliver, with its reads and writes outside the lock;
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
mod fair;
mod handle;
mod io;

pub use completions::{CompletionSink, Completions};
pub(crate) use connection::{Connection, Home, ParkError, Parked, Prepared as PreparedQp, QpImage};
pub(crate) use driver::spawn;
pub use handle::Qp;
pub(crate) use handle::Shared;
pub use rdmap::{QpEnd, QpNum};

/// The engine's one clock: tokio's, so that paused time in tests moves every timer.
pub(crate) fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}
