//! A byte stream over RDMA for tokio applications: [`RdmaStream`] implements
//! [`AsyncRead`] and [`AsyncWrite`] over a connected queue pair, and [`RdmaListener`]
//! accepts them, so code written for `TcpStream` and `TcpListener` (a
//! `tokio_util::codec::Framed`, `tokio::io::copy`) runs over iWARP by changing the line
//! that connects or listens.
//!
//! Design: each side registers a ring (2 MiB) that the peer may write, and hands its
//! STag to the peer in the MPA private data. A write copies the caller's octets once (as
//! a socket would) and RDMA-writes them into the peer's ring, then tells the peer how far
//! with a 24-octet Send (a note, see `note`); a read copies out of the local ring and
//! tells the writer how much room it freed, in the same kind of note. The ring bounds the
//! octets in flight (credit); notes are bounded by a budget the peer acknowledges, since a
//! Send that finds no receive posted would end the connection (see `flow`). Placement
//! before the note is RDMA's ordering on one connection: the note's Send completes after
//! the Writes before it are placed.
//!
//! Both ends must be this type (the private data carries "iWBS", a version and the
//! ring): a peer that is not is refused at connection setup, naming the cause.

mod flow;
mod note;

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use rdmap::{
    Access, Payload, Queue, RecvWr, RemoteBuf, SendFlags, SendOp, SendWr, WcOpcode, WcStatus,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::ToSocketAddrs;

use crate::{ConnectError, Cq, Device, DeviceConfig, Listener, Mr, Pd, Qp, QpConfig};
use flow::{Flow, RECVS};
use note::{NOTE_LEN, Note};

/// Octets of each side's ring.
pub const RING_LEN: usize = 2 << 20;
/// The most octets one write hands to one RDMA Write.
const MAX_WRITE: usize = 256 << 10;
/// Writes up to this many octets are posted one request at a time (see `poll_write`).
const SMALL_WRITE: usize = 4096;
/// Send requests a stream keeps under way at most.
const SQ_BUDGET: u32 = 128;
/// The private data's magic and version.
const HELLO: &[u8; 8] = b"iWBS\x01\0\0\0";
/// Octets of a receive slot for a note.
const SLOT: usize = 32;

/// The device streams use unless told otherwise: opened once per process with
/// [`DeviceConfig::default`] (so `IWARP_DEVICE=unix:PATH` runs them through an iwarpd).
/// Opening it again after a failure tries again (iwarpd may have started meanwhile).
fn default_device() -> io::Result<&'static Device> {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    if let Some(d) = DEVICE.get() {
        return Ok(d);
    }
    let d = Device::open(DeviceConfig::default())?;
    Ok(DEVICE.get_or_init(|| d))
}

/// A connected byte stream over RDMA. Reads and writes as a `TcpStream` does; dropping it
/// closes the connection gracefully (what was written still arrives).
#[derive(Debug)]
pub struct RdmaStream {
    inner: Arc<Inner>,
    peer: SocketAddr,
}

/// A listener for [`RdmaStream`]s.
#[derive(Debug)]
pub struct RdmaListener {
    device: Device,
    listener: Listener,
}

#[derive(Debug)]
struct Inner {
    qp: Qp,
    ring: Mr,
    notes: Mr,
    peer_ring: RemoteBuf,
    st: Mutex<State>,
}

#[derive(Debug)]
struct State {
    flow: Flow,
    reader: Option<Waker>,
    writer: Option<Waker>,
    /// Send requests posted and not yet complete.
    in_sq: u32,
    /// Why the connection cannot be used any more.
    ended: Option<String>,
    /// It ended with a graceful close: once the ring is read, that is the end of the
    /// stream (a peer that dropped its stream without shutting it down, as with TCP).
    closed: bool,
}

/// Everything one side sets up before the connection: its memory and receives.
struct Side {
    pd: Pd,
    cq: Cq,
    ring: Mr,
    notes: Mr,
}

impl Side {
    fn new(device: &Device) -> io::Result<Self> {
        let pd = device.alloc_pd().map_err(io::Error::other)?;
        let cq = device.create_cq(4 * RECVS as usize + 2 * SQ_BUDGET as usize);
        let ring = pd
            .alloc_mr(
                RING_LEN,
                Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            )
            .map_err(io::Error::other)?;
        let notes = pd
            .alloc_mr(
                RECVS as usize * SLOT,
                Access::LOCAL_READ | Access::LOCAL_WRITE,
            )
            .map_err(io::Error::other)?;
        Ok(Self {
            pd,
            cq,
            ring,
            notes,
        })
    }

