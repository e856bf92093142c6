//! Tests of the TPT through its verbs and through queue pair views.

use std::sync::{Arc, mpsc};
use std::thread;

use ddp::{Access, DdpError, STag};
use rdmap::{AccessError, Bind, FastReg, LocalOps, Memory, Sge, TermCode};

use super::*;

mod checks;
mod invalidate;
mod lifecycle;
mod windows;

const RW: Access = Access::LOCAL_READ
    .union(Access::LOCAL_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_WRITE);

fn setup() -> (Arc<Tpt>, PdId) {
    let tpt = Arc::new(Tpt::new());
    let pd = tpt.alloc_pd();
    (tpt, pd)
}

/// The octets of a region, read back by the application.
fn bytes(tpt: &Tpt, pd: PdId, stag: STag) -> Vec<u8> {
    let info = tpt.info(stag).expect("live region");
    let mut out = vec![0; usize::try_from(info.len).unwrap()];
    tpt.read(pd, stag, info.to, &mut out).unwrap();
    out
}

/// `stag` with an instance its entry does not answer to. Instances are random, so a
/// constant one would match one run in 256.
fn stale(stag: STag) -> STag {
    stag.with_instance(stag.instance().wrapping_add(1))
}

fn rights(missing: Access) -> AccessError {
    AccessError::Rights { missing }
}
