//! Daemon mode's library side (seed 002's host module driver): a [`Device`](crate::Device)
//! whose engine is the local `iwarpd`, reached over its control socket
//! ([`Client`]), with one shared-memory segment per queue pair ([`qp`]).
//!
//! Requests are answered by a reader thread (so that a synchronous verb such as
//! `alloc_pd` can wait for its reply from inside an async task without needing the
//! runtime); replies are matched to requests by their transaction context. The same
//! thread turns events into connection requests and queue pair ends.

pub(crate) mod qp;
mod shared_socket;
pub(crate) mod srq;

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures::channel::oneshot;
use ipc::channel::{Inbox, RecvError, send_all};
use ipc::control::{Event, QueueDepths, Reply, Request, end, func, reply_fds};
use rdmap::{QpEnd, TermCode};
use tokio::sync::{mpsc, watch};

/// What went wrong talking to `iwarpd`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DaemonError {
    /// The daemon cannot be reached, or went away: the message names the socket and what
    /// to do.
    Unreachable(String),
    /// The daemon refused the request: its reason.
    Refused(String),
    /// The daemon's TCP connect failed with this kind (refused, unreachable, timed out):
    /// its words.
    Tcp(io::ErrorKind, String),
    /// The peer rejected the daemon's connect, with this private data and what its
    /// answer refused.
    Rejected(Bytes, rdmap::Refused),
    /// `IWARP_DEVICE` names no device this library knows: the message lists the forms it
    /// takes.
    NoSuchDevice(String),
}

impl fmt::Display for DaemonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreachable(m) | Self::Refused(m) | Self::Tcp(_, m) | Self::NoSuchDevice(m) => {
                f.write_str(m)
            }
            Self::Rejected(p, refused) => write!(
                f,
                "the peer rejected the connection ({} octets of private data){refused}",
                p.len()
            ),
        }
    }
}

impl std::error::Error for DaemonError {}

impl From<DaemonError> for io::Error {
    fn from(e: DaemonError) -> Self {
        match e {
            DaemonError::Unreachable(m) => Self::new(io::ErrorKind::NotConnected, m),
            DaemonError::Refused(m) => Self::other(m),
            DaemonError::NoSuchDevice(m) => Self::new(io::ErrorKind::InvalidInput, m),
            DaemonError::Tcp(kind, m) => Self::new(kind, m),
            e @ DaemonError::Rejected(..) => {
                Self::new(io::ErrorKind::ConnectionRefused, e.to_string())
            }
        }
    }
}

/// A connection request the daemon announced.
#[derive(Debug)]
pub(crate) struct IncomingEvent {
    pub(crate) id: u32,
    pub(crate) peer: SocketAddr,
    pub(crate) private: Bytes,
}

type Answer = Result<(Reply, Vec<OwnedFd>), DaemonError>;

#[derive(Default)]
struct Dispatch {
    waiting: HashMap<u64, oneshot::Sender<Answer>>,
    listeners: HashMap<u32, mpsc::UnboundedSender<IncomingEvent>>,
    /// Connection requests of listeners whose Listen reply arrived and whose
    /// [`Listener`](crate::Listener) does not take them yet: routed by the reader as it
    /// reads the reply, so that a request right behind it is never lost.
    routed: HashMap<u32, mpsc::UnboundedReceiver<IncomingEvent>>,
    qps: HashMap<u32, watch::Sender<Option<QpEnd>>>,
    gone: Option<String>,
    /// The device was dropped: the reader ends quietly.
    closing: bool,
}

/// A queued registration's request, sent and not yet answered.
#[derive(Debug)]
pub(crate) struct Registration {
    rx: oneshot::Receiver<Answer>,
    path: PathBuf,
}

impl Registration {
    /// Waits for the daemon's answer (cancel safe: the answer stays for the next wait).
    pub(crate) async fn done(&mut self) -> Result<(), DaemonError> {
        Client::answer((&mut self.rx).await, &self.path).map(|_| ())
    }
}

