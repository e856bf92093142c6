//! The body of `ipc_control`: control frames through [`ipc::channel::Inbox`] over a real
//! Unix socket pair, with real descriptors attached, then the decoders of the ABI.
//!
//! Input: one mode octet, then chunks. Each chunk is one `sendmsg` on one end of a socket
//! pair, followed by the receiving end's [`Inbox::recv`] and as many
//! [`Inbox::next`]/[`Inbox::next_tolerant`] calls as hand out messages.
//!
//! | mode bit | meaning |
//! |---|---|
//! | 0 | the client's side (replies and events, [`reply_fds`]) instead of the daemon's (requests, [`request_fds`]) |
//! | 1 | strict [`Inbox::next`] (the client's way) instead of `next_tolerant` (the daemon's) |
//! | 2 | the harness frames each chunk: its first two octets are a function code, the rest the body, behind a correct header |
//! | 3 | close the sending end after the last chunk: the inbox must then say `Closed` |
//!
//! A chunk is `[d][n][n octets]`: `(d & 7) % 5` descriptors attached (0 to [`MAX_FDS`],
//! what a sender may attach to one message; the kernel cuts more at the receiving buffer,
//! whose room depends on its alignment, so where more go the model could not say how
//! many arrive), `d >> 3` picks which of [`FILES`] memory files each is a duplicate of
//! (so the order they come out in can be checked), `n` octets of message (at most 255; a
//! chunk with no octets carries no descriptors, as a stream socket sends none without
//! data).
//!
//! Invariants: no panic; the inbox hands out exactly the messages a reference model of
//! the framing finds, with the header the model parses and the body it cuts; each message
//! carries the descriptors its function declares (exactly, with `next`; those that came,
//! plus the count missing, with `next_tolerant`), and they are the ones sent, in the
//! order sent; more than [`MAX_FDS_QUEUED`] waiting is refused; every request, reply and
//! event that decodes encodes to a message that decodes to the same value, with the same
//! function, transaction and descriptor count.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::OnceLock;

use ipc::channel::{Inbox, MAX_FDS, MAX_FDS_QUEUED, Message, RecvError, send_some};
use ipc::control::{
    Event, HEADER_LEN, Header, MAX_MESSAGE, Reply, Request, VERSION, func, reply_fds, request_fds,
};

/// Distinct memory files whose duplicates are attached: each one's inode names it.
pub(crate) const FILES: usize = 4;

/// The memory files attached (created once), and their inode numbers.
fn files() -> &'static [(OwnedFd, u64); FILES] {
    static FILES_: OnceLock<[(OwnedFd, u64); FILES]> = OnceLock::new();
    FILES_.get_or_init(|| {
        std::array::from_fn(|i| {
            let fd = rustix::fs::memfd_create(format!("fuzz-{i}"), rustix::fs::MemfdFlags::CLOEXEC)
                .expect("memfd_create");
            let ino = inode(&fd);
            (fd, ino)
        })
    })
}

fn inode(fd: impl AsFd) -> u64 {
    rustix::fs::fstat(fd).expect("fstat").st_ino
}

/// Which side of the control channel reads.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Side {
    Daemon,
    Client,
}

/// Sends `msg` with duplicates of `which` attached, as a client does
/// ([`send_some`]); the octets sent (0 if refused).
fn send(sock: &UnixStream, msg: &[u8], which: &[usize]) -> usize {
    let fds: Vec<OwnedFd> = which
        .iter()
        .map(|&i| files()[i].0.try_clone().expect("dup"))
        .collect();
    let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    send_some(sock.as_fd(), msg, &borrowed).unwrap_or(0)
}

/// What the harness expects of the inbox: the octets and descriptors it holds.
#[derive(Default)]
struct Model {
    buf: Vec<u8>,
    /// Inodes of the descriptors waiting, in arrival order.
    fds: VecDeque<u64>,
    /// Messages that decoded and round-tripped.
    decoded: usize,
}

