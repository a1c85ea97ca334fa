//! [`Metadata`]: a message's flat string metadata (labels, sender, url...): its keys and
//! values, sorted by key, in one string, and where each ends in a table beside it.
//!
//! Owns that representation and nothing else. Why not a `BTreeMap<String, String>`: the
//! engine reads a message's metadata on every dispatch (the metadata index, the matchers,
//! `to_consumer`), and a B-tree allocates a whole leaf of eleven slots (about 540 bytes) for
//! even one pair, and each key and value on its own, so that a cycle of messages with a few
//! labels each no longer fit the last-level cache (`benches/engine_count.rs`: 2–3× the misses
//! of messages without). Here a message's metadata is two allocations, whatever its size: a
//! lookup reads the table (8 bytes a pair, lengths first) and the bytes of a key of the right
//! length, usually in the same line or the next. A message is built once and read many times,
//! so the map is built whole (an [`Metadata::insert`] rebuilds it, O(n)), and a lookup past
//! [`SCAN_PAIRS`] keys is a binary search. (The ends are plain `u32`s: an encoding packed
//! into the string itself cost hundreds of instructions per dispatch to decode.)
//!
//! Its serde form is a JSON object of strings, as the map's was (a key given twice: the
//! last wins), and its JSON schema is the map's, so the journal and the tool schemas are
//! unchanged.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A message's metadata: string keys to string values, iterated in key order.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Metadata {
    /// Per pair `i`: where its key ends (`2i`) and where its value ends (`2i + 1`) in `text`.
    ends: Box<[u32]>,
    /// Every key and value, in key order, each key before its value.
    text: Box<str>,
}

/// Up to this many pairs a lookup scans comparing lengths first; above it, a binary search.
const SCAN_PAIRS: usize = 16;

/// `pairs` sorted by key, the last of a key given twice kept.
fn sorted_last_wins<K: AsRef<str>, V: AsRef<str>>(mut pairs: Vec<(K, V)>) -> Vec<(K, V)> {
    if pairs.is_sorted_by(|a, b| a.0.as_ref() < b.0.as_ref()) {
        return pairs;
    }
    // Stable: a key's pairs stay in the order given, so the last is the last given.
    pairs.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
    let mut out: Vec<(K, V)> = Vec::with_capacity(pairs.len());
    for pair in pairs {
        match out.last_mut() {
            Some(last) if last.0.as_ref() == pair.0.as_ref() => *last = pair,
            _ => out.push(pair),
        }
    }
    out
}

/// Whether `a` and `b` are the same bytes: their lengths first (a slice's length is known
/// without reading its bytes), then the bytes. A key (or a label's value, which the engine's
/// index compares with this too) is usually a few to twenty bytes: up to 16 they are compared
/// as two overlapping words each, in place of a call to `memcmp` (which cost more than the
/// lookup around it).
#[inline(always)]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap());
    let half = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap());
    match n {
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        0..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        _ => a == b,
    }
}

/// An offset into the text. Metadata is bounded far below 4 GiB (`inbox.limits.metadataBytes`,
/// and every body a source reads), so this never fails in practice.
fn offset(n: usize) -> u32 {
    u32::try_from(n).expect("metadata text under 4 GiB")
}

impl Metadata {
    /// An empty map (no allocation).
    pub fn new() -> Metadata {
        Metadata::default()
    }

    /// The map of `pairs`, which are sorted by key with no key twice.
    fn of_sorted<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> Metadata {
        if pairs.is_empty() {
            return Metadata::default();
        }
        let bytes = pairs
            .iter()
            .map(|(k, v)| k.as_ref().len() + v.as_ref().len())
            .sum();
        let mut text = String::with_capacity(bytes);
        let mut ends = Vec::with_capacity(2 * pairs.len());
        for (k, v) in pairs {
            text.push_str(k.as_ref());
            ends.push(offset(text.len()));
            text.push_str(v.as_ref());
            ends.push(offset(text.len()));
        }
        Metadata {
            ends: ends.into_boxed_slice(),
            text: text.into_boxed_str(),
        }
    }

    /// How many keys.
    #[inline]
    pub fn len(&self) -> usize {
        self.ends.len() / 2
    }

    /// No key at all.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Where pair `i` starts in the text.
    #[inline]
    fn start(&self, i: usize) -> usize {
        match i {
            0 => 0,
            _ => self.ends[2 * i - 1] as usize,
        }
    }

    /// Key `i`.
    #[inline]
    fn key(&self, i: usize) -> &str {
        &self.text[self.start(i)..self.ends[2 * i] as usize]
    }

