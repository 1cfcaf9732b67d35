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
    if s.is_empty() {
        return false;
    }
    let mut tokens = s.split('.').peekable();
    while let Some(t) = tokens.next() {
        if t.is_empty() {
            return false;
        }
        if t == ">" && tokens.peek().is_some() {
            return false;
        }
        if t.bytes()
            .any(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n' | 0x0c))
        {
            return false;
        }
    }
    true
}

/// Whether `s` is a valid literal subject (PUB in pedantic mode): valid and
/// without wildcard tokens.
pub fn is_valid_literal_subject(s: &str) -> bool {
    is_valid_subject(s) && !s.split('.').any(|t| t == "*" || t == ">")
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
