//! libpq connection strings in the keyword/value form the pgsql interface publishes:
//! `host=db-0 port=5432 dbname=app user=juju_app password='a b'`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

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

/// A libpq keyword/value connection string.
///
/// A string built here prints with the well-known keywords first (`host`, `port`, `dbname`,
/// `user`, `password`), then the others sorted, quoting values as libpq requires; parsing
/// what it prints gives it back. A string parsed from text prints as that text (trimmed):
/// what PostgreSQL published is what the charm passes on. Parsing checks the whole syntax
/// at once but builds the parameters only when one is first asked for, so a hook that
/// compares or passes a connection string on never takes it apart.
///
/// Two strings are equal when their parameters are, however each is spelled.
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
///
/// let published: ConnectionString = "user=juju_discourse host=pg-0".parse().unwrap();
/// assert_eq!(published.to_string(), "user=juju_discourse host=pg-0");
/// assert_eq!(published, ConnectionString::new().host("pg-0").user("juju_discourse"));
/// ```
#[derive(Clone)]
pub struct ConnectionString {
    /// The text: as parsed, or printed from `params` when first asked for.
    text: OnceLock<String>,
    /// The parameters: as built, or read from `text` when first asked for.
    params: OnceLock<BTreeMap<String, String>>,
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
        Self::from_params(BTreeMap::new())
    }

    fn from_params(params: BTreeMap<String, String>) -> Self {
        ConnectionString {
            text: OnceLock::new(),
            params: OnceLock::from(params),
        }
    }

    /// The same string with `keyword` set to `value`.
    ///
    /// ```
    /// let c = charm_pgsql::ConnectionString::new().param("sslmode", "require");
    /// assert_eq!(c.get("sslmode"), Some("require"));
    /// ```
    pub fn param(mut self, keyword: impl Into<String>, value: impl Into<String>) -> Self {
        self.params();
        let mut params = self.params.take().unwrap_or_default();
        params.insert(keyword.into(), value.into());
        Self::from_params(params)
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
        self.params().get(keyword).map(String::as_str)
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
        self.params.get_or_init(|| {
            let text = self.text.get().map_or("", String::as_str);
            let mut params = BTreeMap::new();
            // The text was checked when parsed: scanning it again cannot fail.
            let _ = scan(text, |keyword, value| {
                params.insert(keyword.to_string(), unescape(value).into_owned());
            });
            params
        })
    }

    /// The string as text: as it was parsed, or printed as [`Display`](fmt::Display) does.
    ///
    /// ```
    /// let c: charm_pgsql::ConnectionString = " port=5432  host=db ".parse().unwrap();
    /// assert_eq!(c.as_str(), "port=5432  host=db");
    /// ```
    pub fn as_str(&self) -> &str {
        self.text.get_or_init(|| {
            let params = self
                .params
                .get()
                .expect("a string without text has parameters");
            print(params)
        })
    }
}

impl Default for ConnectionString {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for ConnectionString {
    fn eq(&self, other: &Self) -> bool {
        match (self.text.get(), other.text.get()) {
            // The same text is the same parameters, without reading them.
            (Some(a), Some(b)) if a == b => true,
            _ => self.params() == other.params(),
        }
    }
}

impl Eq for ConnectionString {}

impl fmt::Debug for ConnectionString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ConnectionString")
            .field(&self.as_str())
            .finish()
    }
}

impl fmt::Display for ConnectionString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Prints parameters as libpq reads them: the well-known keywords first.
fn print(params: &BTreeMap<String, String>) -> String {
    let known = WELL_KNOWN.iter().filter_map(|k| params.get_key_value(*k));
    let rest = params
        .iter()
        .filter(|(k, _)| !WELL_KNOWN.contains(&k.as_str()));
    let mut out = String::new();
    for (i, (keyword, value)) in known.chain(rest).enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(keyword);
        out.push('=');
        let plain = !value.is_empty()
            && !value
                .chars()
                .any(|c| c.is_whitespace() || c == '\'' || c == '\\');
        if plain {
            out.push_str(value);
        } else {
            out.push('\'');
            for c in value.chars() {
                if c == '\'' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('\'');
        }
    }
    out
}

/// A value as written (between its quotes, or its unquoted run) with `\` escapes removed.
fn unescape(written: &str) -> Cow<'_, str> {
    if !written.contains('\\') {
        return Cow::Borrowed(written);
    }
    let mut value = String::with_capacity(written.len());
    let mut chars = written.chars();
    while let Some(c) = chars.next() {
        // A `\` escapes the next character; one at the very end of the text stands for
        // itself.
        match c {
            '\\' => value.push(chars.next().unwrap_or('\\')),
            c => value.push(c),
        }
    }
    Cow::Owned(value)
}

