//! An upgrade without disconnecting anyone: a running daemon hands its listening socket
//! and every connection it serves to a successor (live migration between processes, seed
//! 003 §3.1), over a Unix socket (`handover` key) that the successor names with
//! `take_over`.
//!
//! The exchange, each message `kind (1) | body length (4, LE) | descriptors (2, LE) | body`
//! with its descriptors attached to its first octets (`SCM_RIGHTS`):
//!
//! 1. successor: `HELLO` ("iWHO" and the version);
//! 2. daemon: `REFUSED` (why, as text), or `LISTENER` with the listening socket (its body:
//!    the highest STag index the daemon handed out, 4 octets LE, which the successor
//!    keeps, with a margin, for the entries that will move in; then the daemon's running
//!    settings, which the successor takes where it was not given its own: `inherit.rs`;
//!    a successor of an earlier release reads the first 4 octets only), then `CONTROL` with the
//!    control socket of local applications if it serves them; it stops accepting on
//!    both, and the successor starts; the daemon answers the connection requests it had
//!    begun to read (for up to [`DRAIN`]), so they move with the rest;
//! 3. per connection, daemon: `CONN` (the domain's image from `Engine::export_pd`, then the
//!    service's own state) with the regions' memory files and the TCP socket;
//! 4. per local application, daemon: `SESSION` (its session packed by
//!    `SessionMover::pack`: control socket, domains, rings, doorbells, listeners and what
//!    its servants held). A session between states (a queue pair connecting, one that
//!    ended and is not destroyed, ...) stays;
//!
//!    for each `CONN` or `SESSION`, successor: `ACK` (it made the item ready, and runs
//!    nothing of it yet) or `NAK` (why not: the daemon goes on with it); after an `ACK`,
//!    daemon: `COMMIT` (it let go of the item, which the successor now runs: the
//!    connection's peer and the application notice nothing) or, if the answer did not
//!    come within [`SILENCE`], `ABORT` (the daemon goes on with the item, the successor
//!    drops what it made ready) and then `DONE` at once: an item runs in one process only,
//!    whatever the timing;
//! 5. daemon: `DONE`; it lets go of its handover socket file and metrics port and closes
//!    the socket, and the successor then binds them itself. What did not move stays
//!    with the daemon, which serves it until it ends, then exits.
//!
//! A successor that goes away before `DONE` leaves the daemon accepting again and serving
//! everything it did not commit; a daemon that goes away before `DONE` leaves the
//! successor serving what was committed to it.
//!
//! Only a process of the daemon's own user may connect (checked with `SO_PEERCRED`); the
//! socket file is made readable and writable by that user only.

use std::io::{self, IoSlice, IoSliceMut, Read as _, Write as _};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use offload_engine::Engine;
use tokio::sync::oneshot;

use crate::local_guard::LocalGuard;
use crate::remote_memory::{MoveRequest, Moving, Resumed, StagedConn, stage_conn};
use iwarpd::local::SessionMover;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// The successor's first message.
pub(crate) const HELLO: u8 = 1;
/// The daemon will not hand over; the body says why.
pub(crate) const REFUSED: u8 = 2;
/// The listening socket.
pub(crate) const LISTENER: u8 = 3;
/// One connection.
pub(crate) const CONN: u8 = 4;
/// The connection was taken over.
pub(crate) const ACK: u8 = 5;
/// The connection was not taken over; the body says why.
pub(crate) const NAK: u8 = 6;
/// Every connection was offered.
pub(crate) const DONE: u8 = 7;
/// The control socket local applications attach on.
pub(crate) const CONTROL: u8 = 8;
/// One local application's session.
pub(crate) const SESSION: u8 = 9;
/// The item the successor made ready is its own now.
pub(crate) const COMMIT: u8 = 10;
/// The item the successor made ready stays with the daemon: drop it.
pub(crate) const ABORT: u8 = 11;

/// `HELLO`'s body: the magic and the version of this exchange (and of the images).
/// Version 6: a servant's image holds the send requests in its connection in order
/// (the daemon no longer gives requests ids of its own), so images of version 5 do not
/// carry over.
pub(crate) const HELLO_BODY: &[u8; 5] = b"iWHO\x06";

