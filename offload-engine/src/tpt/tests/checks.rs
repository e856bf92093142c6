//! The ordered checks, addressing modes and plain accesses.

use super::*;

#[test]
fn invalid_index_fails_as_invalid_stag() {
    let (tpt, pd) = setup();
    let mr = tpt.register(pd, vec![0; 8], Base::ZeroBased, RW).unwrap();
    assert!(mr.index() != 0, "index 0 is never handed out");
    let mut qp = tpt.view(pd, QpId::new(1));
    for stag in [
        STag::from_u32(0),
        STag::from_u32(1),
        // An index this table does not hold (another table of the process may).
        STag::new(mr.index() + 1, 0),
        STag::new(0xFF_FFFF, 0),
    ] {
        assert_eq!(
            qp.write(stag, 0, &[1], Access::REMOTE_WRITE),
            Err(AccessError::InvalidStag),
            "{stag:?}"
        );
        assert!(tpt.info(stag).is_none());
    }
}

#[test]
fn stale_instance_after_reregistration() {
    let (tpt, pd) = setup();
    let old = tpt.register(pd, vec![0; 8], Base::ZeroBased, RW).unwrap();
    let storage = tpt.deregister(old).unwrap();
    assert_eq!(&storage.view(0, 8).unwrap()[..], &[0; 8]);
    let new = tpt.register(pd, vec![5; 8], Base::ZeroBased, RW).unwrap();
    assert_eq!(new.index(), old.index(), "the index is reused");
    assert_ne!(new.instance(), old.instance(), "with another instance");
    let mut qp = tpt.view(pd, QpId::new(1));
    assert_eq!(
        qp.write(old, 0, &[1], Access::REMOTE_WRITE),
        Err(AccessError::InvalidStag)
    );
    assert_eq!(
        qp.check(old, 0, 1, Access::REMOTE_READ),
        Err(AccessError::InvalidStag)
    );
    assert_eq!(tpt.write(pd, old, 0, &[1]), Err(AccessError::InvalidStag));
    assert!(tpt.info(old).is_none());
    assert_eq!(bytes(&tpt, pd, new), vec![5; 8]);
    assert_eq!(
        tpt.deregister(old).unwrap_err(),
        TptError::StaleStag {
            given: old,
            current: new
        }
    );
}

#[test]
fn wrong_pd_is_not_associated() {
    let (tpt, pd) = setup();
    let other = tpt.alloc_pd();
    let mr = tpt.register(pd, vec![0; 8], Base::ZeroBased, RW).unwrap();
    let mut qp = tpt.view(other, QpId::new(1));
    assert_eq!(
        qp.write(mr, 0, &[1], Access::REMOTE_WRITE),
        Err(AccessError::NotAssociated)
    );
    assert_eq!(
        qp.check(mr, 0, 1, Access::LOCAL_READ),
        Err(AccessError::NotAssociated)
    );
    assert_eq!(
        tpt.write(other, mr, 0, &[1]),
        Err(AccessError::NotAssociated)
    );
    assert_eq!(bytes(&tpt, pd, mr), vec![0; 8]);
}

#[test]
fn bounds_one_octet_past_either_end() {
    let (tpt, pd) = setup();
    let mr = tpt.register(pd, vec![0; 16], Base::Va(0x1000), RW).unwrap();
    let mut qp = tpt.view(pd, QpId::new(1));
    let w = Access::REMOTE_WRITE;
    assert_eq!(qp.write(mr, 0x1000, &[1; 16], w), Ok(()));
    assert_eq!(qp.write(mr, 0x100f, &[2], w), Ok(()));
    assert_eq!(qp.write(mr, 0x1000, &[3; 17], w), Err(AccessError::Bounds));
    assert_eq!(qp.write(mr, 0x1010, &[3], w), Err(AccessError::Bounds));
    assert_eq!(qp.write(mr, 0x0fff, &[3], w), Err(AccessError::Bounds));
    assert_eq!(qp.write(mr, 0x1001, &[3; 16], w), Err(AccessError::Bounds));
    assert_eq!(qp.check(mr, 0x1010, 0, Access::REMOTE_READ), Ok(()));
    let mut expect = vec![1; 16];
    expect[15] = 2;
    assert_eq!(bytes(&tpt, pd, mr), expect, "failed writes placed nothing");
}

