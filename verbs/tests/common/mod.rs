//! Two devices in one process, connected over loopback.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;

use bytes::Bytes;
use verbs::{Access, Cq, Device, DeviceConfig, Pd, Qp, QpConfig};

/// Every right a test region may need.
pub const ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_ATOMIC)
    .union(Access::BIND);

/// A device with one protection domain and one completion queue.
#[derive(Clone)]
pub struct Host {
    pub device: Device,
    pub pd: Pd,
    pub cq: Cq,
}

impl Host {
    pub fn new(cfg: DeviceConfig) -> Self {
        Self::on(Device::open(cfg).expect("open the device"))
    }

    /// A host whose device is attached to an iwarpd local service started in this
    /// process (on threads of its own, as another process would be) with `engine`'s
    /// settings, at a socket named after `name`.
    pub fn daemon(name: &str, engine: offload_engine::EngineConfig) -> Self {
        let path =
            std::env::temp_dir().join(format!("iwarpd-test-{}-{name}.sock", std::process::id()));
        let cfg = iwarpd::local::LocalConfig::default();
        // Runs until the test process ends.
        iwarpd::local::LocalService::start(&path, engine, cfg, 1).expect("iwarpd");
        Self::on(Device::open(DeviceConfig::default().daemon(&path)).expect("attach"))
    }

    fn on(device: Device) -> Self {
        let pd = device.alloc_pd().expect("a protection domain");
        let cq = device.create_cq(1024);
        Self { device, pd, cq }
    }
}

/// One end of a connection.
pub struct Side {
    pub host: Host,
    pub qp: Qp,
    /// The private data the other side sent.
    pub peer_data: Bytes,
}

impl Side {
    pub fn pd(&self) -> &Pd {
        &self.host.pd
    }

    pub fn cq(&self) -> &Cq {
        &self.host.cq
    }
}

/// A connected client and server with default settings and no private data.
pub async fn pair() -> (Side, Side) {
    let cfg = DeviceConfig::default();
    connect(&Host::new(cfg.clone()), &Host::new(cfg), b"", b"").await
}

/// Connects `client` to `server`, each sending its private data.
pub async fn connect(
    client: &Host,
    server: &Host,
    client_data: &[u8],
    server_data: &[u8],
) -> (Side, Side) {
    let listener = server
        .device
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("listen");
    let addr = listener.local_addr();
    let accept = {
        let host = server.clone();
        let reply = server_data.to_vec();
        tokio::spawn(async move {
            let inc = listener.accept().await.expect("incoming");
            let peer_data = inc.private_data().clone();
            let qp = inc
                .accept(&host.pd, QpConfig::new(&host.cq), &reply)
                .await
                .expect("accept");
            (qp, peer_data)
        })
    };
    let conn = client
        .device
        .connect(&client.pd, addr, QpConfig::new(&client.cq), client_data)
        .await
        .expect("connect");
    let (sqp, sdata) = accept.await.expect("accept task");
    (
        Side {
            host: client.clone(),
            qp: conn.qp,
            peer_data: conn.private_data,
        },
        Side {
            host: server.clone(),
            qp: sqp,
            peer_data: sdata,
        },
    )
}

/// `len` octets of a pattern that differs per `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 8) as u8)
        .collect()
}

/// A hand-made MPA Responder on loopback that reads a Request asking for CRC and rejects it
/// with an answer whose C bit is clear (as Linux siw with `mpa_crc_strict` answers). The
/// task returns its socket once the answer is written.
pub async fn crc_dropping_rejecter() -> (SocketAddr, tokio::task::JoinHandle<tokio::net::TcpStream>)
{
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let peer = tokio::spawn(async move {
        let (mut sock, _) = tcp.accept().await.unwrap();
        let mut request = [0u8; 20];
        sock.read_exact(&mut request).await.unwrap();
        assert_eq!(&request[..16], b"MPA ID Req Frame");
        assert_eq!(request[16] & 0x40, 0x40, "the Request asks for CRC");
        // A revision 1 Reply: R set, C clear, no private data.
        let mut reply = b"MPA ID Rep Frame".to_vec();
        reply.extend_from_slice(&[0x20, 0x01, 0x00, 0x00]);
        sock.write_all(&reply).await.unwrap();
        sock
    });
    (addr, peer)
}

/// `err` is the rejection by [`crc_dropping_rejecter`]: it names the dropped CRC bit.
pub fn assert_crc_hint(err: &verbs::ConnectError) {
    assert!(
        matches!(err, verbs::ConnectError::Rejected { refused, .. } if refused.crc),
        "{err:?}"
    );
    assert!(
        err.to_string().ends_with("try connecting without CRC"),
        "{err}"
    );
}
