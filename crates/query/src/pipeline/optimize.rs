//! Reordering a pipeline's stages as mongod's optimizer does before it runs: a `$match` moves
//! ahead of the stages it does not depend on, so more of the filtering reaches the planner
//! (a `$match` that becomes leading reads through an index) and fewer documents reach the
//! stages it passed.
//!
//! Invariants: a `$match` moves ahead of an adjacent `$sort` always (sorting does not change
//! documents); ahead of `$addFields`/`$set`, `$unset`, `$unwind` and `$project` only when every
//! path it reads is known (plain field conditions under `$and`/`$or`/`$nor`, no `$expr`,
//! `$where`, `$text` or other whole-document operators) and the stage leaves each of them as it
//! was: none is, extends or is extended by a path the stage writes, and past a `$project` each
//! lies under a top-level field it keeps whole (or no field it excludes). It never moves past `$skip`, `$limit` or any other stage, and the
//! relative order of the `$match` stages is kept, so the result is the same documents in the
//! same order.

use std::borrow::Cow;

use bson::{Bson, Document};

/// The paths a filter reads, or `None` when it has conditions on the whole document.
fn filter_paths(filter: &Document, paths: &mut Vec<String>) -> Option<()> {
    for (key, value) in filter {
        match key.as_str() {
            "$and" | "$or" | "$nor" => {
                let Bson::Array(branches) = value else {
                    return None;
                };
                for branch in branches {
                    let Bson::Document(branch) = branch else {
                        return None;
                    };
                    filter_paths(branch, paths)?;
                }
            }
            "$comment" => {}
            operator if operator.starts_with('$') => return None,
            path => paths.push(path.to_string()),
        }
    }
    Some(())
}

/// Whether two dotted paths name the same field or one lies inside the other.
fn overlap(a: &str, b: &str) -> bool {
    let (a, b) = (a.split('.'), b.split('.'));
    a.zip(b).all(|(x, y)| x == y)
}

/// The paths a stage writes, when it only writes named paths.
fn written_paths(name: &str, spec: &Bson) -> Option<Vec<String>> {
    match (name, spec) {
        ("$addFields" | "$set", Bson::Document(fields)) => Some(fields.keys().cloned().collect()),
        ("$unset", Bson::String(field)) => Some(vec![field.clone()]),
        ("$unset", Bson::Array(fields)) => fields
            .iter()
            .map(|field| field.as_str().map(str::to_string))
            .collect(),
        ("$unwind", Bson::String(path)) => Some(vec![path.strip_prefix('$')?.to_string()]),
        ("$unwind", Bson::Document(options)) => {
            let mut written = vec![options.get_str("path").ok()?.strip_prefix('$')?.to_string()];
            if let Some(index) = options.get("includeArrayIndex") {
                written.push(index.as_str()?.to_string());
            }
            Some(written)
        }
        _ => None,
    }
}

/// Whether a `$project` leaves every path in `read` as it was: for an exclusion projection,
/// paths no excluded field overlaps; for an inclusion projection, paths under a top-level field
/// it keeps whole (`_id` unless excluded or computed), never under a computed one.
fn projection_preserves(spec: &Bson, read: &[String]) -> bool {
    let Bson::Document(spec) = spec else {
        return false;
    };
    let flag = |value: &Bson| match value {
        Bson::Boolean(flag) => Some(*flag),
        value => tideway_base::bsonutil::as_f64(value).map(|number| number != 0.0),
    };
    let (mut kept, mut excluded, mut computed) = (Vec::new(), Vec::new(), Vec::new());
    for (key, value) in spec {
        match flag(value) {
            Some(true) => kept.push(key.as_str()),
            Some(false) => excluded.push(key.as_str()),
            None => computed.push(key.as_str()),
        }
    }
    if kept.is_empty() && computed.is_empty() {
        return read
            .iter()
            .all(|path| excluded.iter().all(|field| !overlap(path, field)));
    }
    let id_kept = !excluded.contains(&"_id") && !computed.contains(&"_id");
    read.iter().all(|path| {
        let top = path.split('.').next().unwrap_or_default();
        (kept.contains(&top) || (top == "_id" && id_kept))
            && computed.iter().all(|field| !overlap(path, field))
    })
}

/// Whether the `$match` of `filter` may run before the stage `{name: spec}` instead of after.
fn may_precede(filter: &Bson, name: &str, spec: &Bson) -> bool {
    if name == "$sort" {
        return true;
    }
    let Bson::Document(filter) = filter else {
        return false;
    };
    let mut read = Vec::new();
    if filter_paths(filter, &mut read).is_none() {
        return false;
    }
    if name == "$project" {
        return projection_preserves(spec, &read);
    }
    let Some(written) = written_paths(name, spec) else {
        return false;
    };
    read.iter()
        .all(|path| written.iter().all(|field| !overlap(path, field)))
}

