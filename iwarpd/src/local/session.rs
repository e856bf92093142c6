//! One local client's session: the objects it owns, its writer (replies and events to
//! the client, in order), and their release when it ends. Its control channel is
//! `channel.rs`; its requests are answered by `requests.rs` and the modules of their
//! concerns.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use ipc::channel::send_some;
use ipc::control::{Event, Header, Reply};
use tokio::io::Interest;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use super::Device;
use super::logs;
use super::recvs::ClientSrq;
use super::servant::Servant;
use super::usage::Usage;
use offload_engine::push::PdPush;
use offload_engine::tpt::PdId;
use offload_engine::{Engine, Incoming};

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

/// A local client's session: the shard's engine it runs on, the objects it owns, and
/// where its messages to the client go (its writer).
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
    /// What the client owns, locked.
    pub(super) fn objs(&self) -> std::sync::MutexGuard<'_, Objects> {
        self.objs.lock().unwrap_or_else(PoisonError::into_inner)
    }

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

/// Writes the messages for the client to its control socket, in order, each with its
/// descriptors, until every sender is gone or the socket fails.
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

/// How a request is answered.
// Not boxed: nearly every request is answered now, and the answer goes straight into the
// reply (a box would be one more allocation per request).
#[allow(clippy::large_enum_variant)]
pub(super) enum Answer {
    /// With this reply (and the descriptors it carries), now.
    Reply(Reply, Vec<OwnedFd>),
    /// Already answered, or answered by a task of the session's once done.
    Sent,
}

impl From<Reply> for Answer {
    fn from(r: Reply) -> Self {
        Self::Reply(r, Vec::new())
    }
}

impl From<(Reply, Vec<OwnedFd>)> for Answer {
    fn from((r, fds): (Reply, Vec<OwnedFd>)) -> Self {
        Self::Reply(r, fds)
    }
}

/// Sends `r` (with the descriptors `fds`) as the reply to the request `h`.
pub(super) async fn reply(s: &Session, h: Header, r: Reply, fds: Vec<OwnedFd>) {
    tracing::trace!(func = h.func, txn = h.txn, fds = fds.len(), "reply");
    let _ = s.out.send(Out::new(r.encode(h.func, h.txn), fds)).await;
}

/// Hands the connection requests of `l` to the client of `s` as listener `listener`
/// (events), while it has fewer than `max_pending_incoming` unanswered; rejects the rest.
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
pub(super) async fn release(s: &Session) {
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
