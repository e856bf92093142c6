//! A local application's session moves to a successor daemon (an `iwarpd` upgrade, seed
//! 003 §3.1 between processes): its control socket, its protection domains with their
//! regions, windows and connected queue pairs, its shared receive queues and listeners,
//! and what each queue pair's servant holds. The application notices nothing: its
//! control socket, rings, doorbells and memory files are the same objects, the ids it
//! was given keep naming the same things, and its peers see the same TCP connections.
//!
//! The old daemon's side, [`pack`]: the session stops between two requests, its
//! listeners stop accepting, its servants stop between two turns, what it queued for the
//! client is written out, and its domains are exported ([`Engine::export_pd`]). The
//! successor's side, [`stage`] then [`StagedSession::start`] once the old daemon let go: everything that can fail first (every domain staged,
//! every segment mapped), then the queue pairs start, the servants resume where the old
//! ones stopped, and the session reads on. If the successor says no, the old daemon
//! resumes everything where it stopped.
//!
//! A session stays with the old daemon (which serves it until it detaches) when it is
//! between states: a request of the application arriving, a queue pair being connected or
//! accepted, connection requests waiting for its answer, STags reserved and not
//! registered, or a queue pair that has ended (or broke its rings) and is not destroyed
//! yet. Connection requests a listener had begun to read when it stopped are lost: the
//! peer sees its connection closed, and connects again.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use bytes::Bytes;
use ipc::push::PushRegion;
use ipc::qpseg::{Doorbell, Geometry, QpSegment};
use ipc::srq::SrqSegment;
use tokio::net::UnixStream;
use tokio::sync::oneshot;

use super::Device;
use super::mover::{Ask, MovingSession};
use super::queue_pairs::on_end;
use super::recvs::{ClientSrq, QpRecvs};
use super::servant::{self, Frozen, Prepared, ServantImage};
use super::session::{ClientListener, ClientPd, Objects, Out, Session};
use offload_engine::push::PdPush;
use offload_engine::{Engine, ExportedPd, ImportQueues, StagedPd};

/// How long a session waits for what it queued for the client to be written before it
/// moves.
const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The first octets of a session image: its format.
const FORMAT: &[u8; 8] = b"iWSess02";

/// What crosses, besides the descriptors (which come in this order: the control socket;
/// per domain its push region, then its memory files and sockets; per shared receive
/// queue its segment; per listener its socket; per queue pair its segment and its two
/// doorbells).
#[derive(serde::Serialize, serde::Deserialize)]
struct SessionImage {
    next_id: u32,
    pds: Vec<PdImage>,
    /// Regions by STag index, with the octets mapped for each.
    mrs: Vec<(u32, u64)>,
    mws: Vec<u32>,
    srqs: Vec<SrqImage>,
    listeners: Vec<u32>,
    qps: Vec<QpImage>,
}

