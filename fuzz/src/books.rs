//! [`Books`]: the work requests a stream was given and how often each completed, so that
//! a harness can insist on exactly one completion per request.

use std::collections::HashMap;

use rdmap::Completion;

/// Work request ids handed out, and the completions seen for each.
#[derive(Debug, Default)]
pub(crate) struct Books {
    completions: HashMap<u64, u32>,
    next: u64,
}

impl Books {
    /// A fresh id for the next request.
    pub(crate) fn next_id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// `wr_id` was accepted by the stream: it must complete once.
    pub(crate) fn posted(&mut self, wr_id: u64) {
        self.completions.insert(wr_id, 0);
    }

    /// Records `wc`; a completion for an unknown or already completed request panics.
    pub(crate) fn completed(&mut self, wc: &Completion) {
        let n = self
            .completions
            .get_mut(&wc.wr_id)
            .unwrap_or_else(|| panic!("completion for unknown wr_id: {wc:?}"));
        *n += 1;
        assert_eq!(*n, 1, "second completion: {wc:?}");
    }

    /// Every request completed exactly once (`why` names the situation in the panic).
    pub(crate) fn assert_all_once(&self, why: &dyn std::fmt::Debug) {
        for (wr_id, n) in &self.completions {
            assert_eq!(*n, 1, "wr_id {wr_id} completed {n} times ({why:?})");
        }
    }

    /// Completions seen so far.
    pub(crate) fn total(&self) -> usize {
        self.completions.values().map(|&n| n as usize).sum()
    }
}
