//! The built-in service of the daemon: a remote-memory target (the demo echo service).
//! Every connection gets a zero-based region of `buffer_size` octets with remote read and
//! write rights, advertised in the MPA Reply private data, and every Send is echoed back.
//! A connection's task moves it whole to a successor daemon when asked (an upgrade).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use offload_engine::tpt::{Base, PdId};
use offload_engine::{
    Completions, Cq, Engine, ImportQueues, Incoming, LogLimit, Qp, QpEnd, QpInit, Refused, Slots,
    Srq, Wc,
};
use rdmap::{
    Access, Completion, Payload, PostError, RecvWr, RemoteBuf, STag, SendFlags, SendOp, SendWr,
    Sge, WcOpcode, WcStatus,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{JoinError, JoinSet};

use crate::config::Config;
use crate::proto::ServiceInfo;

/// Rights of a connection's region: everything a remote-memory target offers.
const TARGET_RIGHTS: Access = Access::LOCAL_READ
    .union(Access::LOCAL_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_WRITE);

/// Warnings about rejected connections: a few per 10 s, then a count.
static REJECTED: LogLimit = LogLimit::new(5, Duration::from_secs(10));

/// The built-in remote-memory service's name in the metrics (`service` label) and in
/// `iwarpd stat`.
pub(crate) const BUILT_IN_SERVICE: &str = "remote_memory";

/// The connections served, and how to reach each one's task.
pub(crate) struct Served {
    /// Places: max_qps in all, max_qps_per_address each.
    places: Arc<Slots>,
    conns: JoinSet<()>,
    /// Where each connection's task is asked to move to a successor.
    movers: Vec<mpsc::Sender<MoveRequest>>,
    /// Connection requests admitted.
    count: u64,
}

impl Served {
    /// None yet, with places for `cfg.max_qps` (`cfg.max_qps_per_address` per address).
    pub(crate) fn new(cfg: &Config) -> Self {
        Self {
            places: Slots::new(cfg.max_qps, cfg.max_qps_per_address),
            conns: JoinSet::new(),
            movers: Vec::new(),
            count: 0,
        }
    }

    /// Serves on the connections a successor took over from the daemon before, each in a
    /// task of its own (in a place if one is left: they were admitted there).
    pub(crate) fn resume(&mut self, resumed: Vec<Resumed>, stop: &watch::Receiver<bool>) {
        for r in resumed {
            let slot = self.places.enter(r.peer().ip()).ok();
            let (tx, rx) = mpsc::channel(1);
            self.movers.push(tx);
            let stop = stop.clone();
            self.conns.spawn(async move {
                let peer = r.peer();
                if let Err(e) = r.run(stop, rx).await {
                    tracing::warn!(%peer, error = %e, "connection failed");
                }
                drop(slot);
            });
        }
    }

    /// The next connection task to end (`None` if none runs).
    pub(crate) async fn join_next(&mut self) -> Option<Result<(), JoinError>> {
        self.conns.join_next().await
    }

    /// Waits for every connection task to end.
    pub(crate) async fn join_all(&mut self) {
        while self.conns.join_next().await.is_some() {}
    }

    /// Connection tasks running (rejections being sent included).
    pub(crate) fn len(&self) -> usize {
        self.conns.len()
    }

    /// No connection task runs.
    pub(crate) fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Connection requests admitted.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// Where to ask each connection still served to move to a successor.
    pub(crate) fn movers(&mut self) -> &[mpsc::Sender<MoveRequest>] {
        self.movers.retain(|m| !m.is_closed());
        &self.movers
    }

    /// Serves the connection request `inc` in a task of its own, or rejects it (in a
    /// task too) if it finds no place.
    pub(crate) fn admit(
        &mut self,
        inc: Incoming,
        engine: &Engine,
        cfg: &Arc<Config>,
        stop: &watch::Receiver<bool>,
    ) {
        let peer = inc.peer_addr();
        let slot = match self.places.enter(peer.ip()) {
            Ok(slot) => slot,
            Err(refused) => {
                let why: &'static [u8] = match refused {
                    Refused::Total(_) => b"iwarpd: too many connections (max_qps)",
                    Refused::Address(_) => {
                        b"iwarpd: too many connections from your \
                        address (max_qps_per_address)"
                    }
                };
                if let Some(left_out) = REJECTED.allow() {
                    tracing::warn!(
                        %peer, left_out, reason = %String::from_utf8_lossy(why),
                        "rejecting the connection"
                    );
                }
                self.conns.spawn(async move {
                    let _ = inc.reject(why).await;
                });
                return;
            }
        };
        self.count += 1;
        let (engine, cfg, stop) = (engine.clone(), Arc::clone(cfg), stop.clone());
        let (tx, rx) = mpsc::channel(1);
        self.movers.retain(|m| !m.is_closed());
        self.movers.push(tx);
        self.conns.spawn(async move {
            if let Err(e) = serve_conn(&engine, inc, &cfg, stop, rx).await {
                tracing::warn!(%peer, error = %e, "connection failed");
            }
            drop(slot);
        });
    }
}

