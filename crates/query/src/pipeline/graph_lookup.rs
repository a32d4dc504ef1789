//! `$graphLookup`: parsing the stage, and the breadth-first search over another collection for
//! one input document, which the caller drives one read per depth.
//!
//! Invariants (mongod's `DocumentSourceGraphLookUp`):
//! - The search starts from the value of `startWith` (each element when it is an array; a
//!   missing value starts nothing) and, depth after depth, reads the foreign documents whose
//!   `connectToField` is `$in` the frontier (and match `restrictSearchWithMatch`); each document
//!   not seen before (by `_id`, which it must have: 40271) joins the result with its depth, and
//!   the values at its `connectFromField` (array elements expanded) form the next frontier.
//! - It ends when a depth finds nothing new, when the next depth would pass `maxDepth`, or when
//!   every frontier value has been asked for already (asking again could only find documents
//!   already seen).
//! - A null in the frontier matches null, never a missing `connectToField`.
//! - What the search holds (results and frontier) is bounded by mongod's 100 MiB limit (40099);
//!   as in mongod, `allowDiskUse` does not lift it. Results keep the order they were found in.

use std::collections::HashSet;

use bson::{doc, Bson, Document};

use super::lookup::comparison_key;
use crate::collation::Collation;
use crate::expr::{Expr, PipelineContext};
use crate::filter::Filter;
use crate::path;
use tideway_base::display::type_name;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// mongod's `internalDocumentSourceGraphLookupMaxMemoryBytes`.
const MAX_MEMORY_BYTES: usize = 100 * 1024 * 1024;

/// A parsed `$graphLookup`.
#[derive(Clone, Debug)]
pub struct GraphLookup {
    /// The foreign collection, in the pipeline's database.
    pub from: String,
    start_with: Expr,
    connect_from: String,
    connect_to: String,
    as_field: Vec<String>,
    depth_field: Option<Vec<String>>,
    max_depth: Option<i64>,
    restrict: Option<Document>,
}

fn failed(code: ErrorCode, message: impl Into<String>) -> CommandError {
    CommandError::new(code, message)
}

/// mongod's `FieldPath` checks, for the stage's path arguments.
fn field_path(path: &str) -> CommandResult<String> {
    if path.is_empty() {
        return Err(failed(
            ErrorCode::Location40352,
            "FieldPath cannot be constructed with empty string",
        ));
    }
    for part in path.split('.') {
        if part.is_empty() {
            return Err(failed(
                ErrorCode::Location15998,
                "FieldPath field names may not be empty strings.",
            ));
        }
        if part.starts_with('$') {
            return Err(failed(
                ErrorCode::Location16410,
                format!(
                    "FieldPath field names may not start with '$'. Consider using $getField or \
                     $setField. in path {path}"
                ),
            ));
        }
    }
    Ok(path.to_string())
}

/// `maxDepth`: a nonnegative number with an integral value.
fn parse_max_depth(value: &Bson) -> CommandResult<i64> {
    let number = match value {
        Bson::Int32(number) => f64::from(*number),
        Bson::Int64(number) => *number as f64,
        Bson::Double(number) => *number,
        Bson::Decimal128(number) => number.to_string().parse().unwrap_or(f64::NAN),
        other => {
            return Err(failed(
                ErrorCode::Location40100,
                format!("maxDepth must be numeric, found type: {}", type_name(other)),
            ))
        }
    };
    let depth = match value {
        Bson::Int64(number) => *number,
        // mongod's `safeNumberLong`: NaN is 0, out-of-range values saturate.
        _ if number.is_nan() => 0,
        _ => number as i64,
    };
    if depth < 0 {
        return Err(failed(
            ErrorCode::Location40101,
            format!("maxDepth requires a nonnegative argument, found: {depth}"),
        ));
    }
    if !matches!(value, Bson::Int32(_) | Bson::Int64(_)) && depth as f64 != number {
        return Err(failed(
            ErrorCode::Location40102,
            format!("maxDepth could not be represented as a long long: {depth}"),
        ));
    }
    Ok(depth)
}