fn single(stage: &Document) -> Option<(&String, &Bson)> {
    if stage.len() == 1 {
        stage.iter().next()
    } else {
        None
    }
}

/// `stages` with each `$match` moved as far ahead as it may go; borrowed when none moves (the
/// common case, and a `$lookup` sub-pipeline with `let` is parsed once per input document).
pub fn reorder(stages: &[Document]) -> Cow<'_, [Document]> {
    let mut order: Vec<usize> = (0..stages.len()).collect();
    for position in 1..order.len() {
        let mut at = position;
        while at > 0 {
            let (Some((name, filter)), Some((before, spec))) =
                (single(&stages[order[at]]), single(&stages[order[at - 1]]))
            else {
                break;
            };
            if name != "$match" || !may_precede(filter, before, spec) {
                break;
            }
            order.swap(at - 1, at);
            at -= 1;
        }
    }
    if order.iter().enumerate().all(|(at, &index)| at == index) {
        return Cow::Borrowed(stages);
    }
    Cow::Owned(
        order
            .into_iter()
            .map(|index| stages[index].clone())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::super::fixtures::run_ok;
    use super::*;

    fn names(stages: &[Document]) -> Vec<String> {
        stages
            .iter()
            .map(|stage| stage.keys().next().cloned().unwrap_or_default())
            .collect()
    }

    #[test]
    fn matches_move_ahead_of_what_they_do_not_read() {
        let stages = [
            doc! {"$sort": {"a": 1}},
            doc! {"$set": {"b": 1}},
            doc! {"$unwind": "$c"},
            doc! {"$match": {"a": {"$gt": 1}, "$or": [{"d.e": 1}, {"f": 2}]}},
        ];
        let moved = reorder(&stages);
        assert_eq!(names(&moved), ["$match", "$sort", "$set", "$unwind"]);
        // Reading a written path, a whole-document operator, or crossing $limit stops it.
        for (before, filter) in [
            (doc! {"$set": {"a.b": 1}}, doc! {"a": 1}),
            (doc! {"$set": {"a": 1}}, doc! {"a.b": 1}),
            (
                doc! {"$unwind": {"path": "$c", "includeArrayIndex": "i"}},
                doc! {"i": 0},
            ),
            (doc! {"$unset": ["x", "a"]}, doc! {"a": {"$exists": false}}),
            (doc! {"$set": {"x": 1}}, doc! {"$expr": {"$eq": ["$a", 1]}}),
            (doc! {"$limit": 1}, doc! {"a": 1}),
            (doc! {"$project": {"b": 1}}, doc! {"a": 1}),
            (doc! {"$project": {"a.b": 1}}, doc! {"a.b": 1}),
            (doc! {"$project": {"a": "$b"}}, doc! {"a": 1}),
            (doc! {"$project": {"_id": 0, "a": 1}}, doc! {"_id": 1}),
            (doc! {"$project": {"a": {"b": 0}}}, doc! {"c": 1}),
            (doc! {"$project": {"a": 0}}, doc! {"a.b": 1}),
        ] {
            let stages = [before.clone(), doc! {"$match": filter.clone()}];
            assert_eq!(reorder(&stages), stages.to_vec(), "{before} then {filter}");
        }
    }

    #[test]
    fn matches_move_ahead_of_projections_that_keep_what_they_read() {
        for (project, filter) in [
            (
                doc! {"a": 1, "b": 1},
                doc! {"a.x": 1, "$or": [{"b": 2}, {"_id": 3}]},
            ),
            (doc! {"a": 1, "c": {"$add": ["$a", 1]}}, doc! {"a": 1}),
            (doc! {"_id": 0, "c": 0}, doc! {"a": 1, "b.c": 2}),
        ] {
            let stages = [doc! {"$project": project.clone()}, doc! {"$match": filter}];
            assert_eq!(
                names(&reorder(&stages)),
                ["$match", "$project"],
                "{project}"
            );
        }
    }

    #[test]
    fn reordered_pipelines_return_the_same_documents() {
        let input = vec![
            doc! {"_id": 1, "a": 3, "c": [1, 2]},
            doc! {"_id": 2, "a": 1, "c": [3]},
            doc! {"_id": 3, "a": 2, "c": []},
        ];
        let output = run_ok(
            vec![
                doc! {"$sort": {"a": -1}},
                doc! {"$unwind": "$c"},
                doc! {"$set": {"b": {"$multiply": ["$a", 10]}}},
                doc! {"$match": {"a": {"$gte": 1}}},
            ],
            input,
        );
        assert_eq!(
            output,
            vec![
                doc! {"_id": 1, "a": 3, "c": 1, "b": 30},
                doc! {"_id": 1, "a": 3, "c": 2, "b": 30},
                doc! {"_id": 2, "a": 1, "c": 3, "b": 10},
            ]
        );
    }
}
