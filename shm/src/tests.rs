use std::os::unix::fs::{FileExt, MetadataExt as _};
use std::sync::Arc;

use super::*;

#[test]
fn alloc_is_zeroed_page_aligned_and_shared_through_its_fd() {
    let r = Region::alloc(10_000).unwrap();
    assert_eq!(r.len(), 10_000);
    assert!(r.view(0, 10_000).unwrap().iter().all(|&b| b == 0));
    assert_eq!(r.view(0, 1).unwrap().as_ptr() as usize % 4096, 0);
    r.write_at(4095, b"abc").unwrap();
    // Another mapping of the memfd (here: a read through a duplicate of its descriptor)
    // sees the same pages: what a local daemon will map.
    let file = File::from(r.fd().unwrap().try_clone_to_owned().unwrap());
    let mut got = [0u8; 3];
    file.read_exact_at(&mut got, 4095).unwrap();
    assert_eq!(&got, b"abc");
    file.write_all_at(b"XY", 9998).unwrap();
    let mut tail = [0u8; 2];
    r.read_at(9998, &mut tail).unwrap();
    assert_eq!(&tail, b"XY");
}

#[test]
fn adopting_memory_does_not_copy_it() {
    let mut v = vec![7u8; 1000];
    let addr = v.as_mut_ptr() as usize;
    let r = Region::adopt(v);
    assert_eq!(r.view(0, 1).unwrap().as_ptr() as usize, addr);
    assert!(r.fd().is_none());

    let mut b: Box<[u8]> = vec![1u8; 64].into_boxed_slice();
    let addr = b.as_mut_ptr() as usize;
    let r = Region::adopt(b);
    assert_eq!(r.view(0, 64).unwrap().as_ptr() as usize, addr);

    let mut m = BytesMut::zeroed(128);
    let addr = m.as_mut_ptr() as usize;
    let r = Region::adopt(m);
    assert_eq!(r.view(0, 0).unwrap().as_ptr() as usize, addr);
    r.write_at(120, &[9; 8]).unwrap();
    assert_eq!(&r.view(120, 8).unwrap()[..], &[9; 8]);
}

#[test]
fn an_adopted_owner_is_dropped_with_the_region() {
    struct Owner(Vec<u8>, #[allow(dead_code)] Arc<()>);
    impl AsMut<[u8]> for Owner {
        fn as_mut(&mut self) -> &mut [u8] {
            &mut self.0
        }
    }
    let alive = Arc::new(());
    let r = Region::adopt(Owner(vec![0; 16], alive.clone()));
    assert_eq!(Arc::strong_count(&alive), 2);
    drop(r);
    assert_eq!(Arc::strong_count(&alive), 1);
}

#[test]
fn out_of_range_fails_cleanly() {
    let r = Region::alloc(16).unwrap();
    let err = r.write_at(14, &[0; 3]).unwrap_err();
    assert_eq!(
        err,
        OutOfRange {
            offset: 14,
            len: 3,
            region_len: 16
        }
    );
    assert!(r.view(usize::MAX, 2).is_err());
    assert!(r.update_u64(9, &mut |v| v).is_err());
    assert!(r.view(16, 0).is_ok());
    let e = Region::alloc(0).unwrap();
    assert!(e.is_empty());
    assert!(e.view(0, 0).unwrap().is_empty());
    assert!(e.view(0, 1).is_err());
}

#[test]
fn update_u64_is_little_endian_read_modify_write() {
    let r = Region::alloc(16).unwrap();
    r.write_at(8, &5u64.to_le_bytes()).unwrap();
    assert_eq!(r.update_u64(8, &mut |v| v + 10).unwrap(), 5);
    let mut w = [0u8; 8];
    r.read_at(8, &mut w).unwrap();
    assert_eq!(u64::from_le_bytes(w), 15);
}

#[test]
fn views_exclude_concurrent_writers() {
    // A writer fills the whole region with one value per round under an exclusive view;
    // a reader's shared view must never see two values at once.
    let r = Arc::new(Region::alloc(64 * 1024).unwrap());
    let writer = {
        let r = r.clone();
        std::thread::spawn(move || {
            for round in 0..2000u32 {
                r.view_mut(0, r.len()).unwrap().fill(round as u8);
            }
        })
    };
    while !writer.is_finished() {
        let v = r.view(0, r.len()).unwrap();
        let first = v[0];
        assert!(v.iter().all(|&b| b == first), "torn view");
    }
    writer.join().unwrap();
}

#[test]
fn a_segment_is_shared_through_its_fd_and_sealed() {
    let a = Segment::create("test-seg", 100).unwrap();
    assert_eq!(a.len(), 104);
    let file = File::from(a.fd().try_clone_to_owned().unwrap());
    // Sealed: the receiver cannot be made to fault by a truncation.
    assert!(file.set_len(10).is_err());
    let b = Segment::map(file, 104).unwrap();
    a.write(3, b"hello, segment");
    a.u64(64)
        .store(0xdead_beef, std::sync::atomic::Ordering::Release);
    let mut got = [0u8; 14];
    b.read(3, &mut got);
    assert_eq!(&got, b"hello, segment");
    assert_eq!(
        b.u64(64).load(std::sync::atomic::Ordering::Acquire),
        0xdead_beef
    );
    assert_eq!(
        b.u32(64).load(std::sync::atomic::Ordering::Relaxed),
        0xdead_beef
    );
}

/// Copies in and out of a segment go by words between unaligned heads and tails: every
/// start and length across a few words lands exactly, and nothing around it moves.
#[test]
fn segment_copies_land_exactly_at_every_alignment() {
    let a = Segment::create("test-seg", 64).unwrap();
    let b = Segment::map(File::from(a.fd().try_clone_to_owned().unwrap()), 64).unwrap();
    for at in 0..17 {
        for len in 0..40 {
            a.write(0, &[0xee; 64]);
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + at + 1) as u8).collect();
            a.write(at, &src);
            let mut all = [0u8; 64];
            b.read(0, &mut all);
            let mut want = [0xee; 64];
            want[at..at + len].copy_from_slice(&src);
            assert_eq!(all, want, "write at {at}, {len} octets");
            let mut got = vec![0u8; len];
            b.read(at, &mut got);
            assert_eq!(got, src, "read at {at}, {len} octets");
        }
    }
    // To the segment's last octet, and one beyond it refused.
    let tail: Vec<u8> = (0..13).collect();
    a.write(51, &tail);
    let mut got = [0u8; 13];
    b.read(51, &mut got);
    assert_eq!(got[..], tail[..]);
    assert!(std::panic::catch_unwind(|| b.read(52, &mut [0u8; 13])).is_err());
}

