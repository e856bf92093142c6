//! [`register_readable`]: a descriptor registered with tokio's reactor, to sleep on (a
//! doorbell's eventfd). Registering is `unsafe` in tokio (its safe constructors are
//! deprecated as unsound: a registered descriptor must stay open and the same until it is
//! deregistered), so it is done here, for an owned descriptor only.

use std::io;
use std::os::fd::OwnedFd;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// `fd` registered with the current tokio runtime for readability.
pub fn register_readable(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the `AsyncFd` owns the `OwnedFd`: the descriptor stays open, and no one
    // else can close or reuse its number, for as long as it is registered (it is
    // deregistered when the `AsyncFd` drops, before the `OwnedFd` closes it).
    let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) };
    fd.map_err(io::Error::from)
}