/// STag indices a successor keeps for the daemon's entries beyond the highest the daemon
/// had handed out when the handover began (it goes on registering until its sessions
/// stop).
const INDEX_MARGIN: u32 = 1 << 16;

const HEADER: usize = 7;
/// The most descriptors one message carries (a session brings one per region, three per
/// queue pair, ...).
const MAX_FDS: usize = u16::MAX as usize;
/// The most descriptors one `sendmsg` carries (the kernel's `SCM_MAX_FD` is 253).
const FDS_PER_SEND: usize = 250;
/// How long the daemon waits for each answer of a successor.
const SILENCE: std::time::Duration = std::time::Duration::from_secs(5);
/// The largest body accepted.
const MAX_BODY: usize = 64 << 20;

/// One message.
#[derive(Debug)]
pub(crate) struct Msg {
    pub(crate) kind: u8,
    pub(crate) body: Vec<u8>,
    pub(crate) fds: Vec<OwnedFd>,
}

/// Sends a message on a blocking socket. Its descriptors go in batches of at most
/// [`FDS_PER_SEND`] (the kernel's limit for one `SCM_RIGHTS`), each attached to one octet
/// of the message, from its first on.
pub(crate) fn send(
    sock: &UnixStream,
    kind: u8,
    body: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    let batches = fds.len().div_ceil(FDS_PER_SEND);
    if fds.len() > MAX_FDS || body.len() > MAX_BODY || batches > HEADER + body.len() {
        return Err(io::Error::other(format!(
            "handover message too large ({} octets, {} descriptors)",
            body.len(),
            fds.len()
        )));
    }
    let mut msg = Vec::with_capacity(HEADER + body.len());
    msg.push(kind);
    msg.extend_from_slice(&(body.len() as u32).to_le_bytes());
    msg.extend_from_slice(&(fds.len() as u16).to_le_bytes());
    msg.extend_from_slice(body);
    for (at, batch) in fds.chunks(FDS_PER_SEND).enumerate() {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_SEND))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(batch)) {
            return Err(io::Error::other("too many descriptors"));
        }
        // A blocking stream socket takes the one octet whole.
        rustix::net::sendmsg(
            sock.as_fd(),
            &[IoSlice::new(&msg[at..at + 1])],
            &mut control,
            SendFlags::NOSIGNAL,
        )?;
    }
    let mut w = sock;
    w.write_all(&msg[batches..])
}

/// Reads exactly `buf.len()` octets, collecting the descriptors that come with them.
fn recv_exact(sock: &UnixStream, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_SEND))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let r = rustix::net::recvmsg(
            sock.as_fd(),
            &mut [IoSliceMut::new(&mut buf[got..])],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(f) = m {
                fds.extend(f);
            }
        }
        if r.bytes == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += r.bytes;
    }
    Ok(())
}

/// Receives a message on a blocking socket.
pub(crate) fn recv(sock: &UnixStream) -> io::Result<Msg> {
    let mut head = [0u8; HEADER];
    let mut fds = Vec::new();
    recv_exact(sock, &mut head, &mut fds)?;
    let len = u32::from_le_bytes(head[1..5].try_into().expect("4 octets")) as usize;
    let nfds = u16::from_le_bytes(head[5..7].try_into().expect("2 octets")) as usize;
    if len > MAX_BODY {
        return Err(io::Error::other(format!(
            "malformed handover message ({len} octets)"
        )));
    }
    let mut body = vec![0; len];
    recv_exact(sock, &mut body, &mut fds)?;
    if nfds != fds.len() {
        return Err(io::Error::other(format!(
            "malformed handover message ({} descriptors where {nfds} were announced)",
            fds.len()
        )));
    }
    Ok(Msg {
        kind: head[0],
        body,
        fds,
    })
}

/// Refuses a process of another user.
pub(crate) fn check_peer(sock: &UnixStream) -> Result<(), String> {
    let cred = rustix::net::sockopt::socket_peercred(sock.as_fd())
        .map_err(|e| format!("cannot learn who connected: {e}"))?;
    let me = rustix::process::geteuid();
    if cred.uid != me {
        return Err(format!(
            "a process of user {} asked to take the connections over; only user {} may",
            cred.uid.as_raw(),
            me.as_raw()
        ));
    }
    Ok(())
}

