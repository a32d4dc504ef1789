//! `$redact`: the expression decides, level by level, whether a document keeps a subdocument
//! whole (`$$KEEP`), drops it (`$$PRUNE`) or keeps its scalar fields and decides again for each
//! embedded document (`$$DESCEND`).
//!
//! Invariants (mongod's `DocumentSourceRedact`): the expression runs with `$$CURRENT` (and
//! field paths) at the level being decided and `$$ROOT` at the input document; `$$DESCEND`,
//! `$$PRUNE` and `$$KEEP` are the strings "descend", "prune" and "keep", and any other result is
//! 17053. Descending keeps field order; arrays keep their scalars and redact their documents
//! (and nested arrays) in place, dropping pruned ones. A top-level prune drops the document.
//! Recursion follows the document's nesting, which stored and built documents bound.

use bson::{Bson, Document};

use crate::expr::command_variables::{with_command_variables, CommandVariables};
use crate::expr::{Expr, PipelineContext};
use tideway_base::display::value_string;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// A parsed `$redact`.
#[derive(Clone, Debug)]
pub(crate) struct Redact {
    expression: Expr,
}

enum Decision {
    Keep,
    Prune,
    Descend,
}

impl Redact {
    pub(crate) fn parse(spec: &Bson) -> CommandResult<Redact> {
        let outer = CommandVariables::in_scope()
            .unwrap_or_else(|| CommandVariables::at(bson::DateTime::now()));
        let scope = outer.with_values(
            [("DESCEND", "descend"), ("PRUNE", "prune"), ("KEEP", "keep")]
                .into_iter()
                .map(|(name, value)| (name.to_string(), Some(Bson::String(value.to_string()))))
                .collect(),
        );
        let expression = with_command_variables(&scope, || Expr::parse(spec))?;
        Ok(Redact { expression })
    }

    /// `document` redacted, or `None` when the expression prunes it whole.
    pub fn apply(
        &self,
        document: Document,
        context: &PipelineContext,
    ) -> CommandResult<Option<Document>> {
        match self.decide(&document, &document, context)? {
            Decision::Keep => Ok(Some(document)),
            Decision::Prune => Ok(None),
            Decision::Descend => self.descend(&document, &document, context).map(Some),
        }
    }

    fn decide(
        &self,
        root: &Document,
        current: &Document,
        context: &PipelineContext,
    ) -> CommandResult<Decision> {
        match self.expression.evaluate_at(root, current, context)? {
            Some(Bson::String(text)) if text == "keep" => Ok(Decision::Keep),
            Some(Bson::String(text)) if text == "prune" => Ok(Decision::Prune),
            Some(Bson::String(text)) if text == "descend" => Ok(Decision::Descend),
            other => Err(CommandError::new(
                ErrorCode::Location17053,
                format!(
                    "$redact's expression should not return anything aside from the variables \
                     $$KEEP, $$DESCEND, and $$PRUNE, but returned {}",
                    other
                        .as_ref()
                        .map_or_else(|| "MISSING".to_string(), value_string)
                ),
            )),
        }
    }

    /// The fields of `current` with each embedded document decided again.
    fn descend(
        &self,
        root: &Document,
        current: &Document,
        context: &PipelineContext,
    ) -> CommandResult<Document> {
        let mut output = Document::new();
        for (name, value) in current {
            if let Some(value) = self.redact_value(root, value, context)? {
                output.insert(name.clone(), value);
            }
        }
        Ok(output)
    }

