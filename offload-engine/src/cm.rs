//! Connection management: TCP connect/accept, the MPA exchange, and the birth of a queue
//! pair (rdma_cm's job).

use std::io;
use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use mpa::{
    ConnectError, Handshake, HandshakeEvent, MpaConfig, MpaError, NoFrame, PeerEnd, PeerParams,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::conn::Qp;
use crate::engine::{Engine, QpInit};
use crate::log_limit::LogLimit;
use crate::pcap::Tap;
use crate::slots::{Refused, Slots};

/// Warnings about connections refused for the pending-handshake limits: a few per 10 s.
static REFUSED: LogLimit = LogLimit::new(5, std::time::Duration::from_secs(10));
/// Warnings about MPA Requests that were garbage, wrong, too long or never came.
static BAD_REQUEST: LogLimit = LogLimit::new(5, std::time::Duration::from_secs(10));
/// Warnings about failed accepts (out of file descriptors, for one).
static ACCEPT_FAILED: LogLimit = LogLimit::new(5, std::time::Duration::from_secs(10));
/// How long the accept loop rests after a failed accept. The connection that failed
/// stays in the kernel's queue, so the next accept would fail at once again: without the
/// rest, running out of file descriptors would spin a processor until one is closed.
const ACCEPT_REST: std::time::Duration = std::time::Duration::from_millis(100);
/// How long a connection whose Request arrived waits for a place in the listener's queue
/// (the application is not accepting) before it is closed. It keeps its handshake place
/// meanwhile, so the pending-handshake limits bound these too.
const QUEUE_WAIT: std::time::Duration = MpaConfig::RESPONDER_TIMEOUT;

/// How much of another protocol's answer is read to say how long it was.
const NOT_MPA_READ: usize = 4096;

/// Runs `hs` over `sock` until it yields an event that ends this phase; `tap` records the
/// octets written and read. A peer that never sends its frame (silent past the MPA
/// timeout, a close or a reset before it, another protocol's octets) comes back as
/// [`ConnectError::NoFrame`], which says which and what it sent.
async fn exchange(
    hs: &mut Handshake,
    sock: &mut TcpStream,
    rx: &mut BytesMut,
    tap: &mut Tap,
) -> Result<HandshakeEvent, ConnectError> {
    let mut tx = BytesMut::new();
    let role = hs.role();
    let no_frame = |end, rx: &BytesMut| ConnectError::NoFrame(NoFrame::new(role, end, rx));
    loop {
        if hs.poll_transmit(&mut tx) {
            sock.write_all(&tx).await?;
            tap.sent(&tx);
            tx.clear();
        }
        match hs.poll_event() {
            Some(HandshakeEvent::Failed {
                error: MpaError::NotMpa { .. },
                negotiated: None,
            }) => {
                // Whatever else of its answer has arrived, to say how much it sent.
                while rx.len() < NOT_MPA_READ && matches!(sock.try_read_buf(rx), Ok(1..)) {}
                return Err(no_frame(PeerEnd::NotMpa, rx));
            }
            Some(ev) => return Ok(ev),
            None => {}
        }
        let deadline = hs.poll_timeout();
        let read = sock.read_buf(rx);
        let got = match deadline {
            Some(d) => match tokio::time::timeout_at(d.into(), read).await {
                Ok(r) => r,
                Err(_) => {
                    hs.handle_timeout(crate::conn::now());
                    if hs.poll_timeout().is_none() {
                        // The handshake gave up waiting: say so, with what arrived.
                        let _ = hs.poll_event();
                        return Err(no_frame(PeerEnd::Silent(hs.timeout()), rx));
                    }
                    continue;
                }
            },
            None => read.await,
        };
        let n = match got {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset && !hs.is_done() => {
                return Err(no_frame(PeerEnd::Reset, rx));
            }
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            tap.received_fin();
            return Err(no_frame(PeerEnd::Closed, rx));
        }
        tap.received(rx.get(rx.len() - n..).unwrap_or_default());
        hs.handle_input(rx, crate::conn::now());
    }
}

impl Engine {
    /// Connects to an iWARP peer at `addr`: TCP, then the MPA Request/Reply as Initiator,
    /// then a queue pair in RTS. Returns it with the peer's private data.
    pub async fn connect(
        &self,
        addr: SocketAddr,
        init: QpInit,
        private_data: &[u8],
    ) -> Result<(Qp, Bytes), ConnectError> {
        let mpa = self.config().mpa.clone();
        self.connect_with(addr, init, private_data, mpa).await
    }

    /// [`connect`](Self::connect) with MPA settings `cfg` for this connection instead of
    /// the engine's (iwarpd: a client that asks for peer-to-peer mode).
    pub async fn connect_with(
        &self,
        addr: SocketAddr,
        init: QpInit,
        private_data: &[u8],
        cfg: MpaConfig,
    ) -> Result<(Qp, Bytes), ConnectError> {
        let wait = self.config().connect_timeout;
        let mut sock = tokio::time::timeout(wait, TcpStream::connect(addr))
            .await
            .map_err(|_| {
                let why = match wait.subsec_millis() {
                    0 => format!("no answer within {} s", wait.as_secs()),
                    _ => format!("no answer within {} ms", wait.as_millis()),
                };
                ConnectError::Io(io::Error::new(io::ErrorKind::TimedOut, why))
            })??;
        self.config().socket.apply(&sock)?;
        let mut hs = Handshake::initiator(cfg, private_data, crate::conn::now())
            .map_err(|e| ConnectError::Invalid(e.to_string()))?;
        let mut rx = BytesMut::new();
        let mut tap = self.tap(&sock, true);
        match exchange(&mut hs, &mut sock, &mut rx, &mut tap).await? {
            HandshakeEvent::Established {
                negotiated,
                private_data,
            } => {
                // The first FPDU (the RTR, or the application's first message) waits a
                // moment: see `EngineConfig::first_fpdu_delay`. Zero does not even yield:
                // a sleep of zero still waits for the timer's next turn.
                let hold = self.config().first_fpdu_delay;
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                Ok((
                    self.start_qp(init, &negotiated, sock, rx, tap)?,
                    private_data,
                ))
            }
            HandshakeEvent::Rejected { private_data, peer } => Err(ConnectError::Rejected {
                private_data,
                refused: mpa::Refused::between(&self.config().mpa, &peer),
            }),
            HandshakeEvent::Failed { error, negotiated } => {
                if let Some(n) = negotiated {
                    // FPDU mode began: tell the peer why with an MPA Terminate.
                    let code = rdmap::TermCode::llp(error.code());
                    self.start_failed_qp(&init, &n, sock, code, tap);
                }
                Err(ConnectError::Mpa(error))
            }
            other => Err(ConnectError::Invalid(format!(
                "unexpected MPA event {other:?}"
            ))),
        }
    }

    /// Listens for iWARP connections on `addr`. `[::]` takes IPv4 clients too
    /// (dual-stack, whatever the system's default), and names them by their IPv4
    /// address ([`Incoming::peer_addr`]).
    pub async fn listen(&self, addr: SocketAddr) -> io::Result<Listener> {
        self.listen_on(crate::dual_stack::bind(addr).await?)
    }

    /// Listens for iWARP connections on a socket that listens already (one another
    /// process handed over, for example). Needs a runtime.
    pub fn listen_on_std(&self, tcp: std::net::TcpListener) -> io::Result<Listener> {
        tcp.set_nonblocking(true)?;
        self.listen_on(TcpListener::from_std(tcp)?)
    }

    fn listen_on(&self, tcp: TcpListener) -> io::Result<Listener> {
        let local = tcp.local_addr()?;
        let fd = std::os::fd::AsFd::as_fd(&tcp).try_clone_to_owned()?;
        let (tx, rx) = mpsc::channel(64);
        let engine = self.clone();
        let cfg = self.config();
        let pending = Slots::new(cfg.max_pending_handshakes, cfg.max_pending_per_address);
        let (accepting, mut on) = tokio::sync::watch::channel(true);
        let task = tokio::spawn(async move {
            loop {
                // Paused (another process accepts on the socket meanwhile): wait.
                if on.wait_for(|on| *on).await.is_err() {
                    return;
                }
                let got = tokio::select! {
                    got = tcp.accept() => got,
                    _ = on.wait_for(|on| !*on) => continue,
                };
                let (sock, peer) = match got {
                    Ok((sock, peer)) => (sock, crate::dual_stack::canonical(peer)),
                    Err(e) => {
                        if let Some(left_out) = ACCEPT_FAILED.allow() {
                            tracing::warn!(error = %e, left_out, "accept failed; retrying shortly");
                        }
                        tokio::time::sleep(ACCEPT_REST).await;
                        continue;
                    }
                };
                let slot = match pending.enter(peer.ip()) {
                    Ok(slot) => slot,
                    Err(why) => {
                        if let Some(left_out) = REFUSED.allow() {
                            let limit = match why {
                                Refused::Total(n) => format!("{n} handshakes in progress"),
                                Refused::Address(n) => {
                                    format!("{n} handshakes in progress from this address")
                                }
                            };
                            tracing::warn!(
                                %peer, left_out,
                                "connection closed unanswered: {limit} already (EngineConfig::max_pending_*)"
                            );
                        }
                        continue;
                    }
                };
                // Each connection's MPA Request is read in its own task, so a slow or
                // silent client cannot hold up the others.
                let engine = engine.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let request = engine.read_request(sock, peer).await;
                    match request {
                        Ok(incoming) => {
                            // Full queue: the application is not accepting. Wait a while
                            // (holding the place), then close.
                            let queued = tokio::time::timeout(QUEUE_WAIT, tx.send(incoming));
                            if queued.await.is_err()
                                && let Some(left_out) = REFUSED.allow()
                            {
                                tracing::warn!(
                                    %peer, left_out,
                                    "connection closed unanswered: the application did not accept it in time"
                                );
                            }
                            drop(slot);
                        }
                        Err(e) => {
                            if let Some(left_out) = BAD_REQUEST.allow() {
                                tracing::warn!(%peer, error = %e, left_out, "MPA request refused");
                            }
                        }
                    }
                });
            }
        });
        Ok(Listener {
            fd,
            local,
            rx: tokio::sync::Mutex::new(rx),
            accepting,
            task,
        })
    }

    async fn read_request(
        &self,
        mut sock: TcpStream,
        peer: SocketAddr,
    ) -> Result<Incoming, ConnectError> {
        self.config().socket.apply(&sock)?;
        let mut cfg = self.config().mpa.clone();
        cfg.timeout = MpaConfig::RESPONDER_TIMEOUT.min(cfg.timeout);
        let mut hs = Handshake::responder(cfg, crate::conn::now());
        let mut rx = BytesMut::new();
        let mut tap = self.tap(&sock, false);
        match exchange(&mut hs, &mut sock, &mut rx, &mut tap).await? {
            HandshakeEvent::Request(params) => Ok(Incoming {
                engine: self.clone(),
                sock,
                peer,
                params,
                hs,
                rx,
                tap,
            }),
            HandshakeEvent::Failed { error, .. } => Err(ConnectError::Mpa(error)),
            other => Err(ConnectError::Invalid(format!(
                "unexpected MPA event {other:?}"
            ))),
        }
    }
}

