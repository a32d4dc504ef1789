//! Dotted field paths: reading with mongod's implicit array traversal (the matcher's
//! `BSONElementIterator`), and exact reading/writing for updates.
//!
//! Invariants:
//! - Reading (`lookup*`) walks documents by field name; on reaching an array with path left it
//!   visits every element that is a document with the remaining path, and additionally the
//!   element whose index equals a numeric next component (`a.0.b`). Non-document elements that
//!   are not addressed by index contribute nothing. A missing field (or a scalar in the middle of
//!   the path) yields one [`PathValue`] with `value: None`. A path ending at an array yields its
//!   elements and then the array itself, or only one of those, as [`LeafArrays`] says.
//! - Writing (`set_path`, `remove_path`, `get_path`) never traverses arrays implicitly: numeric
//!   components index arrays; anything else through a non-document is a PathNotViable (28) error
//!   with mongod's message. Writes pad arrays with nulls up to the index they set.
//!
//! This module does not interpret operators or compare values.

use std::collections::HashSet;

use bson::{Bson, Document};

use tideway_base::display::element_string;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::MAX_USER_STORAGE_DEPTH;

/// What a path that ends on an array reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeafArrays {
    /// Each element, then the array itself (equality, comparisons, `$type`, `$exists`).
    ExpandAndSelf,
    /// Each element only (`distinct`).
    ExpandOnly,
    /// The array itself only (`$size`, `$elemMatch`).
    NoExpand,
}

/// One candidate value found at a path.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathValue<'a> {
    /// `None` when the path is missing along this branch.
    pub value: Option<&'a Bson>,
    /// Index in the outermost array traversed implicitly to reach this value (for positional `$`).
    pub array_index: Option<usize>,
    /// True for the whole leaf array reported after its elements under [`LeafArrays::ExpandAndSelf`].
    pub is_leaf_array: bool,
}

/// A dotted path split into its components.
pub fn split_path(path: &str) -> Vec<String> {
    path.split('.').map(str::to_string).collect()
}

/// A component made only of ASCII digits, as an array index.
pub fn array_index(component: &str) -> Option<usize> {
    if component.is_empty() || !component.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    component.parse().ok()
}

/// All candidate values at `path` under the matcher's traversal rules.
pub fn lookup<'a>(
    document: &'a Document,
    parts: &[String],
    leaf: LeafArrays,
) -> Vec<PathValue<'a>> {
    let mut walk = Walk {
        leaf,
        found: Vec::new(),
        // Only a numeric component makes an array element reachable two ways (as a document
        // with the same path, and by its index), and chains of those would revisit the same
        // subdocuments exponentially often.
        visited: parts
            .iter()
            .any(|part| array_index(part).is_some())
            .then(HashSet::new),
    };
    walk_document(document, parts, None, &mut walk);
    walk.found
}

/// One lookup's state: what it found, and which (subdocument, remaining path) pairs it has
/// walked when a path can reach one twice. Each pair is walked once, so a lookup costs at most
/// the document's size times the path's length.
struct Walk<'a> {
    leaf: LeafArrays,
    found: Vec<PathValue<'a>>,
    visited: Option<HashSet<(usize, usize)>>,
}

/// The values present at a dotted path, leaf arrays expanded (what `distinct` reports).
pub fn lookup_values<'a>(document: &'a Document, path: &str) -> Vec<&'a Bson> {
    lookup(document, &split_path(path), LeafArrays::ExpandOnly)
        .into_iter()
        .filter_map(|candidate| candidate.value)
        .collect()
}

fn push<'a>(walk: &mut Walk<'a>, value: Option<&'a Bson>, outer_index: Option<usize>) {
    walk.found.push(PathValue {
        value,
        array_index: outer_index,
        is_leaf_array: false,
    });
}

