//! One local client: its control channel and the objects it owns.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use ipc::channel::{Inbox, RecvError, send_some};
use ipc::control::{
    Counters, Event, Header, QpChange, QpInfo, QueueDepths, Reply, Request, VERSION, end, error,
    request_fds,
};
use ipc::qpseg::{Doorbell, Geometry, QpSegment};
use ipc::srq::SrqSegment;
use rdmap::{QpEnd, RecvWr};
use tokio::io::Interest;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use super::Device;
use super::admit;
use super::logs;
use super::memory;
use super::moving;
use super::recvs::{ClientSrq, QpRecvs};
use super::servant::{self, Servant};
use super::users::Usage;
use ipc::push::PushRegion;
use offload_engine::push_share::PdPush;
use offload_engine::tpt::PdId;
use offload_engine::{ConnectError, Engine, Incoming, QpInit};

/// A message to the client, with the descriptors it carries.
pub(super) struct Out {
    pub(super) msg: Bytes,
    pub(super) fds: Vec<OwnedFd>,
    /// Dropped once the message is written (or the socket failed), which is what its
    /// receiver waits for.
    pub(super) written: Option<oneshot::Sender<()>>,
}

impl Out {
    pub(super) fn new(msg: Bytes, fds: Vec<OwnedFd>) -> Self {
        Self {
            msg,
            fds,
            written: None,
        }
    }
}

/// Everything the client created, and only that: every id in a request is looked up here.
#[derive(Default)]
pub(super) struct Objects {
    /// Protection domains by the client's id (not the engine's number, which an upgrade
    /// of the daemon changes).
    pub(super) pds: HashMap<u32, ClientPd>,
    /// Regions (ordinary and fast-registration; and STags reserved for queued
    /// registrations) by STag index, with the octets the daemon maps for each (0 for a
    /// reservation); windows by STag index. By index: fast registration and binds change
    /// their instances.
    pub(super) mrs: HashMap<u32, u64>,
    pub(super) mws: HashSet<u32>,
    /// STags reserved for queued registrations and not registered yet.
    pub(super) reserved: HashSet<u32>,
    pub(super) listeners: HashMap<u32, ClientListener>,
    pub(super) incoming: HashMap<u32, Incoming>,
    pub(super) qps: HashMap<u32, Servant>,
    pub(super) srqs: HashMap<u32, Arc<ClientSrq>>,
    /// Queue pairs being connected or accepted (counted against the limit), and the
    /// octets of their segments.
    pub(super) connecting: usize,
    pub(super) connecting_octets: u64,
    /// The tasks connecting or accepting them: aborted when the session ends, so that
    /// none outlives it.
    pub(super) pending: tokio::task::JoinSet<()>,
    /// The session ended: what a task finishes now is let go at once, never kept.
    pub(super) released: bool,
    pub(super) next_id: u32,
}

/// A listener of the client: the socket, and the task that hands its connection
/// requests to the client.
pub(super) struct ClientListener {
    listener: Arc<offload_engine::Listener>,
    task: tokio::task::JoinHandle<()>,
}

impl ClientListener {
    /// Starts handing `listener`'s connection requests to the client of `s` as listener
    /// `id`.
    pub(super) fn start(
        s: &Arc<Session>,
        id: u32,
        listener: Arc<offload_engine::Listener>,
    ) -> Self {
        listener.resume_accepting();
        let task = tokio::spawn(listen_loop(Arc::downgrade(s), id, listener.clone()));
        Self { listener, task }
    }

    /// Stops it: the socket stays open for whoever else holds it.
    pub(super) fn stop(self) -> Arc<offload_engine::Listener> {
        self.listener.stop_accepting();
        self.task.abort();
        self.listener
    }
}

/// A client's protection domain: the engine's, and its push region.
#[derive(Clone)]
pub(super) struct ClientPd {
    pub(super) engine: PdId,
    pub(super) push: Arc<PdPush>,
}

impl Objects {
    /// What the client holds of the daemon's memory files, as
    /// [`shm::memory_files`] counts them for the whole daemon: one per region, domain (its
    /// push region), shared receive queue and queue pair (its segment), connected or
    /// connecting; and one per listener (its socket).
    pub(super) fn files(&self) -> usize {
        self.mrs.len()
            + self.pds.len()
            + self.srqs.len()
            + self.listeners.len()
            + self.qps.len()
            + self.connecting
    }