#[test]
fn to_wrap_is_checked_before_bounds() {
    let (tpt, pd) = setup();
    let mr = tpt
        .register(pd, vec![0; 16], Base::Va(u64::MAX - 16), RW)
        .unwrap();
    let qp = tpt.view(pd, QpId::new(1));
    assert_eq!(qp.check(mr, u64::MAX - 16, 16, Access::REMOTE_READ), Ok(()));
    assert_eq!(
        qp.check(mr, u64::MAX - 3, 8, Access::REMOTE_READ),
        Err(AccessError::ToWrap)
    );
    // to + len == 2^64 does not wrap (DDP's one bounds check): past this region's end.
    assert_eq!(
        qp.check(mr, u64::MAX - 3, 4, Access::REMOTE_READ),
        Err(AccessError::Bounds)
    );
    let low = tpt.register(pd, vec![0; 16], Base::ZeroBased, RW).unwrap();
    assert_eq!(
        qp.check(low, u64::MAX, 2, Access::REMOTE_READ),
        Err(AccessError::ToWrap)
    );
    assert_eq!(
        qp.check(low, u64::MAX, 0, Access::REMOTE_READ),
        Err(AccessError::Bounds)
    );
    // The highest region ends exactly at 2^64: its last octet is TO 2^64 - 1.
    let top = tpt
        .register(pd, vec![0; 16], Base::Va(u64::MAX - 15), RW)
        .unwrap();
    assert_eq!(qp.check(top, u64::MAX, 1, Access::REMOTE_READ), Ok(()));
    assert_eq!(
        qp.check(top, u64::MAX - 15, 16, Access::REMOTE_READ),
        Ok(())
    );
    assert_eq!(
        qp.check(top, u64::MAX, 2, Access::REMOTE_READ),
        Err(AccessError::ToWrap)
    );
    // One past it cannot be registered.
    assert_eq!(
        tpt.register(pd, vec![0; 16], Base::Va(u64::MAX - 14), RW),
        Err(TptError::Bounds {
            start: u64::MAX - 14,
            len: 16
        })
    );
}

#[test]
fn missing_right_is_named() {
    let (tpt, pd) = setup();
    let mr = tpt
        .register(
            pd,
            vec![0; 16],
            Base::ZeroBased,
            Access::LOCAL_READ | Access::REMOTE_READ,
        )
        .unwrap();
    let mut qp = tpt.view(pd, QpId::new(1));
    let e = qp.write(mr, 0, &[1], Access::REMOTE_WRITE).unwrap_err();
    assert_eq!(e, rights(Access::REMOTE_WRITE));
    assert!(e.to_string().contains("REMOTE_WRITE"));
    assert_eq!(e.tagged_term(), TermCode::ACCESS_RIGHTS);
    assert_eq!(
        qp.atomic(mr, 0, &mut |v| v + 1),
        Err(rights(Access::REMOTE_ATOMIC))
    );
    assert_eq!(
        qp.check(mr, 0, 1, Access::LOCAL_WRITE),
        Err(rights(Access::LOCAL_WRITE))
    );
    assert_eq!(tpt.write(pd, mr, 0, &[1]), Err(rights(Access::LOCAL_WRITE)));
    assert_eq!(bytes(&tpt, pd, mr), vec![0; 16]);
}

#[test]
fn the_first_failing_check_decides() {
    let (tpt, pd) = setup();
    let other = tpt.alloc_pd();
    let mr = tpt
        .register(pd, vec![0; 16], Base::Va(0x1000), Access::LOCAL_READ)
        .unwrap();
    let mw = tpt.alloc_mw(pd, MwType::One).unwrap();
    let old = stale(mr);
    let mine = tpt.view(pd, QpId::new(1));
    let theirs = tpt.view(other, QpId::new(2));
    let all = Access::REMOTE_WRITE;
    // (a) valid beats everything: an unbound window.
    assert_eq!(
        theirs.check(stale(mw), u64::MAX, 9, all),
        Err(AccessError::InvalidStag)
    );
    // (c) domain beats instance, wrap, bounds and rights.
    assert_eq!(
        theirs.check(old, u64::MAX, 9, all),
        Err(AccessError::NotAssociated)
    );
    // (d) instance beats wrap, bounds and rights.
    assert_eq!(
        mine.check(old, u64::MAX, 9, all),
        Err(AccessError::InvalidStag)
    );
    // (e) wrap, then bounds, beat rights.
    assert_eq!(mine.check(mr, u64::MAX, 9, all), Err(AccessError::ToWrap));
    assert_eq!(mine.check(mr, 0x1008, 9, all), Err(AccessError::Bounds));
    // (f) rights last.
    assert_eq!(mine.check(mr, 0x1000, 16, all), Err(rights(all)));
    // (b) kind beats domain: a bound window used locally, from another domain.
    let parent = tpt
        .register(pd, vec![0; 16], Base::ZeroBased, Access::BIND | RW)
        .unwrap();
    let mw = tpt
        .bind_mw(mw, parent, 0, 16, Access::REMOTE_READ, false, None)
        .unwrap();
    assert_eq!(
        theirs.check(mw, 0, 1, Access::LOCAL_READ),
        Err(AccessError::InvalidStag)
    );
    assert_eq!(
        theirs.check(mw, 0, 1, Access::REMOTE_READ),
        Err(AccessError::NotAssociated)
    );
}

