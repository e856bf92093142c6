//! [`Doorbell`]: an eventfd one process rings to wake another, and [`Doorbell::wait`]
//! for a tokio task to sleep on it.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use rustix::event::EventfdFlags;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// An eventfd (non-blocking, close-on-exec): [`ring`](Self::ring) adds one, a sleeper
/// wakes when the count is not zero, [`drain`](Self::drain) resets it.
#[derive(Debug)]
pub struct Doorbell {
    fd: OwnedFd,
}

impl Doorbell {
    /// A new doorbell.
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            fd: rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?,
        })
    }

    /// One received from the other process (its descriptor).
    pub fn from_fd(fd: OwnedFd) -> Self {
        Self { fd }
    }

    /// Wakes the sleeper.
    pub fn ring(&self) {
        // A full counter (2^64 - 2 unread rings) still wakes the reader: nothing to do.
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    /// Consumes the rings so far; never blocks.
    pub fn drain(&self) {
        let mut b = [0u8; 8];
        let _ = rustix::io::read(&self.fd, &mut b);
    }

    /// Registers it with the current tokio runtime, to sleep on.
    pub fn into_async(self) -> io::Result<AsyncDoorbell> {
        // SAFETY: the `AsyncFd` owns the `Doorbell`, which owns its `OwnedFd`: the
        // descriptor stays open and the same for as long as the `AsyncFd` lives, and
        // `as_raw_fd` always returns it (tokio's condition for registering it).
        let fd = unsafe { AsyncFd::register_with_interest(self, Interest::READABLE) };
        fd.map(AsyncDoorbell).map_err(io::Error::from)
    }
}

impl AsRawFd for Doorbell {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for Doorbell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A [`Doorbell`] a tokio task can wait on.
#[derive(Debug)]
pub struct AsyncDoorbell(AsyncFd<Doorbell>);

impl AsFd for AsyncDoorbell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.get_ref().as_fd()
    }
}

impl AsyncDoorbell {
    /// Waits until it was rung, and drains it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a ring that arrives while nobody waits is kept in the counter.
    pub async fn wait(&self) -> io::Result<()> {
        let mut g = self.0.readable().await?;
        g.get_inner().drain();
        g.clear_ready();
        Ok(())
    }
}
