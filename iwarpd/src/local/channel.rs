//! A session's control channel: the client's requests read in order (each checked before
//! it is answered: the protocol version, its descriptors, Open first), and the session's
//! life from the client's attach to its release, or to its move to a successor daemon.

use std::io;
use std::sync::Arc;

use ipc::channel::{Inbox, RecvError};
use ipc::control::{Header, Request, VERSION, error, request_fds};
use tokio::io::Interest;
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use super::Device;
use super::logs;
use super::replies::err;
use super::requests;
use super::session::{Objects, Out, Session, release};
use super::{mover, moving};
use offload_engine::Engine;

/// Runs a new client's session.
pub(super) async fn run(engine: Engine, stream: UnixStream, device: Arc<Device>) {
    let stream = Arc::new(stream);
    let (s, writer) = Session::start(engine, device, stream.clone(), Objects::default());
    let (serial, go) = s.device.users.join(&s);
    serve(
        s,
        stream,
        writer,
        Membership {
            serial,
            go: Some(go),
        },
    )
    .await;
}

/// A session's entry in the daemon's [`Users`](super::users::Users): its serial, and
/// (until it opens the device) what tells it to go because newer ones wait.
pub(super) struct Membership {
    pub(super) serial: u64,
    pub(super) go: Option<Arc<tokio::sync::Notify>>,
}

/// How long a new client may take to open the device before it is dropped.
const OPEN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How a session ended.
enum Ended {
    /// The client left, or must be dropped.
    Left(RecvError),
    /// The client was told why it is not served (a limit of the daemon, no Open in time).
    Refused(String),
    /// A successor daemon runs it now.
    Moved,
}

/// Runs a session (`member.go`: `None` once the client has opened the device) until the
/// client disconnects, then releases what it held; or until it moves to a successor
/// daemon.
pub(super) async fn serve(
    s: Arc<Session>,
    stream: Arc<UnixStream>,
    writer: tokio::task::JoinHandle<()>,
    member: Membership,
) {
    let (ask, mut asks) = mpsc::channel(1);
    s.device.users.set_mover(member.serial, Some(ask));
    let why = read_loop(&s, &stream, &mut asks, &member).await;
    s.device.users.set_mover(member.serial, None);
    let (pid, uid) = (s.pid, s.uid);
    let moved = matches!(why, Ended::Moved);
    match why {
        Ended::Moved => tracing::info!(pid, uid, "local client's session moved to the successor"),
        Ended::Left(RecvError::Closed) => tracing::debug!(pid, uid, "local client left"),
        // A process that ends with octets of ours unread resets its socket: it left.
        Ended::Left(RecvError::Io(e)) if e.kind() == io::ErrorKind::ConnectionReset => {
            tracing::debug!(pid, uid, "local client left (its socket was reset)")
        }
        Ended::Left(RecvError::Io(e)) => {
            logs::limited!(logs::CLIENT_OTHER, info, pid, uid, error = %e, "local client's socket failed");
        }
        Ended::Left(RecvError::Malformed(m)) => {
            logs::limited!(logs::CLIENT_DROPPED, warn, pid, uid, error = %m, "local client sent garbage; dropped");
        }
        Ended::Refused(why) => {
            logs::limited!(
                logs::CLIENT_REFUSED,
                info,
                pid,
                uid,
                why,
                "local client not served"
            );
        }
    }
    if !moved {
        release(&s).await;
    }
    s.device.users.leave(member.serial);
    // What is queued still goes out (the reply that says why the session ends, a last
    // event), for a moment: the writer ends once every sender is gone.
    drop(s);
    let abort = writer.abort_handle();
    if tokio::time::timeout(FLUSH_WAIT, writer).await.is_err() {
        abort.abort();
    }
}