    /// Pair `i`.
    #[inline]
    fn pair(&self, i: usize) -> (&str, &str) {
        let (key_end, value_end) = (self.ends[2 * i] as usize, self.ends[2 * i + 1] as usize);
        (
            &self.text[self.start(i)..key_end],
            &self.text[key_end..value_end],
        )
    }

    /// Where the value of `key` is in the text. Inlined into each caller whole (its call
    /// cost more than the scan itself); the binary search past [`SCAN_PAIRS`] is not.
    #[inline(always)]
    fn find(&self, key: &str) -> Option<std::ops::Range<usize>> {
        if self.len() > SCAN_PAIRS {
            return self.search(key);
        }
        let (text, key) = (self.text.as_bytes(), key.as_bytes());
        let mut start = 0;
        for ends in self.ends.chunks_exact(2) {
            let (key_end, value_end) = (ends[0] as usize, ends[1] as usize);
            // The length is in the table; the key's bytes are read only when it fits.
            if same_bytes(&text[start..key_end], key) {
                return Some(key_end..value_end);
            }
            start = value_end;
        }
        None
    }

    /// [`Metadata::find`] by binary search, for more than [`SCAN_PAIRS`] keys.
    #[inline(never)]
    fn search(&self, key: &str) -> Option<std::ops::Range<usize>> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.key(mid).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    return Some(self.ends[2 * mid] as usize..self.ends[2 * mid + 1] as usize);
                }
            }
        }
        None
    }

    /// The value of `key`.
    #[inline(always)]
    pub fn get(&self, key: &str) -> Option<&str> {
        // Here, not in `find`, so that a message without metadata costs no call.
        if self.is_empty() {
            return None;
        }
        self.find(key).map(|value| &self.text[value])
    }

    /// The value of `key`, the empty string when it has none: how a matcher and the engine read
    /// a key (a missing key matches as the empty string, as in Alertmanager).
    #[inline]
    pub fn value(&self, key: &str) -> &str {
        self.get(key).unwrap_or("")
    }

    /// Whether it has `key`.
    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_some()
    }

    /// Sets `key` to `value`, replacing its value if it has one. Rebuilds the map: O(n).
    pub fn insert(&mut self, key: &str, value: &str) {
        self.extend([(key, value)]);
    }

    /// The pairs, in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { map: self, at: 0 }
    }

    /// The keys and values together, in bytes (what `inbox.limits.metadataBytes` bounds).
    pub fn text_bytes(&self) -> usize {
        self.text.len()
    }

    /// The bytes of its two allocations.
    pub fn heap_bytes(&self) -> usize {
        self.ends.len() * std::mem::size_of::<u32>() + self.text.len()
    }
}

/// The pairs of a [`Metadata`], in key order.
pub struct Iter<'a> {
    map: &'a Metadata,
    at: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    #[inline]
    fn next(&mut self) -> Option<(&'a str, &'a str)> {
        if self.at == self.map.len() {
            return None;
        }
        self.at += 1;
        Some(self.map.pair(self.at - 1))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.map.len() - self.at;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Metadata {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Metadata {
    /// A key given twice: the last value wins, as in a map.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Metadata {
        Metadata::of_sorted(&sorted_last_wins(iter.into_iter().collect()))
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Extend<(K, V)> for Metadata {
    /// A key it has already or given twice: the last value wins, as in a map.
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        let added: Vec<(K, V)> = iter.into_iter().collect();
        if added.is_empty() {
            return;
        }
        let mut pairs: Vec<(&str, &str)> = self.iter().collect();
        pairs.extend(added.iter().map(|(k, v)| (k.as_ref(), v.as_ref())));
        *self = Metadata::of_sorted(&sorted_last_wins(pairs));
    }
}

impl From<std::collections::BTreeMap<String, String>> for Metadata {
    fn from(map: std::collections::BTreeMap<String, String>) -> Metadata {
        let pairs: Vec<(&String, &String)> = map.iter().collect();
        Metadata::of_sorted(&pairs)
    }
}

impl<K: AsRef<str>, V: AsRef<str>, const N: usize> From<[(K, V); N]> for Metadata {
    fn from(pairs: [(K, V); N]) -> Metadata {
        pairs.into_iter().collect()
    }
}

impl std::ops::Index<&str> for Metadata {
    type Output = str;

    /// The value of `key`; panics when it has none, as a map's index does.
    fn index(&self, key: &str) -> &str {
        self.get(key)
            .unwrap_or_else(|| panic!("metadata: no key `{key}`"))
    }
}

impl fmt::Debug for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Metadata {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Metadata, D::Error> {
        d.deserialize_map(MapVisitor)
    }
}

struct MapVisitor;

impl<'de> Visitor<'de> for MapVisitor {
    type Value = Metadata;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of strings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Metadata, A::Error> {
        let mut pairs: Vec<(Cow<'de, str>, Cow<'de, str>)> =
            Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some(key) = map.next_key_seed(Text)? {
            pairs.push((key, map.next_value_seed(Text)?));
        }
        Ok(pairs.into_iter().collect())
    }
}

/// A string borrowed from the input when it can be (a journal line without escapes), so
/// that reading a message allocates nothing per key.
struct Text;

impl<'de> DeserializeSeed<'de> for Text {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Text {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(s))
    }

    fn visit_str<E>(self, s: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(s.to_string()))
    }

    fn visit_string<E>(self, s: String) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(s))
    }
}