fn walk_document<'a>(
    document: &'a Document,
    parts: &[String],
    outer_index: Option<usize>,
    walk: &mut Walk<'a>,
) {
    if let Some(visited) = &mut walk.visited {
        if !visited.insert((std::ptr::from_ref(document) as usize, parts.len())) {
            return;
        }
    }
    let mut current = document;
    for (position, part) in parts.iter().enumerate() {
        let is_last = position + 1 == parts.len();
        match current.get(part) {
            None => return push(walk, None, outer_index),
            Some(value @ Bson::Array(elements)) => {
                return walk_array(value, elements, &parts[position + 1..], outer_index, walk)
            }
            Some(Bson::Document(inner)) if !is_last => current = inner,
            Some(value) => {
                let value = if is_last { Some(value) } else { None };
                return push(walk, value, outer_index);
            }
        }
    }
    // An empty path names nothing.
    if parts.is_empty() {
        push(walk, None, outer_index);
    }
}

fn walk_array<'a>(
    array: &'a Bson,
    elements: &'a [Bson],
    rest: &[String],
    outer_index: Option<usize>,
    walk: &mut Walk<'a>,
) {
    let leaf = walk.leaf;
    let Some(next) = rest.first() else {
        if leaf != LeafArrays::NoExpand {
            for (index, element) in elements.iter().enumerate() {
                push(walk, Some(element), outer_index.or(Some(index)));
            }
        }
        if leaf != LeafArrays::ExpandOnly {
            walk.found.push(PathValue {
                value: Some(array),
                array_index: outer_index,
                is_leaf_array: leaf == LeafArrays::ExpandAndSelf,
            });
        }
        return;
    };
    let addressed_index = array_index(next);
    for (index, element) in elements.iter().enumerate() {
        if let Bson::Document(inner) = element {
            walk_document(inner, rest, outer_index.or(Some(index)), walk);
        }
        if addressed_index != Some(index) {
            continue;
        }
        let after_index = &rest[1..];
        match element {
            _ if after_index.is_empty() => push(walk, Some(element), outer_index),
            Bson::Document(inner) => walk_document(inner, after_index, outer_index, walk),
            Bson::Array(nested) => walk_array(element, nested, after_index, outer_index, walk),
            _ => {}
        }
    }
}

/// The value at an exact path: documents by name, arrays by numeric index; no implicit traversal.
pub fn get_path<'a, S: AsRef<str>>(document: &'a Document, parts: &[S]) -> Option<&'a Bson> {
    let (first, rest) = parts.split_first()?;
    let mut current = document.get(first.as_ref())?;
    for part in rest {
        current = child(current, part.as_ref())?;
    }
    Some(current)
}

fn child<'a>(container: &'a Bson, part: &str) -> Option<&'a Bson> {
    match container {
        Bson::Document(inner) => inner.get(part),
        Bson::Array(elements) => elements.get(array_index(part)?),
        _ => None,
    }
}

fn child_mut<'a>(container: &'a mut Bson, part: &str) -> Option<&'a mut Bson> {
    match container {
        Bson::Document(inner) => inner.get_mut(part),
        Bson::Array(elements) => elements.get_mut(array_index(part)?),
        _ => None,
    }
}

/// Mutable access to the value at an exact path.
pub(crate) fn get_path_mut<'a, S: AsRef<str>>(
    document: &'a mut Document,
    parts: &[S],
) -> Option<&'a mut Bson> {
    let (first, rest) = parts.split_first()?;
    let mut current = document.get_mut(first.as_ref())?;
    for part in rest {
        current = child_mut(current, part.as_ref())?;
    }
    Some(current)
}

fn cannot_create(part: &str, parent_name: &str, parent: &Bson) -> CommandError {
    CommandError::new(
        ErrorCode::PathNotViable,
        format!(
            "Cannot create field '{part}' in element {}",
            element_string(parent_name, parent)
        ),
    )
}

/// mongod's `kMaxPaddingAllowed`: a write may pad an array with at most this many nulls to reach
/// the index it sets, so `{$set: {"a.2147483647": 1}}` cannot allocate gigabytes.
pub(crate) const MAX_ARRAY_PADDING: usize = 1_500_000;

