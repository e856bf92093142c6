//! Daemon mode's server side (seed 002's I/O-unit module driver): `iwarpd` serving local
//! applications over a Unix socket, with the [`ipc`] ABI.
//!
//! - [`LocalService`] accepts clients; each gets a session (`session.rs`): its control
//!   channel (`channel.rs`: requests in order, replies and events through one writer)
//!   and the objects it created, which are its alone: protection domains, regions and
//!   windows (`memory.rs`: the client's memory files, mapped here), shared receive
//!   queues, listeners, connection requests and queue pairs (`connections.rs`,
//!   `queue_pairs.rs`; `requests.rs` hands each request to one of these). Every id a
//!   request names is checked against the client's own objects, so a client reaches only
//!   its own domains' memory.
//! - Each connected queue pair gets a servant (`servant/`): the task that moves work
//!   requests from the client's rings into the engine and completions back (push-push:
//!   completions and received payloads land in the client's memory without the client
//!   asking). Before the send queue it scans its domain's push region (seed 000; the
//!   resources it draws on are in `offload-engine/src/push/share.rs`).
//! - The engine reads a queue pair's receive ring, then its shared receive queue, on
//!   demand (`recvs.rs`), so a receive is there for the peer as soon as it is posted.
//! - A client that goes away (exit, crash, SIGKILL) ends its session: its queue pairs
//!   close (the peers see a clean close), its listeners stop and its memory is released.
//! - At an upgrade, a session moves to the successor daemon whole (`moving.rs`:
//!   [`SessionMover::pack`] here, [`LocalService::adopt`] there); the client notices
//!   nothing.

mod admit;
mod channel;
mod connections;
mod files;
mod listing;
mod logs;
mod memory;
mod mover;
mod moving;
mod queue_pairs;
mod recvs;
mod replies;
mod requests;
mod servant;
mod session;
mod usage;
mod users;

pub use listing::engine_counters;
pub use mover::{MovingSession, SessionMover};
pub use offload_engine::push::PushConfig;

use std::io;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::unix::net::UnixListener as StdUnixListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::net::UnixListener;

use offload_engine::Engine;

/// Settings of the local service: limits on what one user's applications may hold
/// together (summed over its sessions, by the peer credentials of their control sockets),
/// on what the daemon holds for all of them, and the push path's resources.
#[derive(Clone, Debug)]
pub struct LocalConfig {
    /// Seed 000's push path.
    pub push: PushConfig,
    /// Applications attached at once (counted once they open the device); one more is
    /// refused when it opens the device.
    pub max_clients: usize,
    /// Applications one user may have attached at once.
    pub max_clients_per_user: usize,
    /// Queue pairs (connected or connecting) of one user.
    pub max_qps: usize,
    /// Regions, memory windows and reserved STags of one user (each takes an entry of the
    /// memory table, and a tag index of the daemon's).
    pub max_mrs: usize,
    /// The same, of every application together.
    pub max_device_mrs: usize,
    /// Octets of registered memory the daemon maps for every application together; one
    /// user may have half.
    pub max_registered: u64,
    /// Connection requests waiting for one application's accept or reject; more are
    /// rejected.
    pub max_pending_incoming: usize,
    /// Shared receive queues of one user.
    pub max_srqs: usize,
    /// Listeners of one user (each a listening socket in the daemon).
    pub max_listeners: usize,
    /// The deepest send or receive queue a queue pair may ask for (more than
    /// [`ipc::qpseg::MAX_DEPTH`] counts as that); its ring is the power of two at or above
    /// the depth.
    pub max_queue_depth: u32,
    /// Octets of each queue pair's staging area, where owned payloads (`Bytes`) longer
    /// than an entry holds wait until their request is retired: it bounds how many such
    /// payloads are in flight (16 of 64 KiB in the default 1 MiB), and they are the
    /// application's pages once written. Rounded up to a multiple of 64, and at most
    /// [`ipc::qpseg::MAX_STAGING`].
    pub staging: u32,
}

impl Default for LocalConfig {
    fn default() -> Self {
        Self {
            push: PushConfig::default(),
            max_clients: 1024,
            max_clients_per_user: 256,
            max_qps: 4096,
            max_mrs: 65536,
            max_device_mrs: 1 << 20,
            max_registered: physical_memory(),
            max_pending_incoming: 64,
            max_srqs: 1024,
            max_listeners: 256,
            max_queue_depth: 16384,
            staging: ipc::qpseg::Geometry::default().staging,
        }
    }
}