/// Expects a message of `kind`; a `REFUSED` or `NAK` becomes its text.
pub(crate) fn expect(msg: Msg, kind: u8, what: &str) -> Result<Msg, String> {
    if msg.kind == kind {
        return Ok(msg);
    }
    if matches!(msg.kind, REFUSED | NAK) {
        return Err(String::from_utf8_lossy(&msg.body).into_owned());
    }
    Err(format!(
        "the other daemon sent message {} where {what} was due",
        msg.kind
    ))
}

/// Where a successor asks for the connections: the `handover` socket.
pub(crate) struct Offer {
    listener: tokio::net::UnixListener,
    path: PathBuf,
}

impl Offer {
    /// Binds `path` for this daemon's user only (a stale file no daemon answers on is
    /// replaced).
    pub(crate) fn bind(path: &Path) -> Result<Self, String> {
        if UnixStream::connect(path).is_ok() {
            return Err(format!(
                "another daemon offers its connections at {} already: give this one another \
                 handover path, or take that one over with take_over = {}",
                path.display(),
                path.display()
            ));
        }
        let _ = std::fs::remove_file(path);
        let listener = tokio::net::UnixListener::bind(path)
            .map_err(|e| format!("cannot bind the handover socket {}: {e}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|e| {
            format!(
                "cannot restrict the handover socket {}: {e}",
                path.display()
            )
        })?;
        tracing::info!(handover = %path.display(), "offering the connections to a successor");
        Ok(Self {
            listener,
            path: path.to_owned(),
        })
    }

    /// The next successor's connection, as a blocking socket.
    pub(crate) async fn next(&mut self) -> Option<UnixStream> {
        let (sock, _) = self.listener.accept().await.ok()?;
        let sock = sock.into_std().ok()?;
        sock.set_nonblocking(false).ok()?;
        Some(sock)
    }
}

impl Drop for Offer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Runs blocking socket work off the runtime's threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("a handover step panicked")
}

/// How long a daemon that handed its listening socket over waits for the connection
/// requests whose MPA Request was still arriving: those it answers and hands over with
/// the rest; a client still silent after this is left to retry.
pub(crate) const DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// A handover under way on the daemon's side: the successor has the listening socket.
pub(crate) struct Handover {
    sock: Arc<UnixStream>,
}

/// A handover step's error in the user's words.
fn failed(e: io::Error) -> String {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            format!("the successor said nothing for {} s", SILENCE.as_secs())
        }
        _ => format!("the successor's socket: {e}"),
    }
}

