//! Subject mappings (`mappings {}` at the top level for `$G`, and in an
//! account): a message a client or a leaf publishes on a subject that
//! matches a mapping's source is delivered on the destination instead, as
//! nats-server does it.
//!
//! **Destinations.** Literal tokens, `>` (the source's `>` tokens, when
//! both end in it), and functions of the source's tokens: `$N` and
//! `{{wildcard(N)}}` (the N-th `*` of the source, from 1),
//! `{{partition(P,N…)}}` (FNV-1a of the named wildcards' tokens, or of the
//! whole subject, modulo P — the same number nats-server computes),
//! `{{split(N,sep)}}`, `{{splitFromLeft(N,pos)}}`,
//! `{{splitFromRight(N,pos)}}`, `{{sliceFromLeft(N,size)}}`,
//! `{{sliceFromRight(N,size)}}` (a token becomes several) and
//! `{{random(P)}}`. A source without wildcards allows only `partition`
//! and `random`. Errors carry nats-server's texts (`invalid mapping
//! destination: …`).
//!
//! **Weights.** A source may have several destinations with weights
//! (percent, total ≤ 100); the source itself takes the rest unless it is
//! listed, in which case the rest is dropped. Destinations with a
//! `cluster` apply only in that cluster (the others fall back to the
//! unscoped ones). The first mapping (in configuration order) whose source
//! matches wins.

use std::collections::HashMap;

use crate::config::nats::MappingConfig;

/// A mapping that cannot be built (nats-server's text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MappingError(String);

fn bad(what: &str, token: &str) -> MappingError {
    MappingError(format!("invalid mapping destination: {what} in {token}"))
}

/// One token of a destination.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    /// The source's trailing `>` tokens.
    Rest,
    /// Source token at this position.
    Wildcard(usize),
    /// Hash of these source tokens (all tokens, with dots, when empty).
    Partition(u32, Vec<usize>),
    SplitFromLeft(usize, usize),
    SplitFromRight(usize, usize),
    SliceFromLeft(usize, usize),
    SliceFromRight(usize, usize),
    Split(usize, String),
    Random(u32),
}

/// A compiled source → destination rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transform {
    /// Number of source tokens before a trailing `>`.
    fixed: usize,
    parts: Vec<Part>,
}

/// A function token `{{name(args)}}`: its lower-cased name and arguments.
fn function(token: &str) -> Option<(String, Vec<String>)> {
    let inner = token.strip_prefix("{{")?.strip_suffix("}}")?.trim();
    let (name, rest) = inner.split_once('(')?;
    let args = rest.trim_end().strip_suffix(')')?;
    let args = args.split(',').map(|a| a.trim().to_string()).collect();
    Some((name.trim().to_ascii_lowercase(), args))
}

