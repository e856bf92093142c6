//! Live migration (seed 003 §3.1): a protection domain moves, with every region, window
//! and connected queue pair in it, while its connections stay up and the peers notice
//! nothing. This module owns the engine's side of both kinds of move:
//!
//! - [`engines`]: to another engine of the same process ([`Engine::migrate_pd`], in two
//!   halves [`Engine::park_pd`] and [`ParkedPd::move_to`]), and why a move did not happen
//!   ([`MigrateError`]);
//! - [`processes`]: to an engine of another process ([`Engine::export_pd`],
//!   [`Engine::import_pd`]): the domain as octets and file descriptors, which is how an
//!   `iwarpd` upgrade hands its connections to its successor.
//!
//! Words: a queue pair is *parked* when its driver has stopped and handed its socket over;
//! an *image* is a parked domain or queue pair as plain data, to cross to another process.
//! Three parts stay with the state they read and rebuild, which is private to them:
//! `conn/connection/park.rs` (parking and resuming a queue pair's driver) and
//! `conn/connection/image.rs` (a queue pair's image), parts of the connection, and
//! `tpt/image.rs` (a domain's entries) in `tpt`.
//!
//! [`Engine::migrate_pd`]: crate::Engine::migrate_pd
//! [`Engine::park_pd`]: crate::Engine::park_pd
//! [`Engine::export_pd`]: crate::Engine::export_pd
//! [`Engine::import_pd`]: crate::Engine::import_pd

mod engines;
mod processes;

pub use engines::{MigrateError, Migrated, ParkedPd};
pub use processes::{ExportedPd, ImportError, ImportQueues, Imported, StagedPd};
