//! Registration through the control queue, through `verbs` (seed 003 §3.4): the region
//! comes back before its registration is done, a Send and a Write from it posted at once
//! complete after it with the right octets, the request behind them waits too, and a
//! region dropped before it is registered fails the request waiting on it.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{ALL, Host, connect, pattern};
use verbs::{Access, DeviceConfig, RemoteBuf, WcOpcode, WcStatus};

const DELAY: Duration = Duration::from_millis(150);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_from_a_region_being_registered_wait_for_it() {
    let client = Host::new(DeviceConfig::default().registration_delay(DELAY));
    let server = Host::new(DeviceConfig::default());
    let target = server.pd.alloc_mr(64 << 10, ALL).unwrap();
    let inbox = server.pd.alloc_mr(64 << 10, Access::LOCAL_WRITE).unwrap();
    let (c, s) = connect(&client, &server, b"", &target.remote().encode()).await;
    let dst = RemoteBuf::decode(&c.peer_data).unwrap();

    let t0 = Instant::now();
    let mr = client.pd.alloc_mr_queued(64 << 10, ALL).unwrap();
    assert!(t0.elapsed() < DELAY, "the region comes back at once");
    let data = pattern(64 << 10, 9);
    mr.write(0, &data).unwrap();
    let (got, sent, written, after) = tokio::join!(
        s.qp.recv(&inbox),
        c.qp.send_sgl(mr.local(..1000)),
        c.qp.exec(
            verbs::SendOp::Write {
                data: verbs::Payload::Sgl(mr.local(..).into()),
                dst,
            },
            verbs::SendFlags::NONE
        ),
        c.qp.write(Bytes::from_static(b"behind"), dst.slice((64 << 10) - 6, 6)),
    );
    assert!(t0.elapsed() >= DELAY, "they waited for the registration");
    assert_eq!(sent.unwrap().opcode, WcOpcode::Send);
    assert_eq!(written.unwrap().status, WcStatus::Success);
    assert_eq!(after.unwrap().status, WcStatus::Success);
    let got = got.unwrap();
    assert_eq!(got.byte_len, 1000);
    assert_eq!(inbox.read(..1000).unwrap(), &data[..1000]);
    // Read back what the Writes placed (a Read completes after the Writes before it):
    // the one posted behind did not overtake the held one.
    let back = client.pd.alloc_mr(64 << 10, Access::LOCAL_WRITE).unwrap();
    c.qp.read(dst.slice(0, 64 << 10), back.local(..))
        .await
        .unwrap();
    let mut expected = data.clone();
    expected[(64 << 10) - 6..].copy_from_slice(b"behind");
    assert!(back.read(..).unwrap() == expected);
    mr.registered().await.unwrap();

    // A region dropped before its registration is done: the request waiting on it fails
    // with a local protection error (the queue pair then ends, as for any such error).
    let gone = client.pd.alloc_mr_queued(4096, ALL).unwrap();
    let waiting = {
        let (qp, sge) = (c.qp.clone(), gone.local(..));
        tokio::spawn(async move { qp.send_sgl(sge).await })
    };
    tokio::time::sleep(DELAY / 3).await;
    let stag = gone.stag();
    drop(gone);
    let err = waiting.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("LocalProtection"), "{err}");
    let later = client.pd.alloc_mr_queued(8, ALL).unwrap();
    assert_ne!(later.stag(), stag);
    later.registered().await.unwrap();
}

/// Through iwarpd: the STag is reserved ahead, the registration goes out without a round
/// trip, and the daemon holds the Write naming it until the (delayed) registration has
/// arrived. A registration the daemon refuses fails the request waiting on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_iwarpd_the_daemon_holds_requests_until_the_registration_arrives() {
    let mut engine = offload_engine::EngineConfig::default();
    engine.registration_delay = DELAY;
    let client = Host::daemon("queued-registration", engine);
    let server = Host::new(DeviceConfig::default());
    let target = server.pd.alloc_mr(64 << 10, ALL).unwrap();
    let (c, _s) = connect(&client, &server, b"", &target.remote().encode()).await;
    let dst = RemoteBuf::decode(&c.peer_data).unwrap();

    // The first reservation is a round trip; it also starts the next one.
    client
        .pd
        .alloc_mr_queued(8, ALL)
        .unwrap()
        .registered()
        .await
        .unwrap();
    let t0 = Instant::now();
    let mr = client.pd.alloc_mr_queued(64 << 10, ALL).unwrap();
    assert!(t0.elapsed() < DELAY, "no waiting for the daemon");
    let data = pattern(64 << 10, 3);
    mr.write(0, &data).unwrap();
    let (written, behind) = tokio::join!(
        c.qp.exec(
            verbs::SendOp::Write {
                data: verbs::Payload::Sgl(mr.local(..).into()),
                dst,
            },
            verbs::SendFlags::NONE
        ),
        c.qp.write(Bytes::from_static(b"behind"), dst.slice((64 << 10) - 6, 6)),
    );
    assert!(
        t0.elapsed() >= DELAY,
        "the daemon held it for the registration"
    );
    assert_eq!(written.unwrap().status, WcStatus::Success);
    assert_eq!(behind.unwrap().status, WcStatus::Success);
    mr.registered().await.unwrap();
    let back = client.pd.alloc_mr(64 << 10, Access::LOCAL_WRITE).unwrap();
    c.qp.read(dst, back.local(..)).await.unwrap();
    let mut expected = data;
    expected[(64 << 10) - 6..].copy_from_slice(b"behind");
    assert!(back.read(..).unwrap() == expected);
}
