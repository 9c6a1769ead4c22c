//! A relation's remote unit names, kept as the host sends them: one string.

use std::fmt;
use std::ops::Index;
use std::sync::{Arc, OnceLock};

/// The remote units of a relation, in unit order (by application, then by number:
/// `db/2` before `db/10`): a list of names that costs one string however many units there
/// are.
///
/// A relation of 10,000 units comes from the host as one string of names; it stays one
/// string here, so a hook that only counts the units, looks one up or joins them never
/// makes 10,000 strings. It reads like a slice of names: iterate it, index it, ask its
/// length.
///
/// ```
/// use charm_sdk::RemoteUnits;
///
/// let units = RemoteUnits::from_names(["db/0", "db/1", "db/2"]);
/// assert_eq!(units.len(), 3);
/// assert_eq!(&units[1], "db/1");
/// assert!(units.contains("db/2"));
/// assert_eq!(units.join(" "), "db/0 db/1 db/2");
/// let names: Vec<&str> = units.iter().collect();
/// assert_eq!(names, ["db/0", "db/1", "db/2"]);
/// ```
#[derive(Clone, Default)]
pub struct RemoteUnits(Arc<Packed>);

#[derive(Default)]
struct Packed {
    /// Every name followed by `\n` (unit names never hold one).
    names: Box<str>,
    /// Where each name starts in `names`: found the first time a name is asked for by
    /// position or the names are counted, and shared by every copy of the list.
    starts: OnceLock<Box<[u32]>>,
}

impl RemoteUnits {
    /// The list of these names in unit order, each once.
    ///
    /// ```
    /// let units = charm_sdk::RemoteUnits::from_names(["app/1", "app/0", "app/1"]);
    /// assert_eq!(units.to_vec(), ["app/0", "app/1"]);
    /// ```
    pub fn from_names<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Self {
        let mut names: Vec<S> = names.into_iter().collect();
        names.sort_by(|a, b| unit_order(a.as_ref(), b.as_ref()));
        names.dedup_by(|a, b| a.as_ref() == b.as_ref());
        let mut packed = String::new();
        for name in names {
            packed.push_str(name.as_ref());
            packed.push('\n');
        }
        Self::from_packed(packed)
    }

    /// From the host's form: each name followed by a newline.
    pub(crate) fn from_packed(names: impl Into<Box<str>>) -> Self {
        RemoteUnits(Arc::new(Packed {
            names: names.into(),
            starts: OnceLock::new(),
        }))
    }

    fn starts(&self) -> &[u32] {
        self.0.starts.get_or_init(|| name_starts(&self.0.names))
    }

