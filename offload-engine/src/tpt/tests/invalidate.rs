//! One-touch windows, fast registration, local and remote invalidation.

use super::*;

#[test]
fn one_touch_window_serves_one_message() {
    let (tpt, pd) = setup();
    let mr = tpt
        .register(pd, vec![0; 32], Base::ZeroBased, RW | Access::BIND)
        .unwrap();
    let mw = tpt.alloc_mw(pd, MwType::One).unwrap();
    let mw = tpt
        .bind_mw(mw, mr, 0, 32, Access::REMOTE_WRITE, true, None)
        .unwrap();
    let info = tpt.info(mw).unwrap();
    assert!(info.one_touch && !info.touched);
    let mut qp = tpt.view(pd, QpId::new(1));
    // A three-segment Write: the window stays valid until the last segment is placed.
    qp.write(mw, 0, &[1; 8], Access::REMOTE_WRITE).unwrap();
    qp.write(mw, 8, &[2; 8], Access::REMOTE_WRITE).unwrap();
    assert!(tpt.info(mw).unwrap().valid);
    qp.write(mw, 16, &[3; 8], Access::REMOTE_WRITE).unwrap();
    qp.message_placed(mw);
    let info = tpt.info(mw).unwrap();
    assert!(!info.valid && info.touched);
    assert_eq!(tpt.info(mr).unwrap().windows, 0);
    // A second message fails as an invalid STag, nothing placed.
    let e = qp.write(mw, 24, &[4; 8], Access::REMOTE_WRITE).unwrap_err();
    assert_eq!(e, AccessError::InvalidStag);
    assert_eq!(e.tagged_term(), TermCode::from_ddp(DdpError::InvalidStag));
    let mut expect = vec![0; 32];
    expect[..8].fill(1);
    expect[8..16].fill(2);
    expect[16..24].fill(3);
    assert_eq!(bytes(&tpt, pd, mr), expect);
    // Binding again re-arms it.
    let again = tpt
        .bind_mw(mw, mr, 0, 32, Access::REMOTE_WRITE, true, None)
        .unwrap();
    assert!(!tpt.info(again).unwrap().touched);
    assert_eq!(qp.write(again, 24, &[4; 8], Access::REMOTE_WRITE), Ok(()));
}

#[test]
fn message_placed_leaves_other_entries_alone() {
    let (tpt, pd) = setup();
    let mr = tpt
        .register(pd, vec![0; 32], Base::ZeroBased, RW | Access::BIND)
        .unwrap();
    let mw = tpt.alloc_mw(pd, MwType::One).unwrap();
    let mw = tpt
        .bind_mw(mw, mr, 0, 32, Access::REMOTE_WRITE, false, None)
        .unwrap();
    let ot = tpt.alloc_mw(pd, MwType::One).unwrap();
    let ot = tpt
        .bind_mw(ot, mr, 0, 32, Access::REMOTE_WRITE, true, None)
        .unwrap();
    let mut qp = tpt.view(pd, QpId::new(1));
    let mut foreign = tpt.view(tpt.alloc_pd(), QpId::new(2));
    for stag in [mw, mr, STag::new(77, 0)] {
        qp.message_placed(stag);
    }
    qp.message_placed(stale(ot)); // stale instance
    foreign.message_placed(ot); // not this domain's
    assert!(tpt.info(mw).unwrap().valid);
    assert!(tpt.info(mr).unwrap().valid);
    assert!(tpt.info(ot).unwrap().valid);
    qp.write(mw, 0, &[1], Access::REMOTE_WRITE).unwrap();
    qp.message_placed(mw);
    assert!(
        tpt.info(mw).unwrap().valid,
        "multiple-touch window stays valid"
    );
}

