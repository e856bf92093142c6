//! A client of iwarpd's control socket written by hand, with no library between it and
//! the daemon: what a hostile (or merely broken) local application can send.

use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use ipc::channel::{Inbox, send_all};
use ipc::control::{Event, QpInfo, QueueDepths, Reply, Request, func, reply_fds};
use ipc::qpseg::{Doorbell, QpSegment, SQE_SIZE, Side};

/// A reply: its transaction, the answer, the descriptors that came with it.
type Answer = (u64, Reply, Vec<OwnedFd>);

/// A control connection made by hand.
pub struct Raw {
    pub sock: UnixStream,
    inbox: Inbox,
    txn: u64,
    /// Events that came while a reply was awaited.
    events: std::collections::VecDeque<Event>,
}

/// A queue pair made by hand: its rings and doorbells, mapped here.
pub struct RawQp {
    pub info: QpInfo,
    pub seg: QpSegment,
    pub to_daemon: Doorbell,
    pub to_client: Doorbell,
}

impl RawQp {
    /// Publishes `entries` on the send queue (as many as fit) and rings the daemon;
    /// how many went in.
    pub fn post(&self, entries: &[[u8; SQE_SIZE]]) -> usize {
        let n = entries.len().min(self.seg.sq_room() as usize);
        for (i, e) in entries[..n].iter().enumerate() {
            self.seg.sq_write(i as u32, e);
        }
        self.seg.sq_publish(n as u32);
        self.ring();
        n
    }

    /// Rings the daemon's doorbell (whether or not it parked).
    pub fn ring(&self) {
        let _ = self.seg.must_wake(Side::Daemon);
        self.to_daemon.ring();
    }
}

impl Raw {
    /// Connects without opening the device.
    pub fn attach(path: &Path) -> std::io::Result<Self> {
        let sock = UnixStream::connect(path)?;
        sock.set_read_timeout(Some(Duration::from_secs(20)))?;
        Ok(Self {
            sock,
            inbox: Inbox::new(),
            txn: 0,
            events: Default::default(),
        })
    }

    /// Connects and opens the device; panics if the daemon refuses.
    pub fn open(path: &Path) -> Self {
        let mut r = Self::attach(path).expect("connect to iwarpd");
        match r.call(&Request::Open { pid: 1 }).0 {
            Reply::Id(_) => r,
            other => panic!("Open: {other:?}"),
        }
    }

    /// Sends `req` with `fds` attached; its transaction number.
    pub fn send(&mut self, req: &Request, fds: &[BorrowedFd<'_>]) -> u64 {
        self.txn += 1;
        send_all(self.sock.as_fd(), &req.encode(self.txn), fds).expect("write to iwarpd");
        self.txn
    }

    /// The next message from the daemon: a reply (its transaction and answer) or an
    /// event; `None` once the daemon closed the connection (or sent nothing in 20 s).
    fn next(&mut self) -> Option<Result<Answer, Event>> {
        loop {
            if let Some(m) = self.inbox.next(|h, b| reply_fds(h.func, b)).ok()? {
                let h = m.header;
                return Some(if h.func & func::REPLY != 0 {
                    let r = Reply::decode(h.func & !func::REPLY, &m.body).expect("a reply");
                    Ok((h.txn, r, m.fds))
                } else {
                    Err(Event::decode(h.func, &m.body).expect("an event"))
                });
            }
            self.inbox.recv(&self.sock).ok()?;
        }
    }

    /// The reply to transaction `txn` (events on the way are kept for [`event`]);
    /// `None` if the daemon closed the connection first.
    pub fn reply(&mut self, txn: u64) -> Option<(Reply, Vec<OwnedFd>)> {
        loop {
            match self.next()? {
                Ok((t, r, fds)) if t == txn => return Some((r, fds)),
                Ok(_) => {}
                Err(ev) => self.events.push_back(ev),
            }
        }
    }

    /// Sends `req` and waits for its reply.
    pub fn call(&mut self, req: &Request) -> (Reply, Vec<OwnedFd>) {
        self.call_with(req, &[])
    }

    /// [`call`](Self::call) with descriptors attached.
    pub fn call_with(&mut self, req: &Request, fds: &[BorrowedFd<'_>]) -> (Reply, Vec<OwnedFd>) {
        let txn = self.send(req, fds);
        self.reply(txn)
            .unwrap_or_else(|| panic!("iwarpd closed the connection instead of answering {req:?}"))
    }

    /// The next event; `None` if none comes in 20 s.
    pub fn event(&mut self) -> Option<Event> {
        if let Some(ev) = self.events.pop_front() {
            return Some(ev);
        }
        loop {
            match self.next()? {
                Ok(_) => {}
                Err(ev) => return Some(ev),
            }
        }
    }

    /// A new protection domain.
    pub fn pd(&mut self) -> u32 {
        match self.call(&Request::AllocPd).0 {
            Reply::Pd { pd, .. } => pd,
            other => panic!("AllocPd: {other:?}"),
        }
    }

    /// Connects a queue pair of `pd` to `addr` (on `srq`, 0 for none) and maps its
    /// rings.
    pub fn connect(&mut self, pd: u32, srq: u32, addr: SocketAddr) -> RawQp {
        let (reply, fds) = self.call(&connect_request(pd, srq, addr));
        let Reply::Qp(info) = reply else {
            panic!("Connect: {reply:?}");
        };
        let mut fds = fds.into_iter();
        let seg = QpSegment::map(std::fs::File::from(fds.next().unwrap()), info.geometry)
            .expect("map the queue pair's rings");
        RawQp {
            info,
            seg,
            to_daemon: Doorbell::from_fd(fds.next().unwrap()),
            to_client: Doorbell::from_fd(fds.next().unwrap()),
        }
    }
}

/// The request connecting a queue pair of `pd` (on `srq`, 0 for none) to `addr`, queues
/// 16 deep.
pub fn connect_request(pd: u32, srq: u32, addr: SocketAddr) -> Request {
    Request::Connect {
        pd,
        srq,
        depths: QueueDepths { sq: 16, rq: 16 },
        addr,
        private: Default::default(),
        recvs: Vec::new(),
        rtr: 0,
    }
}

/// A memory file of `len` octets sealed as iwarpd requires (against growing and
/// shrinking), sparse: nothing of it is written.
pub fn sealed_memfd(len: u64) -> OwnedFd {
    use rustix::fs::{MemfdFlags, SealFlags};
    let fd = rustix::fs::memfd_create("hostile", MemfdFlags::ALLOW_SEALING).unwrap();
    rustix::fs::ftruncate(&fd, len).unwrap();
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
        .unwrap();
    fd
}
