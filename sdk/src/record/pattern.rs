//! A leaf: the one pattern matcher of names and categories. A pattern is a
//! whole name (`request`), a prefix followed by `*` (`http*`), or `*`
//! alone (everything). The category filter, system tracing's category
//! rules, root sampling and both slow-slice rules match with it.

#![forbid(unsafe_code)]

/// Whether `pattern` matches `name`: `prefix*` matches every name starting
/// with `prefix` (`*` every name), any other pattern only the whole name.
#[inline]
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// Whether any of `patterns` matches `name`.
#[inline]
pub(crate) fn any_matches(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| matches(p, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_whole_names_and_everything() {
        assert!(matches("http*", "http.request"));
        assert!(matches("http*", "http"));
        assert!(!matches("http*", "htt"));
        assert!(matches("request", "request"));
        assert!(!matches("request", "requests"));
        assert!(!matches("request", "reques"));
        assert!(matches("*", "anything"));
        assert!(matches("*", ""));
        assert!(!matches("", "x"));
        // A `*` elsewhere is a plain character.
        assert!(matches("a*b", "a*b"));
        assert!(!matches("a*b", "axb"));
    }

    #[test]
    fn any_of_a_list() {
        let p = vec!["db*".to_owned(), "request".to_owned()];
        assert!(any_matches(&p, "db.query"));
        assert!(any_matches(&p, "request"));
        assert!(!any_matches(&p, "net"));
        assert!(!any_matches(&[], "net"));
    }
}