    /// The queue pair's settings: the note receives posted before anything arrives.
    fn config(&self) -> QpConfig {
        (0..RECVS).fold(QpConfig::new(&self.cq), |c, slot| {
            c.recv(recv_slot(&self.notes, slot as u64))
        })
    }

    fn hello(&self) -> Vec<u8> {
        [&HELLO[..], &self.ring.remote().encode()].concat()
    }
}

fn recv_slot(notes: &Mr, slot: u64) -> RecvWr {
    let at = slot as usize * SLOT;
    RecvWr {
        wr_id: slot,
        sgl: [notes.local(at..at + SLOT)].into(),
    }
}

/// The peer's ring from its private data, or why it is not a byte stream peer.
fn peer_ring(private: &[u8]) -> Result<RemoteBuf, String> {
    let ok = private.len() >= HELLO.len() + 16 && private.starts_with(&HELLO[..4]);
    if !ok {
        return Err("the peer is not an RdmaStream (its private data lacks \"iWBS\")".into());
    }
    if private[4] != HELLO[4] {
        return Err(format!(
            "the peer speaks RdmaStream version {}, this side {}",
            private[4], HELLO[4]
        ));
    }
    RemoteBuf::decode(&private[8..24])
        .filter(|r| r.len > 0)
        .ok_or_else(|| "the peer's ring is malformed".into())
}

fn connect_error(e: ConnectError) -> io::Error {
    match e {
        ConnectError::Io(e) => e,
        other => io::Error::new(io::ErrorKind::ConnectionRefused, other.to_string()),
    }
}

impl RdmaStream {
    /// Connects to an [`RdmaListener`] at `addr`, on the process's default device.
    pub async fn connect(addr: impl ToSocketAddrs) -> io::Result<Self> {
        Self::connect_on(default_device()?, addr).await
    }

    /// Connects to an [`RdmaListener`] at `addr` through `device`.
    pub async fn connect_on(device: &Device, addr: impl ToSocketAddrs) -> io::Result<Self> {
        let side = Side::new(device)?;
        let mut last = None;
        for a in crate::connect::lookup(addr).await? {
            match device
                .connect(&side.pd, a, side.config(), &side.hello())
                .await
            {
                Ok(c) => {
                    let peer = peer_ring(&c.private_data).map_err(|e| {
                        c.qp.disconnect();
                        io::Error::new(io::ErrorKind::InvalidData, e)
                    })?;
                    let s = Self::start(side, c.qp, peer, a);
                    // The accepting side may send only after the first message arrives
                    // (MPA client-server mode): a server that speaks first must not
                    // wait for this side's first write.
                    let mut st = s.inner.lock();
                    s.inner.post_note(
                        &mut st,
                        &Note {
                            flags: Note::ACK_ONLY,
                            ..Note::default()
                        },
                    );
                    drop(st);
                    return Ok(s);
                }
                Err(ConnectError::Io(e)) => last = Some(e),
                Err(e) => return Err(connect_error(e)),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("the address resolved to nothing")))
    }

    fn start(side: Side, qp: Qp, peer_ring: RemoteBuf, peer: SocketAddr) -> Self {
        let inner = Arc::new(Inner {
            st: Mutex::new(State {
                flow: Flow::new(side.ring.len() as u64, u64::from(peer_ring.len)),
                reader: None,
                writer: None,
                in_sq: 0,
                ended: None,
                closed: false,
            }),
            qp,
            ring: side.ring,
            notes: side.notes,
            peer_ring,
        });
        tokio::spawn(drive(Arc::clone(&inner), side.cq));
        Self { inner, peer }
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The queue pair underneath (for its counters).
    pub fn qp(&self) -> &Qp {
        &self.inner.qp
    }
}

impl Drop for RdmaStream {
    /// Closes the connection gracefully: what was written still arrives, and the peer
    /// reads the end of the stream after it (a graceful close is the end, see `closed`).
    fn drop(&mut self) {
        self.inner.qp.disconnect();
    }
}

impl RdmaListener {
    /// Listens at `addr` on the process's default device.
    pub async fn bind(addr: impl ToSocketAddrs) -> io::Result<Self> {
        Self::bind_on(default_device()?, addr).await
    }