/// How long a closing session may take to write what it has queued.
const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Checks a request the client sent (`h`: its header; `missing`: how many of the
/// descriptors it carries did not come with it) before it is answered, and answers it
/// itself if it cannot be: `Ok(Some)` the request to answer, `Ok(None)` if it was refused
/// and the session reads on, `Err` how the session ends. Before the client opened the
/// device (`opened`), only an Open is taken, and only within the daemon's limits on
/// applications.
async fn vet(
    s: &Session,
    member: &Membership,
    opened: bool,
    h: Header,
    body: &[u8],
    missing: usize,
) -> Result<Option<Request>, Ended> {
    if h.version != VERSION {
        let text = format!(
            "this iwarpd speaks control protocol version {VERSION}, the application \
             {}: run an iwarpd and an application built from the same release",
            h.version
        );
        let _ = s
            .out
            .send(Out::new(
                err(error::VERSION, text).encode(h.func, h.txn),
                Vec::new(),
            ))
            .await;
        return Err(Ended::Left(RecvError::Malformed(ipc::Malformed(
            "protocol version",
        ))));
    }
    let req = match Request::decode(h.func, body) {
        Ok(r) => r,
        Err(m) => {
            let _ = s
                .out
                .send(Out::new(
                    err(error::MALFORMED, m.to_string()).encode(h.func, h.txn),
                    Vec::new(),
                ))
                .await;
            return Err(Ended::Left(RecvError::Malformed(m)));
        }
    };
    if missing > 0 {
        let why = format!(
            "{} came without the {missing} descriptor(s) it carries: send them with \
             SCM_RIGHTS on the same message",
            ipc::control::func::name(h.func)
        );
        let _ = s
            .out
            .send(Out::new(
                err(error::MALFORMED, why).encode(h.func, h.txn),
                Vec::new(),
            ))
            .await;
        return Ok(None);
    }
    if !opened && !matches!(req, Request::Open { .. }) {
        let why = "a request before Open: open the device first (the first message \
                   on the control socket is Open)";
        let reply = err(error::MALFORMED, why).encode(h.func, h.txn);
        let _ = s.out.send(Out::new(reply, Vec::new())).await;
        return Err(Ended::Refused(why.to_owned()));
    }
    if !opened {
        let l = &s.device.limits;
        let admitted = s
            .device
            .users
            .open(member.serial, l.max_clients, l.max_clients_per_user);
        if let Err(why) = admitted {
            let reply = err(error::LIMIT, why.clone()).encode(h.func, h.txn);
            let _ = s.out.send(Out::new(reply, Vec::new())).await;
            return Err(Ended::Refused(why));
        }
    }
    Ok(Some(req))
}

/// Reads and answers the client's requests in order, until the session ends (`Ended`
/// says how). Between two requests it may move to a successor daemon (`asks`).
async fn read_loop(
    s: &Arc<Session>,
    stream: &UnixStream,
    asks: &mut mpsc::Receiver<mover::Ask>,
    member: &Membership,
) -> Ended {
    let mut inbox = Inbox::new();
    let open_by = tokio::time::Instant::now() + OPEN_WAIT;
    let mut opened = member.go.is_none();
    let go = member.go.clone().unwrap_or_default();
    loop {
        loop {
            let (msg, missing) =
                match inbox.next_tolerant(|h: &Header, _: &[u8]| request_fds(h.func)) {
                    Ok(Some(m)) => m,
                    Ok(None) => break,
                    Err(e) => return Ended::Left(e),
                };
            let h = msg.header;
            let req = match vet(s, member, opened, h, &msg.body, missing).await {
                Ok(Some(req)) => req,
                Ok(None) => continue,
                Err(ended) => return ended,
            };
            opened = true;
            requests::handle(s, h, req, msg.fds).await;
        }
        tokio::select! {
            ready = stream.readable() => {
                if let Err(e) = ready {
                    return Ended::Left(RecvError::Io(e));
                }
            }
            () = tokio::time::sleep_until(open_by), if !opened => {
                let why = format!("it did not open the device within {} s", OPEN_WAIT.as_secs());
                return Ended::Refused(why);
            }
            () = go.notified(), if !opened => {
                let why = format!(
                    "it had not opened the device, and more than {} newer connections to the \
                     control socket wait to",
                    super::users::MAX_UNOPENED
                );
                return Ended::Refused(why);
            }
            Some(ask) = asks.recv() => {
                // Between two requests (none part-way in): the session may move.
                if moving::pack(s, stream, opened && inbox.is_empty(), ask).await {
                    return Ended::Moved;
                }
                continue;
            }
        }
        let got = stream.try_io(Interest::READABLE, || match inbox.recv(stream) {
            Err(RecvError::Io(e)) => Err(e),
            other => Ok(other),
        });
        match got {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Ended::Left(RecvError::Io(e)),
            Ok(Err(e)) => return Ended::Left(e),
            Ok(Ok(_)) => {}
        }
    }
}