    /// What the client holds of what the daemon bounds (see [`admit`](super::admit)).
    pub(super) fn usage(&self) -> Usage {
        Usage {
            files: self.files(),
            qps: self.qps.len() + self.connecting,
            entries: self.mrs.len() + self.mws.len(),
            // The shared memory the daemon maps for it: its regions, and the rings of its
            // queue pairs and shared receive queues (the daemon makes those).
            octets: self.mrs.values().sum::<u64>()
                + self.qps.values().map(Servant::octets).sum::<u64>()
                + self.srqs.values().map(|q| q.octets()).sum::<u64>()
                + self.connecting_octets,
            srqs: self.srqs.len(),
            listeners: self.listeners.len(),
        }
    }

    /// The engine's domain behind the client's `pd`.
    pub(super) fn pd(&self, pd: u32) -> Option<PdId> {
        self.pds.get(&pd).map(|p| p.engine)
    }

    pub(super) fn id(&mut self) -> u32 {
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.next_id
    }
}

pub(super) struct Session {
    pub(super) engine: Engine,
    pub(super) device: Arc<Device>,
    pub(super) objs: Mutex<Objects>,
    pub(super) out: mpsc::Sender<Out>,
    /// The client's process and user (its socket's peer credentials, which the kernel
    /// vouches for; `None` if unknown).
    pub(super) pid: Option<u32>,
    pub(super) uid: Option<u32>,
}

