//! [`Io`]: the socket and the capture of one connection. Only this module reads, writes or
//! shuts the socket, and every octet it moves is recorded in the capture in the same
//! order, whoever (the driver, a posting thread, a polling thread) asked for it.
//!
//! The socket is a plain non-blocking one, not registered with the runtime: the driver
//! registers a duplicate of it ([`Registration`]) only while it waits for readiness, so that
//! while the application polls its input itself, no packet wakes a runtime thread (with
//! it registered, every arrival and every ACK woke a parked worker, which then preempted
//! the spinning application: 8,000 context switches a second in `send_lat`).
//!
//! Reads run outside the connection's lock, as quinn's driver does its IO outside
//! `Connection`, whoever reads (the driver, or an application polling its input): the
//! input is claimed first (under the lock, so that nobody else reads meanwhile), the
//! system call runs with the lock released ([`read_unlocked`]), and the result is handed
//! back under the lock ([`Io::took`]), where the capture records it in order. Writes go
//! the same way ([`write_unlocked`], [`Io::wrote`]), the driver's and a post's inline
//! transmit alike: the output is produced and claimed under the lock, so that nobody else
//! writes meanwhile, and written with the lock released.

use std::io::{self, IoSlice};
use std::net::TcpStream;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use bytes::BytesMut;
use rdmap::{DirectTarget, Stream, Transmit};

use crate::pcap::Tap;

/// The room a read outside the lock gets (the driver's, or a busy poll's). The buffer
/// stays small, and so in the cache: a partial FPDU left at the end of a read is moved to
/// the front to make room (a larger buffer that moved it less often measured slower).
const RX_CHUNK: usize = 64 * 1024;

/// The socket (while the connection runs) and its capture.
#[derive(Debug)]
pub(crate) struct Io {
    sock: Option<Arc<TcpStream>>,
    tap: Tap,
    /// Octets moved either way so far: the driver compares it between its turns to see
    /// progress (the liveness timeouts), with its own clock.
    moved: u64,
    /// The socket was shared with the application ([`share`](Self::share)).
    shared: bool,
}

/// Where a read outside the lock goes: the octets read and not yet consumed (taken out
/// of the connection meanwhile), or registered memory the stream named.
pub(crate) enum Input {
    Buffer(BytesMut),
    Direct(DirectTarget),
}

/// The connection's socket registered with the current runtime while a driver waits on
/// its readiness: a duplicate of the socket (the same socket), made once per driver and
/// kept when the registration is released, so that releasing and registering again never
/// needs a new descriptor (a process at its descriptor limit must not lose a connection
/// for it).
#[derive(Debug, Default)]
pub(crate) struct Registration {
    /// Registered: the driver may wait on it.
    active: Option<tokio::net::TcpStream>,
    /// The duplicate, not registered.
    idle: Option<TcpStream>,
}

impl Registration {
    /// The registration, made now if there is none (a duplicate of `sock` the first time).
    pub(crate) fn register(&mut self, sock: &TcpStream) -> io::Result<()> {
        if self.active.is_none() {
            let dup = match self.idle.take() {
                Some(dup) => dup,
                None => sock.try_clone()?,
            };
            self.active = Some(tokio::net::TcpStream::from_std(dup)?);
        }
        Ok(())
    }

    /// Deregisters it (the duplicate is kept).
    pub(crate) fn release(&mut self) {
        if let Some(active) = self.active.take() {
            // Fails only if the runtime is gone; the duplicate is then closed with it.
            self.idle = active.into_std().ok();
        }
    }

    /// The registered socket, if it is.
    pub(crate) fn get(&self) -> Option<&tokio::net::TcpStream> {
        self.active.as_ref()
    }
}

/// One non-blocking read of `sock` into `into`, with the connection's lock released (the
/// driver claimed the input). `WouldBlock` when nothing is there; `Ok(0)`: the peer's FIN.
pub(crate) fn read_unlocked(sock: &TcpStream, into: &mut Input) -> io::Result<usize> {
    match into {
        Input::Buffer(rx) => shm::read_spare(sock, rx, RX_CHUNK),
        Input::Direct(to) => {
            let mut view = to
                .region
                .view_mut(to.offset, to.len)
                .map_err(io::Error::other)?;
            recv_now(sock, &mut view)
        }
    }
}

/// One non-blocking receive of `sock` into `buf` (`MSG_DONTWAIT`: a socket shared with
/// the application that owns the queue pair may have had its own mode changed, and the
/// engine's threads must never block on it).
pub(crate) fn recv_now(sock: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    Ok(rustix::net::recv(sock, buf, rustix::net::RecvFlags::DONTWAIT)?.0)
}