impl Handover {
    /// The daemon's side, first half: answers the successor on `sock` and hands it the
    /// listening socket and the control socket of local applications (`control`, if it
    /// serves them); from then on the successor accepts on both and this daemon must not
    /// (the caller stops its local service's acceptor). Then the daemon answers the
    /// requests it had already begun to read (`listener.accept()` until it fails, at most
    /// [`DRAIN`]), and [`Self::finish`] moves every connection.
    pub(crate) async fn begin(
        sock: UnixStream,
        listener: &offload_engine::Listener,
        control: Option<BorrowedFd<'_>>,
        settings: Vec<u8>,
    ) -> Result<Self, String> {
        let this = Self {
            sock: Arc::new(sock),
        };
        check_peer(&this.sock)?;
        // The daemon accepts nothing while it hands over: a silent peer may not hold it.
        this.sock
            .set_read_timeout(Some(SILENCE))
            .map_err(|e| format!("the successor's socket: {e}"))?;
        let hello = this.recv().await.map_err(failed)?;
        if hello.kind != HELLO || hello.body != HELLO_BODY {
            let why = "not a successor of this version (handover exchange 6: run a successor of the same release)";
            let _ = this.say(REFUSED, why.into(), Vec::new()).await;
            return Err(why.into());
        }
        let dup = |fd: BorrowedFd<'_>, what: &str| {
            fd.try_clone_to_owned()
                .map_err(|e| format!("cannot duplicate the {what}: {e}"))
        };
        let fd = dup(listener.socket(), "listening socket")?;
        let high = offload_engine::tpt::index_high_water();
        let mut body = high.to_le_bytes().to_vec();
        body.extend(settings);
        this.say(LISTENER, body, vec![fd]).await.map_err(failed)?;
        // The successor accepts from now on.
        listener.stop_accepting();
        if let Some(control) = control {
            let fd = dup(control, "control socket")?;
            this.say(CONTROL, Vec::new(), vec![fd])
                .await
                .map_err(failed)?;
        }
        tracing::info!(
            "the successor has the listening socket: answering the requests already begun"
        );
        Ok(this)
    }

    /// The second half: moves every connection (`movers`, one per connection task) and
    /// every session of a local application (`sessions`) to the successor. Returns how
    /// many of each moved, and the socket, to keep open until this process ends. `Err`:
    /// the successor went away (what it was not committed stays here).
    pub(crate) async fn finish(
        self,
        movers: &[tokio::sync::mpsc::Sender<MoveRequest>],
        sessions: Vec<SessionMover>,
    ) -> Result<(Moved, UnixStream), String> {
        let mut moved = Moved {
            connections: 0,
            sessions: 0,
        };
        let mut silent = false;
        for mover in movers {
            let (tx, rx) = oneshot::channel();
            if mover.send(tx).await.is_err() {
                continue;
            }
            let Ok(m) = rx.await else { continue };
            let m: Moving = match m {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "a connection cannot move: it stays here");
                    continue;
                }
            };
            let offered = self.offer(CONN, "a connection", m.body, m.fds).await;
            let _ = m.verdict.send(matches!(offered, Ok(Offered::Taken)));
            match offered.map_err(failed)? {
                Offered::Taken => moved.connections += 1,
                Offered::Refused => {}
                Offered::Silent => {
                    silent = true;
                    break;
                }
            }
        }
        // After a silence, nothing more is offered.
        let sessions = if silent { Vec::new() } else { sessions };
        for session in sessions {
            let mut packed = match tokio::time::timeout(SILENCE, session.pack()).await {
                Ok(Ok(p)) => p,
                Err(_) => {
                    tracing::warn!(
                        "a local application's session did not stop in time: it stays here"
                    );
                    continue;
                }
                Ok(Err(why)) => {
                    tracing::warn!(
                        why,
                        "a local application's session cannot move: it stays here"
                    );
                    continue;
                }
            };
            let (image, fds) = packed.take();
            // Dropped uncommitted, the session resumes here.
            let what = "a local application's session";
            match self
                .offer(SESSION, what, image, fds)
                .await
                .map_err(failed)?
            {
                Offered::Taken => {
                    packed.commit();
                    moved.sessions += 1;
                }
                Offered::Refused => {}
                Offered::Silent => break,
            }
        }
        self.say(DONE, Vec::new(), Vec::new())
            .await
            .map_err(failed)?;
        let sock =
            Arc::try_unwrap(self.sock).map_err(|_| "the successor's socket is still in use")?;
        Ok((moved, sock))
    }

    /// Offers one item (`CONN` or `SESSION`, `what` in the log) and commits it if the
    /// successor takes it in time; `Err`: the successor went away, and the item stays here.
    async fn offer(
        &self,
        kind: u8,
        what: &str,
        body: Vec<u8>,
        fds: Vec<OwnedFd>,
    ) -> io::Result<Offered> {
        self.say(kind, body, fds).await?;
        match self.recv().await {
            Ok(a) if a.kind == ACK => {
                self.say(COMMIT, Vec::new(), Vec::new()).await?;
                Ok(Offered::Taken)
            }
            Ok(a) if a.kind == NAK => {
                tracing::warn!(
                    why = %String::from_utf8_lossy(&a.body),
                    "the successor did not take {what}: it stays here"
                );
                Ok(Offered::Refused)
            }
            Ok(a) => Err(io::Error::other(format!(
                "the successor answered with message {}",
                a.kind
            ))),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                // Its answer may still come: the successor reads this first.
                self.say(ABORT, Vec::new(), Vec::new()).await?;
                tracing::warn!(
                    "{}: {what} stays here, and so does everything not moved yet",
                    failed(e)
                );
                Ok(Offered::Silent)
            }
            Err(e) => Err(e),
        }
    }

    async fn recv(&self) -> io::Result<Msg> {
        let sock = Arc::clone(&self.sock);
        blocking(move || recv(&sock)).await
    }

    async fn say(&self, kind: u8, body: Vec<u8>, fds: Vec<OwnedFd>) -> io::Result<()> {
        let sock = Arc::clone(&self.sock);
        blocking(move || {
            let fds: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
            send(&sock, kind, &body, &fds)
        })
        .await
    }
}