/// Runs one input (see the module documentation); how many messages decoded (and
/// round-tripped).
pub fn run_control(data: &[u8]) -> usize {
    let Some((&mode, mut rest)) = data.split_first() else {
        return 0;
    };
    let side = if mode & 1 != 0 {
        Side::Client
    } else {
        Side::Daemon
    };
    let strict = mode & 2 != 0;
    let framed = mode & 4 != 0;
    let close_at_end = mode & 8 != 0;
    let (a, b) = UnixStream::pair().expect("socketpair");
    b.set_nonblocking(true).expect("nonblocking");
    let mut inbox = Inbox::new();
    let mut model = Model::default();
    let mut txn = 0u64;
    while rest.len() >= 2 {
        let (d, n) = (rest[0], usize::from(rest[1]));
        let body = &rest[2..(2 + n).min(rest.len())];
        rest = &rest[(2 + n).min(rest.len())..];
        let msg = if framed && body.len() >= 2 {
            txn += 1;
            let f = u16::from_le_bytes([body[0], body[1]]);
            let mut m = Vec::with_capacity(HEADER_LEN + body.len() - 2);
            m.extend_from_slice(&((HEADER_LEN + body.len() - 2) as u32).to_le_bytes());
            m.extend_from_slice(&f.to_le_bytes());
            m.extend_from_slice(&VERSION.to_le_bytes());
            m.extend_from_slice(&txn.to_le_bytes());
            m.extend_from_slice(&body[2..]);
            m
        } else {
            body.to_vec()
        };
        let nfds = if msg.is_empty() {
            0
        } else {
            usize::from(d & 7) % (MAX_FDS + 1)
        };
        let which: Vec<usize> = (0..nfds)
            .map(|i| (usize::from(d >> 3) + i) % FILES)
            .collect();
        let sent = send(&a, &msg, &which);
        if sent == 0 {
            continue;
        }
        assert_eq!(sent, msg.len(), "a socket pair takes a short message whole");
        let delivered = which.len();
        match inbox.recv(&b) {
            Ok(got) => {
                assert_eq!(got, sent, "one recv reads one chunk");
                model.buf.extend_from_slice(&msg);
                model.fds.extend(which.iter().map(|&i| files()[i].1));
                assert!(
                    model.fds.len() <= MAX_FDS_QUEUED,
                    "{} descriptors waiting were not refused",
                    model.fds.len()
                );
            }
            Err(RecvError::Malformed(_)) => {
                assert!(
                    model.fds.len() + delivered > MAX_FDS_QUEUED,
                    "refused with {} descriptors waiting",
                    model.fds.len() + delivered
                );
                return model.decoded;
            }
            Err(e) => panic!("recv after a send: {e:?}"),
        }
        if !drain(&mut inbox, &mut model, side, strict) {
            return model.decoded;
        }
    }
    if close_at_end {
        drop(a);
        match inbox.recv(&b) {
            Err(RecvError::Closed) => {}
            other => panic!("recv after the peer closed: {other:?}"),
        }
    }
    model.decoded
}

