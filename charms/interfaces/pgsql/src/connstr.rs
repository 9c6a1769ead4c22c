//! libpq connection strings in the keyword/value form the pgsql interface publishes:
//! `host=db-0 port=5432 dbname=app user=juju_app password='a b'`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a connection string does not parse. Positions are byte offsets into the string.
///
/// ```
/// use charm_pgsql::{ConnectionString, ConnectionStringError};
///
/// let err = "host=db port".parse::<ConnectionString>().unwrap_err();
/// assert_eq!(err, ConnectionStringError::MissingEquals { keyword: "port".into(), at: 12 });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionStringError {
    /// Nothing but white space.
    #[error("the connection string is empty")]
    Empty,
    /// A URI (`postgresql://...`); the interface publishes the keyword/value form.
    #[error("a URI is not a keyword/value connection string")]
    Uri,
    /// A keyword with something other than letters, digits and `_` in it, or none at all.
    #[error("at byte {at}: expected a keyword (letters, digits, `_`)")]
    BadKeyword {
        /// Where the keyword should start.
        at: usize,
    },
    /// A keyword not followed by `=`.
    #[error("at byte {at}: expected `=` after keyword {keyword:?}")]
    MissingEquals {
        /// The keyword.
        keyword: String,
        /// Where `=` was expected.
        at: usize,
    },
    /// A quoted value that never ends.
    #[error("at byte {at}: the quoted value of {keyword:?} is not closed")]
    UnterminatedQuote {
        /// The keyword.
        keyword: String,
        /// Where the value starts.
        at: usize,
    },
    /// A `port` that is not a TCP port number.
    #[error("port {value:?} is not a number from 1 to 65535")]
    BadPort {
        /// The value given.
        value: String,
    },
}

/// A libpq keyword/value connection string, parsed.
///
/// It prints with the well-known keywords first (`host`, `port`, `dbname`, `user`,
/// `password`), then the others sorted, quoting values as libpq requires; parsing what it
/// prints gives it back.
///
/// ```
/// use charm_pgsql::ConnectionString;
///
/// let master = ConnectionString::new()
///     .host("postgresql-0.postgresql-endpoints")
///     .port(5432)
///     .dbname("discourse")
///     .user("juju_discourse")
///     .password("it's secret");
/// let text = master.to_string();
/// assert_eq!(
///     text,
///     r"host=postgresql-0.postgresql-endpoints port=5432 dbname=discourse user=juju_discourse password='it\'s secret'"
/// );
/// assert_eq!(text.parse::<ConnectionString>().unwrap(), master);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionString {
    params: BTreeMap<String, String>,
}

/// The keywords printed first, in this order.
const WELL_KNOWN: [&str; 5] = ["host", "port", "dbname", "user", "password"];

impl ConnectionString {
    /// An empty connection string.
    ///
    /// ```
    /// assert_eq!(charm_pgsql::ConnectionString::new().to_string(), "");
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The same string with `keyword` set to `value`.
    ///
    /// ```
    /// let c = charm_pgsql::ConnectionString::new().param("sslmode", "require");
    /// assert_eq!(c.get("sslmode"), Some("require"));
    /// ```
    pub fn param(mut self, keyword: impl Into<String>, value: impl Into<String>) -> Self {
        self.params.insert(keyword.into(), value.into());
        self
    }

    /// The same string with this host.
    ///
    /// ```
    /// assert_eq!(charm_pgsql::ConnectionString::new().host("db-0").host_name(), Some("db-0"));
    /// ```
    pub fn host(self, host: impl Into<String>) -> Self {
        self.param("host", host)
    }

    /// The same string with this port.
    ///
    /// ```
    /// assert_eq!(charm_pgsql::ConnectionString::new().port(5433).port_number(), Some(5433));
    /// ```
    pub fn port(self, port: u16) -> Self {
        self.param("port", port.to_string())
    }

    /// The same string with this database.
    ///
    /// ```
    /// assert_eq!(charm_pgsql::ConnectionString::new().dbname("app").database(), Some("app"));
    /// ```
    pub fn dbname(self, dbname: impl Into<String>) -> Self {
        self.param("dbname", dbname)
    }

    /// The same string with this user.
    ///
    /// ```
    /// assert_eq!(charm_pgsql::ConnectionString::new().user("juju_app").get("user"), Some("juju_app"));
    /// ```
    pub fn user(self, user: impl Into<String>) -> Self {
        self.param("user", user)
    }