/// Stores `value` at an exact path, creating missing intermediate documents and padding arrays
/// with nulls. Fails with PathNotViable (28) when a component runs into a scalar, or into an
/// array with a non-numeric component, and with CannotBackfillArray (34) when reaching the index
/// would take more than [`MAX_ARRAY_PADDING`] nulls.
pub(crate) fn set_path<S: AsRef<str>>(
    document: &mut Document,
    parts: &[S],
    value: Bson,
) -> CommandResult<()> {
    let Some((first, rest)) = parts.split_first() else {
        return Err(CommandError::new(
            ErrorCode::EmptyFieldName,
            "An empty update path is not valid.",
        ));
    };
    let first = first.as_ref();
    if rest.is_empty() {
        document.insert(first, value);
        return Ok(());
    }
    if !document.contains_key(first) {
        document.insert(first, Document::new());
    }
    match document.get_mut(first) {
        Some(slot) => set_in_value(slot, first, rest, 2, value),
        None => Err(CommandError::internal(
            "field vanished while setting a path",
        )),
    }
}

/// Sets `parts` below `container`, whose first component lies at `level` (top-level fields are
/// level 1). Nothing is created past mongod's storage depth, so the recursion is bounded however
/// long the path.
fn set_in_value<S: AsRef<str>>(
    container: &mut Bson,
    container_name: &str,
    parts: &[S],
    level: usize,
    value: Bson,
) -> CommandResult<()> {
    let Some((part, rest)) = parts.split_first() else {
        *container = value;
        return Ok(());
    };
    let part = part.as_ref();
    if level > MAX_USER_STORAGE_DEPTH && matches!(container, Bson::Document(_) | Bson::Array(_)) {
        return Err(CommandError::new(
            ErrorCode::Overflow,
            format!("Document exceeds maximum nesting depth of {MAX_USER_STORAGE_DEPTH}"),
        ));
    }
    match container {
        Bson::Document(inner) => {
            if rest.is_empty() {
                inner.insert(part, value);
                return Ok(());
            }
            if !inner.contains_key(part) {
                inner.insert(part, Document::new());
            }
            match inner.get_mut(part) {
                Some(slot) => set_in_value(slot, part, rest, level + 1, value),
                None => Err(CommandError::internal(
                    "field vanished while setting a path",
                )),
            }
        }
        Bson::Array(elements) => {
            let Some(index) = array_index(part) else {
                return Err(cannot_create(part, container_name, container));
            };
            if index >= elements.len() {
                // `index - len` counts the nulls beyond the one slot the value takes.
                if index - elements.len() >= MAX_ARRAY_PADDING {
                    return Err(CommandError::new(
                        ErrorCode::CannotBackfillArray,
                        format!("can't backfill more than {MAX_ARRAY_PADDING} elements"),
                    ));
                }
                elements.resize(index + 1, Bson::Null);
                if !rest.is_empty() {
                    elements[index] = Bson::Document(Document::new());
                }
            }
            set_in_value(&mut elements[index], part, rest, level + 1, value)
        }
        _ => Err(cannot_create(part, container_name, container)),
    }
}