/// The control connection to the local `iwarpd`.
pub(crate) struct Client {
    /// This process's regions by STag, to copy a small gather list into a pushed message.
    regions: Mutex<HashMap<u32, (std::sync::Weak<shm::Region>, u64)>>,
    /// The library's push policy is on (seed 000).
    push: bool,
    /// New queue pairs ask iwarpd for their socket (the push path that skips it).
    push_socket: bool,
    /// The queue depths every queue pair asks for.
    depths: QueueDepths,
    /// The ready-to-receive types connections offer (peer-to-peer MPA), 0: iwarpd's own.
    rtr: u8,
    path: PathBuf,
    /// The path as text for `Copy` errors: leaked once per device opened.
    path_str: &'static str,
    /// "iwarpd at PATH", what a queue pair's end names when the daemon goes away
    /// ([`QpEnd::DeviceLost`]); leaked once per device opened.
    daemon_str: &'static str,
    sock: UnixStream,
    /// STags being reserved for queued registrations, oldest first: one is kept under
    /// way so that the next registration finds it answered.
    reserving: Mutex<std::collections::VecDeque<oneshot::Receiver<Answer>>>,
    /// Held while a message is written (the reader thread writes too: a reject of a
    /// request for a listener already closed).
    send: Arc<Mutex<()>>,
    next_txn: AtomicU64,
    dispatch: Arc<Mutex<Dispatch>>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").field("path", &self.path).finish()
    }
}

impl Drop for Client {
    /// The last handle of the device is gone: shutting the socket down ends the reader
    /// thread, and the daemon sees the session end and releases what it held.
    fn drop(&mut self) {
        lock(&self.dispatch).closing = true;
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
    }
}

