//! Bundle files as written: every key of Juju's bundle format, the shape of each value, the
//! line of each key, and overlays merged over the base. Nothing here loads a charm.

use std::collections::{BTreeMap, HashMap};

use serde_yaml::Value;

/// Where something was written: a document of the bundle (the base, then each overlay's
/// documents) and a 1-based line of its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Loc {
    pub doc: usize,
    pub line: Option<usize>,
}

/// Something wrong, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Issue {
    pub loc: Loc,
    pub message: String,
}

/// What a value must look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Text,
    Bool,
    Count,
    Map,
    List,
    TextOrList,
}

impl Shape {
    fn describe(self) -> &'static str {
        match self {
            Shape::Text => "text",
            Shape::Bool => "true or false",
            Shape::Count => "a whole number, 0 or more",
            Shape::Map => "a mapping of keys to values",
            Shape::List => "a list",
            Shape::TextOrList => "text or a list",
        }
    }

    /// Whether `value` fits; an empty value (`key:` with nothing after it) fits every shape,
    /// as Juju reads it as the zero value.
    fn fits(self, value: &Value) -> bool {
        let scalar = matches!(value, Value::String(_) | Value::Number(_) | Value::Bool(_));
        value.is_null()
            || match self {
                // Juju reads numbers into text fields (`series: 20.04`, `constraints: ...`).
                Shape::Text => scalar,
                Shape::Bool => value.is_bool(),
                Shape::Count => value.as_u64().is_some(),
                Shape::Map => value.is_mapping(),
                Shape::List => value.is_sequence(),
                Shape::TextOrList => {
                    scalar
                        || value
                            .as_sequence()
                            .is_some_and(|s| s.iter().all(|v| !v.is_mapping() && !v.is_sequence()))
                }
            }
    }
}

/// The top-level keys of Juju's bundle format (`services` is the name `applications` had
/// before Juju 2; `name`, `tags`, `docs`, `issues`, `source` and `website` are Charmhub's
/// metadata).
pub(crate) const TOP_KEYS: &[(&str, Shape)] = &[
    ("description", Shape::Text),
    ("series", Shape::Text),
    ("default-base", Shape::Text),
    ("bundle", Shape::Text),
    ("applications", Shape::Map),
    ("services", Shape::Map),
    ("machines", Shape::Map),
    ("relations", Shape::List),
    ("saas", Shape::Map),
    ("name", Shape::Text),
    ("tags", Shape::List),
    ("docs", Shape::Text),
    ("issues", Shape::Text),
    ("source", Shape::Text),
    ("website", Shape::Text),
];

/// The keys of an application.
pub(crate) const APP_KEYS: &[(&str, Shape)] = &[
    ("charm", Shape::Text),
    ("channel", Shape::Text),
    ("revision", Shape::Count),
    ("series", Shape::Text),
    ("base", Shape::Text),
    ("num_units", Shape::Count),
    ("scale", Shape::Count),
    ("to", Shape::TextOrList),
    ("options", Shape::Map),
    ("annotations", Shape::Map),
    ("constraints", Shape::Text),
    ("storage", Shape::Map),
    ("devices", Shape::Map),
    ("resources", Shape::Map),
    ("trust", Shape::Bool),
    ("expose", Shape::Bool),
    ("exposed-endpoints", Shape::Map),
    ("offers", Shape::Map),
    ("bindings", Shape::Map),
    ("source", Shape::Text),
    ("placement", Shape::Text),
    ("plan", Shape::Text),
];

/// The keys of a machine.
pub(crate) const MACHINE_KEYS: &[(&str, Shape)] = &[
    ("series", Shape::Text),
    ("base", Shape::Text),
    ("constraints", Shape::Text),
    ("annotations", Shape::Map),
];

/// The keys of a `saas` entry (an offer of another model).
pub(crate) const SAAS_KEYS: &[(&str, Shape)] = &[("url", Shape::Text)];

/// A key's value and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Field {
    pub value: Value,
    pub loc: Loc,
}

/// An application, machine or `saas` entry: its keys.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Section {
    pub loc: Loc,
    pub fields: BTreeMap<String, Field>,
}

