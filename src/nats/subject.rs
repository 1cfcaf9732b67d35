//! Subject rules shared by the parser, the sublist and permissions.
//!
//! Pure functions over `&str` (see `spec/nats.md` §1.9): tokens are separated
//! by `.`, `*` matches one token, `>` matches one or more trailing tokens, and
//! wildcards count only as whole tokens (`foo*.bar` is literal).

/// Whether `s` is a valid subject for SUB (wildcards allowed).
///
/// Non-empty, no empty token, `>` only as the last token, and no whitespace
/// inside a token.
pub fn is_valid_subject(s: &str) -> bool {
    scan(s).is_some()
}

/// Whether `s` is a valid literal subject (PUB in pedantic mode): valid and
/// without wildcard tokens.
pub fn is_valid_literal_subject(s: &str) -> bool {
    scan(s) == Some(false)
}

/// One pass over `s`: `None` when it is not a valid subject, otherwise
/// whether it holds a wildcard token. Every publish checks its subject (and
/// every ack its inbox), so this reads each byte once.
fn scan(s: &str) -> Option<bool> {
    let b = s.as_bytes();
    if b.is_empty() {
        return None;
    }
    let mut wild = false;
    let mut start = 0;
    // Wildcard tokens are one byte long: only a token of length 1 is looked at.
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'.' => {
                match i - start {
                    0 => return None,
                    1 if b[start] == b'>' => return None,
                    1 if b[start] == b'*' => wild = true,
                    _ => {}
                }
                start = i + 1;
            }
            b' ' | b'\t' | b'\r' | b'\n' | 0x0c => return None,
            _ => {}
        }
    }
    match b.len() - start {
        0 => None,
        1 if matches!(b[start], b'*' | b'>') => Some(true),
        _ => Some(wild),
    }
}

/// Whether the literal subject `subject` matches `pattern` (which may hold
/// wildcards).
pub fn matches(pattern: &str, subject: &str) -> bool {
    let mut p = pattern.split('.');
    let mut s = subject.split('.');
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Whether every subject matched by `sub` (which may hold wildcards) is also
/// matched by `pattern`. Used for subscribe permissions: `foo.*` is a subset
/// of `foo.>` and of `foo.*`, but not of `foo.bar`.
pub fn is_subset(sub: &str, pattern: &str) -> bool {
    let mut p = pattern.split('.');
    let mut s = sub.split('.');
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(t)) if t != ">" => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Whether some literal subject matches both patterns `a` and `b`.
pub fn intersects(a: &str, b: &str) -> bool {
    let mut x = a.split('.');
    let mut y = b.split('.');
    loop {
        match (x.next(), y.next()) {
            (Some(">"), Some(_)) | (Some(_), Some(">")) => return true,
            (Some("*"), Some(_)) | (Some(_), Some("*")) => {}
            (Some(s), Some(t)) if s == t => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity() {
        for ok in [
            "foo", "foo.bar", "foo.*", "foo.>", ">", "*", "foo*.bar", "ü.x",
        ] {
            assert!(is_valid_subject(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "foo.",
            ".foo",
            "foo..bar",
            "foo.>.bar",
            "fo o",
            "a\tb",
            "x.\r",
        ] {
            assert!(!is_valid_subject(bad), "{bad:?}");
        }
        assert!(is_valid_literal_subject("foo*.bar"));
        assert!(!is_valid_literal_subject("foo.*"));
        assert!(!is_valid_literal_subject("foo.>"));
        assert!(!is_valid_literal_subject("*.foo"));
        assert!(!is_valid_literal_subject(">"));
        assert!(is_valid_literal_subject("foo.>x.*y.x*"));
        assert!(!is_valid_literal_subject("foo. bar"));
        assert!(!is_valid_literal_subject(""));
    }

    /// The one-pass scan agrees with the rules stated token by token.
    #[test]
    fn scan_agrees_with_the_token_rules() {
        fn by_tokens(s: &str) -> Option<bool> {
            let toks: Vec<&str> = s.split('.').collect();
            let ok = !s.is_empty()
                && toks.iter().enumerate().all(|(i, t)| {
                    let last = i + 1 == toks.len();
                    let blank = t.bytes().any(|b| b" \t\r\n\x0c".contains(&b));
                    let misplaced_tail = *t == ">" && !last;
                    !(t.is_empty() || blank || misplaced_tail)
                });
            ok.then(|| toks.iter().any(|t| *t == "*" || *t == ">"))
        }
        let alphabet = ["a", ".", "*", ">", " ", "bc", "\t"];
        // Every string of up to 5 pieces from the alphabet.
        let mut cases = vec![String::new()];
        for _ in 0..5 {
            let mut next = Vec::new();
            for c in &cases {
                for a in alphabet {
                    next.push(format!("{c}{a}"));
                }
            }
            cases.extend(next);
            cases.sort();
            cases.dedup();
        }
        assert!(cases.len() > 10_000);
        for c in &cases {
            assert_eq!(scan(c), by_tokens(c), "{c:?}");
        }
    }

    #[test]
    fn matching() {
        assert!(matches("foo.*", "foo.bar"));
        assert!(!matches("foo.*", "foo.bar.baz"));
        assert!(matches("foo.>", "foo.bar.baz"));
        assert!(!matches("foo.>", "foo"));
        assert!(matches(">", "a"));
        assert!(matches("a.b", "a.b"));
        assert!(!matches("a.b", "a.c"));
        assert!(!matches("a", "a.b"));
    }

    #[test]
    fn subsets() {
        assert!(is_subset("foo.*", "foo.>"));
        assert!(is_subset("foo.*", "foo.*"));
        assert!(!is_subset("foo.*", "foo.bar"));
        assert!(is_subset("foo.bar", "foo.*"));
        assert!(!is_subset("foo.>", "foo.*"));
        assert!(is_subset("foo.>", "foo.>"));
        assert!(is_subset("foo.>", ">"));
    }

    #[test]
    fn intersections() {
        assert!(intersects("a.*", "*.b"));
        assert!(intersects("a.>", "a.b.c"));
        assert!(intersects(">", "x"));
        assert!(!intersects("a.*", "a.b.c"));
        assert!(!intersects("a.b", "a.c"));
        assert!(!intersects("a", "a.b"));
    }
}