impl Session {
    pub(super) fn objs(&self) -> std::sync::MutexGuard<'_, Objects> {
        self.objs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub(super) fn err(code: u16, text: impl Into<String>) -> Reply {
    Reply::Error {
        code,
        text: text.into(),
    }
}

pub(super) fn not_found(what: &str, id: u32) -> Reply {
    err(
        error::NOT_FOUND,
        format!("no {what} {id} of this client (it was freed, or belongs to another process)"),
    )
}

impl Session {
    /// A session on `stream` holding `objs` (a new client's: none), with its writer
    /// running.
    pub(super) fn start(
        engine: Engine,
        device: Arc<Device>,
        stream: Arc<UnixStream>,
        objs: Objects,
    ) -> (Arc<Self>, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(256);
        let cred = stream.peer_cred().ok();
        let uid = cred.map(|c| c.uid());
        let pid = cred
            .and_then(|c| c.pid())
            .and_then(|p| u32::try_from(p).ok());
        let writer = tokio::spawn(write_loop(stream, rx));
        let s = Arc::new(Self {
            engine,
            device,
            objs: Mutex::new(objs),
            out: tx,
            pid,
            uid,
        });
        (s, writer)
    }
}

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

async fn read_loop(
    s: &Arc<Session>,
    stream: &UnixStream,
    asks: &mut mpsc::Receiver<moving::Ask>,
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
                return Ended::Left(RecvError::Malformed(ipc::Malformed("protocol version")));
            }
            let req = match Request::decode(h.func, &msg.body) {
                Ok(r) => r,
                Err(m) => {
                    let _ = s
                        .out
                        .send(Out::new(
                            err(error::MALFORMED, m.to_string()).encode(h.func, h.txn),
                            Vec::new(),
                        ))
                        .await;
                    return Ended::Left(RecvError::Malformed(m));
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
                continue;
            }
            if !opened && !matches!(req, Request::Open { .. }) {
                let why = "a request before Open: open the device first (the first message \
                           on the control socket is Open)";
                let reply = err(error::MALFORMED, why).encode(h.func, h.txn);
                let _ = s.out.send(Out::new(reply, Vec::new())).await;
                return Ended::Refused(why.to_owned());
            }
            if !opened {
                let l = &s.device.limits;
                let admitted =
                    s.device
                        .users
                        .open(member.serial, l.max_clients, l.max_clients_per_user);
                if let Err(why) = admitted {
                    let reply = err(error::LIMIT, why.clone()).encode(h.func, h.txn);
                    let _ = s.out.send(Out::new(reply, Vec::new())).await;
                    return Ended::Refused(why);
                }
            }
            opened = true;
            handle(s, h, req, msg.fds).await;
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

async fn write_loop(stream: Arc<UnixStream>, mut rx: mpsc::Receiver<Out>) {
    while let Some(mut out) = rx.recv().await {
        // Dropped (which its waiter sees) once this message is out, or the socket failed.
        let _written = out.written.take();
        let fds: Vec<_> = out.fds.iter().map(|f| f.as_fd()).collect();
        let mut sent = 0;
        while sent < out.msg.len() {
            if stream.writable().await.is_err() {
                return;
            }
            let attach = if sent == 0 { &fds[..] } else { &[] };
            match stream.try_io(Interest::WRITABLE, || {
                send_some(stream.as_fd(), &out.msg[sent..], attach)
            }) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    }
}

async fn reply(s: &Session, h: Header, r: Reply, fds: Vec<OwnedFd>) {
    tracing::trace!(func = h.func, txn = h.txn, fds = fds.len(), "reply");
    let _ = s.out.send(Out::new(r.encode(h.func, h.txn), fds)).await;
}

async fn handle(s: &Arc<Session>, h: Header, req: Request, mut fds: Vec<OwnedFd>) {
    let r = match req {
        Request::Open { pid: claimed } => {
            // The pid the client claims is its word; the kernel's is the one logged.
            let (pid, uid) = (s.pid, s.uid);
            tracing::debug!(pid, uid, claimed, "local client opened the device");
            Reply::Id(std::process::id())
        }
        Request::AllocPd => {
            let need = Usage {
                files: 1,
                ..Usage::default()
            };
            if let Some(r) = admit::check(s, need) {
                return reply(s, h, r, Vec::new()).await;
            }
            // The domain's push region: its own memory file, handed to this client only.
            let created = PushRegion::create(s.device.limits.push.slots)
                .and_then(|r| Ok((r.fd().try_clone_to_owned()?, r)));
            let (fd, region) = match created {
                Ok(got) => got,
                Err(e) => {
                    let r = err(error::REFUSED, format!("no push region: {e}"));
                    return reply(s, h, r, Vec::new()).await;
                }
            };
            let push_slots = region.slots();
            let engine = s.engine.alloc_pd();
            let pd = {
                let mut o = s.objs();
                let pd = o.id();
                let push = Arc::new(PdPush::new(region));
                o.pds.insert(pd, ClientPd { engine, push });
                pd
            };
            return reply(s, h, Reply::Pd { pd, push_slots }, vec![fd]).await;
        }
        Request::DeallocPd { pd } => {
            let gone = s.objs().pds.remove(&pd);
            match gone {
                None => not_found("protection domain", pd),
                Some(gone) => match s.engine.tpt().dealloc_pd(gone.engine) {
                    Ok(()) => Reply::Done,
                    Err(e) => {
                        s.objs().pds.insert(pd, gone);
                        err(error::REFUSED, e.to_string())
                    }
                },
            }
        }
        req @ Request::RegMrAt { .. } => {
            // The engine's registration delay stands for a slower control path here too.
            let delay = s.engine.config().registration_delay;
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            memory::handle(s, req, fds.pop())
        }
        req @ (Request::RegMr { .. }
        | Request::ReserveStag
        | Request::DeregMr { .. }
        | Request::AllocFastRegMr { .. }
        | Request::AllocMw { .. }
        | Request::DeallocMw { .. }
        | Request::BindMw { .. }
        | Request::Invalidate { .. }) => memory::handle(s, req, fds.pop()),
        Request::Listen { addr } if let Some(r) = admit_listener(s, addr) => r,
        Request::Listen { addr } => match s.engine.listen(addr).await {
            Ok(l) => {
                let local = l.local_addr();
                let id = s.objs().id();
                // The reply goes out before the listener's first connection request can
                // (the library routes a listener's requests as it reads the reply).
                reply(s, h, Reply::Listening { id, addr: local }, Vec::new()).await;
                let l = ClientListener::start(s, id, Arc::new(l));
                s.objs().listeners.insert(id, l);
                return;
            }
            Err(e) => err(error::REFUSED, format!("listen on {addr}: {e}")),
        },
        Request::CloseListener { id } => match s.objs().listeners.remove(&id) {
            Some(l) => {
                drop(l.stop());
                Reply::Done
            }
            None => not_found("listener", id),
        },
        Request::Connect {
            pd,
            srq,
            depths,
            addr,
            private,
            recvs,
        } => match admit_qp(s, pd, depths) {
            Err(r) => *r,
            Ok(geo) => {
                let engine = s.engine.clone();
                spawn_establish(s, h, (pd, srq, geo), recvs, move |init| async move {
                    engine.connect(addr, init, &private).await
                });
                return;
            }
        },
        Request::Accept {
            incoming,
            pd,
            srq,
            depths,
            private,
            recvs,
        } => {
            let inc = s.objs().incoming.remove(&incoming);
            match (inc, admit_qp(s, pd, depths)) {
                (None, _) => not_found("connection request", incoming),
                (Some(_), Err(r)) => *r,
                (Some(inc), Ok(geo)) => {
                    spawn_establish(s, h, (pd, srq, geo), recvs, move |init| async move {
                        let qp = inc.accept(init, &private).await?;
                        Ok((qp, Bytes::new()))
                    });
                    return;
                }
            }
        }
        Request::Reject { incoming, private } => {
            let inc = s.objs().incoming.remove(&incoming);
            match inc {
                None => not_found("connection request", incoming),
                Some(inc) => {
                    tokio::spawn(async move {
                        let _ = inc.reject(&private).await;
                    });
                    Reply::Done
                }
            }
        }
        Request::Disconnect { qp } => match s.objs().qps.get(&qp) {
            Some(sv) => {
                sv.qp.disconnect();
                Reply::Done
            }
            None => not_found("queue pair", qp),
        },
        Request::DestroyQp { qp } => {
            let sv = s.objs().qps.remove(&qp);
            match sv {
                Some(sv) => {
                    sv.destroy().await;
                    Reply::Done
                }
                None => not_found("queue pair", qp),
            }
        }
        Request::ModifyQp { qp, change } => match s.objs().qps.get(&qp) {
            Some(sv) => {
                match change {
                    QpChange::IncomingRdma(on) => sv.qp.set_incoming_rdma(on),
                    QpChange::DrainOnLocalFailure(on) => sv.qp.set_drain_on_local_failure(on),
                    QpChange::ResumeSendQueue => sv.qp.resume_send_queue(),
                }
                Reply::Done
            }
            None => not_found("queue pair", qp),
        },
        Request::QueryQp { qp } => match s.objs().qps.get(&qp) {
            Some(sv) => {
                // The push counters are in the queue pair's segment, which the client reads.
                Reply::QpCounters(Counters {
                    traffic: sv.qp.stats(),
                    ..Counters::default()
                })
            }
            None => not_found("queue pair", qp),
        },
        Request::CreateSrq { depth } => {
            let need = Usage {
                srqs: 1,
                files: 1,
                octets: SrqSegment::size_for(SrqSegment::depth_for(depth as usize)) as u64,
                ..Usage::default()
            };
            if let Some(r) = admit::check(s, need) {
                r
            } else {
                let depth = SrqSegment::depth_for(depth as usize);
                let created = SrqSegment::create(depth)
                    .and_then(|seg| Ok((seg.fd().try_clone_to_owned()?, seg)));
                match created {
                    Ok((fd, seg)) => {
                        let srq = {
                            let mut o = s.objs();
                            let srq = o.id();
                            o.srqs.insert(srq, Arc::new(ClientSrq::new(seg)));
                            srq
                        };
                        return reply(s, h, Reply::Srq { srq, depth }, vec![fd]).await;
                    }
                    Err(e) => err(error::REFUSED, format!("no shared receive queue: {e}")),
                }
            }
        }
        Request::DestroySrq { srq } => match s.objs().srqs.remove(&srq) {
            Some(_) => Reply::Done,
            None => not_found("shared receive queue", srq),
        },
        Request::QueryDevice => {
            let l = &s.device.limits;
            let limit = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
            Reply::Device(ipc::control::DeviceAttrs {
                max_qp: limit(l.max_qps),
                max_mr: limit(l.max_mrs),
                max_srq: limit(l.max_srqs),
                sq_depth: l.max_queue_depth,
                rq_depth: l.max_queue_depth,
                max_send_sge: ipc::wqe::SQ_SGES as u32,
                max_recv_sge: ipc::wqe::RQ_SGES as u32,
                push_slots: l.push.slots,
                ..s.engine.attrs()
            })
        }
        ref listing @ (Request::ServiceStats | Request::ListQps { .. }) => {
            super::listing::answer(s, listing)
        }
        Request::Stats => {
            let own = {
                let o = s.objs();
                (o.qps.len() as u32, (o.mrs.len() + o.mws.len()) as u32)
            };
            Reply::Stats(s.device.counters(own))
        }
    };
    reply(s, h, r, Vec::new()).await;
}

/// The refusal of a listener on `addr`: past the client's limit or the daemon's
/// budget, or on a port that needs a privilege the client lacks (iwarpd may run as root;
/// its clients get no more than they would have themselves).
fn admit_listener(s: &Session, addr: std::net::SocketAddr) -> Option<Reply> {
    let need = Usage {
        listeners: 1,
        files: 1,
        ..Usage::default()
    };
    if let Some(r) = admit::check(s, need) {
        return Some(r);
    }
    let first_free = unprivileged_port_start();
    (addr.port() != 0 && addr.port() < first_free && s.uid != Some(0)).then(|| {
        err(
            error::REFUSED,
            format!(
                "listen on {addr}: port {} is privileged, and this application runs as an \
                 unprivileged user (uid {}): it may not listen there through iwarpd any more \
                 than it could itself; use port {first_free} or above",
                addr.port(),
                s.uid
                    .map_or_else(|| "unknown".to_owned(), |u| u.to_string()),
            ),
        )
    })
}

/// The lowest port an unprivileged process may bind (`net.ipv4.ip_unprivileged_port_start`,
/// which covers IPv6 too; 1024 where it cannot be read).
fn unprivileged_port_start() -> u16 {
    static START: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    *START.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1024)
    })
}