/// What became of an item offered to the successor.
enum Offered {
    /// It runs there now.
    Taken,
    /// It stays here (the successor said why, in the log).
    Refused,
    /// No answer in time: it stays here, and the handover ends.
    Silent,
}

/// What a handover moved.
#[derive(Debug)]
pub(crate) struct Moved {
    pub(crate) connections: usize,
    pub(crate) sessions: usize,
}

/// An item of the handover the successor made ready, not running until committed.
enum Ready {
    Conn(Box<StagedConn>),
    Session(iwarpd::local::AdoptedSession),
}

/// What a successor took over.
pub(crate) struct TakenOver {
    /// The listening socket.
    pub(crate) listener: offload_engine::Listener,
    /// The local service, started on the control socket of the daemon before (if it
    /// served local applications and this daemon does), with their sessions.
    pub(crate) local: Option<LocalGuard>,
    /// The connections to serve on.
    pub(crate) resumed: Vec<Resumed>,
    /// The link to the daemon before: it closes once that daemon let go of the handover
    /// path and the metrics port.
    pub(crate) link: UnixStream,
}

/// A take-over begun: the daemon before answered, stopped accepting and handed its
/// listening socket over, with its running settings. [`Prelude::finish`] takes the rest
/// on an engine made with those settings.
pub(crate) struct Prelude {
    sock: Arc<UnixStream>,
    listener: OwnedFd,
    /// What the daemon before said of its settings: `None` if it said nothing (an
    /// earlier release), `Err` if they cannot be read.
    pub(crate) settings: Option<Result<Vec<(String, String)>, String>>,
    /// The handover socket, in messages.
    path: String,
}

/// The successor's side, first half: asks the daemon whose handover socket is `path` for
/// its listening socket and settings.
pub(crate) async fn begin_take_over(path: &Path) -> Result<Prelude, String> {
    let p = path.display().to_string();
    let sock = UnixStream::connect(path).map_err(|e| {
        format!(
            "cannot reach the daemon to take over at {p}: {e} (is it running with handover = {p}?)"
        )
    })?;
    let sock = Arc::new(sock);
    let fail = |e: io::Error| format!("the handover from {p}: {e}");
    let s = Arc::clone(&sock);
    blocking(move || send(&s, HELLO, HELLO_BODY, &[]))
        .await
        .map_err(fail)?;
    let s = Arc::clone(&sock);
    let m = expect(
        blocking(move || recv(&s)).await.map_err(fail)?,
        LISTENER,
        "the listening socket",
    )
    .map_err(|e| format!("the daemon at {p} refused the handover: {e}"))?;
    // The daemon's entries keep their STags here: no new entry may take one.
    if let Some(high) = m.body.get(..4) {
        let high = u32::from_le_bytes(high.try_into().expect("4 octets"));
        offload_engine::tpt::hold_indices_through(high.saturating_add(INDEX_MARGIN));
    }
    let settings = m
        .body
        .get(4..)
        .filter(|rest| !rest.is_empty())
        .map(crate::inherit::decode);
    let listener = m
        .fds
        .into_iter()
        .next()
        .ok_or("the listening socket did not come")?;
    Ok(Prelude {
        sock,
        listener,
        settings,
        path: p,
    })
}

