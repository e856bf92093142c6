//! Type 1 and type 2 memory windows.

use super::*;

#[test]
fn type1_window_binds_inside_its_region() {
    let (tpt, pd) = setup();
    let mr = tpt
        .register(pd, vec![0; 32], Base::Va(0x1000), RW | Access::BIND)
        .unwrap();
    let mw = tpt.alloc_mw(pd, MwType::One).unwrap();
    let info = tpt.info(mw).unwrap();
    assert_eq!(info.kind, EntryKind::Window(MwType::One));
    assert!(!info.valid);
    let bound = tpt
        .bind_mw(mw, mr, 0x1008, 8, Access::REMOTE_WRITE, false, None)
        .unwrap();
    assert_eq!(bound, mw.with_instance(mw.instance().wrapping_add(1)));
    let info = tpt.info(bound).unwrap();
    assert!(info.valid);
    assert_eq!((info.to, info.len, info.parent), (0x1008, 8, Some(mr)));
    assert_eq!(tpt.info(mr).unwrap().windows, 1);

    // Any queue pair of the domain may use a type 1 window.
    for qp in [1, 2] {
        let mut view = tpt.view(pd, QpId::new(qp));
        view.write(bound, 0x1008, &[qp as u8; 8], Access::REMOTE_WRITE)
            .unwrap();
    }
    let mut view = tpt.view(pd, QpId::new(1));
    assert_eq!(
        view.write(mw, 0x1008, &[9], Access::REMOTE_WRITE),
        Err(AccessError::InvalidStag)
    );
    assert_eq!(
        view.write(bound, 0x1009, &[9; 8], Access::REMOTE_WRITE),
        Err(AccessError::Bounds)
    );
    assert_eq!(
        view.write(bound, 0x1007, &[9], Access::REMOTE_WRITE),
        Err(AccessError::Bounds)
    );
    assert_eq!(
        view.check(bound, 0x1008, 8, Access::REMOTE_READ),
        Err(rights(Access::REMOTE_READ))
    );
    assert_eq!(
        view.check(bound, 0x1008, 8, Access::LOCAL_WRITE),
        Err(AccessError::InvalidStag)
    );
    assert_eq!(
        tpt.write(pd, bound, 0x1008, &[9]),
        Err(AccessError::InvalidStag)
    );
    let mut expect = vec![0; 32];
    expect[8..16].fill(2);
    assert_eq!(bytes(&tpt, pd, mr), expect);

    // Unbind.
    tpt.invalidate_local(bound).unwrap();
    assert_eq!(
        view.write(bound, 0x1008, &[9], Access::REMOTE_WRITE),
        Err(AccessError::InvalidStag)
    );
    assert_eq!(tpt.info(mr).unwrap().windows, 0);
    assert!(!tpt.info(bound).unwrap().valid);
}

/// A region with local rights only (Local Write and Bind, as rdma-core programs register
/// one for windows) is written by the peer through a window, never by its own STag.
#[test]
fn a_window_exposes_a_region_the_peer_cannot_reach_by_itself() {
    let (tpt, pd) = setup();
    let local = Access::LOCAL_READ | Access::LOCAL_WRITE | Access::BIND;
    let mr = tpt
        .register(pd, vec![0; 32], Base::Va(0x1000), local)
        .unwrap();
    let mw = tpt.alloc_mw(pd, MwType::One).unwrap();
    let all = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
    let bound = tpt.bind_mw(mw, mr, 0x1000, 16, all, false, None).unwrap();
    let mut view = tpt.view(pd, QpId::new(1));
    view.write(bound, 0x1000, &[7; 16], Access::REMOTE_WRITE)
        .unwrap();
    assert_eq!(
        view.write(mr, 0x1000, &[9], Access::REMOTE_WRITE),
        Err(rights(Access::REMOTE_WRITE))
    );
    assert_eq!(
        &bytes(&tpt, pd, mr)[..17],
        &[[7; 16].as_slice(), &[0]].concat()[..]
    );
}