/// Checks the domain, the queue depths and the queue pair limit, and counts one more
/// connecting (with the rings' geometry), or says why not (boxed: a reply is large).
fn admit_qp(s: &Session, pd: u32, depths: QueueDepths) -> Result<Geometry, Box<Reply>> {
    let geo =
        geometry(depths, s.device.limits.max_queue_depth).map_err(|why| err(error::LIMIT, why))?;
    if !s.objs().pds.contains_key(&pd) {
        return Err(Box::new(not_found("protection domain", pd)));
    }
    let need = Usage {
        qps: 1,
        files: super::files::PER_QP,
        octets: geo.len() as u64,
        ..Usage::default()
    };
    if let Some(r) = admit::check(s, need) {
        return Err(Box::new(r));
    }
    let mut o = s.objs();
    o.connecting += 1;
    o.connecting_octets += need.octets;
    Ok(geo)
}

/// Connects or accepts a queue pair admitted by [`admit_qp`] (counted as connecting) on
/// a task of the session's, which answers the request `h` when done. The task ends with
/// the session: a client that goes away while its queue pair connects leaves nothing
/// behind (its connect is dropped, or the queue pair it made destroyed).
fn spawn_establish<F, Fut>(
    s: &Arc<Session>,
    h: Header,
    what: (u32, u32, Geometry),
    recvs: Vec<RecvWr>,
    establish: F,
) where
    F: FnOnce(QpInit) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(offload_engine::Qp, Bytes), ConnectError>> + Send + 'static,
{
    /// Counts the queue pair as connecting (with its segment's octets) until it is a
    /// servant's or gone (also when its task is aborted).
    struct Connecting(Arc<Session>, u64);
    impl Drop for Connecting {
        fn drop(&mut self) {
            let mut o = self.0.objs();
            o.connecting -= 1;
            o.connecting_octets -= self.1;
        }
    }
    let counted = Connecting(s.clone(), what.2.len() as u64);
    let task = async move {
        let s = counted.0.clone();
        let r = start_qp(&s, what, recvs, establish).await;
        drop(counted);
        let (r, fds) = r.unwrap_or_else(|r| (r, Vec::new()));
        reply(&s, h, r, fds).await;
    };
    let mut o = s.objs();
    // Tasks that finished are reaped here, so the set holds only those under way.
    while o.pending.try_join_next().is_some() {}
    o.pending.spawn(task);
}