impl Section {
    pub fn get(&self, key: &str) -> Option<&Field> {
        self.fields.get(key).filter(|f| !f.value.is_null())
    }
}

/// A relation as written: its endpoints (`app` or `app:endpoint`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RelationSpec {
    pub ends: Vec<String>,
    pub loc: Loc,
}

/// One YAML document of a bundle. An entry that is `null` (`name:` with nothing after it)
/// removes that entry when the document is an overlay.
#[derive(Debug, Default)]
pub(crate) struct Doc {
    pub top: BTreeMap<String, Field>,
    pub applications: Vec<(String, Option<Section>, Loc)>,
    pub machines: Vec<(String, Option<Section>, Loc)>,
    pub saas: Vec<(String, Option<Section>, Loc)>,
    pub relations: Vec<RelationSpec>,
}

/// The bundle with its overlays merged.
#[derive(Debug, Default)]
pub(crate) struct Spec {
    pub top: BTreeMap<String, Field>,
    pub applications: BTreeMap<String, Section>,
    pub machines: BTreeMap<String, Section>,
    pub saas: BTreeMap<String, Section>,
    pub relations: Vec<RelationSpec>,
}

/// The lines of a document's keys, found by indentation: bundles are block mappings, and
/// serde_yaml's values carry no positions. A key inside a flow mapping (`app: {charm: x}`)
/// is given its enclosing key's line.
pub(crate) struct Lines {
    offset: usize,
    keys: HashMap<Vec<String>, usize>,
    relation_items: Vec<usize>,
}

/// The key a line starts with, if it is `key:` or `key: value`.
fn key_of(trimmed: &str) -> Option<String> {
    let (key, rest) = if let Some(quote @ ('"' | '\'')) = trimmed.chars().next() {
        let end = trimmed[1..].find(quote)? + 1;
        (&trimmed[1..end], &trimmed[end + 1..])
    } else {
        let colon = trimmed.find(':')?;
        (trimmed[..colon].trim_end(), &trimmed[colon..])
    };
    let rest = rest.trim_start();
    let after = rest.strip_prefix(':')?;
    (after.is_empty() || after.starts_with([' ', '\t'])).then(|| key.to_string())
}

impl Lines {
    /// Indexes `text`, whose first line is line `offset + 1` of its file.
    pub fn new(text: &str, offset: usize) -> Lines {
        let mut keys = HashMap::new();
        let mut stack: Vec<(usize, String)> = Vec::new();
        let mut relations: Option<(usize, Option<usize>)> = None;
        let mut relation_items = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let indent = line.len() - trimmed.len();
            if let Some((key_indent, item_indent)) = &mut relations {
                if trimmed.starts_with('-') && indent >= *key_indent {
                    // Items of `relations` are the dashes at its first item's indent; a
                    // dash further in is an endpoint of the nested list form.
                    if item_indent.is_none_or(|d| d == indent) {
                        *item_indent = Some(indent);
                        relation_items.push(offset + i + 1);
                    }
                    continue;
                }
                if indent <= *key_indent {
                    relations = None;
                }
            }
            if trimmed.starts_with('-') {
                continue;
            }
            let Some(key) = key_of(trimmed) else {
                continue;
            };
            while stack.last().is_some_and(|(d, _)| *d >= indent) {
                stack.pop();
            }
            stack.push((indent, key));
            let path: Vec<String> = stack.iter().map(|(_, k)| k.clone()).collect();
            if path.len() == 1 && path[0] == "relations" {
                relations = Some((indent, None));
            }
            keys.entry(path).or_insert(offset + i + 1);
        }
        Lines {
            offset,
            keys,
            relation_items,
        }
    }

    /// The line of the key at `path`, or of its deepest enclosing key that has one.
    pub fn line(&self, path: &[&str]) -> Option<usize> {
        (1..=path.len()).rev().find_map(|n| {
            let key: Vec<String> = path[..n].iter().map(|s| s.to_string()).collect();
            self.keys.get(&key).copied()
        })
    }

    /// The line of the `index`th relation.
    pub fn relation(&self, index: usize) -> Option<usize> {
        self.relation_items
            .get(index)
            .copied()
            .or_else(|| self.line(&["relations"]))
    }

    /// The first line of this document in its file.
    pub fn first_line(&self) -> usize {
        self.offset + 1
    }
}