/// One connection's memory: its protection domain, the advertised region and the
/// receive buffers.
#[derive(Debug)]
struct ConnMemory {
    engine: Engine,
    pd: PdId,
    region: STag,
    rx: STag,
    /// The memory went to a successor with the connection: nothing to free here.
    moved: bool,
}

impl Drop for ConnMemory {
    fn drop(&mut self) {
        if self.moved {
            return;
        }
        let tpt = self.engine.tpt();
        for stag in [self.region, self.rx] {
            if let Err(e) = tpt.deregister(stag) {
                tracing::warn!(%stag, error = %e, "deregister failed");
            }
        }
        if let Err(e) = tpt.dealloc_pd(self.pd) {
            tracing::warn!(error = %e, "protection domain not freed");
        }
    }
}

/// Serves one connection: region, private data, receives, echo, until it ends (or moves
/// to a successor).
async fn serve_conn(
    engine: &Engine,
    inc: Incoming,
    cfg: &Config,
    stop: watch::Receiver<bool>,
    mover: mpsc::Receiver<MoveRequest>,
) -> Result<(), String> {
    let peer = inc.peer_addr();
    let tpt = engine.tpt();
    let pd = engine.alloc_pd();
    let depth = cfg.recv_depth as usize;
    let region = tpt
        .alloc_region(pd, cfg.buffer_size as usize, Base::ZeroBased, TARGET_RIGHTS)
        .map_err(|e| format!("cannot register the region: {e}"))?;
    let rx = tpt
        .alloc_region(
            pd,
            cfg.recv_size as usize * depth,
            Base::ZeroBased,
            Access::LOCAL_READ | Access::LOCAL_WRITE,
        )
        .map_err(|e| format!("cannot register the receive buffers: {e}"))?;
    let mem = ConnMemory {
        engine: engine.clone(),
        pd,
        region,
        rx,
        moved: false,
    };
    let carry = Carry {
        peer,
        region,
        rx,
        slot: cfg.recv_size,
        depth,
        messages: 0,
        octets: 0,
        waiting: Vec::new(),
        ended: false,
        send_wcs: Vec::new(),
        recv_wcs: Vec::new(),
        srq: (0..depth).map(|i| recv_wr(rx, i, cfg.recv_size)).collect(),
    };
    // Receives go on a shared receive queue posted before the Reply leaves, so a Send
    // that follows the Reply at once finds a buffer.
    let queues = carry.queues();
    let info = ServiceInfo {
        remote: RemoteBuf {
            stag: region,
            to: 0,
            len: cfg.buffer_size,
        },
        credits: cfg.recv_depth,
        recv_size: cfg.recv_size,
    };
    let mut init = QpInit::with_completions(pd, queues.completions());
    init.srq = queues.srq.clone();
    let qp = inc
        .accept(init, &info.encode())
        .await
        .map_err(|e| format!("accept failed: {e}"))?;
    tracing::info!(%peer, qp = %qp.num(), region = %region, len = cfg.buffer_size, "connection accepted");
    run_conn(mem, qp, queues, carry, stop, mover).await
}

/// A connection taken over from the daemon before: its memory and queue pair, imported,
/// and what its service was doing.
pub(crate) struct Resumed {
    mem: ConnMemory,
    qp: Qp,
    queues: Queues,
    carry: Carry,
}

impl Resumed {
    /// The client's address.
    pub(crate) fn peer(&self) -> std::net::SocketAddr {
        self.carry.peer
    }

    /// Serves it on from where the daemon before left it.
    pub(crate) async fn run(
        self,
        stop: watch::Receiver<bool>,
        mover: mpsc::Receiver<MoveRequest>,
    ) -> Result<(), String> {
        tracing::info!(peer = %self.carry.peer, qp = %self.qp.num(), messages = self.carry.messages, "connection taken over");
        run_conn(self.mem, self.qp, self.queues, self.carry, stop, mover).await
    }
}

