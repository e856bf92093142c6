//! `RdmaStream`: a byte stream over RDMA that tokio code written for `TcpStream` uses
//! unchanged: a length-delimited `Framed` codec round trip, a large copy verified by
//! checksum in both directions at once, EOF after shutdown, and peers that are not byte
//! streams refused by name.

mod common;

use std::net::SocketAddr;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use verbs::bytes::Bytes;
use verbs::{ConnectError, Device, DeviceConfig, QpConfig, RdmaListener, RdmaStream};

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    rdmap::testing::XorShift::new(seed).bytes(len)
}

async fn pair() -> (RdmaStream, RdmaStream) {
    pair_on(
        Device::open(DeviceConfig::default().embedded()).expect("open the device"),
        Device::open(DeviceConfig::default().embedded()).expect("open the device"),
    )
    .await
}

async fn pair_on(a: Device, b: Device) -> (RdmaStream, RdmaStream) {
    let listener = RdmaListener::bind_on(&a, loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (client, accepted) = tokio::join!(RdmaStream::connect_on(&b, addr), listener.accept());
    (client.unwrap(), accepted.unwrap().0)
}

/// The echo server of tokio's examples, over RDMA: frames of 0 octets to 300 KiB (beyond
/// the ring's octets in flight at once) come back intact and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_framed_codec_round_trips_over_rdma() {
    let (client, server) = pair().await;
    let echo = tokio::spawn(async move {
        let mut framed = Framed::new(server, LengthDelimitedCodec::new());
        while let Some(frame) = framed.next().await {
            framed.send(frame.unwrap().freeze()).await.unwrap();
        }
    });
    let codec = LengthDelimitedCodec::builder()
        .max_frame_length(4 << 20)
        .new_codec();
    let mut framed = Framed::new(client, codec);
    for i in 0..300u64 {
        let len = [0usize, 1, 100, 4096, 65_536, 300 << 10][i as usize % 6];
        let msg = Bytes::from(pattern(len, i));
        framed.send(msg.clone()).await.unwrap();
        let back = framed.next().await.unwrap().unwrap();
        assert_eq!(back.len(), len, "frame {i}");
        assert!(back == msg, "frame {i} differs");
    }
    drop(framed);
    echo.await.unwrap();
}

/// The same stream through an iwarpd on the listening side: nothing in it is the
/// embedded engine's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_runs_through_iwarpd_too() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let daemon = common::Host::daemon("byte-stream", offload_engine::EngineConfig::default());
    let (mut a, mut b) = pair_on(
        daemon.device,
        Device::open(DeviceConfig::default().embedded()).expect("open the device"),
    )
    .await;
    let data = pattern(3 << 20, 9);
    let (sent, got) = tokio::join!(
        async {
            b.write_all(&data).await.unwrap();
            b.shutdown().await.unwrap();
        },
        async {
            let mut got = Vec::new();
            a.read_to_end(&mut got).await.unwrap();
            got
        }
    );
    let () = sent;
    assert!(got == data, "3 MiB through the daemon, intact");
}

/// 64 MiB each way at once (both sides write while they read), copied with
/// `tokio::io::copy` and compared by CRC32C; then each side reads EOF after the other's
/// shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_copy_both_ways_verified_by_checksum() {
    const LEN: usize = 64 << 20;
    let (a, b) = pair().await;
    let run = |s: RdmaStream, seed: u64| async move {
        let data = pattern(LEN, seed);
        let sent = crc32c::crc32c(&data);
        let (mut rd, mut wr) = tokio::io::split(s);
        let writer = tokio::spawn(async move {
            tokio::io::copy(&mut &data[..], &mut wr).await.unwrap();
            wr.shutdown().await.unwrap();
            wr
        });
        let mut crc = 0u32;
        let mut total = 0usize;
        let mut buf = vec![0; 100_000];
        loop {
            let n = rd.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            total += n;
        }
        let _wr = writer.await.unwrap();
        (sent, crc, total)
    };
    let (ra, rb) = tokio::join!(run(a, 1), run(b, 2));
    assert_eq!(ra.2, LEN);
    assert_eq!(rb.2, LEN);
    assert_eq!(ra.1, rb.0, "what A read is what B wrote");
    assert_eq!(rb.1, ra.0, "what B read is what A wrote");
}

/// A listener that is not a byte stream's answers without a ring: the client names the
/// cause; a plain connection request to a byte stream listener is rejected with the
/// reason, and the listener goes on to the next.
#[tokio::test]
async fn peers_that_are_not_byte_streams_are_refused() {
    let dev = Device::open(DeviceConfig::default().embedded()).expect("open the device");
    let plain = dev.listen(loopback()).await.unwrap();
    let addr = plain.local_addr();
    let (pd, cq) = (dev.alloc_pd().unwrap(), dev.create_cq(4));
    let accepting = tokio::spawn(async move {
        let inc = plain.accept().await.unwrap();
        let _qp = inc.accept(&pd, QpConfig::new(&cq), b"hello").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    });
    let e = RdmaStream::connect_on(&dev, addr).await.unwrap_err();
    assert!(e.to_string().contains("not an RdmaStream"), "{e}");
    accepting.await.unwrap();

    let listener = RdmaListener::bind_on(&dev, loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { listener.accept().await.unwrap() });
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(4);
    let e = dev
        .connect(&pd, addr, QpConfig::new(&cq), b"GET / HTTP/1.1")
        .await
        .unwrap_err();
    match e {
        ConnectError::Rejected { private_data, .. } => {
            let why = String::from_utf8_lossy(&private_data);
            assert!(why.contains("not an RdmaStream"), "{why}");
        }
        other => panic!("{other}"),
    }
    // The listener still serves a real stream afterwards.
    let mut s = RdmaStream::connect_on(&dev, addr).await.unwrap();
    let (mut t, _) = server.await.unwrap();
    s.write_all(b"still here").await.unwrap();
    let mut got = [0; 10];
    t.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"still here");
}

/// A server that speaks first (a banner, as SMTP or SSH servers send) is heard by a
/// client that only reads: the accepting side may send only once the client's first
/// message arrived, and the client's stream sends one at once.
#[tokio::test]
async fn a_server_may_speak_first() {
    let (mut client, mut server) = pair().await;
    server.write_all(b"220 ready\r\n").await.unwrap();
    let mut banner = [0; 11];
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        client.read_exact(&mut banner),
    )
    .await
    .expect("the banner within 10 s")
    .unwrap();
    assert_eq!(&banner, b"220 ready\r\n");
}