/// This machine's memory (`MemTotal`), the default for what the daemon maps of its
/// applications' registered memory: an application that needs more than the machine has
/// resident for RDMA is misusing it (or trying to fill the daemon's address space).
fn physical_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let kib = m.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
            kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
        })
        .map_or(64 << 30, |kib| kib << 10)
}

/// Binds the control socket at `path`, replacing a stale socket file left by a daemon
/// that died (but not a socket a live daemon still answers on).
fn bind(path: &Path) -> io::Result<StdUnixListener> {
    match StdUnixListener::bind(path) {
        Ok(l) => Ok(l),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "{}: another iwarpd already serves this control socket; stop it or \
                         choose another path with --control",
                        path.display()
                    ),
                ));
            }
            std::fs::remove_file(path)?;
            StdUnixListener::bind(path)
        }
        Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    }
}

/// What the shards share: the push path's resources, and what the device's counters are
/// summed from.
#[derive(Debug)]
struct Device {
    /// Every shard's engine.
    engines: Vec<Engine>,
    share: Arc<offload_engine::push::PushShare>,
    /// What one user may hold, and the daemon for all of them.
    limits: LocalConfig,
    /// Every session, by the user it runs as.
    users: users::Users,
    /// The daemon's other services, listed by `iwarpd stat`.
    services: listing::Services,
    /// How many memory files the daemon may map for its clients.
    files: files::FileBudget,
}

impl Device {
    /// The device's counters, with `own` (the asking client's queue pairs and regions).
    fn counters(&self, own: (u32, u32)) -> ipc::control::DeviceCounters {
        let mut d = ipc::control::DeviceCounters {
            queue_pairs: own.0,
            memory_entries: own.1,
            clients: self.users.opened() as u32,
            ..Default::default()
        };
        let mut traffic = rdmap::StreamStats::default();
        for e in &self.engines {
            let st = e.stats();
            d.device_queue_pairs += st.queue_pairs as u32;
            d.connections += st.connections;
            d.connections_closed += st.connections_closed;
            traffic.add(&st.traffic);
        }
        d.totals.traffic = traffic;
        d.totals.push = self.share.totals();
        d
    }
}

/// The local service running: an acceptor and one or more shards, each a thread with a
/// single-threaded runtime and an engine of its own. A client's session, its queue pairs'
/// servants and their connections all run on the one shard it was given (round robin), so
/// that moving a request from its ring to its socket, and a completion back, never hops
/// between threads; clients on different shards run in parallel.
///
/// It runs until [`stop`](Self::stop) or the end of the process.
#[derive(Debug)]
pub struct LocalService {
    device: Arc<Device>,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    /// Whether the acceptor takes new clients now (the sessions run on either way).
    accepting: tokio::sync::watch::Sender<bool>,
    /// The control socket (the acceptor has its own descriptor of it).
    control: StdUnixListener,
    /// Where sessions moving in from a daemon before go, in turn.
    shards: Vec<tokio::sync::mpsc::Sender<ToShard>>,
    next_shard: std::sync::atomic::AtomicUsize,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// What a shard is given to run.
enum ToShard {
    /// A new client.
    Attach(std::os::unix::net::UnixStream),
    /// A session moving in from a daemon before (see [`LocalService::adopt`]): made
    /// ready (`ready` says whether it could be), then started once `go` says so.
    Adopt {
        image: Vec<u8>,
        files: Vec<std::os::fd::OwnedFd>,
        ready: tokio::sync::oneshot::Sender<Result<(), String>>,
        go: tokio::sync::oneshot::Receiver<()>,
    },
}

/// A session moved in from a daemon before, ready on a shard of this service and not
/// running: [`start`](Self::start) it once that daemon let go of it. Dropped instead,
/// nothing of it ran here (its memory and sockets are let go of here; the daemon before
/// still holds them).
#[derive(Debug)]
pub struct AdoptedSession {
    go: tokio::sync::oneshot::Sender<()>,
}

impl AdoptedSession {
    /// The session runs here from now on.
    pub fn start(self) {
        let _ = self.go.send(());
    }
}

/// A handle on the local service's counters that outlives borrows of it (for a metrics
/// endpoint).
#[derive(Clone, Debug)]
pub struct LocalCounters(Arc<Device>);

impl LocalCounters {
    /// The counters now: applications attached, queue pairs, connections and the traffic
    /// and push path totals of every shard.
    pub fn read(&self) -> ipc::control::DeviceCounters {
        self.0.counters((0, 0))
    }
}

impl LocalService {
    /// A handle on the service's counters.
    pub fn counters(&self) -> LocalCounters {
        LocalCounters(self.device.clone())
    }

