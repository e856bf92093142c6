//! The rate limits of what local clients can make iwarpd log: a client that writes garbage,
//! floods the control socket or fills its rings with entries that do not decode gets a
//! few lines per kind and interval, then a count of those left out, never a flood.

use std::time::Duration;

use offload_engine::LogLimit;

const BURST: u32 = 5;
const INTERVAL: Duration = Duration::from_secs(10);

/// Sessions dropped for garbage on the control socket.
pub(super) static CLIENT_DROPPED: LogLimit = LogLimit::new(BURST, INTERVAL);
/// Sessions refused (limits, no Open in time).
pub(super) static CLIENT_REFUSED: LogLimit = LogLimit::new(BURST, INTERVAL);
/// Queue pairs closed for garbage in their rings.
pub(super) static RING_GARBAGE: LogLimit = LogLimit::new(BURST, INTERVAL);
/// Shared receive queue entries that do not decode, or a dead shared receive queue.
pub(super) static SRQ_GARBAGE: LogLimit = LogLimit::new(BURST, INTERVAL);
/// The control socket's accept failing (out of descriptors, mostly).
pub(super) static ACCEPT_FAILED: LogLimit = LogLimit::new(BURST, INTERVAL);
/// Anything else a client's requests make the daemon warn about.
pub(super) static CLIENT_OTHER: LogLimit = LogLimit::new(BURST, INTERVAL);

/// Logs at `$level` through the rate limit `$limit`, with the count of lines it left out
/// since the last one (`left_out`).
macro_rules! limited {
    ($limit:expr, $level:ident, $($arg:tt)+) => {
        if let Some(left_out) = $limit.allow() {
            tracing::$level!(left_out, $($arg)+);
        }
    };
}
pub(super) use limited;
