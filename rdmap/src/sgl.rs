//! [`Sgl`]: the gather or scatter list of a work request, allocation-free for short lists,
//! and its entries ([`Sge`]).

use std::fmt;
use std::ops::{Deref, DerefMut};

use ddp::STag;
use smallvec::SmallVec;

/// A span of local registered memory: an STag, a tagged offset and a length.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Sge {
    /// The local STag naming the region.
    pub stag: STag,
    /// Tagged offset of the first octet.
    pub to: u64,
    /// Length in octets.
    pub len: u32,
}

/// How many entries an [`Sgl`] holds without allocating.
pub const SGL_INLINE: usize = 2;

/// A gather list (Send, Write) or scatter list (receive, Read sink) of local memory: the
/// [`Sge`]s in order. Up to [`SGL_INLINE`] entries live inside the work request itself, so
/// posting one allocates nothing; longer lists go to the heap.
///
/// Build one from an entry, an array, a `Vec` or an iterator:
/// ```
/// # use rdmap::{Sge, Sgl, STag};
/// let a = Sge { stag: STag::new(1, 0), to: 0, len: 64 };
/// let b = Sge { len: 32, ..a };
/// let one = Sgl::from(a);
/// let two: Sgl = [a, b].into();
/// let many: Sgl = (0..5).map(|i| Sge { to: i * 64, ..a }).collect();
/// assert_eq!((one.len(), two.len(), many.len()), (1, 2, 5));
/// assert!(!two.spilled() && many.spilled());
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Sgl(SmallVec<[Sge; SGL_INLINE]>);

impl Sgl {
    /// An empty list.
    pub const fn new() -> Self {
        Self(SmallVec::new_const())
    }

    /// Appends an entry.
    pub fn push(&mut self, sge: Sge) {
        self.0.push(sge);
    }

    /// True when the entries are on the heap (more than [`SGL_INLINE`] of them).
    pub fn spilled(&self) -> bool {
        self.0.spilled()
    }
}

impl Deref for Sgl {
    type Target = [Sge];

    fn deref(&self) -> &[Sge] {
        &self.0
    }
}

impl DerefMut for Sgl {
    fn deref_mut(&mut self) -> &mut [Sge] {
        &mut self.0
    }
}

impl fmt::Debug for Sgl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl From<Sge> for Sgl {
    fn from(sge: Sge) -> Self {
        let mut v = Self::new();
        v.push(sge);
        v
    }
}

impl<const N: usize> From<[Sge; N]> for Sgl {
    fn from(list: [Sge; N]) -> Self {
        list.into_iter().collect()
    }
}

impl From<Vec<Sge>> for Sgl {
    fn from(list: Vec<Sge>) -> Self {
        Self(SmallVec::from_vec(list))
    }
}

impl From<&[Sge]> for Sgl {
    fn from(list: &[Sge]) -> Self {
        Self(SmallVec::from_slice(list))
    }
}

impl FromIterator<Sge> for Sgl {
    fn from_iter<I: IntoIterator<Item = Sge>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl Extend<Sge> for Sgl {
    fn extend<I: IntoIterator<Item = Sge>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

impl<'a> IntoIterator for &'a Sgl {
    type Item = &'a Sge;
    type IntoIter = std::slice::Iter<'a, Sge>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl IntoIterator for Sgl {
    type Item = Sge;
    type IntoIter = smallvec::IntoIter<[Sge; SGL_INLINE]>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::STag;

    fn sge(i: u64) -> Sge {
        Sge {
            stag: STag::new(1, 0),
            to: i,
            len: 1,
        }
    }

    #[test]
    fn short_lists_stay_inline_and_every_source_keeps_the_order() {
        assert!(!Sgl::from(sge(0)).spilled());
        assert!(!Sgl::from([sge(0), sge(1)]).spilled());
        let three = Sgl::from([sge(0), sge(1), sge(2)]);
        assert!(three.spilled());
        let from_vec = Sgl::from(vec![sge(0), sge(1), sge(2)]);
        let from_slice = Sgl::from(&[sge(0), sge(1), sge(2)][..]);
        assert_eq!(three, from_vec);
        assert_eq!(three, from_slice);
        assert_eq!(three.iter().map(|s| s.to).collect::<Vec<_>>(), [0, 1, 2]);
        let mut grown = Sgl::new();
        grown.extend([sge(0), sge(1)]);
        grown.push(sge(2));
        assert_eq!(grown, three);
    }
}
