//! [`Doorbell`]: an eventfd one process rings to wake another, and [`Doorbell::wait`]
//! for a tokio task to sleep on it.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::event::EventfdFlags;
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
        drain(&self.fd);
    }

    /// Registers it with the current tokio runtime, to sleep on.
    pub fn into_async(self) -> io::Result<AsyncDoorbell> {
        shm::register_readable(self.fd).map(AsyncDoorbell)
    }
}

/// Consumes an eventfd's count; never blocks.
fn drain(fd: &OwnedFd) {
    let mut b = [0u8; 8];
    let _ = rustix::io::read(fd, &mut b);
}

impl AsFd for Doorbell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A [`Doorbell`] a tokio task can wait on.
#[derive(Debug)]
pub struct AsyncDoorbell(AsyncFd<OwnedFd>);

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
        drain(g.get_inner());
        g.clear_ready();
        Ok(())
    }
}
