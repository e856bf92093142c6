//! Connection management over loopback TCP: reject with private data, every MPA mode
//! (revision, CRC, markers per direction, peer-to-peer with each RTR), and timeouts.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use mpa::{PeerEnd, RtrFlags};
use offload_engine::tpt::Base;
use offload_engine::{ConnectError, Cq, Engine, EngineConfig, QpInit};
use rdmap::{
    Access, Payload, QpState, RecvWr, RemoteBuf, SendFlags, SendOp, SendWr, Sge, WcStatus,
};

const ALL: Access = Access::LOCAL_READ
    .union(Access::LOCAL_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_WRITE);

fn local() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

#[tokio::test]
async fn reject_carries_private_data_back() {
    let server = Engine::new(EngineConfig::default());
    let client = Engine::new(EngineConfig::default());
    let listener = server.listen(local()).await.unwrap();
    let addr = listener.local_addr();
    let rejecter = tokio::spawn(async move {
        let inc = listener.accept().await.unwrap();
        assert_eq!(&inc.private_data()[..], b"let me in");
        inc.reject(b"go away").await.unwrap();
    });
    let cq = Cq::new(16);
    let err = client
        .connect(addr, QpInit::new(client.alloc_pd(), &cq), b"let me in")
        .await
        .unwrap_err();
    match err {
        ConnectError::Rejected { private_data, .. } => assert_eq!(&private_data[..], b"go away"),
        other => panic!("{other}"),
    }
    rejecter.await.unwrap();
}

#[tokio::test]
async fn a_silent_peer_times_out_with_a_clear_error() {
    // A plain TCP server that never answers the MPA Request.
    let silent = tokio::net::TcpListener::bind(local()).await.unwrap();
    let addr = silent.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let (sock, _) = silent.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(sock);
    });
    let mut cfg = EngineConfig::default();
    cfg.mpa.timeout = Duration::from_millis(200);
    let client = Engine::new(cfg);
    let cq = Cq::new(16);
    let err = client
        .connect(addr, QpInit::new(client.alloc_pd(), &cq), b"")
        .await
        .unwrap_err();
    let ConnectError::NoFrame(why) = &err else {
        panic!("{err}")
    };
    assert_eq!(
        why.end,
        PeerEnd::Silent(Duration::from_millis(200)),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "no MPA Reply within 200 ms: the peer accepted the TCP connection and sent nothing; \
         is an iWARP listener on that address and port?"
    );
    hold.abort();
}

/// A server of another protocol at `answer` (it reads the MPA Request, writes `answer`
/// and closes): the error the Initiator gets.
async fn connect_to_a_server_that_answers(answer: &'static [u8]) -> ConnectError {
    let other = tokio::net::TcpListener::bind(local()).await.unwrap();
    let addr = other.local_addr().unwrap();
    let serve = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut sock, _) = other.accept().await.unwrap();
        // The whole Request (20 octets and the 4-octet IRD/ORD block), as an HTTP
        // server reads a request before it answers (unread octets would make the close
        // a reset).
        let mut request = [0; 24];
        sock.read_exact(&mut request).await.unwrap();
        sock.write_all(answer).await.unwrap();
        sock.shutdown().await.unwrap();
        // Lingers until the client has read the answer and closed.
        let _ = sock.read(&mut request).await;
    });
    let client = Engine::new(EngineConfig::default());
    let cq = Cq::new(16);
    let err = client
        .connect(addr, QpInit::new(client.alloc_pd(), &cq), b"")
        .await
        .unwrap_err();
    serve.await.unwrap();
    err
}

