//! Errors through the API: what each names, and that a failure changes nothing.

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use common::{ALL, Host, pair};
use verbs::{
    Access, ConnectError, Device, DeviceConfig, MemError, MwType, PostError, QpConfig, QpEnd,
    RemoteBuf, WcError, WcOpcode, WcStatus,
};

#[tokio::test]
async fn read_of_a_stale_stag_fails_with_status_and_terminate() {
    let (c, s) = pair().await;
    let target = s.pd().alloc_mr(64, ALL).unwrap();
    let stale = target
        .stag()
        .with_instance(target.stag().instance().wrapping_add(1));
    let sink = c.pd().alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let src = RemoteBuf {
        stag: stale,
        to: 0,
        len: 64,
    };
    let err = c.qp.read(src, &sink).await.unwrap_err();
    assert_eq!(err.opcode(), WcOpcode::Read);
    assert_eq!(err.status(), Some(WcStatus::RemoteAccess), "{err}");
    let term = err.term().expect("the peer's Terminate");
    assert_eq!(
        term.to_wire(),
        [0x01, 0x00],
        "RDMAP remote protection: invalid STag"
    );
    let text = err.to_string();
    assert!(
        text.contains("Read failed") && text.contains("Terminate"),
        "{text}"
    );
    assert_eq!(c.qp.closed().await, QpEnd::TerminatedByPeer(term));
    assert_eq!(s.qp.closed().await, QpEnd::Terminated(term));
    assert_eq!(sink.read(..).unwrap(), vec![0; 64], "nothing placed");

    // The counters saw it: one Read Request out, one Terminate each way, and the queue
    // pair counted in its device's totals.
    let (cs, ss) = (c.qp.stats(), s.qp.stats());
    assert_eq!(
        (cs.traffic.terminates_received, ss.traffic.terminates_sent),
        (1, 1)
    );
    assert_eq!(
        (cs.traffic.terminates_sent, ss.traffic.terminates_received),
        (0, 0)
    );
    assert_eq!(
        cs.traffic.octets_sent[1], 16,
        "one Read V2 Request (both sides agreed): 16 octets, no sink"
    );
    assert_eq!(ss.traffic.octets_received[1], 16);
    assert_eq!(
        ss.traffic.octets_sent[7], cs.traffic.octets_received[7],
        "the Terminate's octets"
    );
    assert_eq!(verbs::OPCODE_NAMES[7], "Terminate");
    let d = c.host.device.stats();
    assert_eq!(
        (d.connections, d.totals.traffic.terminates_received),
        (1, 1)
    );

    // The queue pair is dead: later requests complete as flushed.
    let err = c.qp.send(Bytes::from_static(b"late")).await.unwrap_err();
    assert_eq!(err.status(), Some(WcStatus::Flushed), "{err}");
    assert!(err.to_string().contains("Qp::closed"), "{err}");
}