#[test]
fn zero_based_and_va_regions() {
    let (tpt, pd) = setup();
    let zb = tpt.register(pd, vec![0; 8], Base::ZeroBased, RW).unwrap();
    let va = tpt
        .register(pd, vec![0; 8], Base::Va(0x7f00_0000_1000), RW)
        .unwrap();
    let mut qp = tpt.view(pd, QpId::new(1));
    qp.write(zb, 2, &[1, 2], Access::REMOTE_WRITE).unwrap();
    qp.write(va, 0x7f00_0000_1002, &[3, 4], Access::REMOTE_WRITE)
        .unwrap();
    assert_eq!(
        qp.write(zb, 0x7f00_0000_1002, &[9], Access::REMOTE_WRITE),
        Err(AccessError::Bounds)
    );
    assert_eq!(
        qp.write(va, 2, &[9], Access::REMOTE_WRITE),
        Err(AccessError::Bounds)
    );
    let zi = tpt.info(zb).unwrap();
    assert!(zi.zero_based);
    assert_eq!((zi.to, zi.len), (0, 8));
    let vi = tpt.info(va).unwrap();
    assert!(!vi.zero_based);
    assert_eq!(vi.to, 0x7f00_0000_1000);
    assert_eq!(bytes(&tpt, pd, zb), [0, 0, 1, 2, 0, 0, 0, 0]);
    assert_eq!(
        &tpt.deregister(va).unwrap().view(0, 8).unwrap()[..],
        [0, 0, 3, 4, 0, 0, 0, 0]
    );
    let mut out = [0u8; 2];
    qp.read(zb, 2, &mut out, Access::REMOTE_READ).unwrap();
    assert_eq!(out, [1, 2]);
}

#[test]
fn local_access_through_memory_uses_local_rights() {
    let (tpt, pd) = setup();
    let mr = tpt
        .register(
            pd,
            vec![0; 8],
            Base::ZeroBased,
            Access::LOCAL_WRITE | Access::LOCAL_READ,
        )
        .unwrap();
    let mut qp = tpt.view(pd, QpId::new(1));
    let sge = Sge {
        stag: mr,
        to: 0,
        len: 8,
    };
    assert_eq!(
        qp.check(sge.stag, sge.to, sge.len, Access::LOCAL_READ),
        Ok(())
    );
    qp.write(mr, 4, &[7; 4], Access::LOCAL_WRITE).unwrap();
    assert_eq!(
        qp.write(mr, 4, &[7; 4], Access::REMOTE_WRITE),
        Err(rights(Access::REMOTE_WRITE))
    );
    assert_eq!(bytes(&tpt, pd, mr), [0, 0, 0, 0, 7, 7, 7, 7]);
}

#[test]
fn atomics_are_little_endian_read_modify_write() {
    let (tpt, pd) = setup();
    let mut data = vec![0; 16];
    data[8..].copy_from_slice(&41u64.to_le_bytes());
    let mr = tpt
        .register(
            pd,
            data,
            Base::Va(0x2000),
            Access::REMOTE_ATOMIC | Access::LOCAL_READ,
        )
        .unwrap();
    let mut qp = tpt.view(pd, QpId::new(1));
    assert_eq!(qp.atomic(mr, 0x2008, &mut |v| v + 1), Ok(41));
    assert_eq!(qp.atomic(mr, 0x2008, &mut |v| v * 2), Ok(42));
    assert_eq!(qp.atomic(mr, 0x2010, &mut |v| v), Err(AccessError::Bounds));
    assert_eq!(bytes(&tpt, pd, mr)[8..], 84u64.to_le_bytes());
}