/// One non-blocking vectored send of `slices` on `sock` (`MSG_DONTWAIT`, as [`recv_now`];
/// `MSG_NOSIGNAL`: a closed connection is an error, not a signal).
pub(crate) fn send_now(sock: &TcpStream, slices: &[IoSlice<'_>]) -> io::Result<usize> {
    let flags = rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL;
    let mut none = rustix::net::SendAncillaryBuffer::default();
    Ok(rustix::net::sendmsg(sock, slices, &mut none, flags)?)
}

/// Writes as much of the front of `out` as `write` (one non-blocking vectored write of the
/// socket) takes now, and drops it from `out`; with `copy`, the octets written are
/// appended to it for the capture. Returns the octets written: 0 when the socket is full.
/// Runs with the lock released, by whoever claimed the output (the driver, through its
/// registration, or a post's inline transmit): it alone writes meanwhile.
pub(crate) fn write_unlocked(
    mut write: impl FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
    out: &mut Transmit,
    mut copy: Option<&mut Vec<u8>>,
) -> io::Result<usize> {
    out.write_with(|slices| {
        let n = match write(slices) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) => return Err(e),
        };
        if let Some(copy) = copy.as_mut() {
            let mut left = n;
            for s in slices {
                let take = left.min(s.len());
                copy.extend_from_slice(s.get(..take).unwrap_or_default());
                left -= take;
            }
        }
        Ok(n)
    })
}

/// What a read found.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// This many octets were appended.
    Data(usize),
    /// Nothing was there.
    Nothing,
    /// The peer's FIN.
    Eof,
}

impl Io {
    pub(crate) fn new(sock: Arc<TcpStream>, tap: Tap) -> Self {
        Self {
            sock: Some(sock),
            tap,
            moved: 0,
            shared: false,
        }
    }

    /// True while a capture records this connection (what the driver writes outside the
    /// lock is then copied for it).
    pub(crate) fn capturing(&self) -> bool {
        self.tap.is_on()
    }

    /// Accounts for a read of `n` octets into `input` done outside the lock
    /// ([`read_unlocked`]; 0: the FIN): the capture records it, and it counts.
    pub(crate) fn took(&mut self, input: &Input, n: usize) -> Read {
        match input {
            Input::Buffer(rx) => self.record(rx, n),
            Input::Direct(_) if n == 0 => {
                self.tap.received_fin();
                Read::Eof
            }
            Input::Direct(to) => {
                if self.tap.is_on()
                    && let Ok(view) = to.region.view(to.offset, n)
                {
                    self.tap.received(&view);
                }
                self.moved += n as u64;
                Read::Data(n)
            }
        }
    }

    /// Accounts for a write of `n` octets done outside the lock ([`write_unlocked`],
    /// which copied them into `copy` if the capture is on): recorded, counted, and told
    /// to the stream (send completions may follow).
    pub(crate) fn wrote(&mut self, stream: &mut Stream, n: usize, copy: &[u8]) {
        if !copy.is_empty() {
            self.tap.sent(copy);
        }
        self.moved += n as u64;
        stream.handle_written(n);
    }

    /// Octets read and written so far.
    pub(crate) fn moved(&self) -> u64 {
        self.moved
    }

    /// False once the connection has ended and the socket is gone.
    pub(crate) fn is_open(&self) -> bool {
        self.sock.is_some()
    }

    /// This end's address and the peer's, while the socket is there.
    pub(crate) fn addrs(&self) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
        let sock = self.sock.as_deref()?;
        // A dual-stack listener's IPv4 connections read as IPv4, as their peers know them.
        let canonical = crate::dual_stack::canonical;
        Some((
            canonical(sock.local_addr().ok()?),
            canonical(sock.peer_addr().ok()?),
        ))
    }

    /// The socket, for a read outside the lock (`None` once it closed or moved away).
    pub(crate) fn socket(&self) -> Option<Arc<TcpStream>> {
        self.sock.clone()
    }

    /// The capture's view of a read that appended `n` octets to `rx` (0: the FIN).
    fn record(&mut self, rx: &BytesMut, n: usize) -> Read {
        if n == 0 {
            self.tap.received_fin();
            return Read::Eof;
        }
        let fresh = rx.len() - n;
        self.tap.received(rx.get(fresh..).unwrap_or_default());
        self.moved += n as u64;
        Read::Data(n)
    }

    /// Shuts down the sending half (TCP FIN) and records it.
    pub(crate) fn shutdown_write(&mut self) {
        if let Some(sock) = self.sock.as_deref()
            && let Err(e) = sock.shutdown(std::net::Shutdown::Write)
        {
            tracing::debug!(error = %e, "shutdown");
        }
        self.tap.sent_fin();
    }

    /// A duplicate of the socket, for the application that owns the queue pair (the push
    /// path that skips the daemon); from now on closing the connection shuts the socket
    /// down both ways, so the application's copy does not keep it open.
    pub(crate) fn share(&mut self) -> io::Result<OwnedFd> {
        let sock = self
            .sock
            .as_deref()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "the connection ended"))?;
        let fd = sock.as_fd().try_clone_to_owned()?;
        self.shared = true;
        Ok(fd)
    }

    /// The socket goes to another engine (live migration): closing this side must not
    /// shut it down.
    pub(crate) fn handed_over(&mut self) {
        self.shared = false;
    }

    /// Ends the connection's IO: the socket is dropped (closed once the driver lets go of
    /// its own reference) and the capture is returned, to be finished outside the lock.
    pub(crate) fn close(&mut self) -> Tap {
        if self.shared
            && let Some(sock) = self.sock.as_deref()
        {
            let _ = sock.shutdown(std::net::Shutdown::Both);
        }
        self.sock = None;
        std::mem::take(&mut self.tap)
    }
}
