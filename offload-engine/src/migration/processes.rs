//! Live migration between processes (seed 003 §3.1): a protection domain leaves one
//! process's engine with every region, window and connected queue pair in it, and another
//! process's engine takes it over, while the peers notice nothing. This is how an `iwarpd`
//! upgrade hands its connections to its successor.
//!
//! [`Engine::export_pd`] parks the domain's queue pairs (as [`Engine::park_pd`] does) and
//! describes the domain as octets (its entries under their STags, and per queue pair the
//! stream's snapshot, the octets read and not consumed, and the octets produced and not
//! written) plus file descriptors: the regions' memory files, then the queue pairs' TCP
//! sockets. The caller sends both to the other process (`SCM_RIGHTS` for the
//! descriptors), where [`Engine::import_pd`] builds the domain again: the same STags, the
//! same pages (both processes map the memory files; nothing is copied), the same TCP
//! connections, and the drivers start where the old ones stopped. Then
//! [`ExportedPd::commit`] ends the queue pairs in the old process without a FIN or a
//! flush; dropped without it, everything goes on in the old process.
//!
//! What does not cross: completion queues and shared receive queues belong to the
//! application, which gives the importing engine new ones ([`ImportQueues`]) and moves
//! their contents itself (completions it has not consumed, receives posted to a shared
//! queue); memory the application handed over without a memory file; the push path and
//! the capture (the imported queue pairs run without them). Queue pair and domain
//! numbers are the importing process's own; STags keep their values.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;

use rdmap::{QpNum, SnapshotError};

use super::engines::{MigrateError, Migrated, ParkedPd};
use crate::conn::Completions;
use crate::conn::QpImage;
use crate::srq::Srq;
use crate::tpt::{PdId, QpId, TptError};
use crate::{Engine, Qp};
use shm::Region;

/// The first octets of a domain image: its format.
const FORMAT: &[u8; 8] = b"iWPDimg3";

/// What crosses, besides the descriptors.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct DomainImage {
    entries: Vec<crate::tpt::EntryImage>,
    /// Where each region starts in its memory file and its length, in the order the
    /// descriptors come.
    files: Vec<(u64, u64)>,
    qps: Vec<QpImage>,
}

/// A protection domain ready to cross to another process, from [`Engine::export_pd`]:
/// its queue pairs are parked and its memory is out of this engine's table. Send
/// [`image`](Self::image) and [`files`](Self::files) to the other process; once it has
/// imported them, [`commit`](Self::commit). Dropped without committing, the domain goes
/// back into the table and its queue pairs go on here.
#[derive(Debug)]
pub struct ExportedPd {
    parked: Option<ParkedPd>,
    taken: Option<crate::tpt::TakenPd>,
    image: Vec<u8>,
    files: Vec<OwnedFd>,
    moved: Vec<QpNum>,
    memory_entries: usize,
}

impl ExportedPd {
    /// The domain as octets.
    pub fn image(&self) -> &[u8] {
        &self.image
    }

    /// The descriptors to send with it, in this order: the memory files, then the
    /// sockets.
    pub fn files(&self) -> Vec<BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.files.iter().map(AsFd::as_fd).collect()
    }

    /// The queue pairs that move, in the order [`Engine::import_pd`] rebuilds them
    /// (queue pairs that have ended stay here).
    pub fn queue_pairs(&self) -> &[QpNum] {
        &self.moved
    }

    /// The other process runs the domain now: the queue pairs end here
    /// ([`QpEnd::MovedAway`](rdmap::QpEnd::MovedAway), no FIN, nothing flushed), the
    /// memory is unmapped here and its STag indices are free again.
    pub fn commit(mut self) -> Migrated {
        let parked = self.parked.take().expect("an export is committed once");
        let from = parked.from.clone();
        let mut queue_pairs = 0;
        for p in parked.qps {
            if p.sock().is_some() {
                from.disown(p.shared().num);
                p.retire();
                queue_pairs += 1;
            }
        }
        if let Some(taken) = self.taken.take() {
            from.tpt().forget_pd(taken);
        }
        Migrated {
            queue_pairs,
            memory_entries: self.memory_entries,
        }
    }
}

