//! `$addFields`/`$set`: the tree of computed fields at (possibly nested) output paths, and
//! merging it into each document as mongod does (through arrays, keeping field order).

use bson::{Bson, Document};

use super::fail;
use crate::expr::{Expr, PipelineContext};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::{check_field_path_length, MAX_FIELD_PATH_COMPONENTS};

/// `$addFields`/`$set`: computed fields at (possibly nested) paths, merged into each document.
#[derive(Clone, Debug, Default)]
pub(super) struct FieldTree {
    children: Vec<(String, FieldNode)>,
}

#[derive(Clone, Debug)]
enum FieldNode {
    Value(Expr),
    Sub(FieldTree),
}

pub(super) fn validate_output_path(path: &str) -> CommandResult<Vec<String>> {
    check_field_path_length(path, MAX_FIELD_PATH_COMPONENTS, ErrorCode::Overflow)?;
    let parts: Vec<String> = path.split('.').map(str::to_string).collect();
    for part in &parts {
        if part.is_empty() {
            return Err(fail(
                ErrorCode::Location15998,
                "FieldPath field names may not be empty strings.",
            ));
        }
        if part.starts_with('$') {
            return Err(fail(
                ErrorCode::Location16410,
                format!(
                    "FieldPath field names may not start with '$'. Consider using $getField or $setField. in path {path}"
                ),
            ));
        }
    }
    Ok(parts)
}

impl FieldTree {
    pub(super) fn parse(spec: &Document) -> CommandResult<FieldTree> {
        let mut tree = FieldTree::default();
        tree.add_all(spec, &[])?;
        Ok(tree)
    }

    fn add_all(&mut self, spec: &Document, prefix: &[String]) -> CommandResult<()> {
        for (name, value) in spec {
            let relative = validate_output_path(name)?;
            let full: Vec<String> = prefix.iter().chain(relative.iter()).cloned().collect();
            match value {
                // A plain non-empty object is a nested specification (`{a: {b: 1}}` sets a.b).
                Bson::Document(nested)
                    if !nested.is_empty()
                        && !nested.keys().next().is_some_and(|key| key.starts_with('$')) =>
                {
                    self.subtree(&relative, &full)?.add_all(nested, &full)?;
                }
                other => self.insert(&relative, FieldNode::Value(Expr::parse(other)?), &full)?,
            }
        }
        Ok(())
    }

    fn collision(full: &[String]) -> CommandError {
        CommandError::bad_value(format!("Path collision at {}", full.join(".")))
    }

    /// The subtree at `parts`, created if missing; a value already there is a collision.
    fn subtree(&mut self, parts: &[String], full: &[String]) -> CommandResult<&mut FieldTree> {
        let Some((first, rest)) = parts.split_first() else {
            return Ok(self);
        };
        let index = match self.children.iter().position(|(name, _)| name == first) {
            Some(index) => index,
            None => {
                self.children
                    .push((first.clone(), FieldNode::Sub(FieldTree::default())));
                self.children.len() - 1
            }
        };
        match &mut self.children[index].1 {
            FieldNode::Sub(tree) => tree.subtree(rest, full),
            FieldNode::Value(_) => Err(FieldTree::collision(full)),
        }
    }

    fn insert(&mut self, parts: &[String], node: FieldNode, full: &[String]) -> CommandResult<()> {
        let Some((last, parents)) = parts.split_last() else {
            return Err(FieldTree::collision(full));
        };
        let parent = self.subtree(parents, full)?;
        if parent.children.iter().any(|(name, _)| name == last) {
            return Err(FieldTree::collision(full));
        }
        parent.children.push((last.clone(), node));
        Ok(())
    }

    /// Sets every field of this tree in `target`, evaluating against `root` (mongod's
    /// `applyExpressions`): existing fields keep their position, new ones are appended, and
    /// a missing result removes the field.
    pub(super) fn apply(
        &self,
        root: &Document,
        target: &mut Document,
        context: &PipelineContext,
    ) -> CommandResult<()> {
        for (name, node) in &self.children {
            let value = match node {
                FieldNode::Value(expression) => expression.evaluate_in(root, context)?,
                FieldNode::Sub(tree) => {
                    Some(tree.apply_to_value(root, target.get(name), context)?)
                }
            };
            match value {
                Some(value) => {
                    target.insert(name.clone(), value);
                }
                None => {
                    target.remove(name);
                }
            }
        }
        Ok(())
    }

    /// A nested tree over an existing value: documents are extended, arrays map over their
    /// elements, anything else (or nothing) is replaced by a document of the computed fields.
    fn apply_to_value(
        &self,
        root: &Document,
        existing: Option<&Bson>,
        context: &PipelineContext,
    ) -> CommandResult<Bson> {
        match existing {
            Some(Bson::Document(document)) => {
                let mut document = document.clone();
                self.apply(root, &mut document, context)?;
                Ok(Bson::Document(document))
            }
            Some(Bson::Array(elements)) => Ok(Bson::Array(
                elements
                    .iter()
                    .map(|element| self.apply_to_value(root, Some(element), context))
                    .collect::<CommandResult<_>>()?,
            )),
            _ => {
                let mut document = Document::new();
                self.apply(root, &mut document, context)?;
                Ok(Bson::Document(document))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::super::fixtures::*;

    #[test]
    fn add_fields_sets_nested_paths_through_arrays_and_keeps_order() {
        let input = vec![doc! {"_id": 1, "a": {"x": 1}, "b": [{"y": 1}, 2], "c": 5}];
        let output = run_ok(
            vec![doc! {"$addFields": {
                "c": {"$add": ["$c", 1]},
                "a.z": "$c",
                "b.k": true,
                "new": {"n": 1},
            }}],
            input.clone(),
        );
        assert_documents(
            &output,
            &[doc! {
                "_id": 1,
                "a": {"x": 1, "z": 5},
                "b": [{"y": 1, "k": true}, {"k": true}],
                "c": 6,
                "new": {"n": 1},
            }],
        );
        let removed = run_ok(
            vec![doc! {"$set": {"c": "$$REMOVE", "a": "$missing"}}],
            input,
        );
        assert_documents(&removed, &[doc! {"_id": 1, "b": [{"y": 1}, 2]}]);
        let collision = parse_error(vec![doc! {"$set": {"a": 1, "a.b": 2}}]);
        assert!(collision.errmsg.contains("Path collision at a.b"));
        assert_eq!(parse_error(vec![doc! {"$set": 1}]).code.code(), 40272);
    }
}