#[test]
fn type1_bind_refusals() {
    let (tpt, pd) = setup();
    let other = tpt.alloc_pd();
    let mr = tpt
        .register(
            pd,
            vec![0; 32],
            Base::Va(0x1000),
            Access::REMOTE_READ | Access::BIND,
        )
        .unwrap();
    let no_bind = tpt.register(pd, vec![0; 32], Base::ZeroBased, RW).unwrap();
    let mw = tpt.alloc_mw(pd, MwType::One).unwrap();
    let foreign = tpt.alloc_mw(other, MwType::One).unwrap();
    let t2 = tpt.alloc_mw(pd, MwType::Two).unwrap();
    let rr = Access::REMOTE_READ;
    assert_eq!(
        tpt.bind_mw(mw, no_bind, 0, 8, rr, false, None),
        Err(TptError::Rights {
            missing: Access::BIND
        })
    );
    // A window the peer may write needs Local Write on the region (RDMAC and IB verbs);
    // the region's own remote rights do not limit it.
    for writes in [Access::REMOTE_WRITE, Access::REMOTE_ATOMIC] {
        assert_eq!(
            tpt.bind_mw(mw, mr, 0x1000, 8, rr | writes, false, None),
            Err(TptError::Rights {
                missing: Access::LOCAL_WRITE
            })
        );
    }
    assert_eq!(
        tpt.bind_mw(mw, mr, 0x1019, 8, rr, false, None),
        Err(TptError::Bounds {
            start: 0x1019,
            len: 8
        })
    );
    assert_eq!(
        tpt.bind_mw(foreign, mr, 0x1000, 8, rr, false, None),
        Err(TptError::PdMismatch {
            expected: other,
            found: pd
        })
    );
    assert!(matches!(
        tpt.bind_mw(t2, mr, 0x1000, 8, rr, false, None),
        Err(TptError::WrongKind { .. })
    ));
    assert!(matches!(
        tpt.bind_mw(mr, mr, 0x1000, 8, rr, false, None),
        Err(TptError::WrongKind { .. })
    ));
    assert!(matches!(
        tpt.bind_mw(mw, stale(mr), 0x1000, 8, rr, false, None),
        Err(TptError::StaleStag { .. })
    ));
    assert!(matches!(
        tpt.bind_mw(stale(mw), mr, 0x1000, 8, rr, false, None),
        Err(TptError::StaleStag { .. })
    ));
    // Nothing changed.
    assert!(!tpt.info(mw).unwrap().valid);
    assert_eq!(tpt.info(mr).unwrap().windows, 0);
}

#[test]
fn type1_rebind_moves_the_window() {
    let (tpt, pd) = setup();
    let a = tpt
        .register(pd, vec![0; 16], Base::ZeroBased, RW | Access::BIND)
        .unwrap();
    let b = tpt
        .register(pd, vec![0; 16], Base::ZeroBased, RW | Access::BIND)
        .unwrap();
    let mw = tpt.alloc_mw(pd, MwType::One).unwrap();
    let first = tpt
        .bind_mw(mw, a, 0, 16, Access::REMOTE_WRITE, false, Some(0x40))
        .unwrap();
    assert_eq!(first.instance(), 0x40);
    let second = tpt
        .bind_mw(first, b, 4, 4, Access::REMOTE_WRITE, false, None)
        .unwrap();
    assert_eq!(second.instance(), 0x41);
    assert_eq!(tpt.info(a).unwrap().windows, 0);
    assert_eq!(tpt.info(b).unwrap().windows, 1);
    let mut qp = tpt.view(pd, QpId::new(1));
    assert_eq!(
        qp.write(first, 0, &[1], Access::REMOTE_WRITE),
        Err(AccessError::InvalidStag)
    );
    qp.write(second, 4, &[1; 4], Access::REMOTE_WRITE).unwrap();
    assert_eq!(bytes(&tpt, pd, a), vec![0; 16]);
    assert_eq!(bytes(&tpt, pd, b)[4..8], [1; 4]);
}

#[test]
fn region_with_bound_windows_cannot_be_deregistered() {
    let (tpt, pd) = setup();
    let mr = tpt
        .register(pd, vec![0; 16], Base::ZeroBased, RW | Access::BIND)
        .unwrap();
    let mw = tpt.alloc_mw(pd, MwType::One).unwrap();
    let mw = tpt
        .bind_mw(mw, mr, 0, 8, Access::REMOTE_READ, false, None)
        .unwrap();
    assert_eq!(
        tpt.deregister(mr).unwrap_err(),
        TptError::InUse {
            what: "bound windows",
            count: 1
        }
    );
    assert!(matches!(
        tpt.deregister(mw),
        Err(TptError::WrongKind { .. })
    ));
    tpt.dealloc_mw(mw).unwrap();
    assert_eq!(tpt.info(mr).unwrap().windows, 0);
    assert!(tpt.deregister(mr).is_ok());
    assert!(tpt.is_empty());
}