impl Transform {
    /// Builds the rewrite of subjects matching `src` into `dest`.
    pub fn new(src: &str, dest: &str) -> Result<Transform, MappingError> {
        let stoks: Vec<&str> = src.split('.').collect();
        let dtoks: Vec<&str> = dest.split('.').collect();
        let invalid = || MappingError("invalid mapping destination: invalid transform".into());
        if stoks.iter().any(|t| t.is_empty()) || dtoks.iter().any(|t| t.is_empty()) {
            return Err(invalid());
        }
        // `wild[k]` = position of the (k+1)-th `*` of the source.
        let wild: Vec<usize> = (0..stoks.len()).filter(|&i| stoks[i] == "*").collect();
        let src_fwc = stoks.last() == Some(&">");
        let dest_fwc = dtoks.last() == Some(&">");
        if stoks[..stoks.len() - 1].contains(&">")
            || dtoks[..dtoks.len() - 1].contains(&">")
            || dtoks.contains(&"*")
            || src_fwc != dest_fwc
        {
            return Err(invalid());
        }
        let any_wild = !wild.is_empty() || src_fwc;
        let index = |token: &str, arg: &str| -> Result<usize, MappingError> {
            let n: usize = arg
                .parse()
                .map_err(|_| bad("function argument is invalid or in the wrong format", token))?;
            match n.checked_sub(1).and_then(|k| wild.get(k)) {
                Some(&p) => Ok(p),
                None => Err(bad(
                    "wildcard index out of range",
                    &format!("{token}: [{n}]"),
                )),
            }
        };
        let int = |token: &str, arg: &str| -> Result<u32, MappingError> {
            arg.parse::<u32>()
                .ok()
                .filter(|&n| n <= i32::MAX as u32)
                .ok_or_else(|| bad("function argument is invalid or in the wrong format", token))
        };
        let two = |token: &str, args: &[String]| -> Result<(usize, usize), MappingError> {
            match args {
                [a, b] => Ok((index(token, a)?, int(token, b)? as usize)),
                [_] | [] => Err(bad("not enough arguments passed to the function", token)),
                _ => Err(bad("too many arguments passed to the function", token)),
            }
        };
        let mut parts = Vec::with_capacity(dtoks.len());
        for t in &dtoks {
            if *t == ">" {
                parts.push(Part::Rest);
                continue;
            }
            if let Some(n) = t.strip_prefix('$').filter(|n| !n.is_empty()) {
                if let Ok(n) = n.parse::<usize>() {
                    if !any_wild {
                        return Err(bad("wildcard index out of range", t));
                    }
                    parts.push(Part::Wildcard(index(t, &n.to_string())?));
                    continue;
                }
            }
            let Some((name, args)) = function(t) else {
                if t.starts_with("{{") && t.ends_with("}}") && t.len() > 4 {
                    return Err(bad("unknown function", t));
                }
                if t.contains(char::is_whitespace) {
                    return Err(invalid());
                }
                parts.push(Part::Literal(t.to_string()));
                continue;
            };
            let empty = args.len() == 1 && args[0].is_empty();
            let part = match name.as_str() {
                "partition" => {
                    if empty {
                        return Err(bad("not enough arguments passed to the function", t));
                    }
                    let n = int(t, &args[0])?;
                    let idx = args[1..]
                        .iter()
                        .map(|a| index(t, a))
                        .collect::<Result<Vec<_>, _>>()?;
                    Part::Partition(n, idx)
                }
                "random" => {
                    if args.len() != 1 || empty {
                        return Err(bad("not enough arguments passed to the function", t));
                    }
                    Part::Random(int(t, &args[0])?)
                }
                _ if !any_wild => return Err(bad("wildcard index out of range", t)),
                "wildcard" => match args.as_slice() {
                    [a] if !a.is_empty() => Part::Wildcard(index(t, a)?),
                    [_] => {
                        return Err(bad("not enough arguments passed to the function", t));
                    }
                    _ => return Err(bad("too many arguments passed to the function", t)),
                },
                "splitfromleft" => {
                    let (i, n) = two(t, &args)?;
                    Part::SplitFromLeft(i, n)
                }
                "splitfromright" => {
                    let (i, n) = two(t, &args)?;
                    Part::SplitFromRight(i, n)
                }
                "slicefromleft" => {
                    let (i, n) = two(t, &args)?;
                    Part::SliceFromLeft(i, n)
                }
                "slicefromright" => {
                    let (i, n) = two(t, &args)?;
                    Part::SliceFromRight(i, n)
                }
                "split" => match args.as_slice() {
                    [a, sep] => {
                        if sep.is_empty() || sep.contains(' ') || sep.contains('.') {
                            return Err(bad(
                                "function argument is invalid or in the wrong format",
                                t,
                            ));
                        }
                        Part::Split(index(t, a)?, sep.clone())
                    }
                    [_] | [] => {
                        return Err(bad("not enough arguments passed to the function", t));
                    }
                    _ => return Err(bad("too many arguments passed to the function", t)),
                },
                _ => return Err(bad("unknown function", t)),
            };
            parts.push(part);
        }
        Ok(Transform {
            fixed: if src_fwc {
                stoks.len() - 1
            } else {
                stoks.len()
            },
            parts,
        })
    }

