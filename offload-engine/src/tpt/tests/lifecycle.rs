//! Protection domains, deregistration, shared receive queues and concurrency.

use super::*;

#[test]
fn dealloc_pd_refused_while_in_use() {
    let tpt = Tpt::new();
    let pd = tpt.alloc_pd();
    let mr = tpt.register(pd, vec![0; 8], Base::ZeroBased, RW).unwrap();
    let mw = tpt.alloc_mw(pd, MwType::Two).unwrap();
    assert_eq!(
        tpt.dealloc_pd(pd),
        Err(TptError::InUse {
            what: "regions or windows",
            count: 2
        })
    );
    tpt.deregister(mr).unwrap();
    assert!(matches!(
        tpt.dealloc_pd(pd),
        Err(TptError::InUse { count: 1, .. })
    ));
    assert!(matches!(
        tpt.dealloc_mw(stale(mw)),
        Err(TptError::StaleStag { .. })
    ));
    tpt.dealloc_mw(mw).unwrap();
    assert_eq!(tpt.dealloc_pd(pd), Ok(()));
    assert_eq!(tpt.dealloc_pd(pd), Err(TptError::NoSuchPd(pd)));
    assert_eq!(
        tpt.register(pd, vec![0; 8], Base::ZeroBased, RW),
        Err(TptError::NoSuchPd(pd))
    );
    assert_eq!(tpt.alloc_mw(pd, MwType::One), Err(TptError::NoSuchPd(pd)));
    assert_eq!(tpt.alloc_fast_reg(pd, 8), Err(TptError::NoSuchPd(pd)));
}

#[test]
fn release_pd_removes_everything_of_the_domain_and_nothing_else() {
    let tpt = Tpt::new();
    let (pd, other) = (tpt.alloc_pd(), tpt.alloc_pd());
    let mr = tpt
        .register(pd, vec![0; 64], Base::ZeroBased, RW | Access::BIND)
        .unwrap();
    let mw = tpt.alloc_mw(pd, MwType::One).unwrap();
    // Bound, so its STag moved to another instance than the one it was allocated with.
    let bound = tpt.bind_mw(mw, mr, 0, 8, RW, false, None).unwrap();
    assert_ne!(bound, mw);
    tpt.alloc_fast_reg(pd, 64).unwrap();
    let keep = tpt
        .register(other, vec![7; 8], Base::ZeroBased, RW)
        .unwrap();
    assert_eq!(tpt.release_pd(pd), 3);
    assert_eq!(tpt.len(), 1);
    assert_eq!(
        tpt.dealloc_pd(pd),
        Err(TptError::NoSuchPd(pd)),
        "the domain is gone"
    );
    assert!(tpt.info(mr).is_none() && tpt.info(bound).is_none());
    assert_eq!(bytes(&tpt, other, keep), vec![7; 8]);
}

#[test]
fn table_exhaustion() {
    let tpt = Tpt::with_max_entries(2);
    let pd = tpt.alloc_pd();
    let a = tpt.register(pd, vec![], Base::ZeroBased, RW).unwrap();
    tpt.alloc_mw(pd, MwType::One).unwrap();
    assert_eq!(tpt.alloc_mw(pd, MwType::One), Err(TptError::Exhausted));
    tpt.deregister(a).unwrap();
    assert_eq!(tpt.len(), 1);
    let b = tpt.alloc_fast_reg(pd, 4).unwrap();
    assert!(
        b != a && tpt.info(a).is_none(),
        "the freed STag never names the new entry"
    );
}

#[test]
fn deregistration_waits_for_work_in_flight() {
    let (tpt, pd) = setup();
    let mr = tpt.register(pd, vec![0; 8], Base::ZeroBased, RW).unwrap();
    let (checked_tx, checked_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let worker = {
        let tpt = Arc::clone(&tpt);
        thread::spawn(move || {
            // Past the checks: the placement holds its clone of the storage.
            let (storage, off) = tpt
                .resolve(
                    Requester {
                        pd,
                        qp: Some(QpId::new(1)),
                    },
                    mr,
                    4,
                    4,
                    Access::REMOTE_WRITE,
                )
                .unwrap();
            checked_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            storage.write_at(off, &[9; 4]).unwrap();
        })
    };
    checked_rx.recv().unwrap();
    let storage = tpt.deregister(mr).unwrap();
    // The entry is gone at once...
    let mut qp = tpt.view(pd, QpId::new(2));
    assert_eq!(
        qp.write(mr, 0, &[1], Access::REMOTE_WRITE),
        Err(AccessError::InvalidStag)
    );
    // ...but the octets are not the caller's until the work in flight is done.
    assert_eq!(Arc::strong_count(&storage), 2);
    go_tx.send(()).unwrap();
    worker.join().unwrap();
    assert_eq!(Arc::strong_count(&storage), 1);
    assert_eq!(&storage.view(0, 8).unwrap()[..], [0, 0, 0, 0, 9, 9, 9, 9]);
}

#[test]
fn tpt_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tpt>();
    assert_send_sync::<QpMemory>();
    assert_send_sync::<Region>();
}

#[test]
fn threads_place_into_distinct_ranges_through_their_own_views() {
    const THREADS: usize = 4;
    const CHUNK: usize = 4096;
    let (tpt, pd) = setup();
    let mr = tpt
        .register(
            pd,
            vec![0; THREADS * CHUNK],
            Base::Va(0x10_0000),
            RW | Access::REMOTE_ATOMIC,
        )
        .unwrap();
    let counter = tpt
        .register(pd, vec![0; 8], Base::ZeroBased, RW | Access::REMOTE_ATOMIC)
        .unwrap();
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let mut view = tpt.view(pd, QpId::new(i as u32 + 1));
            thread::spawn(move || {
                let base = 0x10_0000 + (i * CHUNK) as u64;
                for round in 0..64u8 {
                    // Many small segments, like a stream placing a message.
                    for seg in 0..(CHUNK / 256) {
                        let fill = [round.wrapping_add(i as u8); 256];
                        view.write(mr, base + (seg * 256) as u64, &fill, Access::REMOTE_WRITE)
                            .unwrap();
                    }
                    view.atomic(counter, 0, &mut |v| v + 1).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let data = bytes(&tpt, pd, mr);
    for i in 0..THREADS {
        let want = 63u8.wrapping_add(i as u8);
        assert!(
            data[i * CHUNK..(i + 1) * CHUNK].iter().all(|&b| b == want),
            "range {i}"
        );
    }
    assert_eq!(
        bytes(&tpt, pd, counter),
        (THREADS as u64 * 64).to_le_bytes()
    );
}