#[test]
fn unsealed_or_short_files_are_not_mapped() {
    let plain = memfd::MemfdOptions::default()
        .create("plain")
        .unwrap()
        .into_file();
    plain.set_len(4096).unwrap();
    let err = Region::map(plain.try_clone().unwrap(), 4096).unwrap_err();
    assert!(err.to_string().contains("not sealed"), "{err}");
    assert!(Segment::map(plain, 4096).is_err());
    let r = Region::alloc(4096).unwrap();
    let file = File::from(r.fd().unwrap().try_clone_to_owned().unwrap());
    let err = Region::map(file.try_clone().unwrap(), 8192).unwrap_err();
    assert!(err.to_string().contains("4096 octets"), "{err}");
    // The right length maps the same pages.
    let m = Region::map(file, 4096).unwrap();
    r.write_at(100, b"xyz").unwrap();
    assert_eq!(&m.view(100, 3).unwrap()[..], b"xyz");
    let tmp = tempfile_in_tmp();
    assert!(Region::map(tmp, 1).is_err());
}

fn tempfile_in_tmp() -> File {
    let path = std::env::temp_dir().join(format!("shm-test-{}", std::process::id()));
    let f = File::options()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    f.set_len(4096).unwrap();
    f
}

#[test]
#[should_panic(expected = "outside a segment")]
fn a_segment_access_outside_panics() {
    let s = Segment::create("test-seg", 8).unwrap();
    s.u32(8);
}

/// Resident octets of the mapping that holds `addr` (its `Rss` in `/proc/self/smaps`):
/// what other tests map or drop meanwhile does not count.
fn resident_at(addr: usize) -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        let range = line.split_once(' ').and_then(|(r, _)| r.split_once('-'));
        if let Some((a, b)) = range
            && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        {
            inside = (a..b).contains(&addr);
        } else if inside && let Some(kb) = line.strip_prefix("Rss:") {
            return kb
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<usize>()
                .unwrap()
                * 1024;
        }
    }
    panic!("no mapping holds {addr:#x}")
}

