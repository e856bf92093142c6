//! [`Io`]: the socket and the capture of one connection. Only this module reads, writes or
//! shuts the socket, and every octet it moves is recorded in the capture in the same
//! order, whoever (the driver, a posting thread, a polling thread) asked for it.

use std::io::{self, Read as _};
use std::sync::Arc;

use bytes::BytesMut;
use rdmap::{DirectTarget, Stream, Transmit};
use tokio::net::TcpStream;

use crate::pcap::Tap;

/// The room a driver read gets. The buffer stays small, and so in the cache: a partial
/// FPDU left at the end of a read is moved to the front to make room (a larger buffer that
/// moved it less often measured slower).
const RX_CHUNK: usize = 64 * 1024;
/// The most [`Io::read_now`] reads at a time.
const POLL_READ: usize = 64 * 1024;

/// The socket (while the connection runs) and its capture.
#[derive(Debug)]
pub(crate) struct Io {
    sock: Option<Arc<TcpStream>>,
    tap: Tap,
    /// Octets moved either way so far: the driver compares it between its turns to see
    /// progress (the liveness timeouts), with its own clock.
    moved: u64,
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
        }
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

    /// One non-blocking read into `rx` through tokio's readiness (the driver's read).
    pub(crate) fn read(&mut self, rx: &mut BytesMut) -> io::Result<Read> {
        let Some(sock) = self.sock.as_deref() else {
            return Ok(Read::Nothing);
        };
        rx.reserve(RX_CHUNK);
        match sock.try_read_buf(rx) {
            Ok(n) => Ok(self.record(rx, n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Read::Nothing),
            Err(e) => Err(e),
        }
    }

    /// One read of the socket itself, not through tokio's readiness (which only the
    /// runtime's poller updates: the octets may have arrived a moment ago), for an
    /// application polling its input. Into `buf`, kept zeroed so that a poll that finds
    /// nothing costs no fill, then appended to `rx`.
    pub(crate) fn read_now(&mut self, buf: &mut Vec<u8>, rx: &mut BytesMut) -> io::Result<Read> {
        let Some(sock) = self.sock.as_deref() else {
            return Ok(Read::Nothing);
        };
        buf.resize(POLL_READ, 0);
        match (&*socket2::SockRef::from(sock)).read(buf) {
            Ok(n) => {
                rx.extend_from_slice(buf.get(..n).unwrap_or_default());
                Ok(self.record(rx, n))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Read::Nothing),
            Err(e) => Err(e),
        }
    }

    /// One read straight into registered memory ([`Stream::direct_target`]): through
    /// tokio's readiness for the driver, or of the socket itself (`now`) for an
    /// application polling its input, as [`read`](Self::read) and
    /// [`read_now`](Self::read_now).
    pub(crate) fn read_direct(&mut self, to: &DirectTarget, now: bool) -> io::Result<Read> {
        let Some(sock) = self.sock.as_deref() else {
            return Ok(Read::Nothing);
        };
        let mut view = to
            .region
            .view_mut(to.offset, to.len)
            .map_err(io::Error::other)?;
        let read = if now {
            (&*socket2::SockRef::from(sock)).read(&mut view)
        } else {
            sock.try_read(&mut view)
        };
        match read {
            Ok(0) => {
                self.tap.received_fin();
                Ok(Read::Eof)
            }
            Ok(n) => {
                self.tap.received(view.get(..n).unwrap_or_default());
                self.moved += n as u64;
                Ok(Read::Data(n))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Read::Nothing),
            Err(e) => Err(e),
        }
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

    /// Writes as much of the front of `out` as the socket takes now (vectored, never
    /// blocking), records it, drops it from `out` and tells the stream (send completions
    /// may follow). Returns the octets written: 0 when the socket is full (its readiness
    /// is then cleared, so the driver's `writable()` waits for room).
    pub(crate) fn write(&mut self, stream: &mut Stream, out: &mut Transmit) -> io::Result<usize> {
        let Some(sock) = self.sock.as_deref() else {
            return Ok(0);
        };
        let tap = &mut self.tap;
        let written = out.write_with(|slices| {
            let n = match sock.try_write_vectored(slices) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
                Err(e) => return Err(e),
            };
            let mut left = n;
            for s in slices {
                if left == 0 {
                    break;
                }
                let take = left.min(s.len());
                tap.sent(s.get(..take).unwrap_or_default());
                left -= take;
            }
            Ok(n)
        })?;
        self.moved += written as u64;
        stream.handle_written(written);
        Ok(written)
    }

    /// Shuts down the sending half (TCP FIN) and records it.
    pub(crate) fn shutdown_write(&mut self) {
        if let Some(sock) = self.sock.as_deref()
            && let Err(e) = socket2::SockRef::from(sock).shutdown(std::net::Shutdown::Write)
        {
            tracing::debug!(error = %e, "shutdown");
        }
        self.tap.sent_fin();
    }

    /// Ends the connection's IO: the socket is dropped (closed once the driver lets go of
    /// its own reference) and the capture is returned, to be finished outside the lock.
    pub(crate) fn close(&mut self) -> Tap {
        self.sock = None;
        std::mem::take(&mut self.tap)
    }
}
