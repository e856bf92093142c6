//! Messages over a Unix stream socket with memory files attached (`SCM_RIGHTS`).
//!
//! A sender attaches a message's descriptors to its first octets; the kernel delivers
//! them with the read that returns those octets, so a receiver that keeps descriptors in
//! arrival order hands each complete message the ones it declares
//! ([`request_fds`](crate::control::request_fds), [`reply_fds`](crate::control::reply_fds)).
//! A peer that sends descriptors no message claims, or more than [`MAX_FDS_QUEUED`], is
//! broken: the receiver drops the connection.

use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::codec::Malformed;
use crate::control::{HEADER_LEN, Header};

/// The most descriptors one message carries.
pub const MAX_FDS: usize = 4;
/// The most descriptors kept waiting for their message.
pub const MAX_FDS_QUEUED: usize = 16;

/// One `sendmsg`: as much of `msg` as the socket takes now, with `fds` attached (pass
/// them only with a message's first octets). Returns the octets sent.
pub fn send_some(sock: BorrowedFd<'_>, msg: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<usize> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("too many descriptors for one message"));
    }
    Ok(rustix::net::sendmsg(
        sock,
        &[IoSlice::new(msg)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?)
}

/// Sends all of `msg` on a blocking socket, `fds` with its first octets.
pub fn send_all(sock: BorrowedFd<'_>, msg: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut sent = send_some(sock, msg, fds)?;
    while sent < msg.len() {
        match send_some(sock, &msg[sent..], &[])? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => sent += n,
        }
    }
    Ok(())
}

/// A complete message: its header, body and descriptors.
#[derive(Debug)]
pub struct Message {
    /// The header.
    pub header: Header,
    /// The octets after the header.
    pub body: Vec<u8>,
    /// The descriptors it carried.
    pub fds: Vec<OwnedFd>,
}

/// What the receiving side has read and not yet handed out.
#[derive(Debug, Default)]
pub struct Inbox {
    buf: Vec<u8>,
    fds: VecDeque<OwnedFd>,
}

/// Why the connection must be dropped.
#[derive(Debug)]
pub enum RecvError {
    /// The socket failed (or would block, on a non-blocking socket).
    Io(io::Error),
    /// The other side closed it.
    Closed,
    /// The other side sent what no message of the protocol is.
    Malformed(Malformed),
}

impl From<io::Error> for RecvError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

impl Inbox {
    /// An empty inbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// True if nothing was read and not handed out (no part of a message waits).
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty() && self.fds.is_empty()
    }

    /// One `recvmsg` into the inbox.
    pub fn recv(&mut self, sock: impl AsFd) -> Result<usize, RecvError> {
        let mut chunk = [0u8; 4096];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            sock,
            &mut [IoSliceMut::new(&mut chunk)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = msg {
                self.fds.extend(fds);
            }
        }
        if self.fds.len() > MAX_FDS_QUEUED {
            return Err(RecvError::Malformed(Malformed(
                "descriptors no message claims",
            )));
        }
        if got.bytes == 0 {
            return Err(RecvError::Closed);
        }
        self.buf.extend_from_slice(&chunk[..got.bytes]);
        Ok(got.bytes)
    }

    /// The next complete message, if one is in; `fds_for(header, body)` says how many
    /// descriptors it carries. A message whose descriptors did not come with it is an
    /// error (see [`next_tolerant`](Self::next_tolerant) to answer it instead).
    pub fn next(
        &mut self,
        fds_for: impl Fn(&Header, &[u8]) -> usize,
    ) -> Result<Option<Message>, RecvError> {
        match self.next_tolerant(fds_for)? {
            Some((_, missing)) if missing > 0 => {
                Err(RecvError::Malformed(Malformed("descriptors missing")))
            }
            got => Ok(got.map(|(m, _)| m)),
        }
    }

    /// [`next`](Self::next), but a message whose descriptors did not come with it is
    /// handed out with those that did and how many are missing: the stream is still in
    /// step, so a server can answer that request with an error and read on.
    pub fn next_tolerant(
        &mut self,
        fds_for: impl Fn(&Header, &[u8]) -> usize,
    ) -> Result<Option<(Message, usize)>, RecvError> {
        let header = match Header::parse(&self.buf) {
            None => return Ok(None),
            Some(h) => h.map_err(RecvError::Malformed)?,
        };
        let len = header.len as usize;
        if self.buf.len() < len {
            return Ok(None);
        }
        let n = fds_for(&header, &self.buf[HEADER_LEN..len]);
        let got = n.min(self.fds.len());
        let fds = self.fds.drain(..got).collect();
        let body = self.buf[HEADER_LEN..len].to_vec();
        self.buf.drain(..len);
        Ok(Some((Message { header, body, fds }, n - got)))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::*;
    use crate::control::{Reply, Request, func};

    #[test]
    fn descriptors_travel_with_their_message() {
        let (a, b) = UnixStream::pair().unwrap();
        let seg = shm::Segment::create("t", 64).unwrap();
        seg.write(0, b"shared");
        let m1 = Request::AllocPd.encode(1);
        let m2 = Request::RegMr {
            pd: 1,
            access: 0,
            va: None,
            len: 64,
            offset: 0,
        }
        .encode(2);
        send_all(a.as_fd(), &m1, &[]).unwrap();
        send_all(a.as_fd(), &m2, &[seg.fd()]).unwrap();
        let mut inbox = Inbox::new();
        let mut got = Vec::new();
        while got.len() < 2 {
            inbox.recv(&b).unwrap();
            while let Some(m) = inbox
                .next(|h, _| crate::control::request_fds(h.func))
                .unwrap()
            {
                got.push(m);
            }
        }
        assert_eq!(got[0].header.txn, 1);
        assert!(got[0].fds.is_empty());
        assert_eq!(got[1].fds.len(), 1);
        let file = std::fs::File::from(got[1].fds.pop().unwrap());
        let mapped = shm::Segment::map(file, 64).unwrap();
        let mut s = [0u8; 6];
        mapped.read(0, &mut s);
        assert_eq!(&s, b"shared");

        // A message claiming a descriptor that never came is malformed; a closed peer is
        // Closed.
        send_all(a.as_fd(), &Reply::Done.encode(func::REG_MR, 3), &[]).unwrap();
        inbox.recv(&b).unwrap();
        assert!(matches!(inbox.next(|_, _| 1), Err(RecvError::Malformed(_))));
        drop(a);
        assert!(matches!(inbox.recv(&b), Err(RecvError::Closed)));
    }

    #[test]
    fn a_flood_of_descriptors_is_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let seg = shm::Segment::create("t", 64).unwrap();
        let mut inbox = Inbox::new();
        for _ in 0..5 {
            send_all(a.as_fd(), b"x", &[seg.fd(), seg.fd(), seg.fd(), seg.fd()]).unwrap();
        }
        let mut refused = false;
        for _ in 0..5 {
            if let Err(RecvError::Malformed(_)) = inbox.recv(&b) {
                refused = true;
                break;
            }
        }
        assert!(refused);
    }
}