/// Removes the value at an exact path. Array elements are replaced by null (mongod's `$unset`);
/// returns the previous value, or `None` if the path did not exist.
pub(crate) fn remove_path<S: AsRef<str>>(document: &mut Document, parts: &[S]) -> Option<Bson> {
    let (last, parents) = parts.split_last()?;
    if parents.is_empty() {
        return document.remove(last.as_ref());
    }
    let parent = get_path_mut(document, parents)?;
    match parent {
        Bson::Document(inner) => inner.remove(last.as_ref()),
        Bson::Array(elements) => {
            let slot = elements.get_mut(array_index(last.as_ref())?)?;
            Some(std::mem::replace(slot, Bson::Null))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn values(document: &Document, path: &str, leaf: LeafArrays) -> Vec<Option<Bson>> {
        lookup(document, &split_path(path), leaf)
            .into_iter()
            .map(|candidate| candidate.value.cloned())
            .collect()
    }

    #[test]
    fn dotted_path_traverses_arrays_of_documents() {
        let document = doc! {"a": [{"b": 1}, {"b": 2}]};
        assert_eq!(
            values(&document, "a.b", LeafArrays::ExpandAndSelf),
            vec![Some(1.into()), Some(2.into())]
        );
    }

    #[test]
    fn subdocument_without_field_reports_missing() {
        let document = doc! {"a": [{"b": 1}, {"c": 2}]};
        assert_eq!(
            values(&document, "a.b", LeafArrays::ExpandAndSelf),
            vec![Some(1.into()), None]
        );
    }

    #[test]
    fn scalar_array_elements_yield_nothing_for_a_subpath() {
        let document = doc! {"a": [1, 2]};
        assert!(values(&document, "a.b", LeafArrays::ExpandAndSelf).is_empty());
    }

    #[test]
    fn scalar_in_the_middle_reports_missing() {
        assert_eq!(
            values(&doc! {"a": 5}, "a.b", LeafArrays::ExpandAndSelf),
            vec![None]
        );
        assert_eq!(
            values(&doc! {}, "a.b", LeafArrays::ExpandAndSelf),
            vec![None]
        );
    }

    #[test]
    fn leaf_array_yields_elements_then_itself() {
        let document = doc! {"a": [1, [2]]};
        let expanded = values(&document, "a", LeafArrays::ExpandAndSelf);
        assert_eq!(
            expanded,
            vec![
                Some(1.into()),
                Some(Bson::Array(vec![2.into()])),
                Some(document.get("a").cloned().unwrap_or(Bson::Null))
            ]
        );
        assert_eq!(values(&document, "a", LeafArrays::ExpandOnly).len(), 2);
        assert_eq!(values(&document, "a", LeafArrays::NoExpand).len(), 1);
    }

    #[test]
    fn numeric_component_indexes_arrays() {
        let document = doc! {"a": [{"b": 1}, {"b": 2}]};
        // As in mongod, each subdocument is also searched for a field literally named "1".
        assert_eq!(
            values(&document, "a.1.b", LeafArrays::ExpandAndSelf),
            vec![None, None, Some(2.into())]
        );
        assert_eq!(
            values(&doc! {"a": [5, 6]}, "a.0", LeafArrays::ExpandAndSelf),
            vec![Some(5.into())]
        );
        assert_eq!(
            values(
                &doc! {"a": [[{"b": 3}]]},
                "a.0.b",
                LeafArrays::ExpandAndSelf
            ),
            vec![Some(3.into())]
        );
    }

    #[test]
    fn numeric_component_also_names_fields_of_subdocuments() {
        let document = doc! {"a": [{"0": "field"}, "x"]};
        assert_eq!(
            values(&document, "a.0", LeafArrays::ExpandAndSelf),
            vec![
                Some("field".into()),
                Some(Bson::Document(doc! {"0": "field"}))
            ]
        );
    }

    #[test]
    fn nested_arrays_are_not_traversed_without_an_index() {
        assert!(values(&doc! {"a": [[{"b": 1}]]}, "a.b", LeafArrays::ExpandAndSelf).is_empty());
    }

    #[test]
    fn array_index_reports_outermost_array_position() {
        let document = doc! {"a": [{"b": [7, 8]}, {"b": [9]}]};
        let found = lookup(&document, &split_path("a.b"), LeafArrays::ExpandAndSelf);
        let nine = found
            .iter()
            .find(|c| c.value == Some(&Bson::Int32(9)))
            .map(|c| c.array_index);
        assert_eq!(nine, Some(Some(1)));
    }

    #[test]
    fn lookup_values_is_what_distinct_sees() {
        let document = doc! {"a": [{"b": [1, 2]}, {"b": 3}, {"c": 1}]};
        assert_eq!(
            lookup_values(&document, "a.b"),
            vec![&Bson::Int32(1), &Bson::Int32(2), &Bson::Int32(3)]
        );
    }

    #[test]
    fn set_path_creates_intermediate_documents() {
        let mut document = doc! {"x": 1};
        set_path(&mut document, &["a", "b", "c"], Bson::Int32(1)).expect("settable");
        assert_eq!(document, doc! {"x": 1, "a": {"b": {"c": 1}}});
    }

    #[test]
    fn set_path_through_scalar_is_path_not_viable() {
        let mut document = doc! {"a": 1};
        let error = set_path(&mut document, &["a", "b"], Bson::Int32(1)).expect_err("not viable");
        assert_eq!(error.code, ErrorCode::PathNotViable);
        assert_eq!(error.errmsg, "Cannot create field 'b' in element {a: 1}");
    }

    #[test]
    fn set_path_pads_arrays_with_null() {
        let mut document = doc! {"a": [1]};
        set_path(&mut document, &["a", "3"], Bson::Int32(4)).expect("settable");
        assert_eq!(document, doc! {"a": [1, null, null, 4]});
        set_path(&mut document, &["a", "5", "b"], Bson::Int32(6)).expect("settable");
        assert_eq!(document, doc! {"a": [1, null, null, 4, null, {"b": 6}]});
    }

    #[test]
    fn set_path_pads_at_most_mongods_limit() {
        // Found by tests/fuzz.rs: `$push: {"a.2147483648": …}` padded 2^31 nulls.
        let mut document = doc! {"a": [1]};
        let error = set_path(&mut document, &["a", "2147483648"], Bson::Int32(1))
            .expect_err("too much padding");
        assert_eq!(error.code, ErrorCode::CannotBackfillArray);
        assert_eq!(error.errmsg, "can't backfill more than 1500000 elements");
        let error = set_path(
            &mut document,
            &["a", "18446744073709551615"],
            Bson::Int32(1),
        )
        .expect_err("too much padding");
        assert_eq!(error.code.code(), 34);
        assert_eq!(document, doc! {"a": [1]});
        let last_legal = MAX_ARRAY_PADDING.to_string();
        set_path(&mut document, &["a", last_legal.as_str()], Bson::Int32(2)).expect("settable");
        assert_eq!(
            document.get_array("a").map(Vec::len),
            Ok(MAX_ARRAY_PADDING + 1)
        );
    }

    #[test]
    fn set_path_with_field_name_on_array_is_path_not_viable() {
        let mut document = doc! {"a": [1]};
        let error = set_path(&mut document, &["a", "b"], Bson::Int32(1)).expect_err("not viable");
        assert_eq!(
            error.errmsg,
            "Cannot create field 'b' in element {a: [ 1 ]}"
        );
    }

    #[test]
    fn remove_path_nulls_array_elements() {
        let mut document = doc! {"a": [1, 2], "b": {"c": 1, "d": 2}};
        assert_eq!(
            remove_path(&mut document, &["a", "0"]),
            Some(Bson::Int32(1))
        );
        assert_eq!(
            remove_path(&mut document, &["b", "c"]),
            Some(Bson::Int32(1))
        );
        assert_eq!(remove_path(&mut document, &["b", "zz"]), None);
        assert_eq!(document, doc! {"a": [null, 2], "b": {"d": 2}});
    }

    #[test]
    fn get_path_indexes_arrays_exactly() {
        let document = doc! {"a": [{"b": 1}, {"b": 2}]};
        assert_eq!(get_path(&document, &["a", "1", "b"]), Some(&Bson::Int32(2)));
        assert_eq!(get_path(&document, &["a", "b"]), None);
    }

    #[test]
    fn numeric_paths_through_nested_arrays_cost_polynomial_time() {
        // Each array element is reachable as a document and by index: without memoising
        // (subdocument, remaining path), 60 levels would take 2^60 steps.
        let mut value = Bson::Int32(1);
        for _ in 0..60 {
            value = Bson::Array(vec![Bson::Document(doc! {"0": value})]);
        }
        let document = doc! {"0": value};
        let parts = split_path(&vec!["0"; 121].join("."));
        let found = lookup(&document, &parts, LeafArrays::ExpandAndSelf);
        assert!(found
            .iter()
            .any(|candidate| candidate.value == Some(&Bson::Int32(1))));
        assert!(found.len() < 100_000, "{} values", found.len());
    }
}
