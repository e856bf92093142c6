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