#[tokio::test]
async fn posts_fail_fast_when_full_or_closing() {
    let cfg = DeviceConfig::default().queue_depths(1, 1);
    let server = Host::new(cfg.clone());
    let target = server.pd.alloc_mr(1 << 20, ALL).unwrap();
    let (c, _s) = common::connect(&Host::new(cfg), &server, b"", b"").await;
    let big = Bytes::from(vec![0u8; 1 << 20]);
    let dst = target.remote();
    // One request fills the 1-deep send queue; the driver has not run yet (current-thread
    // runtime, no await in between), so the second post is refused at once.
    c.qp.post_send(verbs::SendWr {
        wr_id: 1,
        op: verbs::SendOp::Write {
            data: verbs::Payload::Bytes(big.clone()),
            dst,
        },
        flags: verbs::SendFlags::NONE,
    })
    .unwrap();
    let err = c.qp.write(big, dst).await.unwrap_err();
    assert_eq!(
        err,
        WcError::Post {
            op: WcOpcode::Write,
            error: PostError::QueueFull
        }
    );
    assert!(err.to_string().contains("queue full"), "{err}");

    c.qp.disconnect();
    let err = c.qp.send(Bytes::new()).await.unwrap_err();
    assert!(
        matches!(
            err,
            WcError::Post {
                error: PostError::Closing,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(c.qp.closed().await, QpEnd::Closed);
}

#[tokio::test]
async fn a_receive_too_small_fails_locally() {
    let (c, s) = pair().await;
    let inbox = s.pd().alloc_mr(4, Access::LOCAL_WRITE).unwrap();
    let (got, _sent) = tokio::join!(
        s.qp.recv(&inbox),
        c.qp.send(Bytes::from_static(b"far too long"))
    );
    let err = got.unwrap_err();
    assert_eq!(err.opcode(), WcOpcode::Recv);
    // The engine flushes the too-small buffer (rather than completing it with
    // LocalLength) and terminates the stream; `closed` says why.
    assert!(err.status().is_some(), "{err:?}");
    assert!(err.to_string().contains("Recv failed"), "{err}");
    let end = s.qp.closed().await;
    assert!(matches!(end, QpEnd::Terminated(_)), "{end:?}");
}

#[tokio::test]
async fn mem_errors_name_stag_offset_and_right() {
    let host = Host::new(DeviceConfig::default());
    let ro = host.pd.register(vec![1; 32], Access::REMOTE_READ).unwrap();
    assert_eq!(ro.access(), Access::REMOTE_READ | Access::LOCAL_READ);
    let err = ro.write(0, b"x").unwrap_err();
    assert_eq!(
        err,
        MemError::MissingRights {
            stag: ro.stag(),
            offset: 0,
            missing: Access::LOCAL_WRITE
        }
    );
    assert!(err.to_string().contains("LOCAL_WRITE"), "{err}");
    let err = ro.read(30..40).unwrap_err();
    assert_eq!(
        err,
        MemError::OutOfBounds {
            stag: ro.stag(),
            offset: 30,
            len: 10,
            region_len: 32
        }
    );
    assert!(ro.try_local(..33).is_err());
    assert_eq!(ro.read(..).unwrap(), vec![1; 32], "nothing changed");

    // A clone sees the region go away.
    let clone = ro.clone();
    ro.deregister().await.unwrap();
    assert_eq!(
        &clone.view(..).unwrap()[..],
        &[1; 32],
        "the clone keeps the memory"
    );
    let err = clone.read(..1).unwrap_err();
    assert_eq!(err, MemError::Invalid { stag: clone.stag() });
    assert!(err.to_string().contains("no longer valid"), "{err}");
    let stag = clone.stag();
    assert_eq!(
        clone.deregister().await.unwrap_err(),
        MemError::Invalid { stag },
        "deregistered once only"
    );
}

#[test]
#[should_panic(expected = "outside region")]
fn local_panics_outside_the_region() {
    let host = Host::new(DeviceConfig::default());
    let mr = host.pd.alloc_mr(8, Access::NONE).unwrap();
    let _ = mr.local(4..9);
}

#[test]
fn window_misuse_fails_before_posting() {
    let host = Host::new(DeviceConfig::default());
    let no_bind = host
        .pd
        .alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let one = host.pd.alloc_mr(64, ALL).unwrap();
    let mw1 = host.pd.alloc_mw(MwType::One).unwrap();
    let err = mw1.bind(&no_bind, .., Access::REMOTE_WRITE).unwrap_err();
    assert!(
        matches!(err, MemError::MissingRights { missing, .. } if missing == Access::BIND),
        "{err:?}"
    );
    assert!(matches!(
        mw1.bind_op(&one, .., Access::REMOTE_WRITE),
        Err(MemError::WrongKind { .. })
    ));
    let other_pd = host.device.alloc_pd().unwrap();
    let foreign = other_pd.alloc_mr(64, ALL).unwrap();
    assert!(matches!(
        mw1.bind(&foreign, .., Access::REMOTE_WRITE),
        Err(MemError::WrongDomain { .. })
    ));
    assert_eq!(mw1.remote(), None, "nothing bound");
    let wide = one.fast_reg_op(0, 8, Access::REMOTE_READ).unwrap_err();
    assert!(matches!(wide, MemError::WrongKind { .. }), "{wide:?}");
}

/// A peer whose rejecting answer drops the CRC bit the Request asked for (Linux siw with
/// `mpa_crc_strict` answers so) gets a hint at CRC, with what to try.
#[tokio::test]
async fn a_rejection_that_turns_crc_off_names_crc() {
    let (addr, peer) = common::crc_dropping_rejecter().await;
    let client = Device::open(DeviceConfig::default().crc(true)).expect("open the device");
    let pd = client.alloc_pd().unwrap();
    let cq = client.create_cq(4);
    let err = client
        .connect(&pd, addr, QpConfig::new(&cq), b"")
        .await
        .unwrap_err();
    common::assert_crc_hint(&err);
    drop(peer.await.unwrap());
}

#[tokio::test]
async fn connect_errors() {
    let server = Device::open(DeviceConfig::default()).expect("open the device");
    let listener = server
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = listener.local_addr();
    let rejecting = tokio::spawn(async move {
        let inc = listener.accept().await.unwrap();
        assert!(inc.peer_addr().ip().is_loopback());
        assert_eq!(inc.peer_ird_ord(), (Some(16), Some(16)));
        inc.reject(b"go away").await.unwrap();
    });
    let client = Device::open(DeviceConfig::default()).expect("open the device");
    let pd = client.alloc_pd().unwrap();
    let cq = client.create_cq(4);
    let err = client
        .connect(&pd, addr, QpConfig::new(&cq), b"hi")
        .await
        .unwrap_err();
    match &err {
        ConnectError::Rejected {
            private_data,
            refused,
        } => {
            assert_eq!(&private_data[..], b"go away");
            // Our reject answers with the CRC bit the Request asked for: nothing refused.
            assert_eq!(*refused, verbs::Refused::default());
        }
        other => panic!("{other:?}"),
    }
    rejecting.await.unwrap();

    // A protection domain of another device is refused before anything goes out.
    let foreign = server.alloc_pd().unwrap();
    let err = client
        .connect(&foreign, addr, QpConfig::new(&cq), b"")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ConnectError::Invalid(why) if why.contains("another Device")),
        "{err:?}"
    );
}

#[test]
fn reversed_ranges_are_out_of_bounds() {
    let host = Host::new(DeviceConfig::default());
    let mr = host.pd.alloc_mr(8, Access::LOCAL_WRITE).unwrap();
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = 5..3;
    assert!(matches!(
        mr.read(reversed.clone()),
        Err(MemError::OutOfBounds { offset: 5, .. })
    ));
    assert!(mr.try_local(reversed).is_err());
    assert_eq!(
        mr.read(8..).unwrap(),
        Vec::<u8>::new(),
        "empty at the end is fine"
    );
}

/// An address without its port (`192.0.2.20`, as a user types a host) says what form an
/// address takes; tokio's own words were only "invalid socket address".
#[tokio::test]
async fn an_address_without_its_port_says_what_an_address_looks_like() {
    let dev = Device::open(DeviceConfig::default().embedded()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(4);
    let e = dev
        .connect(&pd, "192.0.2.20", QpConfig::new(&cq), b"")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("IP:PORT") && e.contains("4791"), "{e}");
    let e = dev.listen("localhost").await.unwrap_err().to_string();
    assert!(e.contains("HOST:PORT"), "{e}");
}