#[test]
fn type2_window_is_tied_to_its_queue_pair() {
    let (tpt, pd) = setup();
    let mr = tpt
        .register(pd, vec![0; 32], Base::Va(0x1000), RW | Access::BIND)
        .unwrap();
    let mw = tpt.alloc_mw(pd, MwType::Two).unwrap();
    let mut a = tpt.view(pd, QpId::new(1));
    let mut b = tpt.view(pd, QpId::new(2));
    let bind = Bind {
        mw: mw.with_instance(mw.instance().wrapping_add(0x10)),
        mr,
        to: 0x1010,
        len: 16,
        access: Access::REMOTE_WRITE,
        one_touch: false,
    };
    a.bind(&bind).unwrap();
    let info = tpt.info(bind.mw).unwrap();
    assert_eq!((info.valid, info.bound_qp), (true, Some(QpId::new(1))));
    assert_eq!(
        a.write(bind.mw, 0x1010, &[1; 16], Access::REMOTE_WRITE),
        Ok(())
    );
    assert_eq!(
        a.write(mw, 0x1010, &[2], Access::REMOTE_WRITE),
        Err(AccessError::InvalidStag)
    );
    assert_eq!(
        b.write(bind.mw, 0x1010, &[2], Access::REMOTE_WRITE),
        Err(AccessError::NotAssociated)
    );
    assert_eq!(
        AccessError::NotAssociated.tagged_term(),
        TermCode::from_ddp(DdpError::StagNotAssociated)
    );
    // A bound type 2 window must be invalidated before it is bound again.
    assert_eq!(a.bind(&bind), Err(AccessError::InvalidStag));
    assert_eq!(b.local_invalidate(bind.mw), Err(AccessError::NotAssociated));
    assert!(matches!(
        tpt.bind_mw(bind.mw, mr, 0x1000, 8, Access::REMOTE_WRITE, false, None),
        Err(TptError::WrongKind { .. })
    ));
    a.local_invalidate(bind.mw).unwrap();
    assert_eq!(
        a.write(bind.mw, 0x1010, &[3], Access::REMOTE_WRITE),
        Err(AccessError::InvalidStag)
    );
    // Once unbound, another queue pair may bind it.
    b.bind(&Bind {
        mw: mw.with_instance(0x11),
        ..bind
    })
    .unwrap();
    assert_eq!(
        b.write(mw.with_instance(0x11), 0x101f, &[4], Access::REMOTE_WRITE),
        Ok(())
    );
    let mut expect = vec![0; 32];
    expect[16..32].fill(1);
    expect[31] = 4;
    assert_eq!(bytes(&tpt, pd, mr), expect);
    assert_eq!(tpt.release_qp(QpId::new(2)), 1);
    assert!(!tpt.info(mw.with_instance(0x11)).unwrap().valid);
}

#[test]
fn type2_bind_refusals() {
    let (tpt, pd) = setup();
    let other = tpt.alloc_pd();
    let mr = tpt
        .register(
            pd,
            vec![0; 32],
            Base::Va(0x1000),
            Access::REMOTE_READ | Access::BIND,
        )
        .unwrap();
    let no_bind = tpt.register(pd, vec![0; 32], Base::ZeroBased, RW).unwrap();
    let foreign_mr = tpt
        .register(other, vec![0; 32], Base::ZeroBased, RW | Access::BIND)
        .unwrap();
    let mw = tpt.alloc_mw(pd, MwType::Two).unwrap();
    let t1 = tpt.alloc_mw(pd, MwType::One).unwrap();
    let mut qp = tpt.view(pd, QpId::new(1));
    let ok = Bind {
        mw: mw.with_instance(1),
        mr,
        to: 0x1000,
        len: 32,
        access: Access::REMOTE_READ,
        one_touch: false,
    };
    let cases = [
        (
            Bind {
                mr: no_bind,
                to: 0,
                ..ok
            },
            rights(Access::BIND),
        ),
        (
            Bind {
                access: Access::REMOTE_READ | Access::REMOTE_WRITE,
                ..ok
            },
            rights(Access::LOCAL_WRITE),
        ),
        (Bind { to: 0x1001, ..ok }, AccessError::Bounds),
        (
            Bind {
                to: u64::MAX - 1,
                ..ok
            },
            AccessError::ToWrap,
        ),
        (
            Bind {
                mr: mr.with_instance(5),
                ..ok
            },
            AccessError::InvalidStag,
        ),
        (
            Bind {
                mr: foreign_mr,
                to: 0,
                ..ok
            },
            AccessError::NotAssociated,
        ),
        (Bind { mr: t1, ..ok }, AccessError::InvalidStag),
        (Bind { mw: t1, ..ok }, AccessError::InvalidStag),
        (Bind { mw: mr, ..ok }, AccessError::InvalidStag),
        (
            Bind {
                mw: STag::new(99, 0),
                ..ok
            },
            AccessError::InvalidStag,
        ),
    ];
    for (bind, err) in cases {
        assert_eq!(qp.bind(&bind), Err(err), "{bind:?}");
    }
    let mut foreign = tpt.view(other, QpId::new(2));
    assert_eq!(
        foreign.bind(&Bind {
            mr: foreign_mr,
            to: 0,
            ..ok
        }),
        Err(AccessError::NotAssociated)
    );
    assert!(!tpt.info(mw).unwrap().valid, "failed binds changed nothing");
    assert_eq!(qp.bind(&ok), Ok(()));
}
