//! The engine: one software RNIC. It owns the TPT and numbers queue pairs; connections run
//! as tokio tasks.

mod cqp;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::BytesMut;
use mpa::{MpaConfig, Negotiated};
use rdmap::{RecvWr, Stream, StreamConfig, TermCode};
use tokio::net::TcpStream;

use crate::conn::{Completions, Connection, Home, Qp, QpNum, Shared};
use crate::net::SocketOptions;
use crate::pcap::{CaptureTap, Tap};
use crate::push::{PdPush, PushShare, QpPush};
use crate::srq::Srq;
use crate::stats::{EngineStats, Totals};
use crate::timeouts::Timeouts;
use crate::tpt::{PdId, QpId, Tpt};
use cq::Cq;
use ipc::push::PushRegion;
use mpa::ConnectError;

/// Settings of an engine.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EngineConfig {
    /// What MPA asks for on every connection: revision, CRC, markers, IRD/ORD,
    /// peer-to-peer RTR, handshake timeout.
    pub mpa: MpaConfig,
    /// Queue depths and close timeout of every queue pair. Its `mulpdu` is a ceiling: the
    /// engine uses the smaller of it and what the connection's MSS allows.
    pub stream: StreamConfig,
    /// TCP socket options.
    pub socket: SocketOptions,
    /// How long a TCP connect may take.
    pub connect_timeout: Duration,
    /// How long a connection may go without progress, idle or with work outstanding.
    pub timeouts: Timeouts,
    /// How long the Initiator waits after the peer's MPA Reply before its first FPDU (the
    /// RTR in peer-to-peer mode; otherwise the queue pair, and so the application's
    /// first message, is held back as long). Linux siw as the Responder writes its Reply
    /// before it hands the socket to its queue pair, and octets that arrive in between
    /// are read only when more follow: an RTR or first Send that lands in that window
    /// stalls the connection for good. On an emulated VM, 4 of 100 connections of
    /// rping stalled with the RTR 0.2 ms after the Reply; none of 300 once it left a
    /// moment later. Default [`FIRST_FPDU_DELAY`](Self::FIRST_FPDU_DELAY), once per
    /// connection; zero sends at once.
    pub first_fpdu_delay: Duration,
    /// The most connections a listener holds in the MPA handshake at once (accepted by
    /// TCP, Request not yet complete, or complete and waiting up to 5 s for room in the
    /// listener's queue of 64 while the application does not accept); more are closed
    /// at once.
    pub max_pending_handshakes: usize,
    /// The most of those from one IP address, so one source cannot take them all.
    pub max_pending_per_address: usize,
    /// Where to write a pcapng of every connection (`None`: no capture). See
    /// [`CaptureTap`] for what the capture holds.
    pub pcap: Option<CaptureTap>,
    /// Time added to every registration queued on the control queue
    /// ([`Engine::register_queued`]), before it is done: emulates a slower control path
    /// (a round trip to a daemon or a hardware RNIC's control processor), to see that
    /// work requests wait for it. Zero by default.
    pub registration_delay: Duration,
    /// Seed 000's push path for this engine's own queue pairs (embedded mode): a lone
    /// small request is written whole into its domain's push region and executed from
    /// there if the admission checks pass (see [`crate::PushConfig`]). `None`: every
    /// request goes through the send queue.
    pub push: Option<crate::PushConfig>,
}

impl EngineConfig {
    /// Default [`max_pending_handshakes`](Self::max_pending_handshakes).
    pub const MAX_PENDING_HANDSHAKES: usize = 256;
    /// Default [`max_pending_per_address`](Self::max_pending_per_address).
    pub const MAX_PENDING_PER_ADDRESS: usize = 64;
    /// Default [`first_fpdu_delay`](Self::first_fpdu_delay).
    pub const FIRST_FPDU_DELAY: Duration = Duration::from_millis(1);
}

impl Default for EngineConfig {
    /// MPA revision 2 with CRC and IRD/ORD 16, no markers; FPDUs as large as the MSS
    /// allows; TCP_NODELAY; a 10-second connect timeout.
    fn default() -> Self {
        let mut stream = StreamConfig::default();
        stream.mulpdu = mpa::MAX_ULPDU;
        Self {
            mpa: MpaConfig::default(),
            stream,
            socket: SocketOptions::default(),
            connect_timeout: Duration::from_secs(10),
            timeouts: Timeouts::default(),
            first_fpdu_delay: Self::FIRST_FPDU_DELAY,
            max_pending_handshakes: Self::MAX_PENDING_HANDSHAKES,
            max_pending_per_address: Self::MAX_PENDING_PER_ADDRESS,
            pcap: None,
            registration_delay: Duration::ZERO,
            push: Some(crate::PushConfig::default()),
        }
    }
}