    /// The destination of a subject (as `tokens`) matching the source.
    pub fn apply(&self, tokens: &[&str]) -> String {
        let tok = |i: usize| tokens.get(i).copied().unwrap_or("");
        let mut out: Vec<String> = Vec::with_capacity(self.parts.len() + 2);
        for p in &self.parts {
            match p {
                Part::Literal(s) => out.push(s.clone()),
                Part::Rest => {
                    out.extend(tokens.iter().skip(self.fixed).map(|t| t.to_string()));
                }
                Part::Wildcard(i) => out.push(tok(*i).to_string()),
                Part::Partition(n, idx) => {
                    let key = if idx.is_empty() {
                        tokens.join(".")
                    } else {
                        idx.iter().map(|&i| tok(i)).collect::<String>()
                    };
                    let h = if *n == 0 {
                        0
                    } else {
                        fnv1a(key.as_bytes()) % n
                    };
                    out.push(h.to_string());
                }
                Part::SplitFromLeft(i, pos) => {
                    let t = tok(*i);
                    if *pos > 0 && *pos < t.len() && t.is_char_boundary(*pos) {
                        out.push(format!("{}.{}", &t[..*pos], &t[*pos..]));
                    } else {
                        out.push(t.to_string());
                    }
                }
                Part::SplitFromRight(i, pos) => {
                    let t = tok(*i);
                    let at = t.len().wrapping_sub(*pos);
                    if *pos > 0 && *pos < t.len() && t.is_char_boundary(at) {
                        out.push(format!("{}.{}", &t[..at], &t[at..]));
                    } else {
                        out.push(t.to_string());
                    }
                }
                Part::SliceFromLeft(i, size) => out.push(slice(tok(*i), *size, false)),
                Part::SliceFromRight(i, size) => out.push(slice(tok(*i), *size, true)),
                Part::Split(i, sep) => {
                    let pieces: Vec<&str> = tok(*i)
                        .split(sep.as_str())
                        .filter(|s| !s.is_empty())
                        .collect();
                    out.push(pieces.join("."));
                }
                Part::Random(n) => {
                    let r = if *n == 0 {
                        0
                    } else {
                        rand::random::<u32>() % n
                    };
                    out.push(r.to_string());
                }
            }
        }
        out.join(".")
    }
}

/// `t` cut into pieces of `size` bytes, from the left (the last piece
/// shorter) or from the right (the first piece shorter), joined by dots;
/// unchanged when `size` is 0 or not shorter than `t`.
fn slice(t: &str, size: usize, from_right: bool) -> String {
    if size == 0 || size >= t.len() {
        return t.to_string();
    }
    let b = t.as_bytes();
    let first = if from_right { b.len() % size } else { 0 };
    let mut cuts: Vec<usize> = Vec::new();
    if first > 0 {
        cuts.push(first);
    }
    let mut at = first + size;
    while at < b.len() {
        cuts.push(at);
        at += size;
    }
    if cuts.iter().any(|&c| !t.is_char_boundary(c)) {
        return t.to_string();
    }
    let mut out = String::with_capacity(t.len() + cuts.len());
    let mut from = 0;
    for c in cuts {
        out.push_str(&t[from..c]);
        out.push('.');
        from = c;
    }
    out.push_str(&t[from..]);
    out
}