impl SessionImage {
    /// The descriptors that come with it (see above for their order).
    fn descriptors(&self) -> usize {
        1 + self.pds.iter().map(|p| 1 + p.files as usize).sum::<usize>()
            + self.srqs.len()
            + self.listeners.len()
            + 3 * self.qps.len()
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct PdImage {
    id: u32,
    push_slots: u32,
    /// The engine's image of the domain.
    domain: Vec<u8>,
    /// Its descriptors (after the push region's).
    files: u32,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct SrqImage {
    id: u32,
    depth: u32,
    broken: bool,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct QpImage {
    id: u32,
    pd: u32,
    /// 0: none.
    srq: u32,
    /// Its number in the engine it comes from.
    was: u32,
    geometry: [u32; 4],
    servant: ServantImage,
}

/// What a session stopped to move, given back to it if the move does not happen.
struct Stopped {
    listeners: Vec<(u32, Arc<offload_engine::Listener>)>,
    servants: Vec<Frozen>,
}

impl Stopped {
    /// Everything runs on where it stopped.
    fn resume(self, s: &Arc<Session>) {
        let mut o = s.objs();
        for (id, l) in self.listeners {
            o.listeners.insert(id, ClientListener::start(s, id, l));
        }
        for f in self.servants {
            o.qps.insert(f.id(), f.resume());
        }
    }
}

/// The old daemon's side: stops the session of `s` (whose control socket is `stream`;
/// `idle`: no request is part-way in), packs it and answers `ask`; then waits for the
/// verdict. True if the session moved (it ends here), false if it goes on.
pub(super) async fn pack(s: &Arc<Session>, stream: &UnixStream, idle: bool, ask: Ask) -> bool {
    if ask.is_closed() {
        // The handover gave up waiting for this session.
        return false;
    }
    let mut stopped = match stop(s, idle).await {
        Ok(st) => st,
        Err(why) => {
            let _ = ask.send(Err(why));
            return false;
        }
    };
    // What was queued for the client goes out before the socket changes hands; a client
    // that does not read its socket keeps its session here.
    let (tx, rx) = oneshot::channel();
    let mut flush = Out::new(Bytes::new(), Vec::new());
    flush.written = Some(tx);
    let flushed = tokio::time::timeout(FLUSH_WAIT, async {
        if s.out.send(flush).await.is_ok() {
            let _ = rx.await;
        }
    });
    if flushed.await.is_err() {
        stopped.resume(s);
        let why = "the application does not read its control socket";
        let _ = ask.send(Err(why.into()));
        return false;
    }
    let exports = match export(s, &stopped).await {
        Ok(e) => e,
        Err(why) => {
            stopped.resume(s);
            let _ = ask.send(Err(why));
            return false;
        }
    };
    let packed = match image(s, stream, &exports, &mut stopped) {
        Ok(p) => p,
        Err(why) => {
            drop(exports);
            stopped.resume(s);
            let _ = ask.send(Err(why));
            return false;
        }
    };
    let (verdict, taken) = oneshot::channel();
    let (image, files) = packed;
    let sent = ask.send(Ok(MovingSession::new(image, files, verdict)));
    if sent.is_err() || !taken.await.unwrap_or(false) {
        drop(exports);
        stopped.resume(s);
        return false;
    }
    for (_, e) in exports {
        e.commit();
    }
    for f in stopped.servants {
        f.moved_away();
    }
    let mut o = s.objs();
    o.pds.clear();
    o.mrs.clear();
    o.mws.clear();
    o.srqs.clear();
    true
}

/// Stops the listeners and the servants, if the session can move.
async fn stop(s: &Arc<Session>, idle: bool) -> Result<Stopped, String> {
    let unsettled = |o: &Objects| {
        if !idle {
            Some("a request of the application was arriving")
        } else if o.connecting > 0 {
            Some("the application is connecting or accepting a queue pair")
        } else if !o.incoming.is_empty() {
            Some("connection requests wait for the application's answer")
        } else if !o.reserved.is_empty() {
            Some("the application holds STags reserved for registrations not made yet")
        } else {
            None
        }
    };
    let (listeners, servants) = {
        let mut o = s.objs();
        if let Some(why) = unsettled(&o) {
            return Err(why.into());
        }
        let l: Vec<_> = o.listeners.drain().collect();
        let q: Vec<_> = o.qps.drain().map(|(_, sv)| sv).collect();
        (l, q)
    };
    let listeners = listeners
        .into_iter()
        .map(|(id, l)| (id, l.stop()))
        .collect();
    let frozen = futures::future::join_all(servants.into_iter().map(servant::Servant::freeze));
    let stopped = Stopped {
        listeners,
        servants: frozen.await.into_iter().flatten().collect(),
    };
    // A request a listener handed out just before it stopped.
    let why = unsettled(&s.objs())
        .map(str::to_owned)
        .or_else(|| stopped.servants.iter().find_map(Frozen::unmovable));
    match why {
        Some(why) => {
            stopped.resume(s);
            Err(why)
        }
        None => Ok(stopped),
    }
}

/// Exports every domain of the session; every queue pair must be in one of them.
async fn export(s: &Arc<Session>, stopped: &Stopped) -> Result<Vec<(u32, ExportedPd)>, String> {
    let pds: Vec<(u32, ClientPd)> = s
        .objs()
        .pds
        .iter()
        .map(|(id, p)| (*id, p.clone()))
        .collect();
    let mut exports = Vec::with_capacity(pds.len());
    for (id, pd) in pds {
        let e = s
            .engine
            .export_pd(pd.engine)
            .await
            .map_err(|e| format!("protection domain {id}: {e}"))?;
        exports.push((id, e));
    }
    let moved: HashSet<u32> = exports
        .iter()
        .flat_map(|(_, e)| e.queue_pairs().iter().map(|q| q.0))
        .collect();
    match stopped
        .servants
        .iter()
        .find(|f| !moved.contains(&f.qp().num().0))
    {
        Some(f) => Err(format!("queue pair {} did not leave the engine", f.id())),
        None => Ok(exports),
    }
}

fn dup(fd: BorrowedFd<'_>) -> Result<OwnedFd, String> {
    fd.try_clone_to_owned()
        .map_err(|e| format!("cannot duplicate a descriptor: {e}"))
}

/// The session's image and descriptors.
fn image(
    s: &Arc<Session>,
    stream: &UnixStream,
    exports: &[(u32, ExportedPd)],
    stopped: &mut Stopped,
) -> Result<(Vec<u8>, Vec<OwnedFd>), String> {
    let o = s.objs();
    let mut files = vec![dup(stream.as_fd())?];
    let mut pds = Vec::with_capacity(exports.len());
    for (id, e) in exports {
        let push = &o.pds.get(id).ok_or("a domain went away")?.push;
        files.push(dup(push.region.fd())?);
        let domain = e.files();
        for fd in &domain {
            files.push(dup(*fd)?);
        }
        pds.push(PdImage {
            id: *id,
            push_slots: push.region.slots(),
            domain: e.image().to_vec(),
            files: domain.len() as u32,
        });
    }
    let mut srqs = Vec::with_capacity(o.srqs.len());
    for (id, q) in &o.srqs {
        let (depth, broken) = q.image();
        files.push(dup(q.fd())?);
        srqs.push(SrqImage {
            id: *id,
            depth,
            broken,
        });
    }
    let mut listeners = Vec::with_capacity(stopped.listeners.len());
    for (id, l) in &stopped.listeners {
        files.push(dup(l.socket())?);
        listeners.push(*id);
    }
    let mut qps = Vec::with_capacity(stopped.servants.len());
    for f in &mut stopped.servants {
        // Checked again now that its queue pair is parked: the connection delivered
        // until then (a completion ring that overflowed meanwhile keeps it here).
        if let Some(why) = f.unmovable() {
            return Err(why);
        }
        let pd = o
            .pds
            .iter()
            .find(|(_, p)| Arc::ptr_eq(&p.push, f.pd()))
            .map(|(id, _)| *id)
            .ok_or("a queue pair's domain went away")?;
        let srq = match f.recvs().srq() {
            None => 0,
            Some(q) => o
                .srqs
                .iter()
                .find(|(_, c)| Arc::ptr_eq(c, q))
                .map(|(id, _)| *id)
                .ok_or("a queue pair's shared receive queue went away")?,
        };
        files.extend(
            f.files()
                .map_err(|e| format!("a queue pair's descriptors: {e}"))?,
        );
        let g = f.geometry();
        qps.push(QpImage {
            id: f.id(),
            pd,
            srq,
            was: f.qp().num().0,
            geometry: [g.sq_depth, g.rq_depth, g.cq_depth, g.staging],
            servant: f.image(),
        });
    }
    let image = SessionImage {
        next_id: o.next_id,
        pds,
        mrs: o.mrs.iter().map(|(i, n)| (*i, *n)).collect(),
        mws: o.mws.iter().copied().collect(),
        srqs,
        listeners,
        qps,
    };
    let mut out = FORMAT.to_vec();
    postcard::to_io(&image, &mut out).map_err(|e| format!("the session image: {e}"))?;
    Ok((out, files))
}

/// A queue pair ready to start in the successor.
struct ReadyQp {
    id: u32,
    pd: u32,
    prep: Prepared,
    recvs: Arc<QpRecvs>,
    to_daemon: Doorbell,
}

impl ReadyQp {
    /// The queue pair `q` describes, its rings mapped and its servant restored: its three
    /// descriptors (segment, then its two doorbells) are the next of `next`; its domain
    /// must be one of `pds` and its shared receive queue (if any) one of `srqs`.
    fn restore(
        q: QpImage,
        next: &mut impl FnMut() -> OwnedFd,
        (pds, srqs): (&HashMap<u32, ClientPd>, &HashMap<u32, Arc<ClientSrq>>),
        device: &Device,
    ) -> Result<Self, String> {
        let geo = geometry(q.geometry)?;
        let seg = Arc::new(
            QpSegment::take_over(std::fs::File::from(next()), geo)
                .map_err(io_error("a queue pair's rings"))?,
        );
        let (to_daemon, to_client) = (Doorbell::from_fd(next()), Doorbell::from_fd(next()));
        let srq = match q.srq {
            0 => None,
            n => Some(
                srqs.get(&n)
                    .ok_or("a queue pair names no shared receive queue")?
                    .clone(),
            ),
        };
        if !pds.contains_key(&q.pd) {
            return Err("a queue pair names no protection domain".into());
        }
        let recvs = Arc::new(QpRecvs::new(seg.clone(), srq));
        let share = device.share.clone();
        let prep = Prepared::restore(seg, to_client, recvs.clone(), share, q.servant)?;
        Ok(Self {
            id: q.id,
            pd: q.pd,
            prep,
            recvs,
            to_daemon,
        })
    }
}

/// For `map_err`: an I/O error with `what` of the session image it happened to (its
/// control socket, a push region, ...) in front.
fn io_error(what: &str) -> impl Fn(std::io::Error) -> String {
    let what = what.to_owned();
    move |e: std::io::Error| format!("{what}: {e}")
}

/// A ring geometry a daemon before sent, checked as the application checks it.
fn geometry([sq_depth, rq_depth, cq_depth, staging]: [u32; 4]) -> Result<Geometry, String> {
    let g = Geometry {
        sq_depth,
        rq_depth,
        cq_depth,
        staging,
    };
    g.check()
        .map_err(|_| "a queue pair's ring geometry is out of range")?;
    Ok(g)
}

/// A session the successor made ready and does not run yet: [`start`](Self::start) it
/// once the daemon before let go of it; dropped, nothing of it ran here.
pub(super) struct StagedSession {
    engine: Engine,
    device: Arc<Device>,
    control: UnixStream,
    objs: Objects,
    staged: Vec<StagedPd>,
    /// The queue pairs' servants, by the queue pair's number in the engine before.
    ready: HashMap<u32, ReadyQp>,
    /// Listening, not accepting yet.
    listeners: Vec<(u32, offload_engine::Listener)>,
}

/// The successor's side, first half: builds the session an image describes on `engine`
/// (this shard's), everything that can fail, and nothing runs yet; `Err` says why not.
pub(super) fn stage(
    engine: &Engine,
    device: &Arc<Device>,
    image: &[u8],
    files: Vec<OwnedFd>,
) -> Result<StagedSession, String> {
    let body = image
        .strip_prefix(FORMAT)
        .ok_or("not a session image of this format (run an iwarpd of the same release)")?;
    let image: SessionImage =
        postcard::from_bytes(body).map_err(|e| format!("the session image cannot be read: {e}"))?;
    let want = image.descriptors();
    if files.len() != want {
        return Err(format!(
            "{} descriptors came with the session, its image names {want}",
            files.len()
        ));
    }
    let mut files = files.into_iter();
    let mut next = || files.next().expect("counted");
    let control = std::os::unix::net::UnixStream::from(next());
    control
        .set_nonblocking(true)
        .map_err(io_error("the control socket"))?;
    let control = UnixStream::from_std(control).map_err(io_error("the control socket"))?;
    let mut pds = HashMap::new();
    let mut staged: Vec<StagedPd> = Vec::with_capacity(image.pds.len());
    for p in &image.pds {
        let region = PushRegion::map(std::fs::File::from(next()), p.push_slots)
            .map_err(io_error("a push region"))?;
        let domain: Vec<OwnedFd> = (0..p.files).map(|_| next()).collect();
        let st = engine
            .stage_import(&p.domain, domain)
            .map_err(|e| format!("protection domain {}: {e}", p.id))?;
        let pd = ClientPd {
            engine: st.pd(),
            push: Arc::new(PdPush::new(region)),
        };
        pds.insert(p.id, pd);
        staged.push(st);
    }
    let mut srqs = HashMap::new();
    for q in image.srqs {
        let seg = SrqSegment::map(std::fs::File::from(next()), q.depth)
            .map_err(io_error("a shared receive queue"))?;
        srqs.insert(q.id, Arc::new(ClientSrq::restore(seg, q.broken)));
    }
    let mut listeners = Vec::with_capacity(image.listeners.len());
    for id in &image.listeners {
        let l = engine
            .listen_on_std(std::net::TcpListener::from(next()))
            .map_err(io_error("a listener"))?;
        l.stop_accepting();
        listeners.push((*id, l));
    }
    let mut ready = HashMap::new();
    for q in image.qps {
        let was = q.was;
        ready.insert(was, ReadyQp::restore(q, &mut next, (&pds, &srqs), device)?);
    }
    let staged_qps: HashSet<u32> = staged
        .iter()
        .flat_map(|st| st.queue_pairs().map(|q| q.0))
        .collect();
    if staged_qps != ready.keys().copied().collect() {
        return Err("the session's queue pairs and its domains' do not match".into());
    }
    Ok(StagedSession {
        engine: engine.clone(),
        device: device.clone(),
        control,
        objs: Objects {
            pds,
            mrs: image.mrs.into_iter().collect(),
            mws: image.mws.into_iter().collect(),
            srqs,
            next_id: image.next_id,
            ..Objects::default()
        },
        staged,
        ready,
        listeners,
    })
}

impl StagedSession {
    /// The successor's side, second half: the queue pairs start, the servants resume where
    /// the old ones stopped, the listeners accept; returns the session to serve.
    pub(super) fn start(self) -> MovedIn {
        let Self {
            engine,
            device,
            control,
            objs,
            staged,
            mut ready,
            listeners,
        } = self;
        let control = Arc::new(control);
        let (s, writer) = Session::start(engine, device.clone(), control.clone(), objs);
        let mut qps = Vec::with_capacity(ready.len());
        for st in staged {
            let (_, imported) = st.start(|was| {
                let r = &ready[&was.0];
                ImportQueues {
                    completions: r.prep.completions(),
                    srq: Some(offload_engine::Srq::fed(r.recvs.clone())),
                }
            });
            qps.extend(imported);
        }
        {
            let mut o = s.objs();
            for q in qps {
                let r = ready.remove(&q.was.0).expect("matched when staged");
                let push = servant::Push {
                    pd: o.pds[&r.pd].push.clone(),
                    share: device.share.clone(),
                };
                let ended = on_end(&s, r.id);
                let sv = r.prep.start(r.id, q.qp, r.to_daemon, push, ended);
                o.qps.insert(r.id, sv);
            }
            for (id, l) in listeners {
                o.listeners
                    .insert(id, ClientListener::start(&s, id, Arc::new(l)));
            }
        }
        // It opened the device in the daemon before: counted here at once, whatever the
        // limits (it was within them there).
        let serial = device.users.join_opened(&s);
        tracing::info!(
            pid = s.pid,
            uid = s.uid,
            "a local application's session moved in"
        );
        MovedIn {
            session: s,
            control,
            writer,
            serial,
        }
    }
}

/// A session that moved in and runs, for its control channel to serve
/// (`channel::serve`).
pub(super) struct MovedIn {
    pub(super) session: Arc<Session>,
    pub(super) control: Arc<UnixStream>,
    pub(super) writer: tokio::task::JoinHandle<()>,
    /// Its place in the registry of sessions.
    pub(super) serial: u64,
}