/// Creates a queue pair's segment and doorbells, runs `establish` (connect or accept)
/// with receives translated, and starts its servant.
async fn start_qp<F, Fut>(
    s: &Arc<Session>,
    (pd, srq, geo): (u32, u32, Geometry),
    recvs: Vec<RecvWr>,
    establish: F,
) -> Result<(Reply, Vec<OwnedFd>), Reply>
where
    F: FnOnce(QpInit) -> Fut,
    Fut: Future<Output = Result<(offload_engine::Qp, Bytes), ConnectError>>,
{
    let Some(ClientPd {
        engine: engine_pd,
        push,
    }) = s.objs().pds.get(&pd).cloned()
    else {
        return Err(not_found("protection domain", pd));
    };
    let srq = match srq {
        0 => None,
        n => match s.objs().srqs.get(&n) {
            Some(q) => Some(q.clone()),
            None => return Err(not_found("shared receive queue", n)),
        },
    };
    let io_err = |e: io::Error| {
        err(
            error::REFUSED,
            format!("shared memory for the queue pair: {e}"),
        )
    };
    let seg = Arc::new(QpSegment::create(geo).map_err(io_err)?);
    let (to_daemon, to_client) = (
        Doorbell::new().map_err(io_err)?,
        Doorbell::new().map_err(io_err)?,
    );
    // The engine reads the client's receive ring (then its shared receive queue) when
    // its own receive queue is empty.
    let feed = Arc::new(QpRecvs::new(seg.clone(), srq));
    let mut prep = servant::Prepared::new(&geo, feed.clone());
    let mut init = QpInit::new(engine_pd, prep.cq());
    init.srq = Some(offload_engine::Srq::fed(feed));
    // The servant runs its client's push path itself.
    init.push = false;
    // The engine's queues are as deep as the rings, so that it takes all the client
    // may post.
    init.queue_depths = Some((geo.sq_depth as usize, geo.rq_depth as usize));
    init.recvs = recvs.into_iter().map(|wr| prep.recv(wr)).collect();
    let (qp, private) = establish(init).await.map_err(|e| match e {
        ConnectError::Rejected {
            private_data,
            refused,
        } => Reply::Rejected {
            private_data,
            refused,
        },
        ConnectError::Io(io) => err(
            error::of_connect(io.kind()),
            ConnectError::Io(io).to_string(),
        ),
        e => err(error::CONNECT, e.to_string()),
    })?;
    tracing::debug!(qp = %qp.num(), "local client's queue pair connected");
    let fds = [seg.fd(), to_daemon.as_fd(), to_client.as_fd()]
        .iter()
        .map(|f| f.try_clone_to_owned())
        .collect::<io::Result<Vec<_>>>()
        .map_err(io_err)?;
    let (ird, ord) = qp.ird_ord();
    // The client's id, not the engine's number (which an upgrade of the daemon changes).
    let id = s.objs().id();
    let info = QpInfo {
        qp: id,
        num: qp.num().0,
        ird,
        ord,
        mulpdu: qp.mulpdu(),
        extensions: qp.extensions().bits(),
        private,
        geometry: geo,
        framing: qp.framing(),
    };
    let sv = prep.start(
        id,
        qp,
        seg,
        to_daemon,
        to_client,
        servant::Push {
            pd: push,
            share: s.device.share.clone(),
        },
        on_end(s, id),
    );
    let orphan = {
        let mut o = s.objs();
        if o.released {
            Some(sv)
        } else {
            o.qps.insert(id, sv);
            None
        }
    };
    if let Some(sv) = orphan {
        // The client went away meanwhile: nobody will destroy it but this.
        sv.destroy().await;
        return Err(err(error::REFUSED, "the application went away"));
    }
    Ok((Reply::Qp(info), fds))
}