/// Hands out every complete message; false once the connection must be dropped.
fn drain(inbox: &mut Inbox, model: &mut Model, side: Side, strict: bool) -> bool {
    let fds_for = |h: &Header, body: &[u8]| match side {
        Side::Daemon => request_fds(h.func),
        Side::Client => reply_fds(h.func, body),
    };
    loop {
        // What the reference model expects next.
        let want = match Header::parse(&model.buf) {
            None => None,
            Some(Err(_)) => {
                let got = if strict {
                    inbox.next(fds_for).map(|m| m.map(|m| (m, 0)))
                } else {
                    inbox.next_tolerant(fds_for)
                };
                assert!(
                    matches!(got, Err(RecvError::Malformed(_))),
                    "a header of length {:?} was not refused: {got:?}",
                    &model.buf[..4]
                );
                return false;
            }
            Some(Ok(h)) if (h.len as usize) > model.buf.len() => None,
            Some(Ok(h)) => Some(h),
        };
        let got = if strict {
            match inbox.next(fds_for) {
                Ok(m) => Ok(m.map(|m| (m, 0))),
                Err(e) => Err(e),
            }
        } else {
            inbox.next_tolerant(fds_for)
        };
        let Some(h) = want else {
            assert!(
                matches!(got, Ok(None)),
                "a message handed out before it was complete: {got:?}"
            );
            return true;
        };
        let len = h.len as usize;
        let body = model.buf[HEADER_LEN..len].to_vec();
        let declared = fds_for(&h, &body);
        model.buf.drain(..len);
        let came = declared.min(model.fds.len());
        let inodes: Vec<u64> = model.fds.drain(..came).collect();
        match got {
            Ok(Some((m, missing))) => {
                assert_eq!(m.header, h);
                assert_eq!(m.body, body);
                assert_eq!(m.fds.len() + missing, declared, "descriptor count");
                assert!(!strict || missing == 0);
                let out: Vec<u64> = m.fds.iter().map(inode).collect();
                assert_eq!(out, inodes, "descriptors out of order or not the ones sent");
                model.decoded += usize::from(check_message(&m, side));
            }
            Err(RecvError::Malformed(_)) if strict && came < declared => return false,
            other => panic!("expected {h:?} with {declared} descriptor(s): {other:?}"),
        }
    }
}

/// Every decoder on the body; round trips of what decodes (true if the reader's decoder
/// took it).
fn check_message(m: &Message, side: Side) -> bool {
    let (h, body) = (m.header, &m.body[..]);
    assert!(HEADER_LEN + body.len() <= MAX_MESSAGE);
    // Whoever reads it, no decoder panics on any body.
    let req = Request::decode(h.func, body);
    let rep = Reply::decode(h.func & !func::REPLY, body);
    let ev = Event::decode(h.func, body);
    match side {
        Side::Daemon => req.map(|req| request_round_trip(&req, h)).is_ok(),
        Side::Client if h.func & func::REPLY != 0 => {
            rep.map(|rep| reply_round_trip(&rep, h, body)).is_ok()
        }
        Side::Client => ev
            .map(|ev| {
                let enc = ev.encode();
                let h2 = parse_own(&enc);
                assert_eq!((h2.func, h2.txn), (h.func, 0));
                assert_eq!(Event::decode(h2.func, &enc[HEADER_LEN..]).as_ref(), Ok(&ev));
                assert_eq!(reply_fds(h.func, body), 0, "events carry no descriptors");
            })
            .is_ok(),
    }
}

/// The header of a message this build encoded: well formed, its own length.
fn parse_own(enc: &[u8]) -> Header {
    let h = Header::parse(enc)
        .expect("a whole header")
        .expect("a header within the limits");
    assert_eq!(h.len as usize, enc.len());
    assert_eq!(h.version, VERSION);
    h
}

/// `Request::decode` then `encode` then `decode` gives the same request, function and
/// transaction, hence the same descriptor count.
pub(crate) fn request_round_trip(req: &Request, h: Header) {
    assert_eq!(req.func(), h.func, "{req:?}");
    let enc = req.encode(h.txn);
    let h2 = parse_own(&enc);
    assert_eq!((h2.func, h2.txn), (h.func, h.txn));
    assert_eq!(
        Request::decode(h2.func, &enc[HEADER_LEN..]).as_ref(),
        Ok(req),
        "request round trip"
    );
    assert_eq!(request_fds(h2.func), request_fds(h.func));
}

