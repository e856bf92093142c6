//! [`LogLimit`]: at most a few lines of one kind per interval, then a count of those left
//! out, so that a flood (an attacker's handshakes, a client that ignores flow control)
//! cannot fill the log.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Lets through at most `burst` events per `interval`.
#[derive(Debug)]
pub struct LogLimit {
    burst: u32,
    interval: Duration,
    state: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    start: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

impl LogLimit {
    /// At most `burst` lines per `interval`.
    pub const fn new(burst: u32, interval: Duration) -> Self {
        Self {
            burst,
            interval,
            state: Mutex::new(Window {
                start: None,
                logged: 0,
                suppressed: 0,
            }),
        }
    }

    /// Whether to log this event: `Some(n)` with the number of events left out since the
    /// last line (to be mentioned in it), or `None` to stay quiet.
    pub fn allow(&self) -> Option<u64> {
        let now = Instant::now();
        let mut w = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if w.start
            .is_none_or(|s| now.duration_since(s) >= self.interval)
        {
            w.start = Some(now);
            w.logged = 0;
        }
        if w.logged < self.burst {
            w.logged += 1;
            Some(std::mem::take(&mut w.suppressed))
        } else {
            w.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_per_interval_then_the_count_of_what_was_left_out() {
        let l = LogLimit::new(2, Duration::from_secs(10));
        assert_eq!(
            (l.allow(), l.allow(), l.allow(), l.allow()),
            (Some(0), Some(0), None, None)
        );
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(l.allow(), Some(2));
        assert_eq!(l.allow(), Some(0));
        assert_eq!(l.allow(), None);
    }
}