fn lock(d: &Mutex<Dispatch>) -> std::sync::MutexGuard<'_, Dispatch> {
    d.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Client {
    /// Connects to the daemon at `path` and opens the device; its queue pairs push (or
    /// not), through their own socket (`push_socket`) or the daemon, and ask for `depths`.
    pub(crate) fn connect(
        path: &Path,
        (push, push_socket): (bool, bool),
        depths: QueueDepths,
        rtr: u8,
    ) -> Result<Arc<Self>, DaemonError> {
        let sock = UnixStream::connect(path)
            .map_err(|e| DaemonError::Unreachable(unreachable(path, &e)))?;
        let reader = sock
            .try_clone()
            .map_err(|e| DaemonError::Unreachable(format!("{}: {e}", path.display())))?;
        let client = Arc::new(Self {
            regions: Mutex::new(HashMap::new()),
            push,
            push_socket,
            depths,
            rtr,
            path: path.to_owned(),
            path_str: Box::leak(path.display().to_string().into_boxed_str()),
            daemon_str: Box::leak(format!("iwarpd at {}", path.display()).into_boxed_str()),
            sock,
            reserving: Mutex::default(),
            send: Arc::new(Mutex::new(())),
            next_txn: AtomicU64::new(1),
            dispatch: Arc::new(Mutex::new(Dispatch::default())),
        });
        let dispatch = client.dispatch.clone();
        let writer = (
            client
                .sock
                .try_clone()
                .map_err(|e| DaemonError::Unreachable(format!("{}: {e}", path.display())))?,
            client.send.clone(),
        );
        let shown = (path.display().to_string(), client.daemon_str);
        static CLIENTS: AtomicU64 = AtomicU64::new(0);
        std::thread::Builder::new()
            .name(format!(
                "iwarp-ctl-{}",
                CLIENTS.fetch_add(1, Ordering::Relaxed) % 100_000
            ))
            .spawn(move || read_loop(reader, writer, dispatch, shown))
            .map_err(|e| DaemonError::Unreachable(format!("no control thread: {e}")))?;
        client.call(&Request::Open {
            pid: std::process::id(),
        })?;
        Ok(client)
    }

    /// True if work requests may be pushed.
    pub(crate) fn push_enabled(&self) -> bool {
        self.push
    }

    /// True if new queue pairs ask for their socket.
    pub(crate) fn push_socket(&self) -> bool {
        self.push && self.push_socket
    }

    /// The queue depths every queue pair asks for.
    pub(crate) fn depths(&self) -> QueueDepths {
        self.depths
    }

    /// The ready-to-receive types connections offer as the initiator (0: iwarpd's own
    /// setting).
    pub(crate) fn rtr(&self) -> u8 {
        self.rtr
    }

    /// Records a region this process registered (for pushing small gather lists inline).
    pub(crate) fn remember_region(&self, stag: rdmap::STag, mem: &Arc<shm::Region>, base: u64) {
        let mut r = self.regions.lock().unwrap_or_else(PoisonError::into_inner);
        r.retain(|_, (w, _)| w.strong_count() > 0);
        r.insert(stag.to_u32(), (Arc::downgrade(mem), base));
    }

    /// Copies the octets of `sge` out of this process's region into `out` (exactly
    /// `sge.len` octets long), if it is one of them and the range lies inside.
    pub(crate) fn copy_local(&self, sge: &rdmap::Sge, out: &mut [u8]) -> bool {
        let r = self.regions.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((mem, base)) = r.get(&sge.stag.to_u32()) else {
            return false;
        };
        let Some(mem) = mem.upgrade() else {
            return false;
        };
        let Some(off) = sge.to.checked_sub(*base) else {
            return false;
        };
        let Ok(view) = mem.view(off as usize, sge.len as usize) else {
            return false;
        };
        out.copy_from_slice(&view);
        true
    }

    /// The control socket's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The same, as `'static` text.
    pub(crate) fn path_str(&self) -> &'static str {
        self.path_str
    }

    /// How a queue pair that lost this daemon ends.
    pub(crate) fn lost(&self) -> QpEnd {
        QpEnd::DeviceLost(self.daemon_str)
    }

    fn start(
        &self,
        req: &Request,
        fds: &[BorrowedFd<'_>],
    ) -> Result<oneshot::Receiver<Answer>, DaemonError> {
        let txn = self.next_txn.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut d = lock(&self.dispatch);
            if let Some(why) = &d.gone {
                return Err(DaemonError::Unreachable(why.clone()));
            }
            d.waiting.insert(txn, tx);
        }
        let msg = req.encode(txn);
        let sent = {
            let _g = self.send.lock().unwrap_or_else(PoisonError::into_inner);
            send_all(self.sock.as_fd(), &msg, fds)
        };
        if let Err(e) = sent {
            lock(&self.dispatch).waiting.remove(&txn);
            return Err(DaemonError::Unreachable(format!(
                "iwarpd at {} cannot be written to: {e} (it exited or was restarted; open the \
                 device again)",
                self.path.display()
            )));
        }
        Ok(rx)
    }

    fn answer(got: Result<Answer, oneshot::Canceled>, path: &Path) -> Answer {
        let (reply, fds) = got.unwrap_or_else(|_| {
            Err(DaemonError::Unreachable(format!(
                "iwarpd at {} went away",
                path.display()
            )))
        })?;
        match reply {
            Reply::Rejected {
                private_data,
                refused,
            } => Err(DaemonError::Rejected(private_data, refused)),
            Reply::Error { code, text } => Err(match ipc::control::error::connect_kind(code) {
                Some(kind) => DaemonError::Tcp(kind, format!("iwarpd: {text}")),
                None => DaemonError::Refused(format!("iwarpd: {text}")),
            }),
            r => Ok((r, fds)),
        }
    }

    /// Sends `req` and waits for the reply (blocking this thread for one local round
    /// trip, as an ioctl to a kernel driver would).
    pub(crate) fn call(&self, req: &Request) -> Result<Reply, DaemonError> {
        self.call_with(req, &[]).map(|(r, _)| r)
    }

    /// [`call`](Self::call) with descriptors attached, returning the reply's.
    pub(crate) fn call_with(&self, req: &Request, fds: &[BorrowedFd<'_>]) -> Answer {
        let rx = self.start(req, fds)?;
        Self::answer(futures::executor::block_on(rx), &self.path)
    }

    /// Sends `req` and awaits the reply.
    pub(crate) async fn call_async(&self, req: &Request) -> Answer {
        let rx = self.start(req, &[])?;
        Self::answer(rx.await, &self.path)
    }

    /// An STag reserved for a queued registration: one reserved ahead, usually already
    /// answered, while the next one's reservation starts (a round trip only for the
    /// first registration, or a burst faster than the daemon answers).
    pub(crate) fn reserved_stag(&self) -> Result<rdmap::STag, DaemonError> {
        let ahead = self
            .reserving
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        let rx = match ahead {
            Some(rx) => rx,
            None => self.start(&Request::ReserveStag, &[])?,
        };
        if let Ok(next) = self.start(&Request::ReserveStag, &[]) {
            self.reserving
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push_back(next);
        }
        match Self::answer(futures::executor::block_on(rx), &self.path)? {
            (Reply::Id(stag), _) => Ok(rdmap::STag::from_u32(stag)),
            _ => Err(DaemonError::Refused("iwarpd answered with no STag".into())),
        }
    }

    /// Sends `req` with `fds` and returns at once; the returned registration says how
    /// the daemon answered.
    pub(crate) fn start_registration(
        &self,
        req: &Request,
        fds: &[BorrowedFd<'_>],
    ) -> Result<Registration, DaemonError> {
        let rx = self.start(req, fds)?;
        Ok(Registration {
            rx,
            path: self.path.clone(),
        })
    }

    /// Sends `req` without waiting for its reply (teardown from `Drop`).
    pub(crate) fn tell(&self, req: &Request) {
        if let Ok(rx) = self.start(req, &[]) {
            drop(rx);
        }
    }

    /// True once the connection to the daemon is lost (it exited or was restarted).
    pub(crate) fn is_gone(&self) -> bool {
        lock(&self.dispatch).gone.is_some()
    }

    /// The daemon's connection requests on listener `id` (routed since its Listen reply
    /// was read, so none is lost in between).
    pub(crate) fn listener_events(&self, id: u32) -> mpsc::UnboundedReceiver<IncomingEvent> {
        let mut d = lock(&self.dispatch);
        d.routed.remove(&id).unwrap_or_else(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            d.listeners.insert(id, tx);
            rx
        })
    }

    /// Forgets listener `id`.
    pub(crate) fn drop_listener(&self, id: u32) {
        {
            let mut d = lock(&self.dispatch);
            d.listeners.remove(&id);
            d.routed.remove(&id);
        }
        self.tell(&Request::CloseListener { id });
    }

    /// Where the end of queue pair `id` will be announced.
    pub(crate) fn qp_end(&self, id: u32) -> watch::Receiver<Option<QpEnd>> {
        let mut d = lock(&self.dispatch);
        let gone = d.gone.is_some();
        let tx = d.qps.entry(id).or_insert_with(|| watch::channel(None).0);
        if gone {
            tx.send_replace(Some(self.lost()));
        }
        tx.subscribe()
    }

    /// Forgets queue pair `id` and destroys it in the daemon.
    pub(crate) fn drop_qp(&self, id: u32) {
        lock(&self.dispatch).qps.remove(&id);
        self.tell(&Request::DestroyQp { qp: id });
    }
}

