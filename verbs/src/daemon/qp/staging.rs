//! The staging area's allocator, for payloads too long to be inline in a send queue
//! entry.

use std::collections::VecDeque;

/// The staging area's allocator: a ring of octets, freed in send queue order as the
/// requests that name them are retired (the daemon sends a staged payload from the area
/// itself, so its octets are the daemon's until then).
#[derive(Debug)]
pub(super) struct Staging {
    pub(super) size: u64,
    pub(super) head: u64,
    pub(super) tail: u64,
    /// (send queue index, end of its octets) of staged entries not yet retired.
    pub(super) live: VecDeque<(u32, u64)>,
}

impl Staging {
    /// Frees the octets of the entries before send queue index `retired`.
    pub(super) fn reclaim(&mut self, retired: u32) {
        while let Some(&(idx, end)) = self.live.front() {
            if (retired.wrapping_sub(idx) as i32) <= 0 {
                break;
            }
            self.tail = end;
            self.live.pop_front();
        }
    }

    pub(super) fn alloc(&mut self, len: usize) -> Option<u32> {
        let len = (len as u64).next_multiple_of(64);
        if len > self.size {
            return None;
        }
        let mut start = self.head;
        let off = start % self.size;
        if off + len > self.size {
            start += self.size - off;
        }
        if start + len - self.tail > self.size {
            return None;
        }
        self.head = start + len;
        Some((start % self.size) as u32)
    }
}
