//! How many memory files this process holds mapped.

use std::sync::atomic::{AtomicUsize, Ordering};

static HELD: AtomicUsize = AtomicUsize::new(0);

/// Memory files this process holds mapped now: every allocated or mapped
/// [`Region`](crate::Region) and every [`Segment`](crate::Segment), whoever created the
/// file. Each is an open descriptor and a mapping, the two things a process that maps
/// other processes' memory runs out of (`ulimit -n`, `vm.max_map_count`).
pub fn memory_files() -> usize {
    HELD.load(Ordering::Relaxed)
}

/// One memory file, counted for as long as it lives.
#[derive(Debug)]
pub(crate) struct Held(());

impl Held {
    pub(crate) fn new() -> Self {
        HELD.fetch_add(1, Ordering::Relaxed);
        Self(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::Relaxed);
    }
}