fn read_loop(
    sock: UnixStream,
    (writer, send): (UnixStream, Arc<Mutex<()>>),
    dispatch: Arc<Mutex<Dispatch>>,
    (path, daemon): (String, &'static str),
) {
    let mut inbox = Inbox::new();
    let why = 'read: loop {
        if let Err(e) = inbox.recv(&sock) {
            break match e {
                RecvError::Closed => format!(
                    "iwarpd at {path} closed the connection (it exited or was restarted): its \
                     queue pairs are gone; open the device again"
                ),
                RecvError::Io(e) => format!("the connection to iwarpd at {path} failed: {e}"),
                RecvError::Malformed(m) => format!("iwarpd at {path} sent garbage: {m}"),
            };
        }
        loop {
            let msg = match inbox.next(|h, body| reply_fds(h.func, body)) {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) => break 'read format!("iwarpd at {path}: {e:?}"),
            };
            let h = msg.header;
            if h.func & func::REPLY != 0 {
                let reply = Reply::decode(h.func & !func::REPLY, &msg.body);
                let mut d = lock(&dispatch);
                if let Ok(Reply::Listening { id, .. }) = &reply {
                    // Routed before anything behind the reply is read.
                    let (tx, rx) = mpsc::unbounded_channel();
                    d.listeners.insert(*id, tx);
                    d.routed.insert(*id, rx);
                }
                let tx = d.waiting.remove(&h.txn);
                drop(d);
                if let Some(tx) = tx {
                    let _ = tx.send(match reply {
                        Ok(r) => Ok((r, msg.fds)),
                        Err(m) => Err(DaemonError::Refused(format!("iwarpd's reply: {m}"))),
                    });
                }
                continue;
            }
            match Event::decode(h.func, &msg.body) {
                Ok(Event::Incoming {
                    listener,
                    id,
                    peer,
                    private,
                }) => {
                    let routed = lock(&dispatch)
                        .listeners
                        .get(&listener)
                        .map(|tx| tx.send(IncomingEvent { id, peer, private }).is_ok());
                    if routed != Some(true) {
                        // Its listener was closed here: the peer hears so now, not at its
                        // MPA timeout.
                        let reject = Request::Reject {
                            incoming: id,
                            private: Bytes::new(),
                        };
                        let _g = send.lock().unwrap_or_else(PoisonError::into_inner);
                        let _ = send_all(writer.as_fd(), &reject.encode(0), &[]);
                    }
                }
                Ok(Event::QpEnded { qp, how, term }) => {
                    let t = TermCode::from_wire(term);
                    let how = match how {
                        end::CLOSED => QpEnd::Closed,
                        end::TERMINATED_BY_PEER => QpEnd::TerminatedByPeer(t),
                        end::TERMINATED => QpEnd::Terminated(t),
                        end::TIMED_OUT => QpEnd::TimedOut,
                        end::CQ_OVERRUN => QpEnd::CqOverrun,
                        end::MISUSED => QpEnd::Misused,
                        _ => QpEnd::ConnectionLost,
                    };
                    let mut d = lock(&dispatch);
                    let tx = d.qps.entry(qp).or_insert_with(|| watch::channel(None).0);
                    tx.send_replace(Some(how));
                }
                Err(m) => {
                    tracing::warn!(error = %m, "iwarpd sent an event this library does not know")
                }
            }
        }
    };
    let mut d = lock(&dispatch);
    if !d.closing {
        tracing::warn!("{why}");
    }
    d.gone = Some(why.clone());
    for (_, tx) in d.waiting.drain() {
        let _ = tx.send(Err(DaemonError::Unreachable(why.clone())));
    }
    d.listeners.clear();
    d.routed.clear();
    for tx in d.qps.values() {
        tx.send_if_modified(|end| {
            let changed = end.is_none();
            end.get_or_insert(QpEnd::DeviceLost(daemon));
            changed
        });
    }
}