/// What a new queue pair is made of. Start from [`QpInit::new`] and set fields (or use
/// struct update syntax), so new fields do not break callers.
#[derive(Clone, Debug)]
pub struct QpInit {
    /// Its protection domain: it reaches only this domain's memory.
    pub pd: PdId,
    /// Where its completions go.
    pub completions: Completions,
    /// A shared receive queue to draw on when its own receive queue is empty.
    pub srq: Option<Srq>,
    /// Receives posted before the connection carries any data, so the peer's first Send
    /// finds a buffer (the accepting side cannot post in between: the Initiator may send
    /// as soon as it has the MPA Reply).
    pub recvs: Vec<RecvWr>,
    /// Run seed 000's push path for this queue pair's lone small requests (when the
    /// engine's [`push`](EngineConfig::push) is on). iwarpd's servants turn it off: they
    /// run the push path of their clients' regions themselves.
    pub push: bool,
    /// Its send and receive queue depths, `None` for the engine's
    /// ([`StreamConfig`]'s `sq_depth`, `rq_depth`).
    pub queue_depths: Option<(usize, usize)>,
    /// Report every send request when it ends, unsignaled ones too, each completion
    /// carrying its request's flags ([`rdmap::Stream::set_complete_every_send`]): for a
    /// completion sink that must know when each request is done (iwarpd's servants).
    pub complete_every_send: bool,
}

impl QpInit {
    /// A queue pair of `pd` whose completions all go to `cq`.
    pub fn new(pd: PdId, cq: &Cq) -> Self {
        Self::with_completions(pd, Completions::queue(cq))
    }

    /// A queue pair of `pd` whose completions go where `completions` says.
    pub fn with_completions(pd: PdId, completions: Completions) -> Self {
        Self {
            pd,
            completions,
            srq: None,
            recvs: Vec::new(),
            push: true,
            queue_depths: None,
            complete_every_send: false,
        }
    }
}

/// The next queue pair number, process-wide like STag indices and protection domain
/// numbers, so that a queue pair keeps its number when it moves to another engine.
static NEXT_QP: AtomicU32 = AtomicU32::new(1);

/// A new queue pair number of this process.
pub(crate) fn next_qp_num() -> QpNum {
    QpNum(NEXT_QP.fetch_add(1, Ordering::Relaxed))
}

#[derive(Debug)]
pub(crate) struct Inner {
    cfg: EngineConfig,
    tpt: Arc<Tpt>,
    qps: Mutex<HashMap<QpNum, Weak<Shared>>>,
    totals: Arc<Totals>,
    /// Seed 000's resources, and each protection domain's push region (while a queue
    /// pair of the domain lives).
    push: Option<Arc<PushShare>>,
    push_regions: Mutex<HashMap<PdId, Weak<PdPush>>>,
    /// The control queue, started with the first queued registration.
    cqp: std::sync::OnceLock<cqp::ControlQueue>,
}