    /// The same string with this password.
    ///
    /// ```
    /// assert_eq!(charm_pgsql::ConnectionString::new().password("pw").get("password"), Some("pw"));
    /// ```
    pub fn password(self, password: impl Into<String>) -> Self {
        self.param("password", password)
    }

    /// One parameter's value.
    ///
    /// ```
    /// let c: charm_pgsql::ConnectionString = "host=db user=app".parse().unwrap();
    /// assert_eq!(c.get("user"), Some("app"));
    /// assert_eq!(c.get("password"), None);
    /// ```
    pub fn get(&self, keyword: &str) -> Option<&str> {
        self.params.get(keyword).map(String::as_str)
    }

    /// The host.
    ///
    /// ```
    /// let c: charm_pgsql::ConnectionString = "host=db-0".parse().unwrap();
    /// assert_eq!(c.host_name(), Some("db-0"));
    /// ```
    pub fn host_name(&self) -> Option<&str> {
        self.get("host")
    }

    /// The port; checked when parsed, so a parsed string's port is a number.
    ///
    /// ```
    /// let c: charm_pgsql::ConnectionString = "host=db port=5432".parse().unwrap();
    /// assert_eq!(c.port_number(), Some(5432));
    /// ```
    pub fn port_number(&self) -> Option<u16> {
        self.get("port").and_then(|p| p.parse().ok())
    }

    /// The database name.
    ///
    /// ```
    /// let c: charm_pgsql::ConnectionString = "dbname=app".parse().unwrap();
    /// assert_eq!(c.database(), Some("app"));
    /// ```
    pub fn database(&self) -> Option<&str> {
        self.get("dbname")
    }

    /// Every parameter, sorted by keyword.
    ///
    /// ```
    /// let c: charm_pgsql::ConnectionString = "user=u host=h".parse().unwrap();
    /// assert_eq!(c.params().keys().collect::<Vec<_>>(), ["host", "user"]);
    /// ```
    pub fn params(&self) -> &BTreeMap<String, String> {
        &self.params
    }
}

impl fmt::Display for ConnectionString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known = WELL_KNOWN
            .iter()
            .filter_map(|k| self.params.get_key_value(*k));
        let rest = self
            .params
            .iter()
            .filter(|(k, _)| !WELL_KNOWN.contains(&k.as_str()));
        for (i, (keyword, value)) in known.chain(rest).enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{keyword}=")?;
            let plain = !value.is_empty()
                && !value
                    .chars()
                    .any(|c| c.is_whitespace() || c == '\'' || c == '\\');
            if plain {
                f.write_str(value)?;
            } else {
                f.write_str("'")?;
                for c in value.chars() {
                    if c == '\'' || c == '\\' {
                        f.write_str("\\")?;
                    }
                    write!(f, "{c}")?;
                }
                f.write_str("'")?;
            }
        }
        Ok(())
    }
}

impl FromStr for ConnectionString {
    type Err = ConnectionStringError;

