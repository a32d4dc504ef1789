//! `$unwind`: one document per element of an array field (with `includeArrayIndex` and
//! `preserveNullAndEmptyArrays`), handed on one copy at a time so a long array in a large
//! document never exists as all its copies at once.

use bson::{Bson, Document};

use super::fail;
use super::fields::validate_output_path;
use tideway_base::display::type_name;
use tideway_base::error::{CommandResult, ErrorCode};

/// A parsed `$unwind`.
#[derive(Clone, Debug)]
pub(super) struct Unwind {
    path: Vec<String>,
    include_array_index: Option<Vec<String>>,
    preserve_null_and_empty_arrays: bool,
}

impl Unwind {
    pub(super) fn parse(spec: &Bson) -> CommandResult<Unwind> {
        let (path, index, preserve) = match spec {
            Bson::String(path) => (path.as_str(), None, false),
            Bson::Document(options) => {
                let mut path = None;
                let mut index = None;
                let mut preserve = false;
                for (name, value) in options {
                    match (name.as_str(), value) {
                        ("path", Bson::String(text)) => path = Some(text.as_str()),
                        ("path", other) => {
                            return Err(fail(
                                ErrorCode::Location28808,
                                format!(
                                    "expected a string as the path for $unwind stage, got {}",
                                    type_name(other)
                                ),
                            ))
                        }
                        ("includeArrayIndex", Bson::String(text)) if !text.is_empty() => {
                            if text.starts_with('$') {
                                return Err(fail(
                                    ErrorCode::Location28822,
                                    format!(
                                        "includeArrayIndex option to $unwind stage should not be prefixed with a '$': {text}"
                                    ),
                                ));
                            }
                            index = Some(validate_output_path(text)?);
                        }
                        ("includeArrayIndex", other) => {
                            return Err(fail(
                                ErrorCode::Location28810,
                                format!(
                                    "expected a non-empty string for the includeArrayIndex  option to $unwind stage, got {}",
                                    type_name(other)
                                ),
                            ))
                        }
                        ("preserveNullAndEmptyArrays", Bson::Boolean(flag)) => preserve = *flag,
                        ("preserveNullAndEmptyArrays", other) => {
                            return Err(fail(
                                ErrorCode::Location28809,
                                format!(
                                    "expected a boolean for the preserveNullAndEmptyArrays option to $unwind stage, got {}",
                                    type_name(other)
                                ),
                            ))
                        }
                        (other, _) => {
                            return Err(fail(
                                ErrorCode::Location28811,
                                format!("unrecognized option to $unwind stage: {other}"),
                            ))
                        }
                    }
                }
                let path = path.ok_or_else(|| fail(ErrorCode::Location28812, "No path specified to $unwind stage"))?;
                (path, index, preserve)
            }
            other => {
                return Err(fail(
                    ErrorCode::Location15981,
                    format!(
                        "expected either a string or an object as specification for $unwind stage, got {}",
                        type_name(other)
                    ),
                ))
            }
        };
        let Some(field_path) = path.strip_prefix('$') else {
            return Err(fail(
                ErrorCode::Location28818,
                format!("path option to $unwind stage should be prefixed with a '$': {path}"),
            ));
        };
        Ok(Unwind {
            path: validate_output_path(field_path)?,
            include_array_index: index,
            preserve_null_and_empty_arrays: preserve,
        })
    }

    /// The value at the path, walking documents only (arrays on the way yield nothing).
    fn value<'a>(&self, document: &'a Document) -> Option<&'a Bson> {
        let (first, rest) = self.path.split_first()?;
        let mut current = document.get(first)?;
        for part in rest {
            let Bson::Document(inner) = current else {
                return None;
            };
            current = inner.get(part)?;
        }
        Some(current)
    }

    fn value_mut<'a>(&self, document: &'a mut Document) -> Option<&'a mut Bson> {
        let (first, rest) = self.path.split_first()?;
        let mut current = document.get_mut(first)?;
        for part in rest {
            let Bson::Document(inner) = current else {
                return None;
            };
            current = inner.get_mut(part)?;
        }
        Some(current)
    }

    pub(super) fn apply(
        &self,
        document: Document,
        output: &mut Vec<Document>,
    ) -> CommandResult<()> {
        let mut unwound = self.unwound(document);
        while let Some(copy) = unwound.next(self) {
            output.push(copy?);
        }
        Ok(())
    }

    /// The documents `document` unwinds to, made one at a time: all the copies of a large
    /// document with a long array would not fit in memory at once.
    pub(super) fn unwound(&self, mut document: Document) -> Unwound {
        // The array is taken out, so that each copy of the document does not copy it again.
        if let Some(Bson::Array(elements)) = self.value_mut(&mut document) {
            if !elements.is_empty() {
                let elements = std::mem::take(elements);
                return Unwound::Elements {
                    document,
                    elements: elements.into_iter().enumerate(),
                };
            }
        }
        let kept = match self.value(&document) {
            value @ (Some(Bson::Array(_)) | None | Some(Bson::Null) | Some(Bson::Undefined)) => {
                if !self.preserve_null_and_empty_arrays {
                    return Unwound::Done;
                }
                let empty_array = matches!(value, Some(Bson::Array(_)));
                let mut kept = document;
                if empty_array {
                    // An empty array is dropped from the preserved document, as in mongod.
                    crate::path::remove_path(&mut kept, &self.path);
                }
                kept
            }
            // A non-array value unwinds to itself.
            Some(_) => document,
        };
        let kept = match &self.include_array_index {
            Some(index_path) => {
                let mut kept = kept;
                crate::path::set_path(&mut kept, index_path, Bson::Null).map(|()| kept)
            }
            None => Ok(kept),
        };
        Unwound::One(Some(kept))
    }
}