/// Makes ready a connection a `CONN` message of the handover carries (the domain's image
/// and descriptors, then the service's state), without starting it.
pub(crate) fn stage_conn(
    engine: &Engine,
    body: &[u8],
    fds: Vec<std::os::fd::OwnedFd>,
) -> Result<StagedConn, String> {
    let n = body
        .get(..4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 octets")) as usize)
        .ok_or("a connection message too short")?;
    let image = body.get(4..4 + n).ok_or("a connection message too short")?;
    let carry: Carry = postcard::from_bytes(&body[4 + n..])
        .map_err(|e| format!("the service's state cannot be read: {e}"))?;
    let staged = engine.stage_import(image, fds).map_err(|e| e.to_string())?;
    if staged.queue_pairs().count() != 1 {
        return Err("a connection message names other than one queue pair".into());
    }
    Ok(StagedConn {
        engine: engine.clone(),
        staged,
        carry,
    })
}

/// A connection of the daemon before, ready here but not running: [`start`](Self::start)
/// it once that daemon let go of it; dropped, it stays there.
pub(crate) struct StagedConn {
    engine: Engine,
    staged: offload_engine::StagedPd,
    carry: Carry,
}

impl StagedConn {
    /// Its queue pair starts (it reads and writes the socket from now on).
    pub(crate) fn start(self) -> Resumed {
        let queues = self.carry.queues();
        let (pd, mut qps) = self.staged.start(|_| queues.import());
        let qp = qps.pop().expect("one queue pair, checked when staged").qp;
        Resumed {
            mem: ConnMemory {
                engine: self.engine,
                pd,
                region: self.carry.region,
                rx: self.carry.rx,
                moved: false,
            },
            qp,
            queues,
            carry: self.carry,
        }
    }
}

/// A request that a connection's task hand it over: it answers with what crosses.
pub(crate) type MoveRequest = oneshot::Sender<Result<Moving, String>>;

/// A connection ready to cross: the `CONN` message's body and descriptors, and where the
/// handover says whether the successor took it.
pub(crate) struct Moving {
    pub(crate) body: Vec<u8>,
    pub(crate) fds: Vec<std::os::fd::OwnedFd>,
    pub(crate) verdict: oneshot::Sender<bool>,
}

/// What the service of one connection was doing, to go on with it in a successor.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Carry {
    peer: std::net::SocketAddr,
    region: STag,
    rx: STag,
    slot: u32,
    depth: usize,
    messages: u64,
    octets: u64,
    waiting: Vec<SendWr>,
    ended: bool,
    /// Completions not yet taken from the queues.
    send_wcs: Vec<Completion>,
    recv_wcs: Vec<Completion>,
    /// Receives posted to the shared receive queue and not yet taken.
    srq: Vec<RecvWr>,
}

/// A connection's completion queues and its shared receive queue.
#[derive(Clone)]
struct Queues {
    send_cq: Cq,
    recv_cq: Cq,
    srq: Option<Srq>,
}

impl Queues {
    fn completions(&self) -> Completions {
        Completions::queues(&self.send_cq, &self.recv_cq)
    }

    /// The same, for a queue pair taken over from a daemon before.
    fn import(&self) -> ImportQueues {
        ImportQueues {
            completions: self.completions(),
            srq: self.srq.clone(),
        }
    }
}

impl Carry {
    /// The connection's completion queues and its shared receive queue, holding
    /// `self.srq`.
    fn queues(&self) -> Queues {
        let srq = Srq::new();
        self.srq.iter().for_each(|wr| srq.post_recv(wr.clone()));
        Queues {
            send_cq: Cq::new(256 + self.depth),
            recv_cq: Cq::new(2 * self.depth + 16),
            srq: Some(srq),
        }
    }
}