/// The control socket named by `IWARP_DEVICE`: `unix:PATH`, or `unix` (or `daemon`) for
/// iwarpd's default path; `None` (the embedded engine) when it is unset, empty or
/// `embedded`. Anything else is refused by name: a typo must not quietly run the engine
/// in this process instead of the daemon the user meant.
pub(crate) fn from_env() -> Result<Option<PathBuf>, DaemonError> {
    let Some(v) = std::env::var_os("IWARP_DEVICE") else {
        return Ok(None);
    };
    parse_device(&v.to_string_lossy())
}

fn parse_device(v: &str) -> Result<Option<PathBuf>, DaemonError> {
    match v.trim() {
        "" | "embedded" => Ok(None),
        "unix" | "daemon" => Ok(Some(ipc::default_control_path())),
        other => match other.strip_prefix("unix:") {
            Some(path) if !path.is_empty() => Ok(Some(PathBuf::from(path))),
            _ => Err(DaemonError::NoSuchDevice(format!(
                "IWARP_DEVICE={other:?} names no device. It takes `unix:PATH` (the control \
                 socket of an iwarpd, for example unix:{}), `unix` (iwarpd's default \
                 socket), or `embedded` (the engine inside this process, as when it is \
                 unset)",
                ipc::default_control_path().display()
            ))),
        },
    }
}