/// Checks `text`'s syntax as libpq reads it, handing each `keyword = value` pair in order to
/// `pair`, the value as written (see [`unescape`]). Returns where the last value ends (white
/// space after it means nothing). Allocates nothing unless it refuses.
fn scan<'a>(
    text: &'a str,
    mut pair: impl FnMut(&'a str, &'a str),
) -> Result<usize, ConnectionStringError> {
    // Trimmed once: white space is looked for character by character.
    let rest = text.trim_start();
    if rest.is_empty() {
        return Err(ConnectionStringError::Empty);
    }
    if rest.starts_with("postgres://") || rest.starts_with("postgresql://") {
        return Err(ConnectionStringError::Uri);
    }
    // Byte offsets into `text`, always on a character boundary: the syntax's characters are
    // all ASCII, and a step over anything else takes its whole UTF-8 sequence.
    let bytes = text.as_bytes();
    let end = text.len();
    let skip_space = |i: &mut usize| {
        while let Some(n) = space_at(text, *i) {
            *i += n;
        }
    };
    let mut i = end - rest.len();
    let mut last = 0;
    loop {
        skip_space(&mut i);
        if i == end {
            return Ok(last);
        }
        let start = i;
        i += bytes[i..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
            .count();
        if i == start {
            return Err(ConnectionStringError::BadKeyword { at: start });
        }
        let keyword = &text[start..i];
        skip_space(&mut i);
        match bytes.get(i) {
            Some(b'=') => i += 1,
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
        let written = if bytes.get(i) == Some(&b'\'') {
            let opened = i;
            i += 1;
            loop {
                match bytes.get(i) {
                    None => {
                        return Err(ConnectionStringError::UnterminatedQuote {
                            keyword: keyword.to_string(),
                            at: opened,
                        });
                    }
                    Some(b'\'') => {
                        i += 1;
                        break &text[opened + 1..i - 1];
                    }
                    Some(b'\\') if i + 1 < end => i += 1 + utf8_len(bytes[i + 1]),
                    Some(&b) => i += utf8_len(b),
                }
            }
        } else {
            let from = i;
            while i < end {
                match bytes[i] {
                    b'\\' if i + 1 < end => i += 1 + utf8_len(bytes[i + 1]),
                    // Printable ASCII other than the space: the usual byte, decided here.
                    b'!'..=b'~' => i += 1,
                    _ if space_at(text, i).is_some() => break,
                    b => i += utf8_len(b),
                }
            }
            &text[from..i]
        };
        if keyword == "port" {
            let value = unescape(written);
            if value.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(ConnectionStringError::BadPort {
                    value: value.into_owned(),
                });
            }
        }
        pair(keyword, written);
        last = i;
    }
}

/// The length of the white space character at byte `i` of `text` (a character boundary),
/// if there is one: white space as [`char::is_whitespace`] has it, looked up without
/// decoding when the byte is ASCII.
#[inline]
fn space_at(text: &str, i: usize) -> Option<usize> {
    match *text.as_bytes().get(i)? {
        // U+000B counts, unlike for `u8::is_ascii_whitespace`.
        b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' => Some(1),
        b if b < 0x80 => None,
        _ => text[i..]
            .chars()
            .next()
            .filter(|c| c.is_whitespace())
            .map(char::len_utf8),
    }
}

/// The length of the UTF-8 sequence that `first` begins.
#[inline]
fn utf8_len(first: u8) -> usize {
    match first {
        0..0xc0 => 1,
        0xc0..0xe0 => 2,
        0xe0..0xf0 => 3,
        _ => 4,
    }
}

impl FromStr for ConnectionString {
    type Err = ConnectionStringError;

    /// Parses as libpq does: `keyword = value` pairs separated by white space, values
    /// single-quoted when they hold white space, `\` escaping the next character. A keyword
    /// given twice keeps its last value, as in libpq.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let end = scan(text, |_, _| {})?;
        let start = text.len() - text.trim_start().len();
        Ok(ConnectionString {
            // Not `trim`: a value may end in an escaped space.
            text: OnceLock::from(text[start..end].to_string()),
            params: OnceLock::new(),
        })
    }
}

impl Serialize for ConnectionString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
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
    fn a_parsed_string_prints_as_published() {
        let c: ConnectionString = "\t user=u  host=db \n".parse().unwrap();
        assert_eq!(c.to_string(), "user=u  host=db");
        // White space that ends a value is kept: it is part of the value.
        let c: ConnectionString = r"user=x\  ".parse().unwrap();
        assert_eq!(c.as_str(), r"user=x\ ");
        assert_eq!(c.get("user"), Some("x "));
        // Changing a parameter prints the whole string as built.
        let c = c.host("db");
        assert_eq!(c.as_str(), r"host=db user='x '");
    }

    #[test]
    fn equal_parameters_are_equal_strings_however_spelled() {
        let a: ConnectionString = "host=db port=5432".parse().unwrap();
        let b: ConnectionString = "port = '5432'   host=db".parse().unwrap();
        assert_eq!(a, b);
        assert_eq!(a, ConnectionString::new().host("db").port(5432));
        assert_ne!(a, "host=db port=5433".parse::<ConnectionString>().unwrap());
        assert_ne!(a, ConnectionString::new().host("db"));
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
            text in r"([ \t\x0b\x{85}\x{3000}]{0,2}[a-z_\x{e9}-]{0,3} ?=? ?('|\\|[a-z\x{e9}\x{3000}\x{85} =]){0,8}){1,5}"
        ) {
            let ours = text.parse::<ConnectionString>().map(|c| c.params().clone());
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
                prop_assert_eq!(&c.to_string().parse::<ConnectionString>().unwrap(), &c);
                // Printed as built from its parameters, it still reads back the same.
                let built = c
                    .params()
                    .iter()
                    .fold(ConnectionString::new(), |b, (k, v)| b.param(k.clone(), v.clone()));
                prop_assert_eq!(built.to_string().parse::<ConnectionString>().unwrap(), c);
            }
        }
    }
}
