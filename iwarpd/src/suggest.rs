//! "Did you mean": the known name nearest to a misspelled one (a config key, a flag).

/// The name of `known` that `typed` most likely meant, if any is close enough: one that
/// `typed` is an abbreviation of (its letters in order, from the first one:
/// `bufsize` for `buffer_size`), else one within a few edits (insertions, deletions,
/// substitutions, by Levenshtein distance: `recv_deph` for `recv_depth`).
pub(crate) fn nearest<'a>(
    typed: &str,
    known: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let known: Vec<&str> = known.into_iter().collect();
    let abbreviated = known
        .iter()
        .filter(|k| abbreviates(typed, k))
        .min_by_key(|k| k.len());
    if let Some(k) = abbreviated {
        return Some(k);
    }
    let limit = (typed.chars().count() / 3).max(2);
    known
        .iter()
        .map(|k| (distance(typed, k), *k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Whether `typed` is `name` with letters left out (same first letter, the rest in order),
/// and at least three letters long.
fn abbreviates(typed: &str, name: &str) -> bool {
    let mut rest = name.chars();
    typed.chars().count() >= 3
        && typed.chars().next() == name.chars().next()
        && typed.chars().all(|c| rest.any(|n| n == c))
}

/// The Levenshtein distance between `a` and `b`.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: [&str; 6] = [
        "buffer_size",
        "recv_depth",
        "recv_size",
        "max_qps",
        "idle_timeout",
        "crc",
    ];

    #[test]
    fn misspellings_and_abbreviations_find_their_key() {
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(nearest("bufsize", KEYS), Some("buffer_size"));
        assert_eq!(nearest("buffer_sise", KEYS), Some("buffer_size"));
        assert_eq!(nearest("recv_deph", KEYS), Some("recv_depth"));
        assert_eq!(nearest("max_qp", KEYS), Some("max_qps"));
        assert_eq!(nearest("idle", KEYS), Some("idle_timeout"));
        assert_eq!(nearest("crcc", KEYS), Some("crc"));
    }

    #[test]
    fn nothing_close_suggests_nothing() {
        assert_eq!(nearest("colour", KEYS), None);
        assert_eq!(nearest("listen_address_of_the_daemon", KEYS), None);
    }
}
