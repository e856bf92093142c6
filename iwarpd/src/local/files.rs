//! How many memory files iwarpd maps for its clients at most.
//!
//! Every region a client registers, every queue pair's segment, every domain's push
//! region and every shared receive queue's ring is a memory file the daemon holds open
//! and mapped. A process that runs out of descriptors or mappings fails wherever it next
//! needs one: a client's message loses the descriptors it carried, a thread or an
//! allocation cannot be made. So the daemon stops at half the smaller of its two limits,
//! leaving the rest to sockets, doorbells and its own needs; one user's clients stop at
//! half of that, so that other users still get theirs; and it refuses what would go past
//! either by name.

use ipc::control::{Reply, error};

use super::replies::err;

/// Descriptors a new queue pair takes: its segment, its two doorbells, its socket and
/// the connection driver's registration of the socket (a duplicate, made once). (A
/// listener asks room for one, its socket: descriptors that are not memory files count
/// against the half the budget leaves.)
pub(super) const PER_QP: usize = 5;

/// The daemon's limits, read once when the service starts.
#[derive(Clone, Copy, Debug)]
pub(super) struct FileBudget {
    /// The open-file limit (`RLIMIT_NOFILE`, soft).
    nofile: u64,
    /// `vm.max_map_count`.
    maps: u64,
}

impl FileBudget {
    /// Reads the limits this process runs with.
    pub(super) fn read() -> Self {
        let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let maps = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(65530);
        Self { nofile, maps }
    }

    /// Memory files the daemon may hold.
    fn max(&self) -> usize {
        usize::try_from(self.nofile.min(self.maps) / 2).unwrap_or(usize::MAX)
    }

    /// The refusal if `need` more memory files would go past the budget, or past half
    /// of it for the user `who` whose clients hold `own` (so that one user cannot take
    /// them all: [`Objects::files`](super::session::Objects::files) counts them).
    pub(super) fn check(&self, own: usize, need: usize, who: &str) -> Option<Reply> {
        let max = self.max();
        let held = shm::memory_files();
        let what = if own.saturating_add(need) > max / 2 {
            format!("this user's applications ({who}) hold {own} of them, half, its share")
        } else if held.saturating_add(need) > max {
            format!("{held} are mapped for applications already")
        } else {
            return None;
        };
        Some(err(
            error::LIMIT,
            format!(
                "iwarpd may use {max} descriptors and mappings for applications (half of the \
                 smaller of its open-file limit ({}) and vm.max_map_count ({})), and {what}. \
                 Register fewer, larger regions or hold fewer queue pairs, or raise the \
                 limits for iwarpd (ulimit -n or systemd's LimitNOFILE=, sysctl \
                 vm.max_map_count)",
                self.nofile, self.maps
            ),
        ))
    }
}
