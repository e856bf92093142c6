//! Completion queues and per-request completion futures, as applications see them
//! whichever backend runs the queue pairs: the engine in this process, or an `iwarpd`
//! whose completions the library takes from shared memory.
//!
//! - [`Cq`]: a bounded ring of [`Wc`]s shared by many queue pairs, with async waiting and
//!   solicited-event notification; more completions than its depth put it in error
//!   ([`CqError::Overrun`]), as a hardware CQ.
//! - [`Waiters`]: the slab behind the async methods' futures ([`CompletionFuture`]); work
//!   request ids with [`NOTIFY_BIT`] set name its slots.
//! - [`Waiters::route`]: the one rule that sends a completion to its future or to a queue.

mod queue;
mod waiters;

pub use queue::{Cq, CqError, Wc};
pub use waiters::{CompletionFuture, Waiters};

use rdmap::{PostError, WrId};

/// Work request ids with this bit set are reserved for requests whose completion goes to
/// a future; applications use ids below it.
pub const NOTIFY_BIT: WrId = 1 << 63;

/// Refuses an application's work request id in the reserved range ([`NOTIFY_BIT`] set).
pub fn check_wr_id(wr_id: WrId) -> Result<(), PostError> {
    if wr_id & NOTIFY_BIT != 0 {
        Err(PostError::ReservedWrId)
    } else {
        Ok(())
    }
}