/// What to tell a user whose connect to the control socket at `path` failed with `e`.
fn unreachable(path: &Path, e: &io::Error) -> String {
    use std::os::unix::fs::MetadataExt as _;
    let shown = path.display();
    match e.kind() {
        io::ErrorKind::PermissionDenied => {
            let who = std::fs::metadata(path).map_or_else(
                |_| "its directory may not be searched by this user".to_owned(),
                |m| {
                    format!(
                        "it has mode {:o}, owner uid {} and group gid {}",
                        m.mode() & 0o7777,
                        m.uid(),
                        m.gid()
                    )
                },
            );
            format!(
                "iwarpd at {shown} may not be used by this user (uid {}): {who}. Run this \
                 program as iwarpd's user, or let others in: `chmod 666 {shown}` (or give \
                 the socket a group this user is in)",
                rustix::process::getuid().as_raw()
            )
        }
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => format!(
            "cannot reach iwarpd at {shown}: {e}. Is it running? Start it with `iwarpd \
             --listen 0.0.0.0:4791 --control {shown}`, or unset IWARP_DEVICE to run the \
             engine inside this process"
        ),
        _ => format!("cannot reach iwarpd at {shown}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc::control::Header;

    /// A daemon played by the test: the socket a client attached to, and what it sent.
    struct FakeDaemon {
        sock: UnixStream,
        inbox: Inbox,
    }

    impl FakeDaemon {
        /// Attaches a client to a fake daemon at a fresh path: the client's Open is
        /// answered.
        fn attach(name: &str) -> (Arc<Client>, Self) {
            let path =
                std::env::temp_dir().join(format!("iwarp-fake-{}-{name}.sock", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
            let daemon = std::thread::spawn(move || {
                let (sock, _) = listener.accept().unwrap();
                // A request that never comes fails the test instead of hanging it.
                sock.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                    .unwrap();
                let mut d = Self {
                    sock,
                    inbox: Inbox::new(),
                };
                let (h, _) = d.request();
                d.send(&Reply::Id(1).encode(h.func, h.txn));
                d
            });
            let client =
                Client::connect(&path, (false, false), QueueDepths { sq: 8, rq: 8 }, 0).unwrap();
            let _ = std::fs::remove_file(&path);
            (client, daemon.join().unwrap())
        }

        /// The next request the client sent.
        fn request(&mut self) -> (Header, Request) {
            loop {
                if let Some(m) = self.inbox.next(|_, _| 0).unwrap() {
                    let req = Request::decode(m.header.func, &m.body).unwrap();
                    return (m.header, req);
                }
                self.inbox.recv(&self.sock).unwrap();
            }
        }

        fn send(&self, msg: &[u8]) {
            send_all(self.sock.as_fd(), msg, &[]).unwrap();
        }
    }

    fn incoming(listener: u32, id: u32) -> Bytes {
        Event::Incoming {
            listener,
            id,
            peer: "127.0.0.1:9".parse().unwrap(),
            private: Bytes::from_static(b"hi"),
        }
        .encode()
    }

    /// A connection request right behind its listener's Listen reply (in the same
    /// write) is held for the listener, however late the application takes it; before,
    /// the reader dropped it when it came before the listener was routed, and the peer's
    /// connect hung until its MPA timeout.
    #[test]
    fn a_request_right_behind_the_listen_reply_is_not_lost() {
        let (client, mut daemon) = FakeDaemon::attach("route");
        let asking = {
            let client = client.clone();
            std::thread::spawn(move || {
                client.call(&Request::Listen {
                    addr: "127.0.0.1:0".parse().unwrap(),
                })
            })
        };
        let (h, req) = daemon.request();
        assert!(matches!(req, Request::Listen { .. }));
        let reply = Reply::Listening {
            id: 5,
            addr: "127.0.0.1:7".parse().unwrap(),
        }
        .encode(h.func, h.txn);
        daemon.send(&[&reply[..], &incoming(5, 77)[..]].concat());
        assert!(matches!(
            asking.join().unwrap(),
            Ok(Reply::Listening { id: 5, .. })
        ));
        // The reader has long read the request when the listener asks for it.
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mut events = client.listener_events(5);
        assert_eq!(events.try_recv().map(|e| e.id).ok(), Some(77));
    }

    /// A request for a listener this process already closed is rejected at once, so the
    /// peer learns it now rather than at its MPA timeout.
    #[test]
    fn a_request_for_a_closed_listener_is_rejected() {
        let (_client, mut daemon) = FakeDaemon::attach("reject");
        daemon.send(&incoming(9, 78));
        let (_, req) = daemon.request();
        assert!(
            matches!(req, Request::Reject { incoming: 78, .. }),
            "{req:?}"
        );
    }

    /// Every accepted form of `IWARP_DEVICE`, and a typo refused with them listed.
    #[test]
    fn iwarp_device_takes_its_forms_and_refuses_the_rest() {
        assert_eq!(parse_device("").unwrap(), None);
        assert_eq!(parse_device("embedded").unwrap(), None);
        assert_eq!(
            parse_device("unix").unwrap(),
            Some(ipc::default_control_path())
        );
        assert_eq!(
            parse_device(" unix:/tmp/x.sock ").unwrap(),
            Some(PathBuf::from("/tmp/x.sock"))
        );
        for typo in ["uinx:/tmp/x.sock", "/tmp/x.sock", "unix:", "tcp:1.2.3.4"] {
            let e = parse_device(typo).unwrap_err().to_string();
            assert!(
                e.contains(typo) && e.contains("unix:PATH") && e.contains("embedded"),
                "{e}"
            );
        }
    }

    /// A socket this user may not open is named with its mode and owner, and the fix
    /// is to open it up, not to start iwarpd.
    #[test]
    fn a_socket_this_user_may_not_use_names_its_mode_and_the_fix() {
        let dir = std::env::temp_dir().join(format!("iwarp-perm-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("ctl.sock");
        let _ = std::fs::remove_file(&path);
        let _l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let e = io::Error::from(io::ErrorKind::PermissionDenied);
        let m = unreachable(&path, &e);
        assert!(m.contains("mode") && m.contains("chmod 666"), "{m}");
        assert!(!m.contains("Is it running"), "{m}");
        let m = unreachable(
            &dir.join("none.sock"),
            &io::Error::from(io::ErrorKind::NotFound),
        );
        assert!(m.contains("Is it running"), "{m}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