#[tokio::test]
async fn an_http_server_that_answers_and_closes_is_named_with_what_it_sent() {
    let http = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    let err = connect_to_a_server_that_answers(http).await;
    let ConnectError::NoFrame(why) = &err else {
        panic!("{err}")
    };
    assert_eq!(
        (why.end, why.sent_len),
        (PeerEnd::NotMpa, http.len()),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.starts_with("the peer answered but is not an iWARP MPA endpoint (it sent 66 octets (\"HTTP/1.1 400 Bad Request\\r\\n"),
        "{text}"
    );
    // Shorter than an MPA frame's 20 octets, then the close: the close is what ends it.
    let err = connect_to_a_server_that_answers(b"HTTP/1.0 400\r\n\r\n").await;
    assert_eq!(
        err.to_string(),
        "the peer closed the TCP connection before its MPA Reply (it sent 16 octets \
         (\"HTTP/1.0 400\\r\\n\\r\\n\") that are not MPA); is an iWARP listener on that \
         address and port?"
    );
    // Nothing at all before the close.
    let err = connect_to_a_server_that_answers(b"").await;
    let text = err.to_string();
    assert!(
        text.starts_with(
            "the peer closed the TCP connection before its MPA Reply, having sent nothing"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn a_peer_that_is_not_iwarp_is_named_as_such() {
    // An SSH server speaks first: its banner is where the MPA Reply should be.
    let ssh = tokio::net::TcpListener::bind(local()).await.unwrap();
    let addr = ssh.local_addr().unwrap();
    let serve = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let (mut sock, _) = ssh.accept().await.unwrap();
        sock.write_all(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let client = Engine::new(EngineConfig::default());
    let cq = Cq::new(16);
    let err = client
        .connect(addr, QpInit::new(client.alloc_pd(), &cq), b"")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("not an iWARP MPA endpoint") && text.contains("SSH-2.0-OpenSSH_"),
        "{text}"
    );
    serve.abort();
}

/// Connects with `ci` / `cr` MPA settings and runs a Write, a Read and a Send.
async fn exercise(ci: mpa::MpaConfig, cr: mpa::MpaConfig) {
    let mut sc = EngineConfig::default();
    sc.mpa = cr;
    let mut cc = EngineConfig::default();
    cc.mpa = ci;
    let (server, client) = (Engine::new(sc), Engine::new(cc));
    let listener = server.listen(local()).await.unwrap();
    let addr = listener.local_addr();
    let (spd, scq) = (server.alloc_pd(), Cq::new(64));
    let sbuf = server
        .tpt()
        .register(spd, vec![0; 1 << 20], Base::ZeroBased, ALL)
        .unwrap();
    let accept = {
        let scq = scq.clone();
        tokio::spawn(async move {
            listener
                .accept()
                .await
                .unwrap()
                .accept(QpInit::new(spd, &scq), b"")
                .await
                .unwrap()
        })
    };
    let (cpd, ccq) = (client.alloc_pd(), Cq::new(64));
    let cbuf = client
        .tpt()
        .register(cpd, vec![0; 1 << 20], Base::ZeroBased, ALL)
        .unwrap();
    let (qp, _) = client
        .connect(addr, QpInit::new(cpd, &ccq), b"")
        .await
        .unwrap();
    let sqp = accept.await.unwrap();
    sqp.post_recv(RecvWr {
        wr_id: 1,
        sgl: [Sge {
            stag: sbuf,
            to: 0,
            len: 1024,
        }]
        .into(),
    })
    .unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let wrs = [
        SendOp::Write {
            data: Payload::Bytes(Bytes::from(data.clone())),
            dst: RemoteBuf {
                stag: sbuf,
                to: 4096,
                len: data.len() as u32,
            },
        },
        SendOp::Read {
            src: RemoteBuf {
                stag: sbuf,
                to: 4096,
                len: data.len() as u32,
            },
            dst: Sge {
                stag: cbuf,
                to: 0,
                len: data.len() as u32,
            },
        },
        SendOp::Send {
            data: Payload::Bytes(Bytes::from_static(b"done")),
            invalidate: None,
            immediate: None,
        },
    ];
    for (i, op) in wrs.into_iter().enumerate() {
        qp.post_send(SendWr {
            wr_id: i as u64,
            op,
            flags: SendFlags::SIGNALED,
        })
        .unwrap();
    }
    for i in 0..3 {
        let wc = ccq.next().await.unwrap();
        assert_eq!((wc.wc.wr_id, wc.wc.status), (i, WcStatus::Success));
    }
    let wc = scq.next().await.unwrap();
    assert_eq!(wc.wc.byte_len, 4);
    let mut back = vec![0; data.len()];
    client.tpt().read(cpd, cbuf, 0, &mut back).unwrap();
    assert!(back == data);
    assert_eq!(qp.state(), QpState::Rts);
}

#[tokio::test]
async fn every_mpa_mode_carries_traffic() {
    let base = mpa::MpaConfig::default;
    for rev in [1u8, 2] {
        for (crc_i, crc_r) in [(false, false), (true, false), (false, true), (true, true)] {
            for (mk_i, mk_r) in [(false, false), (true, false), (false, true), (true, true)] {
                let mut ci = base();
                ci.rev = rev;
                ci.crc = crc_i;
                ci.markers = mk_i;
                let mut cr = base();
                cr.crc = crc_r;
                cr.markers = mk_r;
                exercise(ci, cr).await;
            }
        }
    }
    for (offer, accept) in [
        (RtrFlags::WRITE | RtrFlags::READ, RtrFlags::WRITE),
        (RtrFlags::READ, RtrFlags::READ),
        (RtrFlags::SEND, RtrFlags::SEND),
    ] {
        let mut ci = base();
        ci.p2p = true;
        ci.rtr = offer;
        let mut cr = base();
        cr.rtr = accept;
        exercise(ci, cr).await;
    }
}