    /// Parses as libpq does: `keyword = value` pairs separated by white space, values
    /// single-quoted when they hold white space, `\` escaping the next character. A keyword
    /// given twice keeps its last value, as in libpq.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.trim().is_empty() {
            return Err(ConnectionStringError::Empty);
        }
        if text.trim_start().starts_with("postgres://")
            || text.trim_start().starts_with("postgresql://")
        {
            return Err(ConnectionStringError::Uri);
        }
        // Byte offsets into `text`; every character of the syntax is ASCII, so slicing at
        // them is always on a character boundary.
        let end = text.len();
        let char_at = |i: usize| text[i..].chars().next();
        let skip_space = |i: &mut usize| {
            while let Some(c) = char_at(*i).filter(|c| c.is_whitespace()) {
                *i += c.len_utf8();
            }
        };
        let mut params = BTreeMap::new();
        let mut i = 0;
        loop {
            skip_space(&mut i);
            if i == end {
                break;
            }
            let start = i;
            i += text[i..]
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                .count();
            if i == start {
                return Err(ConnectionStringError::BadKeyword { at: start });
            }
            let keyword = &text[start..i];
            skip_space(&mut i);
            match char_at(i) {
                Some('=') => i += 1,
                // `host-name=...`: the keyword itself is malformed.
                Some(_) => return Err(ConnectionStringError::BadKeyword { at: start }),
                None => {
                    return Err(ConnectionStringError::MissingEquals {
                        keyword: keyword.to_string(),
                        at: end,
                    });
                }
            }
            skip_space(&mut i);
            let mut value = String::new();
            if char_at(i) == Some('\'') {
                let opened = i;
                i += 1;
                loop {
                    match char_at(i) {
                        None => {
                            return Err(ConnectionStringError::UnterminatedQuote {
                                keyword: keyword.to_string(),
                                at: opened,
                            });
                        }
                        Some('\'') => {
                            i += 1;
                            break;
                        }
                        Some('\\') if i + 1 < end => {
                            let escaped = char_at(i + 1).expect("a character follows");
                            value.push(escaped);
                            i += 1 + escaped.len_utf8();
                        }
                        Some(c) => {
                            value.push(c);
                            i += c.len_utf8();
                        }
                    }
                }
            } else {
                let run = text[i..]
                    .find(char::is_whitespace)
                    .map_or(end, |len| i + len);
                if !text[i..run].contains('\\') {
                    // The common case: the value is the run of text as it stands.
                    value.push_str(&text[i..run]);
                    i = run;
                }
                while let Some(mut c) = char_at(i).filter(|c| !c.is_whitespace()) {
                    if c == '\\' && i + 1 < end {
                        i += 1;
                        c = char_at(i).expect("a character follows");
                    }
                    value.push(c);
                    i += c.len_utf8();
                }
            }
            if keyword == "port" && value.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(ConnectionStringError::BadPort { value });
            }
            params.insert(keyword.to_string(), value);
        }
        Ok(ConnectionString { params })
    }
}

