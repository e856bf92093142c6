//! A local client's memory requests: protection domains (each with its push region),
//! regions (the client's memory files, mapped here), fast-registration regions and memory
//! windows. Every STag a request names must be one
//! of the client's own (by index: fast registration and binds move instances; the table
//! checks the instance), and every domain one of its own.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use ipc::control::{Reply, Request, error};
use ipc::push::PushRegion;
use rdmap::{Access, STag};

use super::admit;
use super::replies::{err, not_found};
use super::session::{ClientPd, Session};
use super::usage::Usage;
use offload_engine::push::PdPush;
use offload_engine::tpt::{Base, MwType, PdId, TptError};
use shm::Region;

/// `AllocPd`: a protection domain, with its push region (whose memory file goes with the
/// reply).
pub(super) fn alloc_pd(s: &Session) -> (Reply, Vec<OwnedFd>) {
    let need = Usage {
        files: 1,
        ..Usage::default()
    };
    if let Some(r) = admit::check(s, need) {
        return (r, Vec::new());
    }
    // The domain's push region: its own memory file, handed to this client only.
    let created = PushRegion::create(s.device.limits.push.slots)
        .and_then(|r| Ok((r.fd().try_clone_to_owned()?, r)));
    let (fd, region) = match created {
        Ok(got) => got,
        Err(e) => {
            let r = err(error::REFUSED, format!("no push region: {e}"));
            return (r, Vec::new());
        }
    };
    let push_slots = region.slots();
    let engine = s.engine.alloc_pd();
    let pd = {
        let mut o = s.objs();
        let pd = o.id();
        let push = Arc::new(PdPush::new(region));
        o.pds.insert(pd, ClientPd { engine, push });
        pd
    };
    (Reply::Pd { pd, push_slots }, vec![fd])
}

/// `DeallocPd`: frees the client's domain `pd`; if the memory table refuses, the client
/// keeps it.
pub(super) fn dealloc_pd(s: &Session, pd: u32) -> Reply {
    let gone = s.objs().pds.remove(&pd);
    match gone {
        None => not_found("protection domain", pd),
        Some(gone) => match s.engine.tpt().dealloc_pd(gone.engine) {
            Ok(()) => Reply::Done,
            Err(e) => {
                s.objs().pds.insert(pd, gone);
                err(error::REFUSED, e.to_string())
            }
        },
    }
}

