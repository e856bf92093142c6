//! The daemon: one engine, an accept loop, the remote-memory target service per
//! connection, and a clean shutdown on SIGINT/SIGTERM.

use std::collections::VecDeque;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use offload_engine::local::{LocalConfig, LocalService};
use offload_engine::tpt::{Base, PdId};
use offload_engine::{Cq, Engine, Incoming, LogLimit, Qp, QpEnd, QpInit, Refused, Slots, Srq, Wc};
use rdmap::{
    Access, Payload, PostError, RecvWr, RemoteBuf, STag, SendFlags, SendOp, SendWr, Sge, WcOpcode,
    WcStatus,
};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::{Config, Control};
use crate::proto::ServiceInfo;

/// Rights of a connection's region: everything a remote-memory target offers.
const TARGET_RIGHTS: Access = Access::LOCAL_READ
    .union(Access::LOCAL_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_WRITE);

/// Warnings about rejected connections: a few per 10 s, then a count.
static REJECTED: LogLimit = LogLimit::new(5, Duration::from_secs(10));

/// What to do when no listen address was given.
pub(crate) const NO_LISTEN: &str = "no listen address: pass --listen IP:PORT (e.g. --listen \
     0.0.0.0:4791) or put `listen = IP:PORT` in the config file";

/// Starts serving local applications on the control socket, with an engine of their own
/// (the remote-memory target's idle timeout does not apply to them). The task stops, and
/// the socket file is removed, when the returned guard is dropped.
fn serve_local(cfg: &Config) -> Result<Option<LocalGuard>, String> {
    let (path, explicit) = match &cfg.control {
        Control::Off => return Ok(None),
        Control::Default => (ipc::default_control_path(), false),
        Control::Path(p) => (p.clone(), true),
    };
    let mut ecfg = cfg.engine()?;
    ecfg.timeouts.idle = None;
    let service = match LocalService::start(&path, ecfg, LocalConfig::default(), cfg.local_threads)
    {
        Ok(s) => s,
        Err(e) if !explicit => {
            tracing::warn!(error = %e, "not serving local applications");
            return Ok(None);
        }
        Err(e) => return Err(format!("cannot serve local applications: {e}")),
    };
    tracing::info!(control = %path.display(), threads = cfg.local_threads, "serving local applications");
    Ok(Some(LocalGuard {
        service: Some(service),
        path,
    }))
}

/// Stops the local service and removes its socket file.
struct LocalGuard {
    service: Option<LocalService>,
    path: std::path::PathBuf,
}