    /// Binds the control socket at `path` (replacing a stale socket file left by a
    /// daemon that died, never one a live daemon answers on) and starts `shards` shards (at
    /// least one) whose engines are configured by `engine`; returns once the socket is
    /// bound.
    pub fn start(
        path: &Path,
        engine: offload_engine::EngineConfig,
        cfg: LocalConfig,
        shards: usize,
    ) -> io::Result<Self> {
        Self::start_on(bind(path)?, engine, cfg, shards)
    }

    /// [`Self::start`] on a control socket already bound (one a daemon before handed
    /// over).
    pub fn start_on(
        control: StdUnixListener,
        engine: offload_engine::EngineConfig,
        cfg: LocalConfig,
        shards: usize,
    ) -> io::Result<Self> {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (accepting, on) = tokio::sync::watch::channel(true);
        let device = Arc::new(Device {
            engines: (0..shards.max(1))
                .map(|_| Engine::new(engine.clone()))
                .collect(),
            share: Arc::new(offload_engine::push::PushShare::new(cfg.push.clone())),
            limits: cfg,
            users: users::Users::default(),
            services: listing::Services::default(),
            files: files::FileBudget::read(),
        });
        let mut threads = Vec::new();
        let mut inboxes = Vec::new();
        for (n, engine) in device.engines.iter().enumerate() {
            // Bounded: an acceptor faster than the shards waits (and the kernel's backlog
            // slows a flood of connections down), rather than queueing without end.
            let (tx, rx) = tokio::sync::mpsc::channel(HANDOFF);
            let (engine, device) = (engine.clone(), device.clone());
            let stopped = stopped.clone();
            threads.push(on_thread(format!("iwarpd-local-{n}"), move |ready| {
                let _ = ready.send(Ok(()));
                shard(engine, rx, device, stopped)
            })?);
            inboxes.push(tx);
        }
        let shards = inboxes.clone();
        let acceptor = control.try_clone()?;
        acceptor.set_nonblocking(true)?;
        threads.push(on_thread(
            "iwarpd-accept".into(),
            move |ready| async move {
                match UnixListener::from_std(acceptor) {
                    Ok(listener) => {
                        let _ = ready.send(Ok(()));
                        accept(listener, inboxes, stopped, on).await;
                    }
                    Err(e) => drop(ready.send(Err(e))),
                }
            },
        )?);
        Ok(Self {
            device,
            stop: Some(stop),
            accepting,
            control,
            shards,
            next_shard: Default::default(),
            threads,
        })
    }

    /// The sessions attached now, to move to a successor daemon one by one
    /// ([`SessionMover::pack`]).
    pub fn sessions(&self) -> Vec<SessionMover> {
        self.device.users.movers()
    }

    /// Makes ready, on one of the shards, a session a daemon before packed
    /// ([`MovingSession`]'s image and descriptors): everything that can fail, but nothing
    /// runs until [`AdoptedSession::start`] (after the daemon before let go of it).
    /// `Err` says why not; nothing of it runs here then, and the daemon before goes on
    /// with it.
    pub async fn adopt(
        &self,
        image: Vec<u8>,
        files: Vec<std::os::fd::OwnedFd>,
    ) -> Result<AdoptedSession, String> {
        let n = self.next_shard.fetch_add(1, Ordering::Relaxed) % self.shards.len();
        let (ready, result) = tokio::sync::oneshot::channel();
        let (go, on_go) = tokio::sync::oneshot::channel();
        let stopped = || "the local service stopped".to_owned();
        self.shards[n]
            .send(ToShard::Adopt {
                image,
                files,
                ready,
                go: on_go,
            })
            .await
            .map_err(|_| stopped())?;
        result.await.map_err(|_| stopped())??;
        Ok(AdoptedSession { go })
    }