/// The closest of `known` to `key`, if close enough to be a slip.
pub(crate) fn suggest<'a>(key: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let folded = key.to_lowercase().replace('_', "-");
    known
        .into_iter()
        .map(|k| {
            let distance = strsim::damerau_levenshtein(&folded, &k.replace('_', "-"));
            (distance, k)
        })
        .filter(|(d, _)| *d <= (key.chars().count() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Why `key` is refused at a level whose keys are `known`: a likely slip, or a key that
/// belongs at another level.
fn unknown_key(key: &str, at: &str, known: &[(&str, Shape)]) -> String {
    let mut message = format!("unknown key `{key}` {at}");
    if let Some(close) = suggest(key, known.iter().map(|(k, _)| *k)) {
        message.push_str(&format!("; did you mean `{close}`?"));
        return message;
    }
    let levels = [
        (TOP_KEYS, "at the top level of a bundle"),
        (APP_KEYS, "in an application"),
        (MACHINE_KEYS, "in a machine"),
    ];
    for (keys, level) in levels {
        if keys.iter().any(|(k, _)| *k == key) {
            message.push_str(&format!("; `{key}` belongs {level}"));
            return message;
        }
    }
    message.push_str("; it is in no version of Juju's bundle format");
    message
}

/// A mapping key as text: machine numbers are often written unquoted.
fn key_text(key: &Value) -> Option<String> {
    match key {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Reads one document, recording what is wrong in `issues` and going on past it.
pub(crate) fn read_doc(value: Value, doc: usize, lines: &Lines, issues: &mut Vec<Issue>) -> Doc {
    let at = |path: &[&str]| Loc {
        doc,
        line: lines.line(path),
    };
    let mut out = Doc::default();
    let map = match value {
        Value::Mapping(map) => map,
        Value::Null => return out,
        _ => {
            issues.push(Issue {
                loc: Loc {
                    doc,
                    line: Some(lines.first_line()),
                },
                message: "a bundle is a mapping of keys (applications, relations, ...)".into(),
            });
            return out;
        }
    };
    let mut seen_applications = None;
    for (key, value) in map {
        let Some(key) = key_text(&key) else {
            issues.push(Issue {
                loc: at(&[]),
                message: "keys must be text".into(),
            });
            continue;
        };
        let loc = at(&[key.as_str()]);
        let Some((_, shape)) = TOP_KEYS.iter().find(|(k, _)| *k == key) else {
            issues.push(Issue {
                loc,
                message: unknown_key(&key, "at the top level", TOP_KEYS),
            });
            continue;
        };
        if !shape.fits(&value) {
            issues.push(Issue {
                loc,
                message: format!("`{key}` must be {}", shape.describe()),
            });
            continue;
        }
        match key.as_str() {
            "applications" | "services" => {
                if let Some(other) = seen_applications.replace(key.clone()) {
                    issues.push(Issue {
                        loc,
                        message: format!(
                            "`{key}` and `{other}` both list applications; `services` is the old name of `applications`, give one"
                        ),
                    });
                    continue;
                }
                out.applications =
                    read_sections(value, &key, "application", APP_KEYS, doc, lines, issues);
            }
            "machines" => {
                out.machines =
                    read_sections(value, &key, "machine", MACHINE_KEYS, doc, lines, issues);
            }
            "saas" => {
                out.saas = read_sections(value, &key, "saas entry", SAAS_KEYS, doc, lines, issues);
            }
            "relations" => {
                let Value::Sequence(items) = value else {
                    continue;
                };
                for (i, item) in items.into_iter().enumerate() {
                    let loc = Loc {
                        doc,
                        line: lines.relation(i),
                    };
                    let ends: Option<Vec<String>> = item.as_sequence().and_then(|ends| {
                        ends.iter()
                            .map(|e| e.as_str().map(str::to_string))
                            .collect()
                    });
                    match ends {
                        Some(ends) => out.relations.push(RelationSpec { ends, loc }),
                        None => issues.push(Issue {
                            loc,
                            message: "a relation is a list of two endpoints, such as [\"discourse:db\", \"postgresql:db\"]".into(),
                        }),
                    }
                }
            }
            _ => {
                out.top.insert(key, Field { value, loc });
            }
        }
    }
    out
}

/// Reads the entries of `applications`, `machines` or `saas`.
fn read_sections(
    value: Value,
    top: &str,
    what: &str,
    keys: &[(&str, Shape)],
    doc: usize,
    lines: &Lines,
    issues: &mut Vec<Issue>,
) -> Vec<(String, Option<Section>, Loc)> {
    let Value::Mapping(map) = value else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, body) in map {
        let Some(name) = key_text(&name) else {
            issues.push(Issue {
                loc: Loc {
                    doc,
                    line: lines.line(&[top]),
                },
                message: format!("{what} names must be text"),
            });
            continue;
        };
        let loc = Loc {
            doc,
            line: lines.line(&[top, name.as_str()]),
        };
        let fields = match body {
            Value::Null => {
                out.push((name, None, loc));
                continue;
            }
            Value::Mapping(fields) => fields,
            _ => {
                issues.push(Issue {
                    loc,
                    message: format!("{what} {name} must be a mapping of keys to values"),
                });
                continue;
            }
        };
        let mut section = Section {
            loc,
            fields: BTreeMap::new(),
        };
        for (key, value) in fields {
            let Some(key) = key_text(&key) else {
                issues.push(Issue {
                    loc,
                    message: format!("{what} {name}: keys must be text"),
                });
                continue;
            };
            let loc = Loc {
                doc,
                line: lines.line(&[top, name.as_str(), key.as_str()]),
            };
            match keys.iter().find(|(k, _)| *k == key) {
                None => issues.push(Issue {
                    loc,
                    message: unknown_key(&key, &format!("in {what} {name}"), keys),
                }),
                Some((_, shape)) if !shape.fits(&value) => issues.push(Issue {
                    loc,
                    message: format!("{what} {name}: `{key}` must be {}", shape.describe()),
                }),
                Some(_) => {
                    section.fields.insert(key, Field { value, loc });
                }
            }
        }
        out.push((name, Some(section), loc));
    }
    out
}

/// Keys whose mappings an overlay merges key by key rather than replaces.
const MERGED_KEYS: &[&str] = &["options", "annotations"];

/// Merges `over` into `base`: its keys replace the base's, `options` and `annotations`
/// key by key (a `null` value removing the key).
fn merge_section(base: &mut Section, over: Section) {
    for (key, field) in over.fields {
        // `scale` and `num_units` are one setting: an overlay's replaces the base's.
        match key.as_str() {
            "scale" => base.fields.remove("num_units"),
            "num_units" => base.fields.remove("scale"),
            _ => None,
        };
        match (base.fields.get_mut(&key), &field.value) {
            (Some(existing), Value::Mapping(added))
                if MERGED_KEYS.contains(&key.as_str()) && existing.value.is_mapping() =>
            {
                let target = existing
                    .value
                    .as_mapping_mut()
                    .expect("checked to be a mapping");
                for (k, v) in added {
                    if v.is_null() {
                        target.remove(k);
                    } else {
                        target.insert(k.clone(), v.clone());
                    }
                }
                existing.loc = field.loc;
            }
            _ => {
                base.fields.insert(key, field);
            }
        }
    }
}

/// Merges a document into the bundle as `juju deploy --overlay` does: the first document
/// is the base; in a later one, an entry replaces or extends the base's, `null` removes it
/// (an application with its relations), and relations are added.
pub(crate) fn merge(spec: &mut Spec, doc: Doc, is_base: bool, issues: &mut Vec<Issue>) {
    spec.top.extend(doc.top);
    let sections = [
        (&mut spec.applications, doc.applications, "application"),
        (&mut spec.machines, doc.machines, "machine"),
        (&mut spec.saas, doc.saas, "saas entry"),
    ];
    let mut removed = Vec::new();
    for (target, entries, what) in sections {
        for (name, section, loc) in entries {
            match section {
                None if is_base => {
                    // A machine may be empty (`"0":`); an application needs its charm.
                    if what == "machine" {
                        target.insert(
                            name,
                            Section {
                                loc,
                                fields: BTreeMap::new(),
                            },
                        );
                    } else {
                        issues.push(Issue {
                            loc,
                            message: format!("{what} {name} is empty"),
                        });
                    }
                }
                None => {
                    if target.remove(&name).is_none() {
                        issues.push(Issue {
                            loc,
                            message: format!(
                                "{what} {name} is removed (null) but the bundle has no such {what}"
                            ),
                        });
                    }
                    removed.push(name);
                }
                Some(section) => match target.get_mut(&name) {
                    Some(existing) if !is_base => merge_section(existing, section),
                    _ => {
                        target.insert(name, section);
                    }
                },
            }
        }
    }
    // A removed application takes its relations with it, as in Juju.
    spec.relations.retain(|r| {
        !r.ends.iter().any(|end| {
            let app = end.split_once(':').map_or(end.as_str(), |(a, _)| a);
            removed.iter().any(|n| n == app)
        })
    });
    for relation in doc.relations {
        // An overlay restating a relation of the base adds nothing.
        if is_base
            || !spec
                .relations
                .iter()
                .any(|r| same_ends(&r.ends, &relation.ends))
        {
            spec.relations.push(relation);
        }
    }
}

fn same_ends(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && (a == b || a.iter().rev().eq(b.iter()))
}

/// Splits a file into its YAML documents, each with its first line's offset; Juju reads
/// the documents after the first as overlays.
pub(crate) fn documents(text: &str) -> Vec<(String, usize)> {
    let mut docs = vec![(String::new(), 0)];
    for (i, line) in text.lines().enumerate() {
        if line == "---" || line.starts_with("--- ") || line.starts_with("---\t") {
            docs.push((String::new(), i + 1));
            continue;
        }
        let current = &mut docs.last_mut().expect("never empty").0;
        current.push_str(line);
        current.push('\n');
    }
    // A leading `---` starts the first document rather than ending an empty one.
    let blank = |t: &str| {
        t.lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    };
    if docs.len() > 1 && blank(&docs[0].0) {
        docs.remove(0);
    }
    docs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (Doc, Vec<Issue>) {
        let lines = Lines::new(text, 0);
        let mut issues = Vec::new();
        let value: Value = serde_yaml::from_str(text).unwrap();
        (read_doc(value, 0, &lines, &mut issues), issues)
    }

    #[test]
    fn finds_the_lines_of_nested_keys_and_of_relations() {
        let text = "applications:\n  discourse:\n    charm: ./d.wasm\n    options:\n      port: 1\n  pg: {charm: x}\nrelations:\n  - [\"a:db\", \"pg:db\"]\n  - - a:x\n    - pg:y\n";
        let lines = Lines::new(text, 0);
        assert_eq!(lines.line(&["applications", "discourse", "charm"]), Some(3));
        assert_eq!(
            lines.line(&["applications", "discourse", "options", "port"]),
            Some(5)
        );
        // Inside a flow mapping: the enclosing key's line.
        assert_eq!(lines.line(&["applications", "pg", "charm"]), Some(6));
        assert_eq!(lines.relation(0), Some(8));
        assert_eq!(lines.relation(1), Some(9));
        assert_eq!(lines.relation(2), Some(7));
    }

    #[test]
    fn every_unknown_key_is_reported_with_its_line_and_a_suggestion() {
        let text = "\
applications:
  pg:
    charm: postgresql
    num-units: 2
    colour: red
    relations: []
machines:
  0:
    constrants: mem=4G
relatoins: []
";
        let (_, issues) = read(text);
        let found: Vec<(Option<usize>, &str)> = issues
            .iter()
            .map(|i| (i.loc.line, i.message.as_str()))
            .collect();
        assert_eq!(found.len(), 5, "{found:#?}");
        assert_eq!(found[0].0, Some(4));
        assert!(
            found[0].1.contains("did you mean `num_units`?"),
            "{found:?}"
        );
        assert_eq!(found[1].0, Some(5));
        assert!(found[1].1.contains("in no version"), "{found:?}");
        assert_eq!(found[2].0, Some(6));
        assert!(found[2].1.contains("belongs at the top level"), "{found:?}");
        assert_eq!(found[3].0, Some(9));
        assert!(
            found[3].1.contains("did you mean `constraints`?"),
            "{found:?}"
        );
        assert_eq!(found[4].0, Some(10));
        assert!(
            found[4].1.contains("did you mean `relations`?"),
            "{found:?}"
        );
    }

    #[test]
    fn values_of_the_wrong_shape_are_reported() {
        let (_, issues) =
            read("applications:\n  pg:\n    charm: x\n    num_units: three\n    trust: maybe\n");
        assert_eq!(issues.len(), 2, "{issues:?}");
        assert!(
            issues[0]
                .message
                .contains("`num_units` must be a whole number")
        );
        assert_eq!(issues[0].loc.line, Some(4));
        assert!(issues[1].message.contains("`trust` must be true or false"));
    }

    #[test]
    fn an_overlay_overrides_options_removes_applications_and_adds_relations() {
        let base = "applications:\n  a: {charm: x, num_units: 1, options: {p: 1, q: 2}}\n  b: {charm: y}\n  c: {charm: z}\nrelations:\n  - [a, b]\n  - [a, c]\n";
        let over = "applications:\n  a:\n    num_units: 3\n    options: {q: 5, p: null}\n  c:\n  d: {charm: w}\nrelations:\n  - [b, a]\n  - [a, d]\n";
        let mut spec = Spec::default();
        let mut issues = Vec::new();
        let (doc, _) = read(base);
        merge(&mut spec, doc, true, &mut issues);
        let (doc, _) = read(over);
        merge(&mut spec, doc, false, &mut issues);
        assert!(issues.is_empty(), "{issues:?}");
        assert_eq!(
            spec.applications.keys().collect::<Vec<_>>(),
            ["a", "b", "d"]
        );
        let a = &spec.applications["a"];
        assert_eq!(
            a.get("num_units").unwrap().value,
            serde_yaml::to_value(3).unwrap()
        );
        assert_eq!(
            a.get("charm").unwrap().value,
            serde_yaml::to_value("x").unwrap()
        );
        let options: BTreeMap<String, i64> =
            serde_yaml::from_value(a.get("options").unwrap().value.clone()).unwrap();
        assert_eq!(options, BTreeMap::from([("q".to_string(), 5)]));
        let relations: Vec<Vec<String>> = spec.relations.iter().map(|r| r.ends.clone()).collect();
        assert_eq!(relations, [vec!["a", "b"], vec!["a", "d"]]);
    }

    #[test]
    fn removing_what_the_base_lacks_is_reported() {
        let mut spec = Spec::default();
        let mut issues = Vec::new();
        merge(
            &mut spec,
            read("applications: {a: {charm: x}}\n").0,
            true,
            &mut issues,
        );
        merge(
            &mut spec,
            read("applications:\n  nope:\n").0,
            false,
            &mut issues,
        );
        assert_eq!(issues.len(), 1);
        assert!(issues[0].message.contains("no such application"));
    }

    #[test]
    fn splits_documents_with_their_offsets() {
        let docs = documents("---\na: 1\n---\nb: 2\n");
        assert_eq!(docs, [("a: 1\n".to_string(), 1), ("b: 2\n".to_string(), 3)]);
        assert_eq!(documents("a: 1\n"), [("a: 1\n".to_string(), 0)]);
    }

    #[test]
    fn suggests_only_close_keys() {
        assert_eq!(
            suggest("num-units", ["num_units", "scale"]),
            Some("num_units")
        );
        assert_eq!(
            suggest("exposed", ["expose", "exposed-endpoints"]),
            Some("expose")
        );
        assert_eq!(suggest("colour", ["charm", "scale", "options"]), None);
    }
}