/// A listening socket; [`accept`](Self::accept) yields connection requests.
#[derive(Debug)]
pub struct Listener {
    /// The listening socket (the accept task has its own descriptor of it).
    fd: std::os::fd::OwnedFd,
    local: SocketAddr,
    rx: tokio::sync::Mutex<mpsc::Receiver<Incoming>>,
    /// Whether the accept task takes connections now.
    accepting: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    /// The address it listens on (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Stops taking connections here until [`resume_accepting`](Self::resume_accepting)
    /// (the socket stays open for whoever else holds it: a successor it was handed to);
    /// requests already read are still handed out.
    pub fn stop_accepting(&self) {
        self.accepting.send_replace(false);
    }

    /// Takes connections here again (a successor it was handed to went away).
    pub fn resume_accepting(&self) {
        self.accepting.send_replace(true);
    }

    /// The listening socket, to hand to another process (which then accepts on it too).
    pub fn socket(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.fd)
    }

    /// The next connection request whose MPA Request arrived and was valid.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a request is handed out only when this future returns it.
    pub async fn accept(&self) -> io::Result<Incoming> {
        self.rx
            .lock()
            .await
            .recv()
            .await
            .ok_or_else(|| io::Error::other("listener stopped"))
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A connection request: the peer's MPA Request arrived. Accept it or reject it.
#[derive(Debug)]
pub struct Incoming {
    engine: Engine,
    sock: TcpStream,
    peer: SocketAddr,
    params: PeerParams,
    hs: Handshake,
    rx: BytesMut,
    tap: Tap,
}

impl Incoming {
    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The peer's private data (without the RFC 6581 IRD/ORD word).
    pub fn private_data(&self) -> &Bytes {
        &self.params.private_data
    }

    /// The peer's IRD and ORD, when it sent them (MPA revision 2).
    pub fn peer_ird_ord(&self) -> (Option<u16>, Option<u16>) {
        (self.params.ird, self.params.ord)
    }

    /// Everything the peer's MPA Request said.
    pub fn params(&self) -> &PeerParams {
        &self.params
    }

    /// Accepts: sends the MPA Reply and returns the connected queue pair.
    pub async fn accept(mut self, init: QpInit, private_data: &[u8]) -> Result<Qp, ConnectError> {
        self.hs.accept(private_data).map_err(ConnectError::Mpa)?;
        match exchange(&mut self.hs, &mut self.sock, &mut self.rx, &mut self.tap).await? {
            HandshakeEvent::Established { negotiated, .. } => {
                self.engine
                    .start_qp(init, &negotiated, self.sock, self.rx, self.tap)
            }
            HandshakeEvent::Failed { error, .. } => Err(ConnectError::Mpa(error)),
            other => Err(ConnectError::Invalid(format!(
                "unexpected MPA event {other:?}"
            ))),
        }
    }

    /// Rejects: sends an MPA Reply with the reject bit and `private_data`, then closes.
    pub async fn reject(mut self, private_data: &[u8]) -> Result<(), ConnectError> {
        self.hs.reject(private_data).map_err(ConnectError::Mpa)?;
        let mut tx = BytesMut::new();
        if self.hs.poll_transmit(&mut tx) {
            self.sock.write_all(&tx).await?;
            self.tap.sent(&tx);
        }
        self.sock.shutdown().await?;
        self.tap.sent_fin();
        Ok(())
    }
}