impl Drop for ExportedPd {
    fn drop(&mut self) {
        // Not committed: everything goes back as it was.
        if let (Some(parked), Some(taken)) = (&self.parked, self.taken.take())
            && let Err((e, _)) = parked.from.tpt().put_pd(taken)
        {
            tracing::error!(pd = %parked.pd, error = %e, "domain lost: the table does not take it back");
        }
    }
}

/// The queues an imported queue pair completes to and draws receives from.
#[derive(Clone, Debug)]
pub struct ImportQueues {
    /// Where its completions go.
    pub completions: Completions,
    /// The shared receive queue, for a queue pair that drew on one.
    pub srq: Option<Srq>,
}

/// One imported queue pair.
#[derive(Debug)]
pub struct Imported {
    /// Its number in the process it came from.
    pub was: QpNum,
    /// It, running here.
    pub qp: Qp,
}

/// Why an import failed. Nothing of the domain runs here; the exporting process still
/// has it (it must not commit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportError(String);

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot take the domain over: {}", self.0)
    }
}

impl std::error::Error for ImportError {}

impl From<SnapshotError> for ImportError {
    fn from(e: SnapshotError) -> Self {
        Self(e.to_string())
    }
}

impl Engine {
    /// Packs protection domain `pd` to cross to another process (see the module
    /// documentation). Its queue pairs stay parked, and its memory out of this table,
    /// until the returned export is committed or dropped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it finished, the queue pairs parked so far go on.
    pub async fn export_pd(&self, pd: PdId) -> Result<ExportedPd, MigrateError> {
        let parked = self.park_pd(pd).await?;
        let mut qps = Vec::new();
        let mut sockets = Vec::new();
        let mut moved = Vec::new();
        for p in &parked.qps {
            if let Some((image, sock)) = p.image().map_err(MigrateError::CannotCross)? {
                moved.push(p.shared().num);
                qps.push(image);
                sockets.push(sock);
            }
        }
        let taken = self.tpt().take_pd(pd).map_err(|e| match e {
            TptError::InUse { .. } => MigrateError::RegistrationsPending,
            _ => MigrateError::NoSuchPd(pd),
        })?;
        let mut export = ExportedPd {
            parked: Some(parked),
            taken: Some(taken),
            image: Vec::new(),
            files: Vec::new(),
            moved,
            memory_entries: 0,
        };
        let taken = export.taken.as_ref().expect("just set");
        let memory = taken.image().map_err(MigrateError::CannotCross)?;
        export.memory_entries = memory.entries.len();
        let image = DomainImage {
            entries: memory.entries,
            files: memory
                .files
                .iter()
                .map(|(_, at, len)| (*at, *len))
                .collect(),
            qps,
        };
        export.image = FORMAT.to_vec();
        postcard::to_io(&image, &mut export.image)
            .map_err(|e| MigrateError::CannotCross(e.to_string()))?;
        export.files = memory.files.into_iter().map(|(fd, ..)| fd).collect();
        export.files.extend(sockets);
        Ok(export)
    }

    /// Builds the domain an [`ExportedPd`] describes, from its image and its descriptors
    /// (memory files, then sockets), as a new domain of this engine; `queues` gives each
    /// queue pair its completion queues and shared receive queue, by its old number. The
    /// drivers start on the current runtime.
    pub fn import_pd(
        &self,
        image: &[u8],
        files: Vec<OwnedFd>,
        queues: impl FnMut(QpNum) -> ImportQueues,
    ) -> Result<(PdId, Vec<Imported>), ImportError> {
        Ok(self.stage_import(image, files)?.start(queues))
    }