impl Serialize for ConnectionString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ConnectionString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_what_the_seed_charm_published() {
        let c: ConnectionString =
            "host=postgresql-0.postgresql-endpoints port=5432 dbname=discourse user=discourse password=0123abcd"
                .parse()
                .unwrap();
        assert_eq!(c.host_name(), Some("postgresql-0.postgresql-endpoints"));
        assert_eq!(c.port_number(), Some(5432));
        assert_eq!(c.database(), Some("discourse"));
        assert_eq!(c.get("password"), Some("0123abcd"));
    }

    #[test]
    fn spaces_around_equals_and_quotes_and_escapes() {
        let c: ConnectionString = r"host = db  password='a \'b\' \\ c' user=x\ y"
            .parse()
            .unwrap();
        assert_eq!(c.get("host"), Some("db"));
        assert_eq!(c.get("password"), Some(r"a 'b' \ c"));
        assert_eq!(c.get("user"), Some("x y"));
    }

    #[test]
    fn malformed_strings_say_where() {
        let err = |s: &str| s.parse::<ConnectionString>().unwrap_err();
        assert_eq!(err("   "), ConnectionStringError::Empty);
        assert_eq!(err("postgresql://u@h/db"), ConnectionStringError::Uri);
        assert_eq!(
            err("host=db =x"),
            ConnectionStringError::BadKeyword { at: 8 }
        );
        assert_eq!(
            err("host-name=db"),
            ConnectionStringError::BadKeyword { at: 0 }
        );
        assert_eq!(
            err("host=db password='abc"),
            ConnectionStringError::UnterminatedQuote {
                keyword: "password".into(),
                at: 17
            }
        );
        assert_eq!(
            err("port=http"),
            ConnectionStringError::BadPort {
                value: "http".into()
            }
        );
        assert_eq!(
            err("port=0"),
            ConnectionStringError::BadPort { value: "0".into() }
        );
        assert_eq!(
            err("port=70000"),
            ConnectionStringError::BadPort {
                value: "70000".into()
            }
        );
    }

    #[test]
    fn a_repeated_keyword_keeps_its_last_value() {
        let c: ConnectionString = "host=a host=b".parse().unwrap();
        assert_eq!(c.host_name(), Some("b"));
    }

    #[test]
    fn serde_uses_the_text_form() {
        let c = ConnectionString::new().host("db").port(5432);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(json, r#""host=db port=5432""#);
        assert_eq!(serde_json::from_str::<ConnectionString>(&json).unwrap(), c);
        assert!(serde_json::from_str::<ConnectionString>(r#""port=x""#).is_err());
    }

    /// The first parser, kept as the reference: a vector of every character and its offset.
    fn reference_parse(text: &str) -> Result<BTreeMap<String, String>, ConnectionStringError> {
        if text.trim().is_empty() {
            return Err(ConnectionStringError::Empty);
        }
        if text.trim_start().starts_with("postgres://")
            || text.trim_start().starts_with("postgresql://")
        {
            return Err(ConnectionStringError::Uri);
        }
        let bytes: Vec<(usize, char)> = text.char_indices().collect();
        let at = |i: usize| bytes.get(i).map_or(text.len(), |(pos, _)| *pos);
        let mut params = BTreeMap::new();
        let mut i = 0;
        let skip_space = |i: &mut usize| {
            while *i < bytes.len() && bytes[*i].1.is_whitespace() {
                *i += 1;
            }
        };
        loop {
            skip_space(&mut i);
            if i == bytes.len() {
                break;
            }
            let start = i;
            while i < bytes.len() && (bytes[i].1.is_ascii_alphanumeric() || bytes[i].1 == '_') {
                i += 1;
            }
            if i == start {
                return Err(ConnectionStringError::BadKeyword { at: at(start) });
            }
            let keyword: String = bytes[start..i].iter().map(|(_, c)| c).collect();
            skip_space(&mut i);
            if i == bytes.len() || bytes[i].1 != '=' {
                if i < bytes.len() && !bytes[i].1.is_whitespace() && bytes[i].1 != '=' {
                    // `host-name=...`: the keyword itself is malformed.
                    let after = bytes[i].1;
                    if !after.is_whitespace() {
                        return Err(ConnectionStringError::BadKeyword { at: at(start) });
                    }
                }
                return Err(ConnectionStringError::MissingEquals { keyword, at: at(i) });
            }
            i += 1;
            skip_space(&mut i);
            let mut value = String::new();
            if i < bytes.len() && bytes[i].1 == '\'' {
                let opened = i;
                i += 1;
                loop {
                    match bytes.get(i).map(|(_, c)| *c) {
                        None => {
                            return Err(ConnectionStringError::UnterminatedQuote {
                                keyword,
                                at: at(opened),
                            });
                        }
                        Some('\'') => {
                            i += 1;
                            break;
                        }
                        Some('\\') if i + 1 < bytes.len() => {
                            value.push(bytes[i + 1].1);
                            i += 2;
                        }
                        Some(c) => {
                            value.push(c);
                            i += 1;
                        }
                    }
                }
            } else {
                while i < bytes.len() && !bytes[i].1.is_whitespace() {
                    if bytes[i].1 == '\\' && i + 1 < bytes.len() {
                        i += 1;
                    }
                    value.push(bytes[i].1);
                    i += 1;
                }
            }
            if keyword == "port" && value.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(ConnectionStringError::BadPort { value });
            }
            params.insert(keyword, value);
        }
        Ok(params)
    }

    proptest! {
        /// The parser gives what the reference gives, parameters or error, on any text.
        #[test]
        fn parses_as_the_reference_does(
            text in r"([ \t\x{3000}]{0,2}[a-z_\x{e9}-]{0,3} ?=? ?('|\\|[a-z\x{e9}\x{3000} =]){0,8}){1,5}"
        ) {
            let ours = text.parse::<ConnectionString>().map(|c| c.params);
            prop_assert_eq!(ours, reference_parse(&text));
        }

        /// Whatever the values hold, printing then parsing gives the same parameters.
        #[test]
        fn printing_then_parsing_round_trips(
            params in proptest::collection::btree_map("[a-z_][a-z0-9_]{0,8}", "\\PC{0,12}", 1..6),
            port in proptest::option::of(1u16..),
        ) {
            let mut c = ConnectionString::new();
            for (k, v) in params {
                if k != "port" {
                    c = c.param(k, v);
                }
            }
            if let Some(port) = port {
                c = c.port(port);
            }
            let parsed: ConnectionString = c.to_string().parse().unwrap();
            prop_assert_eq!(parsed, c);
        }

        /// Any text either is refused with an error (never a panic) or parses into a string
        /// that prints and parses back to itself.
        #[test]
        fn any_text_parses_or_is_refused(text in "[ a-z=_'\\\\0-9]{0,40}") {
            if let Ok(c) = text.parse::<ConnectionString>() {
                prop_assert_eq!(c.to_string().parse::<ConnectionString>().unwrap(), c);
            }
        }
    }
}
