//! [`Usage`]: what one client, or every client of one user, holds of what the daemon
//! bounds (see `users` for how it is summed and `admit` for the limits).

/// What one client or user holds of what the daemon bounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Usage {
    /// Memory files and sockets the daemon holds for it (see
    /// [`FileBudget`](super::files::FileBudget)).
    pub(super) files: usize,
    /// Queue pairs, connected or connecting.
    pub(super) qps: usize,
    /// Entries of the memory table: regions, windows and STags reserved.
    pub(super) entries: usize,
    /// Octets of its regions the daemon maps.
    pub(super) octets: u64,
    /// Shared receive queues.
    pub(super) srqs: usize,
    /// Listeners.
    pub(super) listeners: usize,
}

impl Usage {
    /// Adds `o` to this.
    pub(super) fn add(&mut self, o: &Self) {
        self.files += o.files;
        self.qps += o.qps;
        self.entries += o.entries;
        self.octets += o.octets;
        self.srqs += o.srqs;
        self.listeners += o.listeners;
    }
}