/// The same for a reply: value, function, transaction and declared descriptors. An error
/// text longer than a blob holds once made valid UTF-8 is cut by `encode` (a lossy
/// decode can triple it): only its length is checked then.
pub(crate) fn reply_round_trip(rep: &Reply, h: Header, body: &[u8]) {
    let f = h.func & !func::REPLY;
    let enc = rep.encode(f, h.txn);
    let h2 = parse_own(&enc);
    assert_eq!((h2.func, h2.txn), (h.func, h.txn));
    let back = Reply::decode(f, &enc[HEADER_LEN..]).expect("our own reply decodes");
    match (rep, &back) {
        (Reply::Error { text, .. }, Reply::Error { text: t2, .. })
            if text.len() > usize::from(u16::MAX) =>
        {
            assert!(t2.len() <= text.len() + 2);
        }
        _ => assert_eq!(&back, rep, "reply round trip"),
    }
    assert_eq!(
        reply_fds(h2.func, &enc[HEADER_LEN..]),
        reply_fds(h.func, body),
        "descriptor count of {rep:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc::control::{QueueDepths, func};

    /// A chunk of the input format: `d`, the length, the octets.
    fn chunk(d: u8, msg: &[u8]) -> Vec<u8> {
        let mut v = vec![d, msg.len() as u8];
        v.extend_from_slice(msg);
        v
    }

    #[test]
    fn a_registration_and_its_descriptor_come_out_together() {
        let reg = Request::RegMr {
            pd: 1,
            access: 0x0f,
            va: None,
            len: 4096,
            offset: 0,
        }
        .encode(7);
        // Split in three reads, the descriptor with the first octets.
        let mut input = vec![0];
        input.extend(chunk(1 | 2 << 3, &reg[..5]));
        input.extend(chunk(0, &reg[5..20]));
        input.extend(chunk(0, &reg[20..]));
        input.extend(chunk(0, &Request::AllocPd.encode(8)));
        assert_eq!(run_control(&input), 2);
        // The same through the strict reader and a close.
        input[0] = 2 | 8;
        assert_eq!(run_control(&input), 2);
        // A registration without its descriptor, then one with it: the tolerant reader
        // hands the first out saying one is missing, and reads on; the strict one drops
        // the connection.
        let mut late = vec![0];
        late.extend(chunk(0, &reg));
        late.extend(chunk(1, &reg));
        assert_eq!(run_control(&late), 2);
        late[0] = 2;
        assert_eq!(run_control(&late), 0);
    }

    #[test]
    fn a_qp_reply_with_its_three_descriptors_round_trips() {
        let info = ipc::control::QpInfo {
            qp: 1,
            num: 2,
            ird: 3,
            ord: 4,
            mulpdu: 1448,
            extensions: 0,
            private: bytes::Bytes::from_static(b"p"),
            geometry: ipc::qpseg::Geometry::default(),
            framing: rdmap::Framing::default(),
        };
        let m = Reply::Qp(info).encode(func::CONNECT, 3);
        let mut input = vec![1 | 2];
        input.extend(chunk(3, &m));
        input.extend(chunk(
            0,
            &Event::QpEnded {
                qp: 1,
                how: 6,
                term: [0, 0],
            }
            .encode(),
        ));
        assert_eq!(run_control(&input), 2);
        let h = Header::parse(&m).unwrap().unwrap();
        reply_round_trip(
            &Reply::decode(func::CONNECT, &m[HEADER_LEN..]).unwrap(),
            h,
            &m[HEADER_LEN..],
        );
    }

    #[test]
    fn framed_chunks_reach_the_decoders_and_floods_are_refused() {
        let connect = Request::Connect {
            pd: 1,
            srq: 0,
            depths: QueueDepths { sq: 4, rq: 4 },
            addr: "127.0.0.1:1".parse().unwrap(),
            private: bytes::Bytes::new(),
            recvs: Vec::new(),
            rtr: 0,
        }
        .encode(1);
        let mut framed = func::CONNECT.to_le_bytes().to_vec();
        framed.extend_from_slice(&connect[HEADER_LEN..]);
        let mut input = vec![4];
        input.extend(chunk(0, &framed));
        assert_eq!(run_control(&input), 1);
        // Four descriptors a chunk, none claimed: the fifth chunk makes 20 waiting, which
        // is refused.
        let mut flood = vec![0];
        for _ in 0..5 {
            flood.extend(chunk(4, b"xx"));
        }
        assert_eq!(run_control(&flood), 0);
        // A header whose length is out of range.
        let mut bad = vec![0];
        bad.extend(chunk(0, &[0xff; 16]));
        assert_eq!(run_control(&bad), 0);
    }
}