/// The echo loop of one connection, from `carry`'s state, until it ends or moves.
async fn run_conn(
    mut mem: ConnMemory,
    qp: Qp,
    queues: Queues,
    carry: Carry,
    mut stop: watch::Receiver<bool>,
    mut mover: mpsc::Receiver<MoveRequest>,
) -> Result<(), String> {
    let peer = carry.peer;
    let engine = mem.engine.clone();
    let (send_cq, recv_cq) = (&queues.send_cq, &queues.recv_cq);
    let srq = queues.srq.clone().unwrap_or_default();
    let mut echo = Echo {
        engine: &engine,
        mem: &mem,
        qp: &qp,
        srq: &srq,
        slot: carry.slot,
        messages: carry.messages,
        octets: carry.octets,
        waiting: carry.waiting.into(),
        limit: carry.depth,
        ended: carry.ended,
    };
    // What the daemon before had not consumed yet.
    for wc in carry.recv_wcs {
        let r = echo.on_recv(&Wc { qp: qp.num(), wc });
        echo.end_on(r, peer);
    }
    if carry
        .send_wcs
        .iter()
        .any(|wc| wc.status == WcStatus::Success)
    {
        let r = echo.post_waiting();
        echo.end_on(r, peer);
    }
    let mut stopping = *stop.borrow();
    if stopping {
        qp.disconnect();
    }
    let end = loop {
        tokio::select! {
            // Send completions first: each receive posts an echo, so taking receives while
            // send completions wait would let those pile up past the send queue's depth (a
            // CI run overran the 272-deep queue so, choosing the two at random); taken
            // first, they never exceed the echoes in flight, at most the send queue.
            biased;
            wc = send_cq.next() => match wc {
                Ok(wc) if wc.wc.status == WcStatus::Success => {
                    let r = echo.post_waiting();
                    echo.end_on(r, peer);
                }
                Ok(wc) if wc.wc.status != WcStatus::Flushed => {
                    tracing::warn!(%peer, status = ?wc.wc.status, term = ?wc.wc.term, "echo failed");
                }
                Ok(_) => {}
                Err(e) => break overrun(&qp, &e).await,
            },
            wc = recv_cq.next() => match wc {
                Ok(wc) => {
                    let r = echo.on_recv(&wc);
                    echo.end_on(r, peer);
                }
                Err(e) => break overrun(&qp, &e).await,
            },
            end = qp.closed() => break end,
            r = stop.changed(), if !stopping => {
                stopping = true;
                if r.is_ok() {
                    qp.disconnect();
                }
            }
            Some(req) = mover.recv() => {
                if echo.move_away(req, &queues, peer).await {
                    let (messages, octets) = (echo.messages, echo.octets);
                    tracing::info!(%peer, qp = %qp.num(), messages, octets, "connection handed over");
                    mem.moved = true;
                    return Ok(());
                }
            }
        }
    };
    let (messages, octets) = (echo.messages, echo.octets);
    if end == QpEnd::Closed {
        tracing::info!(%peer, qp = %qp.num(), %end, messages, octets, "connection ended");
    } else {
        tracing::warn!(%peer, qp = %qp.num(), %end, messages, octets, "connection ended");
    }
    Ok(())
}

/// A completion queue lost completions: the connection cannot be served correctly any
/// more, so it is closed.
async fn overrun(qp: &Qp, e: &offload_engine::CqError) -> QpEnd {
    tracing::error!(qp = %qp.num(), error = %e, "closing the connection");
    qp.disconnect();
    qp.closed().await
}

/// Receive buffer `i` of the receive region `rx`, `size` octets each.
fn recv_wr(rx: STag, i: usize, size: u32) -> RecvWr {
    RecvWr {
        wr_id: i as u64,
        sgl: [Sge {
            stag: rx,
            to: i as u64 * u64::from(size),
            len: size,
        }]
        .into(),
    }
}

/// The echo half of a connection.
#[derive(Debug)]
struct Echo<'a> {
    engine: &'a Engine,
    mem: &'a ConnMemory,
    qp: &'a Qp,
    srq: &'a Srq,
    slot: u32,
    messages: u64,
    octets: u64,
    /// Echoes the send queue had no room for yet, oldest first: posted as earlier echoes
    /// complete. A client that keeps sending without reading its echoes fills it, and is
    /// then disconnected with that reason instead of losing echoes.
    waiting: VecDeque<SendWr>,
    /// The most echoes `waiting` may hold (the client's receive credits).
    limit: usize,
    /// Set once the connection is being ended for a reason of ours: nothing more is
    /// echoed.
    ended: bool,
}

