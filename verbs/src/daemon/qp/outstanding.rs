//! The requests a daemon queue pair has posted and not yet seen complete, and the send
//! queue index arithmetic they are retired by.

use std::collections::VecDeque;

use rdmap::{WcOpcode, WrId};

use ipc::control::QueueDepths;

/// The requests posted and not yet complete, in posting order: what is flushed if the
/// daemon goes away (it can no longer complete them).
pub(super) struct Outstanding {
    /// Send requests, with the send queue index of the first: the daemon retires them in
    /// order (its `sq_done` index), signaled or not.
    pub(super) sends: VecDeque<(WrId, WcOpcode)>,
    pub(super) first_send: u32,
    /// Receives, removed as their completions arrive.
    pub(super) recvs: VecDeque<WrId>,
    /// How many of each may be outstanding: what the application asked for, as an
    /// embedded queue pair allows (the daemon's rings may be deeper).
    pub(super) depths: QueueDepths,
    /// The daemon is gone and everything outstanding was flushed: what is posted from
    /// now on completes here at once as flushed.
    pub(super) dead: bool,
}

impl Outstanding {
    /// Forgets the send requests the daemon retired (up to index `done`).
    pub(super) fn retire(&mut self, done: u32) {
        while !self.sends.is_empty() && ahead(self.first_send, done) {
            self.sends.pop_front();
            self.first_send = self.first_send.wrapping_add(1);
        }
    }

    /// Send requests that may be posted now.
    pub(super) fn send_room(&self) -> u32 {
        let outstanding = u32::try_from(self.sends.len()).unwrap_or(u32::MAX);
        self.depths.sq.saturating_sub(outstanding)
    }

    pub(super) fn received(&mut self, id: WrId) {
        if let Some(at) = self.recvs.iter().position(|&r| r == id) {
            self.recvs.remove(at);
        }
    }
}

/// True if send queue index `b` is past `a` (indices run freely, wrapping: the one ahead
/// by less than half the range).
pub(super) fn ahead(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}

/// Whichever of two send queue indices is further along.
pub(super) fn later(a: u32, b: u32) -> u32 {
    if ahead(a, b) { b } else { a }
}

#[cfg(test)]
mod tests {
    use super::later;

    /// Send queue indices run freely: the later of two is the one ahead by less than half
    /// the range, across the wrap too.
    #[test]
    fn the_later_index_wins_across_the_wrap() {
        assert_eq!(later(1, 2), 2);
        assert_eq!(later(2, 1), 2);
        assert_eq!(later(7, 7), 7);
        assert_eq!(later(u32::MAX, 1), 1);
        assert_eq!(later(1, u32::MAX), 1);
    }
}
