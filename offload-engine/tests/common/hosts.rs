//! Two engines in one process, connected over loopback: the hosts most tests start from.

use std::net::SocketAddr;

use bytes::Bytes;
use offload_engine::tpt::{Base, PdId};
use offload_engine::{Cq, Engine, EngineConfig, Qp, QpInit};
use rdmap::{Access, Payload, RemoteBuf, SendFlags, SendOp, SendWr};

/// Every right a test region may need (no Atomics).
pub(crate) const ALL: Access = Access::LOCAL_READ
    .union(Access::LOCAL_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_WRITE)
    .union(Access::BIND);

/// An engine with one protection domain and one completion queue.
pub(crate) struct Host {
    pub(crate) engine: Engine,
    pub(crate) pd: PdId,
    pub(crate) cq: Cq,
}

/// A host with default settings.
pub(crate) fn host() -> Host {
    host_with(EngineConfig::default())
}

/// A host with settings `cfg`.
pub(crate) fn host_with(cfg: EngineConfig) -> Host {
    let engine = Engine::new(cfg);
    Host {
        pd: engine.alloc_pd(),
        engine,
        cq: Cq::new(4096),
    }
}

/// Connects `client` to `server`; returns (client qp, server qp).
pub(crate) async fn connect(client: &Host, server: &Host) -> (Qp, Qp) {
    let listener = server
        .engine
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = listener.local_addr();
    let init = QpInit::new(server.pd, &server.cq);
    let accept = tokio::spawn(async move {
        let inc = listener.accept().await.unwrap();
        inc.accept(init, b"").await.unwrap()
    });
    let (c, _) = client
        .engine
        .connect(addr, QpInit::new(client.pd, &client.cq), b"")
        .await
        .unwrap();
    (c, accept.await.unwrap())
}

/// A region of `host` holding `data`, open to the peer.
pub(crate) fn region(host: &Host, data: Vec<u8>) -> RemoteBuf {
    let len = data.len() as u32;
    let stag = host
        .engine
        .tpt()
        .register(host.pd, data, Base::ZeroBased, ALL)
        .unwrap();
    RemoteBuf { stag, to: 0, len }
}

/// A signaled RDMA Write of a copy of `data` to `dst`.
pub(crate) fn write(wr_id: u64, data: &[u8], dst: RemoteBuf) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Write {
            data: Payload::Bytes(Bytes::copy_from_slice(data)),
            dst,
        },
        flags: SendFlags::SIGNALED,
    }
}
