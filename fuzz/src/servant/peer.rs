//! The remote end of the queue pairs under test: an embedded [`Engine`] in the same
//! process, on a runtime of its own, listening twice (one listener, protection domain and
//! region for the fuzzed queue pairs, another for the honest one, so that no fuzzed
//! request can reach the honest region). Every connection gets receive buffers, which it
//! posts again as they complete, and echoes every message it receives (at most 1 KiB of
//! it); the harness can ask it to send messages to a connection too.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use offload_engine::tpt::{Base, PdId};
use offload_engine::{Cq, Engine, EngineConfig, Listener, Qp, QpInit};
use rdmap::{Access, Payload, Queue, RecvWr, RemoteBuf, STag, SendFlags, SendOp, SendWr, Sge};

/// Octets of each region a queue pair under test may reach at the peer.
pub(super) const REGION: u32 = 64 << 10;
/// Receive buffers per connection, and their size.
const RECVS: u32 = 32;
const RECV_SIZE: u32 = 4096;
/// The most of a received message echoed back.
const ECHO_MAX: u32 = 1024;

/// One side of the peer: a listener's domain, its region and its receive buffers.
#[derive(Clone, Copy, Debug)]
struct Side {
    pd: PdId,
    region: RemoteBuf,
    recv_buffers: STag,
}

/// The peer.
#[derive(Debug)]
pub struct Peer {
    rt: tokio::runtime::Runtime,
    engine: Engine,
    /// Where fuzzed queue pairs connect.
    pub fuzz_addr: SocketAddr,
    /// Where the honest queue pair connects.
    pub honest_addr: SocketAddr,
    /// The region fuzzed requests are steered at.
    pub fuzz_region: RemoteBuf,
    /// The honest queue pair's region.
    pub honest_region: RemoteBuf,
    /// Live connections by the tag their Connect carried as private data.
    conns: Arc<Mutex<HashMap<u64, Qp>>>,
    _listeners: [Arc<Listener>; 2],
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Peer {
    /// Starts the peer: its runtime, engine, regions and listeners.
    pub fn start() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fuzz-peer")
            .enable_all()
            .build()
            .expect("the peer's runtime");
        let engine = Engine::new(EngineConfig::default());
        let side = || {
            let pd = engine.alloc_pd();
            let tpt = engine.tpt();
            let stag = tpt
                .register(pd, vec![0; REGION as usize], Base::ZeroBased, Access::ALL)
                .expect("peer region");
            let recv_buffers = tpt
                .register(
                    pd,
                    vec![0; (RECVS * RECV_SIZE) as usize],
                    Base::ZeroBased,
                    Access::LOCAL_WRITE | Access::LOCAL_READ,
                )
                .expect("peer receive buffers");
            Side {
                pd,
                region: RemoteBuf {
                    stag,
                    to: 0,
                    len: REGION,
                },
                recv_buffers,
            }
        };
        let (fuzz, honest) = (side(), side());
        let conns: Arc<Mutex<HashMap<u64, Qp>>> = Arc::default();
        let listeners = [fuzz, honest].map(|s| {
            let l = rt
                .block_on(engine.listen(SocketAddr::from(([127, 0, 0, 1], 0))))
                .expect("peer listener");
            let l = Arc::new(l);
            rt.spawn(accept_loop(l.clone(), s, conns.clone()));
            l
        });
        Self {
            fuzz_addr: listeners[0].local_addr(),
            honest_addr: listeners[1].local_addr(),
            fuzz_region: fuzz.region,
            honest_region: honest.region,
            rt,
            engine,
            conns,
            _listeners: listeners,
        }
    }

    /// Sends `n` messages of `len` octets on the connection tagged `tag` (if it is
    /// still there), with `flags` (bit 0 solicited, bit 1 with immediate data). The peer
    /// is the MPA Responder: what it posts goes out once the queue pair under test has
    /// sent its first message.
    pub fn send(&self, tag: u64, n: u32, len: u32, flags: u8) {
        let Some(qp) = lock(&self.conns).get(&tag).cloned() else {
            return;
        };
        let _rt = self.rt.enter();
        let data = Bytes::from(vec![0x5a; len as usize]);
        for i in 0..n {
            let wr = SendWr {
                wr_id: u64::from(i),
                op: SendOp::Send {
                    data: Payload::Bytes(data.clone()),
                    invalidate: None,
                    immediate: (flags & 2 != 0).then_some(0x1234_5678),
                },
                flags: if flags & 1 != 0 {
                    SendFlags::SOLICITED
                } else {
                    SendFlags::NONE
                },
            };
            if qp.post_send(wr).is_err() {
                return;
            }
        }
    }

    /// Connections alive now and queue pairs the engine holds (for the resource checks).
    pub fn counts(&self) -> (usize, u64) {
        (lock(&self.conns).len(), self.engine.stats().queue_pairs)
    }
}

async fn accept_loop(l: Arc<Listener>, side: Side, conns: Arc<Mutex<HashMap<u64, Qp>>>) {
    while let Ok(inc) = l.accept().await {
        let mut tag = [0u8; 8];
        let p = inc.private_data();
        let k = p.len().min(8);
        tag[..k].copy_from_slice(&p[..k]);
        let tag = u64::from_le_bytes(tag);
        let cq = Cq::new(4096);
        let init = QpInit {
            recvs: (0..RECVS).map(|i| recv(side, i)).collect(),
            push: false,
            ..QpInit::new(side.pd, &cq)
        };
        let conns = conns.clone();
        tokio::spawn(async move {
            let Ok(qp) = inc.accept(init, b"").await else {
                return;
            };
            lock(&conns).insert(tag, qp.clone());
            serve(&qp, &cq, side).await;
            lock(&conns).remove(&tag);
        });
    }
}

/// Receive buffer `i` of `side`.
fn recv(side: Side, i: u32) -> RecvWr {
    RecvWr {
        wr_id: u64::from(i),
        sgl: [Sge {
            stag: side.recv_buffers,
            to: u64::from(i * RECV_SIZE),
            len: RECV_SIZE,
        }]
        .into(),
    }
}

/// Posts receives again as they complete and echoes what arrives, until the connection
/// ends.
async fn serve(qp: &Qp, cq: &Cq, side: Side) {
    let closed = qp.closed();
    tokio::pin!(closed);
    loop {
        tokio::select! {
            _ = &mut closed => return,
            wc = cq.next() => {
                let Ok(wc) = wc else { return };
                let wc = wc.wc;
                if wc.queue != Queue::Recv || !wc.is_ok() {
                    continue;
                }
                let i = wc.wr_id as u32 % RECVS;
                if qp.post_recv(recv(side, i)).is_err() {
                    return;
                }
                let echo = wc.byte_len.min(ECHO_MAX);
                let wr = SendWr {
                    wr_id: 1 << 40,
                    op: SendOp::Send {
                        data: Payload::Bytes(Bytes::from(vec![0xec; echo as usize])),
                        invalidate: None,
                        immediate: None,
                    },
                    flags: SendFlags::NONE,
                };
                let _ = qp.post_send(wr);
            }
        }
    }
}
