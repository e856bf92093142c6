//! Seed 000's flow-control condition (D4), provoked on purpose, through iwarpd and
//! embedded: a hand-framed peer asks a client for 16 MiB with one RDMA Read Request and then stops reading its
//! socket, so the client's connection has octets that cannot leave. A small
//! Send the client then pushes is discarded for that reason (its send queue is empty, so
//! no other condition applies) and stays queued behind the responses.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use tests::hostile::{Peer, REP_KEY, mpa_frame, read_request, untagged};
use verbs::bytes::Bytes;
use verbs::{Access, Device, DeviceConfig, Payload, QpConfig, SendFlags, SendOp, SendWr};

const LEN: u32 = 16 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_onto_a_connection_whose_peer_stopped_reading_is_discarded() {
    let path = std::env::temp_dir().join(format!("iwarpd-d4-{}.sock", std::process::id()));
    iwarpd::local::LocalService::start(
        &path,
        offload_engine::EngineConfig::default(),
        iwarpd::local::LocalConfig::default(),
        1,
    )
    .unwrap();
    provoke_d4(Device::open(DeviceConfig::default().daemon(&path)).unwrap()).await;
}

/// The same with the engine in this process, running the push path on its in-process
/// region.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_push_onto_a_connection_whose_peer_stopped_reading_is_discarded() {
    provoke_d4(Device::open(DeviceConfig::default().embedded()).expect("open the device")).await;
}

async fn provoke_d4(dev: Device) {
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = tcp.local_addr().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let region = pd.alloc_mr(LEN as usize, Access::REMOTE_READ).unwrap();
    let (stag, to) = (region.stag().to_u32(), region.to());
    // The peer: answers the MPA Request, takes the client's first FPDU, asks for the
    // whole region, and then reads nothing more.
    let peer = std::thread::spawn(move || {
        let (sock, _) = tcp.accept().unwrap();
        let mut peer = Peer::new(sock, true);
        peer.read_frame().unwrap().expect("an MPA Request");
        peer.send_raw(&mpa_frame(REP_KEY, 0x40, 2, Some((16, 16)), &[], None));
        peer.read_ulpdu().unwrap().expect("the client's first Send");
        let req = read_request(0x1234_5601, 0, LEN, stag, to);
        peer.send(&untagged(1, 1, 1, 0, 0, &req));
        peer
    });
    let cq = dev.create_cq(16);
    let conn = dev
        .connect(&pd, addr, QpConfig::new(&cq), b"")
        .await
        .unwrap();
    conn.qp.send(Bytes::from_static(b"go")).await.unwrap();
    let _peer = tokio::task::spawn_blocking(move || peer.join().unwrap())
        .await
        .unwrap();
    // Give the responses time to fill the socket, then push one small Send at a time
    // until one meets the back-pressure.
    let start = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        conn.qp
            .post_send(SendWr {
                wr_id: 1,
                op: SendOp::Send {
                    data: Payload::Bytes(Bytes::from_static(b"small")),
                    invalidate: None,
                    immediate: None,
                },
                flags: SendFlags::SIGNALED,
            })
            .unwrap();
        let st = conn.qp.stats();
        if st.push.discards[1] > 0 {
            // Only the first Send, before the Read, was executed from its pushed copy.
            assert_eq!(st.push.executed, 1, "{st:?}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no push met the back-pressure: {st:?}"
        );
    }
}