/// Tells the client of `s` how its queue pair `id` ended.
pub(super) fn on_end(s: &Arc<Session>, id: u32) -> servant::OnEnd {
    let s = Arc::downgrade(s);
    Box::new(move |how: QpEnd| {
        if let Some(s) = s.upgrade() {
            let (how, term) = match how {
                QpEnd::Closed => (end::CLOSED, [0, 0]),
                QpEnd::TerminatedByPeer(t) => (end::TERMINATED_BY_PEER, t.to_wire()),
                QpEnd::Terminated(t) => (end::TERMINATED, t.to_wire()),
                QpEnd::ConnectionLost => (end::CONNECTION_LOST, [0, 0]),
                QpEnd::TimedOut => (end::TIMED_OUT, [0, 0]),
                QpEnd::CqOverrun => (end::CQ_OVERRUN, [0, 0]),
                QpEnd::Misused => (end::MISUSED, [0, 0]),
                _ => (end::CONNECTION_LOST, [0, 0]),
            };
            let msg = Event::QpEnded { qp: id, how, term }.encode();
            let _ = s.out.try_send(Out::new(msg, Vec::new()));
        }
    })
}

/// Rings at least as deep as the client asks (powers of two), with a completion ring
/// for both; or why not, when it asks for more than `max` or for nothing.
fn geometry(want: QueueDepths, max: u32) -> Result<Geometry, String> {
    let max = max.min(ipc::qpseg::MAX_DEPTH);
    let ring = |n: u32, which: &str| match n {
        0 => Err(format!("a {which} queue depth of 0: ask for at least 1")),
        n if n > max => Err(format!(
            "a {which} queue depth of {n} is more than iwarpd allows ({max}): ask for \
             less, or raise `max_queue_depth` in iwarpd's configuration"
        )),
        n => Ok(n.next_power_of_two()),
    };
    let (sq_depth, rq_depth) = (ring(want.sq, "send")?, ring(want.rq, "receive")?);
    Ok(Geometry {
        sq_depth,
        rq_depth,
        cq_depth: (sq_depth + rq_depth)
            .next_power_of_two()
            .min(ipc::qpseg::MAX_DEPTH),
        ..Geometry::default()
    })
}