/// 32-bit FNV-1a (nats-server's partition hash).
fn fnv1a(b: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &x in b {
        h ^= u32::from(x);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Destinations with their cumulative weights (ascending): a draw below a
/// weight picks it; above the last, the message is dropped.
type Weighted = Vec<(Transform, u8)>;

#[derive(Debug, Clone)]
struct Mapping {
    src: String,
    /// `src` has wildcards.
    wild: bool,
    dests: Weighted,
    by_cluster: HashMap<String, Weighted>,
}

/// An account's mappings, in configuration order.
#[derive(Debug, Clone, Default)]
pub struct Mappings {
    list: Vec<Mapping>,
}

/// What a mapping does to a publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapped {
    /// Delivered on this subject instead.
    To(String),
    /// Dropped (the weights left a share unassigned).
    Dropped,
}

impl Mappings {
    /// Compiles `configs`; the error names the mapping (nats-server's
    /// `Error adding mapping for "src" …` texts).
    pub fn new(configs: &[MappingConfig]) -> Result<Mappings, MappingError> {
        let mut list: Vec<Mapping> = Vec::with_capacity(configs.len());
        for c in configs {
            let m = compile(c).map_err(|e| {
                MappingError(match c.dests.as_slice() {
                    [d] if d.weight == 100 && d.cluster.is_none() => format!(
                        "Error adding mapping for {:?} to {:?} : {e}",
                        c.src, d.subject
                    ),
                    _ => format!("Error adding mapping for {:?} : {e}", c.src),
                })
            })?;
            // A later mapping of the same source replaces the earlier one.
            match list.iter_mut().find(|x| x.src == m.src) {
                Some(x) => *x = m,
                None => list.push(m),
            }
        }
        Ok(Mappings { list })
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The mappings' sources, in order.
    pub fn sources(&self) -> Vec<String> {
        self.list.iter().map(|m| m.src.clone()).collect()
    }

    /// What happens to a publish on `subject`, in the cluster `cluster`
    /// names (asked only for cluster-scoped destinations); `None` when no
    /// mapping matches.
    pub fn select(
        &self,
        subject: &str,
        cluster: impl FnOnce() -> Option<String>,
    ) -> Option<Mapped> {
        let tokens: Vec<&str> = subject.split('.').collect();
        let m = self.list.iter().find(|m| {
            if m.wild {
                super::subject::matches(&m.src, subject)
            } else {
                m.src == subject
            }
        })?;
        let scoped = if m.by_cluster.is_empty() {
            None
        } else {
            cluster().and_then(|c| m.by_cluster.get(&c))
        };
        let dests = scoped.unwrap_or(&m.dests);
        let pick = match dests.as_slice() {
            [(t, 100)] => Some(t),
            _ => {
                let draw = (rand::random::<u32>() % 100) as u8;
                dests.iter().find(|(_, w)| draw < *w).map(|(t, _)| t)
            }
        };
        Some(match pick {
            Some(t) => Mapped::To(t.apply(&tokens)),
            None => Mapped::Dropped,
        })
    }
}

fn compile(c: &MappingConfig) -> Result<Mapping, MappingError> {
    if !super::subject::is_valid_subject(&c.src) {
        return Err(MappingError("invalid subject".into()));
    }
    let wild = c.src.split('.').any(|t| t == "*" || t == ">");
    let mut seen: Vec<&str> = Vec::new();
    let mut plain: Vec<(Transform, u8)> = Vec::new();
    let mut scoped: HashMap<String, Vec<(Transform, u8)>> = HashMap::new();
    let mut totals: HashMap<Option<&str>, u32> = HashMap::new();
    for d in &c.dests {
        if seen.contains(&d.subject.as_str()) {
            return Err(MappingError(format!("duplicate entry for {:?}", d.subject)));
        }
        seen.push(&d.subject);
        if d.weight > 100 {
            return Err(MappingError("individual weights need to be <= 100".into()));
        }
        let total = totals.entry(d.cluster.as_deref()).or_default();
        *total += u32::from(d.weight);
        if *total > 100 {
            return Err(MappingError("total weight needs to be <= 100".into()));
        }
        let t = Transform::new(&c.src, &d.subject)?;
        match &d.cluster {
            None => plain.push((t, d.weight)),
            Some(cl) => scoped.entry(cl.clone()).or_default().push((t, d.weight)),
        }
    }
    let listed_src = seen.contains(&c.src.as_str());
    let finish = |mut v: Vec<(Transform, u8)>| -> Result<Weighted, MappingError> {
        let total: u32 = v.iter().map(|(_, w)| u32::from(*w)).sum();
        if total != 100 && !listed_src {
            // The source itself takes the rest.
            let mut n = 0;
            let same: Vec<String> = c
                .src
                .split('.')
                .map(|t| match t {
                    "*" => {
                        n += 1;
                        format!("${n}")
                    }
                    other => other.to_string(),
                })
                .collect();
            let rest = if v.is_empty() { 100 } else { 100 - total as u8 };
            v.push((Transform::new(&c.src, &same.join("."))?, rest));
        }
        v.sort_by_key(|(_, w)| *w);
        let mut acc = 0u8;
        for (_, w) in &mut v {
            acc = acc.saturating_add(*w);
            *w = acc;
        }
        Ok(v)
    };
    let dests = finish(plain)?;
    let mut by_cluster = HashMap::new();
    for (cl, v) in scoped {
        by_cluster.insert(cl, finish(v)?);
    }
    Ok(Mapping {
        src: c.src.clone(),
        wild,
        dests,
        by_cluster,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::nats::MapDest;

    fn map(src: &str, dest: &str, subject: &str) -> String {
        let t = Transform::new(src, dest).unwrap();
        t.apply(&subject.split('.').collect::<Vec<_>>())
    }

    #[test]
    fn destinations_as_nats_server_computes_them() {
        assert_eq!(map("a.*.*", "b.$2.$1", "a.x.y"), "b.y.x");
        assert_eq!(
            map("a.*.*", "b.{{wildcard(2)}}.{{ Wildcard(1) }}", "a.x.y"),
            "b.y.x"
        );
        assert_eq!(map("a.>", "b.>", "a.x.y.z"), "b.x.y.z");
        assert_eq!(map("a.*.>", "b.$1.>", "a.x.y.z"), "b.x.y.z");
        assert_eq!(map("a", "b", "a"), "b");
        assert_eq!(map("a.*", "a.{{split(1,-)}}", "a.-x--y-"), "a.x.y");
        assert_eq!(map("a.*", "a.{{splitFromLeft(1,2)}}", "a.abcd"), "a.ab.cd");
        assert_eq!(map("a.*", "a.{{splitFromRight(1,1)}}", "a.abcd"), "a.abc.d");
        assert_eq!(
            map("a.*", "a.{{sliceFromLeft(1,3)}}", "a.abcdefgh"),
            "a.abc.def.gh"
        );
        assert_eq!(
            map("a.*", "a.{{sliceFromRight(1,3)}}", "a.abcdefgh"),
            "a.ab.cde.fgh"
        );
        assert_eq!(map("a.*", "a.{{sliceFromLeft(1,9)}}", "a.abc"), "a.abc");
        // FNV-1a test vectors; the partition hashes the wildcards' tokens
        // concatenated, or the whole subject.
        assert_eq!(fnv1a(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a(b"foobar"), 0xbf9c_f968);
        assert_eq!(
            map("a.*.*", "p.{{partition(10,1,2)}}", "a.foo.bar"),
            format!("p.{}", 0xbf9c_f968u32 % 10)
        );
        assert_eq!(
            map("a.x", "p.{{partition(7)}}", "a.x"),
            format!("p.{}", fnv1a(b"a.x") % 7)
        );
        let r: u32 = map("a", "r.{{random(3)}}", "a")[2..].parse().unwrap();
        assert!(r < 3);
    }

    #[test]
    fn bad_destinations_get_nats_server_texts() {
        for (src, dest, text) in [
            ("a.*", "b.*", "invalid mapping destination: invalid transform"),
            ("a.>", "b", "invalid mapping destination: invalid transform"),
            ("a.*", "b.$2", "invalid mapping destination: wildcard index out of range in $2: [2]"),
            ("a.*", "b.{{foo(1)}}", "invalid mapping destination: unknown function in {{foo(1)}}"),
            ("a.*", "b.{{left(1,2)}}", "invalid mapping destination: unknown function in {{left(1,2)}}"),
            ("a", "b.{{wildcard(1)}}", "invalid mapping destination: wildcard index out of range in {{wildcard(1)}}"),
            ("a.*", "b.{{wildcard()}}", "invalid mapping destination: not enough arguments passed to the function in {{wildcard()}}"),
            ("a.*", "b.{{splitFromLeft(1)}}", "invalid mapping destination: not enough arguments passed to the function in {{splitFromLeft(1)}}"),
            ("a.*", "b.{{split(1,x,y)}}", "invalid mapping destination: too many arguments passed to the function in {{split(1,x,y)}}"),
            ("a.*", "b.{{partition(x,1)}}", "invalid mapping destination: function argument is invalid or in the wrong format in {{partition(x,1)}}"),
        ] {
            assert_eq!(Transform::new(src, dest).unwrap_err().0, text, "{src} -> {dest}");
        }
    }

    fn cfg(src: &str, dests: &[(&str, u8, Option<&str>)]) -> MappingConfig {
        MappingConfig {
            src: src.into(),
            dests: dests
                .iter()
                .map(|(s, w, c)| MapDest {
                    subject: s.to_string(),
                    weight: *w,
                    cluster: c.map(str::to_string),
                })
                .collect(),
        }
    }

    #[test]
    fn weights_clusters_and_order() {
        let m = Mappings::new(&[
            cfg("w", &[("w.a", 60, None)]),
            cfg("lossy", &[("lossy", 0, None), ("lossy.kept", 30, None)]),
            cfg("c", &[("c.x", 100, Some("east")), ("c.y", 100, None)]),
            cfg("o.*", &[("first.$1", 100, None)]),
            cfg("o.x", &[("second", 100, None)]),
        ])
        .unwrap();
        let mut kept = 0;
        let (mut a, mut same) = (0, 0);
        for _ in 0..2000 {
            match m.select("w", || None).unwrap() {
                Mapped::To(s) if s == "w.a" => a += 1,
                Mapped::To(s) if s == "w" => same += 1,
                other => panic!("{other:?}"),
            }
            match m.select("lossy", || None).unwrap() {
                Mapped::To(s) if s == "lossy.kept" => kept += 1,
                Mapped::Dropped => {}
                other => panic!("{other:?}"),
            }
        }
        assert!((1000..1400).contains(&a) && a + same == 2000, "{a} {same}");
        assert!((400..800).contains(&kept), "{kept}");
        assert_eq!(
            m.select("c", || Some("east".into())),
            Some(Mapped::To("c.x".into()))
        );
        assert_eq!(
            m.select("c", || Some("west".into())),
            Some(Mapped::To("c.y".into()))
        );
        assert_eq!(m.select("c", || None), Some(Mapped::To("c.y".into())));
        // The first matching mapping wins.
        assert_eq!(m.select("o.x", || None), Some(Mapped::To("first.x".into())));
        assert_eq!(m.select("none", || None), None);
        for bad in [
            cfg("t", &[("a", 60, None), ("b", 50, None)]),
            cfg("t", &[("a", 10, None), ("a", 10, None)]),
            cfg("t", &[("a", 101, None)]),
            cfg("t..x", &[("a", 100, None)]),
        ] {
            assert!(
                Mappings::new(std::slice::from_ref(&bad)).is_err(),
                "{bad:?}"
            );
        }
        assert_eq!(
            Mappings::new(&[cfg("a.*", &[("b.*", 100, None)])]).unwrap_err().0,
            "Error adding mapping for \"a.*\" to \"b.*\" : invalid mapping destination: invalid transform"
        );
    }
}