    /// The first half of [`Self::import_pd`], everything that can fail: the domain's
    /// memory is in this engine's table and its queue pairs are ready, but nothing runs
    /// (nothing reads or writes the sockets) until [`StagedPd::start`]. Dropped instead,
    /// the domain is gone from here again, and the peers noticed nothing. Several domains
    /// that must move together are all staged before any starts.
    pub fn stage_import(&self, image: &[u8], files: Vec<OwnedFd>) -> Result<StagedPd, ImportError> {
        let body = image.strip_prefix(FORMAT).ok_or_else(|| {
            ImportError(
                "not a domain image of this format (the two processes must be builds of the \
                 same image format)"
                    .into(),
            )
        })?;
        let image: DomainImage = postcard::from_bytes(body)
            .map_err(|e| ImportError(format!("the image cannot be read: {e}")))?;
        let want = image.files.len() + image.qps.len();
        if files.len() != want {
            return Err(ImportError(format!(
                "{} descriptors came with the image, it names {want}",
                files.len()
            )));
        }
        let mut files = files.into_iter();
        let mut storages = Vec::with_capacity(image.files.len());
        for &(offset, len) in &image.files {
            let fd = files.next().expect("counted");
            let len = usize::try_from(len)
                .map_err(|_| ImportError("a memory file too large to map".into()))?;
            let region = Region::map_at(std::fs::File::from(fd), offset, len)
                .map_err(|e| ImportError(format!("cannot map a memory file: {e}")))?;
            storages.push(Arc::new(region));
        }
        let mut ready = Vec::with_capacity(image.qps.len());
        for (qp, sock) in image.qps.into_iter().zip(files) {
            let was = qp.num;
            let srq = qp.srq;
            ready.push((was, srq, qp.prepare(sock).map_err(ImportError)?));
        }
        // New numbers for the queue pairs, known before the windows bound to them.
        let nums: Vec<(u32, QpNum)> = ready
            .iter()
            .map(|(was, _, _)| (*was, crate::engine::next_qp_num()))
            .collect();
        let renumber = |old: u32| {
            nums.iter()
                .find(|(o, _)| *o == old)
                .map(|(_, n)| QpId::from(n.0))
        };
        let pd = self
            .tpt()
            .put_image(image.entries, &storages, renumber)
            .map_err(|e| ImportError(format!("the memory table: {e}")))?;
        Ok(StagedPd {
            engine: self.clone(),
            pd,
            qps: ready
                .into_iter()
                .zip(nums)
                .map(|((was, srq, qp), (_, num))| (QpNum(was), srq, num, qp))
                .collect(),
            started: false,
        })
    }
}

/// A domain [`Engine::stage_import`] made ready: [`start`](Self::start) it, or drop it
/// to leave everything to the process it came from.
#[derive(Debug)]
pub struct StagedPd {
    engine: Engine,
    pd: PdId,
    /// Per queue pair: its old number, whether it drew on a shared receive queue, its new
    /// number, and the queue pair ready to run.
    qps: Vec<(QpNum, bool, QpNum, crate::conn::PreparedQp)>,
    started: bool,
}

impl StagedPd {
    /// The domain's number here.
    pub fn pd(&self) -> PdId {
        self.pd
    }

    /// The numbers its queue pairs had in the process they come from.
    pub fn queue_pairs(&self) -> impl Iterator<Item = QpNum> + '_ {
        self.qps.iter().map(|(was, ..)| *was)
    }

    /// Starts the queue pairs: `queues` gives each its completion queues and shared
    /// receive queue, by its old number. The drivers start on the current runtime.
    pub fn start(mut self, mut queues: impl FnMut(QpNum) -> ImportQueues) -> (PdId, Vec<Imported>) {
        self.started = true;
        let engine = self.engine.clone();
        let mut out = Vec::with_capacity(self.qps.len());
        for (was, srq, num, qp) in std::mem::take(&mut self.qps) {
            let mut q = queues(was);
            if !srq {
                q.srq = None;
            }
            let mem = engine.tpt().view(self.pd, QpId::from(num.0));
            let shared = qp.start(
                (num, self.pd),
                engine.home(None),
                Box::new(mem),
                q.completions,
                q.srq,
            );
            engine.adopt(&shared);
            out.push(Imported {
                was,
                qp: Qp { shared },
            });
        }
        (self.pd, out)
    }
}

impl Drop for StagedPd {
    fn drop(&mut self) {
        if !self.started {
            // The sockets close here only (the other process still holds them: no FIN).
            self.engine.tpt().release_pd(self.pd);
        }
    }
}