#[test]
fn fast_registration_and_local_invalidate() {
    let (tpt, pd) = setup();
    let fr = tpt.alloc_fast_reg(pd, 64).unwrap();
    let info = tpt.info(fr).unwrap();
    assert_eq!(info.kind, EntryKind::FastReg { max_len: 64 });
    assert!(!info.valid);
    let mut qp = tpt.view(pd, QpId::new(1));
    assert_eq!(
        qp.check(fr, 0, 1, Access::LOCAL_READ),
        Err(AccessError::InvalidStag)
    );

    let armed = FastReg {
        stag: fr.with_instance(0x21),
        to: 0x9000,
        len: 32,
        access: Access::LOCAL_READ | Access::REMOTE_WRITE,
    };
    assert_eq!(
        qp.fast_register(&FastReg { len: 65, ..armed }),
        Err(AccessError::Bounds)
    );
    assert_eq!(
        qp.fast_register(&FastReg {
            to: u64::MAX - 8,
            ..armed
        }),
        Err(AccessError::ToWrap)
    );
    let mut foreign = tpt.view(tpt.alloc_pd(), QpId::new(2));
    assert_eq!(
        foreign.fast_register(&armed),
        Err(AccessError::NotAssociated)
    );
    qp.fast_register(&armed).unwrap();
    assert_eq!(
        qp.fast_register(&armed),
        Err(AccessError::InvalidStag),
        "valid: invalidate first"
    );
    assert_eq!(
        qp.write(fr, 0x9000, &[1], Access::REMOTE_WRITE),
        Err(AccessError::InvalidStag)
    );
    qp.write(armed.stag, 0x9000, &[1; 32], Access::REMOTE_WRITE)
        .unwrap();
    assert_eq!(
        qp.write(armed.stag, 0x9001, &[1; 32], Access::REMOTE_WRITE),
        Err(AccessError::Bounds)
    );
    assert_eq!(
        qp.check(armed.stag, 0x9000, 1, Access::LOCAL_WRITE),
        Err(rights(Access::LOCAL_WRITE))
    );
    let info = tpt.info(armed.stag).unwrap();
    assert_eq!((info.valid, info.to, info.len), (true, 0x9000, 32));

    assert_eq!(
        qp.local_invalidate(fr),
        Err(AccessError::InvalidStag),
        "stale instance"
    );
    assert_eq!(
        foreign.local_invalidate(armed.stag),
        Err(AccessError::NotAssociated)
    );
    qp.local_invalidate(armed.stag).unwrap();
    qp.local_invalidate(armed.stag).unwrap(); // already invalid: accepted
    assert_eq!(
        qp.write(armed.stag, 0x9000, &[2], Access::REMOTE_WRITE),
        Err(AccessError::InvalidStag)
    );

    // Re-armed with a new instance and a shorter length over the same storage.
    let rearmed = FastReg {
        stag: fr.with_instance(0x22),
        to: 0,
        len: 4,
        access: Access::LOCAL_READ,
    };
    qp.fast_register(&rearmed).unwrap();
    assert_eq!(bytes(&tpt, pd, rearmed.stag), vec![1; 4]);
    assert_eq!(
        qp.write(armed.stag, 0, &[2], Access::REMOTE_WRITE),
        Err(AccessError::InvalidStag)
    );
    assert_eq!(
        qp.fast_register(&FastReg {
            stag: STag::new(50, 0),
            ..rearmed
        }),
        Err(AccessError::InvalidStag)
    );
}

#[test]
fn local_invalidate_refuses_other_kinds() {
    let (tpt, pd) = setup();
    let mr = tpt
        .register(pd, vec![0; 8], Base::ZeroBased, RW | Access::BIND)
        .unwrap();
    let t1 = tpt.alloc_mw(pd, MwType::One).unwrap();
    let t1 = tpt
        .bind_mw(t1, mr, 0, 8, Access::REMOTE_READ, false, None)
        .unwrap();
    let mut qp = tpt.view(pd, QpId::new(1));
    assert_eq!(qp.local_invalidate(mr), Err(AccessError::CannotInvalidate));
    assert_eq!(qp.local_invalidate(t1), Err(AccessError::CannotInvalidate));
    assert_eq!(
        qp.local_invalidate(STag::new(40, 0)),
        Err(AccessError::InvalidStag)
    );
    assert!(matches!(
        tpt.invalidate_local(mr),
        Err(TptError::WrongKind { .. })
    ));
    assert!(tpt.info(mr).unwrap().valid && tpt.info(t1).unwrap().valid);
    // Fast registration needs a region allocated for it.
    assert_eq!(
        qp.fast_register(&FastReg {
            stag: mr,
            to: 0,
            len: 8,
            access: Access::NONE
        }),
        Err(AccessError::InvalidStag)
    );
}

#[test]
fn invalidating_a_region_unbinds_its_windows() {
    let (tpt, pd) = setup();
    let fr = tpt.alloc_fast_reg(pd, 16).unwrap();
    let mut qp = tpt.view(pd, QpId::new(1));
    let stag = fr.with_instance(1);
    qp.fast_register(&FastReg {
        stag,
        to: 0,
        len: 16,
        access: RW | Access::BIND,
    })
    .unwrap();
    let mw = tpt.alloc_mw(pd, MwType::One).unwrap();
    let mw = tpt
        .bind_mw(mw, stag, 0, 16, Access::REMOTE_WRITE, false, None)
        .unwrap();
    let t2 = tpt.alloc_mw(pd, MwType::Two).unwrap().with_instance(9);
    qp.bind(&Bind {
        mw: t2,
        mr: stag,
        to: 0,
        len: 16,
        access: Access::REMOTE_WRITE,
        one_touch: false,
    })
    .unwrap();
    assert_eq!(tpt.info(stag).unwrap().windows, 2);
    tpt.invalidate_local(stag).unwrap();
    for w in [mw, t2] {
        assert_eq!(
            qp.write(w, 0, &[1], Access::REMOTE_WRITE),
            Err(AccessError::InvalidStag)
        );
        assert!(!tpt.info(w).unwrap().valid);
    }
    assert_eq!(tpt.info(stag).unwrap().windows, 0);
}