    /// How many units.
    ///
    /// ```
    /// assert_eq!(charm_sdk::RemoteUnits::from_names(["a/0", "a/1"]).len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.starts().len()
    }

    /// Whether there are none.
    ///
    /// ```
    /// assert!(charm_sdk::RemoteUnits::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.0.names.is_empty()
    }

    /// The name at `index`, if there is one.
    ///
    /// ```
    /// let units = charm_sdk::RemoteUnits::from_names(["a/0", "a/1"]);
    /// assert_eq!(units.get(1), Some("a/1"));
    /// assert_eq!(units.get(2), None);
    /// ```
    pub fn get(&self, index: usize) -> Option<&str> {
        let starts = self.starts();
        let start = *starts.get(index)? as usize;
        let end = starts
            .get(index + 1)
            .map_or(self.0.names.len(), |&s| s as usize)
            - 1;
        Some(&self.0.names[start..end])
    }

    /// The first name.
    ///
    /// ```
    /// assert_eq!(charm_sdk::RemoteUnits::from_names(["a/0", "a/1"]).first(), Some("a/0"));
    /// ```
    pub fn first(&self) -> Option<&str> {
        let names = &self.0.names;
        names.find('\n').map(|end| &names[..end])
    }

    /// The last name.
    ///
    /// ```
    /// assert_eq!(charm_sdk::RemoteUnits::from_names(["a/0", "a/1"]).last(), Some("a/1"));
    /// ```
    pub fn last(&self) -> Option<&str> {
        let names = self.0.names.strip_suffix('\n')?;
        Some(names.rsplit('\n').next().unwrap_or(names))
    }

    /// Whether `unit` is one of them: a binary search, as the names are in unit order.
    ///
    /// ```
    /// let units = charm_sdk::RemoteUnits::from_names(["a/0", "a/1"]);
    /// assert!(units.contains("a/1"));
    /// assert!(!units.contains("a/2"));
    /// ```
    pub fn contains(&self, unit: &str) -> bool {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let mid = low + (high - low) / 2;
            match unit_order(self.at(mid), unit) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return true,
            }
        }
        false
    }

    fn at(&self, index: usize) -> &str {
        self.get(index).expect("an index below len")
    }

    /// The names, in order.
    ///
    /// ```
    /// let units = charm_sdk::RemoteUnits::from_names(["a/0", "a/1"]);
    /// assert_eq!(units.iter().rev().next(), Some("a/1"));
    /// ```
    pub fn iter(&self) -> UnitsIter<'_> {
        UnitsIter {
            units: self,
            front: 0,
            back: self.len(),
        }
    }

    /// The names with `separator` between them, as `[String]::join` makes them.
    ///
    /// ```
    /// let units = charm_sdk::RemoteUnits::from_names(["a/0", "a/1"]);
    /// assert_eq!(units.join(", "), "a/0, a/1");
    /// assert_eq!(charm_sdk::RemoteUnits::default().join(" "), "");
    /// ```
    pub fn join(&self, separator: &str) -> String {
        let Some(names) = self.0.names.strip_suffix('\n') else {
            return String::new();
        };
        match separator.as_bytes() {
            // Swapping each `\n` for another ASCII byte keeps the text UTF-8.
            [byte] if byte.is_ascii() => {
                let mut joined = names.as_bytes().to_vec();
                replace_newlines(&mut joined, *byte);
                String::from_utf8(joined).expect("ASCII for ASCII keeps the text valid")
            }
            _ => names.replace('\n', separator),
        }
    }

    /// The names as owned strings.
    ///
    /// ```
    /// let units = charm_sdk::RemoteUnits::from_names(["a/0"]);
    /// assert_eq!(units.to_vec(), vec!["a/0".to_string()]);
    /// ```
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_owned).collect()
    }
}

/// The order of unit names: by application, then by number (`db/2` before `db/10`), as
/// the host lists them; names not of the form `app/N` after those of their prefix that are.
fn unit_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn key(name: &str) -> (&str, Option<u64>, &str) {
        match name.rsplit_once('/') {
            Some((app, n)) => (app, n.parse().ok().filter(|_| !n.starts_with('+')), name),
            None => (name, None, name),
        }
    }
    let (a, b) = (key(a), key(b));
    (a.0, a.1.is_none(), a.1, a.2).cmp(&(b.0, b.1.is_none(), b.1, b.2))
}

/// Where each `\n`-terminated name starts: the newlines found eight bytes at a time, as
/// WebAssembly without SIMD would otherwise look at one byte per step.
fn name_starts(names: &str) -> Box<[u32]> {
    let bytes = names.as_bytes();
    let mut starts = Vec::new();
    if !bytes.is_empty() {
        starts.push(0);
    }
    let mut on_newline = |at: usize| {
        if at + 1 < bytes.len() {
            starts.push(u32::try_from(at + 1).expect("names shorter than 4 GiB"));
        }
    };
    let words = bytes.chunks_exact(8);
    let tail = words.remainder();
    for (i, word) in words.enumerate() {
        let mut found = newline_bytes(u64::from_le_bytes(word.try_into().expect("8 bytes")));
        while found != 0 {
            on_newline(i * 8 + found.trailing_zeros() as usize / 8);
            found &= found - 1;
        }
    }
    let tail_start = bytes.len() - tail.len();
    for (i, &b) in tail.iter().enumerate() {
        if b == b'\n' {
            on_newline(tail_start + i);
        }
    }
    starts.into_boxed_slice()
}

/// The high bit of every byte of `word` that is `\n`, and no other bit.
fn newline_bytes(word: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let x = word ^ 0x0a0a_0a0a_0a0a_0a0a;
    // A byte of `x` is zero exactly where `word` has `\n`; no carry crosses bytes.
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// `bytes` with every `\n` made `with`, eight bytes at a time.
fn replace_newlines(bytes: &mut [u8], with: u8) {
    let flip = u64::from_ne_bytes([b'\n' ^ with; 8]);
    let mut words = bytes.chunks_exact_mut(8);
    for word in &mut words {
        let w = u64::from_le_bytes((&*word).try_into().expect("8 bytes"));
        let high = newline_bytes(w);
        // 0x80 -> 0xff in each byte that held `\n`.
        let mask = (high >> 7) * 0xff;
        word.copy_from_slice(&(w ^ (mask & flip)).to_le_bytes());
    }
    for b in words.into_remainder() {
        if *b == b'\n' {
            *b = with;
        }
    }
}

impl Index<usize> for RemoteUnits {
    type Output = str;

    fn index(&self, index: usize) -> &str {
        let len = self.len();
        self.get(index)
            .unwrap_or_else(|| panic!("unit index {index} out of range for {len} units"))
    }
}

impl PartialEq for RemoteUnits {
    fn eq(&self, other: &Self) -> bool {
        self.0.names == other.0.names
    }
}

impl Eq for RemoteUnits {}

impl fmt::Debug for RemoteUnits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a RemoteUnits {
    type Item = &'a str;
    type IntoIter = UnitsIter<'a>;

    fn into_iter(self) -> UnitsIter<'a> {
        self.iter()
    }
}