/// Waits the engine's registration delay, if it has one, before a registration at a
/// reserved STag.
pub(super) async fn registration_delay(s: &Session) {
    // The engine's registration delay stands for a slower control path here too.
    let delay = s.engine.config().registration_delay;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

/// Answers a memory request (`fd`: the memory file that came with it, if any).
pub(super) fn handle(s: &Session, req: Request, fd: Option<OwnedFd>) -> Reply {
    let tpt = s.engine.tpt();
    let refused = |e: TptError| err(error::REFUSED, e.to_string());
    match req {
        Request::RegMr {
            pd,
            access,
            va,
            len,
            offset,
        } => {
            let access = Access::from_bits_truncate(access as u8);
            let base = va.map_or(Base::ZeroBased, Base::Va);
            region(s, pd, (len, offset), fd, |pd, storage| {
                tpt.register_region(pd, storage, base, access)
            })
        }
        Request::ReserveStag => {
            if let Some(r) = admit::check(s, entry()) {
                return r;
            }
            match tpt.reserve_pending() {
                Ok(stag) => {
                    let mut o = s.objs();
                    o.mrs.insert(stag.index(), 0);
                    o.reserved.insert(stag.to_u32());
                    Reply::Id(stag.to_u32())
                }
                Err(e) => refused(e),
            }
        }
        Request::RegMrAt {
            stag,
            pd,
            access,
            va,
            len,
            offset,
        } => register_reserved(s, stag, pd, (access, va, (len, offset)), fd),
        Request::AllocFastRegMr { pd, len } => region(s, pd, (len, 0), fd, |pd, storage| {
            tpt.alloc_fast_reg_region(pd, storage)
        }),
        Request::AllocMw { pd, kind } => {
            let Some(pd) = s.objs().pd(pd) else {
                return not_found("protection domain", pd);
            };
            if let Some(r) = admit::check(s, entry()) {
                return r;
            }
            let kind = if kind == 1 { MwType::One } else { MwType::Two };
            match tpt.alloc_mw(pd, kind) {
                Ok(stag) => {
                    s.objs().mws.insert(stag.index());
                    Reply::Id(stag.to_u32())
                }
                Err(e) => refused(e),
            }
        }
        Request::DeallocMw { stag } => {
            let stag = STag::from_u32(stag);
            if !s.objs().mws.remove(&stag.index()) {
                return not_found("memory window", stag.to_u32());
            }
            match tpt.dealloc_mw(stag) {
                Ok(()) => Reply::Done,
                Err(e) => {
                    s.objs().mws.insert(stag.index());
                    refused(e)
                }
            }
        }
        Request::BindMw {
            mw,
            mr,
            to,
            len,
            access,
            one_touch,
        } => bind_mw(s, (mw, mr), to, len, access, one_touch),
        Request::Invalidate { stag } => {
            let stag = STag::from_u32(stag);
            let owned = {
                let o = s.objs();
                o.mws.contains(&stag.index()) || o.mrs.contains_key(&stag.index())
            };
            if !owned {
                return not_found("window or region", stag.to_u32());
            }
            match tpt.invalidate_local(stag) {
                Ok(()) => Reply::Done,
                Err(e) => refused(e),
            }
        }
        _ => err(error::MALFORMED, "not a memory request"),
    }
}

/// How long a deregistration waits for transfers still using the region.
const DEREG_WAIT: Duration = Duration::from_secs(2);

/// `DeregMr`: deregisters the client's region `stag`, answered once no transfer uses
/// its memory any more (as an RNIC's deregistration returns after its last DMA): the
/// client may then reuse the pages, which the C library turns back into its program's
/// private memory, and a write still under way would land in whatever it became.
pub(super) async fn dereg_mr(s: &Session, stag: u32) -> Reply {
    let stag = STag::from_u32(stag);
    let Some(octets) = s.objs().mrs.remove(&stag.index()) else {
        return not_found("region", stag.to_u32());
    };
    let storage = match s.engine.tpt().deregister(stag) {
        Ok(storage) => storage,
        Err(e) => {
            s.objs().mrs.insert(stag.index(), octets);
            return err(error::REFUSED, e.to_string());
        }
    };
    let since = tokio::time::Instant::now();
    while Arc::strong_count(&storage) > 1 {
        if since.elapsed() > DEREG_WAIT {
            tracing::debug!(stag = %stag.to_u32(), "region deregistered with work still using it");
            break;
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    Reply::Done
}

/// `RegMrAt`: registers the memory file `fd` under the client's reserved STag `stag`, as
/// a region of `pd` with the client's `(access, va, len)`. Refused, the reservation goes
/// too; either way, requests of the domain's queue pairs held on it go on (or fail).
fn register_reserved(
    s: &Session,
    stag: u32,
    pd: u32,
    (access, va, placement): (u32, Option<u64>, (u64, u64)),
    fd: Option<OwnedFd>,
) -> Reply {
    let tpt = s.engine.tpt();
    if !s.objs().reserved.remove(&stag) {
        return not_found("reserved STag", stag);
    }
    // The reservation's entry becomes the region's (counted once).
    s.objs().mrs.remove(&STag::from_u32(stag).index());
    let access = Access::from_bits_truncate(access as u8);
    let base = va.map_or(Base::ZeroBased, Base::Va);
    let reply = region(s, pd, placement, fd, |pd, storage| {
        let stag = STag::from_u32(stag);
        tpt.register_reserved(stag, pd, storage, base, access)
            .map(|()| stag)
    });
    if matches!(reply, Reply::Error { .. }) {
        // Refused: the reservation goes, and the requests held on it fail.
        let stag = STag::from_u32(stag);
        s.objs().mrs.remove(&stag.index());
        let _ = tpt.deregister(stag);
    }
    // Requests of the domain's queue pairs held on it go on (or fail).
    if let Some(pd) = s.objs().pd(pd) {
        s.engine.wake_domain(pd);
    }
    match reply {
        Reply::Id(_) => Reply::Done,
        other => other,
    }
}

/// `BindMw`: binds the client's window `mw` to `len` octets at `to` of its region `mr`.
fn bind_mw(
    s: &Session,
    (mw, mr): (u32, u32),
    to: u64,
    len: u64,
    access: u32,
    one_touch: bool,
) -> Reply {
    let (mw, mr) = (STag::from_u32(mw), STag::from_u32(mr));
    {
        let o = s.objs();
        if !o.mws.contains(&mw.index()) {
            return not_found("memory window", mw.to_u32());
        }
        if !o.mrs.contains_key(&mr.index()) {
            return not_found("region", mr.to_u32());
        }
    }
    let access = Access::from_bits_truncate(access as u8);
    match s
        .engine
        .tpt()
        .bind_mw(mw, mr, to, len, access, one_touch, None)
    {
        Ok(stag) => Reply::Id(stag.to_u32()),
        Err(e) => err(error::REFUSED, e.to_string()),
    }
}

/// What one more entry of the memory table needs.
fn entry() -> Usage {
    Usage {
        entries: 1,
        ..Usage::default()
    }
}

/// Maps `len` octets of the client's memory file, from its octet `offset`, and enters
/// them in the table with `enter` (an ordinary or a fast-registration region of `pd`).
fn region(
    s: &Session,
    pd: u32,
    (len, offset): (u64, u64),
    fd: Option<OwnedFd>,
    enter: impl FnOnce(PdId, Arc<Region>) -> Result<STag, TptError>,
) -> Reply {
    let Some(pd) = s.objs().pd(pd) else {
        return not_found("protection domain", pd);
    };
    let Some(fd) = fd else {
        return err(
            error::MALFORMED,
            "a region registration came without its memory file: send the memfd with \
             SCM_RIGHTS on the same message",
        );
    };
    let need = Usage {
        entries: 1,
        files: 1,
        octets: len,
        ..Usage::default()
    };
    if let Some(r) = admit::check(s, need) {
        return r;
    }
    let Ok(len) = usize::try_from(len) else {
        return err(error::REFUSED, "region too large");
    };
    let storage = match Region::map_at(std::fs::File::from(fd), offset, len) {
        Ok(m) => m,
        Err(e) => {
            return err(
                error::REFUSED,
                format!("cannot map the region's memory: {e}"),
            );
        }
    };
    let storage = Arc::new(storage);
    // Its pages mapped here too before the first transfer needs them, off the shard's
    // thread (a large region takes a while); transfers meanwhile fault them in.
    let prefaulting = storage.clone();
    tokio::task::spawn_blocking(move || match prefaulting.prefault() {
        Ok(true) => {}
        // Ok(false): the file has holes, which the client never wrote.
        how => tracing::debug!(
            ?how,
            "region not prefaulted: its pages fault in on first use"
        ),
    });
    match enter(pd, storage) {
        Ok(stag) => {
            s.objs().mrs.insert(stag.index(), len as u64);
            Reply::Id(stag.to_u32())
        }
        Err(e) => err(error::REFUSED, e.to_string()),
    }
}
