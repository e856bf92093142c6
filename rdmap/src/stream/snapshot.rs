//! A [`Stream`] as octets, to cross to another process whole (live migration between
//! daemons): every queue, sequence number, partly received message, outstanding Read and
//! counter, in postcard's form of the derived serde types.
//!
//! Two things do not cross as they are: deadlines (an `Instant` means nothing in another
//! process) go as the time left on the clock the caller passes, and an RDMA Write segment
//! being read straight into memory (it holds the mapping) cannot be taken: the caller
//! snapshots between reads, when there is none.

use std::cell::Cell;
use std::time::Instant;

use crate::Stream;

/// Why a stream could not be turned into octets, or back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotError(String);

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "queue pair snapshot: {}", self.0)
    }
}

impl std::error::Error for SnapshotError {}

/// The first octets of every snapshot: its format. A snapshot of another format is refused
/// rather than misread (both daemons of a handover must be builds of the same format).
const FORMAT: &[u8; 8] = b"iWQPsnp1";

thread_local! {
    /// The clock deadlines are measured against while a snapshot is written or read.
    static NOW: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Runs `f` with `now` as the snapshot clock.
fn at<T>(now: Instant, f: impl FnOnce() -> T) -> T {
    NOW.with(|c| c.set(Some(now)));
    let r = f();
    NOW.with(|c| c.set(None));
    r
}

fn now() -> Instant {
    NOW.with(Cell::get).unwrap_or_else(Instant::now)
}

impl Stream {
    /// The stream as octets, its deadlines measured from `now`.
    ///
    /// Fails while an RDMA Write segment is being read straight into memory
    /// ([`direct_target`](Self::direct_target)): take it between reads.
    pub fn to_snapshot(&self, now: Instant) -> Result<Vec<u8>, SnapshotError> {
        let mut out = FORMAT.to_vec();
        at(now, || postcard::to_io(self, &mut out)).map_err(|e| SnapshotError(e.to_string()))?;
        Ok(out)
    }

    /// The stream `to_snapshot` wrote, its deadlines measured from `now`.
    pub fn from_snapshot(octets: &[u8], now: Instant) -> Result<Self, SnapshotError> {
        let body = octets.strip_prefix(FORMAT).ok_or_else(|| {
            SnapshotError(
                "not a queue pair snapshot of this format (the two daemons must be builds \
                 of the same snapshot format)"
                    .into(),
            )
        })?;
        let (stream, rest) = at(now, || postcard::take_from_bytes::<Self>(body))
            .map_err(|e| SnapshotError(format!("cannot be read: {e}")))?;
        if !rest.is_empty() {
            return Err(SnapshotError(format!("{} octets too many", rest.len())));
        }
        Ok(stream)
    }
}

/// An `Option<Instant>` kept as the time left until it (zero once passed).
pub(crate) mod deadline {
    use std::time::{Duration, Instant};

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(crate) fn serialize<S: Serializer>(at: &Option<Instant>, s: S) -> Result<S::Ok, S::Error> {
        at.map(|at| at.saturating_duration_since(super::now()))
            .serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Instant>, D::Error> {
        let left = Option::<Duration>::deserialize(d)?;
        Ok(left.and_then(|left| super::now().checked_add(left)))
    }
}

/// A fixed-size array of octets (serde derives arrays only up to 32 elements).
pub(crate) mod array {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer, const N: usize>(
        a: &[u8; N],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(a)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>, const N: usize>(
        d: D,
    ) -> Result<[u8; N], D::Error> {
        let v = <Vec<u8>>::deserialize(d)?;
        v.try_into()
            .map_err(|_| serde::de::Error::custom(format!("not {N} octets")))
    }
}

/// The direct placement under way, which must be none.
pub(crate) mod not_direct {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::stream::Direct;

    pub(crate) fn serialize<S: Serializer>(d: &Option<Direct>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            None => s.serialize_unit(),
            Some(_) => Err(serde::ser::Error::custom(
                "an RDMA Write is being read straight into memory: take it between reads",
            )),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Direct>, D::Error> {
        <()>::deserialize(d)?;
        Ok(None)
    }
}
