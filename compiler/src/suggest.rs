//! "Did you mean": the known name closest to a misspelt one. `kirc` and the library use it for
//! unknown op names, targets and `-D` constants, whose errors end `; did you mean `gemm`?` when a
//! known name is close enough ([`did_you_mean`]), and say nothing more when none is.

/// The edit distance between `a` and `b`, in characters: the fewest insertions, deletions,
/// substitutions and swaps of two adjacent characters that turn one into the other, no
/// character being edited twice (the optimal string alignment distance; `bf61` is one swap from
/// `bf16`).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // Three rows of the table: `d[i][j]` is the distance between `a[..i]` and `b[..j]`.
    let mut before: Vec<usize> = Vec::new();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let mut d = (prev[j - 1] + usize::from(a[i - 1] != b[j - 1]))
                .min(prev[j] + 1)
                .min(row[j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            row[j] = d;
        }
        before = std::mem::replace(&mut prev, row);
    }
    prev[b.len()]
}

/// The candidate closest to `name`, compared without regard to case, when it is close enough to
/// be a likely misspelling: at most one edit for a name of up to 4 characters, and at most a
/// third of the name's length (rounded up) for a longer one. Of candidates equally close, the
/// one sharing the longer prefix with `name` wins, then the earliest; `None` when `name` itself
/// is a candidate or none is close.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = name.to_lowercase();
    let len = lower.chars().count();
    let limit = if len <= 4 { 1 } else { len.div_ceil(3) };
    // Ranked by distance, then by the longer common prefix (`sm_90` is `sm_90a` misspelt
    // rather than `sm_80`).
    let mut best: Option<((usize, std::cmp::Reverse<usize>), &str)> = None;
    for c in candidates {
        if c == name {
            return None;
        }
        let c_lower = c.to_lowercase();
        let d = edit_distance(&lower, &c_lower);
        let prefix = lower
            .chars()
            .zip(c_lower.chars())
            .take_while(|(x, y)| x == y)
            .count();
        let rank = (d, std::cmp::Reverse(prefix));
        if d <= limit && best.is_none_or(|(b, _)| rank < b) {
            best = Some((rank, c));
        }
    }
    best.map(|(_, c)| c)
}

/// `; did you mean `X`?` for the [`closest`] candidate `X`, or the empty string when there is
/// none: the tail of an "unknown name" message.
pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    match closest(name, candidates) {
        Some(c) => format!("; did you mean `{c}`?"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The distance by its definition, recursively from the ends of the words, with no table
    /// (exponential, for short words only: an independent oracle).
    fn recursive_distance(a: &[char], b: &[char]) -> usize {
        let (Some((&x, a1)), Some((&y, b1))) = (a.split_last(), b.split_last()) else {
            return a.len() + b.len();
        };
        let mut d = (recursive_distance(a1, b1) + usize::from(x != y))
            .min(recursive_distance(a1, b) + 1)
            .min(recursive_distance(a, b1) + 1);
        if let (Some((&x2, a2)), Some((&y2, b2))) = (a1.split_last(), b1.split_last()) {
            if x == y2 && x2 == y {
                d = d.min(recursive_distance(a2, b2) + 1);
            }
        }
        d
    }

    #[test]
    fn known_distances() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("gemn", "gemm"), 1);
        assert_eq!(edit_distance("sm90a", "sm_90a"), 1);
        assert_eq!(edit_distance("flaw", "lawn"), 2);
        assert_eq!(edit_distance("héad", "head"), 1);
        assert_eq!(edit_distance("bf61", "bf16"), 1);
        assert_eq!(edit_distance("ab", "ba"), 1);
        // No character edited twice: `ca` to `abc` is 3, not 2.
        assert_eq!(edit_distance("ca", "abc"), 3);
    }

    #[test]
    fn matches_the_definition_on_random_words() {
        // A small xorshift generator: fresh words from a 3-letter alphabet, so that edits overlap.
        let mut s = 0x9e37_79b9_7f4a_7c15u64
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64);
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for _ in 0..500 {
            let mut word = |n: u64| -> String {
                let len = (next() % n) as usize;
                (0..len)
                    .map(|_| ['a', 'b', 'é'][(next() % 3) as usize])
                    .collect()
            };
            let (a, b) = (word(7), word(7));
            let (ca, cb): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
            assert_eq!(
                edit_distance(&a, &b),
                recursive_distance(&ca, &cb),
                "{a:?} {b:?}"
            );
            assert_eq!(edit_distance(&a, &b), edit_distance(&b, &a), "{a:?} {b:?}");
        }
    }

    #[test]
    fn suggests_close_names_only() {
        let ops = ["attention_fwd", "gemm", "rmsnorm_fwd", "rmsnorm_bwd"];
        assert_eq!(closest("gemn", ops), Some("gemm"));
        assert_eq!(closest("GEMM", ops), Some("gemm"));
        assert_eq!(closest("rmsnorm_fw", ops), Some("rmsnorm_fwd"));
        assert_eq!(closest("atention_fwd", ops), Some("attention_fwd"));
        assert_eq!(closest("softmax", ops), None);
        assert_eq!(closest("gemm", ops), None);
        assert_eq!(closest("x", ["y"]), Some("y"));
        assert_eq!(closest("ab", ["cd"]), None);
        let targets = ["sm_80", "sm_90a", "sm_100a", "sm_120a"];
        assert_eq!(closest("sm90a", targets), Some("sm_90a"));
        assert_eq!(closest("sm_90", targets), Some("sm_90a"));
        assert_eq!(closest("sm_80a", targets), Some("sm_80"));
        assert_eq!(closest("cuda", targets), None);
        assert_eq!(closest("HEADDIM", ["DTYPE", "HEAD_DIM"]), Some("HEAD_DIM"));
        assert_eq!(closest("bf61", ["f32", "f16", "bf16"]), Some("bf16"));
    }

    #[test]
    fn ties_go_to_the_earliest_candidate() {
        assert_eq!(
            closest("rmsnorm_xwd", ["rmsnorm_fwd", "rmsnorm_bwd"]),
            Some("rmsnorm_fwd")
        );
        assert_eq!(
            closest("rmsnorm_xwd", ["rmsnorm_bwd", "rmsnorm_fwd"]),
            Some("rmsnorm_bwd")
        );
    }

    #[test]
    fn the_message_tail() {
        assert_eq!(did_you_mean("gemn", ["gemm"]), "; did you mean `gemm`?");
        assert_eq!(did_you_mean("zzzzzz", ["gemm"]), "");
    }
}
