//! Live migration of a protection domain, with its memory and connected queue pairs, to
//! another device of the process: [`Pd::migrate`].

use std::fmt;

#[cfg(feature = "embedded")]
use offload_engine::MigrateError as EngineError;
use rdmap::{QpNum, QpState};

use crate::device::Device;
use crate::pd::Pd;

/// Why [`Pd::migrate`] did not move the domain. Nothing moved: every queue pair goes on
/// where it was.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MigrateError {
    /// One of the devices is an `iwarpd`: a domain moves between embedded devices of one
    /// process (a daemon's connections are the daemon's to move).
    NotEmbedded,
    /// The domain is on that device already.
    SameDevice,
    /// A queue pair of the domain is closing, or failed and still ending.
    NotConnected {
        /// The queue pair.
        qp: QpNum,
        /// Its state.
        state: QpState,
    },
    /// Another migration of the domain is under way.
    Busy(QpNum),
    /// The destination's memory table has no room for the domain's regions and windows.
    NoRoom,
    /// Another migration moved the domain meanwhile.
    Moved,
    /// Regions of the domain are still being registered (queued registrations).
    RegistrationsPending,
}

impl fmt::Display for MigrateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotEmbedded => write!(
                f,
                "a protection domain moves only between embedded devices of this process; \
                 one of these devices is iwarpd"
            ),
            Self::SameDevice => write!(f, "the protection domain is on that device already"),
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
            Self::NoRoom => write!(
                f,
                "the destination device's memory table is full: free regions there first"
            ),
            Self::RegistrationsPending => write!(
                f,
                "regions of the domain are still being registered: await Mr::registered, \
                 then migrate"
            ),
            Self::Moved => write!(
                f,
                "another migration moved the protection domain meanwhile: see Pd::device"
            ),
        }
    }
}

impl std::error::Error for MigrateError {}

#[cfg(feature = "embedded")]
impl From<EngineError> for MigrateError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::NotConnected { qp, state } => Self::NotConnected { qp, state },
            EngineError::Busy(qp) => Self::Busy(qp),
            EngineError::NoRoom(_) => Self::NoRoom,
            EngineError::SameEngine => Self::SameDevice,
            EngineError::RegistrationsPending => Self::RegistrationsPending,
            _ => Self::Moved,
        }
    }
}

/// What [`Pd::migrate`] moved.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Migrated {
    /// Queue pairs, connected or ended.
    pub queue_pairs: usize,
    /// Regions and windows.
    pub memory_entries: usize,
}

impl Pd {
    /// Moves this protection domain to device `to` of this process with every region,
    /// window and queue pair created in it, **without disconnecting anything** (seed
    /// 003's live migration). The peers notice nothing: the TCP connections are the same
    /// sockets, every STag the domain handed out stays valid (tag indices are unique in
    /// the process), and each queue pair carries its whole state along (queued and
    /// outstanding requests, a half-received message, sequence numbers, octets not yet
    /// written). Every handle stays valid: [`Qp`](crate::Qp), [`Mr`](crate::Mr),
    /// [`Mw`](crate::Mw), completion queues and pending futures work as before, now on
    /// `to`, which also counts them in its [`stats`](Device::stats) (this device no
    /// longer does).
    ///
    /// Requests posted while the domain moves wait and run once it has moved. Each queue
    /// pair's driver stops at the start of its next turn; the connections' drivers then
    /// run on the tokio runtime this is called on.
    ///
    /// Memory is the unit because memory belongs to domains: a queue pair that must move
    /// alone is given a domain of its own. Do not connect queue pairs of the domain while
    /// it moves.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it finished, nothing has moved and every queue pair
    /// goes on where it was.
    pub async fn migrate(&self, to: &Device) -> Result<Migrated, MigrateError> {
        #[cfg(not(feature = "embedded"))]
        {
            let _ = to;
            Err(MigrateError::NotEmbedded)
        }
        #[cfg(feature = "embedded")]
        self.migrate_embedded(to).await
    }

    #[cfg(feature = "embedded")]
    async fn migrate_embedded(&self, to: &Device) -> Result<Migrated, MigrateError> {
        let from = self.device();
        let (Some(source), Some(dest)) = (from.engine(), to.engine()) else {
            return Err(MigrateError::NotEmbedded);
        };
        if from.same_device(to) {
            return Err(MigrateError::SameDevice);
        }
        let parked = source.park_pd(self.engine_id()).await?;
        // Memory verbs of the domain hold the device while they run: the table moves
        // between them, not under one.
        let mut home = self.home_mut();
        let moved = parked.move_to(dest)?;
        *home = to.clone();
        Ok(Migrated {
            queue_pairs: moved.queue_pairs,
            memory_entries: moved.memory_entries,
        })
    }
}