impl Drop for LocalGuard {
    fn drop(&mut self) {
        if let Some(s) = self.service.take() {
            s.stop();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Runs the daemon until SIGINT or SIGTERM; `Err` says why it could not.
pub(crate) async fn run(cfg: Config) -> Result<(), String> {
    let addr = cfg.listen.ok_or_else(|| NO_LISTEN.to_owned())?;
    let mut sigterm =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot catch SIGTERM: {e}"))?;
    let mut sigint =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot catch SIGINT: {e}"))?;
    let engine = Engine::new(cfg.engine()?);
    let listener = engine.listen(addr).await.map_err(|e| {
        format!("cannot listen on {addr}: {e} (is the port in use, or the address not local?)")
    })?;
    let local = listener.local_addr();
    let _local = serve_local(&cfg)?;
    // The one line on stdout, once everything serves: scripts and tests read the bound
    // address from it.
    println!("listening on {local}");
    let _ = std::io::stdout().flush();
    tracing::info!(
        addr = %local,
        buffer_size = cfg.buffer_size,
        recv_depth = cfg.recv_depth,
        recv_size = cfg.recv_size,
        max_qps = cfg.max_qps,
        crc = cfg.crc,
        markers = cfg.markers,
        large_fpdus = cfg.large_fpdus,
        mpa_revision = cfg.mpa_revision,
        ird = cfg.ird,
        ord = cfg.ord,
        "iwarpd listening"
    );

    let cfg = Arc::new(cfg);
    // Places for the connections served: max_qps in all, max_qps_per_address each.
    let places = Slots::new(cfg.max_qps, cfg.max_qps_per_address);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    let mut served = 0u64;
    let why = loop {
        tokio::select! {
            inc = listener.accept() => {
                let inc = inc.map_err(|e| format!("the listener failed: {e}"))?;
                let peer = inc.peer_addr();
                let slot = match places.enter(peer.ip()) {
                    Ok(slot) => slot,
                    Err(refused) => {
                        let why: &'static [u8] = match refused {
                            Refused::Total(_) => b"iwarpd: too many connections (max_qps)",
                            Refused::Address(_) => b"iwarpd: too many connections from your \
                                address (max_qps_per_address)",
                        };
                        if let Some(left_out) = REJECTED.allow() {
                            tracing::warn!(
                                %peer, left_out, reason = %String::from_utf8_lossy(why),
                                "rejecting the connection"
                            );
                        }
                        conns.spawn(async move {
                            let _ = inc.reject(why).await;
                        });
                        continue;
                    }
                };
                served += 1;
                let (engine, cfg, stop) = (engine.clone(), cfg.clone(), stop_rx.clone());
                conns.spawn(async move {
                    if let Err(e) = serve_conn(&engine, inc, &cfg, stop).await {
                        tracing::warn!(%peer, error = %e, "connection failed");
                    }
                    drop(slot);
                });
            }
            Some(done) = conns.join_next() => {
                if let Err(e) = done {
                    tracing::error!(error = %e, "connection task panicked");
                }
            }
            _ = sigterm.recv() => break "SIGTERM",
            _ = sigint.recv() => break "SIGINT",
        }
    };

    // Stop accepting, then disconnect every queue pair and let posted work finish or flush.
    drop(listener);
    let open = engine.qps().len();
    tracing::info!(
        signal = why,
        open_qps = open,
        "shutting down: stopped accepting, disconnecting queue pairs"
    );
    let _ = stop_tx.send(true);
    tokio::select! {
        () = async {
            engine.shutdown().await;
            while conns.join_next().await.is_some() {}
        } => {}
        _ = sigterm.recv() => return Err("second signal during shutdown: exiting at once".into()),
        _ = sigint.recv() => return Err("second signal during shutdown: exiting at once".into()),
    }
    tracing::info!(
        disconnected_qps = open,
        connections_served = served,
        "shutdown complete"
    );
    Ok(())
}

/// One connection's memory: its protection domain, the advertised region and the
/// receive buffers.
#[derive(Debug)]
struct ConnMemory {
    engine: Engine,
    pd: PdId,
    region: STag,
    rx: STag,
}

impl Drop for ConnMemory {
    fn drop(&mut self) {
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

/// Serves one connection: region, private data, receives, echo, until it ends.
async fn serve_conn(
    engine: &Engine,
    inc: Incoming,
    cfg: &Config,
    mut stop: watch::Receiver<bool>,
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
    };
    // Receives go on a shared receive queue posted before the Reply leaves, so a Send
    // that follows the Reply at once finds a buffer.
    let srq = Srq::new();
    (0..depth).for_each(|i| srq.post_recv(recv_wr(rx, i, cfg.recv_size)));
    let info = ServiceInfo {
        remote: RemoteBuf {
            stag: region,
            to: 0,
            len: cfg.buffer_size,
        },
        credits: cfg.recv_depth,
        recv_size: cfg.recv_size,
    };
    let send_cq = Cq::new(256 + depth);
    let recv_cq = Cq::new(2 * depth + 16);
    let mut init = QpInit::new(pd, &send_cq);
    init.recv_cq = recv_cq.clone();
    init.srq = Some(srq.clone());
    let qp = inc
        .accept(init, &info.encode())
        .await
        .map_err(|e| format!("accept failed: {e}"))?;
    tracing::info!(%peer, qp = %qp.num(), region = %region, len = cfg.buffer_size, "connection accepted");

    let mut echo = Echo {
        engine,
        mem: &mem,
        qp: &qp,
        srq: &srq,
        slot: cfg.recv_size,
        messages: 0,
        octets: 0,
        waiting: VecDeque::new(),
        limit: depth,
        ended: false,
    };
    let mut stopping = *stop.borrow();
    if stopping {
        qp.disconnect();
    }
    let end = loop {
        tokio::select! {
            wc = recv_cq.next() => match wc {
                Ok(wc) => {
                    let r = echo.on_recv(&wc);
                    echo.end_on(r, peer);
                }
                Err(e) => break overrun(&qp, &e).await,
            },
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
            end = qp.closed() => break end,
            r = stop.changed(), if !stopping => {
                stopping = true;
                if r.is_ok() {
                    qp.disconnect();
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