async fn listen_loop(s: std::sync::Weak<Session>, listener: u32, l: Arc<offload_engine::Listener>) {
    while let Ok(inc) = l.accept().await {
        let Some(s) = s.upgrade() else { return };
        let (peer, private) = (inc.peer_addr(), inc.private_data().clone());
        let id = {
            let mut o = s.objs();
            if o.incoming.len() >= s.device.limits.max_pending_incoming {
                drop(o);
                logs::limited!(logs::CLIENT_OTHER, info, %peer, "connection request rejected: the application has too many unanswered");
                tokio::spawn(async move {
                    let _ = inc.reject(&[]).await;
                });
                continue;
            }
            let id = o.id();
            o.incoming.insert(id, inc);
            id
        };
        let msg = Event::Incoming {
            listener,
            id,
            peer,
            private,
        }
        .encode();
        if s.out.send(Out::new(msg, Vec::new())).await.is_err() {
            return;
        }
    }
}

/// The client is gone: its queue pairs close (those still connecting too), its listeners
/// stop, its memory is released.
async fn release(s: &Session) {
    let (qps, listeners, pds, pending) = {
        let mut o = s.objs();
        o.released = true;
        o.incoming.clear();
        o.mrs.clear();
        o.mws.clear();
        // Reservations never registered belong to no domain: released one by one.
        for stag in o.reserved.drain() {
            let _ = s.engine.tpt().deregister(rdmap::STag::from_u32(stag));
        }
        (
            o.qps.drain().map(|(_, v)| v).collect::<Vec<_>>(),
            o.listeners.drain().map(|(_, v)| v).collect::<Vec<_>>(),
            o.pds.drain().map(|(_, pd)| pd.engine).collect::<Vec<_>>(),
            std::mem::take(&mut o.pending),
        )
    };
    // Connects under way end here (their connections close); dropped outside the lock,
    // which their counts take.
    drop(pending);
    for l in listeners {
        drop(l.stop());
    }
    futures::future::join_all(qps.into_iter().map(Servant::destroy)).await;
    // Every region and window of the client's domains, whatever instance each answers
    // to now (fast registration and binds move them).
    for pd in pds {
        s.engine.tpt().release_pd(pd);
    }
}

#[cfg(test)]
mod tests {
    use super::{QueueDepths, geometry};

    /// Rings are the power of two at or above what the client asks; nothing, or more
    /// than the limit, is refused by name; a limit beyond the rings' own counts as theirs.
    #[test]
    fn rings_are_as_deep_as_asked_within_the_limit() {
        let g = geometry(QueueDepths { sq: 100, rq: 600 }, 1000).unwrap();
        assert_eq!((g.sq_depth, g.rq_depth, g.cq_depth), (128, 1024, 2048));
        let g = geometry(QueueDepths { sq: 1000, rq: 1 }, 1000).unwrap();
        assert_eq!((g.sq_depth, g.rq_depth), (1024, 1));
        let e = geometry(QueueDepths { sq: 1001, rq: 8 }, 1000).unwrap_err();
        assert!(e.contains("1001") && e.contains("max_queue_depth"), "{e}");
        let e = geometry(QueueDepths { sq: 8, rq: 0 }, 1000).unwrap_err();
        assert!(e.contains("receive queue depth of 0"), "{e}");
        let max = ipc::qpseg::MAX_DEPTH;
        let e = geometry(QueueDepths { sq: max + 1, rq: 8 }, u32::MAX).unwrap_err();
        assert!(e.contains(&format!("({max})")), "{e}");
        let g = geometry(QueueDepths { sq: max, rq: max }, u32::MAX).unwrap();
        assert_eq!(
            g.cq_depth, max,
            "the completion ring stops at the limit too"
        );
    }
}