/// What `$unwind` makes of one document ([`Unwind::unwound`]), handed out one copy at a time
/// by [`Unwound::next`] with the stage that made it. It owns everything it holds, so a run can
/// keep it between pulls.
pub(super) enum Unwound {
    Done,
    One(Option<CommandResult<Document>>),
    Elements {
        document: Document,
        elements: std::iter::Enumerate<std::vec::IntoIter<Bson>>,
    },
}

impl Unwound {
    /// The next copy, `unwind` being the stage that made this.
    pub(super) fn next(&mut self, unwind: &Unwind) -> Option<CommandResult<Document>> {
        match self {
            Unwound::Done => None,
            Unwound::One(kept) => kept.take(),
            Unwound::Elements { document, elements } => {
                let (index, element) = elements.next()?;
                let mut unwound = document.clone();
                if let Err(error) = crate::path::set_path(&mut unwound, &unwind.path, element) {
                    return Some(Err(error));
                }
                if let Some(index_path) = &unwind.include_array_index {
                    let index = Bson::Int64(i64::try_from(index).unwrap_or(i64::MAX));
                    if let Err(error) = crate::path::set_path(&mut unwound, index_path, index) {
                        return Some(Err(error));
                    }
                }
                Some(Ok(unwound))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::super::fixtures::*;

    #[test]
    fn unwind_hands_on_each_copy_in_order() {
        // One copy at a time (a long array in a large document would not fit otherwise), in
        // the order a whole batch would have had, through `$skip` and `$limit`.
        let stages = vec![
            doc! {"$unwind": "$a"},
            doc! {"$skip": 1},
            doc! {"$unwind": {"path": "$b", "includeArrayIndex": "i"}},
            doc! {"$limit": 3},
            doc! {"$project": {"_id": 0, "a": 1, "b": 1, "i": 1}},
        ];
        let input = vec![doc! {"a": [1, 2, 3], "b": ["x", "y"]}];
        assert_documents(
            &run_ok(stages, input),
            &[
                doc! {"a": 2, "b": "x", "i": 0_i64},
                doc! {"a": 2, "b": "y", "i": 1_i64},
                doc! {"a": 3, "b": "x", "i": 0_i64},
            ],
        );
    }

    #[test]
    fn unwind_string_form_drops_empty_missing_and_null() {
        let output = run_ok(
            vec![doc! {"$unwind": "$tags"}, doc! {"$project": {"tags": 1}}],
            sales(),
        );
        assert_documents(
            &output,
            &[
                doc! {"_id": 1, "tags": "x"},
                doc! {"_id": 1, "tags": "y"},
                doc! {"_id": 4, "tags": "z"},
            ],
        );
    }

    #[test]
    fn unwind_options_preserve_and_index() {
        let input = vec![
            doc! {"_id": 1, "a": {"b": [7, 8]}},
            doc! {"_id": 2, "a": {"b": []}},
            doc! {"_id": 3, "a": {"b": null}},
            doc! {"_id": 4},
            doc! {"_id": 5, "a": {"b": 9}},
        ];
        let output = run_ok(
            vec![
                doc! {"$unwind": {"path": "$a.b", "includeArrayIndex": "i", "preserveNullAndEmptyArrays": true}},
            ],
            input,
        );
        assert_documents(
            &output,
            &[
                doc! {"_id": 1, "a": {"b": 7}, "i": 0_i64},
                doc! {"_id": 1, "a": {"b": 8}, "i": 1_i64},
                doc! {"_id": 2, "a": {}, "i": null},
                doc! {"_id": 3, "a": {"b": null}, "i": null},
                doc! {"_id": 4, "i": null},
                doc! {"_id": 5, "a": {"b": 9}, "i": null},
            ],
        );
        assert_eq!(parse_error(vec![doc! {"$unwind": "a"}]).code.code(), 28818);
        assert_eq!(parse_error(vec![doc! {"$unwind": {}}]).code.code(), 28812);
        assert_eq!(
            parse_error(vec![doc! {"$unwind": {"path": "$a", "x": 1}}])
                .code
                .code(),
            28811
        );
        assert_eq!(parse_error(vec![doc! {"$unwind": 1}]).code.code(), 15981);
    }
}
