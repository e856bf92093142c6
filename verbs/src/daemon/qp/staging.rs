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
            if !super::outstanding::ahead(idx, retired) {
                break;
            }
            self.tail = end;
            self.live.pop_front();
        }
    }

    /// Whether `len` octets fit the area at all (with nothing else in it).
    pub(super) fn could_hold(&self, len: usize) -> bool {
        (len as u64).next_multiple_of(64) <= self.size
    }

    /// Room for `len` octets: their offset in the area, or `None` if they do not fit now.
    /// An empty area starts again at its beginning, so that anything up to its whole
    /// size fits then.
    pub(super) fn alloc(&mut self, len: usize) -> Option<u32> {
        let len = (len as u64).next_multiple_of(64);
        if len > self.size {
            return None;
        }
        if self.live.is_empty() {
            self.head = self.head.next_multiple_of(self.size);
            self.tail = self.head;
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

#[cfg(test)]
mod tests {
    use super::Staging;

    fn area(size: u64) -> Staging {
        Staging {
            size,
            head: 0,
            tail: 0,
            live: Default::default(),
        }
    }

    /// Octets are taken in order, refused while the area holds what is not retired, and
    /// freed in send queue order.
    #[test]
    fn a_ring_freed_in_send_queue_order() {
        let mut s = area(1024);
        assert_eq!(s.alloc(300), Some(0));
        s.live.push_back((0, s.head));
        assert_eq!(s.alloc(600), Some(320));
        s.live.push_back((1, s.head));
        assert_eq!(
            s.alloc(200),
            None,
            "104 octets left at the end, none at the start"
        );
        s.reclaim(1);
        assert_eq!(
            s.alloc(200),
            Some(0),
            "the first one's octets, freed: it wraps"
        );
        s.live.push_back((2, s.head));
        assert_eq!(
            s.alloc(100),
            None,
            "64 octets between it and the second one"
        );
    }

    /// An empty area starts again at its beginning: a payload of its whole size fits then,
    /// wherever the last one ended; one octet more never does.
    #[test]
    fn an_empty_area_holds_its_whole_size() {
        let mut s = area(1024);
        assert_eq!(s.alloc(100), Some(0));
        s.live.push_back((0, s.head));
        s.reclaim(1);
        assert!(s.could_hold(1024) && !s.could_hold(1025));
        assert_eq!(s.alloc(1024), Some(0));
        assert_eq!(s.alloc(1025), None);
    }
}
