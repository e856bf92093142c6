//! A shared receive queue served by iwarpd: a ring in shared memory the library writes
//! and the daemon reads when one of this process's queue pairs needs a buffer.

use std::sync::{Arc, Mutex, PoisonError};

use cq::check_wr_id;
use ipc::control::{Reply, Request};
use ipc::srq::SrqSegment;
use ipc::wqe::{EncodeError, encode_rqe};
use rdmap::{PostError, RecvWr};

use super::{Client, DaemonError};

/// The library's side of one shared receive queue.
pub(crate) struct DaemonSrq {
    client: Arc<Client>,
    id: u32,
    seg: SrqSegment,
    /// One producer at a time.
    post: Mutex<()>,
}

impl std::fmt::Debug for DaemonSrq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonSrq")
            .field("id", &self.id)
            .field("depth", &self.seg.depth())
            .finish()
    }
}

impl Drop for DaemonSrq {
    fn drop(&mut self) {
        self.client.tell(&Request::DestroySrq { srq: self.id });
    }
}

impl DaemonSrq {
    /// Asks the daemon for a queue of at least `depth` entries and maps its ring.
    pub(crate) fn create(client: &Arc<Client>, depth: usize) -> Result<Self, DaemonError> {
        let depth = u32::try_from(depth).unwrap_or(u32::MAX);
        let (reply, mut fds) = client.call_with(&Request::CreateSrq { depth }, &[])?;
        let (Reply::Srq { srq, depth }, Some(fd)) = (reply, fds.pop()) else {
            return Err(DaemonError::Refused(
                "iwarpd answered with no shared receive queue".into(),
            ));
        };
        let seg = SrqSegment::map(std::fs::File::from(fd), depth)
            .map_err(|e| DaemonError::Refused(format!("iwarpd's shared receive queue: {e}")))?;
        Ok(Self {
            client: client.clone(),
            id: srq,
            seg,
            post: Mutex::new(()),
        })
    }

    /// The daemon's handle, for the queue pairs created with it.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// True if this queue belongs to the daemon session `client`.
    pub(crate) fn is_of(&self, client: &Arc<Client>) -> bool {
        Arc::ptr_eq(&self.client, client)
    }

    pub(crate) fn post_recv(&self, wr: &RecvWr) -> Result<(), PostError> {
        check_wr_id(wr.wr_id)?;
        let e = encode_rqe(wr).map_err(|e| match e {
            EncodeError::TooManyEntries { max } => PostError::TooManySges { max },
            EncodeError::NoStagingRoom => PostError::QueueFull,
        })?;
        let _one = self.post.lock().unwrap_or_else(PoisonError::into_inner);
        if self.seg.push(&e) {
            Ok(())
        } else {
            Err(PostError::QueueFull)
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.seg.len_waiting()
    }
}
