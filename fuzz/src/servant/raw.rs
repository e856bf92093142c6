//! A client of iwarpd's control socket written by hand, with no library between it and
//! the daemon (after `examples/tests/common/raw.rs`): what a hostile local application
//! can send. Every wait is bounded: a daemon that does not answer in time is a hang, and
//! the harness panics saying so.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use ipc::channel::{Inbox, RecvError, send_all};
use ipc::control::{Event, Reply, Request, func, reply_fds};

/// The longest the daemon may take to answer a request. Its own slowest answer is
/// `DestroyQp`, bounded at 5 s (the servant's last completions), so more is a hang.
pub(super) const REPLY_WAIT: Duration = Duration::from_secs(20);

/// A control connection made by hand.
#[derive(Debug)]
pub struct Raw {
    sock: UnixStream,
    inbox: Inbox,
    txn: u64,
    /// Events that came while a reply was awaited.
    events: VecDeque<Event>,
    /// Replies that came while another was awaited, by transaction.
    replies: HashMap<u64, (Reply, Vec<OwnedFd>)>,
}

/// A message from the daemon.
enum Msg {
    Reply(u64, Box<Reply>, Vec<OwnedFd>),
    Event(Event),
}

impl Raw {
    /// Connects and opens the device.
    pub fn open(path: &Path) -> Self {
        let sock = UnixStream::connect(path).expect("connect to iwarpd's control socket");
        sock.set_nonblocking(true).expect("non-blocking");
        let mut r = Self {
            sock,
            inbox: Inbox::new(),
            txn: 0,
            events: VecDeque::new(),
            replies: HashMap::new(),
        };
        match r
            .call(&Request::Open {
                pid: std::process::id(),
            })
            .0
        {
            Reply::Id(_) => r,
            other => panic!("Open: {other:?}"),
        }
    }

    /// Sends `req` with `fds` attached; its transaction number.
    pub fn send(&mut self, req: &Request, fds: &[BorrowedFd<'_>]) -> u64 {
        self.txn += 1;
        send_all(self.sock.as_fd(), &req.encode(self.txn), fds)
            .unwrap_or_else(|e| panic!("iwarpd closed the control socket: writing {req:?}: {e}"));
        self.txn
    }

    /// The next message if one is here.
    fn poll(&mut self) -> Option<Msg> {
        loop {
            match self.inbox.next(|h, b| reply_fds(h.func, b)) {
                Ok(Some(m)) => {
                    let h = m.header;
                    return Some(if h.func & func::REPLY != 0 {
                        let r = Reply::decode(h.func & !func::REPLY, &m.body)
                            .unwrap_or_else(|e| panic!("iwarpd's reply does not decode: {e}"));
                        Msg::Reply(h.txn, Box::new(r), m.fds)
                    } else {
                        Msg::Event(
                            Event::decode(h.func, &m.body)
                                .unwrap_or_else(|e| panic!("iwarpd's event does not decode: {e}")),
                        )
                    });
                }
                Ok(None) => {}
                Err(e) => panic!("iwarpd's control stream: {e:?}"),
            }
            match self.inbox.recv(&self.sock) {
                Ok(_) => {}
                Err(RecvError::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
                Err(e) => panic!("iwarpd closed the control socket: {e:?}"),
            }
        }
    }

    /// The reply to transaction `txn` if it is here (events and other replies on the way
    /// are kept).
    pub fn try_reply(&mut self, txn: u64) -> Option<(Reply, Vec<OwnedFd>)> {
        loop {
            if let Some(r) = self.replies.remove(&txn) {
                return Some(r);
            }
            match self.poll()? {
                Msg::Reply(t, r, fds) => drop(self.replies.insert(t, (*r, fds))),
                Msg::Event(ev) => self.events.push_back(ev),
            }
        }
    }

    /// The reply to transaction `txn` (events on the way are kept for [`Self::event`]).
    ///
    /// # Panics
    ///
    /// If none comes within [`REPLY_WAIT`]: the daemon hangs.
    pub fn reply(&mut self, txn: u64, what: &str) -> (Reply, Vec<OwnedFd>) {
        let until = Instant::now() + REPLY_WAIT;
        loop {
            if let Some(r) = self.try_reply(txn) {
                return r;
            }
            assert!(
                Instant::now() < until,
                "iwarpd did not answer {what} within {REPLY_WAIT:?}"
            );
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Sends `req` and waits for its reply.
    pub fn call(&mut self, req: &Request) -> (Reply, Vec<OwnedFd>) {
        self.call_with(req, &[])
    }

    /// [`call`](Self::call) with descriptors attached.
    pub fn call_with(&mut self, req: &Request, fds: &[BorrowedFd<'_>]) -> (Reply, Vec<OwnedFd>) {
        let txn = self.send(req, fds);
        self.reply(txn, &format!("{req:?}"))
    }

    /// The next event, if one is here.
    pub fn event(&mut self) -> Option<Event> {
        if let Some(ev) = self.events.pop_front() {
            return Some(ev);
        }
        loop {
            match self.poll()? {
                Msg::Event(ev) => return Some(ev),
                Msg::Reply(t, r, fds) => drop(self.replies.insert(t, (*r, fds))),
            }
        }
    }
}