impl Echo<'_> {
    /// A receive completed: send its octets back and post the buffer again (before the
    /// echo, so a client that waits for echoes never finds the daemon without a buffer).
    /// `Err` says why the connection must end.
    fn on_recv(&mut self, wc: &Wc) -> Result<(), String> {
        let c = &wc.wc;
        if self.ended {
            return Ok(());
        }
        if c.status != WcStatus::Success {
            if c.status != WcStatus::Flushed {
                tracing::warn!(qp = %wc.qp, status = ?c.status, term = ?c.term, "receive failed");
            }
            return Ok(());
        }
        let Ok(i) = usize::try_from(c.wr_id) else {
            return Ok(());
        };
        let op = if c.opcode == WcOpcode::RecvImmediate {
            SendOp::Immediate {
                data: c.immediate.unwrap_or(0),
            }
        } else {
            let mut data = vec![0; c.byte_len as usize];
            if let Err(e) = self.engine.tpt().read(
                self.mem.pd,
                self.mem.rx,
                i as u64 * u64::from(self.slot),
                &mut data,
            ) {
                return Err(format!("cannot read a receive buffer: {e}"));
            }
            SendOp::Send {
                data: Payload::Bytes(Bytes::from(data)),
                invalidate: None,
                immediate: None,
            }
        };
        self.srq.post_recv(recv_wr(self.mem.rx, i, self.slot));
        self.messages += 1;
        self.octets += u64::from(c.byte_len);
        self.waiting.push_back(SendWr {
            wr_id: i as u64,
            op,
            flags: SendFlags::SIGNALED,
        });
        self.post_waiting()?;
        if self.waiting.len() > self.limit {
            return Err(format!(
                "the client sends faster than it reads its echoes ({} echoes waiting for \
                 room): disconnecting it rather than dropping echoes",
                self.waiting.len()
            ));
        }
        Ok(())
    }

    /// Ends the connection, once, when `r` says it must end.
    fn end_on(&mut self, r: Result<(), String>, peer: std::net::SocketAddr) {
        if let Err(why) = r
            && !self.ended
        {
            self.ended = true;
            self.waiting.clear();
            tracing::warn!(%peer, qp = %self.qp.num(), "{why}");
            self.qp.disconnect();
        }
    }

    /// Hands the connection to a successor if it can (true: it is gone from here). The
    /// queue pair is exported, and the completions and posted receives it had go with
    /// it; if the successor does not take it, they are put back before it runs again.
    async fn move_away(
        &mut self,
        req: MoveRequest,
        queues: &Queues,
        peer: std::net::SocketAddr,
    ) -> bool {
        let export = match self.engine.export_pd(self.mem.pd).await {
            Ok(e) => e,
            Err(e) => {
                let _ = req.send(Err(e.to_string()));
                return false;
            }
        };
        let drain = |cq: &Cq| {
            let mut out = Vec::new();
            let _ = cq.poll_with(usize::MAX, |wc| out.push(wc.wc));
            out
        };
        let srq = queues.srq.clone().unwrap_or_default();
        let carry = Carry {
            peer,
            region: self.mem.region,
            rx: self.mem.rx,
            slot: self.slot,
            depth: self.limit,
            messages: self.messages,
            octets: self.octets,
            waiting: self.waiting.iter().cloned().collect(),
            ended: self.ended,
            send_wcs: drain(&queues.send_cq),
            recv_wcs: drain(&queues.recv_cq),
            srq: srq.take_all(),
        };
        let fds: Result<Vec<_>, _> = export
            .files()
            .iter()
            .map(|fd| fd.try_clone_to_owned())
            .collect();
        let image = export.image();
        let mut body = (image.len() as u32).to_le_bytes().to_vec();
        body.extend_from_slice(image);
        let packed = postcard::to_extend(&carry, body).map_err(|e| e.to_string());
        let (tx, rx) = oneshot::channel();
        let sent = match (fds, packed) {
            (Ok(fds), Ok(body)) => req
                .send(Ok(Moving {
                    body,
                    fds,
                    verdict: tx,
                }))
                .is_ok(),
            (Err(e), _) => {
                let _ = req.send(Err(format!("cannot duplicate a descriptor: {e}")));
                false
            }
            (_, Err(e)) => {
                let _ = req.send(Err(e));
                false
            }
        };
        if sent && rx.await == Ok(true) {
            export.commit();
            return true;
        }
        // Not taken: everything back as it was, before the queue pair runs again.
        carry.srq.into_iter().for_each(|wr| srq.post_recv(wr));
        queues
            .send_cq
            .deliver(self.qp.num(), carry.send_wcs.into_iter());
        queues
            .recv_cq
            .deliver(self.qp.num(), carry.recv_wcs.into_iter());
        drop(export);
        false
    }

    /// Posts waiting echoes, in order, while the send queue has room.
    fn post_waiting(&mut self) -> Result<(), String> {
        while let Some(wr) = self.waiting.front() {
            // A clone shares the payload: only the request itself is copied.
            match self.qp.post_send(wr.clone()) {
                Ok(()) => {
                    self.waiting.pop_front();
                }
                Err(PostError::QueueFull) => break,
                Err(e) => return Err(format!("cannot post an echo: {e}")),
            }
        }
        Ok(())
    }
}