/// A daemon mapping a client's region maps its pages when it prefaults them (on a
/// blocking thread), so that its first transfer through the region takes no page faults:
/// the second mapping of the same 16 MiB is resident then, and not before.
#[test]
fn a_mapped_region_is_resident_once_prefaulted() {
    const LEN: usize = 16 << 20;
    let r = Region::alloc(LEN).unwrap();
    let file = File::from(r.fd().unwrap().try_clone_to_owned().unwrap());
    let mapped = Region::map(file, LEN).unwrap();
    let addr = mapped.view(0, 1).unwrap().as_ptr() as usize;
    let mapped_only = resident_at(addr);
    assert!(
        mapped_only < LEN / 10,
        "{mapped_only} octets resident at once"
    );
    assert!(mapped.prefault().unwrap());
    let grew = resident_at(addr);
    assert!(grew >= LEN * 9 / 10, "{grew} octets became resident");
    assert!(!Region::adopt(vec![0u8; 64]).prefault().unwrap());
}

/// A memory file with pages its creator never wrote is not prefaulted: that would
/// allocate them in the mapping process (a client could make a daemon take memory it
/// never touched). Written in full, it is.
#[test]
fn a_region_with_holes_is_not_prefaulted() {
    const LEN: usize = 16 << 20;
    let sparse = |len: u64| {
        let file = sealed::create("sparse", len as usize).unwrap();
        // One page written: the rest are holes.
        file.write_all_at(b"x", len / 2).unwrap();
        file
    };
    // Holes inside the registered part, and outside it (a file longer than the region).
    for (file, len) in [(sparse(LEN as u64), LEN), (sparse(2 * LEN as u64), LEN)] {
        let held = |f: &File| f.metadata().unwrap().blocks() * 512;
        let dup = file.try_clone().unwrap();
        let before = held(&dup);
        let mapped = Region::map(file, len).unwrap();
        assert!(!mapped.prefault().unwrap());
        assert_eq!(
            held(&dup),
            before,
            "the prefault allocated the file's holes"
        );
    }
    let full = sealed::create("full", LEN).unwrap();
    full.write_all_at(&vec![1u8; LEN], 0).unwrap();
    assert!(Region::map(full, LEN).unwrap().prefault().unwrap());
    // A sparse file (the C library's arena) whose region, at an offset, is written in
    // full: prefaulted; one reaching into a hole past it: not.
    let arena = sealed::create("arena", 4 * LEN).unwrap();
    arena.write_all_at(&vec![1u8; LEN], 2 * LEN as u64).unwrap();
    let at = |offset: usize| {
        let f = arena.try_clone().unwrap();
        Region::map_at(f, offset as u64, LEN)
            .unwrap()
            .prefault()
            .unwrap()
    };
    assert!(at(2 * LEN), "written in full");
    assert!(!at(2 * LEN + 4096), "its last page is a hole");
    assert!(!at(LEN), "a hole before it");
}

/// Every allocated or mapped region and every segment counts as a memory file while it
/// lives; adopted and empty regions do not.
#[test]
fn memory_files_are_counted_while_they_live() {
    // Other tests of this binary allocate and drop a few at the same time (the count is
    // the process's): count this test's own by holding many, with room for theirs.
    const N: usize = 200;
    const OTHERS: usize = 50;
    let before = memory_files();
    let regions: Vec<_> = (0..N).map(|_| Region::alloc(64).unwrap()).collect();
    let mapped: Vec<_> = regions
        .iter()
        .map(|r| {
            let file = File::from(r.fd().unwrap().try_clone_to_owned().unwrap());
            Region::map(file, 64).unwrap()
        })
        .collect();
    let segments: Vec<_> = (0..N).map(|_| Segment::create("t", 64).unwrap()).collect();
    let _others = (Region::adopt(vec![0u8; 8]), Region::empty());
    assert!(memory_files() + OTHERS >= before + 3 * N);
    drop((regions, mapped, segments));
    assert!(memory_files() < before + OTHERS);
}

/// A lent part is read in place, by the `Bytes` it lends, and never stored to from this
/// process.
#[test]
fn a_lent_part_is_read_in_place_and_never_stored_to() {
    let s = Arc::new(Segment::create("test-seg", 64).unwrap().lending(32));
    let other = Segment::map(File::from(s.fd().try_clone_to_owned().unwrap()), 64).unwrap();
    other.write(40, b"lent");
    let b = s.bytes(40, 4);
    assert_eq!(&b[..], b"lent");
    other.write(40, b"LENT");
    assert_eq!(&b[..], b"LENT", "the same octets, not a copy");
    s.write(28, b"mine");
    let refused = |f: &dyn Fn()| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err();
    assert!(refused(&|| s.write(30, b"over")));
    assert!(refused(&|| _ = s.u32(32)));
    assert!(refused(&|| _ = s.u64(56)));
    assert!(refused(&|| _ = s.bytes(24, 8)));
    let mut out = [0u8; 4];
    s.read(40, &mut out);
    assert_eq!(&out, b"LENT");
}