#[test]
fn remote_invalidate_allowed_cases() {
    let (tpt, pd) = setup();
    let mr = tpt
        .register(pd, vec![0; 16], Base::ZeroBased, RW | Access::BIND)
        .unwrap();
    let mut qp = tpt.view(pd, QpId::new(1));
    // A type 2 window bound to this queue pair.
    let t2 = tpt.alloc_mw(pd, MwType::Two).unwrap().with_instance(3);
    qp.bind(&Bind {
        mw: t2,
        mr,
        to: 0,
        len: 16,
        access: Access::REMOTE_WRITE,
        one_touch: false,
    })
    .unwrap();
    assert_eq!(qp.invalidate(t2), Ok(()));
    assert_eq!(
        qp.write(t2, 0, &[1], Access::REMOTE_WRITE),
        Err(AccessError::InvalidStag)
    );
    // A fast-registration region with a remote right.
    let fr = tpt.alloc_fast_reg(pd, 16).unwrap().with_instance(4);
    qp.fast_register(&FastReg {
        stag: fr,
        to: 0,
        len: 16,
        access: Access::REMOTE_READ,
    })
    .unwrap();
    assert_eq!(qp.invalidate(fr), Ok(()));
    assert_eq!(
        qp.check(fr, 0, 1, Access::REMOTE_READ),
        Err(AccessError::InvalidStag)
    );
    // Invalidating it again is a protocol error: it is no longer valid.
    let again = qp.invalidate(fr).unwrap_err();
    assert_eq!(again, AccessError::InvalidStag);
    assert_eq!(again.invalidate_term(), TermCode::OP_CANNOT_INVALIDATE);
}

#[test]
fn remote_invalidate_refused_cases() {
    let (tpt, pd) = setup();
    let mr = tpt
        .register(pd, vec![0; 16], Base::ZeroBased, RW | Access::BIND)
        .unwrap();
    let mut a = tpt.view(pd, QpId::new(1));
    let mut b = tpt.view(pd, QpId::new(2));
    let mut foreign = tpt.view(tpt.alloc_pd(), QpId::new(3));
    let t1 = tpt.alloc_mw(pd, MwType::One).unwrap();
    let t1 = tpt
        .bind_mw(t1, mr, 0, 16, Access::REMOTE_WRITE, false, None)
        .unwrap();
    let t2 = tpt.alloc_mw(pd, MwType::Two).unwrap().with_instance(1);
    a.bind(&Bind {
        mw: t2,
        mr,
        to: 0,
        len: 16,
        access: Access::REMOTE_WRITE,
        one_touch: false,
    })
    .unwrap();
    let local_only = tpt.alloc_fast_reg(pd, 16).unwrap().with_instance(1);
    a.fast_register(&FastReg {
        stag: local_only,
        to: 0,
        len: 16,
        access: Access::LOCAL_READ | Access::LOCAL_WRITE,
    })
    .unwrap();

    let op = TermCode::OP_CANNOT_INVALIDATE;
    let prot = TermCode::PROT_CANNOT_INVALIDATE;
    let remote = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
    let views = [&mut a, &mut b, &mut foreign];
    let cases = [
        (0, mr, AccessError::CannotInvalidate, op),
        (0, t1, AccessError::CannotInvalidate, op),
        (1, t2, AccessError::NotAssociated, prot),
        (2, mr, AccessError::NotAssociated, prot),
        (0, local_only, rights(remote), prot),
        (0, t2.with_instance(2), AccessError::InvalidStag, op),
        (0, STag::new(60, 0), AccessError::InvalidStag, op),
    ];
    for (view, stag, err, term) in cases {
        let e = views[view].invalidate(stag).unwrap_err();
        assert_eq!(e, err, "{stag:?}");
        assert_eq!(e.invalidate_term(), term, "{stag:?}");
    }
    // Every refused entry is still usable.
    assert!(a.check(mr, 0, 16, Access::REMOTE_WRITE).is_ok());
    assert!(a.check(t1, 0, 16, Access::REMOTE_WRITE).is_ok());
    assert!(a.check(t2, 0, 16, Access::REMOTE_WRITE).is_ok());
    assert!(a.check(local_only, 0, 16, Access::LOCAL_READ).is_ok());
}