impl GraphLookup {
    pub(crate) fn parse(spec: &Bson) -> CommandResult<GraphLookup> {
        let Bson::Document(arguments) = spec else {
            return Err(failed(
                ErrorCode::FailedToParse,
                format!(
                    "the $graphLookup stage specification must be an object, but found {}",
                    type_name(spec)
                ),
            ));
        };
        let mut from = None;
        let mut as_field = None;
        let mut connect_from = None;
        let mut connect_to = None;
        let mut depth_field = None;
        let mut start_with = None;
        let mut max_depth = None;
        let mut restrict = None;
        for (name, value) in arguments {
            match name.as_str() {
                "startWith" => start_with = Some(Expr::parse(value)?),
                "maxDepth" => max_depth = Some(parse_max_depth(value)?),
                "restrictSearchWithMatch" => {
                    let Bson::Document(filter) = value else {
                        return Err(failed(
                            ErrorCode::Location40185,
                            format!(
                                "restrictSearchWithMatch must be an object, found {}",
                                type_name(value)
                            ),
                        ));
                    };
                    Filter::parse(filter)
                        .and_then(Filter::refuse_near)
                        .map_err(|error| {
                            error.caused(
                                "Failed to parse 'restrictSearchWithMatch' option to $graphLookup",
                            )
                        })?;
                    restrict = Some(filter.clone());
                }
                "from" | "as" | "connectFromField" | "connectToField" | "depthField" => {
                    let Bson::String(text) = value else {
                        return Err(failed(
                            ErrorCode::Location40103,
                            format!(
                                "expected string as argument for {name}, found: {}",
                                type_name(value)
                            ),
                        ));
                    };
                    match name.as_str() {
                        "from" => from = Some(text.clone()),
                        "as" => as_field = Some(field_path(text)?),
                        "connectFromField" => connect_from = Some(field_path(text)?),
                        "connectToField" => connect_to = Some(field_path(text)?),
                        _ => depth_field = Some(path::split_path(&field_path(text)?)),
                    }
                }
                other => {
                    return Err(failed(
                        ErrorCode::Location40104,
                        format!("Unknown argument to $graphLookup: {other}"),
                    ))
                }
            }
        }
        let (Some(from), Some(as_field), Some(start_with), Some(connect_from), Some(connect_to)) = (
            from.filter(|from| !from.is_empty()),
            as_field,
            start_with,
            connect_from,
            connect_to,
        ) else {
            return Err(failed(
                ErrorCode::Location40105,
                "$graphLookup requires 'from', 'as', 'startWith', 'connectFromField', and \
                 'connectToField' to be specified.",
            ));
        };
        Ok(GraphLookup {
            from,
            start_with,
            connect_from,
            connect_to,
            as_field: path::split_path(&as_field),
            depth_field,
            max_depth,
            restrict,
        })
    }

    /// The search for `document`'s results.
    pub fn search<'g>(
        &'g self,
        document: Document,
        context: &'g PipelineContext,
    ) -> CommandResult<GraphSearch<'g>> {
        let start = self.start_with.evaluate_in(&document, context)?;
        let frontier = match start {
            Some(Bson::Array(values)) => values,
            Some(value) => vec![value],
            None => Vec::new(),
        };
        let mut search = GraphSearch {
            graph: self,
            collation: context.collation.as_deref(),
            document,
            frontier: Vec::new(),
            queried: HashSet::new(),
            seen_ids: HashSet::new(),
            results: Vec::new(),
            depth: 0,
            results_bytes: 0,
            frontier_bytes: 0,
            ended: false,
        };
        for value in frontier {
            search.add_to_frontier(value)?;
        }
        Ok(search)
    }
}

/// One input document's breadth-first search: [`GraphSearch::next_filter`] says what to read
/// for the next depth, [`GraphSearch::visit`] takes what that read found, and
/// [`GraphSearch::finish`] gives the input document with its results.
pub struct GraphSearch<'g> {
    graph: &'g GraphLookup,
    collation: Option<&'g Collation>,
    document: Document,
    /// Values the next depth asks for.
    frontier: Vec<Bson>,
    /// Comparison keys of every value asked for so far.
    queried: HashSet<Vec<u8>>,
    seen_ids: HashSet<Vec<u8>>,
    results: Vec<Bson>,
    depth: i64,
    /// Approximate bytes held in `results`.
    results_bytes: usize,
    /// Approximate bytes held in `frontier`.
    frontier_bytes: usize,
    ended: bool,
}

fn approximate_size(value: &Bson) -> usize {
    match value {
        Bson::Document(document) => tideway_base::bsonutil::encoded_size(document),
        Bson::String(text) => text.len() + 5,
        Bson::Array(values) => values.iter().map(approximate_size).sum::<usize>() + 5,
        _ => 16,
    }
}

