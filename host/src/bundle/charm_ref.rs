//! A bundle's `charm:`: a module file, or a charm's name as Charmhub and the charm store
//! spell it, looked up in charm directories.

use std::path::{Path, PathBuf};

/// What a `charm:` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CharmRef {
    /// A module file, relative to the bundle file that names it: `./discourse.wasm`,
    /// `build/discourse.wasm`, `/opt/charms/discourse.wasm`.
    Path(PathBuf),
    /// A charm's name: `postgresql-k8s`, `ch:postgresql-k8s`, `cs:~charmers/postgresql-k8s-12`,
    /// `cs:bionic/mysql`, `local:focal/wordpress`.
    Name {
        /// The name, which the module file is named after (`<name>.wasm`).
        name: String,
        /// The charm store's owner (`~charmers`), without the tilde.
        owner: Option<String>,
        /// The series or architecture parts of the URL (`bionic`, `amd64/focal`).
        series: Option<String>,
        /// The revision at the end of the URL (`-12`).
        revision: Option<u64>,
    },
}

/// Whether `name` is a valid Juju charm or application name: lowercase letters and digits
/// in parts joined by `-`, starting with a letter, no part all digits.
pub fn is_valid_name(name: &str) -> bool {
    let mut parts = name.split('-');
    let first_ok = parts
        .next()
        .is_some_and(|p| p.starts_with(|c: char| c.is_ascii_lowercase()));
    first_ok
        && name.split('-').all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
        && parts.all(|p| p.bytes().any(|b| b.is_ascii_lowercase()))
}

/// `path` under `base`, without the `.` parts of `./x.wasm`.
pub(crate) fn joined(base: &Path, path: &Path) -> PathBuf {
    base.join(path).components().collect()
}

impl CharmRef {
    /// Reads a `charm:` value. A path starts with `.` or `/` or ends with `.wasm`; anything
    /// else is a name.
    pub fn parse(text: &str) -> Result<CharmRef, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("`charm` is empty".into());
        }
        if text.starts_with(['.', '/']) || text.ends_with(".wasm") {
            return Ok(CharmRef::Path(PathBuf::from(text)));
        }
        let rest = ["cs:", "ch:", "local:"]
            .iter()
            .find_map(|p| text.strip_prefix(p))
            .unwrap_or(text);
        let mut parts: Vec<&str> = rest.split('/').collect();
        let owner = match parts.first() {
            Some(first) if first.starts_with('~') => {
                let owner = first[1..].to_string();
                parts.remove(0);
                Some(owner)
            }
            _ => None,
        };
        let last = parts.pop().unwrap_or_default();
        let series = (!parts.is_empty()).then(|| parts.join("/"));
        // A name's parts each have a letter, so a trailing all-digit part is a revision.
        let (name, revision) = match last.rsplit_once('-') {
            Some((name, rev)) if !rev.is_empty() && rev.bytes().all(|b| b.is_ascii_digit()) => {
                (name, rev.parse().ok())
            }
            _ => (last, None),
        };
        if !is_valid_name(name) {
            return Err(format!(
                "charm {text:?} is neither a charm name (such as `postgresql-k8s` or `ch:postgresql-k8s`) nor a module file (start a path with ./ or /, or end it with .wasm)"
            ));
        }
        Ok(CharmRef::Name {
            name: name.to_string(),
            owner,
            series,
            revision,
        })
    }

    /// The module file this names: a path joined to `base` (the bundle file's directory), or
    /// `<name>.wasm` in the first of `dirs` that has it.
    pub fn resolve(&self, base: &Path, dirs: &[PathBuf]) -> Option<PathBuf> {
        match self {
            CharmRef::Path(path) => {
                let path = joined(base, path);
                path.is_file().then_some(path)
            }
            CharmRef::Name { name, .. } => dirs
                .iter()
                .map(|dir| dir.join(format!("{name}.wasm")))
                .find(|path| path.is_file()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(name: &str, owner: Option<&str>, series: Option<&str>, rev: Option<u64>) -> CharmRef {
        CharmRef::Name {
            name: name.into(),
            owner: owner.map(Into::into),
            series: series.map(Into::into),
            revision: rev,
        }
    }

    #[test]
    fn reads_names_in_every_spelling() {
        let cases = [
            ("postgresql-k8s", name("postgresql-k8s", None, None, None)),
            (
                "ch:postgresql-k8s",
                name("postgresql-k8s", None, None, None),
            ),
            (
                "cs:~charmers/postgresql-k8s-12",
                name("postgresql-k8s", Some("charmers"), None, Some(12)),
            ),
            (
                "cs:bionic/mysql-58",
                name("mysql", None, Some("bionic"), Some(58)),
            ),
            (
                "ch:amd64/focal/wordpress",
                name("wordpress", None, Some("amd64/focal"), None),
            ),
            ("local:focal/kv", name("kv", None, Some("focal"), None)),
        ];
        for (text, expected) in cases {
            assert_eq!(CharmRef::parse(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn reads_paths() {
        for text in ["./d.wasm", "build/discourse.wasm", "/opt/x", "../y"] {
            assert_eq!(
                CharmRef::parse(text),
                Ok(CharmRef::Path(PathBuf::from(text))),
                "{text}"
            );
        }
    }

    #[test]
    fn refuses_what_is_neither() {
        for text in ["Postgres", "cs:~x/", "pg_sql", "-pg", "", "9lives"] {
            assert!(CharmRef::parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn resolves_a_name_in_the_first_directory_that_has_it() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::write(b.path().join("kv.wasm"), b"").unwrap();
        std::fs::write(a.path().join("other.wasm"), b"").unwrap();
        let dirs = [a.path().to_owned(), b.path().to_owned()];
        let kv = CharmRef::parse("ch:kv").unwrap();
        assert_eq!(
            kv.resolve(Path::new("."), &dirs),
            Some(b.path().join("kv.wasm"))
        );
        assert_eq!(
            CharmRef::parse("nope")
                .unwrap()
                .resolve(Path::new("."), &dirs),
            None
        );
        let path = CharmRef::parse("other.wasm").unwrap();
        assert_eq!(
            path.resolve(a.path(), &[]),
            Some(a.path().join("other.wasm"))
        );
    }
}