/// One software RNIC. Cheap to clone; clones share it.
#[derive(Clone, Debug)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl Engine {
    /// An engine with `cfg`. Connections need a tokio runtime.
    pub fn new(cfg: EngineConfig) -> Self {
        let push = cfg.push.clone().map(|p| Arc::new(PushShare::new(p)));
        Self {
            inner: Arc::new(Inner {
                cfg,
                tpt: Arc::new(Tpt::new()),
                qps: Mutex::new(HashMap::new()),
                totals: Arc::default(),
                push,
                push_regions: Mutex::default(),
                cqp: std::sync::OnceLock::new(),
            }),
        }
    }

    pub(crate) fn from_inner(inner: Arc<Inner>) -> Self {
        Self { inner }
    }

    pub(crate) fn downgrade(&self) -> Weak<Inner> {
        Arc::downgrade(&self.inner)
    }

    pub(crate) fn cqp_cell(&self) -> &std::sync::OnceLock<cqp::ControlQueue> {
        &self.inner.cqp
    }

    /// The capture of a new connection on `sock` (nothing without a tap).
    pub(crate) fn tap(&self, sock: &TcpStream, initiator: bool) -> Tap {
        match &self.inner.cfg.pcap {
            Some(t) => t.connection(sock, initiator),
            None => Tap::off(),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.cfg
    }

    /// Its memory translation and protection table: protection domains, regions, windows.
    pub fn tpt(&self) -> &Arc<Tpt> {
        &self.inner.tpt
    }

    /// A new protection domain.
    pub fn alloc_pd(&self) -> PdId {
        self.inner.tpt.alloc_pd()
    }

    /// Creates the queue pair of a connection whose MPA exchange produced `negotiated`,
    /// and starts its driver.
    pub(crate) fn start_qp(
        &self,
        init: QpInit,
        negotiated: &Negotiated,
        sock: TcpStream,
        leftover: BytesMut,
        tap: Tap,
    ) -> Result<Qp, ConnectError> {
        let mut stream = Stream::new(self.stream_config(&init, &sock, negotiated), negotiated);
        stream.set_complete_every_send(init.complete_every_send);
        for wr in init.recvs.iter().cloned() {
            if !init.completions.any_id() {
                cq::check_wr_id(wr.wr_id).map_err(|e| {
                    ConnectError::Invalid(format!("initial receive {:#x}: {e}", wr.wr_id))
                })?;
            }
            stream.post_recv(wr).map_err(|e| {
                ConnectError::Invalid(format!("initial receives: {e} (raise the RQ depth)"))
            })?;
        }
        let sock = Arc::new(sock.into_std().map_err(ConnectError::Io)?);
        let qp = self.make_qp(&init, stream, &sock, tap, leftover);
        crate::conn::spawn(qp.shared.clone(), sock);
        Ok(qp)
    }

    /// A queue pair whose only job is to send `code` (an MPA negotiation failure found
    /// after FPDU mode began) and close.
    pub(crate) fn start_failed_qp(
        &self,
        init: &QpInit,
        negotiated: &Negotiated,
        sock: TcpStream,
        code: TermCode,
        tap: Tap,
    ) {
        let stream = Stream::failed(
            self.stream_config(init, &sock, negotiated),
            negotiated,
            code,
        );
        let sock = match sock.into_std() {
            Ok(sock) => Arc::new(sock),
            Err(e) => {
                return tracing::debug!(error = %e, "cannot take the socket of a failed connection");
            }
        };
        let qp = self.make_qp(init, stream, &sock, tap, BytesMut::new());
        crate::conn::spawn(qp.shared, sock);
    }

    /// The stream settings of a new connection: the queue pair's depths, and FPDUs that
    /// fit one TCP segment (RFC 5044's EMSS rule: `mpa::mulpdu`) unless both sides agreed
    /// to larger ones.
    fn stream_config(
        &self,
        init: &QpInit,
        sock: &TcpStream,
        negotiated: &Negotiated,
    ) -> StreamConfig {
        let mut cfg = self.inner.cfg.stream.clone();
        (cfg.sq_depth, cfg.rq_depth) = self.queue_depths(init);
        if negotiated.large_fpdus {
            return cfg;
        }
        if let Some(mss) = SocketOptions::mss(sock) {
            cfg.mulpdu = cfg.mulpdu.min(mpa::mulpdu(mss, negotiated.markers_tx));
        }
        cfg
    }

    /// The send and receive queue depths of a queue pair: its own, or the engine's.
    fn queue_depths(&self, init: &QpInit) -> (usize, usize) {
        let stream = &self.inner.cfg.stream;
        init.queue_depths
            .unwrap_or((stream.sq_depth, stream.rq_depth))
    }

    fn make_qp(
        &self,
        init: &QpInit,
        stream: Stream,
        sock: &Arc<std::net::TcpStream>,
        tap: Tap,
        rx: BytesMut,
    ) -> Qp {
        let num = next_qp_num();
        let mem = self.inner.tpt.view(init.pd, QpId::from(num.0));
        let home = self.home(self.qp_push(init, num).map(Arc::new));
        let state = Connection::start(
            num,
            (stream, Box::new(mem)),
            (Arc::clone(sock), tap),
            rx,
            (home, init.srq.clone()),
        );
        let shared = Shared::new(num, init.pd, state, init.completions.clone());
        self.inner.totals.connected();
        let qp = Qp {
            shared: Arc::new(shared),
        };
        self.adopt(&qp.shared);
        qp
    }

    /// What a queue pair of this engine belongs to, with `push` its part of the push path.
    pub(crate) fn home(&self, push: Option<Arc<QpPush>>) -> Home {
        Home {
            tpt: Arc::clone(&self.inner.tpt),
            push,
            timeouts: self.inner.cfg.timeouts.clone(),
            totals: Arc::clone(&self.inner.totals),
            busy_poll: self.inner.cfg.socket.busy_poll,
        }
    }

    /// The queue pairs of this engine, by number.
    fn registry(&self) -> std::sync::MutexGuard<'_, HashMap<QpNum, Weak<Shared>>> {
        self.inner.qps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts `qp` among this engine's queue pairs.
    pub(crate) fn adopt(&self, qp: &Arc<Shared>) {
        let mut qps = self.registry();
        qps.retain(|_, w| w.strong_count() > 0);
        qps.insert(qp.num, Arc::downgrade(qp));
    }

    /// Stops counting `num` among this engine's queue pairs: it moved away, and counts as
    /// gone here with the traffic it had (the engine it moves to counts it from now on).
    pub(crate) fn disown(&self, num: QpNum) {
        let gone = self.registry().remove(&num).and_then(|w| w.upgrade());
        if let Some(shared) = gone {
            self.inner.totals.retire(&shared.stats());
        }
    }

    /// The queue pairs of domain `pd`.
    pub(crate) fn qps_of(&self, pd: PdId) -> Vec<Arc<Shared>> {
        let qps = self.registry();
        qps.values()
            .filter_map(Weak::upgrade)
            .filter(|q| q.pd == pd)
            .collect()
    }

    /// `push` moved here, with its domain's region: `None` if this engine runs no push
    /// path.
    pub(crate) fn adopt_push(&self, pd: PdId, push: Arc<QpPush>) -> Option<Arc<QpPush>> {
        let share = self.inner.push.clone()?;
        self.push_regions()
            .insert(pd, Arc::downgrade(push.region()));
        push.moved_to(share)
    }

    /// The domains' push regions that are still in use.
    fn push_regions(&self) -> std::sync::MutexGuard<'_, HashMap<PdId, Weak<PdPush>>> {
        let mut regions = self
            .inner
            .push_regions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        regions.retain(|_, w| w.strong_count() > 0);
        regions
    }

    /// True if `other` is this engine (or a clone of it).
    pub fn same_engine(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The push path of a new queue pair `num` (none if the engine's or `init`'s is off,
    /// or if its domain's region cannot be made): its domain's region, made with the
    /// domain's first queue pair.
    fn qp_push(&self, init: &QpInit, num: QpNum) -> Option<QpPush> {
        let share = self.inner.push.as_ref().filter(|_| init.push)?;
        let mut regions = self.push_regions();
        let pd = match regions.get(&init.pd).and_then(Weak::upgrade) {
            Some(pd) => pd,
            None => match PushRegion::create(share.cfg.slots) {
                Ok(region) => {
                    let pd = Arc::new(PdPush::new(region));
                    regions.insert(init.pd, Arc::downgrade(&pd));
                    pd
                }
                Err(e) => {
                    tracing::warn!(error = %e, "no push region: requests go through the send queue");
                    return None;
                }
            },
        };
        Some(QpPush::new(pd, share.clone(), init.pd, num))
    }

    /// Every queue pair of this engine whose connection is still being driven or whose
    /// handle is still held.
    pub fn qps(&self) -> Vec<Qp> {
        let qps = self.registry();
        qps.values()
            .filter_map(Weak::upgrade)
            .map(|shared| Qp { shared })
            .collect()
    }

    /// Its counters: connections, and the traffic of every queue pair it has had.
    pub fn stats(&self) -> EngineStats {
        // The live ones first: held here, none of them can retire before the sum is read.
        let live = self.qps();
        let (closed, mut traffic) = self.inner.totals.retired();
        for qp in &live {
            traffic.add(&qp.stats());
        }
        EngineStats {
            connections: self.inner.totals.connections(),
            connections_closed: closed,
            queue_pairs: live.len() as u64,
            traffic,
            push: self
                .inner
                .push
                .as_ref()
                .map_or_else(Default::default, |p| p.totals()),
            busy_polled_reads: self.inner.totals.busy_polled_reads(),
        }
    }

    /// Gracefully disconnects every queue pair and waits until all have ended (posted work
    /// finishes or is flushed): for an orderly shutdown.
    pub async fn shutdown(&self) {
        let qps = self.qps();
        for qp in &qps {
            qp.disconnect();
        }
        for qp in &qps {
            qp.closed().await;
        }
    }
}