impl GraphSearch<'_> {
    /// Fails once what the search holds reaches mongod's limit.
    fn check_memory(&self) -> CommandResult<()> {
        if self.results_bytes.saturating_add(self.frontier_bytes) >= MAX_MEMORY_BYTES {
            return Err(failed(
                ErrorCode::Location40099,
                "$graphLookup reached maximum memory consumption",
            ));
        }
        Ok(())
    }

    fn add_to_frontier(&mut self, value: Bson) -> CommandResult<()> {
        if self.queried.insert(comparison_key(&value, self.collation)) {
            self.frontier_bytes = self.frontier_bytes.saturating_add(approximate_size(&value));
            self.frontier.push(value);
            self.check_memory()?;
        }
        Ok(())
    }

    /// The filter the next depth reads the foreign collection with, or `None` when the search
    /// has ended.
    pub fn next_filter(&mut self) -> Option<Document> {
        if self.ended || self.frontier.is_empty() {
            self.ended = true;
            return None;
        }
        let values = std::mem::take(&mut self.frontier);
        self.frontier_bytes = 0;
        let connect_to = self.graph.connect_to.as_str();
        let matches_null = values.iter().any(|value| matches!(value, Bson::Null));
        let mut clauses: Vec<Bson> = Vec::new();
        if let Some(restrict) = &self.graph.restrict {
            clauses.push(Bson::Document(restrict.clone()));
        }
        clauses.push(Bson::Document(doc! {connect_to: {"$in": values}}));
        if matches_null {
            // `$in: [null]` also matches a missing field and undefined; the search wants
            // neither.
            clauses.push(Bson::Document(doc! {connect_to: {"$exists": true}}));
            clauses.push(Bson::Document(
                doc! {connect_to: {"$not": {"$type": "undefined"}}},
            ));
        }
        Some(doc! {"$and": clauses})
    }

    /// Takes the documents the read for the current depth found.
    pub fn visit(&mut self, found: Vec<Document>) -> CommandResult<()> {
        let mut found_new = false;
        for mut document in found {
            let Some(id) = document.get("_id") else {
                return Err(failed(
                    ErrorCode::Location40271,
                    format!(
                        "Documents in the '{}' namespace must contain an _id for de-duplication \
                         in $graphLookup",
                        self.graph.from
                    ),
                ));
            };
            if !self.seen_ids.insert(comparison_key(id, None)) {
                continue;
            }
            found_new = true;
            if let Some(depth_field) = &self.graph.depth_field {
                path::set_path(&mut document, depth_field, Bson::Int64(self.depth))?;
            }
            let next: Vec<Bson> = path::lookup_values(&document, &self.graph.connect_from)
                .into_iter()
                .cloned()
                .collect();
            let document = Bson::Document(document);
            self.results_bytes = self
                .results_bytes
                .saturating_add(approximate_size(&document));
            self.check_memory()?;
            self.results.push(document);
            for value in next {
                self.add_to_frontier(value)?;
            }
        }
        self.depth += 1;
        if !found_new || self.graph.max_depth.is_some_and(|max| self.depth > max) {
            self.ended = true;
        }
        Ok(())
    }

    /// The input document with `as` set to the documents found.
    pub fn finish(self) -> CommandResult<Document> {
        let mut document = self.document;
        path::set_path(
            &mut document,
            &self.graph.as_field,
            Bson::Array(self.results),
        )?;
        Ok(document)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::parse_error;
    use super::*;
    use crate::expr::fixtures::context;

    fn graph(spec: Document) -> GraphLookup {
        GraphLookup::parse(&Bson::Document(spec)).expect("valid $graphLookup")
    }

    /// Runs the search against `foreign` as the caller would, matching each filter in memory.
    fn search_all(graph: &GraphLookup, document: Document, foreign: &[Document]) -> Document {
        let context = context();
        let mut search = graph.search(document, &context).expect("search starts");
        while let Some(filter) = search.next_filter() {
            let filter = Filter::parse(&filter).expect("the search's filter parses");
            let found = foreign
                .iter()
                .filter(|document| filter.matches(document))
                .cloned()
                .collect();
            search.visit(found).expect("visit");
        }
        search.finish().expect("finish")
    }

    fn ids(document: &Document, field: &str) -> Vec<Bson> {
        let mut ids: Vec<Bson> = document
            .get_array(field)
            .expect("as array")
            .iter()
            .map(|found| {
                found
                    .as_document()
                    .expect("document")
                    .get("_id")
                    .cloned()
                    .expect("_id")
            })
            .collect();
        ids.sort_by_key(|id| id.as_i32());
        ids
    }

    /// The manual's `employees` example (reportsTo chain).
    fn employees() -> Vec<Document> {
        vec![
            doc! {"_id": 1, "name": "Dev"},
            doc! {"_id": 2, "name": "Eliot", "reportsTo": "Dev"},
            doc! {"_id": 3, "name": "Ron", "reportsTo": "Eliot"},
            doc! {"_id": 4, "name": "Andrew", "reportsTo": "Eliot"},
            doc! {"_id": 5, "name": "Asya", "reportsTo": "Ron"},
            doc! {"_id": 6, "name": "Dan", "reportsTo": "Andrew"},
        ]
    }

    #[test]
    fn reporting_hierarchy_follows_the_manual() {
        let graph = graph(doc! {
            "from": "employees", "startWith": "$reportsTo", "connectFromField": "reportsTo",
            "connectToField": "name", "as": "reportingHierarchy"
        });
        let foreign = employees();
        let expected: [&[i32]; 6] = [&[], &[1], &[1, 2], &[1, 2], &[1, 2, 3], &[1, 2, 4]];
        for (document, expected) in foreign.iter().zip(expected) {
            let out = search_all(&graph, document.clone(), &foreign);
            let expected: Vec<Bson> = expected.iter().map(|id| Bson::Int32(*id)).collect();
            assert_eq!(ids(&out, "reportingHierarchy"), expected, "{document}");
        }
    }

    #[test]
    fn max_depth_and_depth_field_follow_the_manual() {
        // The manual's airports example: from JFK with maxDepth 2 every airport is reached,
        // BOS and ORD at depth 0 via the traveler's nearest airport.
        let airports = vec![
            doc! {"_id": 0, "airport": "JFK", "connects": ["BOS", "ORD"]},
            doc! {"_id": 1, "airport": "BOS", "connects": ["JFK", "PWM"]},
            doc! {"_id": 2, "airport": "ORD", "connects": ["JFK"]},
            doc! {"_id": 3, "airport": "PWM", "connects": ["BOS", "LHR"]},
            doc! {"_id": 4, "airport": "LHR", "connects": ["PWM"]},
        ];
        let graph = graph(doc! {
            "from": "airports", "startWith": "$nearestAirport", "connectFromField": "connects",
            "connectToField": "airport", "maxDepth": 2, "depthField": "numConnections",
            "as": "destinations"
        });
        let out = search_all(
            &graph,
            doc! {"_id": 1, "name": "Dev", "nearestAirport": "JFK"},
            &airports,
        );
        let depths: Vec<(i32, i64)> = out
            .get_array("destinations")
            .expect("array")
            .iter()
            .map(|found| {
                let found = found.as_document().expect("document");
                (
                    found.get_i32("_id").expect("_id"),
                    found.get_i64("numConnections").expect("NumberLong depth"),
                )
            })
            .collect();
        let mut depths = depths;
        depths.sort_unstable();
        assert_eq!(depths, vec![(0, 0), (1, 1), (2, 1), (3, 2)]);
        let out = search_all(
            &graph,
            doc! {"_id": 2, "name": "Eliot", "nearestAirport": "JFK"},
            &airports,
        );
        assert_eq!(out.get_array("destinations").expect("array").len(), 4);
        let graph_to_lhr = super::GraphLookup {
            max_depth: Some(3),
            ..graph
        };
        let out = search_all(&graph_to_lhr, doc! {"nearestAirport": "JFK"}, &airports);
        assert_eq!(out.get_array("destinations").expect("array").len(), 5);
    }

    #[test]
    fn restrict_search_with_match_prunes_the_graph() {
        // The manual's people example: Tanya Jordan's friends-of-friends who like golf.
        let people = vec![
            doc! {"_id": 1, "name": "Tanya Jordan", "friends": ["Shirley Soto", "Terry Hawkins", "Carole Hale"], "hobbies": ["tennis", "unicycling", "golf"]},
            doc! {"_id": 2, "name": "Carole Hale", "friends": ["Joseph Dennis", "Tanya Jordan", "Terry Hawkins"], "hobbies": ["archery", "golf", "woodworking"]},
            doc! {"_id": 3, "name": "Terry Hawkins", "friends": ["Tanya Jordan", "Carole Hale", "Angelo Ward"], "hobbies": ["knitting", "frisbee"]},
            doc! {"_id": 4, "name": "Joseph Dennis", "friends": ["Angelo Ward", "Carole Hale"], "hobbies": ["tennis", "golf", "topiary"]},
            doc! {"_id": 5, "name": "Angelo Ward", "friends": ["Terry Hawkins", "Shirley Soto", "Joseph Dennis"], "hobbies": ["travel", "ceramics", "golf"]},
            doc! {"_id": 6, "name": "Shirley Soto", "friends": ["Angelo Ward", "Tanya Jordan", "Carole Hale"], "hobbies": ["frisbee", "set theory"]},
        ];
        let graph = graph(doc! {
            "from": "people", "startWith": "$friends", "connectFromField": "friends",
            "connectToField": "name", "as": "golfers",
            "restrictSearchWithMatch": {"hobbies": "golf"}
        });
        let out = search_all(&graph, people[0].clone(), &people);
        let mut names: Vec<&str> = out
            .get_array("golfers")
            .expect("array")
            .iter()
            .map(|found| {
                found
                    .as_document()
                    .expect("doc")
                    .get_str("name")
                    .expect("name")
            })
            .collect();
        names.sort_unstable();
        assert_eq!(
            names,
            vec![
                "Angelo Ward",
                "Carole Hale",
                "Joseph Dennis",
                "Tanya Jordan"
            ]
        );
    }

    #[test]
    fn null_start_matches_null_not_missing_and_missing_matches_nothing() {
        let foreign = vec![
            doc! {"_id": 1, "to": Bson::Null},
            doc! {"_id": 2},
            doc! {"_id": 3, "to": 0},
        ];
        let graph = graph(doc! {
            "from": "f", "startWith": "$start", "connectFromField": "from",
            "connectToField": "to", "as": "out"
        });
        let out = search_all(&graph, doc! {"start": Bson::Null}, &foreign);
        assert_eq!(ids(&out, "out"), vec![Bson::Int32(1)]);
        let out = search_all(&graph, doc! {}, &foreign);
        assert_eq!(ids(&out, "out"), Vec::<Bson>::new());
        // Cycles end: each document is found once.
        let cycle = vec![
            doc! {"_id": 1, "to": 1, "from": 2},
            doc! {"_id": 2, "to": 2, "from": 1},
        ];
        let out = search_all(&graph, doc! {"start": 1}, &cycle);
        assert_eq!(ids(&out, "out"), vec![Bson::Int32(1), Bson::Int32(2)]);
    }

    #[test]
    fn foreign_documents_need_an_id() {
        let graph = graph(doc! {
            "from": "f", "startWith": 1, "connectFromField": "a", "connectToField": "b",
            "as": "out"
        });
        let context = context();
        let mut search = graph.search(doc! {}, &context).expect("starts");
        assert!(search.next_filter().is_some());
        let error = search.visit(vec![doc! {"b": 1}]).expect_err("no _id");
        assert_eq!(error.code.code(), 40271);
    }

    #[test]
    fn bad_specifications_get_mongods_errors() {
        let base = doc! {
            "from": "f", "startWith": "$x", "connectFromField": "a", "connectToField": "b",
            "as": "out"
        };
        let with = |name: &str, value: Bson| {
            let mut spec = base.clone();
            spec.insert(name, value);
            vec![doc! {"$graphLookup": spec}]
        };
        let without = |name: &str| {
            let mut spec = base.clone();
            spec.remove(name);
            vec![doc! {"$graphLookup": spec}]
        };
        let cases: Vec<(Vec<Document>, i32)> = vec![
            (vec![doc! {"$graphLookup": 1}], 9),
            (with("maxDepth", Bson::String("1".into())), 40100),
            (with("maxDepth", Bson::Int32(-1)), 40101),
            (with("maxDepth", Bson::Double(2.5)), 40102),
            (with("restrictSearchWithMatch", Bson::Int32(1)), 40185),
            (
                with("restrictSearchWithMatch", bson::bson!({"$bogus": 1})),
                2,
            ),
            (with("as", Bson::Int32(1)), 40103),
            (with("from", Bson::Int32(1)), 40103),
            (with("depthField", Bson::Boolean(true)), 40103),
            (with("bogus", Bson::Int32(1)), 40104),
            (with("as", Bson::String("$x".into())), 16410),
            (with("connectToField", Bson::String("a..b".into())), 15998),
            (with("as", Bson::String(String::new())), 40352),
            (without("from"), 40105),
            (without("as"), 40105),
            (without("startWith"), 40105),
            (without("connectFromField"), 40105),
            (without("connectToField"), 40105),
        ];
        for (stages, code) in cases {
            let error = parse_error(stages.clone());
            assert_eq!(error.code.code(), code, "{stages:?}: {}", error.errmsg);
        }
        assert!(GraphLookup::parse(&Bson::Document(base.clone())).is_ok());
        let ok = with("maxDepth", Bson::Double(2.0));
        assert!(super::super::Pipeline::parse(&ok).is_ok());
    }
}
