//! What the daemon's tests share: a real `iwarpd` process ([`daemon`]).
#![allow(dead_code)]

pub(crate) mod daemon;
