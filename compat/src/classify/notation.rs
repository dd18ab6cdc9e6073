//! Reading the short type notation of `snapshots/surface.json` (`string`, `Name`, `T[]`,
//! `map<T>`, `"a" | "b"`, `T | null`, `{a: T; b?: U}`, `string /pattern/`, ...).
//!
//! The classifier needs two things from a notation: the names it mentions (for reachability) and,
//! when it is a union of string literals, its values (to say which values came or went). Whether
//! two notations differ at all is a plain string comparison.

/// One piece of a notation: a string literal (quotes and escapes included), an identifier, or
/// any other single character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    Literal(&'a str),
    Name(&'a str),
    Other(char),
}

/// Splits `notation` into [`Token`]s with their end offsets.
fn tokens(notation: &str) -> impl Iterator<Item = (Token<'_>, usize)> + '_ {
    let mut chars = notation.char_indices().peekable();
    std::iter::from_fn(move || {
        let (start, c) = chars.next()?;
        let mut end = start + c.len_utf8();
        if c == '"' {
            // A JSON string literal, escapes included.
            while let Some((i, c)) = chars.next() {
                end = i + c.len_utf8();
                match c {
                    '\\' => {
                        if let Some((i, c)) = chars.next() {
                            end = i + c.len_utf8();
                        }
                    }
                    '"' => break,
                    _ => {}
                }
            }
            Some((Token::Literal(&notation[start..end]), end))
        } else if c.is_alphabetic() || c == '_' {
            while let Some(&(i, c)) = chars.peek() {
                if !(c.is_alphanumeric() || c == '_') {
                    break;
                }
                end = i + c.len_utf8();
                chars.next();
            }
            Some((Token::Name(&notation[start..end]), end))
        } else {
            Some((Token::Other(c), end))
        }
    })
}

/// Every identifier in `notation` outside string literals, in order. The caller keeps those that
/// name a definition. Identifiers inside a `/pattern/` are returned too: a pattern that happens to
/// spell a definition's name only widens reachability, which errs on the safe side.
pub fn identifiers(notation: &str) -> Vec<&str> {
    tokens(notation)
        .filter_map(|(token, _)| match token {
            Token::Name(name) => Some(name),
            _ => None,
        })
        .collect()
}

/// `notation` with every name that `alias` resolves replaced by what it stands for, recursively
/// (a few levels deep, against cycles), bracketed as `codegen/src/surface.rs` would write it
/// inline (`(A | B)[]`). Two notations that expand alike describe the same wire type.
pub fn expand<'a>(notation: &str, alias: &dyn Fn(&str) -> Option<&'a str>) -> String {
    expand_at(notation, alias, 8)
}

fn expand_at<'a>(notation: &str, alias: &dyn Fn(&str) -> Option<&'a str>, depth: u32) -> String {
    let mut out = String::with_capacity(notation.len());
    for (token, end) in tokens(notation) {
        match token {
            Token::Literal(literal) => out.push_str(literal),
            Token::Other(c) => out.push(c),
            Token::Name(name) => match alias(name).filter(|_| depth > 0) {
                Some(target) => {
                    let inner = expand_at(target, alias, depth - 1);
                    if notation[end..].starts_with("[]") && inner.contains(' ') {
                        out.push('(');
                        out.push_str(&inner);
                        out.push(')');
                    } else {
                        out.push_str(&inner);
                    }
                }
                None => out.push_str(name),
            },
        }
    }
    out
}

/// The values of a union of string literals (`"a" | "b"`, or a single `"a"`), in written order;
/// `None` when `notation` is anything else.
pub fn string_literals(notation: &str) -> Option<Vec<String>> {
    let mut values = Vec::new();
    let mut rest = notation.trim();
    loop {
        let body = rest.strip_prefix('"')?;
        let mut escaped = false;
        let mut close = None;
        for (i, c) in body.char_indices() {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => {
                    close = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let close = close?;
        let literal = &rest[..close + 2];
        values.push(serde_json::from_str::<String>(literal).ok()?);
        rest = &rest[close + 2..];
        if rest.is_empty() {
            return Some(values);
        }
        rest = rest.strip_prefix(" | ")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_skip_literals() {
        assert_eq!(identifiers("\"AgentAction\""), Vec::<&str>::new());
        assert_eq!(identifiers("SessionModelOverride | null"), ["SessionModelOverride", "null"]);
        assert_eq!(identifiers("{a: Foo; b?: map<Bar_2>}"), ["a", "Foo", "b", "map", "Bar_2"]);
        assert_eq!(identifiers("\"x\\\"Y\" | Z[]"), ["Z"]);
    }

    #[test]
    fn aliases_expand_inline() {
        let alias = |name: &str| match name {
            "Thoroughness" => Some("\"deep\" | \"quick\""),
            "Bytes" => Some("bytes"),
            "Loop" => Some("Loop[]"),
            _ => None,
        };
        assert_eq!(expand("Thoroughness | null", &alias), "\"deep\" | \"quick\" | null");
        assert_eq!(expand("Thoroughness[]", &alias), "(\"deep\" | \"quick\")[]");
        assert_eq!(expand("{a: Bytes; b?: map<Other>}", &alias), "{a: bytes; b?: map<Other>}");
        assert_eq!(expand("\"Bytes\"", &alias), "\"Bytes\"");
        assert!(expand("Loop", &alias).starts_with("Loop[][]"));
    }

    #[test]
    fn literal_unions() {
        assert_eq!(string_literals("\"a\" | \"b c\""), Some(vec!["a".to_owned(), "b c".to_owned()]));
        assert_eq!(string_literals("\"change\""), Some(vec!["change".to_owned()]));
        assert_eq!(string_literals("\"a | b\" | \"q\\\"\""), Some(vec!["a | b".to_owned(), "q\"".to_owned()]));
        assert_eq!(string_literals("\"a\" | null"), None);
        assert_eq!(string_literals("string"), None);
        assert_eq!(string_literals("\"a\" | JsonSchemaTypeName[]"), None);
    }
}