    /// Listens at `addr` through `device`.
    pub async fn bind_on(device: &Device, addr: impl ToSocketAddrs) -> io::Result<Self> {
        Ok(Self {
            device: device.clone(),
            listener: device.listen(addr).await?,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.listener.local_addr())
    }

    /// The next stream. A connection request that is not an [`RdmaStream`]'s is
    /// rejected, with the reason in the MPA Reply, and the next one is waited for.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe while waiting for a request; dropped while accepting one, that
    /// connection closes.
    pub async fn accept(&self) -> io::Result<(RdmaStream, SocketAddr)> {
        loop {
            let inc = self.listener.accept().await?;
            let from = inc.peer_addr();
            let peer = match peer_ring(inc.private_data()) {
                Ok(p) => p,
                Err(why) => {
                    tracing::warn!(%from, "{why}: rejected");
                    let _ = inc.reject(why.as_bytes()).await;
                    continue;
                }
            };
            let side = Side::new(&self.device)?;
            let hello = side.hello();
            let qp = inc
                .accept(&side.pd, side.config(), &hello)
                .await
                .map_err(connect_error)?;
            return Ok((RdmaStream::start(side, qp, peer, from), from));
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Posts every note the flow owes now (a full send queue leaves the rest owed: the
    /// next send completion posts them).
    fn send_notes(&self, st: &mut State) {
        while let Some(n) = st.flow.next_note() {
            if !self.post_note(st, &n) {
                return;
            }
            st.flow.sent(&n);
        }
    }

    /// Posts one note; false if it could not go now.
    fn post_note(&self, st: &mut State, n: &Note) -> bool {
        match self.qp.post_send(note_wr(n)) {
            Ok(()) => {
                st.in_sq += 1;
                true
            }
            Err(rdmap::PostError::QueueFull) if st.in_sq > 0 => false,
            Err(e) => {
                st.end(format!("cannot post a note: {e}"));
                false
            }
        }
    }
}

impl State {
    fn end(&mut self, why: String) {
        self.ended.get_or_insert(why);
        self.wake_both();
    }

    fn wake_both(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
        if let Some(w) = self.writer.take() {
            w.wake();
        }
    }

    fn broken(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::ConnectionReset,
            self.ended.clone().unwrap_or_default(),
        )
    }
}

/// The Send carrying note `n`.
fn note_wr(n: &Note) -> SendWr {
    SendWr {
        wr_id: 0,
        op: SendOp::Send {
            data: Payload::Bytes(Bytes::copy_from_slice(&n.encode())),
            invalidate: None,
            immediate: None,
        },
        flags: SendFlags::SIGNALED,
    }
}

/// The stream's task: notes in, send completions, the end of the connection.
async fn drive(inner: Arc<Inner>, cq: Cq) {
    loop {
        tokio::select! {
            wc = cq.next() => match wc {
                Ok(wc) => inner.handle(wc.wc),
                Err(_) => {
                    inner.lock().end("the completion queue overflowed".into());
                    inner.qp.disconnect();
                    return;
                }
            },
            end = inner.qp.closed() => {
                // Completions delivered before the end are taken in first.
                let mut rest = Vec::new();
                let _ = cq.poll(&mut rest, usize::MAX);
                rest.into_iter().for_each(|wc| inner.handle(wc.wc));
                let mut st = inner.lock();
                st.closed = end == rdmap::QpEnd::Closed;
                st.end(format!("the connection ended: {end}"));
                return;
            }
        }
    }
}

impl Inner {
    /// One completion: a write or note sent, or a note from the peer.
    fn handle(&self, c: rdmap::Completion) {
        let mut st = self.lock();
        if c.queue == Queue::Send {
            st.in_sq = st.in_sq.saturating_sub(1);
            if c.status != WcStatus::Success {
                st.end(format!("a write failed: {:?}", c.status));
            } else {
                self.send_notes(&mut st);
                if let Some(w) = st.writer.take() {
                    w.wake();
                }
            }
            return;
        }
        if c.status != WcStatus::Success || c.opcode != WcOpcode::Recv {
            if c.status != WcStatus::Flushed {
                st.end(format!("a note failed: {:?}", c.status));
            }
            return;
        }
        let mut b = [0u8; NOTE_LEN];
        let at = c.wr_id as usize * SLOT;
        let note = (c.byte_len as usize == NOTE_LEN)
            .then(|| self.notes.read_into(at, &mut b).ok())
            .flatten()
            .and_then(|()| Note::decode(&b));
        let _ = self.qp.post_recv(recv_slot(&self.notes, c.wr_id));
        match note {
            Some(n) if st.flow.on_note(&n) => {
                self.send_notes(&mut st);
                st.wake_both();
            }
            _ => {
                st.end("the peer broke the byte stream's protocol".into());
                drop(st);
                self.qp.disconnect();
            }
        }
    }
}

impl AsyncRead for RdmaStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let inner = &self.inner;
        let mut st = inner.lock();
        let (at, avail) = st.flow.read_room();
        if avail > 0 && buf.remaining() > 0 {
            let n = avail.min(buf.remaining() as u64) as usize;
            let dst = buf.initialize_unfilled_to(n);
            if let Err(e) = inner.ring.read_into(at as usize, &mut dst[..n]) {
                return Poll::Ready(Err(io::Error::other(e)));
            }
            buf.advance(n);
            st.flow.consumed(n as u64);
            inner.send_notes(&mut st);
            return Poll::Ready(Ok(()));
        }
        if st.flow.at_eof() || st.closed || buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if st.ended.is_some() {
            return Poll::Ready(Err(st.broken()));
        }
        st.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl AsyncWrite for RdmaStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let inner = &self.inner;
        let mut st = inner.lock();
        if st.ended.is_some() {
            return Poll::Ready(Err(st.broken()));
        }
        if st.flow.fin_told() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "write after shutdown",
            )));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let (at, room) = st.flow.write_room();
        if room == 0 || st.in_sq + 2 > SQ_BUDGET {
            // Out of credit: the next note says so, and the reader's answer wakes us.
            inner.send_notes(&mut st);
            st.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = buf.len().min(room as usize).min(MAX_WRITE);
        let write = SendWr {
            wr_id: 0,
            op: SendOp::Write {
                data: Payload::Bytes(Bytes::copy_from_slice(&buf[..n])),
                dst: inner.peer_ring.slice(at as u32, n as u32),
            },
            flags: SendFlags::SIGNALED,
        };
        // The Write and the note saying so go in one post: one wake-up of the engine,
        // one socket write. A small one onto an idle connection goes alone instead, so
        // that the posting thread writes it itself (the push path), which saves a hop.
        st.flow.wrote(n as u64);
        let note = st.flow.next_note();
        let posted = if n <= SMALL_WRITE && st.in_sq == 0 {
            inner
                .qp
                .post_send(write)
                .map_err(|e| (0, e))
                .and_then(|()| match note {
                    Some(n) => inner.qp.post_send(note_wr(&n)).map_err(|e| (1, e)),
                    None => Ok(()),
                })
        } else {
            let batch = std::iter::once(write).chain(note.map(|n| note_wr(&n)));
            inner.qp.post_send_batch(batch)
        };
        match posted {
            Ok(()) => {
                st.in_sq += 1;
                if let Some(note) = note {
                    st.flow.sent(&note);
                    st.in_sq += 1;
                }
            }
            // The Write went, the note did not: it stays owed.
            Err((1, rdmap::PostError::QueueFull)) => st.in_sq += 1,
            // No room for it now (through a daemon: its staging memory): the next
            // completion wakes us.
            Err((0, rdmap::PostError::QueueFull)) if st.in_sq > 0 => {
                st.flow.unwrote(n as u64);
                st.writer = Some(cx.waker().clone());
                return Poll::Pending;
            }
            Err((_, e)) => {
                st.end(format!("cannot post a write: {e}"));
                return Poll::Ready(Err(st.broken()));
            }
        }
        inner.send_notes(&mut st);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Written octets are with the connection already, as with a TCP socket.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let inner = &self.inner;
        let mut st = inner.lock();
        st.flow.finish();
        inner.send_notes(&mut st);
        if st.flow.fin_told() {
            return Poll::Ready(Ok(()));
        }
        if st.ended.is_some() {
            return Poll::Ready(Err(st.broken()));
        }
        st.writer = Some(cx.waker().clone());
        Poll::Pending
    }
}