    /// The control socket, to hand to a successor (which then accepts on it too).
    pub fn socket(&self) -> BorrowedFd<'_> {
        self.control.as_fd()
    }

    /// Stops taking new clients here until [`resume_accepting`](Self::resume_accepting)
    /// (a successor the control socket was handed to takes them); the clients attached
    /// are served on.
    pub fn stop_accepting(&self) {
        self.accepting.send_replace(false);
    }

    /// Takes new clients here again (a successor the control socket was handed to went
    /// away).
    pub fn resume_accepting(&self) {
        self.accepting.send_replace(true);
    }

    /// Applications attached now (that opened the device).
    pub fn clients(&self) -> u32 {
        self.device.users.opened() as u32
    }

    /// Stops accepting and ends every session (their queue pairs close); returns once the
    /// threads are gone.
    pub fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Runs `body` on a new thread with a single-threaded runtime; returns once `body` said
/// it is ready (or why it cannot be).
fn on_thread<F, Fut>(name: String, body: F) -> io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce(std::sync::mpsc::Sender<io::Result<()>>) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new().name(name).spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => return drop(tx.send(Err(e))),
        };
        rt.block_on(body(tx));
    })?;
    rx.recv()
        .map_err(|_| io::Error::other("a thread of the local service ended"))??;
    Ok(thread)
}

/// Accepts clients and hands them to the shards in turn while `on` says so, until
/// stopped.
async fn accept(
    listener: UnixListener,
    shards: Vec<tokio::sync::mpsc::Sender<ToShard>>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
    mut on: tokio::sync::watch::Receiver<bool>,
) {
    let mut next = 0;
    loop {
        // Paused: wait until accepting again.
        tokio::select! {
            on = on.wait_for(|on| *on) => if on.is_err() { return },
            Ok(_) = stopped.wait_for(|s| *s) => return,
        }
        tokio::select! {
            Ok(_) = on.wait_for(|on| !*on) => {}
            got = listener.accept() => match got.and_then(|(s, _)| s.into_std()) {
                Ok(stream) => {
                    let _ = shards[next % shards.len()].send(ToShard::Attach(stream)).await;
                    next += 1;
                }
                Err(e) => {
                    logs::limited!(logs::ACCEPT_FAILED, warn, error = %e, "control socket accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
            Ok(_) = stopped.wait_for(|s| *s) => return,
        }
    }
}

/// Connections handed from the acceptor to a shard and not taken yet, at most.
const HANDOFF: usize = 64;

/// One shard: runs the sessions of the clients handed to it, until stopped.
async fn shard(
    engine: Engine,
    mut clients: tokio::sync::mpsc::Receiver<ToShard>,
    device: Arc<Device>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let mut sessions = tokio::task::JoinSet::new();
    // The acceptor may stop before the shard (a successor took the control socket): the
    // sessions run on.
    let mut accepting = true;
    // Sessions that may run at once on one shard: every application the daemon serves
    // and every connection waiting to open the device could be on this one; past that, a
    // new connection waits (in the kernel's backlog) for one to end.
    let most = device.limits.max_clients + users::MAX_UNOPENED;
    loop {
        tokio::select! {
            got = clients.recv(), if accepting && sessions.len() < most => {
                match got {
                    None => accepting = false,
                    Some(ToShard::Attach(stream)) => match tokio::net::UnixStream::from_std(stream) {
                        Ok(stream) => {
                            sessions.spawn(channel::run(engine.clone(), stream, device.clone()));
                        }
                        Err(e) => {
                            logs::limited!(logs::ACCEPT_FAILED, warn, error = %e, "client not served");
                        }
                    },
                    Some(ToShard::Adopt { image, files, ready, go }) => {
                        match moving::stage(&engine, &device, &image, files) {
                            Ok(staged) => {
                                sessions.spawn(async move {
                                    if go.await.is_ok() {
                                        let m = staged.start();
                                        let member = channel::Membership { serial: m.serial, go: None };
                                        channel::serve(m.session, m.control, m.writer, member).await;
                                    }
                                });
                                let _ = ready.send(Ok(()));
                            }
                            Err(why) => drop(ready.send(Err(why))),
                        }
                    }
                }
            }
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
            Ok(_) = stopped.wait_for(|s| *s) => return,
        }
    }
}
