//! Live migration (seed 003 §3.1): a protection domain moves from one engine of the
//! process to another with every region, window and queue pair in it, while its
//! connections stay up and the peers notice nothing.
//!
//! The seed moves a connection between virtual functions of one adapter; here the
//! engines of a process are those partitions. What makes the move invisible on the wire:
//!
//! - **STags stay valid.** Tag indices come from one space per process (see
//!   [`Tpt::with_max_entries`](crate::tpt::Tpt::with_max_entries)), so the domain's
//!   entries go into the new engine's table under the very STags the peer was given, with
//!   the same instances, rights and bounds; the old table no longer has them.
//! - **Nothing is cut in half.** Each queue pair's driver stops at the start of a turn,
//!   when no read or write is under way; the stream (queues, MSNs, a partly received
//!   message, outstanding Reads both ways, the Delay and drain states), the octets read
//!   and not yet consumed, and the octets produced and not yet written all move with it.
//!   The TCP socket is the same socket: no FIN, no reset, no new handshake.
//! - **The application carries on.** Its handles ([`Qp`], completion queues, shared
//!   receive queues, completion futures) are the same objects before and after. Requests
//!   it posts while the move is under way are queued and run once the new driver starts.
//!
//! A domain is the unit because memory belongs to domains, not to queue pairs: a queue
//! pair that must move alone gets a domain of its own. Queue pair numbers and domain
//! numbers are process-wide too, so they do not change either.
//!
//! [`Qp`]: crate::Qp

use std::sync::Arc;

use rdmap::{QpNum, QpState};

use crate::Engine;
use crate::conn::{ParkError, Parked, Shared};
use crate::tpt::{PdId, QpId, TptError};

/// Why a migration did not happen. Nothing moved: every queue pair goes on where it was.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MigrateError {
    /// The source and the destination are the same engine.
    SameEngine,
    /// The source engine has no such protection domain.
    NoSuchPd(PdId),
    /// A queue pair of the domain is neither connected nor ended: it is closing, or
    /// failed and still sending its Terminate.
    NotConnected {
        /// The queue pair.
        qp: QpNum,
        /// Its state.
        state: QpState,
    },
    /// Another migration is moving a queue pair of the domain.
    Busy(QpNum),
    /// The destination's table cannot take the domain's regions and windows.
    NoRoom(TptError),
    /// Registrations of the domain are still on the control queue.
    RegistrationsPending,
    /// The domain cannot cross to another process: the reason.
    CannotCross(String),
}

impl std::fmt::Display for MigrateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SameEngine => write!(
                f,
                "the queue pairs are on that engine already: migrate to another one"
            ),
            Self::NoSuchPd(pd) => write!(
                f,
                "{pd} is not a protection domain of this engine (moved away already, or \
                 deallocated)"
            ),
            Self::NotConnected { qp, state } => write!(
                f,
                "queue pair {} is {state:?}, not connected: only connected or ended queue \
                 pairs move; wait until it has closed, then migrate",
                qp.0
            ),
            Self::Busy(qp) => write!(
                f,
                "queue pair {} is being moved by another migration: wait for it to finish",
                qp.0
            ),
            Self::RegistrationsPending => write!(
                f,
                "registrations of the domain are still queued: wait until they are done \
                 (Engine::registered), then migrate"
            ),
            Self::CannotCross(why) => {
                write!(f, "the domain cannot move to another process: {why}")
            }
            Self::NoRoom(e) => write!(
                f,
                "the destination's memory table has no room for the domain ({e}): free \
                 regions there or raise its limit"
            ),
        }
    }
}

impl std::error::Error for MigrateError {}

impl From<ParkError> for MigrateError {
    fn from(e: ParkError) -> Self {
        match e {
            ParkError::NotConnected(qp, state) => Self::NotConnected { qp, state },
            ParkError::Busy(qp) => Self::Busy(qp),
        }
    }
}

/// What a migration moved.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Migrated {
    /// Queue pairs, connected or ended.
    pub queue_pairs: usize,
    /// Regions and windows.
    pub memory_entries: usize,
}

/// A protection domain whose queue pairs are parked, from [`Engine::park_pd`]: their
/// drivers have stopped, and requests posted meanwhile wait. Dropped without
/// [`move_to`](Self::move_to), everything goes on where it was.
#[derive(Debug)]
pub struct ParkedPd {
    pub(crate) from: Engine,
    pub(crate) pd: PdId,
    pub(crate) qps: Vec<Parked>,
}

impl Engine {
    /// Moves protection domain `pd` to engine `to` of this process, with every region,
    /// window and queue pair in it, without disconnecting anything (see the module
    /// documentation): [`park_pd`](Self::park_pd), then [`ParkedPd::move_to`].
    /// Afterwards `to` runs the queue pairs and holds the memory under the same STags;
    /// this engine has neither. The connections' drivers restart on the runtime this is
    /// called on.
    ///
    /// Do not connect or accept queue pairs of `pd` while it moves: one that comes up
    /// meanwhile stays on this engine without the domain's memory.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it finished, nothing has moved and every queue pair
    /// goes on where it was.
    pub async fn migrate_pd(&self, pd: PdId, to: &Self) -> Result<Migrated, MigrateError> {
        self.park_pd(pd).await?.move_to(to)
    }

    /// The first half of [`migrate_pd`](Self::migrate_pd): stops the driver of every
    /// queue pair of `pd` at the start of its next turn (a queue pair that has ended
    /// needs no stopping).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, the queue pairs parked so far go on where they were.
    pub async fn park_pd(&self, pd: PdId) -> Result<ParkedPd, MigrateError> {
        if !self.tpt().has_pd(pd) {
            return Err(MigrateError::NoSuchPd(pd));
        }
        let mut qps = Vec::new();
        for qp in self.qps_of(pd) {
            qps.push(qp.park().await?);
        }
        Ok(ParkedPd {
            from: self.clone(),
            pd,
            qps,
        })
    }
}

impl ParkedPd {
    /// The second half of [`Engine::migrate_pd`]: moves the domain's memory under its
    /// STags, then each queue pair (its new view of memory, its part of the push path,
    /// the new engine's limits and totals) and starts its driver there. On an error
    /// nothing has moved and the queue pairs go on where they were.
    pub fn move_to(self, to: &Engine) -> Result<Migrated, MigrateError> {
        let (from, pd) = (&self.from, self.pd);
        if from.same_engine(to) {
            return Err(MigrateError::SameEngine);
        }
        let taken = from.tpt().take_pd(pd).map_err(|e| match e {
            TptError::InUse { .. } => MigrateError::RegistrationsPending,
            _ => MigrateError::NoSuchPd(pd),
        })?;
        let memory_entries = taken.len();
        if let Err((e, taken)) = to.tpt().put_pd(taken) {
            if let Err((back, _)) = from.tpt().put_pd(taken) {
                tracing::error!(%pd, error = %back, "domain lost: neither table takes it back");
            }
            return Err(MigrateError::NoRoom(e));
        }
        let queue_pairs = self.qps.len();
        for p in self.qps {
            let shared: Arc<Shared> = Arc::clone(p.shared());
            let push = shared.take_push();
            let push = push.and_then(|push| to.adopt_push(pd, push));
            let mem = to.tpt().view(pd, QpId::from(shared.num.0));
            from.disown(shared.num);
            to.adopt(&shared);
            p.resume_in(to.home(push), Box::new(mem));
            tracing::debug!(qp = %shared.num, %pd, "queue pair migrated");
        }
        Ok(Migrated {
            queue_pairs,
            memory_entries,
        })
    }
}
