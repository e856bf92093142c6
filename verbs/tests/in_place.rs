//! Memory the application owns, in place: registration without a copy, the peer's data
//! read where it landed, a buffer filled in place and sent from there, and memory returned
//! to the system on deregistration.

mod common;

use bytes::{Bytes, BytesMut};
use common::{ALL, pair, pattern};
use verbs::{Access, Payload, SendFlags, SendOp, SendWr, WcStatus};

fn rss_kib() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4
}

#[tokio::test]
async fn registering_application_memory_does_not_copy_it() {
    let (c, _s) = pair().await;
    let mut v = pattern(4096, 3);
    let addr = v.as_mut_ptr() as usize;
    let mr = c.pd().register(v, ALL).unwrap();
    assert_eq!(mr.view(..).unwrap().as_ptr() as usize, addr, "Vec<u8>");
    assert!(!mr.is_shared_memory());

    let mut b = vec![1u8; 100].into_boxed_slice();
    let addr = b.as_mut_ptr() as usize;
    let mr = c.pd().register(b, ALL).unwrap();
    assert_eq!(mr.view(..).unwrap().as_ptr() as usize, addr, "Box<[u8]>");

    let mut m = BytesMut::zeroed(256);
    let addr = m.as_mut_ptr() as usize;
    let mr = c.pd().register_va(m, 0x7000, ALL).unwrap();
    assert_eq!(mr.view(..).unwrap().as_ptr() as usize, addr, "BytesMut");
    assert_eq!((mr.to(), mr.len()), (0x7000, 256));

    /// An aligned allocation of the application's own.
    #[repr(C, align(4096))]
    struct Page([u8; 4096]);
    impl AsMut<[u8]> for Page {
        fn as_mut(&mut self) -> &mut [u8] {
            &mut self.0
        }
    }
    let mr = c.pd().register(Page([0; 4096]), ALL).unwrap();
    assert_eq!(mr.view(..).unwrap().as_ptr() as usize % 4096, 0);

    let mr = c.pd().alloc_mr(10_000, ALL).unwrap();
    assert!(mr.is_shared_memory());
    assert_eq!(
        mr.view(..1).unwrap().as_ptr() as usize % 4096,
        0,
        "page aligned"
    );
}

#[tokio::test]
async fn the_peer_writes_into_memory_the_application_handed_over() {
    let (c, s) = pair().await;
    let target = s.pd().register(vec![0u8; 8192], ALL).unwrap();
    c.qp.write(Bytes::from(pattern(8192, 9)), target.remote())
        .await
        .unwrap();
    // A Read behind the Write proves it was placed.
    let sink = c.pd().alloc_mr(1, Access::LOCAL_WRITE).unwrap();
    c.qp.read(target.remote().slice(0, 1), &sink).await.unwrap();
    assert_eq!(&target.view(..).unwrap()[..], &pattern(8192, 9)[..]);
}

#[tokio::test]
async fn a_buffer_filled_in_place_is_sent_from_there() {
    // One FPDU on loopback, large enough to be sent in place.
    const LEN: usize = 10_000;
    let (c, s) = pair().await;
    let inbox = s.pd().alloc_mr(LEN, ALL).unwrap();
    s.qp.post_recv(verbs::RecvWr {
        wr_id: 1,
        sgl: [inbox.local(..)].into(),
    })
    .unwrap();
    let src = c.pd().alloc_mr(LEN, ALL).unwrap();
    src.view_mut(..).unwrap().copy_from_slice(&pattern(LEN, 4));
    c.qp.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Send {
            data: Payload::Sgl([src.local(..)].into()),
            invalidate: None,
            immediate: None,
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    let sent = c.cq().next().await.unwrap();
    assert_eq!((sent.wc.wr_id, sent.wc.status), (2, WcStatus::Success));
    let got = s.cq().next().await.unwrap();
    assert_eq!((got.wc.wr_id, got.wc.byte_len), (1, LEN as u32));
    assert_eq!(&inbox.view(..).unwrap()[..], &pattern(LEN, 4)[..]);
    // The counters saw it: FPDUs out of the client, every octet placed at the server.
    assert!(c.qp.stats().traffic.fpdus_sent >= 1, "{:?}", c.qp.stats());
    assert_eq!(
        s.qp.stats().traffic.bytes_placed,
        LEN as u64,
        "{:?}",
        s.qp.stats()
    );
    assert!(s.qp.stats().traffic.fpdus_received >= 1);
    // Sent from the region itself: no copy in between.
    assert_eq!(
        c.qp.stats().traffic.bytes_sent_in_place,
        LEN as u64,
        "{:?}",
        c.qp.stats()
    );
}

#[tokio::test]
async fn out_of_range_views_fail_with_the_region_named() {
    let (c, _s) = pair().await;
    let mr = c.pd().alloc_mr(64, ALL).unwrap();
    let err = mr.view(60..70).unwrap_err();
    assert!(err.to_string().contains("64"), "{err}");
    assert!(mr.view_mut(..=64).is_err());
    assert_eq!(mr.view(64..).unwrap().len(), 0);
}

/// Regions of shared memory go back to the system when they are deregistered (or
/// dropped): the RSS returns near where it was. 4 MiB regions, as `iwarpd` gives each
/// connection: heap allocations of that size are kept by the allocator once freed (its
/// mmap threshold rises), which held 5.6 GB in `iwarpd` after 1,000 connections.
#[tokio::test]
async fn deregistered_memory_returns_to_the_system() {
    const LEN: usize = 4 << 20;
    const REGIONS: usize = 32;
    let (c, s) = pair().await;
    let before = rss_kib();
    for _ in 0..8 {
        let regions: Vec<_> = (0..REGIONS)
            .map(|i| {
                let mr = s.pd().alloc_mr(LEN, ALL).unwrap();
                mr.view_mut(..).unwrap().fill(i as u8);
                mr
            })
            .collect();
        for mr in &regions {
            c.qp.write(Bytes::from(pattern(4096, 1)), mr.remote())
                .await
                .unwrap();
        }
        for (i, mr) in regions.into_iter().enumerate() {
            if i % 2 == 0 {
                mr.deregister().await.unwrap();
            }
        }
    }
    let after = rss_kib();
    assert!(
        after < before + ((REGIONS * LEN) >> 10) / 2,
        "1 GiB registered and released in 4 MiB regions, RSS {before} -> {after} KiB"
    );
}