impl schemars::JsonSchema for Metadata {
    fn schema_name() -> Cow<'static, str> {
        <std::collections::BTreeMap<String, String>>::schema_name()
    }

    fn schema_id() -> Cow<'static, str> {
        <std::collections::BTreeMap<String, String>>::schema_id()
    }

    fn inline_schema() -> bool {
        <std::collections::BTreeMap<String, String>>::inline_schema()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <std::collections::BTreeMap<String, String>>::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn of(pairs: &[(&str, &str)]) -> Metadata {
        pairs.iter().copied().collect()
    }

    #[test]
    fn iterates_in_key_order_whatever_the_order_given() {
        let m = of(&[
            ("sender", "Ada"),
            ("labels.team", "db"),
            ("a", ""),
            ("", "e"),
        ]);
        let got: Vec<_> = m.iter().collect();
        assert_eq!(
            got,
            [
                ("", "e"),
                ("a", ""),
                ("labels.team", "db"),
                ("sender", "Ada")
            ]
        );
        assert_eq!(m.len(), 4);
        assert_eq!(m.iter().len(), 4);
        assert_eq!(m.text_bytes(), 1 + 1 + 11 + 2 + 6 + 3);
    }

    #[test]
    fn get_finds_each_key_and_nothing_else() {
        let m = of(&[("labels.team", "db"), ("labels.tean", "web"), ("k", "v")]);
        assert_eq!(m.get("labels.team"), Some("db"));
        assert_eq!(m.get("labels.tean"), Some("web"));
        assert_eq!(m.get("k"), Some("v"));
        for missing in ["labels.teal", "labels.tea", "labels.teams", "", "K", "v"] {
            assert_eq!(m.get(missing), None, "{missing}");
            assert!(!m.contains_key(missing), "{missing}");
        }
        assert!(m.contains_key("k"));
        assert_eq!(&m["labels.tean"], "web");
    }

    #[test]
    fn empty_has_no_allocation_and_no_key() {
        let m = Metadata::new();
        assert!(m.is_empty());
        assert_eq!((m.len(), m.heap_bytes(), m.text_bytes()), (0, 0, 0));
        assert_eq!(m.get(""), None);
        assert_eq!(m.iter().next(), None);
        assert_eq!(m, Metadata::default());
        assert_eq!(m, of(&[]));
        assert_eq!(format!("{m:?}"), "{}");
        // One empty key with an empty value is not empty.
        let one = of(&[("", "")]);
        assert!(!one.is_empty());
        assert_eq!((one.len(), one.get("")), (1, Some("")));
    }

    #[test]
    fn insert_replaces_a_value_and_keeps_the_order() {
        let mut m = Metadata::new();
        m.insert("b", "2");
        m.insert("a", "1");
        m.insert("c", "3");
        m.insert("b", "two");
        assert_eq!(
            m.iter().collect::<Vec<_>>(),
            [("a", "1"), ("b", "two"), ("c", "3")]
        );
        assert_eq!(m, of(&[("c", "3"), ("b", "two"), ("a", "1")]));
        assert_ne!(m, of(&[("c", "3"), ("b", "2"), ("a", "1")]));
        assert_eq!(format!("{m:?}"), r#"{"a": "1", "b": "two", "c": "3"}"#);
    }

    #[test]
    fn a_key_given_twice_keeps_its_last_value() {
        let m = of(&[("k", "1"), ("j", "x"), ("k", "2"), ("k", "3")]);
        assert_eq!(m.iter().collect::<Vec<_>>(), [("j", "x"), ("k", "3")]);
        let mut e = of(&[("k", "1"), ("z", "z")]);
        e.extend([("k", "2"), ("a", "a"), ("k", "4")]);
        assert_eq!(e, of(&[("a", "a"), ("k", "4"), ("z", "z")]));
        let read: Metadata = serde_json::from_str(r#"{"k":"1","j":"x","k":"2"}"#).unwrap();
        let map: BTreeMap<String, String> =
            serde_json::from_str(r#"{"k":"1","j":"x","k":"2"}"#).unwrap();
        assert_eq!(read, Metadata::from(map));
        assert_eq!(read.get("k"), Some("2"));
    }

    #[test]
    fn serde_is_a_json_object_of_strings_byte_for_byte_as_the_map() {
        let pairs = [
            ("labels.alertname", "DiskFull"),
            ("quote\"key", "back\\slash"),
            ("ctl", "line\nfeed \u{1} tab\t"),
            ("été", "🚨 \u{2028}"),
            ("", ""),
        ];
        let m = of(&pairs);
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, serde_json::to_string(&map).unwrap());
        let back: Metadata = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
        // Read from a reader (owned strings) as well as from a slice (borrowed).
        let from_reader: Metadata = serde_json::from_reader(json.as_bytes()).unwrap();
        assert_eq!(from_reader, m);
        assert_eq!(
            serde_json::from_value::<Metadata>(serde_json::to_value(&map).unwrap()).unwrap(),
            m
        );
        for bad in [r#"{"k":1}"#, r#"["k","v"]"#, r#""k""#, r#"{"k":null}"#] {
            assert_eq!(
                serde_json::from_str::<Metadata>(bad).is_ok(),
                serde_json::from_str::<BTreeMap<String, String>>(bad).is_ok(),
                "{bad}"
            );
        }
    }

    #[test]
    fn json_schema_is_the_maps() {
        assert_eq!(
            schemars::schema_for!(Metadata),
            schemars::schema_for!(BTreeMap<String, String>)
        );
    }

    #[test]
    fn long_values_and_many_keys_are_found() {
        // Long values and many keys; past SCAN_PAIRS keys a lookup is a binary search.
        for (keys, value_len) in [
            (1, 126),
            (1, 127),
            (3, 5000),
            (40, 3),
            (300, 0),
            (2, 20_000),
        ] {
            let map: BTreeMap<String, String> = (0..keys)
                .map(|i| (format!("k{i:03}"), "v".repeat(value_len)))
                .collect();
            let m = Metadata::from(map.clone());
            assert_eq!(m.len(), keys);
            assert!(
                m.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .eq(map.clone())
            );
            for (k, v) in &map {
                assert_eq!(m.get(k), Some(v.as_str()), "{k}");
            }
            assert_eq!(m.get("k"), None);
            assert_eq!(m.get("k9999"), None);
        }
    }

    /// A small xorshift, so that the test needs no crate and is the same on every run.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }

        fn text(&mut self) -> String {
            const PIECES: [&str; 6] = ["a", "b", "é", "🚨", "\"", "ab"];
            (0..self.below(4))
                .map(|_| PIECES[self.below(PIECES.len() as u64) as usize])
                .collect()
        }
    }

    #[test]
    fn same_bytes_tells_any_one_differing_byte_at_every_length() {
        for n in 0..=40usize {
            let a: Vec<u8> = (0..n as u8).map(|i| b'a' + i % 26).collect();
            assert!(same_bytes(&a, &a.clone()), "{n}");
            if n > 0 {
                assert!(!same_bytes(&a, &a[..n - 1]), "length {n} against {}", n - 1);
            }
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!same_bytes(&a, &b), "length {n}, byte {at}");
            }
        }
    }

    #[test]
    fn behaves_as_a_btreemap_on_random_inputs() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..2_000 {
            let mut map = BTreeMap::new();
            let mut m = Metadata::new();
            let mut given = Vec::new();
            for _ in 0..rng.below(24) {
                let (k, v) = (rng.text(), rng.text());
                if rng.below(2) == 0 {
                    m.insert(&k, &v);
                } else {
                    m.extend([(k.as_str(), v.as_str())]);
                }
                map.insert(k.clone(), v.clone());
                given.push((k, v));
            }
            assert!(
                m.iter()
                    .eq(map.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
                "{m:?} {map:?}"
            );
            assert_eq!(m.len(), map.len());
            assert_eq!(m, given.iter().cloned().collect::<Metadata>());
            assert_eq!(m, Metadata::from(map.clone()));
            for _ in 0..8 {
                let k = rng.text();
                assert_eq!(m.get(&k), map.get(&k).map(String::as_str), "{k:?} in {m:?}");
            }
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, serde_json::to_string(&map).unwrap());
            assert_eq!(serde_json::from_str::<Metadata>(&json).unwrap(), m);
        }
    }
}