    fn redact_value(
        &self,
        root: &Document,
        value: &Bson,
        context: &PipelineContext,
    ) -> CommandResult<Option<Bson>> {
        match value {
            Bson::Document(inner) => Ok(match self.decide(root, inner, context)? {
                Decision::Keep => Some(value.clone()),
                Decision::Prune => None,
                Decision::Descend => Some(Bson::Document(self.descend(root, inner, context)?)),
            }),
            Bson::Array(elements) => {
                let mut kept = Vec::with_capacity(elements.len());
                for element in elements {
                    if let Some(element) = self.redact_value(root, element, context)? {
                        kept.push(element);
                    }
                }
                Ok(Some(Bson::Array(kept)))
            }
            other => Ok(Some(other.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::super::fixtures::{parse_error, run, run_ok};

    #[test]
    fn the_manuals_forecasts_example_descends_by_tags() {
        // The manual's $redact example: keep levels whose tags intersect ["STLW", "G"].
        let forecast = doc! {
            "_id": 1, "title": "123 Department Report", "tags": ["G", "STLW"], "year": 2014,
            "subsections": [
                {"subtitle": "Section 1: Overview", "tags": ["SI", "G"],
                 "content": "Section 1: This is the content of section 1."},
                {"subtitle": "Section 2: Analysis", "tags": ["STLW"],
                 "content": "Section 2: This is the content of section 2."},
                {"subtitle": "Section 3: Budgeting", "tags": ["TK"],
                 "content": {"text": "Section 3: This is the content of section 3.",
                             "tags": ["HCS"]}}
            ]
        };
        let stages = vec![
            doc! {"$match": {"year": 2014}},
            doc! {"$redact": {"$cond": {
                "if": {"$gt": [{"$size": {"$setIntersection": ["$tags", ["STLW", "G"]]}}, 0]},
                "then": "$$DESCEND", "else": "$$PRUNE"
            }}},
        ];
        let expected = doc! {
            "_id": 1, "title": "123 Department Report", "tags": ["G", "STLW"], "year": 2014,
            "subsections": [
                {"subtitle": "Section 1: Overview", "tags": ["SI", "G"],
                 "content": "Section 1: This is the content of section 1."},
                {"subtitle": "Section 2: Analysis", "tags": ["STLW"],
                 "content": "Section 2: This is the content of section 2."}
            ]
        };
        assert_eq!(run_ok(stages, vec![forecast]), vec![expected]);
    }

    #[test]
    fn the_manuals_accounts_example_prunes_by_level() {
        let account = doc! {
            "_id": 1, "level": 1,
            "acct_id": "xyz123",
            "cc": {"level": 5, "type": "yy", "num": 0, "exp_date": "2015-11-01",
                   "billing_addr": {"level": 5, "addr1": "123 ABC Street", "city": "Some City"},
                   "shipping_addr": [
                       {"level": 3, "addr1": "987 XYZ Ave", "city": "Some City"},
                       {"level": 3, "addr1": "PO Box 0123", "city": "Some City"}
                   ]},
            "status": "A"
        };
        let stages = vec![
            doc! {"$match": {"status": "A"}},
            doc! {"$redact": {"$cond": {
                "if": {"$eq": ["$level", 5]}, "then": "$$PRUNE", "else": "$$DESCEND"
            }}},
        ];
        let expected = doc! {"_id": 1, "level": 1, "acct_id": "xyz123", "status": "A"};
        assert_eq!(run_ok(stages, vec![account]), vec![expected]);
    }

    #[test]
    fn root_stays_the_input_while_current_descends_and_keep_stops() {
        let input = doc! {"_id": 1, "flag": true, "a": {"flag": false, "b": {"x": 1}}, "n": [1, {"flag": false}]};
        // $$ROOT.flag is true at every level: everything descends.
        let out = run_ok(
            vec![doc! {"$redact": {"$cond": ["$$ROOT.flag", "$$DESCEND", "$$PRUNE"]}}],
            vec![input.clone()],
        );
        assert_eq!(out, vec![input.clone()]);
        // $$CURRENT.flag is false below the top: embedded documents are pruned, scalars stay.
        let out = run_ok(
            vec![doc! {"$redact": {"$cond": ["$$CURRENT.flag", "$$DESCEND", "$$PRUNE"]}}],
            vec![input.clone()],
        );
        assert_eq!(out, vec![doc! {"_id": 1, "flag": true, "n": [1]}]);
        // $$KEEP at the top keeps the document as it is.
        let out = run_ok(vec![doc! {"$redact": "$$KEEP"}], vec![input.clone()]);
        assert_eq!(out, vec![input]);
        let out = run_ok(vec![doc! {"$redact": "$$PRUNE"}], vec![doc! {"a": 1}]);
        assert!(out.is_empty());
    }

    #[test]
    fn other_results_are_17053() {
        let error = run(vec![doc! {"$redact": "$a"}], vec![doc! {"a": 1}]).expect_err("17053");
        assert_eq!(error.code.code(), 17053);
        assert!(error.errmsg.ends_with("but returned 1"), "{}", error.errmsg);
        let error =
            run(vec![doc! {"$redact": "$missing"}], vec![doc! {"a": 1}]).expect_err("17053");
        assert_eq!(error.code.code(), 17053);
        assert_eq!(
            parse_error(vec![doc! {"$redact": {"$bogus": 1}}])
                .code
                .code(),
            168
        );
    }
}
