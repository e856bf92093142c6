//! The descriptor of a completion channel and of a connection-manager event channel: an
//! eventfd in semaphore mode, which poll/epoll wait on as on rdma-core's. Each event
//! posts one; each take reads one (blocking, unless the program made the descriptor
//! non-blocking).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An eventfd in semaphore mode.
#[derive(Debug)]
pub(crate) struct Semaphore(OwnedFd);

impl Semaphore {
    /// A new one, at zero.
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: eventfd(2) with constant flags; the result is checked before use.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new descriptor this call owns from here on.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(raw) }))
    }

    /// Its descriptor, as C sees it.
    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// One more event: the descriptor becomes readable.
    pub(crate) fn post(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 octets from `one` to the eventfd this owns.
        unsafe { libc::write(self.raw(), one.as_ptr().cast(), 8) };
    }

    /// Takes one event, waiting for it if the descriptor blocks; false (errno set by
    /// read(2): EAGAIN, EINTR) if none was taken.
    pub(crate) fn take(&self) -> bool {
        let mut n = [0u8; 8];
        // SAFETY: reads 8 octets into `n` from the eventfd this owns.
        unsafe { libc::read(self.raw(), n.as_mut_ptr().cast(), 8) == 8 }
    }
}

/// Items handed in order from the library's threads to the program's, counted by a
/// [`Semaphore`] the program can wait on: a completion channel's queues that fired, an
/// event channel's events, a context's asynchronous events. At most `kept` are kept: past
/// that the oldest goes, and the count (one per item kept) stays.
#[derive(Debug)]
pub(crate) struct Counted<T> {
    fd: Semaphore,
    items: std::sync::Mutex<std::collections::VecDeque<T>>,
    kept: usize,
}

impl<T> Counted<T> {
    /// An empty one that keeps at most `kept` items.
    pub(crate) fn new(kept: usize) -> io::Result<Self> {
        Ok(Self {
            fd: Semaphore::new()?,
            items: std::sync::Mutex::default(),
            kept,
        })
    }

    fn items(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<T>> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The descriptor, as C sees it.
    pub(crate) fn raw(&self) -> RawFd {
        self.fd.raw()
    }

    /// Queues `item` (the oldest goes if it is full).
    pub(crate) fn push(&self, item: T) {
        let mut q = self.items();
        let full = q.len() >= self.kept;
        if full {
            q.pop_front();
        }
        q.push_back(item);
        drop(q);
        if !full {
            self.fd.post();
        }
    }

    /// The oldest item, waiting for one unless the descriptor is non-blocking; `None`
    /// with errno set if none was taken (read(2)'s: EAGAIN, EINTR).
    pub(crate) fn take(&self) -> Option<T> {
        if !self.fd.take() {
            return None;
        }
        let next = self.items().pop_front();
        if next.is_none() {
            crate::errors::set_errno(crate::errors::Errno::EINVAL);
        }
        next
    }

    /// Every item not taken, oldest first.
    pub(crate) fn drain(&self) -> Vec<T> {
        self.items().drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full queue keeps the newest items, and the descriptor counts exactly those.
    #[test]
    fn a_full_queue_keeps_the_newest_and_counts_them() {
        let q = Counted::new(3).unwrap();
        for i in 0..5 {
            q.push(i);
        }
        // SAFETY: the queue's own descriptor, made non-blocking for the test.
        unsafe { libc::fcntl(q.raw(), libc::F_SETFL, libc::O_NONBLOCK) };
        assert_eq!((q.take(), q.take(), q.take()), (Some(2), Some(3), Some(4)));
        assert_eq!(q.take(), None);
        q.push(9);
        assert_eq!(q.drain(), vec![9]);
    }
}