/// The names of [`RemoteUnits`], in order.
#[derive(Debug, Clone)]
pub struct UnitsIter<'a> {
    units: &'a RemoteUnits,
    front: usize,
    back: usize,
}

impl<'a> Iterator for UnitsIter<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.front == self.back {
            return None;
        }
        self.front += 1;
        self.units.get(self.front - 1)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.back - self.front;
        (left, Some(left))
    }
}

impl DoubleEndedIterator for UnitsIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.front == self.back {
            return None;
        }
        self.back -= 1;
        self.units.get(self.back)
    }
}

impl ExactSizeIterator for UnitsIter<'_> {}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Against a `Vec<String>` of the same names: every question answers the same.
        #[test]
        fn reads_like_a_list_of_names(names in proptest::collection::vec("[a-z0-9/-]{0,11}", 0..40)) {
            // An empty name would look like nothing at all between two newlines.
            let mut names: Vec<String> = names.into_iter().filter(|n| !n.is_empty()).collect();
            names.sort_by(|a, b| unit_order(a, b));
            names.dedup();
            let units = RemoteUnits::from_names(&names);
            prop_assert_eq!(units.len(), names.len());
            prop_assert_eq!(units.is_empty(), names.is_empty());
            prop_assert_eq!(units.to_vec(), names.clone());
            prop_assert_eq!(units.iter().rev().collect::<Vec<_>>(), names.iter().rev().map(String::as_str).collect::<Vec<_>>());
            prop_assert_eq!(units.first(), names.first().map(String::as_str));
            prop_assert_eq!(units.last(), names.last().map(String::as_str));
            for sep in [" ", ",", ", ", ""] {
                prop_assert_eq!(units.join(sep), names.join(sep));
            }
            for (i, name) in names.iter().enumerate() {
                prop_assert_eq!(&units[i], name.as_str());
                prop_assert!(units.contains(name));
            }
            prop_assert_eq!(units.get(names.len()), None);
            for absent in ["", "absent/9", "zzz", "0"] {
                prop_assert_eq!(units.contains(absent), names.iter().any(|n| n == absent));
            }
            let shuffled: Vec<&String> = names.iter().rev().chain(names.iter()).collect();
            prop_assert_eq!(RemoteUnits::from_names(shuffled), units);
        }
    }

    #[test]
    fn units_are_ordered_by_number() {
        let units = RemoteUnits::from_names(["db/10", "db/2", "app/3", "db/x", "db/1"]);
        assert_eq!(units.to_vec(), ["app/3", "db/1", "db/2", "db/10", "db/x"]);
        assert!(units.contains("db/10") && units.contains("db/x") && !units.contains("db/3"));
    }

    #[test]
    fn newlines_are_found_in_every_byte_of_a_word() {
        for at in 0..8 {
            let mut word = [b'a'; 8];
            word[at] = b'\n';
            assert_eq!(
                newline_bytes(u64::from_le_bytes(word)),
                0x80 << (8 * at),
                "newline at byte {at}"
            );
        }
        // Bytes next to '\n' in value (0x0b, 0x09, 0x8a) are not it.
        assert_eq!(
            newline_bytes(u64::from_le_bytes([
                0x0b, 0x09, 0x8a, 0x0a, 0, 0xff, 0x0a, 0x7f
            ])),
            0x0080_0000_8000_0000
        );
    }

    #[test]
    fn a_list_shares_its_positions_with_its_copies() {
        let units = RemoteUnits::from_names(["a/0", "a/1"]);
        let copy = units.clone();
        assert_eq!(units.len(), 2);
        assert!(copy.0.starts.get().is_some(), "found once, for every copy");
    }
}
