//! The handles of a session's move to a successor daemon, apart from the move itself
//! (`moving`): how the daemon asks a session to pack ([`SessionMover`], which the
//! registry of sessions holds), and what comes back ([`MovingSession`]).

use std::os::fd::OwnedFd;

use tokio::sync::{mpsc, oneshot};

/// Asks a session to pack itself for a successor daemon.
pub(super) type Ask = oneshot::Sender<Result<MovingSession, String>>;

/// A session packed to cross to a successor daemon: [`take`](Self::take) its image and
/// descriptors, send them over, and once the successor runs it, [`commit`](Self::commit).
/// Dropped without committing, the session goes on here where it stopped.
#[derive(Debug)]
pub struct MovingSession {
    image: Vec<u8>,
    files: Vec<OwnedFd>,
    verdict: oneshot::Sender<bool>,
}

impl MovingSession {
    pub(super) fn new(image: Vec<u8>, files: Vec<OwnedFd>, verdict: oneshot::Sender<bool>) -> Self {
        Self {
            image,
            files,
            verdict,
        }
    }

    /// The session as octets, and the descriptors to send with it (this leaves them
    /// empty: they are taken once).
    pub fn take(&mut self) -> (Vec<u8>, Vec<OwnedFd>) {
        (
            std::mem::take(&mut self.image),
            std::mem::take(&mut self.files),
        )
    }

    /// The successor runs the session now: it ends here without a trace (no queue pair
    /// closes, nothing is flushed).
    pub fn commit(self) {
        let _ = self.verdict.send(true);
    }
}

/// One session of the old daemon, to move.
#[derive(Clone, Debug)]
pub struct SessionMover(pub(super) mpsc::Sender<Ask>);

impl SessionMover {
    /// Stops the session and packs it; `Err` says why it stays (it then goes on).
    pub async fn pack(&self) -> Result<MovingSession, String> {
        let gone = || "the application detached".to_owned();
        let (tx, rx) = oneshot::channel();
        self.0.send(tx).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}