impl Prelude {
    /// The second half: listens on the socket handed over with `engine`, and takes the
    /// control socket (on which `serve_local` starts the local service), every
    /// connection and every local application's session.
    pub(crate) async fn finish(
        self,
        engine: &Engine,
        serve_local: impl FnOnce(
            Option<std::os::unix::net::UnixListener>,
        ) -> Result<Option<LocalGuard>, String>,
    ) -> Result<TakenOver, String> {
        let Self {
            sock,
            listener: fd,
            path: p,
            ..
        } = self;
        take_rest(engine, sock, fd, &p, serve_local).await
    }
}

/// [`Prelude::finish`].
async fn take_rest(
    engine: &Engine,
    sock: Arc<UnixStream>,
    fd: OwnedFd,
    p: &str,
    serve_local: impl FnOnce(
        Option<std::os::unix::net::UnixListener>,
    ) -> Result<Option<LocalGuard>, String>,
) -> Result<TakenOver, String> {
    let next = || {
        let s = Arc::clone(&sock);
        blocking(move || recv(&s))
    };
    let listener = engine
        .listen_on_std(std::net::TcpListener::from(fd))
        .map_err(|e| format!("cannot listen on the socket handed over: {e}"))?;
    let mut resumed = Vec::new();
    let mut serve_local = Some(serve_local);
    let mut local = None;
    let answer = |kind: u8, body: Vec<u8>| {
        let s = Arc::clone(&sock);
        blocking(move || send(&s, kind, &body, &[]))
    };
    // What was committed is this daemon's alone: it serves it whatever became of the
    // daemon before.
    let gone = |e: &io::Error| {
        tracing::warn!(
            error = %e,
            "the daemon before went away in the middle of the handover: serving what moved"
        );
    };
    // The item made ready and answered `ACK` for, until `COMMIT` or `ABORT`.
    let mut ready: Option<Ready> = None;
    loop {
        let m = match next().await {
            Ok(m) => m,
            Err(e) => {
                gone(&e);
                break;
            }
        };
        match m.kind {
            CONTROL if serve_local.is_some() => {
                let fd = m
                    .fds
                    .into_iter()
                    .next()
                    .ok_or("the control socket did not come")?;
                let start = serve_local.take().expect("once");
                local = start(Some(std::os::unix::net::UnixListener::from(fd)))?;
            }
            COMMIT => match ready.take() {
                Some(Ready::Conn(c)) => resumed.push(c.start()),
                Some(Ready::Session(s)) => s.start(),
                None => return Err(format!("the daemon at {p} committed nothing offered")),
            },
            ABORT => {
                if ready.take().is_some() {
                    tracing::warn!(
                        "the daemon before did not wait for this daemon's answer: what it offered last stays there"
                    );
                }
            }
            SESSION | CONN if ready.is_none() => {
                let staged = if m.kind == SESSION {
                    match local.as_ref().and_then(LocalGuard::service) {
                        Some(service) => service.adopt(m.body, m.fds).await.map(Ready::Session),
                        None => Err(
                            "this daemon does not serve local applications (control = off)".into(),
                        ),
                    }
                } else {
                    stage_conn(engine, &m.body, m.fds).map(|c| Ready::Conn(Box::new(c)))
                };
                let (kind, body) = match staged {
                    Ok(r) => {
                        ready = Some(r);
                        (ACK, Vec::new())
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "not taking a connection or session over");
                        (NAK, e.into_bytes())
                    }
                };
                // If the daemon before stopped waiting, what it said last still comes (an
                // `ABORT`, then `DONE`), or the end of the link if it went away.
                let _ = answer(kind, body).await;
            }
            DONE => break,
            other => {
                return Err(format!(
                    "the daemon at {p} sent message {other} mid-handover"
                ));
            }
        }
    }
    if let Some(start) = serve_local {
        local = start(None)?;
    }
    let link = Arc::try_unwrap(sock).map_err(|_| "the handover socket is still in use")?;
    Ok(TakenOver {
        listener,
        local,
        resumed,
        link,
    })
}

/// Waits until the daemon before has let go of what the successor binds next (its end of
/// `link` closes), at most 30 s.
pub(crate) async fn await_release(link: UnixStream) {
    let _ = link.set_read_timeout(Some(std::time::Duration::from_secs(30)));
    blocking(move || {
        let mut b = [0u8; 1];
        let _ = (&link).read(&mut b);
    })
    .await;
}
